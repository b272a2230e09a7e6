package regions

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestExplain(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		present []string
		rules   Rules
		want    []Decision
	}{
		{name: "one-region-no-rule", present: []string{"r1"}},
		{name: "two-regions", present: []string{"r2", "r1"}, want: []Decision{
			{Client: "r1", Order: []string{"r1", "r2"}},
			{Client: "r2", Order: []string{"r2", "r1"}},
			{Client: "", Order: []string{"r1,r2"}},
		}},
		{name: "redirect-applied", present: []string{"r1", "r2"}, rules: Rules{Redirects: []Redirect{{From: "r1", To: "r2"}}}, want: []Decision{
			{Client: "r1", Order: []string{"r2", "r1"}, Outcome: Outcome{RedirectedTo: "r2"}},
			{Client: "r2", Order: []string{"r2", "r1"}},
			{Client: "", Order: []string{"r1,r2"}},
		}},
		{name: "redirect-expired", present: []string{"r1", "r2"}, rules: Rules{Redirects: []Redirect{{From: "r1", To: "r2", Until: t0}}}, want: []Decision{
			{Client: "r1", Order: []string{"r1", "r2"}},
			{Client: "r2", Order: []string{"r2", "r1"}},
			{Client: "", Order: []string{"r1,r2"}},
		}},
		{name: "redirect-to-empty-region", present: []string{"r1"}, rules: Rules{Redirects: []Redirect{{From: "r1", To: "r3"}}}, want: []Decision{
			{Client: "r1", Order: []string{"r1"}, Outcome: Outcome{RedirectNoEndpoints: "r3"}},
			{Client: "", Order: []string{"r1"}},
		}},
		{name: "redirect-from-region-without-endpoints", present: []string{"r2", "r3"}, rules: Rules{Redirects: []Redirect{{From: "r1", To: "r3"}}}, want: []Decision{
			{Client: "r1", Order: []string{"r3", "r2"}, Outcome: Outcome{RedirectedTo: "r3"}},
			{Client: "r2", Order: []string{"r2", "r3"}},
			{Client: "r3", Order: []string{"r3", "r2"}},
			{Client: "", Order: []string{"r2,r3"}},
		}},
		{name: "exclude-fail-open", present: []string{"r1"}, rules: Rules{Excludes: []Exclude{{Region: "r1"}}}, want: []Decision{
			{Client: "r1", Order: []string{"r1"}, Outcome: Outcome{FailOpen: true}},
			{Client: "", Order: []string{"r1"}, Outcome: Outcome{FailOpen: true}},
		}},
		{name: "exclude", present: []string{"r1", "r2"}, rules: Rules{Excludes: []Exclude{{Region: "r1"}}}, want: []Decision{
			{Client: "r1", Order: []string{"r2"}, Outcome: Outcome{Excluded: []string{"r1"}}},
			{Client: "r2", Order: []string{"r2"}, Outcome: Outcome{Excluded: []string{"r1"}}},
			{Client: "", Order: []string{"r2"}, Outcome: Outcome{Excluded: []string{"r1"}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Explain(tt.present, nil, tt.rules, t0)
			if diff := cmp.Diff(tt.want, v.Decisions); diff != "" {
				t.Errorf("Decisions (-want +got):\n%s", diff)
			}
			if len(v.Active.Redirects) > 0 && !v.Active.Redirects[0].Until.IsZero() {
				t.Errorf("Active holds the expired redirect %v", v.Active.Redirects[0])
			}
		})
	}
}

package exchange

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/load"
)

func TestSummarize(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Second)
	inRegion := func(l load.Load, region string) load.Load {
		l.Locality.Region = region
		return l
	}
	tests := []struct {
		name    string
		loads   []load.Load
		clients map[string]map[string]int
		want    []load.ServiceSummary
	}{
		{name: "empty", want: []load.ServiceSummary{}},
		{
			name: "sums_regions_per_zone_pair",
			loads: []load.Load{
				inRegion(mkLoad("svc", "zone-a", "zone-b", 10, 1, t1), "r1"),
				inRegion(mkLoad("svc", "zone-a", "zone-b", 5, 2, t2), "r2"),
				mkLoad("svc", "zone-a", "zone-a", 7, 1, t1),
			},
			want: []load.ServiceSummary{{Service: "svc", Flows: []load.Flow{
				{ClientZone: "zone-a", Zone: "zone-a", Issued: 7, Succeeded: 7, Reporters: 1, Updated: t1},
				{ClientZone: "zone-a", Zone: "zone-b", Issued: 15, Succeeded: 15, Reporters: 3, Updated: t2},
			}}},
		},
		{
			name:  "skips_rows_without_fresh_reporters",
			loads: []load.Load{mkLoad("old", "zone-a", "zone-a", 0, 0, t1), mkLoad("new", "", "zone-a", 1, 1, t1)},
			want: []load.ServiceSummary{{Service: "new", Flows: []load.Flow{
				{Zone: "zone-a", Issued: 1, Succeeded: 1, Reporters: 1, Updated: t1},
			}}},
		},
		{
			name:    "clients_only_and_zero_counts",
			clients: map[string]map[string]int{"b": {"zone-b": 2, "zone-a": 1}, "a": {"zone-a": 0}},
			want:    []load.ServiceSummary{{Service: "b", Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}, {Zone: "zone-b", Count: 2}}}},
		},
		{
			name:    "flows_and_clients_sorted_by_service",
			loads:   []load.Load{mkLoad("z", "zone-a", "zone-a", 1, 1, t1)},
			clients: map[string]map[string]int{"z": {"zone-a": 1}, "a": {"": 3}},
			want: []load.ServiceSummary{
				{Service: "a", Clients: []load.ClientCount{{Zone: "", Count: 3}}},
				{Service: "z", Flows: []load.Flow{{ClientZone: "zone-a", Zone: "zone-a", Issued: 1, Succeeded: 1, Reporters: 1, Updated: t1}}, Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.loads, tc.clients)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
			if err := Validate(load.Summary{Replica: "r", At: t2, Interval: time.Second, Services: got}); err != nil {
				t.Errorf("Summarize output does not validate: %v", err)
			}
		})
	}
}

// TestSummarizeWithEndpointsOnly: a service with utilization reports but
// no LRS load or clients is still summarised, its reports sorted by ID.
func TestSummarizeWithEndpointsOnly(t *testing.T) {
	a := report("pay-a", 0.2, 1, 10, t0, time.Second)
	b := report("pay-b", 0.5, 0, 0, t0, time.Second)
	got := SummarizeWith([]load.Load{mkLoad("search", "zone-a", "zone-a", 1, 1, t0)}, nil,
		map[string][]load.EndpointUtilization{"payments": {b, a}, "empty": nil})
	want := []load.ServiceSummary{
		{Service: "payments", Endpoints: []load.EndpointUtilization{a, b}},
		{Service: "search", Flows: []load.Flow{{ClientZone: "zone-a", Zone: "zone-a", Issued: 1, Succeeded: 1, Reporters: 1, Updated: t0}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SummarizeWith (-want +got):\n%s", diff)
	}
}

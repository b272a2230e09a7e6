package regions

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pref := Preference{"r1": {"r3", "r2"}}
	tests := []struct {
		name    string
		present []string
		client  string
		pref    Preference
		rules   Rules
		want    map[string]int
		out     Outcome
	}{
		{name: "no-client-region", present: []string{"r1", "r2"}, want: map[string]int{"r1": 0, "r2": 0}},
		{name: "own-region-first-then-by-name", present: []string{"r3", "r2", "r1"}, client: "r2", want: map[string]int{"r2": 0, "r1": 1, "r3": 2}},
		{name: "preference-order", present: []string{"r1", "r2", "r3", "r4"}, client: "r1", pref: pref, want: map[string]int{"r1": 0, "r3": 1, "r2": 2, "r4": 3}},
		{name: "own-region-without-endpoints-shifts-to-0", present: []string{"r2", "r3"}, client: "r1", pref: pref, want: map[string]int{"r3": 0, "r2": 1}},
		{name: "unknown-region-no-preference-all-0", present: []string{"r2", "r3"}, client: "r9", want: map[string]int{"r2": 0, "r3": 0}},
		{name: "redirect", present: []string{"r1", "r2", "r3"}, client: "r1", pref: pref,
			rules: Rules{Redirects: []Redirect{{From: "r1", To: "r2"}}},
			want:  map[string]int{"r2": 0, "r3": 1, "r1": 2}, out: Outcome{RedirectedTo: "r2"}},
		{name: "redirect-other-region-untouched", present: []string{"r1", "r2"}, client: "r2",
			rules: Rules{Redirects: []Redirect{{From: "r1", To: "r2"}}},
			want:  map[string]int{"r2": 0, "r1": 1}},
		{name: "redirect-expired", present: []string{"r1", "r2"}, client: "r1",
			rules: Rules{Redirects: []Redirect{{From: "r1", To: "r2", Until: t0}}},
			want:  map[string]int{"r1": 0, "r2": 1}},
		{name: "redirect-not-yet-expired", present: []string{"r1", "r2"}, client: "r1",
			rules: Rules{Redirects: []Redirect{{From: "r1", To: "r2", Until: t0.Add(time.Second)}}},
			want:  map[string]int{"r2": 0, "r1": 1}, out: Outcome{RedirectedTo: "r2"}},
		{name: "redirect-to-empty-region-reported", present: []string{"r1", "r2"}, client: "r1",
			rules: Rules{Redirects: []Redirect{{From: "r1", To: "r7"}}},
			want:  map[string]int{"r1": 0, "r2": 1}, out: Outcome{RedirectNoEndpoints: "r7"}},
		{name: "exclude", present: []string{"r1", "r2", "r3"}, client: "r1",
			rules: Rules{Excludes: []Exclude{{Region: "r1"}}},
			want:  map[string]int{"r2": 0, "r3": 1}, out: Outcome{Excluded: []string{"r1"}}},
		{name: "exclude-for-regionless-client", present: []string{"r1", "r2"},
			rules: Rules{Excludes: []Exclude{{Region: "r2"}}},
			want:  map[string]int{"r1": 0}, out: Outcome{Excluded: []string{"r2"}}},
		{name: "exclude-everything-fails-open", present: []string{"r1", "r2"}, client: "r1",
			rules: Rules{Excludes: []Exclude{{Region: "r1"}, {Region: "r2"}}},
			want:  map[string]int{"r1": 0, "r2": 1}, out: Outcome{FailOpen: true}},
		{name: "redirect-to-excluded-region-does-not-apply", present: []string{"r1", "r2", "r3"}, client: "r1",
			rules: Rules{Redirects: []Redirect{{From: "r1", To: "r2"}}, Excludes: []Exclude{{Region: "r2"}}},
			want:  map[string]int{"r1": 0, "r3": 1}, out: Outcome{RedirectNoEndpoints: "r2", Excluded: []string{"r2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, out := Order(tt.present, tt.client, tt.pref, tt.rules, t0)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("priorities (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.out, out); d != "" {
				t.Errorf("outcome (-want +got):\n%s", d)
			}
			// Contiguous from 0: what grpc-go requires.
			var ps []int
			for _, p := range got {
				ps = append(ps, p)
			}
			slices.Sort(ps)
			ps = slices.Compact(ps)
			for i, p := range ps {
				if p != i {
					t.Fatalf("priorities %v are not contiguous from 0", ps)
				}
			}
		})
	}
}

func TestParsePreference(t *testing.T) {
	tests := []struct {
		in      string
		want    Preference
		wantErr bool
	}{
		{in: "", want: Preference{}},
		{in: "r1=r2,r3;r2=r1,r3", want: Preference{"r1": {"r2", "r3"}, "r2": {"r1", "r3"}}},
		{in: " r1 = r2 ", want: Preference{"r1": {"r2"}}},
		{in: "r1", wantErr: true},
		{in: "=r2", wantErr: true},
		{in: "r1=r2,,r3", wantErr: true},
		{in: "r1=r1", wantErr: true},
		{in: "r1=r2,r2", wantErr: true},
		{in: "r1=r2;r1=r3", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParsePreference(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParsePreference(%q) err = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil {
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("ParsePreference(%q) (-want +got):\n%s", tt.in, d)
			}
		}
	}
}

// TestTableExpiry: a redirect with an expiry stops applying at Until
// with no edit, and Run reports the service then, bumping its version.
func TestTableExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := NewTable()
		until := time.Now().Add(30 * time.Second)
		tb.Set("pay", Rules{Redirects: []Redirect{{From: "r1", To: "r2", Until: until}}})
		_, v0 := tb.Rules("pay")
		var mu sync.Mutex
		var fired []string
		var firedAt time.Time
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			tb.Run(ctx, func(s []string) {
				mu.Lock()
				defer mu.Unlock()
				fired = append(fired, s...)
				firedAt = time.Now()
			})
		}()
		prio := func() map[string]int {
			r, _ := tb.Rules("pay")
			p, _ := Order([]string{"r1", "r2"}, "r1", nil, r, time.Now())
			return p
		}
		synctest.Wait()
		if got := prio(); got["r2"] != 0 {
			t.Fatalf("before expiry: %v, want r2 at 0", got)
		}
		time.Sleep(29 * time.Second)
		synctest.Wait()
		mu.Lock()
		if len(fired) != 0 {
			t.Fatalf("fired %v before the expiry", fired)
		}
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		if !slices.Equal(fired, []string{"pay"}) || !firedAt.Equal(until) {
			t.Fatalf("fired %v at %v, want [pay] at %v", fired, firedAt, until)
		}
		mu.Unlock()
		if _, v1 := tb.Rules("pay"); v1 == v0 {
			t.Errorf("version %d unchanged by the expiry", v1)
		}
		if got := prio(); got["r1"] != 0 || got["r2"] != 1 {
			t.Errorf("after expiry: %v, want r1 at 0, r2 at 1", got)
		}
		// A new rule set after Run started gets its own timer.
		tb.Set("pay", Rules{Excludes: []Exclude{{Region: "r1", Until: time.Now().Add(time.Minute)}}})
		time.Sleep(time.Minute)
		synctest.Wait()
		mu.Lock()
		if len(fired) != 2 {
			t.Errorf("fired %v, want a second report for the exclusion's expiry", fired)
		}
		mu.Unlock()
		cancel()
		<-done
	})
}

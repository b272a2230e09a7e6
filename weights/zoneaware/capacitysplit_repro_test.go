package zoneaware

// Reproduction (investigation of e2e TestMeshLoad/kill_owner): which
// Inputs give Source=LRS, Fallback=None and a capacity split on every
// route. Not a product test.

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"
)

// reproInput: endpoints zone-a 2, zone-b 2, zone-c 4 (capacity 25/25/50),
// demand rps per client zone (a zone absent from demand has no Demand
// row), each client zone's traffic sent to the upstream zones by
// capacity so the Loads total equals the Demand total.
func reproInput(now time.Time, demand map[string]float64) *Input {
	in := &Input{Now: now, Endpoints: fleet(map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 4})}
	capShare := map[string]float64{"zone-a": .25, "zone-b": .25, "zone-c": .5}
	var total float64
	for _, cz := range sortedKeys(demand) {
		in.Demand = append(in.Demand, Demand{ClientZone: cz, RPS: demand[cz], Updated: now.Add(-850 * time.Millisecond)})
		total += demand[cz]
	}
	for _, z := range sortedKeys(capShare) {
		r := total * capShare[z]
		in.Loads = append(in.Loads, ZoneLoad{Zone: z, IssuedRPS: r, SucceededRPS: r, InProgress: r / 100, Updated: now.Add(-850 * time.Millisecond)})
	}
	for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
		in.Clients = append(in.Clients, ClientCount{Zone: z, Count: 3}) // every zone has streams (the e2e raw watches)
	}
	return in
}

func isCapacitySplit(rt *Route) bool {
	want := map[string]uint32{"zone-a": 2500, "zone-b": 2500, "zone-c": 5000}
	if len(rt.Weights) != 3 {
		return false
	}
	for _, w := range rt.Weights {
		if d := math.Abs(float64(w.Weight) - float64(want[w.Zone])); d > 2 {
			return false
		}
	}
	return true
}

func describe(out *Result) string {
	s := fmt.Sprintf("source %v fallback %v:", out.Source, out.Fallback)
	for _, rt := range out.Routes {
		s += fmt.Sprintf(" [%q %v", rt.ClientZone, rt.Explain.Fallback)
		for _, w := range rt.Weights {
			s += fmt.Sprintf(" %s:%d", w.Zone, w.Weight)
		}
		s += "]"
	}
	return s
}

func TestReproCapacitySplitEveryRoute(t *testing.T) {
	calc, err := New(Config{ReportInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		demand map[string]float64
		split  bool // every route a capacity split, LRS, Fallback None
	}{
		{"full demand 400/100/100", map[string]float64{"zone-a": 400, "zone-b": 100, "zone-c": 100}, false},
		{"only zone-a has a Demand row", map[string]float64{"zone-a": 400}, true},
		{"only zone-c has a Demand row", map[string]float64{"zone-c": 200}, true},
		{"only a client zone with no endpoints", map[string]float64{"zone-x": 50}, true},
		{"zone-b and zone-c rows with RPS 0", map[string]float64{"zone-a": 400, "zone-b": 0, "zone-c": 0}, false},
		{"only zone-b and zone-c rows", map[string]float64{"zone-b": 100, "zone-c": 100}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st State
			var out Result
			calc.Compute(&st, reproInput(t0, tc.demand), &out)
			all := out.Source == SourceLRS && out.Fallback == FallbackNone
			for i := range out.Routes {
				all = all && isCapacitySplit(&out.Routes[i])
			}
			t.Logf("%s", describe(&out))
			if all != tc.split {
				t.Errorf("capacity split on every route with LRS/None = %v, want %v", all, tc.split)
			}
		})
	}
}

// TestReproRestoredStateOverwritten: a state restored from a checkpoint
// taken with the full demand (what a new owner imports) does not hold
// its vectors when the next Input has demand only for zone-a: every
// route changes (zone-b's and zone-c's because the route fallback moved
// from None to UnknownDemand, which always counts as a move), and the
// state now compares with the capacity split.
func TestReproRestoredStateOverwritten(t *testing.T) {
	calc, err := New(Config{ReportInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var old State
	var out Result
	now := t0
	for range 5 {
		calc.Compute(&old, reproInput(now, map[string]float64{"zone-a": 400, "zone-b": 100, "zone-c": 100}), &out)
		now = now.Add(time.Second)
	}
	t.Logf("old owner's last plan: %s", describe(&out))
	b, _ := json.Marshal(old.Snapshot())
	var snap Snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	var st State
	if err := st.Restore(snap); err != nil {
		t.Fatal(err)
	}
	calc.Compute(&st, reproInput(now, map[string]float64{"zone-a": 400}), &out)
	t.Logf("new owner's first cycle, zone-a's demand only: %s", describe(&out))
	for i := range out.Routes {
		rt := &out.Routes[i]
		if rt.ClientZone == "" {
			continue // zoneless: a capacity split before and after
		}
		if !rt.Changed || !isCapacitySplit(rt) || rt.Explain.Held {
			t.Errorf("route %q: changed %v held %v capacity split %v, want a changed capacity split", rt.ClientZone, rt.Changed, rt.Explain.Held, isCapacitySplit(rt))
		}
	}
	now = now.Add(time.Second)
	calc.Compute(&st, reproInput(now, map[string]float64{"zone-a": 400, "zone-b": 100, "zone-c": 100}), &out)
	t.Logf("next cycle, full demand again: %s (changed %v)", describe(&out), out.Changed)
}

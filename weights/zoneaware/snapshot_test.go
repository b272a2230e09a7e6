package zoneaware

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// roundTrip takes st's snapshot through JSON into a fresh State.
func roundTrip(t testing.TB, st *State) *State {
	t.Helper()
	b, err := json.Marshal(st.Snapshot())
	if err != nil {
		t.Fatalf("marshal snapshot: %v", err)
	}
	var snap Snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatalf("unmarshal snapshot: %v", err)
	}
	var fresh State
	if err := fresh.Restore(snap); err != nil {
		t.Fatalf("restore %s: %v", b, err)
	}
	return &fresh
}

// TestSnapshotRestore runs a service through slow start, a degraded zone
// and held vectors; at every cycle the state goes through JSON into a
// fresh State, and the next Compute on it must give the Result the
// original gives. A State that starts over must not, or the test would
// not show that the snapshot carries anything.
func TestSnapshotRestore(t *testing.T) {
	const interval = 10 * time.Second
	p := &plant{
		zones:     []string{"a", "b", "c"},
		clientRPS: map[string]float64{"a": 300, "b": 280, "c": 310},
		capRPS:    map[string]float64{"a": 360, "b": 360, "c": 360},
		errRate:   map[string]float64{},
		slow:      map[string]float64{},
	}
	eps := fleet(map[string]int{"a": 3, "b": 3, "c": 3})
	calc := mustNew(t, Config{})
	var st State
	var out, got, zero Result
	var sawSlowStart, sawDegraded, sawHeld, sawDiffers bool
	for cycle := range 16 {
		now := t0.Add(time.Duration(cycle) * interval)
		switch cycle {
		case 2: // a new endpoint in c: slow start for the next minute
			eps = append(eps, Endpoint{ID: "c-new", Zone: "c", Healthy: true, Registered: now})
		case 4: // zone a fails most requests, slowly
			p.errRate["a"], p.slow["a"] = 0.9, 4
		case 10: // and recovers
			p.errRate["a"], p.slow["a"] = 0, 0
		}
		in := &Input{Now: now, Endpoints: eps, Clients: []ClientCount{{"a", 1}, {"b", 1}, {"c", 1}}}
		if cycle > 0 {
			in.Loads, in.Demand = p.serve(&out, now)
			// Demand wobbles by a percent: hysteresis holds the vectors.
			for i := range in.Demand {
				in.Demand[i].RPS *= 1 + 0.01*float64(cycle%2)
			}
		}
		snap := st.Snapshot()
		for _, e := range snap.Endpoints {
			sawSlowStart = sawSlowStart || (e.Progress > 0 && e.Progress < 1)
		}
		for _, z := range snap.Zones {
			sawDegraded = sawDegraded || z.Health < 1
		}
		restored := roundTrip(t, &st)
		var fresh State
		calc.Compute(&st, in, &out)
		calc.Compute(restored, in, &got)
		calc.Compute(&fresh, in, &zero)
		if diff := cmp.Diff(&out, &got); diff != "" {
			t.Fatalf("cycle %d: restored state gives another result (-original +restored):\n%s", cycle, diff)
		}
		if diff := cmp.Diff(st.Snapshot(), restored.Snapshot()); diff != "" {
			t.Fatalf("cycle %d: restored state ends elsewhere (-original +restored):\n%s", cycle, diff)
		}
		sawDiffers = sawDiffers || !cmp.Equal(&out, &zero)
		for _, rt := range out.Routes {
			sawHeld = sawHeld || rt.Explain.Held
		}
	}
	if !sawSlowStart || !sawDegraded || !sawHeld || !sawDiffers {
		t.Errorf("scenario did not cover: slow start %v, degraded zone %v, held vector %v, state that matters %v", sawSlowStart, sawDegraded, sawHeld, sawDiffers)
	}
}

// TestSnapshotRestoreGenerated checks the same property on generated
// cycles: changing membership and health, garbage and stale load data, a
// clock that jumps.
func TestSnapshotRestoreGenerated(t *testing.T) {
	for seed := range uint64(200) {
		calc := mustNew(t, Config{})
		var st State
		var out, got Result
		for i, in := range fuzzInputs(seed, 12) {
			restored := roundTrip(t, &st)
			calc.Compute(&st, in, &out)
			calc.Compute(restored, in, &got)
			if diff := cmp.Diff(&out, &got); diff != "" {
				t.Fatalf("seed %d cycle %d: restored state gives another result (-original +restored):\n%s", seed, i, diff)
			}
		}
	}
}

func TestRestoreRejects(t *testing.T) {
	good := func() Snapshot {
		return Snapshot{
			Last:      t0,
			Endpoints: []EndpointSnapshot{{ID: "a-0", Registered: t0, Progress: 0.5, Relief: 0, Healthy: true}},
			Zones:     []ZoneSnapshot{{Zone: "a", Health: 0.5, At: t0, History: []LoadSample{{1, 2}}}, {Zone: "b", Health: 1, At: t0}},
			Routes:    []RouteSnapshot{{ClientZone: "", Fallback: "zoneless", Weights: []WeightSnapshot{{"a", 5000, 0.5}, {"b", 5000, 0.5}}}, {ClientZone: "a", Fallback: "none"}},
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Snapshot)
		field string // "" for valid
	}{
		{"valid", func(*Snapshot) {}, ""},
		{"empty", func(s *Snapshot) { *s = Snapshot{} }, ""},
		{"progress_nan", func(s *Snapshot) { s.Endpoints[0].Progress = math.NaN() }, "endpoints[0].progress"},
		{"progress_above_one", func(s *Snapshot) { s.Endpoints[0].Progress = 1.5 }, "endpoints[0].progress"},
		{"relief_negative", func(s *Snapshot) { s.Endpoints[0].Relief = -0.1 }, "endpoints[0].relief"},
		{"endpoint_no_id", func(s *Snapshot) { s.Endpoints[0].ID = "" }, "endpoints[0].id"},
		{"endpoint_twice", func(s *Snapshot) { s.Endpoints = append(s.Endpoints, s.Endpoints[0]) }, "endpoints[1].id"},
		{"too_many_endpoints", func(s *Snapshot) { s.Endpoints = make([]EndpointSnapshot, MaxSnapshotEndpoints+1) }, "endpoints"},
		{"health_inf", func(s *Snapshot) { s.Zones[0].Health = math.Inf(1) }, "zones[0].health"},
		{"health_zero", func(s *Snapshot) { s.Zones[0].Health = 0 }, "zones[0].health"},
		{"limit_negative", func(s *Snapshot) { s.Zones[1].Limit = -1 }, "zones[1].limit"},
		{"zones_unsorted", func(s *Snapshot) { s.Zones[0].Zone, s.Zones[1].Zone = "b", "a" }, "zones[1].zone"},
		{"zones_twice", func(s *Snapshot) { s.Zones[1].Zone = "a" }, "zones[1].zone"},
		{"too_much_history", func(s *Snapshot) { s.Zones[0].History = make([]LoadSample, 3) }, "zones[0].history"},
		{"history_nan", func(s *Snapshot) { s.Zones[0].History[0].Issued = math.NaN() }, "zones[0].history[0].issued"},
		{"too_many_zones", func(s *Snapshot) { s.Zones = make([]ZoneSnapshot, MaxSnapshotZones+1) }, "zones"},
		{"unknown_fallback", func(s *Snapshot) { s.Routes[1].Fallback = "maybe" }, "routes[1].fallback"},
		{"routes_unsorted", func(s *Snapshot) { s.Routes[0].ClientZone = "b" }, "routes[1].client_zone"},
		{"share_above_one", func(s *Snapshot) { s.Routes[0].Weights[1].Share = 2 }, "routes[0].weights[1].share"},
		{"weight_zero", func(s *Snapshot) { s.Routes[0].Weights[0].Weight = 0 }, "routes[0].weights[0].weight"},
		{"weight_above_scale", func(s *Snapshot) { s.Routes[0].Weights[0].Weight = maxScale + 1 }, "routes[0].weights[0].weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.edit(&s)
			st := State{last: t0.Add(time.Hour)}
			err := st.Restore(s)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				if diff := cmp.Diff(s, st.Snapshot()); diff != "" {
					t.Errorf("snapshot after restore (-restored +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), tc.field+":") {
				t.Fatalf("Restore = %v, want ErrInvalidSnapshot naming %s", err, tc.field)
			}
			if !st.last.Equal(t0.Add(time.Hour)) {
				t.Error("a rejected snapshot changed the state")
			}
		})
	}
}

// FuzzRestore feeds Restore arbitrary JSON: it must never panic, and a
// state it accepts must compute valid results and snapshot back to what
// was restored.
func FuzzRestore(f *testing.F) {
	calc := mustNew(f, Config{})
	var st State
	var out Result
	for _, in := range fuzzInputs(7, 6) {
		calc.Compute(&st, in, &out)
		b, _ := json.Marshal(st.Snapshot())
		f.Add(b)
	}
	f.Add([]byte(`{"last":"2026-03-01T12:00:00Z","zones":[{"zone":"a","health":2}]}`))
	f.Add([]byte(`{"routes":[{"client_zone":"","fallback":"none","weights":[{"zone":"a","weight":1,"share":1}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var snap Snapshot
		if json.Unmarshal(b, &snap) != nil {
			return
		}
		var st State
		if err := st.Restore(snap); err != nil {
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("Restore error %v does not wrap ErrInvalidSnapshot", err)
			}
			return
		}
		if diff := cmp.Diff(normalise(snap), st.Snapshot()); diff != "" {
			t.Fatalf("snapshot after restore (-restored +got):\n%s", diff)
		}
		var out Result
		prev := map[string][]ZoneWeight{}
		for _, in := range fuzzInputs(uint64(len(b)), 3) {
			calc.Compute(&st, in, &out)
			checkResult(t, in, &out, prev)
		}
	})
}

// normalise makes empty lists nil, as Snapshot returns them.
func normalise(s Snapshot) Snapshot {
	if len(s.Endpoints) == 0 {
		s.Endpoints = nil
	}
	if len(s.Zones) == 0 {
		s.Zones = nil
	}
	if len(s.Routes) == 0 {
		s.Routes = nil
	}
	for i := range s.Zones {
		if len(s.Zones[i].History) == 0 {
			s.Zones[i].History = nil
		}
	}
	for i := range s.Routes {
		if len(s.Routes[i].Weights) == 0 {
			s.Routes[i].Weights = nil
		}
	}
	return s
}

// TestComputeWithMatchesCompute: services computed in turn in one shared
// Scratch get the Results and States that each gets computing in its own
// memory, and a Result stays as it was while the Scratch computes other
// services (it holds none of the Scratch's memory). Generated cycles:
// membership and health changes, slow start, garbage and stale load
// data, a clock that jumps.
func TestComputeWithMatchesCompute(t *testing.T) {
	const services, cycles = 8, 12
	calc := mustNew(t, Config{})
	for round := range uint64(40) {
		own, shared := make([]State, services), make([]State, services)
		var sc Scratch
		ins, ins2 := make([][]*Input, services), make([][]*Input, services)
		for k := range services {
			seed := round*services + uint64(k)
			ins[k], ins2[k] = fuzzInputs(seed, cycles), fuzzInputs(seed, cycles)
		}
		for i := range cycles {
			want, got := make([]Result, services), make([]Result, services)
			for k := range services {
				calc.Compute(&own[k], ins[k][i], &want[k])
				calc.ComputeWith(&sc, &shared[k], ins2[k][i], &got[k])
			}
			for k := range services {
				if diff := cmp.Diff(&want[k], &got[k]); diff != "" {
					t.Fatalf("round %d cycle %d service %d: result computed in a shared scratch differs (-own +shared):\n%s", round, i, k, diff)
				}
				if diff := cmp.Diff(own[k].Snapshot(), shared[k].Snapshot()); diff != "" {
					t.Fatalf("round %d cycle %d service %d: state computed in a shared scratch differs (-own +shared):\n%s", round, i, k, diff)
				}
				if shared[k].zones != nil || shared[k].epsNext != nil || shared[k].pushedNext != nil || shared[k].healthNext != nil {
					t.Fatalf("round %d cycle %d service %d: the state kept scratch memory after ComputeWith", round, i, k)
				}
			}
		}
	}
}

package zoneaware

import (
	"slices"
	"testing"
	"time"
)

// TestReserve: a Result reserved for a shape computes the same as a
// fresh one, in the reserved memory when the shape fits (no allocation)
// and growing where it does not; a route's weights never spill into
// the next route's.
func TestReserve(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		zones, perZone           int
		routes, perRoute, rzones int // reserved
		wantAllocs               float64
	}{
		{name: "fits", zones: 3, perZone: 4, routes: 4, perRoute: 3, rzones: 3, wantAllocs: 0},
		{name: "larger", zones: 3, perZone: 4, routes: 8, perRoute: 6, rzones: 8, wantAllocs: 0},
		{name: "more_zones_than_reserved", zones: 6, perZone: 2, routes: 4, perRoute: 3, rzones: 3, wantAllocs: -1},
		{name: "nothing_reserved", zones: 3, perZone: 2, wantAllocs: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calc := mustNew(t, Config{})
			in := benchServices(1, tc.zones, tc.perZone)[0]
			var fresh, reserved State
			// Two cycles: the second is the one a planner publishes anew.
			for c := range 2 {
				now := t0.Add(time.Duration(c) * 10 * time.Second)
				setNow([]*Input{in}, now)
				want := &Result{}
				calc.Compute(&fresh, in, want)
				got := &Result{}
				got.Reserve(tc.routes, tc.perRoute, tc.rzones)
				calc.Compute(&reserved, in, got)
				if !got.Equal(want) {
					t.Fatalf("cycle %d: reserved result differs from a fresh one:\n got %+v\nwant %+v", c, got, want)
				}
			}
			for i := range 2 {
				a, b := &Result{}, &Result{}
				a.Reserve(tc.routes, tc.perRoute, tc.rzones)
				b.Reserve(tc.routes, tc.perRoute, tc.rzones)
				calc.Compute(&reserved, in, a)
				calc.Compute(&reserved, in, b)
				if i == 0 && len(a.Routes) > 1 {
					// Writing a's first route must leave its second alone.
					w := a.Routes[1].Weights[0]
					a.Routes[0].Weights = append(a.Routes[0].Weights, ZoneWeight{Zone: "zz", Weight: 9})
					if a.Routes[1].Weights[0] != w {
						t.Fatalf("appending to route 0 wrote route 1's weights")
					}
				}
			}
			if tc.wantAllocs >= 0 {
				allocs := testing.AllocsPerRun(20, func() {
					out := &Result{}
					out.Reserve(tc.routes, tc.perRoute, tc.rzones)
					calc.Compute(&reserved, in, out)
				})
				// Reserve's own: the Result, routes, weights, spill, zones.
				if allocs > 5+tc.wantAllocs {
					t.Errorf("allocations per reserved Compute = %v, want at most %v", allocs, 5+tc.wantAllocs)
				}
			}
		})
	}
}

// TestShape: Shape gives what Reserve needs to hold a result again.
func TestShape(t *testing.T) {
	calc := mustNew(t, Config{})
	in := benchServices(1, 3, 2)[0]
	var st State
	out := &Result{}
	calc.Compute(&st, in, out)
	routes, perRoute, zones := out.Shape()
	if routes != len(out.Routes) || zones != len(out.Zones) || perRoute != 3 {
		t.Errorf("Shape() = %d, %d, %d, want %d, 3, %d", routes, perRoute, zones, len(out.Routes), len(out.Zones))
	}
}

// TestReserveLike: a Result reserved like the previous one computes the
// same as a fresh one, in the reserved memory (no allocation beyond
// ReserveLike's own) when the shape stays; a route's weights and spill
// shares never spill into the next route's; a larger shape grows.
func TestReserveLike(t *testing.T) {
	for _, tc := range []struct {
		name              string
		zones, perZone    int
		nextZones         int // zones of the computed service, against prev's
		wantNoExtraAllocs bool
	}{
		{name: "same_shape", zones: 3, perZone: 4, nextZones: 3, wantNoExtraAllocs: true},
		{name: "more_zones", zones: 3, perZone: 2, nextZones: 5},
		{name: "fewer_zones", zones: 4, perZone: 2, nextZones: 2, wantNoExtraAllocs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calc := mustNew(t, Config{})
			prev := &Result{}
			var pst State
			calc.Compute(&pst, benchServices(1, tc.zones, tc.perZone)[0], prev)
			in := benchServices(1, tc.nextZones, tc.perZone)[0]
			var fresh, reserved State
			for c := range 2 {
				now := t0.Add(time.Duration(c) * 10 * time.Second)
				setNow([]*Input{in}, now)
				want := &Result{}
				calc.Compute(&fresh, in, want)
				got := &Result{}
				got.ReserveLike(prev)
				calc.Compute(&reserved, in, got)
				if !got.Equal(want) {
					t.Fatalf("cycle %d: reserved result differs from a fresh one:\n got %+v\nwant %+v", c, got, want)
				}
				checkRoutesApart(t, got)
			}
			if tc.wantNoExtraAllocs {
				allocs := testing.AllocsPerRun(20, func() {
					out := &Result{}
					out.ReserveLike(prev)
					calc.Compute(&reserved, in, out)
				})
				// ReserveLike's own: the Result, routes, weights, spill, zones.
				if allocs > 5 {
					t.Errorf("allocations per reserved Compute = %v, want at most 5", allocs)
				}
			}
		})
	}
}

// checkRoutesApart fails t if appending to r's first route's weights or
// spill shares writes its second route's (r is changed).
func checkRoutesApart(t *testing.T, r *Result) {
	t.Helper()
	if len(r.Routes) < 2 {
		return
	}
	w, s := slices.Clone(r.Routes[1].Weights), slices.Clone(r.Routes[1].Explain.Spill)
	r.Routes[0].Weights = append(r.Routes[0].Weights, ZoneWeight{Zone: "zz", Weight: 9})
	r.Routes[0].Explain.Spill = append(r.Routes[0].Explain.Spill, ZoneShare{Zone: "zz", Share: 1})
	if !slices.Equal(r.Routes[1].Weights, w) || !slices.Equal(r.Routes[1].Explain.Spill, s) {
		t.Fatal("appending to route 0 wrote route 1's weights or spill")
	}
}

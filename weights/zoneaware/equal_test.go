package zoneaware

import (
	"reflect"
	"testing"
	"time"
)

func sampleResult() *Result {
	rt := func(zone string) Route {
		return Route{
			ClientZone: zone, Changed: true,
			Weights: []ZoneWeight{{Zone: "a", Weight: 60, Share: 0.6}, {Zone: "b", Weight: 40, Share: 0.4}},
			Explain: Explain{
				ClientZone: zone, Demand: 10, DemandShare: 0.5, HasDemand: true, Source: SourceLRS,
				Fallback: FallbackNone, Reason: "r", ReasonZone: "z", DataAge: time.Second, LocalFirst: true,
				Local: 0.6, Spill: []ZoneShare{{Zone: "b", Share: 0.4}},
				Capacity: RefTo(&ZoneInfo{Zone: zone, Healthy: 3, Capacity: 1}), Held: true, Moved: 0.01,
			},
		}
	}
	return &Result{
		Routes: []Route{rt(""), rt("a")},
		Zones:  []ZoneInfo{{Zone: "a", Healthy: 3, Trusted: 1, Capacity: 2}, {Zone: "b", Healthy: 2}},
		Source: SourceLRS, Fallback: FallbackNone, Reason: "x", ReasonZone: "y", DataAge: time.Minute,
		SameZone: 0.7, Optimum: 0.8, Changed: true,
	}
}

// leaves calls f with every scalar field reachable from v, an
// addressable value (through structs, slice elements and the ZoneInfo a
// ZoneRef refers to), so a test can change each in turn.
func leaves(v reflect.Value, f func(reflect.Value)) {
	if ref, ok := v.Addr().Interface().(*ZoneRef); ok {
		if ref.z != nil {
			leaves(reflect.ValueOf(ref.z).Elem(), f)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			leaves(v.Field(i), f)
		}
	case reflect.Slice:
		for i := range v.Len() {
			leaves(v.Index(i), f)
		}
	default:
		f(v)
	}
}

func bump(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "!")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8, reflect.Uint32:
		v.SetUint(v.Uint() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 0.5)
	default:
		panic("bump: unhandled kind " + v.Kind().String())
	}
}

// bumpField changes the k-th field leaves walks in r and returns it.
func bumpField(r *Result, k int) reflect.Value {
	i := 0
	var path reflect.Value
	leaves(reflect.ValueOf(r).Elem(), func(v reflect.Value) {
		if i == k {
			bump(v)
			path = v
		}
		i++
	})
	return path
}

// TestResultEqualSeesEveryField changes each field of a Result, its
// routes, weights, explanations and zones, one at a time: Equal must see
// every change, so a field added later without Equal fails here.
func TestResultEqualSeesEveryField(t *testing.T) {
	r := sampleResult()
	if !r.Equal(r.Clone()) {
		t.Fatal("a clone is not Equal")
	}
	n := 0
	leaves(reflect.ValueOf(r).Elem(), func(reflect.Value) { n++ })
	for k := range n {
		c := r.Clone()
		path := bumpField(c, k)
		if r.Equal(c) {
			t.Errorf("field %d (%s) changed, Equal still true", k, path.Type())
		}
	}
	if n < 60 {
		t.Errorf("only %d fields walked; the sample leaves some empty", n)
	}
	c := r.Clone()
	c.Routes[1].Weights = c.Routes[1].Weights[:1]
	if r.Equal(c) {
		t.Error("a shorter weight vector is Equal")
	}
	c = r.Clone()
	c.Routes = c.Routes[:1]
	if r.Equal(c) {
		t.Error("fewer routes is Equal")
	}
}

// TestResultCopyFrom: a copy is Equal to its source, shares no memory
// with it (changing any field of the source, one at a time, leaves the
// copy as it was), refers to its own zones, keeps each route's weights
// and spill shares apart, and costs at most ReserveLike's allocations.
func TestResultCopyFrom(t *testing.T) {
	r := sampleResult()
	// As Compute leaves them, a route's capacity zone is one of Zones.
	r.Routes[1].Explain.Capacity = RefTo(&r.Zones[0])
	for _, src := range []*Result{r, {}, {Source: SourceLRS, Reason: "no routes"}} {
		c := &Result{}
		c.CopyFrom(src)
		if !c.Equal(src) {
			t.Fatalf("copy differs:\n got %+v\nwant %+v", c, src)
		}
	}
	n := 0
	leaves(reflect.ValueOf(r).Elem(), func(reflect.Value) { n++ })
	for k := range n {
		src := r.Clone()
		c := &Result{}
		c.CopyFrom(src)
		path := bumpField(src, k)
		if !c.Equal(r) {
			t.Errorf("field %d (%s) of the source changed, and the copy with it", k, path.Type())
		}
	}
	c := &Result{}
	c.CopyFrom(r)
	refs := 0
	for i := range r.Routes {
		ref := r.Routes[i].Explain.Capacity.z
		for j := range r.Zones {
			if ref == &r.Zones[j] {
				refs++
				if c.Routes[i].Explain.Capacity.z != &c.Zones[j] {
					t.Errorf("route %d: the copy's capacity zone is not its own zone %d", i, j)
				}
			}
		}
	}
	if refs == 0 {
		t.Fatal("the sample has no capacity zone: the test checks no reference")
	}
	checkRoutesApart(t, c)
	allocs := testing.AllocsPerRun(20, func() {
		c := &Result{}
		c.CopyFrom(r)
	})
	// ReserveLike's: the Result, routes, weights, spill, zones.
	if allocs > 5 {
		t.Errorf("allocations per copy = %v, want at most 5", allocs)
	}
}

package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
)

// TestPlanWeightsEndpoints: the resolver gets the plan's PID weights with
// its Gen, the zone split only while zone-aware decides the zones, and
// nothing for a plan without endpoint weights.
func TestPlanWeightsEndpoints(t *testing.T) {
	res := &zoneaware.Result{Routes: []zoneaware.Route{{ClientZone: "", Weights: []zoneaware.ZoneWeight{{Zone: "a", Weight: 6000}, {Zone: "b", Weight: 4000}}}}}
	eps := map[string]weights.EndpointWeight{"a-0": {Zone: "a", Weight: 12000}, "b-0": {Zone: "b", Weight: 8000}}
	plans := map[string]*weights.Plan{
		"zoned":   {Gen: 4, Result: res, Endpoints: eps},
		"alone":   {Gen: 5, Result: res, Endpoints: eps, LocalityFromEndpoints: true},
		"no-pid":  {Gen: 6, Result: res},
		"no-plan": nil,
	}
	pw := planWeights{xds.PlanFunc(func(s string) *weights.Plan { return plans[s] })}
	for _, tt := range []struct {
		service   string
		split     []resolver.ZoneWeight
		gen       uint64
		a0        uint32
		a0ok      bool
		wantSplit bool
	}{
		{"zoned", []resolver.ZoneWeight{{Zone: "a", Weight: 6000}, {Zone: "b", Weight: 4000}}, 4, 12000, true, true},
		{"alone", nil, 5, 12000, true, false},
		{"no-pid", []resolver.ZoneWeight{{Zone: "a", Weight: 6000}, {Zone: "b", Weight: 4000}}, 0, 0, false, true},
		{"no-plan", nil, 0, 0, false, false},
	} {
		t.Run(tt.service, func(t *testing.T) {
			split, ok := pw.ZoneWeights(nil, tt.service, "a")
			if ok != tt.wantSplit || !cmp.Equal(split, tt.split) {
				t.Errorf("ZoneWeights = %v, %v; want %v, %v", split, ok, tt.split, tt.wantSplit)
			}
			if g := pw.EndpointGen(tt.service); g != tt.gen {
				t.Errorf("EndpointGen = %d, want %d", g, tt.gen)
			}
			if w, ok := pw.EndpointWeight(tt.service, "a-0"); ok != tt.a0ok || (ok && w != tt.a0) {
				t.Errorf("EndpointWeight(a-0) = %d, %v; want %d, %v", w, ok, tt.a0, tt.a0ok)
			}
		})
	}
}

package xds_test

import (
	"sync"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/xds"
)

// TestSotWPIDWeightsPushed: over a real ADS stream, EDS carries the
// planner's PID endpoint weights, a cycle that moves them pushes a new
// version, and a cycle that holds them (every report missing) pushes
// nothing.
func TestSotWPIDWeightsPushed(t *testing.T) {
	var (
		mu   sync.Mutex
		cpu  = map[string]float64{"ep-1": 0.9, "ep-2": 0.3}
		at   = time.Now()
		p    *weights.Planner
		none bool
	)
	util := weights.UtilizationFunc(func(string, time.Time) []weights.EndpointUtilization {
		mu.Lock()
		defer mu.Unlock()
		if none {
			return nil
		}
		var out []weights.EndpointUtilization
		for id, c := range cpu {
			out = append(out, weights.EndpointUtilization{ID: id, CPU: c, Reported: at})
		}
		return out
	})
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 2}), xds.Config{
		Plans: xds.PlanFunc(func(service string) *weights.Plan { return p.Plan(service) }),
	})
	var err error
	p, err = weights.NewPlanner(weights.Config{
		Registry: srv.store, Loads: srv.x.Loads(), Clients: srv.x, Zones: srv.x, OnChange: srv.x.Dispatch,
		Utilization: util,
		Strategies:  weights.StrategyFunc(func(string) weights.Strategy { return weights.Strategy{PID: true, ZoneAware: true} }),
	})
	if err != nil {
		t.Fatal(err)
	}
	now := at
	p.Cycle(now)
	c := newSotwClient(t, srv.conn)
	c.subscribe(eds, "web")
	weightsOf := func(plan *weights.Plan) map[string]uint32 {
		out := map[string]uint32{}
		for id, w := range plan.Endpoints {
			out[id] = w.Weight
		}
		return out
	}
	pushed := func() (map[string]uint32, string) {
		t.Helper()
		resp := c.recvType(eds)
		cla := sotwResources(t, resp)["web"].(*v3endpointpb.ClusterLoadAssignment)
		out := map[string]uint32{}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				out[e.GetEndpoint().GetHostname()] = e.GetLoadBalancingWeight().GetValue()
			}
		}
		c.ack(resp)
		return out, resp.GetVersionInfo()
	}
	got1, v1 := pushed()
	if diff := cmp.Diff(weightsOf(p.Plan("web")), got1); diff != "" {
		t.Fatalf("first EDS weights (-plan +pushed):\n%s", diff)
	}
	if !(got1["ep-2"] > got1["ep-1"]) {
		t.Errorf("pushed %v: want ep-2 (CPU 0.3) above ep-1 (CPU 0.9)", got1)
	}
	mu.Lock()
	at = at.Add(time.Second)
	mu.Unlock()
	now = now.Add(time.Second)
	p.Cycle(now)
	got2, v2 := pushed()
	if v2 == v1 || cmp.Equal(got1, got2) {
		t.Errorf("after a PID round: version %s -> %s, weights %v -> %v; want both to change", v1, v2, got1, got2)
	}
	if diff := cmp.Diff(weightsOf(p.Plan("web")), got2); diff != "" {
		t.Errorf("second EDS weights (-plan +pushed):\n%s", diff)
	}
	mu.Lock()
	none = true
	mu.Unlock()
	p.Cycle(now.Add(time.Second))
	if o := p.Plan("web").PID.Outcome; o != "skipped_missing" {
		t.Fatalf("outcome %s, want skipped_missing", o)
	}
	c.expectNone(rawQuiet)
}

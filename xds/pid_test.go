package xds

import (
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

// pidStore holds web with endpoints a-0, a-1 in zone a and b-0, b-1 in b;
// b-1 is unhealthy.
func pidStore(t *testing.T) *registry.Store {
	t.Helper()
	store := registry.NewStore()
	var ops []registry.Op
	for i, id := range []string{"a-0", "a-1", "b-0", "b-1"} {
		h := registry.Healthy
		if id == "b-1" {
			h = registry.Unhealthy
		}
		ops = append(ops, registry.Upsert("web", &registry.Endpoint{
			ID: id, Address: netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1)),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: id[:1]}, Health: h, Weight: 100,
			Source: registry.SourceStatic, Registered: time.Now().Add(-time.Hour),
		}))
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	return store
}

// newPIDServer is newZoneAware with a strategy and utilization reports.
func newPIDServer(t *testing.T, store *registry.Store, strat weights.Strategy, util weights.UtilizationFunc) (*Server, *weights.Planner) {
	t.Helper()
	var p *weights.Planner
	s, err := New(Config{Store: store, Plans: PlanFunc(func(service string) *weights.Plan { return p.Plan(service) })})
	if err != nil {
		t.Fatal(err)
	}
	p, err = weights.NewPlanner(weights.Config{
		Registry: store, Loads: s.Loads(), Clients: s, Zones: s, PortName: s.cfg.PortName,
		ZoneAware: zoneaware.Config{ReportInterval: s.cfg.LRSInterval}, OnChange: s.Dispatch,
		Strategies: weights.StrategyFunc(func(string) weights.Strategy { return strat }), Utilization: util,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

func reportsFor(cpu map[string]float64, at time.Time) weights.UtilizationFunc {
	return func(string, time.Time) []weights.EndpointUtilization {
		var out []weights.EndpointUtilization
		for id, c := range cpu {
			out = append(out, weights.EndpointUtilization{ID: id, CPU: c, Reported: at})
		}
		return out
	}
}

type edsView struct {
	locality  map[string]uint32 // by zone
	endpoints map[string]uint32 // by hostname (endpoint ID)
}

func edsFor(t *testing.T, s *Server, store *registry.Store, zone string) (edsView, *resource) {
	t.Helper()
	r, ok := s.lookup(3, "web", zone, store.Snapshot())
	if !ok || r == nil {
		t.Fatalf("no valid EDS for zone %s", zone)
	}
	cla := &v3endpointpb.ClusterLoadAssignment{}
	if err := r.any.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if err := checkForGRPC(EndpointType, cla); err != nil {
		t.Fatalf("grpc-go would reject the EDS: %v", err)
	}
	v := edsView{locality: map[string]uint32{}, endpoints: map[string]uint32{}}
	for _, l := range cla.GetEndpoints() {
		v.locality[l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
		for _, e := range l.GetLbEndpoints() {
			v.endpoints[e.GetEndpoint().GetHostname()] = e.GetLoadBalancingWeight().GetValue()
		}
	}
	return v, r
}

// TestEDSPIDWeights: with zone-aware+pid the locality weights are what
// zone-aware alone pushes and each endpoint's load_balancing_weight is the
// plan's; a PID round that moves the weights gives a new resource.
func TestEDSPIDWeights(t *testing.T) {
	store := pidStore(t)
	now := time.Now()
	base, bp := newZoneAware(t, Config{Store: store}, zoneaware.Config{})
	bp.Cycle(now)
	wantLoc, _ := edsFor(t, base, store, "a")

	cpu := map[string]float64{"a-0": 0.9, "a-1": 0.3, "b-0": 0.6, "b-1": 0.6}
	s, p := newPIDServer(t, store, weights.Strategy{PID: true, ZoneAware: true}, reportsFor(cpu, now))
	p.Cycle(now)
	plan := p.Plan("web")
	got, r1 := edsFor(t, s, store, "a")
	if diff := cmp.Diff(wantLoc.locality, got.locality); diff != "" {
		t.Errorf("locality weights differ from zone-aware alone (-want +got):\n%s", diff)
	}
	for id, w := range plan.Endpoints {
		if got.endpoints[id] != w.Weight {
			t.Errorf("%s: EDS weight %d, plan %d", id, got.endpoints[id], w.Weight)
		}
	}
	if !(got.endpoints["a-1"] > got.endpoints["a-0"]) || got.endpoints["a-0"] == 100 {
		t.Errorf("a-0 %d a-1 %d: want PID weights, a-1 (idle) above a-0 (busy)", got.endpoints["a-0"], got.endpoints["a-1"])
	}
	p.Cycle(now.Add(time.Second))
	got2, r2 := edsFor(t, s, store, "a")
	if got2.endpoints["a-1"] == got.endpoints["a-1"] || r1 == r2 {
		t.Errorf("second round: a-1 %d -> %d, same resource %v; want a new EDS", got.endpoints["a-1"], got2.endpoints["a-1"], r1 == r2)
	}
}

// TestEDSPIDAlone: with pid alone a locality weighs the sum of its healthy
// endpoints' PID weights, the same for every client zone.
func TestEDSPIDAlone(t *testing.T) {
	store := pidStore(t)
	now := time.Now()
	cpu := map[string]float64{"a-0": 0.9, "a-1": 0.3, "b-0": 0.6, "b-1": 0.6}
	s, p := newPIDServer(t, store, weights.Strategy{PID: true}, reportsFor(cpu, now))
	p.Cycle(now)
	plan := p.Plan("web")
	ew := plan.Endpoints
	want := map[string]uint32{"a": ew["a-0"].Weight + ew["a-1"].Weight, "b": ew["b-0"].Weight} // b-1 unhealthy
	var first *resource
	for _, zone := range []string{"a", "b", ""} {
		got, r := edsFor(t, s, store, zone)
		if diff := cmp.Diff(want, got.locality); diff != "" {
			t.Errorf("client zone %q locality weights (-want +got):\n%s", zone, diff)
		}
		if first == nil {
			first = r
		} else if r != first {
			t.Errorf("client zone %q got its own resource; pid alone is the same for every zone", zone)
		}
	}
}

// TestFitUint32 keeps weights within what gRPC accepts.
func TestFitUint32(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []uint64
		want []uint32
	}{
		{"fits", []uint64{1, 10000, 50000}, []uint32{1, 10000, 50000}},
		{"empty", nil, []uint32{}},
		{"over", []uint64{math.MaxUint32, math.MaxUint32, 1}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := fitUint32(tt.in)
			var sum uint64
			for _, w := range got {
				if w < 1 {
					t.Errorf("weight 0 in %v", got)
				}
				sum += uint64(w)
			}
			if sum > math.MaxUint32 {
				t.Errorf("sum %d over MaxUint32", sum)
			}
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			} else if got[0] != got[1] || got[0] < got[2] {
				t.Errorf("%v: ratios lost", got)
			}
		})
	}
}

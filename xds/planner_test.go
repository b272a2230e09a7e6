package xds

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

// TestPlannerWorkedExample drives the planner with the design's worked
// example through the load table, and reads the EDS each client zone gets:
// clients 40/40/20 % in zones a/b/c, capacity 25/50/25 % → zone-a keeps
// 62.5% local and spills 25% to b and 12.5% to c; b and c stay local.
func TestPlannerWorkedExample(t *testing.T) {
	store := registry.NewStore()
	var ops []registry.Op
	for zone, n := range map[string]int{"a": 5, "b": 10, "c": 5} {
		for i := range n {
			ops = append(ops, registry.Upsert("web", &registry.Endpoint{
				ID: fmt.Sprintf("%s-%d", zone, i), Address: netip.MustParseAddr(fmt.Sprintf("10.0.%d.%d", zone[0], i+1)),
				Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
				Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy, Weight: 100,
				Source: registry.SourceStatic, Registered: time.Now().Add(-time.Hour),
			}))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	noProbe := 0.0
	s, p := newZoneAware(t, Config{Store: store}, zoneaware.Config{ProbeShare: &noProbe})
	now := time.Now()
	// rps from client zone to upstream zone: demand 400/400/200, upstream
	// totals 250/500/250.
	flows := map[string]map[string]uint64{
		"a": {"a": 250, "b": 100, "c": 50},
		"b": {"b": 400},
		"c": {"c": 200},
	}
	stream := uint64(0)
	for cz, to := range flows {
		stream++
		cs := &v3endpointpb.ClusterStats{ClusterName: "web", LoadReportInterval: durationpb.New(time.Second)}
		for uz, rps := range to {
			cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &v3endpointpb.UpstreamLocalityStats{
				Locality:                &v3corepb.Locality{Region: "r1", Zone: uz},
				TotalIssuedRequests:     rps,
				TotalSuccessfulRequests: rps,
			})
		}
		s.loads.Record(stream, load.Node{Zone: cz, Label: cz, Cluster: "checkout"}, cs, now, store.Snapshot(), nil)
	}
	p.Cycle(now)

	want := map[string]map[string]uint32{
		"a": {"a": 6250, "b": 2500, "c": 1250},
		"b": {"b": 10000, "a": 1, "c": 1},
		"c": {"c": 10000, "a": 1, "b": 1},
	}
	for cz, w := range want {
		r, _ := s.lookup(3, "web", cz, store.Snapshot())
		cla := &v3endpointpb.ClusterLoadAssignment{}
		if err := r.any.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		got := map[string]uint32{}
		for _, l := range cla.GetEndpoints() {
			got[l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("client zone %s locality weights (-want +got):\n%s", cz, diff)
		}
	}
	res := p.Plan("web").Result
	if res == nil || res.Fallback != zoneaware.FallbackNone {
		t.Fatalf("plan = %+v, want computed from load reports", res)
	}
	if res.SameZone < 0.849 || res.SameZone > 0.851 {
		t.Errorf("same-zone = %.3f, want 0.85", res.SameZone)
	}
	// Zones share an encoded resource only when they get the same weights.
	ra, _ := s.lookup(3, "web", "a", store.Snapshot())
	rb, _ := s.lookup(3, "web", "b", store.Snapshot())
	if ra == rb {
		t.Error("zone a and zone b got the same EDS resource")
	}
	// Stale data fails open: capacity-proportional for everyone.
	p.Cycle(now.Add(time.Minute))
	if res := p.Plan("web").Result; res.Fallback.FailOpen() == false {
		t.Errorf("a minute later, fallback = %v, want a fail-open one", res.Fallback)
	}
	r, _ := s.lookup(3, "web", "a", store.Snapshot())
	cla := &v3endpointpb.ClusterLoadAssignment{}
	if err := r.any.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		got[l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
	}
	if diff := cmp.Diff(map[string]uint32{"a": 2500, "b": 5000, "c": 2500}, got); diff != "" {
		t.Errorf("fail-open weights for zone a (-want +got):\n%s", diff)
	}
}

// newZoneAware returns a Server whose plans come from a weights.Planner
// fed by the Server, wired as cmd/spillway wires them. Neither runs: the
// test drives the cycles.
func newZoneAware(tb testing.TB, cfg Config, zc zoneaware.Config) (*Server, *weights.Planner) {
	tb.Helper()
	var p *weights.Planner
	cfg.Plans = PlanFunc(func(service string) *weights.Plan { return p.Plan(service) })
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if zc.ReportInterval == 0 {
		zc.ReportInterval = s.cfg.LRSInterval
	}
	p, err = weights.NewPlanner(weights.Config{
		Registry: cfg.Store, Loads: s.Loads(), Clients: s, Zones: s, PortName: s.cfg.PortName,
		ZoneAware: zc, OnChange: s.Dispatch, Registerer: cfg.Registerer,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s, p
}

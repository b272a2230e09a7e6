package xds

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
)

// randomService is a service of up to 40 endpoints over up to 3 regions
// of 3 zones, some of them not healthy, some without the grpc port, with
// random registry weights, built by the store as the server sees it.
func randomService(t *testing.T, rng *rand.Rand, name string) *registry.Service {
	t.Helper()
	store := registry.NewStore()
	n := 1 + rng.IntN(40)
	var ops []registry.Op
	for i := range n {
		ports := []registry.Port{{Name: "grpc", Number: uint16(8000 + rng.IntN(3)), Protocol: registry.TCP}}
		if rng.IntN(8) == 0 {
			ports = []registry.Port{{Name: "http", Number: 80, Protocol: registry.TCP}}
		}
		health := registry.Healthy
		switch rng.IntN(6) {
		case 0:
			health = registry.Unhealthy
		case 1:
			health = registry.Draining
		}
		ops = append(ops, registry.Upsert(name, &registry.Endpoint{
			ID:       fmt.Sprintf("%s-%d", name, i),
			Address:  netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(i >> 8), byte(i)}),
			Ports:    ports,
			Locality: registry.Locality{Region: fmt.Sprintf("r%d", rng.IntN(3)), Zone: fmt.Sprintf("z%d", rng.IntN(3))},
			Health:   health, Weight: uint32(rng.IntN(200)), Source: registry.SourceStatic,
		}))
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	svc, ok := store.Snapshot().Service(name)
	if !ok {
		t.Fatal("service not stored")
	}
	return svc
}

// randomBuild draws what a build of svc takes besides the service:
// priorities by region (r1 left out) a third of the time, and endpoint
// weights from a plan (some endpoints) or by locality a third of the
// time each.
func randomBuild(rng *rand.Rand, svc *registry.Service) (map[string]int, endpointWeights) {
	var prio map[string]int
	if rng.IntN(3) == 0 {
		prio = map[string]int{"r0": 0, "r2": 1} // r1 left out
	}
	var epw endpointWeights
	switch rng.IntN(3) {
	case 1:
		epw.byID = map[string]weights.EndpointWeight{}
		for _, e := range svc.Endpoints {
			if rng.IntN(2) == 0 {
				epw.byID[e.ID] = weights.EndpointWeight{Zone: e.Locality.Zone, Weight: uint32(rng.IntN(1000))}
			}
		}
	case 2:
		epw.localities = true
	}
	return prio, epw
}

// A builder reused for service after service must build what a fresh one
// builds: nothing of an earlier service may show in a later one.
func TestCLABuilderReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	reused := new(claBuilder)
	for i := range 300 {
		svc := randomService(t, rng, fmt.Sprintf("svc%d", i%7))
		prio, epw := randomBuild(rng, svc)
		zone := fmt.Sprintf("z%d", rng.IntN(3))
		fresh, errF := clusterLoadAssignmentWith(svc, "grpc", zone, healthyCountWeights, epw, prio)
		got, errR := reused.build(svc, "grpc", zone, healthyCountWeights, epw, prio)
		if (errF == nil) != (errR == nil) {
			t.Fatalf("build %d: fresh builder err %v, reused %v", i, errF, errR)
		}
		if errF != nil {
			continue
		}
		want, errF := encode(svc.Name, fresh)
		res, errR := encode(svc.Name, got)
		if fmt.Sprint(errF) != fmt.Sprint(errR) {
			t.Fatalf("build %d: fresh builder's resource: %v, reused: %v", i, errF, errR)
		}
		if errF != nil {
			continue // a priority missing: both refuse it
		}
		if !bytes.Equal(res.raw, want.raw) {
			t.Fatalf("build %d (%s, %d endpoints, zone %s): the reused builder's EDS differs from a fresh one's:\n got %v\nwant %v", i, svc.Name, len(svc.Endpoints), zone, got, fresh)
		}
	}
}

// BenchmarkBuildEDS builds and encodes one ClusterLoadAssignment of 9,
// 1,000 and 10,000 endpoints (the region's largest service), as a change
// to the service does for each zone variant.
//
//	go test -run '^$' -bench BenchmarkBuildEDS -benchmem -count 6 ./xds/
func BenchmarkBuildEDS(b *testing.B) {
	for _, n := range []int{9, 1000, 10000} {
		svc, _ := benchStore(b, n).Snapshot().Service("web")
		s := &Server{}
		s.cfg.PortName = "grpc"
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.buildEDS(svc, "zone-a", healthyCountWeights, endpointWeights{}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package xds

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/spillway/spillway/registry"
)

// TestEDSSharedMatchesBuild: a variant copied from a service's shared
// endpoints is, byte for byte, the resource a full build encodes, and is
// refused exactly when a full build is, over random services, endpoint
// weights, client zones, region priorities and locality weights
// (including weights of 0, the wrong number of them, and sums past
// uint32), with hostnames and without. Each service takes a series of variants on one cache entry, as
// its streams' lookups do under one version and plan generation.
func TestEDSSharedMatchesBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := &Server{}
	s.cfg.PortName = "grpc"
	prios := []map[string]int{nil, {"r0": 0, "r2": 1}, {"r0": 0, "r1": 1, "r2": 2}, {"r2": 0}, {"r1": 1, "r2": 0}, {"r0": 1}, {"r0": 0, "r1": 200}}
	var copied, built, refused int
	for i := range 400 {
		svc := randomService(t, rng, fmt.Sprintf("svc%d", i))
		_, epw := randomBuild(rng, svc)
		s.cfg.OmitHostnames = i%2 == 1 // both forms of every endpoint
		// A quarter of the services get, for one client zone, weights
		// gRPC refuses: a 0, a sum past uint32, or one too few.
		odd, oddZone := rng.IntN(12), fmt.Sprintf("z%d", rng.IntN(4))
		lw := func(svc *registry.Service, zone string, locs []Locality) []uint32 {
			out := localZoneWeights(svc, zone, locs)
			if zone != oddZone {
				return out
			}
			switch odd {
			case 0:
				out[len(out)/2] = 0
			case 1:
				for k := range out {
					out[k] = math.MaxUint32 / 2
				}
			case 2:
				out = out[1:]
			}
			return out
		}
		e := &entry{}
		for v := range 8 {
			zone := fmt.Sprintf("z%d", rng.IntN(4)) // z3: no local endpoints
			prio := prios[rng.IntN(len(prios))]
			want, wantErr := s.buildEDS(svc, zone, lw, epw, prio)
			if e.shared != nil {
				got, ok, err := e.shared.assemble(svc, zone, lw, epw, prio)
				if ok {
					copied++
					if (err == nil) != (wantErr == nil) {
						t.Fatalf("service %d, variant %d (zone %s, priorities %v): copied err %v, built err %v", i, v, zone, prio, err, wantErr)
					}
					if err == nil && (!bytes.Equal(got.raw, want.raw) || got.version != want.version || !bytes.Equal(got.field.ReadOnlyData(), want.field.ReadOnlyData())) {
						t.Fatalf("service %d, variant %d (zone %s, priorities %v, %d endpoints): the copied variant differs from a build:\n got %x\nwant %x", i, v, zone, prio, len(svc.Endpoints), got.raw, want.raw)
					}
				}
			}
			got, err := s.buildEDSShared(e, svc, zone, lw, epw, prio)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("service %d, variant %d: buildEDSShared err %v, buildEDS err %v", i, v, err, wantErr)
			}
			if err != nil {
				refused++
				continue
			}
			built++
			if !bytes.Equal(got.raw, want.raw) {
				t.Fatalf("service %d, variant %d: buildEDSShared differs from buildEDS", i, v)
			}
		}
	}
	t.Logf("%d variants copied, %d served, %d refused", copied, built, refused)
	if copied < 1000 || refused < 50 {
		t.Fatalf("%d variants copied and %d refused: the draws no longer exercise the copy and its checks", copied, refused)
	}
}

// TestEDSSharedPriorityLimit: a variant whose priorities run past 128
// (a region per priority, 131 of them) is refused when copied as when
// built: the proto's own rule, which only so many regions reach.
func TestEDSSharedPriorityLimit(t *testing.T) {
	store := registry.NewStore()
	prio := map[string]int{}
	var ops []registry.Op
	for i := range 131 {
		region := fmt.Sprintf("r%03d", i)
		prio[region] = i
		ops = append(ops, registry.Upsert("web", &registry.Endpoint{
			ID: fmt.Sprintf("e%d", i), Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: region, Zone: "z0"}, Health: registry.Healthy, Source: registry.SourceStatic,
		}))
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	svc, _ := store.Snapshot().Service("web")
	s := &Server{}
	s.cfg.PortName = "grpc"
	e := &entry{}
	if _, err := s.buildEDSShared(e, svc, "z0", healthyCountWeights, endpointWeights{}, nil); err != nil {
		t.Fatalf("every locality at priority 0: %v", err)
	}
	if _, err := s.buildEDS(svc, "z0", healthyCountWeights, endpointWeights{}, prio); err == nil {
		t.Fatal("a build with priorities 0..130 passed")
	}
	_, ok, err := e.shared.assemble(svc, "z0", healthyCountWeights, endpointWeights{}, prio)
	if !ok || err == nil || !strings.Contains(err.Error(), "priority: 129, want at most 128") {
		t.Fatalf("copied with priorities 0..130: ok %v, err %v; want a refusal of priority 129", ok, err)
	}
}

// BenchmarkEDSVariants: the EDS of one service version for clients in its
// three zones, as a change to a service with clients everywhere costs:
// built in full three times, and built once and copied twice
// (buildEDSShared). The zones' locality weights differ, as zone-aware
// routing's do.
//
//	go test -run '^$' -bench BenchmarkEDSVariants -benchmem -count 6 ./xds/
func BenchmarkEDSVariants(b *testing.B) {
	zones := []string{"zone-a", "zone-b", "zone-c"}
	for _, n := range []int{9, 1000, 10000} {
		svc, _ := benchStore(b, n).Snapshot().Service("web")
		s := &Server{}
		s.cfg.PortName = "grpc"
		for _, how := range []string{"built", "shared"} {
			b.Run(fmt.Sprintf("endpoints=%d/%s", n, how), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					e := &entry{} // a new version: nothing shared yet
					for _, z := range zones {
						var err error
						if how == "built" {
							_, err = s.buildEDS(svc, z, localZoneWeights, endpointWeights{}, nil)
						} else {
							_, err = s.buildEDSShared(e, svc, z, localZoneWeights, endpointWeights{}, nil)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// localZoneWeights weighs the localities in the client's zone 9,900 and
// the others 50, as zone-aware routing keeps most traffic in the zone.
func localZoneWeights(_ *registry.Service, zone string, locs []Locality) []uint32 {
	out := make([]uint32, len(locs))
	for k, l := range locs {
		out[k] = 50
		if l.Zone == zone {
			out[k] = 9900
		}
	}
	return out
}

package weights

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/spillway/spillway/internal/regionshape"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/zoneaware"
)

// regionZones are the zones of issue 31's region.
var regionZones = []string{"zone-a", "zone-b", "zone-c"}

// regionSizes is the endpoint count of each of n services averaging 20
// endpoints, skewed as the region of issue 31 (e2e/bench/scale).
func regionSizes(n int) []int { return regionshape.Sizes(20*n, n) }

// regionBench is a planner over n region-shaped services with load
// reports for every one of them: 3 client zones calling 3 zones, 90% of
// each client zone's calls to its own zone. Each cycle Flip moves the
// demand of the next services between two profiles (zone-a heavy and
// zone-b heavy), which changes their vectors; every other service's load
// stays exactly as it was.
type regionBench struct {
	p        *Planner
	services []string
	loads    *regionLoads
	next     int
	now      time.Time
}

// regionLoads is a LoadSource over a fixed, sorted set of flows, moved
// to each cycle's time.
type regionLoads struct {
	flows   []load.Load
	profile []int // per service, 0 or 1
}

func (r *regionLoads) Loads(service string, _ time.Time) []load.Load {
	if service == "" {
		return slices.Clone(r.flows) // a fresh slice, as load.Table gives
	}
	var out []load.Load
	for _, l := range r.flows {
		if l.Service == service {
			out = append(out, l)
		}
	}
	return out
}

// regionDemand are the two demand profiles (rps by client zone).
var regionDemand = [2][3]float64{{600, 200, 200}, {200, 600, 200}}

// set writes service i's flows (9 rows from index 9·i) for its profile
// at time at.
func (r *regionLoads) set(i int, svc string, at time.Time) {
	for ci, cz := range regionZones {
		d := regionDemand[r.profile[i]][ci]
		for zi, z := range regionZones {
			split := 0.05
			if zi == ci {
				split = 0.9
			}
			rps := d * split
			r.flows[9*i+3*ci+zi] = load.Load{
				Key:    load.Key{Service: svc, ClientZone: cz, ClientService: "client", Locality: registry.Locality{Region: "r1", Zone: z}},
				Issued: rps, Succeeded: rps, InProgress: uint64(rps / 100), Reporters: 2, Updated: at,
			}
		}
	}
}

func newRegionBench(tb testing.TB, n int) *regionBench {
	tb.Helper()
	store := registry.NewStore()
	reg := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // long past slow start
	services := make([]string, n)
	clients := fakeClients{}
	var ops []registry.Op
	ep := 0
	for i, size := range regionSizes(n) {
		svc := fmt.Sprintf("svc-%05d", i)
		services[i] = svc
		for j := range size {
			a := netip.AddrFrom4([4]byte{10, byte(ep >> 16), byte(ep >> 8), byte(ep)})
			ops = append(ops, registry.Upsert(svc, &registry.Endpoint{
				ID: fmt.Sprintf("ep-%d", ep), Address: a,
				Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
				Locality: registry.Locality{Region: "r1", Zone: regionZones[j%3]}, Health: registry.Healthy,
				Source: registry.SourceStatic, Registered: reg,
			}))
			ep++
		}
		clients[svc] = map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 2}
		// Applied in batches: one Apply of every service spends most of
		// its time finding each service among those it changed.
		if len(ops) >= 2000 || i == n-1 {
			if _, err := store.Apply(ops...); err != nil {
				tb.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	loads := &regionLoads{flows: make([]load.Load, 9*n), profile: make([]int, n)}
	p, err := NewPlanner(Config{
		Registry: store, Loads: loads, Clients: clients, Zones: fakeZones{},
		ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
		// cmd/spillway always sets a strategy source; a service without a
		// config gets zone-aware alone.
		Strategies: StrategyFunc(func(string) Strategy { return Strategy{ZoneAware: true} }),
	})
	if err != nil {
		tb.Fatal(err)
	}
	rb := &regionBench{p: p, services: services, loads: loads, now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	// Settle: the first cycles publish every plan and fill the states.
	for range 3 {
		rb.prepare(0)
		rb.p.Cycle(rb.now)
	}
	return rb
}

// prepare moves the clock and the flows one cycle on and flips the
// demand of the next change services.
func (rb *regionBench) prepare(change int) {
	rb.now = rb.now.Add(10 * time.Second)
	for range change {
		i := rb.next % len(rb.services)
		rb.loads.profile[i] ^= 1
		rb.next++
	}
	for i, svc := range rb.services {
		rb.loads.set(i, svc, rb.now.Add(-time.Second))
	}
}

// cycleStats is what one measured cycle cost.
type cycleStats struct {
	took      time.Duration
	bytes     uint64
	allocs    uint64
	replaced  int // services whose plan the cycle replaced
	changed   int // services whose Gen changed
	published int // services with a plan
}

// measure runs one cycle and reads its cost. The plans of before are
// compared with after's only outside the timed part.
func (rb *regionBench) measure() cycleStats {
	before := *rb.p.plans.Load()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	changed := rb.p.cycle(rb.now)
	took := time.Since(start)
	runtime.ReadMemStats(&m1)
	after := *rb.p.plans.Load()
	st := cycleStats{took: took, bytes: m1.TotalAlloc - m0.TotalAlloc, allocs: m1.Mallocs - m0.Mallocs, changed: len(changed), published: len(after)}
	for name, pl := range after {
		if before[name] != pl {
			st.replaced++
		}
	}
	return st
}

// BenchmarkPlannerCycleRegion is one planner cycle over the region of
// issue 31 at 5,000, 25,000 and 50,000 services (mean 20 endpoints,
// skewed, 3 zones, load for every service), with none, 10% and every
// service's demand moving (and with it its vectors). The target of issue
// 31: a cycle over 50,000 services within 1 s, and at most 2 KiB
// allocated per service whose plan changes. B/changed is the cycle's
// allocation over the services whose plan it replaced (the fixed cost
// of the cycle spread over them; see B/cycle of changed=0% for that
// cost alone); B/changed-over-idle is what the cycle allocated beyond
// one where nothing changed, per plan replaced. The load source gives a
// fresh slice of every flow each cycle, as load.Table does (about 1.7
// KiB per service here, in every cycle's bytes).
//
//	go test -run '^$' -bench BenchmarkPlannerCycleRegion -benchtime 3x ./weights/
func BenchmarkPlannerCycleRegion(b *testing.B) {
	for _, n := range []int{5_000, 25_000, 50_000} {
		rb := newRegionBench(b, n)
		for _, pct := range []int{0, 10, 100} {
			b.Run(fmt.Sprintf("services=%d/changed=%d%%", n, pct), func(b *testing.B) {
				change := n * pct / 100
				// The cost of a cycle where nothing changes, to tell what
				// the changed services add.
				rb.prepare(0)
				runtime.GC()
				base := rb.measure()
				var sum cycleStats
				cycles := 0
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					rb.prepare(change)
					runtime.GC() // each cycle starts from a collected heap
					b.StartTimer()
					st := rb.measure()
					sum.took += st.took
					sum.bytes += st.bytes
					sum.allocs += st.allocs
					sum.replaced += st.replaced
					sum.changed += st.changed
					cycles++
				}
				b.StopTimer()
				c := float64(cycles)
				b.ReportMetric(float64(sum.took.Microseconds())/1000/c, "ms/cycle")
				b.ReportMetric(float64(sum.bytes)/c, "B/cycle")
				b.ReportMetric(float64(sum.allocs)/c, "allocs/cycle")
				b.ReportMetric(float64(sum.changed)/c, "gen-changed/cycle")
				b.ReportMetric(float64(sum.replaced)/c, "replaced/cycle")
				if sum.replaced > 0 {
					b.ReportMetric(float64(sum.bytes)/float64(sum.replaced), "B/changed")
					over := max(0, float64(sum.bytes)-c*float64(base.bytes))
					b.ReportMetric(over/float64(sum.replaced), "B/changed-over-idle")
				}
			})
		}
	}
}

// BenchmarkPlannerHeldRegion is what a planner holds between cycles for
// the region of issue 31 at 50,000 services: the live heap it keeps
// (every service's zone-aware state and published plan), per service,
// after idle cycles and after one where a tenth of the services' demand
// moved. It is read as the heap after a GC with the planner, less the
// heap after one without it (the registry and the inputs kept).
//
//	go test -run '^$' -bench BenchmarkPlannerHeldRegion -benchtime 1x ./weights/
func BenchmarkPlannerHeldRegion(b *testing.B) {
	const n = 50_000
	for _, pct := range []int{0, 10} {
		b.Run(fmt.Sprintf("services=%d/changed=%d%%", n, pct), func(b *testing.B) {
			var held float64
			for b.Loop() {
				b.StopTimer()
				rb := newRegionBench(b, n)
				for range 2 {
					rb.prepare(0)
					rb.p.cycle(rb.now)
				}
				rb.prepare(n * pct / 100)
				rb.p.cycle(rb.now)
				cfg := rb.p.cfg
				with := liveHeap()
				rb.p = nil
				without := liveHeap()
				runtime.KeepAlive(cfg)
				runtime.KeepAlive(rb)
				held += float64(with) - float64(without)
				b.StartTimer()
			}
			b.ReportMetric(held/float64(b.N)/n, "held-B/service")
		})
	}
}

// liveHeap is the heap in use after a GC.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

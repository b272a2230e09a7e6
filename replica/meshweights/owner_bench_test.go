package meshweights

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

// The scale of issue 13's benchmark: 10,000 services with 6 endpoints
// each (2 per zone), clients in the same 3 zones, seen by 3 replicas;
// 16 shards, this owner (r1) holds 6 (benchOwnership), r2 5, r3 5.
const (
	ownerBenchServices = 10_000
	ownerBenchReplicas = 3
)

var ownerBenchZones = []string{"zone-a", "zone-b", "zone-c"}

// ownerOf is the replica (0..2) that owns service: shards 0-5 r1, 6-10
// r2, 11-15 r3.
func ownerOf(service string) int {
	switch s := benchShard(service); {
	case s < 6:
		return 0
	case s < 11:
		return 1
	default:
		return 2
	}
}

func ownerBenchRegistry(b *testing.B, services []string) *registry.Store {
	b.Helper()
	store := registry.NewStore()
	reg := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // long past slow start
	var ops []registry.Op
	for si, svc := range services {
		for zi, zone := range ownerBenchZones {
			for i := range 2 {
				ops = append(ops, registry.Upsert(svc, &registry.Endpoint{
					ID:       fmt.Sprintf("%s-%d", zone, i),
					Address:  netip.AddrFrom4([4]byte{10, byte(si >> 8), byte(si), byte(zi*2 + i + 1)}),
					Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
					Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy,
					Source: registry.SourceStatic, Registered: reg,
				}))
			}
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		b.Fatal(err)
	}
	return store
}

// demandProfiles are the two client-zone demands (rps, mesh-wide) a
// service switches between when its demand changes.
var demandProfiles = [2][3]float64{{600, 200, 200}, {200, 600, 200}}

// ownerBenchSummary is replica r's summary of services (a third of
// each service's demand), with service i on demandProfiles[profile[i]].
// Flows follow a fixed split: 90% same zone, 5% to each other zone.
func ownerBenchSummary(r int, services []string, profile []int, at time.Time) load.Summary {
	s := load.Summary{Replica: fmt.Sprintf("r%d", r+1), At: at, Interval: DefaultInterval, Services: make([]load.ServiceSummary, len(services))}
	for i, svc := range services {
		ss := load.ServiceSummary{Service: svc, Flows: make([]load.Flow, 0, 9), Clients: make([]load.ClientCount, 0, 3)}
		for ci, cz := range ownerBenchZones {
			d := demandProfiles[profile[i]][ci] / ownerBenchReplicas
			for zi, z := range ownerBenchZones {
				split := 0.05
				if zi == ci {
					split = 0.9
				}
				rps := d * split
				ss.Flows = append(ss.Flows, load.Flow{
					ClientZone: cz, Zone: z, Issued: rps, Succeeded: rps, InProgress: uint64(rps / 100),
					Reporters: 2, Updated: at.Add(-time.Second),
				})
			}
			ss.Clients = append(ss.Clients, load.ClientCount{Zone: cz, Count: 2})
		}
		s.Services[i] = ss
	}
	return s
}

// wireBytes is the encoded size of what replica r sends the other owners
// per interval: its summaries of the services it does not own, in
// messages of at most exchange.MaxServices services.
func wireBytes(s load.Summary, r int) int {
	n := 0
	var part []load.ServiceSummary
	flush := func() {
		if len(part) > 0 {
			n += proto.Size(exchange.ToProto(load.Summary{Replica: s.Replica, At: s.At, Interval: s.Interval, Services: part}))
			part = nil
		}
	}
	for o := range ownerBenchReplicas {
		if o == r {
			continue
		}
		for _, ss := range s.Services {
			if ownerOf(ss.Service) == o {
				part = append(part, ss)
				if len(part) == exchange.MaxServices {
					flush()
				}
			}
		}
		flush()
	}
	return n
}

// timedPlanner times the real planner's cycles inside Publisher.Cycle.
type timedPlanner struct {
	*weights.Planner
	spent time.Duration
}

func (p *timedPlanner) Cycle(now time.Time) {
	start := time.Now()
	p.Planner.Cycle(now)
	p.spent += time.Since(start)
}

// putOnlyKV hides a store's PutBatch: the publisher writes one Put per
// record, as with a store that has none.
type putOnlyKV struct{ systemstore.KV }

// BenchmarkOwnerCycle is issue 13's benchmark of the owner: per op one
// 10 s cycle of r1, the owner of 6 of 16 shards (3,756 of 10,000
// services): the 3 replicas' summaries of its services merged (Add, as
// the exchange server does), the real weights.Planner over the merged
// load, and Publisher.Cycle writing to a real etcd. Load is constant
// (changed=0) or 1% of the owned services switch demand profile each
// cycle. store=batch is etcdstore as it is (PutBatch, transactions of
// up to 128 records); store=put hides its PutBatch (one Put per record,
// 16 in flight), for comparison. It reports the phases' time, store writes by kind, etcd's
// revision growth, the checkpointed state's size, and the load bytes
// each replica sends the others per interval. ns/op and the allocations
// also count building the 3 summaries (the senders' work); cycle-ms is
// the owner's alone.
//
//	go test -run '^$' -bench BenchmarkOwnerCycle -benchtime 20x ./replica/meshweights
func BenchmarkOwnerCycle(b *testing.B) {
	services := make([]string, ownerBenchServices)
	for i := range services {
		services[i] = fmt.Sprintf("service-%05d", i)
	}
	store := ownerBenchRegistry(b, services)
	srv := etcdtest.Start(b)

	for _, bc := range []struct {
		changePct int
		store     string
	}{{0, "batch"}, {1, "put"}, {1, "batch"}, {10, "put"}, {10, "batch"}} {
		changePct := bc.changePct
		b.Run(fmt.Sprintf("services=10000/replicas=3/changed=%d%%/store=%s", changePct, bc.store), func(b *testing.B) {
			etcd, err := etcdstore.Open(b.Context(), etcdstore.Config{
				Endpoints: []string{srv.Endpoint}, Prefix: fmt.Sprintf("/owner-bench-%d-%s/", changePct, bc.store), RequestTimeout: 5 * time.Second,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer etcd.Close()
			var kv systemstore.KV = etcd
			if bc.store == "put" {
				kv = putOnlyKV{etcd}
			}
			// revision is etcd's revision now (a List's).
			revision := func() int64 {
				_, rev, err := etcd.List(b.Context(), ShardPrefix)
				if err != nil {
					b.Fatal(err)
				}
				return rev
			}

			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			merged := exchange.NewMerged(exchange.MergedConfig{Now: clock})
			var owned []string
			for _, svc := range services {
				if ownerOf(svc) == 0 {
					owned = append(owned, svc)
				}
			}
			planner, err := weights.NewPlanner(weights.Config{
				Registry: store, Loads: merged, Clients: merged, Zones: anyZoneSet{},
				ZoneAware: zoneaware.Config{}, Interval: DefaultInterval,
				Owns: func(svc string) bool { return ownerOf(svc) == 0 },
			})
			if err != nil {
				b.Fatal(err)
			}
			tp := &timedPlanner{Planner: planner}
			pub, err := NewPublisher(PublisherConfig{
				ID: "r1", KV: kv, Ownership: benchOwnership{}, Merged: benchMergedLoad{merged},
				Planner: tp, Services: func() []string { return services }, Interval: DefaultInterval,
			})
			if err != nil {
				b.Fatal(err)
			}

			// Each cycle: every replica's summary of the owned services
			// arrives (r1's own in process), then the owner's cycle.
			profile := make([]int, len(owned))
			change := len(owned) * changePct / 100
			next := 0
			var merge, owner time.Duration // Add; Publisher.Cycle with the planner
			var allocs, allocBytes uint64  // of the owner's part
			var ms0, ms1 runtime.MemStats
			sums := make([]load.Summary, ownerBenchReplicas)
			cycle := func() {
				for range change {
					profile[next%len(owned)] ^= 1
					next++
				}
				for r := range sums { // the senders' work, not timed
					sums[r] = ownerBenchSummary(r, owned, profile, now.Add(-time.Second))
				}
				runtime.ReadMemStats(&ms0)
				start := time.Now()
				for _, s := range sums {
					if err := merged.Add(s, now); err != nil {
						b.Fatal(err)
					}
				}
				merge += time.Since(start)
				start = time.Now()
				pub.Cycle(b.Context(), now)
				owner += time.Since(start)
				runtime.ReadMemStats(&ms1)
				allocs += ms1.Mallocs - ms0.Mallocs
				allocBytes += ms1.TotalAlloc - ms0.TotalAlloc
				now = now.Add(DefaultInterval)
			}
			// Warm up: the first cycle publishes every plan, later ones
			// let the calculation settle and spread the checkpoints.
			for range 2 * DefaultCheckpointEvery {
				cycle()
			}
			w0, rev0 := pub.Writes(), revision()
			merge, owner, tp.spent, allocs, allocBytes = 0, 0, 0, 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cycle()
			}
			b.StopTimer()
			w, rev := pub.Writes(), revision()
			n := float64(b.N)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
			b.ReportMetric(float64(len(owned)), "owned-services")
			b.ReportMetric(ms(merge), "merge-ms/cycle")
			b.ReportMetric(ms(tp.spent), "planner-ms/cycle")
			b.ReportMetric(ms(owner-tp.spent), "publish-ms/cycle")
			b.ReportMetric(ms(merge+owner), "cycle-ms")
			b.ReportMetric(float64(allocBytes)/(1<<20)/n, "owner-MiB/cycle")
			b.ReportMetric(float64(allocs)/n, "owner-allocs/cycle")
			b.ReportMetric(float64(w.Plan-w0.Plan)/n, "plan-writes/cycle")
			b.ReportMetric(float64(w.Heartbeat-w0.Heartbeat)/n, "heartbeat-writes/cycle")
			b.ReportMetric(float64(w.State-w0.State)/n, "state-writes/cycle")
			b.ReportMetric(float64(rev-rev0)/n, "etcd-revisions/cycle")
			var stateBytes int
			for _, svc := range owned {
				st, _ := planner.ExportState(svc)
				stateBytes += len(st)
			}
			b.ReportMetric(float64(stateBytes)/float64(len(owned)), "state-bytes/service")
			all := ownerBenchSummary(0, services, make([]int, len(services)), now)
			wire := wireBytes(all, 0)
			b.ReportMetric(float64(wire), "load-bytes/replica/interval")
			b.ReportMetric(float64(wire)/DefaultInterval.Seconds(), "load-bytes/s/replica")
		})
	}
}

// anyZoneSet keeps every client zone (as cmd/spillway's owner planner).
type anyZoneSet struct{}

func (anyZoneSet) Has(string) bool { return true }

// benchMergedLoad adapts exchange.Merged to MergedLoad, as cmd/spillway.
type benchMergedLoad struct{ m *exchange.Merged }

func (a benchMergedLoad) Acked(replica string, shard int, epoch int64, since time.Time) bool {
	return a.m.Acked(replica, shard, epoch, since)
}
func (a benchMergedLoad) Contributors(service string, now time.Time) []weights.Contributor {
	cs := a.m.Contributors(service, now)
	out := make([]weights.Contributor, len(cs))
	for i, c := range cs {
		out[i] = weights.Contributor{Replica: c.Replica, Age: c.Age}
	}
	return out
}

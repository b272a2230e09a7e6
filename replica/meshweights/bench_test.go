package meshweights

import (
	"fmt"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"hash/fnv"
	"testing"
	"time"

	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

// benchOwnership: 16 shards, this replica holds 0..5 (one of 3 replicas).
type benchOwnership struct{}

func benchShard(service string) int {
	h := fnv.New32a()
	h.Write([]byte(service))
	return int(h.Sum32() % DefaultShards)
}

func (benchOwnership) Owns(service string) bool { return benchShard(service) < 6 }
func (benchOwnership) Shard(service string) int { return benchShard(service) }
func (benchOwnership) Epoch(shard int) (int64, bool) {
	return 1, shard < 6
}
func (benchOwnership) LiveMembers() []string { return []string{"r1", "r2", "r3"} }

// benchPlanner returns one of two precomputed plans per service; each
// cycle it flips the plans of the next `change` services.
type benchPlanner struct {
	plans  map[string]*weights.Plan
	alt    [2]*weights.Plan
	order  []string
	next   int
	change int
	cycles int
	frozen bool // ExportState does not change with the cycles
}

func newBenchPlanner(services []string, change int) *benchPlanner {
	mk := func(a uint32) *weights.Plan {
		return &weights.Plan{Result: &zoneaware.Result{Routes: []zoneaware.Route{
			{ClientZone: "", Weights: []zoneaware.ZoneWeight{{Zone: "a", Weight: 2500, Share: .25}, {Zone: "b", Weight: 2500, Share: .25}, {Zone: "c", Weight: 5000, Share: .5}}},
			{ClientZone: "a", Weights: []zoneaware.ZoneWeight{{Zone: "a", Weight: a, Share: .6}, {Zone: "b", Weight: 2000, Share: .2}, {Zone: "c", Weight: 2000, Share: .2}}},
			{ClientZone: "b", Weights: []zoneaware.ZoneWeight{{Zone: "a", Weight: 1, Share: 0}, {Zone: "b", Weight: 10000, Share: 1}, {Zone: "c", Weight: 1, Share: 0}}},
			{ClientZone: "c", Weights: []zoneaware.ZoneWeight{{Zone: "a", Weight: 1, Share: 0}, {Zone: "b", Weight: 1, Share: 0}, {Zone: "c", Weight: 10000, Share: 1}}},
		}, Zones: []zoneaware.ZoneInfo{{Zone: "a", Healthy: 2}, {Zone: "b", Healthy: 2}, {Zone: "c", Healthy: 4}}}}
	}
	p := &benchPlanner{plans: map[string]*weights.Plan{}, alt: [2]*weights.Plan{mk(6000), mk(6100)}, change: change}
	for _, s := range services {
		if benchShard(s) < 6 {
			p.plans[s] = p.alt[0]
			p.order = append(p.order, s)
		}
	}
	return p
}

func (p *benchPlanner) Cycle(time.Time) {
	p.cycles++
	for range p.change {
		s := p.order[p.next%len(p.order)]
		p.next++
		if p.plans[s] == p.alt[0] {
			p.plans[s] = p.alt[1]
		} else {
			p.plans[s] = p.alt[0]
		}
	}
}
func (p *benchPlanner) Plan(s string) *weights.Plan { return p.plans[s] }
func (p *benchPlanner) ExportState(s string) ([]byte, bool) {
	if p.frozen {
		return fmt.Appendf(nil, `{"s":%q}`, s), true
	}
	return fmt.Appendf(nil, `{"s":%q,"cycle":%d}`, s, p.cycles), true
}
func (p *benchPlanner) ImportState(service string, b []byte) error { return nil }

// BenchmarkPublisherCycle: the owner's cycle (publisher work, planner
// precomputed) for 10,000 services over 3 replicas (16 shards, 6 held),
// with 0, 1% and 10% of the owned plans changing each cycle. Reports
// store writes per cycle by kind.
func BenchmarkPublisherCycle(b *testing.B) {
	services := testServices(10000)
	for _, change := range []int{0, 33, 333} {
		b.Run(fmt.Sprintf("services=10000/changed=%d", change), func(b *testing.B) {
			kv := systemstoretest.NewMemKV()
			pl := newBenchPlanner(services, change)
			pub, err := NewPublisher(PublisherConfig{
				ID: "r1", KV: kv, Ownership: benchOwnership{}, Merged: &fakeMerged{fresh: map[string]bool{"r1": true, "r2": true, "r3": true}},
				Planner: pl, Services: func() []string { return services }, Interval: interval,
			})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			pub.Cycle(b.Context(), now) // the first cycle publishes every owned plan
			start := pub.Writes()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				now = now.Add(interval)
				pub.Cycle(b.Context(), now)
				kv.DropLog() // no watcher: do not keep the change log
			}
			b.StopTimer()
			w := pub.Writes()
			n := float64(b.N)
			b.ReportMetric(float64(len(pl.order)), "owned-services")
			b.ReportMetric(float64(w.Plan-start.Plan)/n, "plan-writes/cycle")
			b.ReportMetric(float64(w.Heartbeat-start.Heartbeat)/n, "heartbeat-writes/cycle")
			b.ReportMetric(float64(w.State-start.State)/n, "state-writes/cycle")
		})
	}
}

// BenchmarkSelectorRefresh: every replica's refresh of 10,000 services,
// all served from published plans.
func BenchmarkSelectorRefresh(b *testing.B) {
	services := testServices(10000)
	kv := systemstoretest.NewMemKV()
	sub, err := NewSubscriber(SubscriberConfig{KV: kv})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	pl := newBenchPlanner(services, 0)
	for s := range DefaultShards {
		kv.Put(b.Context(), ShardKey(s), encode(b, Heartbeat{V: 1, Owner: "r1", Epoch: 1, Cycle: 1, At: now}))
	}
	for _, svc := range services {
		rec := PlanRecord{V: 1, Service: svc, Owner: "r1", Epoch: 1, Shard: benchShard(svc), Published: now, Result: pl.alt[0].Result}
		kv.Put(b.Context(), PlanKey(svc), encode(b, &rec))
	}
	if _, err := sub.Sync(b.Context()); err != nil {
		b.Fatal(err)
	}
	sel, err := NewSelector(SelectorConfig{Subscriber: sub, Local: newFakeLocal(nil), Services: func() []string { return services }, Interval: interval})
	if err != nil {
		b.Fatal(err)
	}
	sel.Refresh(now)
	if m, _ := sel.Sources(); m != len(services) {
		b.Fatalf("mesh services = %d, want %d", m, len(services))
	}
	b.ReportAllocs()
	for b.Loop() {
		sel.Refresh(now)
	}
}

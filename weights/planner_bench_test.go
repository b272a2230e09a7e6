package weights

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/subset"
	"github.com/spillway/spillway/weights/zoneaware"
)

// BenchmarkPlannerCycle is one planner cycle over n services of 9
// endpoints in 3 zones, each with clients in every zone and no load
// reports, when nothing changed since the previous cycle: what an idle
// server spends every Interval.
func BenchmarkPlannerCycle(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			store := registry.NewStore()
			var ops []registry.Op
			clients := fakeClients{}
			zones := []string{"zone-a", "zone-b", "zone-c"}
			for s := range n {
				name := fmt.Sprintf("svc-%d", s)
				clients[name] = map[string]int{}
				for i := range 9 {
					ops = append(ops, registry.Upsert(name, &registry.Endpoint{
						ID: fmt.Sprintf("ep-%d", i), Address: netip.AddrFrom4([4]byte{10, byte(s >> 8), byte(s), byte(i + 1)}),
						Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
						Locality: registry.Locality{Region: "r1", Zone: zones[i%3]}, Health: registry.Healthy,
						Source: registry.SourceStatic, Registered: t0.Add(-time.Hour),
					}))
				}
				for _, z := range zones {
					clients[name][z] = 3
				}
			}
			if _, err := store.Apply(ops...); err != nil {
				b.Fatal(err)
			}
			p, err := NewPlanner(Config{
				Registry: store, Loads: fakeLoads{}, Clients: clients, Zones: fakeZones{},
				ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
			})
			if err != nil {
				b.Fatal(err)
			}
			now := t0
			for range 3 {
				now = now.Add(10 * time.Second)
				p.Cycle(now)
			}
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(10 * time.Second)
				if changed := p.cycle(now); len(changed) != 0 {
					b.Fatalf("idle cycle changed %d plans", len(changed))
				}
			}
		})
	}
}

// slotClients is fakeClients that also numbers subset slots: every
// service's clients of each zone hold that many slots.
type slotClients struct{ fakeClients }

func (c slotClients) SubsetSlots(service string) map[subset.Group]int {
	zones, ok := c.fakeClients[service]
	if !ok {
		return nil
	}
	m := map[subset.Group]int{}
	for z, n := range zones {
		m[subset.Group{Zone: z}] = n
	}
	return m
}

// BenchmarkPlannerCycleSubsets is an idle planner cycle over 20 services
// of 100 endpoints in 3 zones with 33 clients per zone (xdsbench's
// subset data set), without subsets and with subsets of 10: what the
// subsets add to an idle server's every Interval.
func BenchmarkPlannerCycleSubsets(b *testing.B) {
	for _, size := range []int{0, 10} {
		b.Run(fmt.Sprintf("subset_size=%d", size), func(b *testing.B) {
			store := registry.NewStore()
			var ops []registry.Op
			clients := slotClients{fakeClients{}}
			zones := []string{"zone-a", "zone-b", "zone-c"}
			for s := range 20 {
				name := fmt.Sprintf("svc-%d", s)
				clients.fakeClients[name] = map[string]int{}
				for i := range 100 {
					ops = append(ops, registry.Upsert(name, &registry.Endpoint{
						ID: fmt.Sprintf("ep-%03d", i), Address: netip.AddrFrom4([4]byte{10, byte(s), byte(i >> 8), byte(i + 1)}),
						Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
						Locality: registry.Locality{Region: "r1", Zone: zones[i%3]}, Health: registry.Healthy,
						Source: registry.SourceStatic, Registered: t0.Add(-time.Hour),
					}))
				}
				for _, z := range zones {
					clients.fakeClients[name][z] = 33
				}
			}
			if _, err := store.Apply(ops...); err != nil {
				b.Fatal(err)
			}
			strategy := Strategy{ZoneAware: true}
			if size > 0 {
				strategy.Subset = SubsetConfig{Mode: subset.Deterministic, Size: size}
			}
			p, err := NewPlanner(Config{
				Registry: store, Loads: fakeLoads{}, Clients: clients, Zones: fakeZones{},
				ZoneAware:  zoneaware.Config{ReportInterval: 10 * time.Second},
				Strategies: StrategyFunc(func(string) Strategy { return strategy }),
			})
			if err != nil {
				b.Fatal(err)
			}
			now := t0
			for range 3 {
				now = now.Add(10 * time.Second)
				p.Cycle(now)
			}
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(10 * time.Second)
				if changed := p.cycle(now); len(changed) != 0 {
					b.Fatalf("idle cycle changed %d plans", len(changed))
				}
			}
		})
	}
}

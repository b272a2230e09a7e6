package weights

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/subset"
	"github.com/spillway/spillway/weights/zoneaware"
)

// splitClients counts clients (the demand) and subset slots apart, so
// that a test can move one without the other.
type splitClients struct {
	counts map[string]map[string]int
	slots  map[string]map[subset.Group]int
	asked  []string // the services SubsetSlots was asked for
}

// TestPlannerAsksSlotsOfSubsetServices: the planner reads the slots of
// the services whose strategy gives subsets, and of no other (the slots
// of every service, counted each cycle under the xds hub's lock, were
// about 200 ms a cycle at 50,000 streams with no subsets anywhere).
func TestPlannerAsksSlotsOfSubsetServices(t *testing.T) {
	store := registry.NewStore()
	var ops []registry.Op
	for _, svc := range []string{"plain", "sub", "zoneless"} {
		for i := range 4 {
			ops = append(ops, registry.Upsert(svc, &registry.Endpoint{
				ID: fmt.Sprintf("%s-%d", svc, i), Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
				Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
				Locality: registry.Locality{Region: "r1", Zone: []string{"a", "b"}[i%2]}, Health: registry.Healthy,
				Source: registry.SourceStatic, Registered: t0.Add(-time.Hour),
			}))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	clients := &splitClients{
		counts: map[string]map[string]int{"plain": {"a": 2}, "sub": {"a": 2}, "zoneless": {"a": 2}},
		slots:  map[string]map[subset.Group]int{"plain": {{Zone: "a"}: 2}, "sub": {{Zone: "a"}: 2}, "zoneless": {{Zone: "a"}: 2}},
	}
	p, err := NewPlanner(Config{
		Registry: store, Loads: fakeLoads{}, Clients: clients, Zones: fakeZones{},
		ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
		Strategies: StrategyFunc(func(svc string) Strategy {
			if svc == "sub" {
				return Strategy{ZoneAware: true, Subset: SubsetConfig{Mode: subset.Deterministic, Size: 2}}
			}
			return Strategy{ZoneAware: svc != "zoneless"}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p.Cycle(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	if want := []string{"sub", "sub", "sub"}; !slices.Equal(clients.asked, want) {
		t.Fatalf("SubsetSlots asked for %v over 3 cycles, want %v", clients.asked, want)
	}
	if plan := p.Plan("sub"); plan == nil || plan.Subsets == nil {
		t.Fatalf("sub's plan %v has no subsets", plan)
	}
}

func (c *splitClients) ClientCounts() map[string]map[string]int { return c.counts }
func (c *splitClients) SubsetSlots(service string) map[subset.Group]int {
	c.asked = append(c.asked, service)
	return c.slots[service]
}

// TestPlannerSubsetsFollowInputs: an idle cycle keeps the published
// subsets (the same assignment), and each input they are made of gives
// new ones at the next cycle: the slot counts, the service's endpoints,
// and the client zone's route shares alone (demand moved, slots not).
func TestPlannerSubsetsFollowInputs(t *testing.T) {
	store := registry.NewStore()
	endpoint := func(i int, zone string) *registry.Endpoint {
		return &registry.Endpoint{
			ID: fmt.Sprintf("%s-%02d", zone, i), Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i + 1)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy,
			Source: registry.SourceStatic, Registered: t0.Add(-time.Hour),
		}
	}
	var ops []registry.Op
	for i := range 20 {
		ops = append(ops, registry.Upsert("web", endpoint(i, []string{"a", "b"}[i%2])))
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	clients := &splitClients{
		counts: map[string]map[string]int{"web": {"a": 3, "b": 3}},
		slots:  map[string]map[subset.Group]int{"web": {{Zone: "a"}: 3, {Zone: "b"}: 3}},
	}
	strategy := Strategy{ZoneAware: true, Subset: SubsetConfig{Mode: subset.Deterministic, Size: 4}}
	p, err := NewPlanner(Config{
		Registry: store, Loads: fakeLoads{}, Clients: clients, Zones: fakeZones{},
		ZoneAware:  zoneaware.Config{ReportInterval: 10 * time.Second},
		Strategies: StrategyFunc(func(string) Strategy { return strategy }),
	})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	cycle := func() *subset.Assignment {
		t.Helper()
		now = now.Add(10 * time.Second)
		p.Cycle(now)
		plan := p.Plan("web")
		if plan == nil || plan.Subsets == nil {
			t.Fatalf("plan %v has no subsets", plan)
		}
		return plan.Subsets
	}
	// inZone counts the endpoints of zone in the subsets of client zone
	// a's slots.
	inZone := func(a *subset.Assignment, zone string) int {
		n := 0
		for s := range a.Slots(subset.Group{Zone: "a"}) {
			for _, id := range a.Subset(subset.Group{Zone: "a"}, s) {
				if strings.HasPrefix(id, zone+"-") {
					n++
				}
			}
		}
		return n
	}
	cycle()
	last := cycle()
	for i := range 3 {
		if got := cycle(); got != last {
			t.Fatalf("idle cycle %d gave new subsets %p, want %p kept", i, got, last)
		}
	}

	clients.slots["web"][subset.Group{Zone: "a"}] = 4
	got := cycle()
	if n := got.Slots(subset.Group{Zone: "a"}); got == last || n != 4 {
		t.Fatalf("after a slot joined zone a: %d slots (same assignment: %v), want 4", n, got == last)
	}
	last = got

	// a-20 takes a-00's place: the zones' capacities, and so the routes,
	// stay as they were.
	if _, err := store.Apply(registry.Remove("web", "a-00", registry.SourceStatic), registry.Upsert("web", endpoint(20, "a"))); err != nil {
		t.Fatal(err)
	}
	got = cycle()
	if c := got.Counts(); got == last || c["a-20"] == 0 || c["a-00"] != 0 {
		t.Fatalf("after a-20 took a-00's place: a-20 held by %d slots, a-00 by %d (same assignment: %v); want some, none", c["a-20"], c["a-00"], got == last)
	}
	last = got

	// Demand moves to zone a (9 clients against 1) while the slots stay:
	// zone a's route now spills to b, so its slots hold more of b.
	before := inZone(last, "b")
	clients.counts["web"] = map[string]int{"a": 9, "b": 1}
	got = cycle()
	if got == last || inZone(got, "b") <= before {
		t.Fatalf("after demand moved to zone a: zone a's slots hold %d endpoints of b, had %d (same assignment: %v); want more", inZone(got, "b"), before, got == last)
	}
	last = got
	if again := cycle(); again != last {
		t.Fatalf("idle cycle after the changes gave new subsets %p, want %p kept", again, last)
	}
}

type subsetMemory map[string]*subset.Assignment

func (m subsetMemory) Subsets(service string) *subset.Assignment { return m[service] }

// TestPlannerSubsetsMemory (issue 29 item 3): a planner that takes a
// service over (a new owner, or a replica that restarted) starts from the
// subsets its clients were last given (Config.SubsetMemory: the previous
// owner's published plan), so that, after churn has moved the subsets
// away from what a fresh assignment gives, the takeover moves no pair;
// without the memory it would move many.
func TestPlannerSubsetsMemory(t *testing.T) {
	store := registry.NewStore()
	endpoint := func(i int) *registry.Endpoint {
		return &registry.Endpoint{
			ID: fmt.Sprintf("ep-%02d", i), Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: "a"}, Health: registry.Healthy,
			Source: registry.SourceStatic, Registered: t0.Add(-time.Hour),
		}
	}
	var ops []registry.Op
	for i := range 30 {
		ops = append(ops, registry.Upsert("web", endpoint(i)))
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	clients := &splitClients{
		counts: map[string]map[string]int{"web": {"a": 40}},
		slots:  map[string]map[subset.Group]int{"web": {{Zone: "a"}: 40}},
	}
	strategy := Strategy{ZoneAware: true, Subset: SubsetConfig{Mode: subset.Deterministic, Size: 5}}
	planner := func(mem SubsetMemory) *Planner {
		p, err := NewPlanner(Config{
			Registry: store, Loads: fakeLoads{}, Clients: clients, Zones: fakeZones{},
			ZoneAware:    zoneaware.Config{ReportInterval: 10 * time.Second},
			Strategies:   StrategyFunc(func(string) Strategy { return strategy }),
			SubsetMemory: mem,
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := t0
	old := planner(nil)
	old.Cycle(now)
	// Churn: clients come and go, endpoints are replaced.
	for i, n := range []int{43, 37, 41} {
		clients.slots["web"][subset.Group{Zone: "a"}] = n
		clients.counts["web"]["a"] = n
		if _, err := store.Apply(registry.Remove("web", fmt.Sprintf("ep-%02d", i), registry.SourceStatic), registry.Upsert("web", endpoint(30+i))); err != nil {
			t.Fatal(err)
		}
		now = now.Add(10 * time.Second)
		old.Cycle(now)
	}
	last := old.Plan("web").Subsets
	moved := func(a, b *subset.Assignment) int {
		n := 0
		g := subset.Group{Zone: "a"}
		for i := range a.Slots(g) {
			x, y := a.Subset(g, i), b.Subset(g, i)
			for _, id := range x {
				if !slices.Contains(y, id) {
					n++
				}
			}
		}
		return n
	}
	now = now.Add(10 * time.Second)
	fresh := planner(nil)
	fresh.Cycle(now)
	if n := moved(last, fresh.Plan("web").Subsets); n == 0 {
		t.Fatal("a fresh assignment equals the churned one: the test shows nothing")
	} else {
		t.Logf("without memory the takeover moves %d of %d pairs", n, last.Pairs())
	}
	heir := planner(subsetMemory{"web": last})
	heir.Cycle(now)
	if got := heir.Plan("web").Subsets; !got.Equal(last) {
		t.Errorf("with memory the takeover moved %d of %d pairs, want 0", moved(last, got), last.Pairs())
	}
}

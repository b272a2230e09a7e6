package weights

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/zoneaware"
)

type fakeLoads []load.Load

func (f fakeLoads) Loads(service string, _ time.Time) []load.Load {
	var out []load.Load
	for _, l := range f {
		if service == "" || l.Service == service {
			out = append(out, l)
		}
	}
	return out
}

type fakeClients map[string]map[string]int

func (f fakeClients) ClientCounts() map[string]map[string]int { return f }

type fakeZones map[string]bool

func (f fakeZones) Has(zone string) bool { return f[zone] }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// store holds services web and api, each with endpoints in zones a and b
// registered at reg.
func testStore(t testing.TB, reg time.Time) *registry.Store {
	t.Helper()
	store := registry.NewStore()
	var ops []registry.Op
	for _, svc := range []string{"web", "api"} {
		for i, zone := range []string{"a", "a", "b", "b"} {
			ops = append(ops, registry.Upsert(svc, &registry.Endpoint{
				ID: fmt.Sprintf("%s-%d", zone, i), Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
				Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
				Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy,
				Source: registry.SourceStatic, Registered: reg,
			}))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	return store
}

func flowTo(service, clientZone, zone string, rps float64, at time.Time) load.Load {
	return load.Load{
		Key:    load.Key{Service: service, ClientZone: clientZone, ClientService: "c", Locality: registry.Locality{Region: "r1", Zone: zone}},
		Issued: rps, Succeeded: rps, Reporters: 1, Updated: at,
	}
}

// TestPlannerCycle: plans are local, only for owned services; Gen moves
// and OnChange is told only when vectors change; unknown client zones
// count as zoneless unless the zone set holds them.
func TestPlannerCycle(t *testing.T) {
	store := testStore(t, t0.Add(-time.Hour))
	loads := fakeLoads{
		flowTo("web", "a", "a", 100, t0), flowTo("web", "b", "b", 100, t0),
		flowTo("web", "z-slotted", "a", 10, t0), flowTo("web", "z-unslotted", "b", 10, t0),
	}
	var changes [][]string
	p, err := NewPlanner(Config{
		Registry: store, Loads: loads, Clients: fakeClients{}, Zones: fakeZones{"z-slotted": true},
		ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
		Owns:      func(s string) bool { return s == "web" },
		OnChange:  func(s []string, _ time.Time) { changes = append(changes, slices.Clone(s)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Plan("web") != nil {
		t.Fatal("plan before the first cycle")
	}
	p.Cycle(t0)
	web := p.Plan("web")
	if web == nil || web.Source != SourceLocal || web.Result == nil {
		t.Fatalf("plan for web = %+v, want a local one", web)
	}
	if got := p.Plan("api"); got != nil {
		t.Errorf("plan for api (not owned) = %+v, want none", got)
	}
	var zones []string
	for _, rt := range web.Result.Routes {
		zones = append(zones, rt.ClientZone)
	}
	if want := []string{"", "a", "b", "z-slotted"}; !slices.Equal(zones, want) {
		t.Errorf("route client zones = %q, want %q (an unslotted zone counts as zoneless)", zones, want)
	}
	p.Cycle(t0.Add(10 * time.Second))
	if got := p.Plan("web"); got.Gen != web.Gen {
		t.Errorf("same input: Gen %d -> %d, want unchanged", web.Gen, got.Gen)
	}
	if want := [][]string{{"web"}}; !cmp.Equal(changes, want) {
		t.Errorf("OnChange calls = %q, want %q", changes, want)
	}
	var nilPlanner *Planner
	if nilPlanner.Plan("web") != nil {
		t.Error("nil planner gave a plan")
	}
}

// TestPlannerStateMoves: a second planner that imports the first's state
// computes what the first does; one that starts over does not (slow start).
func TestPlannerStateMoves(t *testing.T) {
	store := testStore(t, t0.Add(-20*time.Second)) // every endpoint slow-starting
	loads := fakeLoads{flowTo("web", "a", "a", 50, t0), flowTo("web", "a", "b", 50, t0), flowTo("web", "b", "b", 100, t0)}
	cfg := Config{
		Registry: store, Loads: loads, Clients: fakeClients{}, Zones: fakeZones{},
		ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
	}
	newP := func() *Planner {
		p, err := NewPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := newP(), newP(), newP()
	if _, ok := a.ExportState("web"); ok {
		t.Error("state exported before any cycle")
	}
	for i := range 3 {
		a.Cycle(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	st, ok := a.ExportState("web")
	if !ok {
		t.Fatal("no state for web")
	}
	if err := b.ImportState("web", st); err != nil {
		t.Fatal(err)
	}
	next := t0.Add(30 * time.Second)
	a.Cycle(next)
	b.Cycle(next)
	c.Cycle(next)
	if diff := cmp.Diff(a.Plan("web").Result, b.Plan("web").Result); diff != "" {
		t.Errorf("imported state: result differs (-exporter +importer):\n%s", diff)
	}
	if cmp.Equal(a.Plan("web").Result.Zones, c.Plan("web").Result.Zones) {
		t.Error("a planner that starts over computes the same zones: the test shows nothing")
	}
	for _, bad := range []string{`{`, `{"endpoints":[{"id":"x","progress":2}]}`} {
		if err := b.ImportState("web", []byte(bad)); err == nil {
			t.Errorf("ImportState(%s) = nil, want an error", bad)
		}
	}
}

func TestNewPlannerRejects(t *testing.T) {
	store := registry.NewStore()
	ok := Config{Registry: store, Loads: fakeLoads{}, Clients: fakeClients{}, Zones: fakeZones{}}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"Registry", func(c *Config) { c.Registry = nil }},
		{"Loads", func(c *Config) { c.Loads = nil }},
		{"Clients", func(c *Config) { c.Clients = nil }},
		{"Zones", func(c *Config) { c.Zones = nil }},
		{"Interval", func(c *Config) { c.Interval = -time.Second }},
		{"ZoneAware", func(c *Config) { c.ZoneAware.TargetUtilization = 2 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			_, err := NewPlanner(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("NewPlanner = %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

// TestPlannerServiceZoneAwareConfig: a service whose strategy carries its
// own zone-aware config is computed with it (here: no probe share, so a
// zone with spare capacity keeps all of its clients' traffic); the other
// services keep the planner's (the default probe).
func TestPlannerServiceZoneAwareConfig(t *testing.T) {
	store := testStore(t, t0.Add(-time.Hour))
	loads := fakeLoads{
		flowTo("web", "a", "a", 100, t0), flowTo("web", "b", "b", 100, t0),
		flowTo("api", "a", "a", 100, t0), flowTo("api", "b", "b", 100, t0),
	}
	noProbe := 0.0
	own := zoneaware.Config{ReportInterval: 10 * time.Second, ProbeShare: &noProbe}
	p, err := NewPlanner(Config{
		Registry: store, Loads: loads, Clients: fakeClients{}, Zones: fakeZones{},
		ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
		Strategies: StrategyFunc(func(s string) Strategy {
			if s == "web" {
				return Strategy{ZoneAware: true, ZoneAwareConfig: &own}
			}
			return Strategy{ZoneAware: true}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Cycle(t0)
	local := func(service string) float64 {
		for _, w := range p.Plan(service).Result.Route("a").Weights {
			if w.Zone == "a" {
				return w.Share
			}
		}
		return 0
	}
	if got := local("web"); got != 1 {
		t.Errorf("web (probe share 0): zone a keeps %.3f of its clients' traffic, want 1", got)
	}
	if got := local("api"); got >= 1 || got < 0.98 {
		t.Errorf("api (default probe 1%%): zone a keeps %.3f, want just under 1", got)
	}
}

// TestPlannerIdleKeepsPlan: once a service's inputs stop changing, the
// cycle keeps the published plan (same pointer, same content) and
// computes into memory no plan holds; a change then publishes a new plan
// and leaves the old one as it was.
func TestPlannerIdleKeepsPlan(t *testing.T) {
	store := testStore(t, t0.Add(-time.Hour))
	clients := fakeClients{"web": {"a": 3, "b": 3}}
	p, err := NewPlanner(Config{
		Registry: store, Loads: fakeLoads{}, Clients: clients, Zones: fakeZones{},
		ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	cycle := func() *Plan {
		now = now.Add(10 * time.Second)
		p.Cycle(now)
		return p.Plan("web")
	}
	first := cycle()
	second := cycle() // unchanged, but first's routes say Changed
	if second == first || second.Gen != first.Gen || second.Result.Changed {
		t.Fatalf("second plan %p gen %d changed %v; want a new plan, gen %d, unchanged", second, second.Gen, second.Result.Changed, first.Gen)
	}
	kept := second.Result.Clone()
	for range 3 {
		if got := cycle(); got != second {
			t.Fatalf("idle cycle published a new plan %p, want %p kept", got, second)
		}
	}
	if !second.Result.Equal(kept) {
		t.Fatal("kept plan modified by the idle cycles")
	}
	clients["web"]["a"] = 30 // demand moves to zone a
	moved := cycle()
	if moved == second || moved.Gen == second.Gen {
		t.Fatalf("after a demand change: plan %p gen %d, want a new plan with a new gen", moved, moved.Gen)
	}
	if !second.Result.Equal(kept) {
		t.Error("the previous plan was modified by the cycle that replaced it")
	}
	if moved.Result.Equal(kept) {
		t.Error("new plan equals the old one after a demand change")
	}
}

// TestByService: a cycle reads each service's flows as one run of the
// loads sorted by service, whatever order the source gave them in, and
// keeps the order within a service.
func TestByService(t *testing.T) {
	fl := func(svc, cz string) load.Load { return flowTo(svc, cz, "a", 1, t0) }
	for _, tc := range []struct {
		name     string
		loads    []load.Load
		services []string
		want     map[string][]string // service -> client zones, in order
	}{
		{name: "sorted", loads: []load.Load{fl("api", "a"), fl("api", "b"), fl("web", "a")}, services: []string{"api", "web"},
			want: map[string][]string{"api": {"a", "b"}, "web": {"a"}}},
		{name: "unsorted", loads: []load.Load{fl("web", "b"), fl("api", "a"), fl("web", "a"), fl("api", "c")}, services: []string{"api", "web"},
			want: map[string][]string{"api": {"a", "c"}, "web": {"b", "a"}}},
		{name: "services_without_flows", loads: []load.Load{fl("b", "x"), fl("d", "y")}, services: []string{"a", "b", "c", "d", "e"},
			want: map[string][]string{"b": {"x"}, "d": {"y"}}},
		{name: "flows_of_unknown_services_skipped", loads: []load.Load{fl("a", "x"), fl("b", "y"), fl("c", "z")}, services: []string{"b"},
			want: map[string][]string{"b": {"y"}}},
		{name: "none", services: []string{"a"}, want: map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest := byService(tc.loads)
			got := map[string][]string{}
			for _, svc := range tc.services {
				var flows []load.Load
				flows, rest = rest.next(svc)
				for _, f := range flows {
					if f.Service != svc {
						t.Fatalf("flow of %q given for %q", f.Service, svc)
					}
					got[svc] = append(got[svc], f.ClientZone)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("flows by service (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlannerPlansImmutable: the plans a cycle replaces (their results
// computed into reserved memory, or a spare) stay as they were handed
// out, over cycles where demand moves and where it does not.
func TestPlannerPlansImmutable(t *testing.T) {
	rb := newRegionBench(t, 30)
	type held struct {
		plan *Plan
		res  *zoneaware.Result
	}
	var kept []held
	changed := 0
	for c := range 8 {
		for _, pl := range *rb.p.plans.Load() {
			kept = append(kept, held{pl, pl.Result.Clone()})
		}
		rb.prepare([]int{0, 7, 30}[c%3])
		changed += len(rb.p.cycle(rb.now))
		for _, h := range kept {
			if !h.plan.Result.Equal(h.res) {
				t.Fatalf("cycle %d modified a plan handed out before it", c)
			}
		}
	}
	if changed == 0 {
		t.Fatal("no plan changed: the test moved no demand")
	}
}

// appendLoads is fakeLoads as a LoadAppender; it counts its calls.
type appendLoads struct {
	fakeLoads
	calls *int
}

func (a appendLoads) AppendLoads(dst []load.Load, now time.Time) []load.Load {
	*a.calls++
	return append(dst, a.Loads("", now)...)
}

// TestPlannerLoadAppender: a source that appends into the planner's
// buffer is read through AppendLoads and gives the plans Loads gives,
// cycle after cycle (the buffer reused).
func TestPlannerLoadAppender(t *testing.T) {
	store := testStore(t, t0.Add(-time.Hour))
	flows := fakeLoads{flowTo("api", "a", "a", 100, t0), flowTo("api", "b", "b", 30, t0), flowTo("web", "a", "b", 50, t0), flowTo("web", "b", "b", 80, t0)}
	calls := 0
	mk := func(src LoadSource) *Planner {
		p, err := NewPlanner(Config{Registry: store, Loads: src, Clients: fakeClients{}, Zones: fakeZones{}, ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain, appending := mk(flows), mk(appendLoads{flows, &calls})
	now := t0
	for c := range 4 {
		now = now.Add(10 * time.Second)
		for i := range flows {
			flows[i].Updated = now.Add(-time.Second)
			flows[i].Issued *= 1.5 // demand moves: plans change
		}
		plain.Cycle(now)
		appending.Cycle(now)
		for _, svc := range []string{"api", "web"} {
			a, b := plain.Plan(svc), appending.Plan(svc)
			if a == nil || b == nil || !a.Result.Equal(b.Result) {
				t.Fatalf("cycle %d: %s: plan through AppendLoads differs from Loads':\n got %+v\nwant %+v", c, svc, b.Result, a.Result)
			}
		}
	}
	if calls != 4 {
		t.Errorf("AppendLoads calls = %d, want 4", calls)
	}
}

// TestPlannerFollowsServiceSet: a service that joins the registry gets a
// plan at the next cycle, and one the registry forgets loses its plan and
// state, while the cycles in between keep the names they read once.
func TestPlannerFollowsServiceSet(t *testing.T) {
	store := testStore(t, t0.Add(-time.Hour))
	p, err := NewPlanner(Config{
		Registry: store, Loads: fakeLoads{}, Clients: fakeClients{"web": {"a": 1}}, Zones: fakeZones{},
		ZoneAware: zoneaware.Config{ReportInterval: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	cycle := func() {
		now = now.Add(10 * time.Second)
		p.Cycle(now)
	}
	planned := func() []string {
		var out []string
		for _, s := range []string{"api", "db", "web"} {
			if p.Plan(s) != nil {
				out = append(out, s)
			}
		}
		return out
	}
	cycle()
	cycle()
	if got, want := planned(), []string{"api", "web"}; !slices.Equal(got, want) {
		t.Fatalf("planned %v, want %v", got, want)
	}
	if _, err := store.Apply(registry.Upsert("db", &registry.Endpoint{
		ID: "a-0", Address: netip.MustParseAddr("10.0.1.1"),
		Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "r1", Zone: "a"}, Health: registry.Healthy,
		Source: registry.SourceStatic, Registered: t0,
	})); err != nil {
		t.Fatal(err)
	}
	cycle()
	if got, want := planned(), []string{"api", "db", "web"}; !slices.Equal(got, want) {
		t.Fatalf("after db joined: planned %v, want %v", got, want)
	}
	var ops []registry.Op
	for i, zone := range []string{"a", "a", "b", "b"} {
		ops = append(ops, registry.Remove("api", fmt.Sprintf("%s-%d", zone, i), registry.SourceStatic))
	}
	if _, err := store.Apply(append(ops, registry.Forget("api"))...); err != nil {
		t.Fatal(err)
	}
	cycle()
	if got, want := planned(), []string{"db", "web"}; !slices.Equal(got, want) {
		t.Fatalf("after api was forgotten: planned %v, want %v", got, want)
	}
	p.mu.Lock()
	_, kept := p.states["api"]
	p.mu.Unlock()
	if kept {
		t.Fatal("the planner kept api's state after the registry forgot it")
	}
}

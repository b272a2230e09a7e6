package meshweights

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testShards = 4

func shardOf(service string) int {
	h := fnv.New32a()
	h.Write([]byte(service))
	return int(h.Sum32() % testShards)
}

// fakeOwnership holds the shards in held at their epochs.
type fakeOwnership struct {
	mu      sync.Mutex
	held    map[int]int64
	members []string
}

func newOwnership(epoch int64, members ...string) *fakeOwnership {
	o := &fakeOwnership{held: map[int]int64{}, members: members}
	for s := range testShards {
		o.held[s] = epoch
	}
	return o
}

func (o *fakeOwnership) set(held map[int]int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held = held
}

func (o *fakeOwnership) Owns(service string) bool {
	_, ok := o.Epoch(shardOf(service))
	return ok
}
func (o *fakeOwnership) Shard(service string) int { return shardOf(service) }
func (o *fakeOwnership) Epoch(shard int) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.held[shard]
	return e, ok
}
func (o *fakeOwnership) LiveMembers() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.members)
}

// fakeMerged reports the replicas in fresh as having acknowledged every
// shard at every epoch, and those in acked the (shard, epoch) listed.
type fakeMerged struct {
	mu    sync.Mutex
	fresh map[string]bool
	acked map[string][]ackKey
	asked int
}

type ackKey struct {
	shard int
	epoch int64
}

// setAcked makes replica's latest summary list exactly these holds.
func (m *fakeMerged) setAcked(replica string, holds ...ackKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acked == nil {
		m.acked = map[string][]ackKey{}
	}
	m.acked[replica] = holds
}

func (m *fakeMerged) setFresh(replica string, v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fresh == nil {
		m.fresh = map[string]bool{}
	}
	m.fresh[replica] = v
}

func (m *fakeMerged) Acked(replica string, shard int, epoch int64, since time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked++
	return m.fresh[replica] || slices.Contains(m.acked[replica], ackKey{shard, epoch})
}

func (m *fakeMerged) Contributors(service string, now time.Time) []weights.Contributor {
	return []weights.Contributor{{Replica: "A", Age: time.Second}, {Replica: "B", Age: 3 * time.Second}}
}

// testPlanner is a Planner on zoneaware.Calculator: every service has
// endpoints 2/2/4 in zones a/b/c and the client counts in demand.
type testPlanner struct {
	t    testing.TB
	calc *zoneaware.Calculator
	owns func(string) bool

	mu       sync.Mutex
	services []string
	demand   map[string]int // client zone -> connected clients, every service
	state    map[string]*zoneaware.State
	plans    map[string]*weights.Plan
	cycles   map[string]int // cycles computed per service (the exported state)
	imported map[string][]byte
	gen      uint64
	// during, when set, runs inside Cycle (p.mu not held): what arrives
	// while the planner computes.
	during func()
}

func newTestPlanner(t testing.TB, owns func(string) bool, services []string) *testPlanner {
	calc, err := zoneaware.New(zoneaware.Config{ProbeShare: new(0.0)})
	if err != nil {
		t.Fatal(err)
	}
	return &testPlanner{
		t: t, calc: calc, owns: owns, services: services,
		demand: map[string]int{"a": 60, "b": 20, "c": 20},
		state:  map[string]*zoneaware.State{}, plans: map[string]*weights.Plan{},
		cycles: map[string]int{}, imported: map[string][]byte{},
	}
}

func (p *testPlanner) setDemand(d map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.demand = d
}

func (p *testPlanner) Cycle(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.during != nil {
		f := p.during
		defer func() { p.mu.Unlock(); f(); p.mu.Lock() }()
	}
	old := now.Add(-time.Hour)
	var eps []zoneaware.Endpoint
	for zone, n := range map[string]int{"a": 2, "b": 2, "c": 4} {
		for i := range n {
			eps = append(eps, zoneaware.Endpoint{ID: fmt.Sprintf("%s%d", zone, i), Zone: zone, Healthy: true, Registered: old})
		}
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].ID < eps[j].ID })
	var clients []zoneaware.ClientCount
	for zone, n := range p.demand {
		clients = append(clients, zoneaware.ClientCount{Zone: zone, Count: n})
	}
	sort.Slice(clients, func(i, j int) bool { return clients[i].Zone < clients[j].Zone })
	for _, svc := range p.services {
		if p.owns != nil && !p.owns(svc) {
			continue
		}
		st := p.state[svc]
		if st == nil {
			st = &zoneaware.State{}
			p.state[svc] = st
		}
		var out zoneaware.Result
		p.calc.Compute(st, &zoneaware.Input{Now: now, Endpoints: eps, Clients: clients}, &out)
		p.cycles[svc]++
		if old := p.plans[svc]; old == nil || vectorKey(old.Result) != vectorKey(&out) {
			p.gen++
			p.plans[svc] = &weights.Plan{Gen: p.gen, Result: out.Clone()}
		}
	}
}

func (p *testPlanner) Plan(service string) *weights.Plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.plans[service]
}

func (p *testPlanner) ExportState(service string) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.cycles[service]
	if !ok {
		return nil, false
	}
	b, _ := json.Marshal(map[string]any{"service": service, "cycles": n})
	return b, true
}

func (p *testPlanner) ImportState(service string, b []byte) error {
	var v struct {
		Service string `json:"service"`
		Cycles  int    `json:"cycles"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Service != service {
		return fmt.Errorf("state: not a state of %s: %v", service, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.imported[service] = b
	p.cycles[service] = v.Cycles
	return nil
}

func (p *testPlanner) importedState(service string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.imported[service]
}

// fakeLocal is a replica's own planner: capacity-proportional vectors
// (2/2/4), different from the mesh ones, for every service.
type fakeLocal struct {
	mu    sync.Mutex
	plans map[string]*weights.Plan
}

func newFakeLocal(services []string) *fakeLocal {
	l := &fakeLocal{plans: map[string]*weights.Plan{}}
	for i, svc := range services {
		l.plans[svc] = &weights.Plan{Gen: uint64(i + 1), Source: weights.SourceLocal, Result: &zoneaware.Result{
			Routes: []zoneaware.Route{{Weights: []zoneaware.ZoneWeight{
				{Zone: "a", Weight: 2500, Share: 0.25}, {Zone: "b", Weight: 2500, Share: 0.25}, {Zone: "c", Weight: 5000, Share: 0.5},
			}}},
			Fallback: zoneaware.FallbackNoDemand,
		}}
	}
	return l
}

func (l *fakeLocal) Plan(service string) *weights.Plan {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.plans[service]
}

// changes records OnChange calls.
type changes struct {
	mu    sync.Mutex
	calls [][]string
}

func (c *changes) OnChange(services []string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, slices.Sorted(slices.Values(services)))
}

func (c *changes) take() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// countingKV counts Puts by key prefix.
type countingKV struct {
	systemstore.KV
	mu   sync.Mutex
	puts map[string]int
}

func (k *countingKV) Put(ctx context.Context, key string, v []byte) (int64, error) {
	k.mu.Lock()
	if k.puts == nil {
		k.puts = map[string]int{}
	}
	for _, p := range []string{PlanPrefix, ShardPrefix, StatePrefix} {
		if len(key) > len(p) && key[:len(p)] == p {
			k.puts[p]++
		}
	}
	k.mu.Unlock()
	return k.KV.Put(ctx, key, v)
}

func (k *countingKV) count(prefix string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.puts[prefix]
}

// vectors is every route's weights, for comparing plans.
func vectors(p *weights.Plan) map[string]map[string]uint32 {
	if p == nil || p.Result == nil {
		return nil
	}
	out := map[string]map[string]uint32{}
	for _, rt := range p.Result.Routes {
		m := map[string]uint32{}
		for _, w := range rt.Weights {
			m[w.Zone] = w.Weight
		}
		out[rt.ClientZone] = m
	}
	return out
}

func testServices(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("svc-%02d", i)
	}
	return out
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

func gaugeValue(t testing.TB, g prometheus.Gauge) float64 {
	t.Helper()
	return testutil.ToFloat64(g)
}

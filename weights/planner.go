package weights

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/pid"
	"github.com/spillway/spillway/weights/zoneaware"
)

// LoadSource gives the measured flows to a service ("" for every
// service), sorted, with rates as of now. *load.Table implements it.
type LoadSource interface {
	Loads(service string, now time.Time) []load.Load
}

// LoadAppender is a LoadSource that appends every service's flows,
// sorted, to the caller's slice: the planner then reads them each cycle
// into the same buffer. *load.Table (a replica's own load) and
// *exchange.Merged (the owner's merged load) implement it.
type LoadAppender interface {
	AppendLoads(dst []load.Load, now time.Time) []load.Load
}

// ClientSource counts the connected xDS streams of each service per
// client zone: service -> zone -> streams. *xds.Server implements it.
type ClientSource interface {
	ClientCounts() map[string]map[string]int
}

// ZoneSet is the server's bounded set of client zones that keep their own
// name (xds.Config.MaxZones). *xds.Server implements it.
type ZoneSet interface {
	Has(zone string) bool
}

// Registry gives the current registry snapshot. *registry.Store
// implements it.
type Registry interface {
	Snapshot() *registry.Snapshot
}

// Config configures a Planner. Every source is called from the planner's
// cycle only, and must be safe to call from any goroutine.
type Config struct {
	// Registry gives the services and their endpoints; non-nil.
	Registry Registry
	// Loads gives the load reports; non-nil.
	Loads LoadSource
	// Clients counts the connected streams, the demand estimate before any
	// load report; non-nil.
	Clients ClientSource
	// Zones says which client zones keep their own name; non-nil.
	Zones ZoneSet
	// PortName is the endpoint port clients dial, as xds.Config.PortName;
	// "" means "grpc". Endpoints without it count by their first TCP
	// port; endpoints with no TCP port do not count.
	PortName string
	// ZoneAware configures the calculation.
	ZoneAware zoneaware.Config
	// Interval is the period of Run; zero means 10 s.
	Interval time.Duration
	// Owns says which services this planner plans; nil means every
	// service. A service it does not own gets no plan, and its state goes.
	Owns func(service string) bool
	// OnChange is called by each cycle, after the plans are published,
	// with the services whose plan changed (Gen); nil calls nothing.
	OnChange func(services []string, now time.Time)
	// Utilization gives the endpoints' utilization reports, for the PID
	// weights; nil: no reports (every endpoint missing).
	Utilization UtilizationSource
	// Strategies gives each service's strategy; nil: zone-aware only, no
	// endpoint weights (Plan.Endpoints nil).
	Strategies StrategySource
	// SubsetMemory, when set, gives the subsets of a service this
	// planner has no plan for yet (an owner taking a shard over); nil
	// starts from none.
	SubsetMemory SubsetMemory
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics (spillway_zoneaware_*); nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// Planner recomputes zone-aware weights for every service it owns every
// Interval, from the load reports and the connected streams. Cycles are
// serialised; readers load the published plans with one atomic load.
type Planner struct {
	// Read-only after NewPlanner.
	cfg  Config
	calc *zoneaware.Calculator
	// calcs are the calculators of services with their own zone-aware
	// config (Strategy.ZoneAwareConfig), by config; owned by the cycle.
	calcs   map[string]*zoneaware.Calculator
	metrics *plannerMetrics

	plans atomic.Pointer[map[string]*Plan]

	// listeners are Subscribe's; appended before Run, read-only after.
	listeners []func(services []string, now time.Time)

	// mu guards the per-service states and the scratch input; a cycle,
	// ExportState and ImportState hold it.
	mu     sync.Mutex
	states map[string]*svcState
	gen    uint64
	in     zoneaware.Input
	pidIn  pid.Input
	// loadBuf is the flows of the last cycle, from a LoadAppender.
	loadBuf []load.Load
	// names are the registry's services, sorted, at names version
	// namesVer (registry.Snapshot.NamesVersion); read-only once set.
	// Sorting 50,000 names was about 50 ms of every cycle, and the set
	// changes only when a service comes or goes.
	names    []string
	namesVer uint64
	namesOK  bool
	// scratch is what a cycle computes each service's plan into: a plan
	// that changed is published as a copy of it (publish), one that did
	// not costs nothing and keeps nothing. (A spare per service, kept
	// for its next cycle, was about 1 KiB a service: 52 MB at 50,000.)
	scratch planResult
	// zaScratch is what every service's zone-aware state computes in
	// (zoneaware.ComputeWith), instead of a scratch of each service's
	// own: about 2.3 KiB a service, 117 MB at 50,000
	// (BenchmarkPlannerHeldRegion: 7,287 -> 4,937 B held per service).
	zaScratch zoneaware.Scratch
}

// svcState is one service's calculation state.
type svcState struct {
	za *zoneaware.State
	// pid is the PID state; nil when the strategy has no PID. pending is
	// an imported PID snapshot restored at the next cycle.
	pid     *pid.State
	pending *pid.Snapshot
	// subsetKey is the subset.Input.Key the published plan's subsets
	// were assigned for; subsetSvc and subsetQuick the service value and
	// quickSubsetKey they were last confirmed for.
	subsetKey   uint64
	subsetSvc   *registry.Service
	subsetQuick uint64
	// sameZone is the service's series of the same-zone gauge, nil until
	// first set: looked up by label on every cycle, it was about a tenth
	// of a cycle over 50,000 services (BenchmarkPlannerCycleRegion). The
	// series goes with the state (cycle deletes both).
	sameZone prometheus.Gauge
}

// NewPlanner validates cfg and returns a Planner. Errors name the field.
func NewPlanner(cfg Config) (*Planner, error) {
	switch {
	case cfg.Registry == nil:
		return nil, errors.New("weights config: Registry is nil")
	case cfg.Loads == nil:
		return nil, errors.New("weights config: Loads is nil")
	case cfg.Clients == nil:
		return nil, errors.New("weights config: Clients is nil")
	case cfg.Zones == nil:
		return nil, errors.New("weights config: Zones is nil")
	}
	if cfg.PortName == "" {
		cfg.PortName = "grpc"
	}
	switch {
	case cfg.Interval == 0:
		cfg.Interval = 10 * time.Second
	case cfg.Interval < 0:
		return nil, fmt.Errorf("weights config: Interval %v is negative", cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	calc, err := zoneaware.New(cfg.ZoneAware)
	if err != nil {
		return nil, fmt.Errorf("weights config: ZoneAware: %w", err)
	}
	p := &Planner{cfg: cfg, calc: calc, metrics: newPlannerMetrics(), states: map[string]*svcState{}}
	empty := map[string]*Plan{}
	p.plans.Store(&empty)
	if cfg.Registerer != nil {
		if err := p.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("weights metrics: %w", err)
		}
	}
	return p, nil
}

// Plan returns the service's current plan, or nil before the first cycle
// that saw it, for a service it does not own, or on a nil Planner.
func (p *Planner) Plan(service string) *Plan {
	if p == nil {
		return nil
	}
	return (*p.plans.Load())[service]
}

// Run computes a cycle at once and then every Interval, until ctx ends.
func (p *Planner) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	p.Cycle(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.Cycle(now)
		}
	}
}

// Cycle computes the weights of every service it owns and publishes them;
// OnChange, then every Subscribe listener, is told the services whose plan
// changed.
func (p *Planner) Cycle(now time.Time) {
	changed := p.cycle(now)
	if len(changed) == 0 {
		return
	}
	if p.cfg.OnChange != nil {
		p.cfg.OnChange(changed, now)
	}
	for _, fn := range p.listeners {
		fn(changed, now)
	}
}

// Subscribe adds fn to those told, after each cycle, the services whose
// plan changed: it is how a stage built after the planner from its plans
// (the mesh selector) hears of them. Call it before Run; fn must not call
// back into the planner's cycle.
func (p *Planner) Subscribe(fn func(services []string, now time.Time)) {
	p.listeners = append(p.listeners, fn)
}

func (p *Planner) cycle(now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.metrics
	snap := p.cfg.Registry.Snapshot()
	var all []load.Load
	if la, ok := p.cfg.Loads.(LoadAppender); ok {
		p.loadBuf = la.AppendLoads(p.loadBuf[:0], now)
		all = p.loadBuf
	} else {
		all = p.cfg.Loads.Loads("", now)
	}
	loads := byService(all)
	clients := p.cfg.Clients.ClientCounts()
	old := *p.plans.Load()
	next := make(map[string]*Plan, snap.Len())
	var changed []string
	var sameNum, sameDen float64
	fallbacks := map[string]int{}
	if !p.namesOK || p.namesVer != snap.NamesVersion() {
		p.names, p.namesVer, p.namesOK = snap.Services(), snap.NamesVersion(), true
	}
	for _, name := range p.names {
		// Both are sorted by service: name's flows are the run of
		// loads that starts where the previous service's ended.
		var flows []load.Load
		flows, loads = loads.next(name)
		if p.cfg.Owns != nil && !p.cfg.Owns(name) {
			continue
		}
		svc, _ := snap.Service(name)
		ss := p.states[name]
		if ss == nil {
			ss = &svcState{za: &zoneaware.State{}}
			p.states[name] = ss
		}
		in := p.input(&p.in, svc, flows, clients[name], now)
		prev := old[name]
		res := &p.scratch.res
		p.calculator(name).ComputeWith(&p.zaScratch, ss.za, in, res)
		plan := &p.scratch.plan
		*plan = Plan{Result: res, Source: SourceLocal}
		p.endpointWeights(plan, ss, svc, now)
		if p.cfg.Strategies != nil {
			p.subsets(plan, prev, ss, svc, p.cfg.Strategies.Strategy(name).Subset)
		}
		if plan.Subsets == nil && prev != nil && prev.Subsets != nil {
			m.forgetSubsets(name)
		}
		switch {
		case prev == nil || res.Changed || !sameEndpoints(prev, plan) || !prev.Subsets.Equal(plan.Subsets):
			p.gen++
			plan = publish(plan)
			plan.Gen = p.gen
			changed = append(changed, name)
		case plan.Endpoints == nil && plan.PID == nil && prev.PID == nil && plan.Subsets == prev.Subsets && prev.Source == SourceLocal && prev.Result.Equal(res):
			// Nothing to tell anyone: the published plan stays. An idle
			// service then costs no allocation per cycle. Subsets are the
			// same when subsets found nothing they read changed (it kept
			// prev's).
			plan = prev
		default:
			plan = publish(plan)
			plan.Gen = prev.Gen
		}
		next[name] = plan
		fallbacks[res.Fallback.Key()]++
		if res.Optimum > 0 {
			var demand float64
			for _, d := range in.Demand {
				demand += d.RPS
			}
			sameNum += res.SameZone * demand
			sameDen += demand
			if ss.sameZone == nil {
				ss.sameZone = m.sameZone.WithLabelValues(name)
			}
			ss.sameZone.Set(res.SameZone)
		}
	}
	for name := range p.states {
		if _, ok := next[name]; !ok {
			delete(p.states, name)
			m.sameZone.DeleteLabelValues(name)
			m.forgetSubsets(name)
		}
	}
	p.plans.Store(&next)
	if sameDen > 0 {
		m.sameZoneFleet.Set(sameNum / sameDen)
	}
	for _, f := range zoneaware.Fallbacks() {
		m.fallbacks.WithLabelValues(f.Key()).Set(float64(fallbacks[f.Key()]))
	}
	return changed
}

// planResult is a plan and its result in one allocation: a service
// whose plan changes gets a new one each cycle (a published plan is
// never modified).
type planResult struct {
	plan Plan
	res  zoneaware.Result
}

// publish returns a copy of plan, computed into the cycle's scratch, to
// hand out: its result in arrays of its own, sized to fit
// (zoneaware.Result.CopyFrom), so a changed plan costs 5 allocations, not
// one per route slice. The plan's other fields are the cycle's
// allocations, never reused, and are shared.
func publish(plan *Plan) *Plan {
	pr := &planResult{plan: *plan}
	pr.res.CopyFrom(plan.Result)
	pr.plan.Result = &pr.res
	return &pr.plan
}

// serviceLoads are flows sorted by service.
type serviceLoads []load.Load

// byService returns loads sorted by service: loads itself when it is
// (LoadSource's are), else a sorted copy, the order within a service
// kept. Grouping by slicing it costs no allocation per service, where a
// map of copies cost about 6 KiB per service with load every cycle
// (BenchmarkPlannerCycleRegion).
func byService(loads []load.Load) serviceLoads {
	for i := 1; i < len(loads); i++ {
		if loads[i].Service < loads[i-1].Service {
			sorted := slices.Clone(loads)
			slices.SortStableFunc(sorted, func(a, b load.Load) int { return strings.Compare(a.Service, b.Service) })
			return sorted
		}
	}
	return loads
}

// next returns the flows of service and the flows after them. Services
// are asked for in increasing order; the flows of services before
// service, never asked for, are skipped.
func (l serviceLoads) next(service string) (flows []load.Load, rest serviceLoads) {
	i := 0
	for i < len(l) && l[i].Service < service {
		i++
	}
	j := i
	for j < len(l) && l[j].Service == service {
		j++
	}
	return l[i:j], l[j:]
}

// input fills in from the registry and the load reports. It reuses the
// slices of the previous call.
//
// Client zones are chosen by clients, and each client zone the planner
// sees gets its own route and EDS variant. So a client zone counts as
// itself only if the service has endpoints there or the zone holds a slot
// in the zone set; the demand and client counts of the others are added to
// the zoneless row ("") and those clients get the zoneless route. Loads
// reported to upstream zones where the service has no endpoint are left
// out (the load table records none).
func (p *Planner) input(in *zoneaware.Input, svc *registry.Service, loads []load.Load, clients map[string]int, now time.Time) *zoneaware.Input {
	in.Now = now
	in.Endpoints, in.Loads, in.Demand, in.Clients = in.Endpoints[:0], in.Loads[:0], in.Demand[:0], in.Clients[:0]
	zones := map[string]struct{}{}
	for _, e := range svc.Serving() {
		zones[e.Locality.Zone] = struct{}{}
		if !hasPort(e, p.cfg.PortName) {
			continue
		}
		in.Endpoints = append(in.Endpoints, zoneaware.Endpoint{ID: e.ID, Zone: e.Locality.Zone, Healthy: e.Health == registry.Healthy, Registered: e.Registered})
	}
	clientZone := func(z string) string {
		if _, ok := zones[z]; ok || z == "" || p.cfg.Zones.Has(z) {
			return z
		}
		return ""
	}
	up := map[string]int{}
	down := map[string]int{}
	for _, l := range loads {
		if l.Reporters == 0 {
			continue // only totals left: no fresh report
		}
		if _, ok := zones[l.Locality.Zone]; !ok {
			continue
		}
		i, ok := up[l.Locality.Zone]
		if !ok {
			i = len(in.Loads)
			up[l.Locality.Zone] = i
			in.Loads = append(in.Loads, zoneaware.ZoneLoad{Zone: l.Locality.Zone})
		}
		zl := &in.Loads[i]
		zl.IssuedRPS += l.Issued
		zl.SucceededRPS += l.Succeeded
		zl.ErroredRPS += l.Errored
		zl.InProgress += float64(l.InProgress)
		if l.Updated.After(zl.Updated) {
			zl.Updated = l.Updated
		}
		cz := clientZone(l.ClientZone)
		j, ok := down[cz]
		if !ok {
			j = len(in.Demand)
			down[cz] = j
			in.Demand = append(in.Demand, zoneaware.Demand{ClientZone: cz})
		}
		d := &in.Demand[j]
		d.RPS += l.Issued
		if l.Updated.After(d.Updated) {
			d.Updated = l.Updated
		}
	}
	counts := map[string]int{}
	for z, n := range clients {
		counts[clientZone(z)] += n
	}
	for z, n := range counts {
		in.Clients = append(in.Clients, zoneaware.ClientCount{Zone: z, Count: n})
	}
	return in
}

// hasPort reports whether clients can dial e: it has the named port or a
// TCP port (what xds puts in the endpoint's address).
func hasPort(e *registry.Endpoint, name string) bool {
	if _, ok := e.Port(name); ok {
		return true
	}
	for _, p := range e.Ports {
		if p.Protocol == registry.TCP {
			return true
		}
	}
	return false
}

// ExportState returns the service's calculation state (slow-start
// progress, zone health, the vectors hysteresis compares with) as opaque
// bytes for ImportState, and false when the planner holds none (not yet
// computed, or not owned).
func (p *Planner) ExportState(service string) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ss := p.states[service]
	if ss == nil {
		return nil, false
	}
	ex := exportedState{ZoneAware: ss.za.Snapshot()}
	switch {
	case ss.pid != nil:
		s := ss.pid.Snapshot()
		ex.PID = &s
	case ss.pending != nil:
		ex.PID = ss.pending
	}
	b, err := json.Marshal(ex)
	if err != nil {
		// A Snapshot holds only strings, numbers and times.
		p.cfg.Logger.Error("zone-aware state not exported", "service", service, "err", err)
		return nil, false
	}
	return b, true
}

// ImportState replaces the service's calculation state with one from
// ExportState (of this planner or another replica's), so that the next
// cycle carries on from it. It takes effect at the next cycle; the
// current plan stays. An invalid state changes nothing.
func (p *Planner) ImportState(service string, b []byte) error {
	var wrapped map[string]json.RawMessage
	if err := json.Unmarshal(b, &wrapped); err != nil {
		return fmt.Errorf("state of %s: %w", service, err)
	}
	zb := b // a bare zoneaware.Snapshot, as earlier releases exported
	var pidSnap *pid.Snapshot
	if raw, ok := wrapped["zoneaware"]; ok {
		zb = raw
		if praw, ok := wrapped["pid"]; ok && string(praw) != "null" {
			s, err := pid.UnmarshalSnapshot(praw)
			if err != nil {
				return fmt.Errorf("state of %s: pid: %w", service, err)
			}
			if err := (&pid.State{}).Restore(s, time.Time{}); err != nil {
				return fmt.Errorf("state of %s: pid: %w", service, err)
			}
			pidSnap = &s
		}
	}
	var snap zoneaware.Snapshot
	if err := json.Unmarshal(zb, &snap); err != nil {
		return fmt.Errorf("state of %s: zoneaware: %w", service, err)
	}
	st := &zoneaware.State{}
	if err := st.Restore(snap); err != nil {
		return fmt.Errorf("state of %s: zoneaware: %w", service, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.states[service] = &svcState{za: st, pending: pidSnap}
	return nil
}

// exportedState is ExportState's JSON.
type exportedState struct {
	ZoneAware zoneaware.Snapshot `json:"zoneaware"`
	PID       *pid.Snapshot      `json:"pid,omitempty"`
}

// calculator is the zone-aware calculator for service: the planner's, or
// one for the service's own zone-aware config. A config the calculator
// refuses is logged and the planner's is used. Called with p.mu held.
func (p *Planner) calculator(service string) *zoneaware.Calculator {
	if p.cfg.Strategies == nil {
		return p.calc
	}
	zc := p.cfg.Strategies.Strategy(service).ZoneAwareConfig
	if zc == nil {
		return p.calc
	}
	key := fmt.Sprintf("%+v/%v/%v/%v", *zc, deref(zc.ProbeShare), deref(zc.QueueSensitivity), deref(zc.ErrorSensitivity))
	if c, ok := p.calcs[key]; ok {
		return c
	}
	c, err := zoneaware.New(*zc)
	if err != nil {
		p.cfg.Logger.Warn("service's zone-aware config refused; using the server's", "service", service, "err", err)
		return p.calc
	}
	if p.calcs == nil || len(p.calcs) >= maxCalculators {
		p.calcs = map[string]*zoneaware.Calculator{} // bounded: rebuilt on demand
	}
	p.calcs[key] = c
	return c
}

// maxCalculators bounds the distinct per-service zone-aware configs kept.
const maxCalculators = 1024

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

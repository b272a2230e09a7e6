package meshweights

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/weights"
)

// DefaultStaleCycles is SelectorConfig.StaleCycles when zero.
const DefaultStaleCycles = 3

// Fallback reasons, the label values of spillway_weights_fallbacks_total.
const (
	KindNoPlan           = "no_plan"
	KindStale            = "stale"
	KindStoreUnreachable = "store_unreachable"
)

// Reason texts (Plan.Reason starts with one of them).
const (
	ReasonNoPlan           = "no published plan yet"
	ReasonStale            = "published plan stale"
	ReasonStoreUnreachable = "store unreachable"
)

// SelectorConfig configures a Selector.
type SelectorConfig struct {
	// Subscriber holds the published plans and heartbeats. Required.
	Subscriber *Subscriber
	// Local is this replica's own planner. Required.
	Local LocalPlans
	// Services lists the registry's services. Required.
	Services func() []string
	// Interval is the owners' cycle period; zero means DefaultInterval.
	Interval time.Duration
	// StaleCycles: a published plan is used while its shard's heartbeat
	// changed within StaleCycles × Interval (this replica's clock); zero
	// means DefaultStaleCycles.
	StaleCycles int
	// StoreUp reports whether the shared store answers, or nil to use
	// the Subscriber's own view (its List succeeded and the watch lives).
	StoreUp func() bool
	// OnChange is called with the services whose selected plan changed
	// (new vectors, or a change of source), or nil.
	OnChange func(services []string, now time.Time)
	// Now is the clock of Plan's first evaluation of a service, or nil
	// for time.Now.
	Now func() time.Time
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer for the metrics, or nil for none.
	Registerer prometheus.Registerer
}

// Selector chooses each service's plan: the published one while fresh,
// else the local one, and says why. It implements
// Plan(service string) *weights.Plan for xds, resolver and admin.
type Selector struct {
	// Read-only after NewSelector.
	cfg     SelectorConfig
	log     *slog.Logger
	stale   time.Duration
	trigger chan struct{}
	sources *prometheus.GaugeVec
	age     prometheus.Gauge
	falls   *prometheus.CounterVec

	refreshMu sync.Mutex // one Refresh at a time

	// mu guards the fields below.
	mu    sync.Mutex
	gen   uint64 // the last Gen handed out, over all services
	chose map[string]*choice
}

// choice is the plan selected for one service.
type choice struct {
	plan *weights.Plan // what Plan returns; nil: none
	key  string        // planKey of plan
	from any           // the *PlanRecord or local *weights.Plan it was built from
	kind string        // fallback kind, "" for mesh
}

// NewSelector validates cfg and returns a Selector.
func NewSelector(cfg SelectorConfig) (*Selector, error) {
	switch {
	case cfg.Subscriber == nil:
		return nil, errors.New("mesh selector: subscriber: is nil")
	case cfg.Local == nil:
		return nil, errors.New("mesh selector: local: is nil")
	case cfg.Services == nil:
		return nil, errors.New("mesh selector: services: is nil")
	case cfg.Interval < 0:
		return nil, fmt.Errorf("mesh selector: interval: %v is negative", cfg.Interval)
	case cfg.StaleCycles < 0:
		return nil, fmt.Errorf("mesh selector: stale_cycles: %d is negative", cfg.StaleCycles)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.StaleCycles == 0 {
		cfg.StaleCycles = DefaultStaleCycles
	}
	if cfg.StoreUp == nil {
		cfg.StoreUp = cfg.Subscriber.Up
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Selector{
		cfg:     cfg,
		log:     log.With("component", "mesh-selector"),
		stale:   time.Duration(cfg.StaleCycles) * cfg.Interval,
		trigger: make(chan struct{}, 1),
		sources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_weights_source_services",
			Help: "Services by the source of the weights this replica serves: mesh (published by the owner) or local (this replica's own view).",
		}, []string{"source"}),
		age: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "spillway_mesh_plan_age_seconds",
			Help: "Time since the oldest shard heartbeat among the services with a published plan changed, by this replica's clock.",
		}),
		falls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_weights_fallbacks_total",
			Help: "Services that fell back from the published plan to the local one, by reason: no_plan, stale, store_unreachable.",
		}, []string{"reason"}),
		chose: map[string]*choice{},
	}
	for _, k := range []string{KindNoPlan, KindStale, KindStoreUnreachable} {
		s.falls.WithLabelValues(k)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.sources, s.age, s.falls} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("mesh selector: register metrics: %w", err)
			}
		}
	}
	cfg.Subscriber.selector = s // the plans it receives trigger a refresh
	return s, nil
}

// Plan returns service's selected plan, or nil when there is none (use
// endpoint counts). It never blocks on the store.
func (s *Selector) Plan(service string) *weights.Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.chose[service]; ok {
		return c.plan
	}
	c := s.choose(service, s.cfg.Now(), nil)
	s.chose[service] = c
	return c.plan
}

// Trigger asks Run for a Refresh soon; it never blocks. The Subscriber
// the Selector was built over calls it on every update.
func (s *Selector) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// LocalChanged is the local planner's OnChange: the services whose local
// plan changed. Those served from the local plan change with it. It calls
// LocalPlans.Plan, so the local planner must call it without holding a
// lock that its Plan takes.
func (s *Selector) LocalChanged(services []string, now time.Time) {
	s.refresh(services, now)
}

// Run refreshes every Interval and when triggered, until ctx ends; it
// returns nil then.
func (s *Selector) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.trigger:
		}
		s.Refresh(s.cfg.Now())
	}
}

// Refresh re-selects every service's plan at now and calls OnChange with
// those whose selection changed.
func (s *Selector) Refresh(now time.Time) {
	seen := map[string]bool{}
	var all []string
	for _, list := range [][]string{s.cfg.Services(), s.cfg.Subscriber.services()} {
		for _, svc := range list {
			if !seen[svc] {
				seen[svc] = true
				all = append(all, svc)
			}
		}
	}
	s.mu.Lock()
	for svc := range s.chose {
		if !seen[svc] {
			delete(s.chose, svc)
		}
	}
	s.mu.Unlock()
	s.refresh(all, now)
	s.metrics(now)
}

func (s *Selector) refresh(services []string, now time.Time) {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	var changed []string
	s.mu.Lock()
	for _, svc := range services {
		old := s.chose[svc]
		c := s.choose(svc, now, old)
		s.chose[svc] = c
		if old == nil || old.plan != c.plan {
			if old == nil || old.key != c.key || source(old.plan) != source(c.plan) || old.kind != c.kind {
				changed = append(changed, svc)
			}
		}
		if c.kind != "" && (old == nil || old.kind != c.kind) {
			s.falls.WithLabelValues(c.kind).Inc()
			if old != nil {
				s.log.Info("weights fell back to the local view", "service", svc, "reason", c.plan.Reason)
			}
		}
		if c.kind == "" && old != nil && old.kind != "" {
			s.log.Info("weights follow the published plan", "service", svc, "owner", c.plan.Owner)
		}
	}
	s.mu.Unlock()
	if len(changed) > 0 && s.cfg.OnChange != nil {
		s.cfg.OnChange(changed, now)
	}
}

func source(p *weights.Plan) weights.Source {
	if p == nil {
		return 0
	}
	return p.Source
}

// choose selects service's plan at now; s.mu is held. old is the previous
// choice or nil: an unchanged choice returns it, and Gen only moves when
// the vectors do.
func (s *Selector) choose(service string, now time.Time, old *choice) *choice {
	pub, ok := s.cfg.Subscriber.lookup(service)
	var reason, kind string
	switch {
	case ok && pub.hasHB && now.Sub(pub.hbChanged) <= s.stale:
		if old != nil && old.from == any(pub.rec) {
			return old
		}
		c := &choice{from: pub.rec, key: planKey(pub.rec.Result, pub.rec.Endpoints, pub.rec.LocalityFromEndpoints) + subsetKey(pub.rec.Subsets)}
		c.plan = &weights.Plan{
			Gen: s.nextGen(old, c.key), Result: pub.rec.Result, Source: weights.SourceMesh,
			Owner: pub.rec.Owner, Contributors: pub.rec.contributors(), Published: pub.rec.Published,
			Endpoints: pub.rec.Endpoints, LocalityFromEndpoints: pub.rec.LocalityFromEndpoints, PID: pub.rec.PID,
			Subsets: pub.rec.Subsets,
		}
		return c
	case ok:
		kind, reason = KindStale, ReasonStale
		heard := fmt.Sprintf("owner %s of shard %02d never heard", pub.rec.Owner, pub.rec.Shard)
		if pub.hasHB {
			heard = fmt.Sprintf("owner %s last heard %s ago", pub.hb.Owner, now.Sub(pub.hbChanged).Round(time.Second))
		}
		if !s.cfg.StoreUp() {
			kind, reason = KindStoreUnreachable, ReasonStoreUnreachable
		}
		reason += ": " + heard
	case !s.cfg.StoreUp():
		kind, reason = KindStoreUnreachable, ReasonStoreUnreachable
	default:
		kind, reason = KindNoPlan, ReasonNoPlan
	}
	local := s.cfg.Local.Plan(service)
	if old != nil && old.kind == kind && old.from == any(local) && (local == nil || old.plan.Reason == reason) {
		return old
	}
	c := &choice{from: local, kind: kind, key: vectorKey(nil)}
	if local != nil {
		c.key = planKey(local.Result, local.Endpoints, local.LocalityFromEndpoints) + subsetKey(local.Subsets)
		p := *local
		p.Gen = s.nextGen(old, c.key)
		p.Source, p.Reason = weights.SourceLocal, reason
		p.Owner, p.Contributors, p.Published = "", nil, time.Time{}
		c.plan = &p
	}
	return c
}

// nextGen keeps old's Gen when the vectors are the same, else hands out a
// new one; s.mu is held.
func (s *Selector) nextGen(old *choice, key string) uint64 {
	if old != nil && old.plan != nil && old.key == key {
		return old.plan.Gen
	}
	s.gen++
	return s.gen
}

func (s *Selector) metrics(now time.Time) {
	var mesh, local int
	var oldest time.Duration
	s.mu.Lock()
	for svc, c := range s.chose {
		if c.plan == nil {
			continue
		}
		if c.plan.Source == weights.SourceMesh {
			mesh++
		} else {
			local++
		}
		if pub, ok := s.cfg.Subscriber.lookup(svc); ok && pub.hasHB {
			oldest = max(oldest, now.Sub(pub.hbChanged))
		}
	}
	s.mu.Unlock()
	s.sources.WithLabelValues("mesh").Set(float64(mesh))
	s.sources.WithLabelValues("local").Set(float64(local))
	s.age.Set(oldest.Seconds())
}

// Sources returns how many services the last Refresh served from the mesh
// and from the local view.
func (s *Selector) Sources() (mesh, local int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.chose {
		switch {
		case c.plan == nil:
		case c.plan.Source == weights.SourceMesh:
			mesh++
		default:
			local++
		}
	}
	return mesh, local
}

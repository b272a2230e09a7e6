package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3lrsgrpc "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/weights/svcconfig"
)

// Config configures a Server.
type Config struct {
	// Store is the registry the resources come from; non-nil.
	Store *registry.Store
	// Replica is this replica's id (--replica-id): its streams' group in
	// the subsets of a mesh-wide plan; "" for one replica alone.
	Replica string
	// PortName is the endpoint port xDS clients dial; zero means "grpc".
	// Endpoints without it use their first TCP port.
	PortName string
	// OmitHostnames leaves the hostname out of every EDS endpoint; by
	// default it is the endpoint's id. Envoy shows the hostname (admin
	// and access logs) and sends it with auto_host_rewrite; grpc-go reads
	// it only for authority rewriting. The region's default ids are 17 of
	// an endpoint's 47 bytes, so leaving them out makes every EDS
	// response about a third smaller (docs/capacity.md).
	OmitHostnames bool
	// Debounce is a service's first coalescing window: a change to a
	// service after a quiet period of its own reaches the streams at
	// once, and the changes to it that follow within Debounce are
	// gathered into one push; zero means 100 ms.
	Debounce time.Duration
	// MaxDelay bounds a service's coalescing window: while the service
	// keeps changing, each window is twice the one before, up to
	// MaxDelay, so a long burst becomes a handful of pushes; zero means
	// 8×Debounce. Less than Debounce means Debounce.
	MaxDelay time.Duration
	// Resync is the period of a full re-evaluation of every stream; zero
	// means 1 min. Unchanged content is not re-sent. Every source of
	// change wakes the streams it changes on its own (store, planner,
	// route and policy rules, region rules as they expire, subset
	// slots, route warm-up); the resync is the safety net under them,
	// and costs about 9 µs a stream (45 ms of CPU a second at 50,000
	// streams with 10 s; docs/capacity.md).
	Resync time.Duration
	// LRSInterval is the load reporting interval asked of clients; zero
	// means 10 s.
	LRSInterval time.Duration
	// Loads is the load table LRS reports are kept in; the assembly
	// builds it and hands it to the planner too (load.NewTable(
	// xds.LoadIdle)). Nil makes one for this server.
	Loads *load.Table
	// Plans gives zone-aware, load-aware locality weights (a
	// *weights.Planner, whose inputs this Server provides: Loads,
	// ClientCounts, Has, Dispatch); nil leaves Weights in charge. A service
	// Plans has no plan for gets Weights too.
	Plans Plans
	// Weights computes locality weights per client zone for services
	// without a plan; nil weighs a locality by its healthy endpoints.
	Weights LocalityWeights
	// ZoneVariant names the EDS variant a client zone gets, so that zones
	// that get the same weights share one encoded resource; nil means one
	// variant for all zones. It must agree with Weights.
	ZoneVariant func(svc *registry.Service, zone string) string
	// MaxZones caps the client zones (node.locality.zone, chosen by
	// clients) that keep their own name: as the zone label of metrics, in
	// the load table and as a client zone of the zone-aware planner (which
	// makes a route and an EDS variant per client zone). The first
	// MaxZones distinct zones get a slot; later ones are "other" in metrics
	// and the load table and get the zoneless route, unless the service
	// has endpoints in them. A zone with no stream and no load report for
	// 5 min frees its slot. Zero means 64; negative is an error.
	MaxZones int
	// RegionPreference orders, per client region, the other regions a
	// client fails over to (package regions): a client of region R
	// (node.locality.region) gets R's localities at priority 0 and the
	// others at 1, 2, ... in this order, then by name. Nil orders the
	// others by name. A client without a region gets every locality at
	// priority 0.
	RegionPreference regions.Preference
	// RegionRules gives each service's regional redirects and exclusions;
	// nil: none. Call Dispatch with the services whose rules changed.
	RegionRules RegionRules
	// Authorizer is asked, on the first request of every ADS (SotW and
	// delta) and LRS stream that carries the node, whether the caller may
	// connect as an xDS client of the node's cluster (action "xds",
	// resource node.cluster; "" while no node was sent); a denial ends
	// the stream with PermissionDenied before anything is sent or
	// counted. Nil allows every stream.
	Authorizer Authorizer
	// Routes gives the route rules of services (a *routing.Store): a
	// service with rules gets RouteConfiguration S built from them, and a
	// change of rules, or of a target's presence, pushes it to the
	// streams subscribed to S. Nil serves every service one route to
	// itself.
	Routes RouteRules
	// RouteWarmup is how long a rule change that sends RPCs to a cluster
	// the client was not using waits, serving the old route plus a route
	// that matches no RPC but makes the client build that cluster, before
	// the new route goes out (grpc-go fails the RPCs it picks for a
	// cluster its balancer does not have yet). Zero means 1 s; negative
	// sends the new route at once.
	RouteWarmup time.Duration
	// Policies gives each service's resilience policy (issue 30: outlier
	// detection, circuit breaker, timeout, retries, fault injection, the
	// endpoint-picking policy), which goes out in its Cluster,
	// RouteConfiguration and Listener; a change of a service's policy
	// pushes them to the streams subscribed to it. Nil: no service has a
	// policy, and every service gets the resources of the zero policy.
	Policies Policies
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements it.
// A non-nil error is a denial whose message is the PermissionDenied
// status's. It is called from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// authorize asks the Authorizer whether the stream's caller may be an
// xDS client of cluster; a denial is a PermissionDenied status.
func (s *Server) authorize(ctx context.Context, protocol, cluster string) error {
	if s.cfg.Authorizer == nil {
		return nil
	}
	if err := s.cfg.Authorizer.Authorize(ctx, authz.XDS, cluster); err != nil {
		s.log.Info("xds stream denied", "protocol", protocol, "identity", authn.FromContext(ctx).String(), "cluster", cluster, "err", err)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("xds config: Store is nil")
	}
	if c.PortName == "" {
		c.PortName = "grpc"
	}
	if err := registry.ValidateLabel("xds config: PortName", c.PortName); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Debounce", &c.Debounce, 100 * time.Millisecond},
		{"Resync", &c.Resync, time.Minute},
		{"LRSInterval", &c.LRSInterval, 10 * time.Second},
		{"MaxDelay", &c.MaxDelay, 0},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return fmt.Errorf("xds config: %s %v is negative", d.name, *d.v)
		}
	}
	if c.LRSInterval < time.Second {
		return fmt.Errorf("xds config: LRSInterval %v: want at least 1s", c.LRSInterval)
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 8 * c.Debounce
	}
	if c.RouteWarmup == 0 {
		c.RouteWarmup = time.Second
	}
	switch {
	case c.MaxZones == 0:
		c.MaxZones = 64
	case c.MaxZones < 0:
		return fmt.Errorf("xds config: MaxZones %d is negative", c.MaxZones)
	}
	if c.Weights == nil {
		c.Weights = healthyCountWeights
	}
	if err := c.RegionPreference.Validate(); err != nil {
		return fmt.Errorf("xds config: RegionPreference: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Server is the ADS (state of the world and delta) and LRS server.
type Server struct {
	v3discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	v3lrsgrpc.UnimplementedLoadReportingServiceServer

	// Read-only after New.
	cfg     Config
	store   *registry.Store
	log     *slog.Logger
	metrics *metrics

	cache cache
	hub   hub
	fan   *fanout
	loads *load.Table
	zones *labelSet // client zones that keep their name
	// sweepEvery is the period of sweep: sweepPeriod, or Config.Resync
	// when that is shorter.
	sweepEvery time.Duration
}

// sweepPeriod is how often the server frees what clients stopped using
// (sweep). It was the resync's period, 10 s, until the resync's default
// became a minute; the sweep kept its own.
const sweepPeriod = 10 * time.Second

// labelIdle is how long a client-chosen value (a client zone, a load
// table flow) with no stream and no report is kept.
const labelIdle = 5 * time.Minute

// LoadIdle is how long the load table keeps a flow with no report: give
// it to load.NewTable for Config.Loads.
const LoadIdle = labelIdle

// New validates cfg and returns a Server. Register it on a grpc.Server made
// with grpc.ForceServerCodecV2(Codec()), and Run it.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:   cfg,
		store: cfg.Store,
		log:   cfg.Logger,
		cache: cache{entries: map[string]*entry{}},
		hub:   hub{by: map[string]map[*watcher]struct{}{}, wild: map[*watcher]struct{}{}, nodes: map[*watcher]nodeInfo{}, counts: map[string]map[string]int{}},
		loads: cfg.Loads,
		fan:   newFanout(),
	}
	s.sweepEvery = min(sweepPeriod, cfg.Resync)
	if s.loads == nil {
		s.loads = load.NewTable(LoadIdle)
	}
	s.metrics = newMetrics(s)
	s.zones = newLabelSet(cfg.MaxZones, labelIdle, s.metrics.freeZone)
	if cfg.Registerer != nil {
		if err := s.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("xds metrics: %w", err)
		}
	}
	return s, nil
}

// Register adds the ADS and LRS services to g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	v3discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, s)
	v3lrsgrpc.RegisterLoadReportingServiceServer(g, s)
}

// Loads is the load table fed by LRS.
func (s *Server) Loads() *load.Table { return s.loads }

// Run tells streams about store changes until ctx ends: each service's
// bursts are gathered for Debounce, doubling up to MaxDelay (coalescer);
// the streams with a wildcard subscription, which every change wakes, get
// the registry's changes through one window for the whole store (burst);
// every Resync every stream re-evaluates everything it subscribes to; and
// every sweepEvery what clients stopped using is freed (sweep). It returns
// nil when ctx ends.
func (s *Server) Run(ctx context.Context) error {
	sub := s.store.Subscribe("")
	defer sub.Close()
	resync := time.NewTicker(s.cfg.Resync)
	defer resync.Stop()
	sweep := time.NewTicker(s.sweepEvery)
	defer sweep.Stop()
	var window alarm
	co := newCoalescer(s.cfg.Debounce, s.cfg.MaxDelay)
	wildWindow := time.NewTimer(0)
	<-wildWindow.C
	wb := newBurst(s.cfg.Debounce, s.cfg.MaxDelay)
	wildNames := map[string]struct{}{} // changed, not yet dispatched to wildcard streams
	var wildFirst time.Time            // the earliest of them
	// A new subscription starts with every name marked: that is the state
	// at start, not a change, so it opens no window.
	select {
	case <-sub.C():
		s.hub.dispatch(sub.Changed(), time.Now())
	default:
	}
	// arm sets the alarm to the end of the soonest open window, if any (an
	// alarm left set rings, and the loop finds nothing due).
	arm := func() {
		if end, ok := co.next(); ok {
			window.set(end)
		}
	}
	// Route rules: a change of rules pushes the services that have (or
	// had) rules; a target that comes or goes pushes the services whose
	// rules name it (deps).
	var routesChanged <-chan struct{}
	var ruled []string
	var deps map[string][]string
	if s.cfg.Routes != nil {
		routesChanged = s.cfg.Routes.Changed()
		ruled, deps = s.cfg.Routes.Services(), dependents(s.cfg.Routes)
	}
	// Resilience policies: a change pushes the services whose policy
	// changed (of those listed before or after it).
	var policiesChanged <-chan struct{}
	var pols map[string]svcconfig.Resilience
	if s.cfg.Policies != nil {
		policiesChanged = s.cfg.Policies.Changed()
		pols = policies(s.cfg.Policies)
	}
	// A registry change changes the EDS of the changed services (and the
	// route of those whose rules name them, and the Cluster of those with
	// a ring hash, whose size follows the endpoint count): dispatchViews
	// leaves out the streams whose subset it did not change.
	changed := func(names []string, at time.Time, a audience) {
		s.dispatchViews(names, at, a)
		var ds []string
		for _, n := range names {
			ds = append(ds, deps[n]...)
			if ringHashOf(s.policyOf(n)) != nil {
				ds = append(ds, n) // the Cluster's ring size follows the endpoints
			}
		}
		if len(ds) > 0 {
			s.hub.dispatchTo(ds, at, a)
		}
	}
	wild := func(at time.Time) {
		names := slices.Sorted(maps.Keys(wildNames))
		clear(wildNames)
		changed(names, at, toWild)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-routesChanged:
			routesChanged = s.cfg.Routes.Changed()
			now := s.cfg.Routes.Services()
			s.hub.dispatch(append(ruled, now...), time.Now())
			ruled, deps = now, dependents(s.cfg.Routes)
		case <-policiesChanged:
			policiesChanged = s.cfg.Policies.Changed()
			now := policies(s.cfg.Policies)
			if names := changedPolicies(pols, now); len(names) > 0 {
				s.hub.dispatch(names, time.Now())
			}
			pols = now
		case <-sub.C():
			now := time.Now()
			names := sub.Changed()
			if names := co.change(names, now); len(names) > 0 {
				changed(names, now, toNamed)
			}
			arm()
			for _, n := range names {
				wildNames[n] = struct{}{}
			}
			dispatch, next := wb.change()
			if dispatch {
				wild(now)
			} else if wildFirst.IsZero() {
				wildFirst = now
			}
			if next > 0 {
				wildWindow.Reset(next)
			}
		case <-window.C():
			window.rang()
			if names, first := co.expire(time.Now()); len(names) > 0 {
				changed(names, first, toNamed)
			}
			arm()
		case <-wildWindow.C:
			dispatch, next := wb.expire()
			if dispatch {
				wild(wildFirst)
				wildFirst = time.Time{}
			}
			if next > 0 {
				wildWindow.Reset(next)
			}
		case now := <-resync.C:
			s.hub.dispatchAll(now)
		case now := <-sweep.C:
			s.sweep(now)
		}
	}
}

// sweep frees what clients stopped using: idle zone slots (and their
// metric series), stale load-table entries, and the cached resources of
// services gone from the registry.
func (s *Server) sweep(now time.Time) {
	snap := s.store.Snapshot()
	s.zones.sweep(now)
	s.loads.Prune(now, snap)
	s.cache.sweep(snap)
}

// streamOpened counts an ADS stream whose node is n, and takes its zone's
// slot into n.label until streamClosed.
func (s *Server) streamOpened(protocol string, n *nodeInfo) {
	n.label = s.zones.acquire(n.zone, time.Now())
	s.metrics.streams.WithLabelValues(protocol, n.label).Inc()
}

// streamClosed undoes streamOpened.
func (s *Server) streamClosed(protocol string, n nodeInfo) {
	s.metrics.streams.WithLabelValues(protocol, n.label).Dec()
	s.zones.release(n.label, time.Now())
}

// streamCore is what both stream kinds share: one goroutine, the gRPC
// handler's, receives requests and answers them; pushes for store changes
// run on the server's fan-out workers (fanout), only while changes are
// pending, so an idle stream costs one goroutine, not two. mu serialises
// the two: state and Send are only touched under it. A stream stuck in
// Send holds its own push goroutine and its own lock, nothing else.
type streamCore struct {
	w       *watcher
	fan     *fanout      // read-only
	push    func() error // set by the owner; called with mu held
	pushing atomic.Bool  // queued or running on the fan-out
	wg      sync.WaitGroup
	slot    int // which fan-out queue holds it; guarded by fanout.mu

	// mu guards the stream's state, closed and err, and every Send.
	mu     sync.Mutex
	closed bool
	err    error // a failed push; the handler returns it
}

// wake queues a push unless one is queued or running; resync says that
// only the periodic resync wants it, which waits behind changes. It is
// called by the hub, never after hub.remove(w) returned.
func (c *streamCore) wake(resync bool) {
	if c.pushing.CompareAndSwap(false, true) {
		c.wg.Add(1)
		c.fan.enqueue(c, resync)
		return
	}
	if !resync {
		c.fan.promote(c)
	}
}

// runPush runs one push on a fan-out worker. Changes marked while it ran
// queue the stream again, at the back.
func (c *streamCore) runPush(f *fanout) {
	defer c.wg.Done()
	c.mu.Lock()
	if c.closed || c.err != nil {
		c.mu.Unlock()
		c.pushing.Store(false)
		return
	}
	c.err = c.push()
	failed := c.err != nil
	c.mu.Unlock()
	c.pushing.Store(false)
	// A change marked after the push took the pending set, but before
	// pushing was cleared, found the push queued: look again.
	if !failed && c.w.pending() && c.pushing.CompareAndSwap(false, true) {
		c.wg.Add(1) // before this push's Done: stop's Wait cannot miss it
		f.enqueue(c, false)
	}
}

// handle runs f under the stream lock, unless a push already failed.
func (c *streamCore) handle(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return f()
}

// stop ends pushes: after it returns no goroutine touches the stream.
func (c *streamCore) stop(h *hub) {
	h.remove(c.w) // no wake after this
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}

// nodeInfo is what a stream's node says about its client, and the label
// its zone got from the zone set (the zone itself while it holds a slot).
type nodeInfo struct {
	id, zone, region, cluster string
	label                     string
}

// hub knows which streams want which services. Dispatch never blocks: it
// marks names on each interested watcher and fills its one-slot channel.
type hub struct {
	// mu guards the maps and every watcher's interest fields.
	mu    sync.Mutex
	by    map[string]map[*watcher]struct{}
	wild  map[*watcher]struct{}
	nodes map[*watcher]nodeInfo
	slots slots // the streams of each service numbered per zone label
	// counts is, for each service of by, its streams per client zone,
	// kept as setNames changes by (ClientCounts). An inner map is never
	// changed once stored: a change stores a new one, so ClientCounts
	// hands them out without copying.
	counts map[string]map[string]int
}

// watcher is a stream's side of the hub: the names it wants and the
// changes it has not yet handled.
type watcher struct {
	// wake is called, never blocking, when changes are pending; resync
	// when only Config.Resync marked them. Read-only.
	wake func(resync bool)

	// Guarded by hub.mu.
	names    map[string]struct{}
	wildcard bool

	// mu guards the pending changes.
	mu    sync.Mutex
	first string              // the first name marked; "" for none
	dirty map[string]struct{} // the names marked after first; nil until one is
	all   bool
	asked uint8     // types whose request waits for an answer, bit t for type t
	since time.Time // earliest pending change, for push latency
	// viewed is set once a subset view of this stream is recorded
	// (hub.seen); until then a full build has no view to forget.
	viewed atomic.Bool

	// pushing is set from take until the push that took the changes
	// ends (pushTypes): dispatchViews wakes such a stream whatever its
	// last build, which may have read the registry before the change.
	pushing bool
}

func newWatcher(wake func(resync bool)) *watcher { return &watcher{wake: wake} }

func (w *watcher) mark(name string, all bool, at time.Time) {
	w.mu.Lock()
	switch {
	case all:
		w.all = true
	case w.first == "" || w.first == name:
		w.first = name
	default:
		if w.dirty == nil {
			w.dirty = make(map[string]struct{}, 1)
		}
		w.dirty[name] = struct{}{}
	}
	if w.since.IsZero() || at.Before(w.since) {
		w.since = at
	}
	w.mu.Unlock()
	w.wake(all)
}

// ask queues the answer to a request for type t.
func (w *watcher) ask(t int) {
	w.mu.Lock()
	w.asked |= 1 << t
	w.mu.Unlock()
	w.wake(false)
}

// busy reports whether a push is running.
func (w *watcher) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pushing
}

// done ends the push that take began.
func (w *watcher) done() {
	w.mu.Lock()
	w.pushing = false
	w.mu.Unlock()
}

// pending reports whether changes wait to be taken.
func (w *watcher) pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all || w.first != "" || w.asked != 0
}

// marked is the set of names a watcher had marked.
type marked struct {
	first string
	more  map[string]struct{}
}

// any reports whether a name of m is in names.
func (m marked) any(names map[string]struct{}) bool {
	if m.first == "" {
		return false
	}
	if _, ok := names[m.first]; ok {
		return true
	}
	for n := range m.more {
		if _, ok := names[n]; ok {
			return true
		}
	}
	return false
}

// take returns and clears the pending changes, and marks a push running
// until done.
func (w *watcher) take() (names marked, all bool, asked uint8, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	names, all, asked, since = marked{w.first, w.dirty}, w.all, w.asked, w.since
	w.first, w.dirty, w.all, w.asked, w.since = "", nil, false, 0, time.Time{}
	w.pushing = true
	return names, all, asked, since
}

// subs is what a stream subscribes to for one resource type.
type subs struct {
	requested bool
	names     map[string]struct{}
	wildcard  bool
}

// pushTypes answers the requests and changes pending on w, type by type
// in ADS order (listeners before routes before clusters before endpoints),
// for every type asked for or whose subscription the changes touch.
func pushTypes(w *watcher, types [4]*subs, respond func(t int, since time.Time) error) (err error) {
	names, all, asked, since := w.take()
	defer w.done()
	for t, ts := range types {
		if !ts.requested {
			continue
		}
		hit := all || ts.wildcard || names.any(ts.names)
		switch {
		case hit:
			err = respond(t, since)
		case asked&(1<<t) != 0:
			// Only the answer to a request: no store change to time.
			err = respond(t, time.Time{})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// setInterest makes w want the union of the names of types, and every
// service if any type is a wildcard.
func (h *hub) setInterest(w *watcher, types [4]*subs, node nodeInfo) {
	names := map[string]struct{}{}
	wildcard := false
	for _, ts := range types {
		for n := range ts.names {
			names[n] = struct{}{}
		}
		wildcard = wildcard || ts.wildcard
	}
	h.setNames(w, names, wildcard, node)
}

// setNames replaces what w wants.
func (h *hub) setNames(w *watcher, names map[string]struct{}, wildcard bool, node nodeInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, known := h.nodes[w]
	h.moveSlots(w, w.names, names, prev.zone, node.zone, known)
	// w counts in its old zone for each old name and in its new zone for
	// each new name: when the zone stays, only the names that come or go
	// move a count.
	moved := known && prev.zone != node.zone
	for n := range w.names {
		_, keep := names[n]
		if !keep {
			delete(h.by[n], w)
			if len(h.by[n]) == 0 {
				delete(h.by, n)
			}
		}
		if !keep || moved {
			h.count(n, prev.zone, -1)
		}
	}
	for n := range names {
		m := h.by[n]
		if m == nil {
			m = map[*watcher]struct{}{}
			h.by[n] = m
		}
		if _, had := m[w]; !had || moved {
			h.count(n, node.zone, +1)
		}
		m[w] = struct{}{}
	}
	w.names = names
	w.wildcard = wildcard
	if wildcard {
		h.wild[w] = struct{}{}
	} else {
		delete(h.wild, w)
	}
	h.nodes[w] = node
}

// count moves service n's stream count in zone by d, storing a new inner
// map (ClientCounts' callers hold the old one); the caller holds mu.
func (h *hub) count(n, zone string, d int) {
	old := h.counts[n]
	m := make(map[string]int, len(old)+1)
	maps.Copy(m, old)
	if m[zone] += d; m[zone] <= 0 {
		delete(m, zone)
	}
	if len(m) == 0 {
		delete(h.counts, n)
		return
	}
	h.counts[n] = m
}

func (h *hub) remove(w *watcher) {
	h.setNames(w, nil, false, nodeInfo{})
	h.mu.Lock()
	delete(h.nodes, w)
	h.mu.Unlock()
}

func (h *hub) dispatch(names []string, at time.Time) { h.dispatchTo(names, at, toAll) }

// audience is which streams a dispatch marks: the registry's changes
// reach the streams with a wildcard subscription on their own schedule
// (burst), the others service by service (coalescer).
type audience uint8

const (
	toAll   audience = iota
	toNamed          // streams without a wildcard subscription
	toWild           // streams with one
)

// wants reports whether a dispatch to a marks w; the caller holds h.mu.
func (a audience) wants(w *watcher) bool {
	return a == toAll || (a == toWild) == w.wildcard
}

// dispatchTo marks names on the streams of a that want them.
func (h *hub) dispatchTo(names []string, at time.Time, a audience) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range names {
		if n == registry.FlagsChanged {
			continue
		}
		if a != toWild {
			for w := range h.by[n] {
				if a.wants(w) {
					w.mark(n, false, at)
				}
			}
		}
		if a != toNamed {
			for w := range h.wild {
				w.mark(n, false, at)
			}
		}
	}
}

func (h *hub) dispatchAll(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.nodes {
		w.mark("", true, at)
	}
}

// Subscription is one client's interest, for the graph of who calls whom.
// Zone is the client's zone while it holds a slot (Config.MaxZones), else
// "other" ("invalid" when it is not a DNS label).
type Subscription struct {
	NodeID, Zone, ClientService string
	Services                    []string
	Wildcard                    bool
}

// ClientServices lists the client services (node.cluster) of the
// connected streams, each once, sorted; streams without one are left out.
func (s *Server) ClientServices() []string {
	s.hub.mu.Lock()
	seen := make(map[string]bool, len(s.hub.nodes))
	for _, n := range s.hub.nodes {
		if n.cluster != "" {
			seen[n.cluster] = true
		}
	}
	s.hub.mu.Unlock()
	return slices.Sorted(maps.Keys(seen))
}

// Subscriptions lists what every connected stream subscribes to.
func (s *Server) Subscriptions() []Subscription {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	out := make([]Subscription, 0, len(s.hub.nodes))
	for w, n := range s.hub.nodes {
		zone := n.zone
		if zone != "" && n.label != zone {
			zone = n.label
		}
		sub := Subscription{NodeID: n.id, Zone: zone, ClientService: n.cluster, Wildcard: w.wildcard}
		for name := range w.names {
			sub.Services = append(sub.Services, name)
		}
		out = append(out, sub)
	}
	return out
}

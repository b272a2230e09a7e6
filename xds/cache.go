package xds

import (
	"strconv"
	"sync"
	"time"

	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/svcconfig"
)

// entry caches the encoded resources of one service name. Listener, route
// and cluster depend on the name alone and are built once; the endpoints
// depend on the service version and on the client's zone variant.
type entry struct {
	// mu guards the fields below.
	mu     sync.Mutex
	static [3]*resource // LDS, RDS, CDS
	// staticPol[t] is the policy key (polKey) static[t] was built for.
	staticPol [3]uint64
	// pol is the service's resilience policy as last read (refreshPolicy),
	// polKey its fingerprint (policyKey; 0 for none).
	pol    svcconfig.Resilience
	polKey uint64
	svc    *registry.Service
	gen    uint64               // plan generation the eds map is for
	rules  uint64               // region rules version the eds map is for
	eds    map[string]*resource // by zone and region variant, for svc, gen and rules
	good   map[string]*resource // last valid, by zone and region variant, any version
	// shared is what the variants of eds share (edsshare.go); nil until
	// one is built in full, and again after two sweeps (cache.sweep).
	// sharedAged says a sweep has seen it.
	shared     *edsShared
	sharedAged bool
	// subIn[v] fingerprints what built good[v] for a subset variant v
	// (subsetFingerprint): under a new service version or plan
	// generation, a slot whose endpoints and weights are the same takes
	// good[v] again instead of encoding it anew.
	subIn map[string]uint64
	// subs memoizes, for svc, rules and the plan subsPlan, what each
	// subset slot's stream is served (subsetFor): a resync re-evaluates
	// every stream, and a stream's slot gives it the same answer until
	// one of those changes.
	subs     map[subsKey]subsMemo
	subsPlan *weights.Plan
	// regions are svc's regions with a healthy endpoint, sorted; nil
	// until computed for svc.
	regions []string

	// one is the set {name}, read-only: the subscription of every
	// state-of-the-world stream that names this service alone, in any
	// type, is this one set instead of maps of its own (sotw.go).
	one map[string]struct{}
	// The route built from rules (routes.go): rds, for rdsKey, built
	// from rdsRC; while a change warms new clusters, warmRes serves
	// until warmUntil for the rules of warmKey.
	rds       *resource
	rdsKey    string
	rdsRC     *v3routepb.RouteConfiguration
	warmKey   string
	warmUntil time.Time
	warmRes   *resource
}

// cache maps service names to entries: one per service served since the
// last sweep; sweep drops those of services gone from the registry.
type cache struct {
	// mu guards entries.
	mu      sync.RWMutex
	entries map[string]*entry
}

func (c *cache) entry(name string) *entry {
	c.mu.RLock()
	e := c.entries[name]
	c.mu.RUnlock()
	if e != nil {
		return e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e = c.entries[name]; e == nil {
		e = &entry{one: map[string]struct{}{name: {}}}
		c.entries[name] = e
	}
	return e
}

// lookup returns resource name of type t as a client in zone (of no
// region) sees it; see lookupFor.
func (s *Server) lookup(t int, name, zone string, snap *registry.Snapshot) (*resource, bool) {
	return s.lookupFor(t, name, nodeInfo{zone: zone}, nil, snap)
}

// lookupFor returns resource name of type t as client node, on stream w
// (nil for none: no subset), sees it, and false if the service does not
// exist. A resource that fails validation is never returned: the last
// valid one is, or none.
func (s *Server) lookupFor(t int, name string, node nodeInfo, w *watcher, snap *registry.Snapshot) (*resource, bool) {
	zone := node.zone
	svc, ok := snap.Service(name)
	if !ok {
		return nil, false
	}
	e := s.cache.entry(name)
	e.mu.Lock()
	defer e.mu.Unlock()
	if t < 3 {
		s.refreshPolicy(e, name)
	}
	if t == 1 {
		if r, ok := s.ruledRoute(e, name, snap); ok {
			return r, true
		}
	}
	if t < 3 {
		key, ringN := e.polKey, 0
		if t == 2 && ringHashOf(e.pol) != nil {
			// The ring's size follows the endpoint count (ringSizes).
			ringN = ringEndpoints(svc, s.cfg.PortName)
			key = key*fnvPrime ^ uint64(ringN+1)
		}
		if e.static[t] == nil || e.staticPol[t] != key {
			r, err := s.buildStaticFor(t, name, e.pol, ringN)
			if err != nil && e.polKey != 0 {
				r, err = s.policyFailed(t, name, e.static[t], err)
			}
			if err != nil {
				s.metrics.invalid.WithLabelValues(shortType(typeURLs[t])).Inc()
				s.log.Error("resource not built", "type", shortType(typeURLs[t]), "service", name, "err", err)
				return nil, true
			}
			e.static[t], e.staticPol[t] = r, key
		}
		return e.static[t], true
	}
	p := s.planFor(name) // one read: the variant, its weights and the subset agree
	variant, gen, lw, epw := s.variant(p, svc, zone)
	rules, rulesVer := s.regionRules(name)
	if e.svc != svc || e.gen != gen || e.rules != rulesVer {
		if e.svc != svc {
			e.regions = nil
		}
		e.svc, e.gen, e.rules = svc, gen, rulesVer
		clear(e.eds)
		e.shared = nil
		clear(e.subs)
	}
	if e.regions == nil {
		e.regions = serviceRegions(svc, s.cfg.PortName)
	}
	prio, outcome := s.priorities(e.regions, node.region, rules)
	base, pk := variant, prioKey(prio)
	variant += pk
	built := svc
	var fp uint64
	reuse := false
	m, subZone, slot, subset := s.subsetFor(e, svc, p, w, base, pk, epw)
	if subset {
		variant += m.key
		fp, reuse = m.fp, m.view != 0
		s.hub.seen(w, name, slot, m.view)
	} else {
		s.hub.unseen(w, name)
	}
	if r := e.eds[variant]; r != nil {
		return r, true
	}
	if e.eds == nil {
		e.eds, e.good = map[string]*resource{}, map[string]*resource{}
	}
	s.reportRegions(name, node.region, outcome)
	if r := e.good[variant]; reuse && r != nil && e.subIn[variant] == fp {
		e.eds[variant] = r
		return r, true
	}
	if subset {
		eps, edge, _, _ := s.subsetAt(nil, svc, p, subZone, slot)
		built = &registry.Service{Name: svc.Name, Version: svc.Version, Endpoints: eps}
		epw.edge = edge
	}
	var r *resource
	var err error
	if subset {
		r, err = s.buildEDS(built, zone, lw, epw, prio)
	} else {
		r, err = s.buildEDSShared(e, svc, zone, lw, epw, prio)
	}
	if err != nil {
		s.metrics.invalid.WithLabelValues("EDS").Inc()
		s.log.Error("endpoints not pushed: the new version is invalid, clients keep the last valid one", "service", name, "zone", zone, "err", err)
		delete(e.subIn, variant)
		r = e.good[variant]
		if r == nil {
			return nil, true
		}
	} else {
		e.good[variant] = r
		if reuse {
			if e.subIn == nil {
				e.subIn = map[string]uint64{}
			}
			e.subIn[variant] = fp
		} else {
			delete(e.subIn, variant)
		}
	}
	e.eds[variant] = r
	return r, true
}

// subsKey is one subset slot's stream as lookupFor serves it: the
// variant's route and priorities, the client zone and the stream's slot.
type subsKey struct {
	base, prio, zone string
	slot             int
}

// subsMemo is what a subset slot's stream is served: its subset, the
// slot it wrapped to, under key among the service's EDS variants, with
// the subsetFingerprint fp and the subsetView view of that build (0: not
// checkable, encoded anew); key "" when the stream gets every endpoint.
// The subset's endpoints are not kept: only a build needs them.
type subsMemo struct {
	key     string
	wrapped int
	fp      uint64
	view    uint64
}

// subsetFor returns what stream w is served of svc under plan p, with
// its client zone and slot; false when it gets every endpoint: the plan
// gives no subsets, w holds no slot, or its group is new to the plan. A
// stream whose slot the plan does not know yet (it came after the plan
// was computed) gets the subset of the slot its number wraps to in its
// group. base, prio
// and epw are the variant's (planVariant, prioKey). Called with e.mu
// held; e.svc and e.rules are svc's and its rules' as lookupFor set them.
func (s *Server) subsetFor(e *entry, svc *registry.Service, p *weights.Plan, w *watcher, base, prio string, epw endpointWeights) (subsMemo, string, int, bool) {
	if p == nil || p.Subsets == nil {
		return subsMemo{}, "", 0, false
	}
	zone, slot, ok := s.hub.streamSlot(w, svc.Name)
	if !ok {
		return subsMemo{}, "", 0, false
	}
	if e.subsPlan != p {
		e.subsPlan = p
		clear(e.subs)
	}
	k := subsKey{base: base, prio: prio, zone: zone, slot: slot}
	if m, ok := e.subs[k]; ok {
		return m, zone, slot, m.key != ""
	}
	var m subsMemo
	if eps, edge, wrapped, ok := s.subsetAt(nil, svc, p, zone, slot); ok {
		m.key, m.wrapped = "|s"+strconv.Quote(zone)+"#"+strconv.Itoa(wrapped), wrapped
		epw.edge = edge
		if fp, ok := s.subsetFingerprint(eps, p, zone, epw); ok {
			m.fp, m.view = fp, subsetView(base, prio, zone, wrapped, fp)
		}
	}
	if e.subs == nil {
		e.subs = map[subsKey]subsMemo{}
	}
	e.subs[k] = m
	return m, zone, slot, m.key != ""
}

// variant names the EDS content a client zone gets under the service's
// plan p (nil for none), so that zones that get the same weights share one
// encoded resource, with the plan generation it is valid for and the
// weights that build it.
func (s *Server) variant(p *weights.Plan, svc *registry.Service, zone string) (string, uint64, LocalityWeights, endpointWeights) {
	if p != nil && p.Result != nil {
		v, epw := planVariant(p, zone)
		return v, p.Gen, planWeights(p), epw
	}
	if s.cfg.ZoneVariant != nil {
		return s.cfg.ZoneVariant(svc, zone), 0, s.cfg.Weights, endpointWeights{}
	}
	return "", 0, s.cfg.Weights, endpointWeights{}
}

// planVariant is variant's name and endpoint weights under plan p, which
// has a Result. A plan of PID alone (LocalityFromEndpoints) gives every
// client zone the same content.
func planVariant(p *weights.Plan, zone string) (string, endpointWeights) {
	epw := endpointWeights{byID: p.Endpoints, localities: p.LocalityFromEndpoints}
	if p.LocalityFromEndpoints {
		return "", epw
	}
	return p.Result.Route(zone).ClientZone, epw
}

// buildStatic encodes Listener, RouteConfiguration (without rules) or
// Cluster name (t 0, 1, 2) for a service without a policy.
func (s *Server) buildStatic(t int, name string) (*resource, error) {
	return s.buildStaticFor(t, name, svcconfig.Resilience{}, 0)
}

// buildStaticFor is buildStatic with the service's policy r, for a
// service of ringN healthy endpoints (its ring hash's size; 0 for none).
func (s *Server) buildStaticFor(t int, name string, r svcconfig.Resilience, ringN int) (*resource, error) {
	var m proto.Message
	switch t {
	case 0:
		l, err := listenerFor(name, r)
		if err != nil {
			return nil, err
		}
		m = l
	case 1:
		m = routeFor(name, r)
	case 2:
		m = clusterWith(name, r, ringN)
	}
	return encode(name, m)
}

// ringEndpoints counts what a ring hash client's ring is made of: svc's
// serving, healthy endpoints with the port (grpc-go leaves unhealthy and
// draining ones out). With regional priorities a client's ring holds its
// region's alone, and the count is the service's: sizes stay fixed per
// endpoint only within a region's churn.
func ringEndpoints(svc *registry.Service, port string) int {
	n := 0
	for _, e := range svc.Serving() {
		if _, ok := endpointPort(e, port); ok && e.Health == registry.Healthy {
			n++
		}
	}
	return n
}

// policyFailed is what serves when resource t of name does not build
// with the service's policy (err): the last one built, prev, or else the
// resource without the policy. The config's parser keeps a policy in the
// ranges the checks allow, so this is a bug to log.
func (s *Server) policyFailed(t int, name string, prev *resource, err error) (*resource, error) {
	s.metrics.invalid.WithLabelValues(shortType(typeURLs[t])).Inc()
	s.log.Error("resilience policy not served: the resource is invalid with it; the last one serves", "type", shortType(typeURLs[t]), "service", name, "err", err)
	if prev != nil {
		return prev, nil
	}
	return s.buildStatic(t, name)
}

// claBuilder takes a builder from the pool, set for this server's
// config; the caller releases it.
func (s *Server) claBuilder() *claBuilder {
	b := claBuilders.Get().(*claBuilder)
	b.omitHostnames = s.cfg.OmitHostnames
	return b
}

func (s *Server) buildEDS(svc *registry.Service, zone string, weights LocalityWeights, epw endpointWeights, prio map[string]int) (*resource, error) {
	b := s.claBuilder()
	defer b.release()
	cla, err := b.build(svc, s.cfg.PortName, zone, weights, epw, prio)
	if err != nil {
		return nil, err
	}
	return encode(svc.Name, cla)
}

// sweep drops the entries of services that are not in snap, with their
// encoded resources (a deleted service's last valid endpoints among
// them). A service that comes back builds a new entry at its next lookup.
// It returns how many entries it dropped.
//
// It also ages what the entries' EDS variants share (edsShared): what a
// sweep finds already aged goes, so that it lasts from one to two
// sweeps after its version's first build, long enough for the fan-out
// of that version to every client zone, and a region's quiet services
// hold none of it.
func (c *cache) sweep(snap *registry.Snapshot) int {
	c.mu.Lock()
	n := 0
	kept := make([]*entry, 0, len(c.entries))
	for name, e := range c.entries {
		if _, ok := snap.Service(name); !ok {
			delete(c.entries, name)
			n++
			continue
		}
		kept = append(kept, e)
	}
	c.mu.Unlock()
	for _, e := range kept {
		e.mu.Lock()
		if e.sharedAged {
			e.shared = nil
		}
		e.sharedAged = e.shared != nil
		e.mu.Unlock()
	}
	return n
}

// len is the number of entries.
func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

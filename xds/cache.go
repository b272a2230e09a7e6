package xds

import (
	"sync"
	"time"

	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
)

// entry caches the encoded resources of one service name. Listener, route
// and cluster depend on the name alone and are built once; the endpoints
// depend on the service version and on the client's zone variant.
type entry struct {
	// mu guards the fields below.
	mu     sync.Mutex
	static [3]*resource // LDS, RDS, CDS
	svc    *registry.Service
	gen    uint64               // plan generation the eds map is for
	rules  uint64               // region rules version the eds map is for
	eds    map[string]*resource // by zone and region variant, for svc, gen and rules
	good   map[string]*resource // last valid, by zone and region variant, any version
	// subIn[v] fingerprints what built good[v] for a subset variant v
	// (subsetFingerprint): under a new service version or plan
	// generation, a slot whose endpoints and weights are the same takes
	// good[v] again instead of encoding it anew.
	subIn map[string]uint64
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
	if t == 1 {
		if r, ok := s.ruledRoute(e, name, snap); ok {
			return r, true
		}
	}
	if t < 3 {
		if e.static[t] == nil {
			r, err := s.buildStatic(t, name)
			if err != nil {
				s.metrics.invalid.WithLabelValues(shortType(typeURLs[t])).Inc()
				s.log.Error("resource not built", "type", shortType(typeURLs[t]), "service", name, "err", err)
				return nil, true
			}
			e.static[t] = r
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
	sub, key, slot, wrapped := s.subsetOf(svc, p, w)
	if sub != nil {
		variant += key
		built = sub
		fp, reuse = s.subsetFingerprint(sub.Endpoints, p, zone, epw)
		var view uint64
		if reuse {
			view = subsetView(base, pk, zone, wrapped, fp)
		}
		s.hub.seen(w, name, slot, view)
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
	r, err := s.buildEDS(built, zone, lw, epw, prio)
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

func (s *Server) buildStatic(t int, name string) (*resource, error) {
	var m proto.Message
	switch t {
	case 0:
		l, err := listener(name)
		if err != nil {
			return nil, err
		}
		m = l
	case 1:
		m = route(name)
	case 2:
		m = cluster(name)
	}
	return encode(name, m)
}

func (s *Server) buildEDS(svc *registry.Service, zone string, weights LocalityWeights, epw endpointWeights, prio map[string]int) (*resource, error) {
	b := claBuilders.Get().(*claBuilder)
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
func (c *cache) sweep(snap *registry.Snapshot) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name := range c.entries {
		if _, ok := snap.Service(name); !ok {
			delete(c.entries, name)
			n++
		}
	}
	return n
}

// len is the number of entries.
func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

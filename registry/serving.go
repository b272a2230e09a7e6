package registry

import (
	"cmp"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// One endpoint per address and port.
//
// Two endpoints of a service can claim one address and port: a pod IP
// reused while the old pod terminates, a VM agent and a static entry for
// the same host. Nothing can listen twice on one address and port, so one
// of them is stale, and grpc-go rejects a whole ClusterLoadAssignment that
// lists an address twice (draining and unhealthy endpoints included). The
// store therefore decides, each time it builds a service, which endpoints
// are served (Service.Serving): DNS answers and xDS endpoints both come
// from that list, so they agree.
//
// Two endpoints conflict when they have the same address and a port number
// in common (whatever the port names or protocols). Of conflicting
// endpoints the first in this order is served and the others are shadowed:
//
//  1. health: healthy, then draining, then unhealthy;
//  2. source: kubernetes, then vm, then static. EndpointSlices are written
//     by the control plane that hands out pod IPs, so they name an
//     address's current owner; a VM agent proves its host is alive by
//     heartbeats; a static file is edited by hand and is the first to go
//     stale;
//  3. the newest Registered (a reused address belongs to its latest
//     tenant);
//  4. the smallest ID, so that the choice is deterministic.
//
// Shadowed endpoints stay in Service.Endpoints (their source still owns
// them and may update or remove them); they are listed by
// Service.Shadowed, counted by the spillway_registry_address_conflicts
// metrics and logged when they first appear.

// AddressConflict is an endpoint that is not served because another
// endpoint of its service has its address and a port in common.
type AddressConflict struct {
	// Shadowed is the endpoint not served; Winner the one served.
	Shadowed, Winner *Endpoint
	// Port is a port number they share.
	Port uint16
}

// servingSet is what the store decides about a service's endpoints when
// it builds it.
type servingSet struct {
	resolved bool
	serving  []*Endpoint // Endpoints itself when nothing is shadowed
	shadowed []AddressConflict
}

// Serving returns the endpoints to serve: Endpoints without those
// shadowed by another endpoint with the same address and port (see
// ResolveAddressConflicts), sorted by ID. Neither the slice nor the
// endpoints may be modified. For a Service the store built it is computed
// once; for one made by hand, at each call.
func (s *Service) Serving() []*Endpoint {
	if s.serving.resolved {
		return s.serving.serving
	}
	serving, _ := ResolveAddressConflicts(s.Endpoints)
	return serving
}

// Shadowed lists the endpoints that are not served, with the endpoint
// that is served in their place, ordered by the shadowed endpoint's ID.
func (s *Service) Shadowed() []AddressConflict {
	if s.serving.resolved {
		return s.serving.shadowed
	}
	_, shadowed := ResolveAddressConflicts(s.Endpoints)
	return shadowed
}

// addrPort is the key two endpoints conflict on.
type addrPort struct {
	addr netip.Addr
	port uint16
}

// ResolveAddressConflicts splits eps (sorted by ID, as a Service holds
// them) into the endpoints to serve, still sorted by ID, and those
// shadowed by a preferred endpoint with the same address and a common
// port number. The order of preference is documented at the top of
// serving.go: healthy over not, then source (kubernetes, vm, static), then
// the newest Registered, then the smallest ID. When nothing conflicts,
// serving is eps itself. It does not modify eps.
func ResolveAddressConflicts(eps []*Endpoint) (serving []*Endpoint, shadowed []AddressConflict) {
	owner := make(map[addrPort]int, len(eps))
	clash := false
	for i, e := range eps {
		for _, p := range e.Ports {
			k := addrPort{e.Address, p.Number}
			if j, ok := owner[k]; ok && j != i {
				clash = true
				continue
			}
			owner[k] = i
		}
	}
	if !clash {
		return eps, nil
	}
	order := make([]int, len(eps))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return preferred(eps[a], eps[b]) })
	clear(owner)
	lost := make([]bool, len(eps))
	for _, i := range order {
		e := eps[i]
		winner, port := -1, uint16(0)
		for _, p := range e.Ports {
			if j, ok := owner[addrPort{e.Address, p.Number}]; ok && j != i {
				winner, port = j, p.Number
				break
			}
		}
		if winner >= 0 {
			lost[i] = true
			shadowed = append(shadowed, AddressConflict{Shadowed: e, Winner: eps[winner], Port: port})
			continue
		}
		for _, p := range e.Ports {
			owner[addrPort{e.Address, p.Number}] = i
		}
	}
	serving = make([]*Endpoint, 0, len(eps)-len(shadowed))
	for i, e := range eps {
		if !lost[i] {
			serving = append(serving, e)
		}
	}
	slices.SortFunc(shadowed, func(a, b AddressConflict) int { return cmp.Compare(a.Shadowed.ID, b.Shadowed.ID) })
	return serving, shadowed
}

func healthRank(h Health) int {
	switch h {
	case Healthy:
		return 0
	case Draining:
		return 1
	}
	return 2
}

func sourceRank(s Source) int {
	switch s {
	case SourceKubernetes:
		return 0
	case SourceVM:
		return 1
	case SourceStatic:
		return 2
	}
	return 3
}

// preferred orders a before b (negative) when a is the one to serve.
func preferred(a, b *Endpoint) int {
	if c := cmp.Compare(healthRank(a.Health), healthRank(b.Health)); c != 0 {
		return c
	}
	if c := cmp.Compare(sourceRank(a.Source), sourceRank(b.Source)); c != 0 {
		return c
	}
	if c := b.Registered.Compare(a.Registered); c != 0 {
		return c // newer first
	}
	return cmp.Compare(a.ID, b.ID)
}

// resolveServing decides the served endpoints of every service the batch
// built, and returns the change in the number of shadowed endpoints and
// the conflicts that the old snapshot did not have.
func (b *builder) resolveServing() (delta int, fresh []conflictEvent) {
	for name, w := range b.work {
		var before []AddressConflict
		old, ok := b.old.Service(name)
		if ok {
			before = old.Shadowed()
		}
		delta -= len(before)
		if w == nil {
			continue // forgotten
		}
		if ok && old.serving.resolved {
			w.serving = resolveChanged(old, w.Endpoints)
		} else {
			w.serving.serving, w.serving.shadowed = ResolveAddressConflicts(w.Endpoints)
			w.serving.resolved = true
		}
		delta += len(w.serving.shadowed)
		for _, c := range w.serving.shadowed {
			if !slices.ContainsFunc(before, func(o AddressConflict) bool {
				return o.Shadowed.ID == c.Shadowed.ID && o.Winner.ID == c.Winner.ID
			}) {
				fresh = append(fresh, conflictEvent{service: name, AddressConflict: c})
			}
		}
	}
	return delta, fresh
}

// samePortNumbers reports whether a and b conflict with the same
// endpoints: the same address and the same port numbers.
func samePortNumbers(a, b *Endpoint) bool {
	if a.Address != b.Address || len(a.Ports) != len(b.Ports) {
		return false
	}
	for i := range a.Ports {
		if a.Ports[i].Number != b.Ports[i].Number {
			return false
		}
	}
	return true
}

// involved reports whether e is in one of svc's conflicts, served or
// shadowed.
func involved(svc *Service, e *Endpoint) bool {
	for _, c := range svc.serving.shadowed {
		if c.Shadowed == e || c.Winner == e {
			return true
		}
	}
	return false
}

// maxIncremental is the most addresses a write may touch for
// resolveChanged to decide them alone; beyond, it decides everything.
const maxIncremental = 64

// resolveChanged decides the serving set of eps, the next version of old,
// deciding again only the addresses of the endpoints that changed:
// conflicts are between endpoints of one address, so the decisions about
// other addresses stand, and an endpoint that keeps its address and ports
// and was in no conflict changes none. An update of one endpoint into a
// service of n costs one pass over n pointers, a new endpoint two, not a
// map of n.
func resolveChanged(old *Service, eps []*Endpoint) servingSet {
	var touched []netip.Addr
	add := func(a netip.Addr) bool {
		if !slices.Contains(touched, a) {
			touched = append(touched, a)
		}
		return len(touched) <= maxIncremental
	}
	// Both lists are sorted by ID and share the pointers of unchanged
	// endpoints.
	i, j, ok := 0, 0, true
	for ok && (i < len(old.Endpoints) || j < len(eps)) {
		switch {
		case i < len(old.Endpoints) && j < len(eps) && old.Endpoints[i] == eps[j]:
			i++
			j++
		case j == len(eps) || i < len(old.Endpoints) && old.Endpoints[i].ID < eps[j].ID:
			// Removed: only an endpoint in a conflict changes anything.
			if involved(old, old.Endpoints[i]) {
				ok = add(old.Endpoints[i].Address)
			}
			i++
		case i == len(old.Endpoints) || eps[j].ID < old.Endpoints[i].ID:
			ok = add(eps[j].Address) // added
			j++
		default: // replaced
			// The usual update (health, weight, metadata) keeps the
			// address and ports of an endpoint in no conflict: it cannot
			// start one, and needs no look at the others.
			if !samePortNumbers(old.Endpoints[i], eps[j]) || involved(old, old.Endpoints[i]) {
				ok = add(old.Endpoints[i].Address) && add(eps[j].Address)
			}
			i++
			j++
		}
	}
	if !ok {
		serving, shadowed := ResolveAddressConflicts(eps)
		return servingSet{resolved: true, serving: serving, shadowed: shadowed}
	}
	var shadowed []AddressConflict
	for _, c := range old.serving.shadowed {
		if !slices.Contains(touched, c.Shadowed.Address) {
			shadowed = append(shadowed, c) // both endpoints are unchanged
		}
	}
	var sub []*Endpoint
	if len(touched) > 0 {
		for _, e := range eps {
			if slices.Contains(touched, e.Address) {
				sub = append(sub, e)
			}
		}
	}
	_, more := ResolveAddressConflicts(sub)
	if len(more) == 0 && len(shadowed) == 0 {
		return servingSet{resolved: true, serving: eps}
	}
	shadowed = append(shadowed, more...)
	slices.SortFunc(shadowed, func(a, b AddressConflict) int { return cmp.Compare(a.Shadowed.ID, b.Shadowed.ID) })
	// Both are sorted by ID: drop the shadowed in one merge.
	serving := make([]*Endpoint, 0, len(eps)-len(shadowed))
	k := 0
	for _, e := range eps {
		if k < len(shadowed) && shadowed[k].Shadowed == e {
			k++
			continue
		}
		serving = append(serving, e)
	}
	return servingSet{resolved: true, serving: serving, shadowed: shadowed}
}

type conflictEvent struct {
	service string
	AddressConflict
}

// numSources sizes the per-source-pair counters: kubernetes, vm, static,
// and anything else.
const numSources = 4

// conflictStats counts new address conflicts by the sources of the served
// and the shadowed endpoint (a bounded label set), and logs them.
type conflictStats struct {
	log   atomic.Pointer[slog.Logger]
	total [numSources][numSources]atomic.Uint64 // [served source][shadowed source]
}

// SetLogger makes the store log address conflicts (an endpoint not served
// because another has its address and port) to l; nil discards them, the
// default.
func (s *Store) SetLogger(l *slog.Logger) { s.conflicts.log.Store(l) }

// report counts and logs conflicts that a write made.
func (c *conflictStats) report(fresh []conflictEvent) {
	log := c.log.Load()
	for _, ev := range fresh {
		c.total[sourceRank(ev.Winner.Source)][sourceRank(ev.Shadowed.Source)].Add(1)
		if log != nil {
			log.Warn("endpoint not served: another endpoint of the service has its address and port",
				"service", ev.service, "endpoint", ev.Shadowed.ID, "source", ev.Shadowed.Source, "health", ev.Shadowed.Health,
				"address", netip.AddrPortFrom(ev.Shadowed.Address, ev.Port).String(),
				"served", ev.Winner.ID, "served_source", ev.Winner.Source, "served_health", ev.Winner.Health)
		}
	}
}

var (
	descConflicts = prometheus.NewDesc("spillway_registry_address_conflicts",
		"Endpoints not served because another endpoint of their service has the same address and port.", nil, nil)
	descConflictsTotal = prometheus.NewDesc("spillway_registry_address_conflicts_total",
		"Address conflicts detected (an endpoint shadowed by another with the same address and port), by the source of the endpoint served and of the one shadowed.",
		[]string{"served_source", "shadowed_source"}, nil)
)

var sourceLabels = [numSources]string{string(SourceKubernetes), string(SourceVM), string(SourceStatic), "other"}

func (c Collector) describeServing(ch chan<- *prometheus.Desc) {
	ch <- descConflicts
	ch <- descConflictsTotal
}

func (c Collector) collectServing(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(c.s.Snapshot().shadowed))
	for w := range numSources {
		for l := range numSources {
			ch <- prometheus.MustNewConstMetric(descConflictsTotal, prometheus.CounterValue,
				float64(c.s.conflicts.total[w][l].Load()), sourceLabels[w], sourceLabels[l])
		}
	}
}

// AddressConflicts is the number of endpoints not served, across all
// services, because another endpoint has their address and port.
func (s *Snapshot) AddressConflicts() int { return s.shadowed }

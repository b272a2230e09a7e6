package xds

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/weights/subset"
)

// slotKey is one group of package weights/subset on this replica: the
// streams of one service from one client zone (node.locality.zone as the
// client sent it, as ClientCounts counts them and the replicas' load
// summaries carry them).
type slotKey struct{ service, zone string }

// slots numbers the streams of each service per client zone 0..n-1,
// the slots a plan's subsets are given to (weights.Plan.Subsets). A
// stream keeps its slot while it wants the service; when one leaves, the
// group's last stream takes its slot, so slots stay dense and only that
// stream's subset changes. Guarded by hub.mu.
type slots struct {
	by map[slotKey][]*watcher
	of map[*watcher]map[string]slotRec // the stream's slot per service
}

// slotRec is a stream's slot of one service and what its last EDS of the
// service was built from: view, the subsetView of that build, 0 when it
// was not a subset whose view can be checked (dispatchViews then always
// wakes the stream).
type slotRec struct {
	slot int
	view uint64
}

// take gives w a slot for service in zone's group.
func (s *slots) take(w *watcher, service, zone string) {
	if s.by == nil {
		s.by, s.of = map[slotKey][]*watcher{}, map[*watcher]map[string]slotRec{}
	}
	k := slotKey{service, zone}
	m := s.of[w]
	if m == nil {
		m = map[string]slotRec{}
		s.of[w] = m
	}
	m[service] = slotRec{slot: len(s.by[k])}
	s.by[k] = append(s.by[k], w)
}

// give frees w's slot of service in zone's group; the group's last stream
// moves into it and is returned (nil if none moved), to be pushed its new
// subset.
func (s *slots) give(w *watcher, service, zone string) *watcher {
	k := slotKey{service, zone}
	rec, ok := s.of[w][service]
	if !ok {
		return nil
	}
	i := rec.slot
	delete(s.of[w], service)
	if len(s.of[w]) == 0 {
		delete(s.of, w)
	}
	list := s.by[k]
	last := list[len(list)-1]
	list[len(list)-1] = nil
	list = list[:len(list)-1]
	var moved *watcher
	if last != w {
		list[i] = last
		s.of[last][service] = slotRec{slot: i} // its view is another slot's
		moved = last
	}
	if len(list) == 0 {
		delete(s.by, k)
	} else {
		s.by[k] = list
	}
	return moved
}

// slot returns w's slot of service, and false if it has none.
func (s *slots) slot(w *watcher, service string) (int, bool) {
	rec, ok := s.of[w][service]
	return rec.slot, ok
}

// setView records the view of w's last EDS of service, built for slot.
// A stream whose slot moved since keeps view 0; view 0 (a build that was
// not a checkable subset) is recorded whatever the slot.
func (s *slots) setView(w *watcher, service string, slot int, view uint64) {
	m := s.of[w]
	if rec, ok := m[service]; ok && (rec.slot == slot || view == 0) {
		rec.view = view
		m[service] = rec
	}
}

// streamSlot returns the client zone and slot of w for service.
func (h *hub) streamSlot(w *watcher, service string) (string, int, bool) {
	if w == nil {
		return "", 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	i, ok := h.slots.slot(w, service)
	return h.nodes[w].zone, i, ok
}

// SubsetSlots counts service's slots per client zone (group -> streams;
// the group's Replica is ""), nil when it has none: the groups of this
// replica's clients that the planner gives subsets to. It implements
// weights.SlotSource; the counts are ClientCounts'. It reads only the
// service's zones (hub.counts), not every service's slots.
func (s *Server) SubsetSlots(service string) map[subset.Group]int {
	h := &s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	var out map[subset.Group]int
	for zone := range h.counts[service] {
		if list, ok := h.slots.by[slotKey{service, zone}]; ok {
			if out == nil {
				out = map[subset.Group]int{}
			}
			out[subset.Group{Zone: zone}] = len(list)
		}
	}
	return out
}

// moveSlots updates w's slots for its names going from old to next, with
// the node zones before and after; streams moved into freed slots are
// marked so that they get their new subset. Called with h.mu held.
func (h *hub) moveSlots(w *watcher, old, next map[string]struct{}, oldZone, zone string, known bool) {
	now := time.Time{}
	for n := range old {
		if _, keep := next[n]; keep && oldZone == zone && known {
			continue
		}
		if moved := h.slots.give(w, n, oldZone); moved != nil {
			if now.IsZero() {
				now = time.Now()
			}
			moved.mark(n, false, now)
		}
	}
	for n := range next {
		if _, had := old[n]; had && oldZone == zone && known {
			continue
		}
		h.slots.take(w, n, zone)
	}
}

// subsetAt appends to buf the serving endpoints of svc in the subset that
// plan p (which has Subsets) gives slot of client zone's group, in ID
// order, and returns the slot's edge weights of them (subset.Assignment's
// Weights; nil when all are 1) and the slot it wrapped to; false when the
// group has no slots or the subset no serving endpoint (the stream gets
// every endpoint).
func (s *Server) subsetAt(buf []*registry.Endpoint, svc *registry.Service, p *weights.Plan, zone string, slot int) ([]*registry.Endpoint, map[string]float64, int, bool) {
	g := subset.Group{Zone: zone}
	if p.Source == weights.SourceMesh {
		g.Replica = s.cfg.Replica
	}
	n := p.Subsets.Slots(g)
	if n == 0 {
		return buf, nil, 0, false
	}
	slot %= n
	serving := svc.Serving() // sorted by ID, as the subset's ids are
	start := len(buf)
	ws := p.Subsets.Weights(g, slot)
	var edge map[string]float64
	for i, id := range p.Subsets.Subset(g, slot) {
		if j, found := slices.BinarySearchFunc(serving, id, func(e *registry.Endpoint, id string) int { return strings.Compare(e.ID, id) }); found {
			buf = append(buf, serving[j])
			if ws != nil && ws[i] != 1 {
				if edge == nil {
					edge = map[string]float64{}
				}
				edge[id] = ws[i]
			}
		}
	}
	return buf, edge, slot, len(buf) > start
}

// fingerprintSeed seeds subsetFingerprint: random per process, so that
// endpoint fields chosen to collide cannot be found offline.
var fingerprintSeed = maphash.MakeSeed()

// subsetFingerprint hashes what buildEDS makes a subset variant's EDS
// of, beyond the variant's key (route, priorities, zone and slot): each
// of the subset's endpoints eps' id, address, port, health, locality and
// endpoint weight, and plan p's zone weights for the client zone (PID
// alone: none, its endpoint weights give the localities'). It reports
// false, and the variant is encoded anew, unless p has zone-aware
// weights, the only LocalityWeights that are a function of these.
func (s *Server) subsetFingerprint(eps []*registry.Endpoint, p *weights.Plan, zone string, epw endpointWeights) (uint64, bool) {
	if p == nil || p.Result == nil {
		return 0, false
	}
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	var n [8]byte
	u32 := func(v uint32) {
		binary.LittleEndian.PutUint32(n[:4], v)
		h.Write(n[:4])
	}
	str := func(v string) {
		u32(uint32(len(v)))
		h.WriteString(v)
	}
	for _, e := range eps {
		str(e.ID)
		a := e.Address.As16()
		h.Write(a[:])
		str(e.Address.Zone())
		if e.Address.Is4() {
			h.WriteByte(4)
		} else {
			h.WriteByte(6)
		}
		if port, ok := endpointPort(e, s.cfg.PortName); ok {
			h.WriteByte(1)
			u32(uint32(port.Number))
		} else {
			h.WriteByte(0)
		}
		str(string(e.Health))
		str(e.Locality.Region)
		str(e.Locality.Zone)
		str(e.Locality.SubZone)
		binary.LittleEndian.PutUint64(n[:], epw.weight(e))
		h.Write(n[:])
	}
	if epw.localities {
		h.WriteByte(1)
	} else {
		h.WriteByte(0)
		for _, zw := range p.Result.Route(zone).Weights {
			str(zw.Zone)
			u32(zw.Weight)
		}
	}
	return h.Sum64(), true
}

// subsetView names the EDS content of one subset slot: the variant's
// route (base) and priorities, the client zone and the slot it wrapped
// to, and the subsetFingerprint fp of its endpoints and weights. Two
// builds of the same view encode the same ClusterLoadAssignment. Never 0
// (slotRec's "none").
func subsetView(base, prio, zone string, wrapped int, fp uint64) uint64 {
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	var n [8]byte
	for _, v := range [...]string{base, prio, zone} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		h.WriteString(v)
	}
	binary.LittleEndian.PutUint64(n[:], uint64(wrapped))
	h.Write(n[:])
	binary.LittleEndian.PutUint64(n[:], fp)
	h.Write(n[:])
	return max(h.Sum64(), 1)
}

// seen records, for dispatchViews, the view of the EDS of service that
// stream w just built for its slot (0: not a checkable subset).
func (h *hub) seen(w *watcher, service string, slot int, view uint64) {
	if view != 0 {
		w.viewed.Store(true)
	}
	h.mu.Lock()
	h.slots.setView(w, service, slot, view)
	h.mu.Unlock()
}

// unseen forgets the view of w's last EDS of service after a build that
// was not a subset (every endpoint), so that a later subset equal to the
// one held before is not taken for what the stream has. A stream that
// never recorded a view skips the lock.
func (h *hub) unseen(w *watcher, service string) {
	if w != nil && w.viewed.Load() {
		h.seen(w, service, 0, 0)
	}
}

// dispatchViews tells the streams of services that their content changed
// at at, as hub.dispatch does, but leaves alone a stream that holds a
// subset of a service and whose last EDS of it was built from the view
// its slot has now (subsetView): a change that moves one endpoint wakes
// the dozen streams whose subsets hold it, not every stream of the
// service. A service without subsets, with route rules (its RDS may
// change with the registry), or gone from the registry wakes every
// stream; so does a stream whose push is running (it may have read the
// registry before the change) or whose last build was not a checkable
// subset. Use it only for changes to what EDS is built from (the
// registry, the plans, the region rules): names whose listener, route or
// cluster may have changed go through hub.dispatch. a says which streams
// it marks (a stream with a wildcard subscription is never left out: its
// changes are not checked against a view).
func (s *Server) dispatchViews(names []string, at time.Time, a audience) {
	if a == toWild {
		s.hub.dispatchTo(names, at, toWild)
		return
	}
	snap := s.store.Snapshot()
	h := &s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	var buf []*registry.Endpoint
	for _, n := range names {
		if n == registry.FlagsChanged {
			continue
		}
		if a == toAll {
			for w := range h.wild {
				w.mark(n, false, at)
			}
		}
		ws := h.by[n]
		if len(ws) == 0 {
			continue
		}
		c, checkable := s.newViewCheck(n, snap)
		kept := 0
		for w := range ws {
			if !a.wants(w) {
				continue
			}
			if checkable && !w.busy() {
				if rec := h.slots.of[w][n]; rec.view != 0 {
					var v uint64
					v, buf = c.view(buf[:0], h.nodes[w], rec.slot)
					if v == rec.view {
						kept++
						continue
					}
				}
			}
			w.mark(n, false, at)
		}
		if kept > 0 {
			s.metrics.subsetKept.Add(float64(kept))
		}
	}
}

// viewCheck computes the current subsetView of a service's slots, as
// lookupFor would build them now.
type viewCheck struct {
	s       *Server
	svc     *registry.Service
	plan    *weights.Plan
	rules   regions.Rules
	regions []string
	prio    map[string]string // prioKey by client region
}

// newViewCheck returns the check of service's streams, and false when
// they must all be woken.
func (s *Server) newViewCheck(service string, snap *registry.Snapshot) (*viewCheck, bool) {
	p := s.planFor(service)
	if p == nil || p.Subsets == nil || p.Result == nil {
		return nil, false
	}
	if s.cfg.Routes != nil {
		if _, _, ruled := s.cfg.Routes.Rules(service); ruled {
			return nil, false
		}
	}
	svc, ok := snap.Service(service)
	if !ok {
		return nil, false
	}
	rules, _ := s.regionRules(service)
	return &viewCheck{s: s, svc: svc, plan: p, rules: rules, regions: serviceRegions(svc, s.cfg.PortName), prio: map[string]string{}}, true
}

// view is the subsetView of slot for a stream of node, 0 when it would
// not be a checkable subset; buf is scratch space, returned grown.
func (c *viewCheck) view(buf []*registry.Endpoint, node nodeInfo, slot int) (uint64, []*registry.Endpoint) {
	base, epw := planVariant(c.plan, node.zone)
	pk, ok := c.prio[node.region]
	if !ok {
		prio, _ := c.s.priorities(c.regions, node.region, c.rules)
		pk = prioKey(prio)
		c.prio[node.region] = pk
	}
	buf, edge, wrapped, ok := c.s.subsetAt(buf, c.svc, c.plan, node.zone, slot)
	if !ok {
		return 0, buf
	}
	epw.edge = edge
	fp, ok := c.s.subsetFingerprint(buf, c.plan, node.zone, epw)
	if !ok {
		return 0, buf
	}
	return subsetView(base, pk, node.zone, wrapped, fp), buf
}

// ClientSlot finds the stream of node nodeID that wants service on this
// replica: its client zone and slot (the first such stream when a node
// has several). It implements admin.ClientSlots.
func (s *Server) ClientSlot(service, nodeID string) (string, int, bool) {
	h := &s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.by[service] {
		n := h.nodes[w]
		if n.id != nodeID {
			continue
		}
		if i, ok := h.slots.slot(w, service); ok {
			return n.zone, i, true
		}
	}
	return "", 0, false
}

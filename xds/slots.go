package xds

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strconv"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
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
	of map[*watcher]map[string]int // the stream's slot per service
}

// take gives w a slot for service in zone's group.
func (s *slots) take(w *watcher, service, zone string) {
	if s.by == nil {
		s.by, s.of = map[slotKey][]*watcher{}, map[*watcher]map[string]int{}
	}
	k := slotKey{service, zone}
	m := s.of[w]
	if m == nil {
		m = map[string]int{}
		s.of[w] = m
	}
	m[service] = len(s.by[k])
	s.by[k] = append(s.by[k], w)
}

// give frees w's slot of service in zone's group; the group's last stream
// moves into it and is returned (nil if none moved), to be pushed its new
// subset.
func (s *slots) give(w *watcher, service, zone string) *watcher {
	k := slotKey{service, zone}
	i, ok := s.of[w][service]
	if !ok {
		return nil
	}
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
		s.of[last][service] = i
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
	i, ok := s.of[w][service]
	return i, ok
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

// SubsetSlots counts the slots of each service per client zone (service
// -> group -> streams; the group's Replica is ""): the groups of this
// replica's clients that the planner gives subsets to. It implements
// weights.SlotSource; the counts are ClientCounts'.
func (s *Server) SubsetSlots() map[string]map[subset.Group]int {
	h := &s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]map[subset.Group]int{}
	for k, list := range h.slots.by {
		m := out[k.service]
		if m == nil {
			m = map[subset.Group]int{}
			out[k.service] = m
		}
		m[subset.Group{Zone: k.zone}] = len(list)
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

// subsetOf returns the service as stream w's subset shows it, and the
// key of that subset among the service's EDS variants; nil when the
// plan gives no subsets or w holds no slot. The stream's group is its
// client zone on this replica: Replica "" in a local plan, Config.Replica
// in a mesh-wide one. A stream whose slot the plan does not know yet (it
// came after the plan was computed) gets the subset of the slot its
// number wraps to in its group, or every endpoint when the group is new.
func (s *Server) subsetOf(svc *registry.Service, w *watcher) (*registry.Service, string) {
	p := s.planFor(svc.Name)
	if p == nil || p.Subsets == nil {
		return nil, ""
	}
	zone, i, ok := s.hub.streamSlot(w, svc.Name)
	if !ok {
		return nil, ""
	}
	g := subset.Group{Zone: zone}
	if p.Source == weights.SourceMesh {
		g.Replica = s.cfg.Replica
	}
	n := p.Subsets.Slots(g)
	if n == 0 {
		return nil, ""
	}
	i %= n
	ids := p.Subsets.Subset(g, i)
	serving := svc.Serving()
	eps := make([]*registry.Endpoint, 0, len(ids))
	for _, e := range serving {
		if _, found := slices.BinarySearch(ids, e.ID); found {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, ""
	}
	return &registry.Service{Name: svc.Name, Version: svc.Version, Endpoints: eps}, "|s" + strconv.Quote(zone) + "#" + strconv.Itoa(i)
}

// fingerprintSeed seeds subsetFingerprint: random per process, so that
// endpoint fields chosen to collide cannot be found offline.
var fingerprintSeed = maphash.MakeSeed()

// subsetFingerprint hashes what buildEDS makes a subset variant's EDS
// of, beyond the variant's key (route, priorities, zone and slot): each
// endpoint's id, address, port, health, locality and endpoint weight, and
// the plan's zone weights for the client zone (PID alone: none, its
// endpoint weights give the localities'). It reports false, and the
// variant is encoded anew, unless the service's current plan is of
// generation gen and has zone-aware weights, the only LocalityWeights
// that are a function of these.
func (s *Server) subsetFingerprint(sub *registry.Service, zone string, gen uint64, epw endpointWeights) (uint64, bool) {
	p := s.planFor(sub.Name)
	if p == nil || p.Result == nil || p.Gen != gen {
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
	for _, e := range sub.Endpoints {
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
		u32(epw.weight(e))
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

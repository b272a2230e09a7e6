package exchange

import "github.com/spillway/spillway/weights/subset"

// SubsetSlots counts service's client slots of every replica whose
// summary of it is fresh: group (the replica, a client zone) -> its
// connected streams, the counts its xds server numbers its slots by; nil
// when no fresh summary has clients. It implements weights.SlotSource for
// the owner's planner.
func (m *Merged) SubsetSlots(service string) map[subset.Group]int {
	now := m.cfg.Now()
	var out map[subset.Group]int
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, st := range m.senders {
		e, ok := st.services[service]
		if !ok || !e.fresh(now) || len(e.sum.Clients) == 0 {
			continue
		}
		if out == nil {
			out = map[subset.Group]int{}
		}
		for _, c := range e.sum.Clients {
			if c.Count > 0 {
				out[subset.Group{Replica: id, Zone: c.Zone}] += c.Count
			}
		}
	}
	return out
}

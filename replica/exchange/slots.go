package exchange

import "github.com/spillway/spillway/weights/subset"

// SubsetSlots counts, per service, the client slots of every replica
// whose summary is fresh: group (the replica, a client zone) -> its
// connected streams, the counts its xds server numbers its slots by. It
// implements weights.SlotSource for the owner's planner.
func (m *Merged) SubsetSlots() map[string]map[subset.Group]int {
	now := m.cfg.Now()
	out := map[string]map[subset.Group]int{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, st := range m.senders {
		for svc, e := range st.services {
			if !e.fresh(now) || len(e.sum.Clients) == 0 {
				continue
			}
			groups := out[svc]
			if groups == nil {
				groups = map[subset.Group]int{}
				out[svc] = groups
			}
			for _, c := range e.sum.Clients {
				if c.Count > 0 {
					groups[subset.Group{Replica: id, Zone: c.Zone}] += c.Count
				}
			}
		}
	}
	return out
}

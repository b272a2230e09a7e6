package weights

import (
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/subset"
)

// SubsetConfig is a service's subsetting (svcconfig subset_mode,
// subset_size): Mode off, or "", gives every client every endpoint.
type SubsetConfig struct {
	Mode subset.Mode
	Size int
}

// on reports whether clients get subsets.
func (c SubsetConfig) on() bool {
	return (c.Mode == subset.Deterministic || c.Mode == subset.Random) && c.Size > 0
}

// SlotSource counts a service's client slots per group of package
// subset: group -> slots (nil for none). *xds.Server implements it for
// its own streams (groups of replica ""), the mesh's merged summaries for
// every replica's (exchange.Merged). The planner asks only for the
// services whose strategy gives subsets: counting every service's, once
// a cycle under the xds hub's lock, was about 200 ms at 50,000 streams
// in a region where none had subsets.
type SlotSource interface {
	SubsetSlots(service string) map[subset.Group]int
}

// SubsetMemory gives the subsets a service's clients were last given
// by another planner (the previous owner's published plan), for a
// planner that has no plan of its own for it yet.
type SubsetMemory interface {
	Subsets(service string) *subset.Assignment
}

// subsets gives plan the subsets of svc's clients when its strategy asks
// for them, starting from prev's (the last plan's, nil for none): over the
// healthy endpoints clients can dial, by zone, each client zone's slots
// split as its route in plan.Result sends traffic (PID alone: in
// proportion to the endpoints). A failure is logged and the plan has none.
func (p *Planner) subsets(plan *Plan, prev *Plan, ss *svcState, svc *registry.Service, cfg SubsetConfig) {
	if !cfg.on() {
		return
	}
	var slots map[subset.Group]int
	if src, ok := p.cfg.Clients.(SlotSource); ok {
		slots = src.SubsetSlots(svc.Name)
	}
	// The same service value (the registry gives a changed service a new
	// one), config, slots and route shares give the same Input, so the
	// last subsets stand without building it: an idle cycle costs a hash
	// over the groups, not over every endpoint id.
	quick := quickSubsetKey(cfg, slots, plan)
	if prev != nil && prev.Subsets != nil && ss.subsetSvc == svc && ss.subsetQuick == quick {
		plan.Subsets = prev.Subsets
		return
	}
	in := subset.Input{Size: cfg.Size, Mode: cfg.Mode, Seed: svc.Name, Slots: slots, Localities: map[string][]string{}}
	// Every cycle builds these, whether or not they changed: sized once.
	per := map[string]int{}
	for _, e := range svc.Serving() {
		if e.Health == registry.Healthy && hasPort(e, p.cfg.PortName) {
			per[e.Locality.Zone]++
		}
	}
	for z, n := range per {
		in.Localities[z] = make([]string, 0, n)
	}
	for _, e := range svc.Serving() {
		if e.Health == registry.Healthy && hasPort(e, p.cfg.PortName) {
			in.Localities[e.Locality.Zone] = append(in.Localities[e.Locality.Zone], e.ID)
		}
	}
	if res := plan.Result; res != nil && !plan.LocalityFromEndpoints {
		shares := map[string]map[string]float64{} // by client zone, built once a cycle
		in.Shares = func(zone string) map[string]float64 {
			if out, ok := shares[zone]; ok {
				return out
			}
			rt := res.Route(zone)
			if rt == nil {
				shares[zone] = nil
				return nil
			}
			out := make(map[string]float64, len(rt.Weights))
			for _, zw := range rt.Weights {
				out[zw.Zone] = float64(zw.Weight)
			}
			shares[zone] = out
			return out
		}
	}
	key := in.Key()
	if prev != nil && prev.Subsets != nil && ss.subsetKey == key {
		plan.Subsets = prev.Subsets // nothing it reads changed
		ss.subsetSvc, ss.subsetQuick = svc, quick
		return
	}
	var last *subset.Assignment
	switch {
	case prev != nil:
		last = prev.Subsets
	case p.cfg.SubsetMemory != nil:
		last = p.cfg.SubsetMemory.Subsets(svc.Name)
	}
	a, err := subset.Assign(last, in)
	if err != nil {
		p.cfg.Logger.Warn("subsets not computed; clients get every endpoint", "service", svc.Name, "err", err)
		return
	}
	plan.Subsets = a
	ss.subsetKey = key
	ss.subsetSvc, ss.subsetQuick = svc, quick
	var slotCount int
	for _, n := range slots {
		slotCount += n
	}
	counts := a.Counts()
	var sum, hi float64
	eps := 0
	for _, ids := range in.Localities {
		for _, id := range ids {
			v := float64(counts[id])
			sum += v
			hi = max(hi, v)
			eps++
		}
	}
	m := p.metrics
	m.subsetSize.WithLabelValues(svc.Name).Set(float64(cfg.Size))
	m.subsetSlots.WithLabelValues(svc.Name).Set(float64(slotCount))
	if sum > 0 {
		m.subsetBalance.WithLabelValues(svc.Name).Set(hi / (sum / float64(eps)))
	} else {
		m.subsetBalance.DeleteLabelValues(svc.Name)
	}
}

// forgetSubsets drops the subset series of a service that has none.
func (m *plannerMetrics) forgetSubsets(service string) {
	m.subsetSize.DeleteLabelValues(service)
	m.subsetBalance.DeleteLabelValues(service)
	m.subsetSlots.DeleteLabelValues(service)
}

// quickSubsetKey hashes what subsets reads besides the service itself:
// the config, each group's slot count and its client zone's route shares
// in plan (none when PID alone places the localities). Groups are
// combined by a sum, so map order does not matter.
func quickSubsetKey(cfg SubsetConfig, slots map[subset.Group]int, plan *Plan) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	str := func(h uint64, s string) uint64 {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		return (h ^ 0xff) * prime
	}
	num := func(h, v uint64) uint64 {
		for range 8 {
			h = (h ^ (v & 0xff)) * prime
			v >>= 8
		}
		return h
	}
	h := num(str(offset, string(cfg.Mode)), uint64(cfg.Size))
	var res = plan.Result
	if plan.LocalityFromEndpoints {
		res = nil
		h = num(h, 1)
	}
	var groups uint64
	for g, n := range slots {
		gh := num(str(str(offset, g.Replica), g.Zone), uint64(n))
		if res != nil {
			if rt := res.Route(g.Zone); rt != nil {
				for _, zw := range rt.Weights {
					gh = num(str(gh, zw.Zone), uint64(zw.Weight))
				}
			}
		}
		groups += gh
	}
	return num(h, groups)
}

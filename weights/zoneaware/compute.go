package zoneaware

import (
	"maps"
	"math"
	"slices"
	"time"
)

// Calculator computes weight vectors. It is immutable after New.
type Calculator struct {
	p params
}

// New validates cfg, fills its defaults and returns a Calculator. Errors
// wrap ErrInvalidConfig and name the field.
func New(cfg Config) (*Calculator, error) {
	p, err := cfg.params()
	if err != nil {
		return nil, err
	}
	return &Calculator{p: p}, nil
}

// Config returns the configuration in use, defaults filled in.
func (c *Calculator) Config() Config { return c.p.config() }

// Compute runs one cycle for one service: it reads in and st, advances
// st, and writes the vectors into out. It is deterministic: the same
// Config, Input and State give the same Result and State.
func (c *Calculator) Compute(st *State, in *Input, out *Result) {
	p := &c.p
	now := in.Now
	var dt time.Duration
	if !st.last.IsZero() && now.After(st.last) {
		dt = now.Sub(st.last)
	}
	st.last = now

	st.buildZones(in)
	fb, reason, rzone, age := c.checkLoads(st, in)
	hasLRS := len(in.Loads) > 0 || len(in.Demand) > 0
	lrs := hasLRS && fb == FallbackNone
	c.updateTrust(st, in, dt, lrs)
	total := c.capacities(st, in, lrs)

	// Demand.
	source := SourceNone
	if total == 0 {
		fb, reason, rzone = FallbackNoEndpoints, "", ""
	} else if fb == FallbackNone {
		var sumLRS, sumClients float64
		for i := range in.Demand {
			if in.Demand[i].ClientZone != "" {
				sumLRS += in.Demand[i].RPS
			}
		}
		for i := range in.Clients {
			if in.Clients[i].Zone != "" && in.Clients[i].Count > 0 {
				sumClients += float64(in.Clients[i].Count)
			}
		}
		switch {
		case sumLRS > 0:
			source = SourceLRS
			for i := range in.Demand {
				if d := &in.Demand[i]; d.ClientZone != "" {
					z := &st.zones[st.find(d.ClientZone)]
					z.demand, z.hasDemand = d.RPS, true
				}
			}
		case sumClients > 0:
			source = SourceClients
			fb, reason = FallbackClientCounts, ReasonNoReports
			if hasLRS {
				reason = ReasonNoTraffic
			}
			for i := range in.Clients {
				if cc := &in.Clients[i]; cc.Zone != "" {
					z := &st.zones[st.find(cc.Zone)]
					z.demand += float64(max(0, cc.Count))
					z.hasDemand = true
				}
			}
		default:
			fb = FallbackNoDemand
		}
	}

	// Fill local, spill the rest.
	var sumD float64
	for i := range st.zones {
		sumD += st.zones[i].demand
	}
	var spill, spare, optimum float64
	for i := range st.zones {
		z := &st.zones[i]
		if !z.hasDemand || sumD <= 0 {
			continue
		}
		z.D = z.demand / sumD
		switch {
		case z.C == 0:
			z.L = 0
		case z.D == 0:
			z.L = 1
		default:
			z.L = min(1, p.util*z.C/z.D)
		}
		spill += z.D * (1 - z.L)
		optimum += min(z.D, z.C)
	}
	for i := range st.zones {
		z := &st.zones[i]
		if z.C > 0 {
			z.spare = max(0, p.util*z.C-z.D*z.L)
			spare += z.spare
		}
	}
	spareFrac := 1.0 // share of spill placed by spare capacity, the rest by capacity
	if spill > 0 && spare < spill {
		spareFrac = spare / spill
	}

	out.Source, out.Fallback, out.Reason, out.ReasonZone, out.DataAge = source, fb, reason, rzone, age
	out.SameZone, out.Changed = 0, false
	out.Optimum = 0
	if source != SourceNone {
		out.Optimum = optimum
	}
	out.Routes = out.Routes[:0]
	healthyZones := 0
	for i := range st.zones {
		if st.zones[i].C > 0 {
			healthyZones++
		}
	}
	if cap(st.share) < len(st.zones) {
		st.share = make([]float64, len(st.zones))
	}
	share := st.share[:len(st.zones)]

	next := st.pushedNext[:0]
	pi := 0
	for r := -1; r < len(st.zones); r++ {
		iz, name := -1, ""
		if r >= 0 {
			if st.zones[r].name == "" {
				continue
			}
			iz, name = r, st.zones[r].name
		}
		rt := out.appendRoute(name)
		rfb := fb
		if fb == FallbackNone || fb == FallbackClientCounts {
			if iz < 0 {
				rfb = FallbackZoneless
			} else if !st.zones[iz].hasDemand {
				rfb = FallbackUnknownDemand
			}
		}
		localFirst := !rfb.FailOpen() && rfb != FallbackNoEndpoints

		// The share vector.
		clear(share)
		if localFirst {
			z := &st.zones[iz]
			x := 1 - z.L
			otherC, otherP := 1-z.C, spare-z.spare
			if otherC <= 1e-12 {
				x = 0
			}
			if z.C > 0 {
				share[iz] = 1 - x
			}
			f := spareFrac
			if otherP <= 0 {
				f = 0
			}
			if x > 0 {
				for y := range st.zones {
					if zy := &st.zones[y]; y != iz && zy.C > 0 {
						w := (1 - f) * zy.C / otherC
						if f > 0 {
							w += f * zy.spare / otherP
						}
						share[y] = x * w
					}
				}
			}
		} else {
			for y := range st.zones {
				share[y] = st.zones[y].C
			}
		}
		c.probeFloor(st, share, iz, healthyZones)

		// Integer weights.
		for y := range st.zones {
			if st.zones[y].C > 0 {
				w := uint32(math.Round(share[y] * float64(p.scale)))
				rt.Weights = append(rt.Weights, ZoneWeight{Zone: st.zones[y].name, Weight: max(w, 1), Share: share[y]})
			}
		}

		// Hysteresis against the previous vector of this client zone.
		for pi < len(st.pushed) && st.pushed[pi].zone < name {
			pi++
		}
		moved := 1.0
		var prev *pushedRoute
		if pi < len(st.pushed) && st.pushed[pi].zone == name {
			prev = &st.pushed[pi]
			if prev.fallback == rfb && len(prev.w) == len(rt.Weights) {
				moved = 0
				for k := range rt.Weights {
					if prev.w[k].Zone != rt.Weights[k].Zone {
						moved = 1
						break
					}
					moved = max(moved, math.Abs(prev.w[k].Share-rt.Weights[k].Share))
				}
			}
		}
		held := prev != nil && moved <= p.move
		if held {
			rt.Weights = append(rt.Weights[:0], prev.w...)
		}
		rt.Changed = !held
		out.Changed = out.Changed || rt.Changed
		if len(next) < cap(next) {
			next = next[:len(next)+1]
		} else {
			next = append(next, pushedRoute{})
		}
		nx := &next[len(next)-1]
		nx.zone, nx.fallback, nx.w = name, rfb, append(nx.w[:0], rt.Weights...)

		// Explain.
		e := &rt.Explain
		e.ClientZone, e.Source, e.Fallback, e.DataAge = name, source, rfb, age
		if rfb == fb {
			e.Reason, e.ReasonZone = reason, rzone
		}
		e.LocalFirst, e.Held, e.Moved = localFirst, held, moved
		if iz >= 0 {
			z := &st.zones[iz]
			e.Demand, e.DemandShare, e.HasDemand = z.demand, z.D, z.hasDemand
		}
		for _, w := range rt.Weights {
			if w.Zone == name && iz >= 0 {
				e.Local = w.Share
			} else if w.Share > 0 {
				e.Spill = append(e.Spill, ZoneShare{Zone: w.Zone, Share: w.Share})
			}
		}
	}
	st.pushed, st.pushedNext = next, st.pushed[:0]

	// Estimated load per zone and same-zone share, from the vectors returned.
	for r := range out.Routes {
		rt := &out.Routes[r]
		if rt.ClientZone == "" {
			continue
		}
		z := &st.zones[st.find(rt.ClientZone)]
		if z.D == 0 {
			continue
		}
		y := 0
		for _, w := range rt.Weights {
			for st.zones[y].name < w.Zone {
				y++
			}
			st.zones[y].loadEst += z.D * w.Share
			if w.Zone == rt.ClientZone {
				out.SameZone += z.D * w.Share
			}
		}
	}

	out.Zones = out.Zones[:0]
	for i := range st.zones {
		z := &st.zones[i]
		out.Zones = append(out.Zones, ZoneInfo{
			Zone: z.name, Healthy: z.healthy, SlowStarting: z.slow, Trusted: z.trusted,
			InFlightPerEndpoint: z.inflight, ErrorRatio: z.errRatio,
			QueueFactor: z.qf, ErrorFactor: z.ef, Health: z.health,
			Capacity: z.capacity, CapacityShare: z.C, Limit: z.limit,
			Demand: z.demand, DemandShare: z.D, Load: z.loadEst,
		})
	}
	for r := range out.Routes {
		rt := &out.Routes[r]
		if rt.ClientZone != "" {
			rt.Explain.Capacity = out.Zones[st.find(rt.ClientZone)]
		}
	}
}

// appendRoute appends a cleared Route, reusing the memory of one left in
// out by a previous Compute.
func (out *Result) appendRoute(clientZone string) *Route {
	n := len(out.Routes)
	if n < cap(out.Routes) {
		out.Routes = out.Routes[:n+1]
	} else {
		out.Routes = append(out.Routes, Route{})
	}
	rt := &out.Routes[n]
	w, sp := rt.Weights[:0], rt.Explain.Spill[:0]
	*rt = Route{ClientZone: clientZone, Weights: w}
	rt.Explain.Spill = sp
	return rt
}

// probeFloor raises every healthy zone other than the client's own (iz)
// to min(ProbeShare, 1/healthy zones, its capacity share), taking the
// difference from the zones above their floor in proportion to their
// surplus, then renormalises.
func (c *Calculator) probeFloor(st *State, share []float64, iz, healthy int) {
	var sum float64
	for _, s := range share {
		sum += s
	}
	if sum > 0 {
		for y := range share {
			share[y] /= sum
		}
	}
	if c.p.probe == 0 || healthy < 2 {
		return
	}
	// ProbeShare is the budget of one client zone, shared by the other
	// healthy zones: with 3 zones and 1%, each of the two others gets 0.5%.
	pEff := min(c.p.probe/float64(healthy-1), 1/float64(healthy))
	floor := func(y int) float64 {
		if y == iz || st.zones[y].C == 0 {
			return 0
		}
		return min(pEff, st.zones[y].C)
	}
	var deficit, surplus float64
	for y := range share {
		f := floor(y)
		if share[y] < f {
			deficit += f - share[y]
		} else {
			surplus += share[y] - f
		}
	}
	if deficit <= 0 || surplus <= 0 {
		return
	}
	k := min(1, deficit/surplus)
	for y := range share {
		if f := floor(y); share[y] < f {
			share[y] = f
		} else {
			share[y] -= (share[y] - f) * k
		}
	}
}

// Optimum is the largest same-zone share any assignment can reach without
// putting more on a zone than its capacity share: Σ_z min(D_z, C_z), with
// demand and capacity normalised to shares (a zone missing from a map
// counts as zero there). For tests and metrics; Result.Optimum is the same
// figure for the demand and capacity a Compute used.
func Optimum(demand, capacity map[string]float64) float64 {
	var sd, sc float64
	for _, z := range slices.Sorted(maps.Keys(demand)) {
		sd += demand[z]
	}
	for _, z := range slices.Sorted(maps.Keys(capacity)) {
		sc += capacity[z]
	}
	if sd <= 0 || sc <= 0 {
		return 0
	}
	var opt float64
	for _, z := range slices.Sorted(maps.Keys(demand)) {
		opt += min(demand[z]/sd, capacity[z]/sc)
	}
	return opt
}

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
// Config, Input and State give the same Result and State. st keeps the
// scratch memory it computed in, for its next Compute.
func (c *Calculator) Compute(st *State, in *Input, out *Result) {
	c.compute(st, in, out)
}

// ComputeWith is Compute working in sc's memory instead of st's own, so
// that st keeps between calls only what it carries to the next (a
// planner of 50,000 services holds one Scratch instead of 50,000). Its
// Result and State are Compute's (TestComputeWithMatchesCompute). sc
// must not be used by two calls at once.
func (c *Calculator) ComputeWith(sc *Scratch, st *State, in *Input, out *Result) {
	st.scratch, sc.scratch = sc.scratch, st.scratch
	c.compute(st, in, out)
	st.scratch, sc.scratch = sc.scratch, st.scratch
}

func (c *Calculator) compute(st *State, in *Input, out *Result) {
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

	source := SourceNone
	if total == 0 {
		fb, reason, rzone = FallbackNoEndpoints, "", ""
	} else if fb == FallbackNone {
		source, fb, reason = st.demand(in, hasLRS, reason)
	}
	cy := cycle{source: source, fb: fb, reason: reason, rzone: rzone, age: age}
	var optimum float64
	cy.spare, cy.spareFrac, optimum = c.fillLocal(st)

	out.Source, out.Fallback, out.Reason, out.ReasonZone, out.DataAge = source, fb, reason, rzone, age
	out.SameZone, out.Changed = 0, false
	out.Optimum = 0
	if source != SourceNone {
		out.Optimum = optimum
	}
	out.Routes = out.Routes[:0]
	cy.healthyZones = st.healthyZones()
	c.routes(st, &cy, out)

	st.estimateLoad(out)
	st.reportZones(out)
}

// cycle is what one Compute decided for the service as a whole, before
// the vector of each client zone is built from it.
type cycle struct {
	source        Source
	fb            Fallback // the service's fallback; a route may differ
	reason, rzone string
	age           time.Duration
	spare         float64 // spare capacity share, summed over the zones
	spareFrac     float64 // share of spill placed by spare capacity, the rest by capacity
	healthyZones  int     // zones with a capacity share
}

// demand decides where the demand of the client zones comes from: the
// LRS demand rows if they carry any traffic, else the client counts
// (FallbackClientCounts, with ReasonNoReports or, when there is load data
// but no traffic in it, ReasonNoTraffic), else nowhere (FallbackNoDemand,
// reason kept). It records each zone's demand in st.zones. It is called
// with no fallback yet; reason is the one checkLoads gave.
func (st *State) demand(in *Input, hasLRS bool, reason string) (Source, Fallback, string) {
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
		for i := range in.Demand {
			if d := &in.Demand[i]; d.ClientZone != "" {
				z := &st.zones[st.find(d.ClientZone)]
				z.demand, z.hasDemand = d.RPS, true
			}
		}
		return SourceLRS, FallbackNone, reason
	case sumClients > 0:
		reason = ReasonNoReports
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
		return SourceClients, FallbackClientCounts, reason
	default:
		return SourceNone, FallbackNoDemand, reason
	}
}

// fillLocal decides, per zone with demand, its demand share D and how
// much of it the zone serves itself (L: up to TargetUtilization of its
// capacity share), and per healthy zone the spare capacity left after
// that. It returns the spare capacity summed over the zones, the share
// of the spilt demand to place by spare capacity (the rest goes by
// capacity), and the optimum same-zone share Σ min(D, C).
func (c *Calculator) fillLocal(st *State) (spare, spareFrac, optimum float64) {
	p := &c.p
	var sumD float64
	for i := range st.zones {
		sumD += st.zones[i].demand
	}
	var spill float64
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
	spareFrac = 1.0
	if spill > 0 && spare < spill {
		spareFrac = spare / spill
	}
	return spare, spareFrac, optimum
}

// healthyZones counts the zones with a capacity share.
func (st *State) healthyZones() int {
	n := 0
	for i := range st.zones {
		if st.zones[i].C > 0 {
			n++
		}
	}
	return n
}

// routes appends to out one route per client zone, the zoneless one
// first, then the named zones in order: its fallback, share vector and
// integer weights, held at the previous vector when that moved too
// little, and its explanation. It keeps the vectors in st for the next
// cycle's hysteresis.
func (c *Calculator) routes(st *State, cy *cycle, out *Result) {
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
		rfb := st.routeFallback(cy.fb, iz)
		localFirst := !rfb.FailOpen() && rfb != FallbackNoEndpoints

		c.shareVector(st, cy, share, iz, localFirst)
		c.appendWeights(st, rt, share)

		var held bool
		var moved float64
		pi, held, moved = c.hysteresis(st, pi, rfb, rt)
		rt.Changed = !held
		out.Changed = out.Changed || rt.Changed
		next = appendPushed(next, name, rfb, rt.Weights)

		cy.explain(st, rt, iz, rfb, localFirst, held, moved)
	}
	st.pushedNext = next[:0]
	st.pushed = copyPushed(st.pushed, next)
}

// routeFallback decides the fallback of the route of client zone iz (-1
// for the zoneless route): the service's fallback fb, except that where
// fb still routes by demand (none, or client counts) the zoneless route
// gets FallbackZoneless and a zone without demand FallbackUnknownDemand.
func (st *State) routeFallback(fb Fallback, iz int) Fallback {
	if fb == FallbackNone || fb == FallbackClientCounts {
		if iz < 0 {
			return FallbackZoneless
		} else if !st.zones[iz].hasDemand {
			return FallbackUnknownDemand
		}
	}
	return fb
}

// shareVector decides the share of each zone in the vector of client
// zone iz, written into share. Local first, the zone keeps what it fills
// (L) and spills the rest over the other healthy zones, by spare
// capacity for the part spare capacity can take and by capacity for the
// remainder; otherwise every zone gets its capacity share. The probe
// floor then applies.
func (c *Calculator) shareVector(st *State, cy *cycle, share []float64, iz int, localFirst bool) {
	clear(share)
	if localFirst {
		z := &st.zones[iz]
		x := 1 - z.L
		otherC, otherP := 1-z.C, cy.spare-z.spare
		if otherC <= 1e-12 {
			x = 0
		}
		if z.C > 0 {
			share[iz] = 1 - x
		}
		f := cy.spareFrac
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
	c.probeFloor(st, share, iz, cy.healthyZones)
}

// appendWeights turns share into the integer weights of rt: one per
// healthy zone, in zone order, share × Scale rounded, never below 1.
func (c *Calculator) appendWeights(st *State, rt *Route, share []float64) {
	for y := range st.zones {
		if st.zones[y].C > 0 {
			w := uint32(math.Round(share[y] * float64(c.p.scale)))
			rt.Weights = append(rt.Weights, ZoneWeight{Zone: st.zones[y].name, Weight: max(w, 1), Share: share[y]})
		}
	}
}

// hysteresis decides whether rt keeps the vector pushed last cycle for
// its client zone instead of its new one: it does when that vector had
// the same fallback rfb, weighted the same zones and no share moved by
// more than MoveThreshold; held, rt.Weights is set back to it. moved is
// the largest share move (1 when there is nothing to compare with). The
// previous vectors are searched in client zone order from index pi; the
// index to search on from is returned.
func (c *Calculator) hysteresis(st *State, pi int, rfb Fallback, rt *Route) (npi int, held bool, moved float64) {
	name := rt.ClientZone
	for pi < len(st.pushed) && st.pushed[pi].zone < name {
		pi++
	}
	moved = 1.0
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
	held = prev != nil && moved <= c.p.move
	if held {
		rt.Weights = append(rt.Weights[:0], prev.w...)
	}
	return pi, held, moved
}

// appendPushed appends the vector w pushed for client zone zone with
// fallback fb to next, reusing the memory of an entry left beyond its
// length.
func appendPushed(next []pushedRoute, zone string, fb Fallback, w []ZoneWeight) []pushedRoute {
	if len(next) < cap(next) {
		next = next[:len(next)+1]
	} else {
		next = append(next, pushedRoute{})
	}
	nx := &next[len(next)-1]
	nx.zone, nx.fallback, nx.w = zone, fb, append(nx.w[:0], w...)
	return next
}

// copyPushed copies src into dst, each vector into memory of dst's own
// (reusing dst's entries and their vectors' arrays), and returns it.
func copyPushed(dst, src []pushedRoute) []pushedRoute {
	dst = dst[:0]
	for i := range src {
		dst = appendPushed(dst, src[i].zone, src[i].fallback, src[i].w)
	}
	return dst
}

// explain fills rt.Explain for the route of client zone iz (-1 for the
// zoneless route) with fallback rfb: the service's reason only when the
// route has the service's fallback, the zone's demand, and the local
// share apart from the spill.
func (cy *cycle) explain(st *State, rt *Route, iz int, rfb Fallback, localFirst, held bool, moved float64) {
	name := rt.ClientZone
	e := &rt.Explain
	e.ClientZone, e.Source, e.Fallback, e.DataAge = name, cy.source, rfb, cy.age
	if rfb == cy.fb {
		e.Reason, e.ReasonZone = cy.reason, cy.rzone
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

// estimateLoad adds to each zone the load the returned vectors send it
// (demand share × weight share over the client zones), and to
// out.SameZone the share of all demand they keep in its own zone.
func (st *State) estimateLoad(out *Result) {
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
}

// reportZones writes out.Zones from the cycle's per-zone figures and
// gives each named route the figures of its client zone.
func (st *State) reportZones(out *Result) {
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
			rt.Explain.Capacity = RefTo(&out.Zones[st.find(rt.ClientZone)])
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

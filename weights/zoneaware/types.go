package zoneaware

import (
	"slices"
	"time"
)

// Endpoint is one endpoint of the service.
type Endpoint struct {
	// ID identifies the endpoint across cycles (its slow-start progress is
	// kept under it).
	ID string
	// Zone is the upstream zone; "" is a zone like any other.
	Zone    string
	Healthy bool
	// Registered is when the endpoint joined. An endpoint seen for the
	// first time starts with the trust its age would have earned without
	// load reports (so a restarted control plane does not slow-start the
	// whole fleet); the zero time counts as long ago. A Registered that
	// differs from the one seen before makes it a new endpoint.
	Registered time.Time
}

// ZoneLoad is what load reports say the service's endpoints in Zone
// receive, summed over every client. Rates are per second.
type ZoneLoad struct {
	Zone                                string
	IssuedRPS, SucceededRPS, ErroredRPS float64
	InProgress                          float64
	Updated                             time.Time // newest report summed
}

// Demand is what load reports say clients in ClientZone issue to the
// service, per second. Include the row of clients without a zone
// (ClientZone ""): the sum of Demand.RPS must match the sum of
// ZoneLoad.IssuedRPS (within 25%).
type Demand struct {
	ClientZone string
	RPS        float64
	Updated    time.Time
}

// ClientCount is how many xDS clients of the service are connected in Zone:
// the demand used when there are no load reports.
type ClientCount struct {
	Zone  string
	Count int
}

// Input is one service at one cycle. Compute does not modify it or keep
// references to its slices (it keeps endpoint ID and zone strings).
type Input struct {
	// Now is the time of the cycle; Compute never reads the clock.
	Now       time.Time
	Endpoints []Endpoint
	// Loads has at most one row per upstream zone, Demand at most one per
	// client zone; both empty means no load reports.
	Loads   []ZoneLoad
	Demand  []Demand
	Clients []ClientCount
}

// ZoneWeight is the weight of one upstream zone in a client zone's vector.
// Weight is an integer >= 1; Share is the exact share (the Shares of a
// vector sum to 1). The caller spreads a zone's weight over its localities.
type ZoneWeight struct {
	Zone   string
	Weight uint32
	Share  float64
}

// Route is the vector for clients in ClientZone.
type Route struct {
	ClientZone string
	// Weights has one entry per upstream zone with a healthy endpoint,
	// sorted by zone; empty when the service has none.
	Weights []ZoneWeight
	// Changed: Weights differ from the vector returned for this client
	// zone by the previous Compute with the same State (always true the
	// first time). Pushes may be skipped when false.
	Changed bool
	Explain Explain
}

// Result is the output of one cycle for one service. Compute overwrites it
// and reuses its memory; Clone what must outlive the next Compute.
type Result struct {
	// Routes has one Route per client zone, sorted by ClientZone. Routes[0]
	// is the route for clients without a zone ("") and for client zones
	// not known this cycle (see Route).
	Routes []Route
	// Zones describes every zone seen (upstream or client), sorted.
	Zones []ZoneInfo
	// Source of the demand used; Fallback, Reason and ReasonZone the
	// service-wide fallback; DataAge the age of the oldest load data.
	Source     Source
	Fallback   Fallback
	Reason     string
	ReasonZone string
	DataAge    time.Duration
	// SameZone is the estimated share of the zoned demand served in the
	// client's own zone, Σ_z D_z·share_z→z, under the returned vectors;
	// Optimum is the best possible, Σ_z min(D_z, C_z). Both are 0 when no
	// demand is used.
	SameZone, Optimum float64
	// Changed: some route changed.
	Changed bool
}

// Route returns the route for clients in clientZone, or the zoneless
// route (Routes[0]) when the zone is unknown this cycle. Nil if r is empty.
func (r *Result) Route(clientZone string) *Route {
	lo, hi := 0, len(r.Routes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.Routes[m].ClientZone < clientZone {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(r.Routes) && r.Routes[lo].ClientZone == clientZone {
		return &r.Routes[lo]
	}
	if len(r.Routes) == 0 {
		return nil
	}
	return &r.Routes[0]
}

// Equal reports whether r and o hold the same routes, zones, explanations
// and flags. A NaN anywhere makes them unequal.
func (r *Result) Equal(o *Result) bool {
	if r.Source != o.Source || r.Fallback != o.Fallback || r.Reason != o.Reason || r.ReasonZone != o.ReasonZone ||
		r.DataAge != o.DataAge || r.SameZone != o.SameZone || r.Optimum != o.Optimum || r.Changed != o.Changed ||
		!slices.Equal(r.Zones, o.Zones) {
		return false
	}
	return slices.EqualFunc(r.Routes, o.Routes, func(x, y Route) bool {
		return x.ClientZone == y.ClientZone && x.Changed == y.Changed &&
			slices.Equal(x.Weights, y.Weights) && x.Explain.equal(&y.Explain)
	})
}

// Clone returns a deep copy that shares no memory with r.
func (r *Result) Clone() *Result {
	c := *r
	c.Zones = append([]ZoneInfo(nil), r.Zones...)
	c.Routes = make([]Route, len(r.Routes))
	for i, rt := range r.Routes {
		rt.Weights = append([]ZoneWeight(nil), rt.Weights...)
		rt.Explain.Spill = append([]ZoneShare(nil), rt.Explain.Spill...)
		rt.Explain.Capacity = c.cloneRef(r, rt.Explain.Capacity)
		c.Routes[i] = rt
	}
	return &c
}

// cloneRef returns ref, a ZoneRef of orig, for its clone c: a reference
// to c's copy of the orig.Zones entry ref refers to, or to a copy of its
// own.
func (c *Result) cloneRef(orig *Result, ref ZoneRef) ZoneRef {
	if ref.z == nil {
		return ref
	}
	for i := range orig.Zones {
		if &orig.Zones[i] == ref.z {
			return RefTo(&c.Zones[i])
		}
	}
	z := *ref.z
	return RefTo(&z)
}

// Reserve readies r, which Compute has not written yet, to take routes
// routes of at most perRoute zone weights (and as many spill shares)
// each and zones zones without allocating again: the routes' weights
// share one array and their spill shares another. A Compute that needs
// more allocates for what does not fit, as without Reserve. A caller
// that publishes a new Result every cycle (weights' planner) reserves
// the previous one's shape: 5 allocations instead of one per slice.
func (r *Result) Reserve(routes, perRoute, zones int) {
	if routes <= 0 {
		return
	}
	rs := make([]Route, routes)
	if perRoute > 0 {
		ws := make([]ZoneWeight, routes*perRoute)
		sp := make([]ZoneShare, routes*perRoute)
		for i := range rs {
			lo, hi := i*perRoute, (i+1)*perRoute
			rs[i].Weights = ws[lo:lo:hi]
			rs[i].Explain.Spill = sp[lo:lo:hi]
		}
	}
	r.Routes = rs[:0]
	if zones > 0 {
		r.Zones = make([]ZoneInfo, 0, zones)
	}
}

// ReserveLike is Reserve for a result shaped as prev (the previous
// Compute's for the same service): each route gets room for as many
// weights and spill shares as prev's route at its index had, and no
// more (a zoned route spills to fewer zones than it weighs), so the
// arrays are the size prev's were. A Compute that needs more allocates
// for what does not fit, as without it.
func (r *Result) ReserveLike(prev *Result) {
	if len(prev.Zones) > 0 {
		r.Zones = make([]ZoneInfo, 0, len(prev.Zones))
	}
	if len(prev.Routes) == 0 {
		return
	}
	var nw, ns int
	for i := range prev.Routes {
		nw += len(prev.Routes[i].Weights)
		ns += len(prev.Routes[i].Explain.Spill)
	}
	rs := make([]Route, len(prev.Routes))
	var ws []ZoneWeight
	if nw > 0 {
		ws = make([]ZoneWeight, nw)
	}
	var sp []ZoneShare
	if ns > 0 {
		sp = make([]ZoneShare, ns)
	}
	wi, si := 0, 0
	for i := range rs {
		w, s := len(prev.Routes[i].Weights), len(prev.Routes[i].Explain.Spill)
		rs[i].Weights = ws[wi : wi : wi+w]
		rs[i].Explain.Spill = sp[si : si : si+s]
		wi, si = wi+w, si+s
	}
	r.Routes = rs[:0]
}

// CopyFrom makes r, an empty Result, a copy of src in arrays of its own
// sized like src's (ReserveLike: at most 4 allocations, where Clone makes
// two per route), its ZoneRefs referring to its own Zones. A caller that
// computes every service into one Result keeps a copy of those it hands
// out.
func (r *Result) CopyFrom(src *Result) {
	r.ReserveLike(src)
	zones, routes := r.Zones, r.Routes
	*r = *src
	r.Zones = append(zones, src.Zones...)
	r.Routes = routes[:len(src.Routes)]
	for i := range src.Routes {
		rt := src.Routes[i]
		// The reserved route i holds empty slices of the right capacity.
		rt.Weights = append(r.Routes[i].Weights, rt.Weights...)
		rt.Explain.Spill = append(r.Routes[i].Explain.Spill, rt.Explain.Spill...)
		rt.Explain.Capacity = r.cloneRef(src, rt.Explain.Capacity)
		r.Routes[i] = rt
	}
}

// Shape is what Reserve needs to hold r again: its routes, the most
// weights or spill shares of one route, and its zones.
func (r *Result) Shape() (routes, perRoute, zones int) {
	for i := range r.Routes {
		perRoute = max(perRoute, len(r.Routes[i].Weights), len(r.Routes[i].Explain.Spill))
	}
	return len(r.Routes), perRoute, len(r.Zones)
}

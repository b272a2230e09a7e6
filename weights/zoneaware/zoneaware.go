package zoneaware

import (
	"maps"
	"math"
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

// Clone returns a deep copy that shares no memory with r.
func (r *Result) Clone() *Result {
	c := *r
	c.Routes = make([]Route, len(r.Routes))
	for i, rt := range r.Routes {
		rt.Weights = append([]ZoneWeight(nil), rt.Weights...)
		rt.Explain.Spill = append([]ZoneShare(nil), rt.Explain.Spill...)
		c.Routes[i] = rt
	}
	c.Zones = append([]ZoneInfo(nil), r.Zones...)
	return &c
}

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

// State is what one service carries from one Compute to the next: the
// previous vectors, slow-start progress per endpoint, the health factor per
// zone, and scratch memory. The zero State is ready; use one per service.
type State struct {
	last time.Time

	eps, epsNext []endpointState
	epIdx        map[string]int

	health, healthNext []zoneHealth
	pushed, pushedNext []pushedRoute

	// Scratch, valid during one Compute.
	zones  []zone
	epZone []int32
	share  []float64
}

type endpointState struct {
	id         string
	registered time.Time
	progress   float64 // [0, 1]
	// relief is how much of the slow-start discount the endpoint is
	// spared, [0, 1]: set when it (re)starts, from how cold the service
	// is then (see coldRelief).
	relief  float64
	healthy bool // healthy at the previous cycle
	fresh   bool // first seen this cycle
}

// trust is the endpoint's trust: f0 + (1 − f0)·(relief + (1 − relief)·progress).
func (s *endpointState) trust(p *params) float64 {
	return p.trust(s.relief + (1-s.relief)*s.progress)
}

// Slow start protects a cold endpoint among warm ones, not a fleet from
// itself. A cohort of endpoints that (re)start while the service's
// coldness κ (Σ (1 − progress) / healthy endpoints, the new ones
// included) is at most reliefFrom is slow-started in full; at reliefFull
// or more (most of the service is new: a fresh deploy, a full rollout)
// it is not discounted at all; linear between. The relief is fixed when
// the endpoint starts, so an endpoint's trust only grows as it warms.
const (
	reliefFrom = 0.4
	reliefFull = 0.5
)

func coldRelief(coldness float64) float64 {
	return min(1, max(0, (coldness-reliefFrom)/(reliefFull-reliefFrom)))
}

type zoneHealth struct {
	zone string
	h    float64
	at   time.Time
	// limit is the most the zone is sent while it looks degraded, in
	// requests per second: DegradedTarget × its measured capacity; 0 when
	// none.
	limit float64
	// hist is the zone's previous load reports, newest first, n of them:
	// the queue signal pools them with the current one.
	hist [queueReports - 1]loadSample
	n    int
}

type loadSample struct{ inProgress, issued float64 }

// saturatedErrors is the error ratio above which a zone is taken to be
// at its capacity: its successful rate is what it can serve.
const saturatedErrors = 0.01

type pushedRoute struct {
	zone     string
	fallback Fallback
	w        []ZoneWeight
}

// zone is the per-cycle scratch of one zone.
type zone struct {
	name string
	load int // index in Input.Loads, -1 if none

	healthy, slow      int
	prevTrust, trusted float64

	inflight, latency, errRatio, qf, ef, health float64
	capacity, C                                 float64
	limit                                       float64 // see zoneHealth.limit
	hidx                                        int     // index in State.healthNext, -1 if none
	prev                                        int     // index in State.health, -1 if none
	pIn, pIss, pN                               float64 // pooled in progress, issued, reports (queue signal)
	cIn, cIss                                   float64 // this report's in progress, issued
	capped                                      bool

	demandRow bool // has a Demand row (seen by checkLoads)
	demand    float64
	hasDemand bool
	D, L      float64
	spare     float64
	loadEst   float64
}

// find returns the index of zone name, or -1.
func (st *State) find(name string) int {
	zs := st.zones
	if len(zs) <= 8 {
		for i := range zs {
			if zs[i].name == name {
				return i
			}
		}
		return -1
	}
	lo, hi := 0, len(zs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if zs[m].name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(zs) && zs[lo].name == name {
		return lo
	}
	return -1
}

// addZone inserts name into the sorted zone list.
func (st *State) addZone(name string) {
	zs := st.zones
	i := len(zs)
	for i > 0 && zs[i-1].name > name {
		i--
	}
	if i > 0 && zs[i-1].name == name {
		return
	}
	st.zones = append(st.zones, zone{})
	copy(st.zones[i+1:], st.zones[i:])
	st.zones[i] = zone{name: name, load: -1}
}

func (st *State) buildZones(in *Input) {
	st.zones = st.zones[:0]
	last := "\x00none"
	for i := range in.Endpoints {
		if z := in.Endpoints[i].Zone; z != last {
			st.addZone(z)
			last = z
		}
	}
	for i := range in.Demand {
		if z := in.Demand[i].ClientZone; z != "" {
			st.addZone(z)
		}
	}
	for i := range in.Clients {
		if z := in.Clients[i].Zone; z != "" {
			st.addZone(z)
		}
	}
	st.epZone = st.epZone[:0]
	lastIdx := -1
	for i := range in.Endpoints {
		z := in.Endpoints[i].Zone
		if lastIdx < 0 || st.zones[lastIdx].name != z {
			lastIdx = st.find(z)
		}
		st.epZone = append(st.epZone, int32(lastIdx))
	}
}

func usable(v float64) bool { return v >= 0 && !math.IsInf(v, 1) } // false for NaN

// checkLoads validates the load data and links Loads rows to zones. It
// returns FallbackNone, FallbackStale or FallbackInconsistent.
func (c *Calculator) checkLoads(st *State, in *Input) (fb Fallback, reason, rzone string, age time.Duration) {
	now := in.Now
	future := now.Add(c.p.interval)
	var oldest string
	var sumIssued, sumDemand float64
	seenZoneless := false
	for i := range in.Loads {
		l := &in.Loads[i]
		if !usable(l.IssuedRPS) || !usable(l.SucceededRPS) || !usable(l.ErroredRPS) || !usable(l.InProgress) {
			return FallbackInconsistent, ReasonNegative, l.Zone, age
		}
		if l.Updated.After(future) {
			return FallbackInconsistent, ReasonFuture, l.Zone, age
		}
		if a := now.Sub(l.Updated); a > age || i == 0 {
			age, oldest = a, l.Zone
		}
		sumIssued += l.IssuedRPS
		if zi := st.find(l.Zone); zi >= 0 {
			if st.zones[zi].load >= 0 {
				return FallbackInconsistent, ReasonDuplicate, l.Zone, age
			}
			st.zones[zi].load = i
		}
	}
	for i := range in.Demand {
		d := &in.Demand[i]
		if !usable(d.RPS) {
			return FallbackInconsistent, ReasonNegative, d.ClientZone, age
		}
		if d.Updated.After(future) {
			return FallbackInconsistent, ReasonFuture, d.ClientZone, age
		}
		if a := now.Sub(d.Updated); a > age || (i == 0 && len(in.Loads) == 0) {
			age, oldest = a, d.ClientZone
		}
		sumDemand += d.RPS
		if d.ClientZone == "" {
			if seenZoneless {
				return FallbackInconsistent, ReasonDuplicate, "", age
			}
			seenZoneless = true
			continue
		}
		zi := st.find(d.ClientZone)
		if st.zones[zi].demandRow {
			return FallbackInconsistent, ReasonDuplicate, d.ClientZone, age
		}
		st.zones[zi].demandRow = true
	}
	if age < 0 {
		age = 0
	}
	if (len(in.Loads) > 0 || len(in.Demand) > 0) && age > c.p.staleAfter {
		return FallbackStale, ReasonOld, oldest, age
	}
	if m := math.Max(sumIssued, sumDemand); m > 0 && math.Abs(sumIssued-sumDemand) > 0.25*m {
		return FallbackInconsistent, ReasonTotalsMismatch, "", age
	}
	return FallbackNone, "", "", age
}

// matchEndpoints aligns st.eps with in.Endpoints, keeping the state of
// endpoints seen before.
func (st *State) matchEndpoints(in *Input) {
	eps := in.Endpoints
	same := len(st.eps) == len(eps)
	if same {
		for i := range eps {
			if s := &st.eps[i]; s.id != eps[i].ID || !s.registered.Equal(eps[i].Registered) {
				same = false
				break
			}
		}
	}
	if same {
		for i := range st.eps {
			st.eps[i].fresh = false
		}
		return
	}
	if st.epIdx == nil {
		st.epIdx = make(map[string]int, len(st.eps))
	}
	clear(st.epIdx)
	for i := range st.eps {
		st.epIdx[st.eps[i].id] = i
	}
	next := st.epsNext[:0]
	for i := range eps {
		e := &eps[i]
		if j, ok := st.epIdx[e.ID]; ok && st.eps[j].registered.Equal(e.Registered) {
			s := st.eps[j]
			s.fresh = false
			next = append(next, s)
			continue
		}
		next = append(next, endpointState{id: e.ID, registered: e.Registered, fresh: true})
	}
	st.eps, st.epsNext = next, st.eps[:0]
}

func (p *params) trust(progress float64) float64 { return p.f0 + (1-p.f0)*progress }

// updateTrust advances slow-start progress and sums trust per zone.
func (c *Calculator) updateTrust(st *State, in *Input, dt time.Duration, lrs bool) {
	p := &c.p
	st.matchEndpoints(in)
	eps := in.Endpoints
	for i := range eps {
		if s := &st.eps[i]; eps[i].Healthy && s.healthy && !s.fresh {
			st.zones[st.epZone[i]].prevTrust += s.trust(p)
		}
	}
	// The fleet's successful requests per unit of trust: no endpoint earns
	// faster than that, so a zone given more traffic than its trust (its
	// clients send more) does not earn ahead of identical endpoints
	// elsewhere.
	fleetRate := math.Inf(1)
	if lrs {
		var succ, trust float64
		for i := range st.zones {
			if z := &st.zones[i]; z.load >= 0 && z.prevTrust > 0 {
				succ += in.Loads[z.load].SucceededRPS
				trust += z.prevTrust
			}
		}
		if trust > 0 {
			fleetRate = succ / trust
		}
	}
	dtReq := min(dt, p.staleAfter).Seconds()
	healthy, coldness := 0, 0.0
	for i := range eps {
		e := &eps[i]
		s := &st.eps[i]
		z := &st.zones[st.epZone[i]]
		switch {
		case !e.Healthy:
			if s.fresh {
				s.progress = 0
			}
			s.healthy = false
			continue
		case s.fresh:
			s.progress = 1
			if !e.Registered.IsZero() {
				s.progress = max(0, float64(in.Now.Sub(e.Registered))/float64(p.ramp))
			}
		case !s.healthy:
			s.progress = 0 // back from unhealthy: start over, as Envoy's slow start does
		case s.progress >= 1:
		case lrs && z.load >= 0:
			// Earned by serving, at most at the fleet's rate per unit of
			// trust, and never slower than twice the ramp: traffic
			// follows trust, so credit by requests alone lets the
			// endpoints that started with more traffic pull ahead of
			// identical ones elsewhere and stay ahead.
			earned := 0.0
			if z.prevTrust > 0 {
				rate := min(in.Loads[z.load].SucceededRPS/z.prevTrust, fleetRate)
				earned = rate * dtReq * s.trust(p) / p.requests
			}
			s.progress += max(earned, float64(dt)/float64(2*p.ramp))
		default:
			s.progress += float64(dt) / float64(p.ramp)
		}
		if s.progress > 1-1e-9 { // absorb rounding of the sum of steps
			s.progress = 1
		}
		healthy++
		coldness += 1 - s.progress
	}
	if healthy > 0 {
		coldness /= float64(healthy)
	}
	relief := coldRelief(coldness)
	for i := range eps {
		e := &eps[i]
		s := &st.eps[i]
		if !e.Healthy {
			continue
		}
		if s.fresh || !s.healthy { // (re)started this cycle
			s.relief = relief
		}
		s.healthy = true
		z := &st.zones[st.epZone[i]]
		z.healthy++
		t := s.trust(p)
		if t < 1 {
			z.slow++
		}
		z.trusted += t
	}
}

// queueDeadBand: time in flight up to this multiple of the average is not
// queueing.
const queueDeadBand = 1.5

// queueReports is how many load reports (this cycle's and the ones before)
// the queue signal pools: grpc-go's in-progress count is a point sample
// taken when the report is made, noise at low concurrency.
const queueReports = 3

// queueNoise is the sampling noise the queue signal discounts, in standard
// deviations of a Poisson count: a point sample of requests in flight
// whose mean is m varies by about √m.
const queueNoise = 3

// errorTolerance is the error ratio a zone may show without losing
// health: a healthy zone rejects a few requests now and then (a small
// pool at a moderate load does), and moving traffic away for that only
// moves the rejections.
const errorTolerance = 0.01

func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

// excessLatency judges a zone's time in flight against the rest of the
// fleet's from requests in flight n (the zone) and nRest (the other zones)
// and issued rates iss and issRest, each summed over the same reports.
// Were the zone's time in flight at the dead band, band times the rest's,
// its share of the n + nRest requests in flight would be binomial with
// p0 = band·iss / (band·iss + issRest); slow reports whether n is more than
// queueNoise standard deviations above that. q is the zone's time in
// flight over band times the fleet's (the zone included, as the factor
// 1 / (1 + s·(q − 1)) is calibrated), after taking the noise off n.
func excessLatency(n, iss, nRest, issRest float64) (q float64, slow bool) {
	tot := n + nRest
	if iss <= 0 || issRest <= 0 || tot <= 0 {
		return 0, false
	}
	a := queueDeadBand * iss
	p0 := a / (a + issRest)
	excess := max(0, n-queueNoise*math.Sqrt(tot*p0*(1-p0)))
	if excess <= tot*p0 {
		return 0, false
	}
	fleet := (excess + nRest) / (iss + issRest)
	return excess / iss / (queueDeadBand * fleet), true
}

// capacities computes every zone's capacity and share; it returns the
// total capacity.
func (c *Calculator) capacities(st *State, in *Input, lrs bool) float64 {
	p := &c.p
	var qSum, tSum, cSum, cIss float64 // in progress and issued: pooled, current
	j := 0
	for i := range st.zones {
		z := &st.zones[i]
		z.qf, z.ef, z.health, z.latency, z.limit, z.hidx, z.capped = 1, 1, 1, 0, 0, -1, false
		z.prev, z.pIn, z.pIss, z.pN, z.cIn, z.cIss = -1, 0, 0, 0, 0, 0
		for j < len(st.health) && st.health[j].zone < z.name {
			j++
		}
		if j < len(st.health) && st.health[j].zone == z.name {
			z.prev = j
		}
		if !lrs || z.trusted == 0 || z.load < 0 {
			continue
		}
		l := &in.Loads[z.load]
		z.inflight = l.InProgress / z.trusted
		// Queueing is judged by time in flight, not by requests in flight:
		// by Little's law Σ InProgress / Σ IssuedRPS is the mean time a
		// request spends in the zone, which does not grow just because
		// the zone is given more traffic, and does not count cold
		// endpoints twice. The sums run over the last queueReports
		// reports, since each in-progress figure is a point sample.
		z.cIn, z.cIss = l.InProgress, l.IssuedRPS
		cSum += z.cIn
		cIss += z.cIss
		z.pIn, z.pIss, z.pN = l.InProgress, l.IssuedRPS, 1
		if z.prev >= 0 {
			h := &st.health[z.prev]
			for k := range h.n {
				z.pIn += h.hist[k].inProgress
				z.pIss += h.hist[k].issued
				z.pN++
			}
		}
		if z.pIss > 0 {
			z.latency = z.pIn / z.pIss
			qSum += z.pIn
			tSum += z.pIss
		}
		if den := max(l.IssuedRPS, l.SucceededRPS+l.ErroredRPS); den > 0 {
			z.errRatio = min(1, l.ErroredRPS/den)
		}
	}
	if lrs {
		next := st.healthNext[:0]
		for i := range st.zones {
			z := &st.zones[i]
			if z.trusted == 0 {
				continue
			}
			// Each zone against the rest of the fleet (a zone that holds
			// most of the traffic would otherwise set its own bar), over
			// the pooled reports; and over this report alone, so that a
			// zone that has just slowed down is seen at once.
			q, slow := excessLatency(z.pIn, z.pIss, qSum-z.pIn, tSum-z.pIss)
			_, slowNow := excessLatency(z.cIn, z.cIss, cSum-z.cIn, cIss-z.cIss)
			// Within the band even before the noise is discounted: fast.
			ref := ratio(qSum-z.pIn, tSum-z.pIss)
			fast := ref > 0 && z.pIss > 0 && z.pIn <= queueDeadBand*ref*z.pIss
			// Requests in flight are noise at low concurrency: queueing
			// counts only when the zone holds at least one request per
			// trusted endpoint.
			if slow && q > 1 && z.pIn >= z.pN*z.trusted {
				z.qf = 1 / (1 + p.queueSens*(q-1))
			}
			slow = slow || slowNow
			z.ef = max(0, 1-p.errorSens*max(0, z.errRatio-errorTolerance))
			target := max(p.floor, z.qf*z.ef)
			z.health = target
			var hist [queueReports - 1]loadSample
			nh := 0
			if z.prev >= 0 {
				prev := &st.health[z.prev]
				hist, nh = prev.hist, prev.n
				z.limit = prev.limit
				if target > prev.h {
					// Rise multiplicatively: a zone just taken off
					// traffic looks healthy because it has none, and an
					// additive step from the floor would hand it several
					// times what it can carry and knock it over again.
					// Doubling takes about RecoveryRamp/2.
					grow := 1.0
					if in.Now.After(prev.at) {
						grow += 2 * float64(in.Now.Sub(prev.at)) / float64(p.recovery)
					}
					z.health = min(target, prev.h*grow)
				}
			}
			// Headroom: a zone failing requests while slow is at its
			// capacity, its successful rate; hold it under DegradedTarget
			// of that until it looks healthy again: no errors above
			// saturatedErrors and a time in flight within the band.
			// (A zone that fails fast is not measured: a small pool
			// rejects long before it is saturated, and its errors are left
			// to the error factor.) Setting the limit takes slowness
			// beyond the sampling noise; clearing it takes a time in
			// flight within the band, noise included, so that a degraded
			// zone held at a low rate, where its slowness is lost in the
			// noise, is not let go.
			if z.load >= 0 {
				l := &in.Loads[z.load]
				if l.IssuedRPS > 0 {
					switch {
					case z.errRatio > saturatedErrors && slow:
						z.limit = p.degraded * l.SucceededRPS
					case z.errRatio <= saturatedErrors && fast:
						z.limit = 0
					}
				}
				// This report joins the queue signal's window.
				copy(hist[1:], hist[:len(hist)-1])
				hist[0] = loadSample{inProgress: l.InProgress, issued: l.IssuedRPS}
				nh = min(nh+1, len(hist))
			}
			z.hidx = len(next)
			next = append(next, zoneHealth{zone: z.name, h: z.health, at: in.Now, limit: z.limit, hist: hist, n: nh})
		}
		st.health, st.healthNext = next, st.health[:0]
	}
	total := 0.0
	for i := range st.zones {
		z := &st.zones[i]
		z.capacity = z.trusted * z.health
		total += z.capacity
	}
	if lrs {
		total = c.applyLimits(st, in, total)
	}
	for i := range st.zones {
		if total > 0 {
			st.zones[i].C = st.zones[i].capacity / total
		}
	}
	return total
}

// applyLimits lowers the capacity of every zone whose share would send it
// more than its limit (in requests per second of this cycle's issued
// total) to exactly that share, the others sharing the rest in proportion
// to their capacity, and stores the health that gives. It returns the new
// total capacity.
func (c *Calculator) applyLimits(st *State, in *Input, total float64) float64 {
	var issued float64
	for i := range in.Loads {
		issued += in.Loads[i].IssuedRPS
	}
	if issued <= 0 || total <= 0 {
		return total
	}
	// Water-filling: cap the zones above their limit; the others grow, and
	// may cross theirs; at most one pass per zone.
	var cappedShare, free float64
	for range st.zones {
		cappedShare, free = 0, 0
		for i := range st.zones {
			z := &st.zones[i]
			if z.capped {
				cappedShare += z.limit / issued
			} else {
				free += z.capacity
			}
		}
		if cappedShare >= 1 || free <= 0 {
			return total // the limits cannot all hold: leave the shares as they are
		}
		more := false
		for i := range st.zones {
			z := &st.zones[i]
			if !z.capped && z.limit > 0 && z.capacity/free*(1-cappedShare) > z.limit/issued {
				z.capped, more = true, true
			}
		}
		if !more {
			break
		}
	}
	if cappedShare == 0 {
		return total
	}
	newTotal := free / (1 - cappedShare)
	for i := range st.zones {
		z := &st.zones[i]
		if !z.capped || z.trusted == 0 {
			continue
		}
		z.capacity = z.limit / issued * newTotal
		z.health = max(c.p.floor, z.capacity/z.trusted)
		z.capacity = z.trusted * z.health
		if z.hidx >= 0 {
			st.health[z.hidx].h = z.health
		}
	}
	newTotal = 0
	for i := range st.zones {
		newTotal += st.zones[i].capacity
	}
	return newTotal
}

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

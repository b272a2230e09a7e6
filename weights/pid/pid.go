package pid

import (
	"math"
	"slices"
	"time"
)

// Controller computes per-endpoint weights with one Config. It holds no
// state of its own (that is State), so one Controller serves every service
// of that Config, from any number of goroutines.
type Controller struct {
	p params
}

// New validates cfg and returns a Controller. An error wraps
// ErrInvalidConfig and names the field.
func New(cfg Config) (*Controller, error) {
	p, err := cfg.params()
	if err != nil {
		return nil, err
	}
	return &Controller{p: p}, nil
}

// Metric returns the Config's metric, for the caller's Utilization calls.
func (c *Controller) Metric() Metric { return c.p.metric }

// Input is one round of one service.
type Input struct {
	// Now is the round's time; report ages are measured from it.
	Now time.Time
	// Endpoints are the service's endpoints, IDs unique. Their order is the
	// order of Result.Endpoints.
	Endpoints []Endpoint
}

// Endpoint is one endpoint and its latest load report.
type Endpoint struct {
	ID   string
	Zone string
	// Utilization at Reported, see Utilization; 1 is fully busy.
	Utilization float64
	// Reported is when the report was taken; zero: never reported.
	Reported time.Time
	// RPS and EPS are the requests and the failed requests per second the
	// endpoint completed in its report's window, LatencyMs their mean
	// latency in milliseconds. 0 means not reported (a backend that sends
	// utilization only): below MinRPS requests per second the endpoint
	// takes no part in the error penalty and the error guard, and is
	// weighted exactly as on utilization alone.
	RPS, EPS, LatencyMs float64
}

// Outcome is what a round did.
type Outcome uint8

// The outcomes. Only OutcomeComputed changes weights of known endpoints;
// every outcome gives a new endpoint its initial weight.
const (
	// OutcomeComputed: the controller ran on every endpoint with a fresh
	// report; the others kept their weights.
	OutcomeComputed Outcome = iota
	// OutcomeSkippedMissing: more than SkipShare of the known endpoints had
	// no fresh report; every weight held.
	OutcomeSkippedMissing
	// OutcomeWaiting: after Restore, no report newer than the restore yet;
	// every weight held.
	OutcomeWaiting
	// OutcomeIdle: the setpoint is 0 (nothing reports any load); every
	// weight held.
	OutcomeIdle
)

var outcomeNames = [...]string{"computed", "skipped_missing", "waiting", "idle"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Status is one endpoint's part in a round.
type Status uint8

// The statuses.
const (
	// StatusFresh: a fresh report; the controller ran on it.
	StatusFresh Status = iota
	// StatusMissing: no report, one older than MaxAge, or one not newer
	// than a Restore; the weight is held.
	StatusMissing
	// StatusNew: first seen this round without a fresh report; initial
	// weight.
	StatusNew
	// StatusHeld: a fresh report in a round that was not computed.
	StatusHeld
)

var statusNames = [...]string{"fresh", "missing", "new", "held"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// Guard is why the error guard held an endpoint down.
type Guard uint8

// The guards.
const (
	// GuardNone: the controller weighted the endpoint as usual.
	GuardNone Guard = iota
	// GuardErrors: its error rate was above max(GuardErrorRatio × median,
	// median + GuardErrorPoints).
	GuardErrors
	// GuardLatency: its latency was above max(GuardLatencyRatio × median,
	// median + GuardLatencyMs).
	GuardLatency
)

var guardNames = [...]string{"", "errors", "latency"}

// String returns "" for GuardNone, else "errors" or "latency".
func (g Guard) String() string {
	if int(g) < len(guardNames) {
		return guardNames[g]
	}
	return "unknown"
}

// Result is a round's weights and why.
type Result struct {
	Outcome Outcome
	// Setpoint is the utilization every endpoint is steered to: Target, or
	// the mean utilization of the endpoints with a fresh report.
	Setpoint float64
	// Known is the number of endpoints the State held before the round;
	// Missing how many of them had no fresh report; MissingShare =
	// Missing / Known (0 when Known is 0).
	Known, Reporting, Missing int
	MissingShare              float64
	// MedianErrorRate and MedianLatencyMs are the medians (the lower
	// middle value) over the fresh endpoints with at least MinRPS
	// requests per second (latency: that report one), which the error
	// guard compares each endpoint with; 0 when none reports them.
	// Guarded is how many endpoints the guard held down this round.
	MedianErrorRate, MedianLatencyMs float64
	Guarded                          int
	// Endpoints, in Input order.
	Endpoints []EndpointResult
}

// EndpointResult is one endpoint's weight and the controller's terms.
type EndpointResult struct {
	ID, Zone string
	Status   Status
	// Utilization of the report used; Age its age at Input.Now (0 when
	// never reported).
	Utilization float64
	Age         time.Duration
	// RPS is the request rate of a fresh report with at least MinRPS
	// requests per second, else 0 (its errors and latency do not count);
	// ErrorRate is then EPS/RPS and LatencyMs its latency. Effective is
	// the utilization the controller steered: Utilization + ErrorRate ×
	// ErrorPenalty.
	RPS, ErrorRate, LatencyMs, Effective float64
	// Guard says whether the error guard held the endpoint down this
	// round, and why.
	Guard Guard
	// Error = (setpoint − effective utilization) / setpoint, clamped to
	// [−1, 1]; P, I, D the three terms (gain × error, gain × integral,
	// gain × change of error) and Delta their sum, in units of the mean
	// weight: for a guarded endpoint, Delta is the change the guard made
	// instead. All 0 unless Status is StatusFresh.
	Error, P, I, D, Delta float64
	// Weight is the pushed weight: Scale × relative weight, at least 1.
	Weight uint32
	// Relative is the weight over the service's mean weight.
	Relative float64
}

// State is one service's controller state, carried from one Compute to the
// next. The zero State is ready: every endpoint is new. A State is not safe
// for concurrent use; use one per service.
type State struct {
	eps, next []epState
	idx       map[string]int32
	scratch   []float64 // medians
	caps      []float64 // step: each endpoint's cap
	// restoredAt: reports not newer than this are not fresh.
	restoredAt time.Time
	restored   bool
}

type epState struct {
	id       string
	weight   float64 // relative to the mean: the mean over the service is 1
	integral float64
	prevErr  float64
	hasPrev  bool
	last     time.Time // report last used; zero: none
	// probation: healthy rounds with requests the endpoint, guarded
	// lately, still has to report; until then it rises slowly and never
	// above the median weight.
	probation uint16
}

// Compute runs one round of st with in and writes the weights to out
// (reusing its slice). It reads no clock and allocates nothing once st and
// out have grown to the service's size and the endpoint set is unchanged.
func (c *Controller) Compute(st *State, in *Input, out *Result) {
	p := &c.p
	n := len(in.Endpoints)
	*out = Result{Endpoints: out.Endpoints[:0]}
	next := st.next[:0]
	known := len(st.eps)
	sameOrder := len(st.eps) == n
	if sameOrder {
		for i := range in.Endpoints {
			if st.eps[i].id != in.Endpoints[i].ID {
				sameOrder = false
				break
			}
		}
	}
	if !sameOrder && known > 0 {
		if st.idx == nil {
			st.idx = make(map[string]int32, known)
		}
		clear(st.idx)
		for i := range st.eps {
			st.idx[st.eps[i].id] = int32(i)
		}
	}
	// Pass 1: carry the state over, classify reports, sum the known
	// weights for the new endpoints' initial weight.
	var sumKnown, sumU float64
	present, reporting, missing, fresherThanRestore, counted := 0, 0, 0, 0, 0
	for i := range in.Endpoints {
		e := &in.Endpoints[i]
		var s epState
		isNew := true
		if sameOrder {
			s, isNew = st.eps[i], false
		} else if known > 0 {
			if k, ok := st.idx[e.ID]; ok {
				s, isNew = st.eps[k], false
			}
		}
		s.id = e.ID
		fresh := !e.Reported.IsZero() && in.Now.Sub(e.Reported) <= p.maxAge &&
			(!st.restored || e.Reported.After(st.restoredAt)) && e.Utilization >= 0 && !math.IsInf(e.Utilization, 1)
		r := EndpointResult{ID: e.ID, Zone: e.Zone, Status: StatusMissing}
		if !e.Reported.IsZero() {
			r.Utilization, r.Age = e.Utilization, max(0, in.Now.Sub(e.Reported))
		}
		switch {
		case fresh:
			r.Status = StatusFresh
			reporting++
			r.Effective = e.Utilization
			if e.RPS >= p.minRPS && !math.IsInf(e.RPS, 1) {
				r.RPS = e.RPS
				if e.EPS > 0 {
					r.ErrorRate = min(e.EPS/e.RPS, 1)
				}
				if e.LatencyMs > 0 && !math.IsInf(e.LatencyMs, 1) {
					r.LatencyMs = e.LatencyMs
				}
				r.Effective += r.ErrorRate * p.penalty
				counted++
			}
			if st.restored && e.Reported.After(st.restoredAt) {
				fresherThanRestore++
			}
		case isNew:
			r.Status = StatusNew
		default:
			missing++
		}
		if isNew {
			s.weight = -1 // set below
		} else {
			present++
			sumKnown += s.weight
		}
		next = append(next, s)
		out.Endpoints = append(out.Endpoints, r)
	}
	meanKnown := 1.0
	if present > 0 {
		meanKnown = sumKnown / float64(present)
	}
	for i := range next {
		if next[i].weight < 0 {
			next[i].weight = p.initial * meanKnown
		}
	}
	out.Known, out.Reporting, out.Missing = present, reporting, missing
	if present > 0 {
		out.MissingShare = float64(missing) / float64(present)
	}
	switch {
	case st.restored && fresherThanRestore == 0:
		out.Outcome = OutcomeWaiting
	case present > 0 && out.MissingShare > p.skip:
		out.Outcome = OutcomeSkippedMissing
	}
	if counted > 0 {
		c.guard(st, out)
	}
	// The setpoint: the mean effective utilization of the fresh
	// endpoints the guard did not hold (none when it held none: the
	// median endpoint never is).
	steered := 0
	for i := range out.Endpoints {
		if r := &out.Endpoints[i]; r.Status == StatusFresh && r.Guard == GuardNone {
			sumU += r.Effective
			steered++
		}
	}
	if steered > 0 {
		out.Setpoint = sumU / float64(steered)
	}
	if p.target > 0 {
		out.Setpoint = p.target
	}
	if out.Outcome == OutcomeComputed && (reporting == 0 || out.Setpoint <= 0) {
		out.Outcome = OutcomeIdle
	}
	if out.Outcome == OutcomeComputed {
		c.step(st, next, in, out)
		st.restored = false
	} else {
		out.Guarded = 0
		for i := range out.Endpoints {
			if r := &out.Endpoints[i]; r.Status == StatusFresh {
				r.Status, r.Guard = StatusHeld, GuardNone
			}
		}
	}
	// Normalise to a mean of 1 and write the integer weights.
	var sum float64
	for i := range next {
		sum += next[i].weight
	}
	mean := 1.0
	if n > 0 && sum > 0 {
		mean = sum / float64(n)
	}
	for i := range next {
		next[i].weight /= mean
		r := &out.Endpoints[i]
		r.Relative = next[i].weight
		r.Weight = uint32(max(1, math.Round(Scale*next[i].weight)))
	}
	st.eps, st.next = next, st.eps[:0]
}

// guard computes the medians of the error rates and latencies of the
// fresh endpoints that report enough requests and, when the guard is on,
// marks those well above them (the rule in the package doc). The lower
// median is used, so the median endpoint itself is never marked.
func (c *Controller) guard(st *State, out *Result) {
	p := &c.p
	median := func(get func(r *EndpointResult) (float64, bool)) float64 {
		st.scratch = st.scratch[:0]
		for i := range out.Endpoints {
			r := &out.Endpoints[i]
			if v, ok := get(r); ok && r.Status == StatusFresh {
				st.scratch = append(st.scratch, v)
			}
		}
		if len(st.scratch) == 0 {
			return 0
		}
		slices.Sort(st.scratch)
		return st.scratch[(len(st.scratch)-1)/2]
	}
	out.MedianErrorRate = median(func(r *EndpointResult) (float64, bool) { return r.ErrorRate, r.RPS > 0 })
	out.MedianLatencyMs = median(func(r *EndpointResult) (float64, bool) { return r.LatencyMs, r.LatencyMs > 0 })
	if !p.guard {
		return
	}
	errLimit := max(GuardErrorRatio*out.MedianErrorRate, out.MedianErrorRate+GuardErrorPoints)
	latLimit := max(GuardLatencyRatio*out.MedianLatencyMs, out.MedianLatencyMs+GuardLatencyMs)
	for i := range out.Endpoints {
		r := &out.Endpoints[i]
		if r.Status != StatusFresh {
			continue
		}
		switch {
		case r.RPS > 0 && r.ErrorRate > errLimit:
			r.Guard = GuardErrors
		case r.LatencyMs > 0 && out.MedianLatencyMs > 0 && r.LatencyMs > latLimit:
			r.Guard = GuardLatency
		default:
			continue
		}
		out.Guarded++
	}
}

// step runs the controller on the fresh endpoints of next: each moves by
// its delta, the fresh endpoints' total is kept (so a held endpoint's share
// is unchanged), and every weight stays within the bounds. A guarded
// endpoint instead loses GuardStep of its weight (to the median weight
// at most, to GuardMinWeight at least), and the others share what it
// lost; one on probation rises by GuardRise of its weight at most, never
// above the median.
func (c *Controller) step(st *State, next []epState, in *Input, out *Result) {
	p := &c.p
	var sumAll float64
	limited, steered := false, false // an endpoint guarded or on probation; one neither
	for i := range next {
		sumAll += next[i].weight
		if r := &out.Endpoints[i]; r.Status == StatusFresh {
			if r.Guard != GuardNone || next[i].probation > 0 {
				limited = true
			} else {
				steered = true
			}
		}
	}
	// Some endpoint must take up what the guarded ones lose: when every
	// unguarded fresh endpoint is on probation, they are steered freely
	// this round.
	probation := steered
	meanW := sumAll / float64(len(next))
	lo, hi := p.min*meanW, p.max*meanW
	floor := min(p.min, GuardMinWeight) * meanW // a guarded endpoint's
	var medianW float64
	if limited {
		medianW = st.medianWeight(next)
		st.caps = st.caps[:0]
		for range next {
			st.caps = append(st.caps, math.Inf(1))
		}
	}
	var before, after, kept float64
	for i := range next {
		r := &out.Endpoints[i]
		if r.Status != StatusFresh {
			continue
		}
		s := &next[i]
		e := in.Endpoints[i]
		err := max(-1, min(1, (out.Setpoint-r.Effective)/out.Setpoint))
		integral := max(-p.ilimit, min(p.ilimit, s.integral+err))
		var d float64
		if s.hasPrev {
			d = err - s.prevErr
		}
		r.Error, r.P, r.I, r.D = err, p.kp*err, p.ki*integral, p.kd*d
		r.Delta = r.P + r.I + r.D
		before += s.weight
		if r.Guard != GuardNone {
			// No increase, GuardStep less, at most the median; the
			// integral winds no further up.
			w := min(max(floor, (1-GuardStep)*s.weight), s.weight, medianW)
			r.Delta = (w - s.weight) / meanW
			s.weight, s.integral, s.prevErr, s.hasPrev, s.last = w, min(s.integral, 0), err, true, e.Reported
			s.probation, st.caps[i] = GuardHold, w
			kept += w
			continue
		}
		w := s.weight + r.Delta*meanW
		clamped := w < lo || w > hi
		w = max(lo, min(hi, w))
		// Anti-windup: a weight at a bound does not integrate further
		// in the direction that pushed it there.
		if clamped && (err > 0) == (w >= hi) {
			integral = s.integral
		}
		if s.probation > 0 && probation {
			// Guarded lately: rise slowly, never above the median.
			if up := min(s.weight*(1+GuardRise), medianW); w > up {
				w = max(up, min(w, s.weight)) // not cut by more than the controller asks
				if err > 0 {
					integral = s.integral
				}
			}
			st.caps[i] = w
			kept += w
		} else {
			after += w
		}
		if s.probation > 0 && r.RPS > 0 {
			s.probation-- // a healthy round with requests
		}
		s.weight, s.integral, s.prevErr, s.hasPrev, s.last = w, integral, err, true, e.Reported
	}
	if after <= 0 || before <= 0 {
		return
	}
	// The steered endpoints share the fresh total less what the limited
	// ones (guarded, on probation) keep.
	f := (before - kept) / after
	for i := range next {
		if r := &out.Endpoints[i]; r.Status == StatusFresh && (!limited || math.IsInf(st.caps[i], 1)) {
			next[i].weight = max(lo, min(hi, next[i].weight*f))
		}
	}
	if !limited {
		return
	}
	// The steered endpoints moved, and the median with them: a limited
	// endpoint above it is cut to it, and what it lost goes back to the
	// steered ones, which can only raise the median.
	medianW = st.medianWeight(next)
	var cut, sumSteered float64
	for i := range next {
		if out.Endpoints[i].Status != StatusFresh {
			continue
		}
		if math.IsInf(st.caps[i], 1) {
			sumSteered += next[i].weight
		} else if next[i].weight > medianW {
			cut += next[i].weight - medianW
			next[i].weight = medianW
		}
	}
	if cut > 0 && sumSteered > 0 {
		f = (sumSteered + cut) / sumSteered
		for i := range next {
			if out.Endpoints[i].Status == StatusFresh && math.IsInf(st.caps[i], 1) {
				next[i].weight = max(lo, min(hi, next[i].weight*f))
			}
		}
	}
}

// medianWeight is the lower median of the weights of next.
func (st *State) medianWeight(next []epState) float64 {
	st.scratch = st.scratch[:0]
	for i := range next {
		st.scratch = append(st.scratch, next[i].weight)
	}
	slices.Sort(st.scratch)
	return st.scratch[(len(st.scratch)-1)/2]
}

package pid

import (
	"math"
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
	// Error = (setpoint − utilization) / setpoint, clamped to [−1, 1]; P,
	// I, D the three terms (gain × error, gain × integral, gain × change of
	// error) and Delta their sum, in units of the mean weight. All 0 unless
	// Status is StatusFresh.
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
	present, reporting, missing, fresherThanRestore := 0, 0, 0, 0
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
			sumU += e.Utilization
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
	if reporting > 0 {
		out.Setpoint = sumU / float64(reporting)
	}
	if p.target > 0 {
		out.Setpoint = p.target
	}
	if out.Outcome == OutcomeComputed && (reporting == 0 || out.Setpoint <= 0) {
		out.Outcome = OutcomeIdle
	}
	if out.Outcome == OutcomeComputed {
		c.step(next, in, out)
		st.restored = false
	} else {
		for i := range out.Endpoints {
			if out.Endpoints[i].Status == StatusFresh {
				out.Endpoints[i].Status = StatusHeld
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

// step runs the controller on the fresh endpoints of next: each moves by
// its delta, the fresh endpoints' total is kept (so a held endpoint's share
// is unchanged), and every weight stays within the bounds.
func (c *Controller) step(next []epState, in *Input, out *Result) {
	p := &c.p
	var sumAll float64
	for i := range next {
		sumAll += next[i].weight
	}
	meanW := sumAll / float64(len(next))
	lo, hi := p.min*meanW, p.max*meanW
	var before, after float64
	for i := range next {
		r := &out.Endpoints[i]
		if r.Status != StatusFresh {
			continue
		}
		s := &next[i]
		e := in.Endpoints[i]
		err := max(-1, min(1, (out.Setpoint-e.Utilization)/out.Setpoint))
		integral := max(-p.ilimit, min(p.ilimit, s.integral+err))
		var d float64
		if s.hasPrev {
			d = err - s.prevErr
		}
		r.Error, r.P, r.I, r.D = err, p.kp*err, p.ki*integral, p.kd*d
		r.Delta = r.P + r.I + r.D
		w := s.weight + r.Delta*meanW
		clamped := w < lo || w > hi
		w = max(lo, min(hi, w))
		// Anti-windup: a weight at a bound does not integrate further
		// in the direction that pushed it there.
		if clamped && (err > 0) == (w >= hi) {
			integral = s.integral
		}
		before += s.weight
		s.weight, s.integral, s.prevErr, s.hasPrev, s.last = w, integral, err, true, e.Reported
		after += w
	}
	if after <= 0 || before <= 0 {
		return
	}
	f := before / after
	for i := range next {
		if out.Endpoints[i].Status == StatusFresh {
			next[i].weight = max(lo, min(hi, next[i].weight*f))
		}
	}
}

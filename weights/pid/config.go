package pid

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("invalid pid config")

// Defaults of the Config fields.
const (
	DefaultKp            = 0.5
	DefaultKi            = 0.02
	DefaultKd            = 0.0
	DefaultMinWeight     = 0.1
	DefaultMaxWeight     = 5.0
	DefaultInitialWeight = 0.2
	DefaultSkipShare     = 0.3
	DefaultIntegralLimit = 2.0
	DefaultMaxAge        = 30 * time.Second
	DefaultErrorPenalty  = 1.0
	DefaultMinRPS        = 1.0

	// The error guard's rule (see the package doc): an endpoint is
	// erroring when its error rate is above max(GuardErrorRatio × median,
	// median + GuardErrorPoints), and slow when its mean latency is above
	// max(GuardLatencyRatio × median, median + GuardLatencyMs). A guarded
	// endpoint loses GuardStep of its weight each computed round, down to
	// GuardMinWeight of the mean weight (or MinWeight if lower). Until it
	// has reported GuardHold healthy rounds with requests after its last
	// guarded one it is on probation: it rises by GuardRise of its weight
	// a round at most, and never above the median weight.
	GuardErrorRatio   = 2.0
	GuardErrorPoints  = 0.05
	GuardLatencyRatio = 3.0
	GuardLatencyMs    = 50.0
	GuardStep         = 0.5
	GuardMinWeight    = 0.01
	GuardHold         = 20
	GuardRise         = 0.25

	// Scale is the weight an endpoint of exactly the mean weight gets: a
	// service's n weights sum to about Scale × n.
	Scale = 10000

	maxGain    = 10
	maxBound   = 100
	maxTarget  = 100
	maxPenalty = 10
	maxMinRPS  = 1e6
)

// Config tunes a Controller. The zero Config is valid and means every
// default. Fields whose zero is a meaningful setting are pointers: nil means
// the default, non-nil is the value, e.g. Ki: new(0.0).
type Config struct {
	// Kp, Ki and Kd are the proportional, integral and derivative gains on
	// the relative error (setpoint − utilization) / setpoint; the sum of
	// the three terms is the weight delta in units of the mean weight.
	// Nil means 0.5, 0.02 and 0; each in [0, 10]; Kp and Ki not both 0.
	Kp, Ki, Kd *float64

	// MinWeight and MaxWeight bound an endpoint's weight relative to the
	// service's mean weight. Zero means 0.1 and 5; MinWeight in (0, 1],
	// MaxWeight in [1, 100].
	MinWeight, MaxWeight float64

	// InitialWeight is the weight of an endpoint seen for the first time,
	// relative to the mean weight of the endpoints already known: a cold
	// endpoint starts low and the controller ramps it. Zero means 0.2; in
	// [MinWeight, MaxWeight].
	InitialWeight float64

	// SkipShare: a round in which more than this share of the known
	// endpoints has no fresh report is skipped and every weight held (the
	// mean would be wrong). Nil means 0.3 (40% missing skips); non-nil 0
	// skips on any missing report; in [0, 1], 1 never skips.
	SkipShare *float64

	// Target is a fixed setpoint utilization. Zero means none: the setpoint
	// is the mean utilization of the reporting endpoints. In [0, 100].
	Target float64

	// IntegralLimit clamps each endpoint's integral term to ±IntegralLimit
	// (anti-windup). Zero means 2; in (0, 100].
	IntegralLimit float64

	// MaxAge: a report older than this at Input.Now is missing. Zero means
	// 30 s (three 10 s report intervals); at most 1 h.
	MaxAge time.Duration

	// Metric is how an owner turns a report into Endpoint.Utilization with
	// the Utilization helper. Zero means MetricMax.
	Metric Metric

	// ErrorPenalty is gRFC A58's error_utilization_penalty: an endpoint
	// that reports its requests and errors (Endpoint.RPS >= MinRPS) is
	// steered by its effective utilization u + (EPS/RPS) × ErrorPenalty,
	// so one that fails fast does not look idle. Nil means 1 (A58's
	// default); non-nil 0 turns the penalty off; in [0, 10].
	ErrorPenalty *float64

	// ErrorGuard, the hard brake on a death spiral: an endpoint whose
	// error rate or latency is well above the service's median (the rule
	// in the package doc) gets no weight increase, loses GuardStep of its
	// weight each round, never sits above the median weight, and is left
	// out of the setpoint. Nil means on; non-nil false turns it off
	// (utilization and ErrorPenalty alone, for a comparison).
	ErrorGuard *bool

	// MinRPS is the request rate an endpoint's report needs for its error
	// rate and latency to count (in the penalty, the medians and the
	// guard): fewer requests say too little. Zero means 1 request/s; in
	// (0, 1e6].
	MinRPS float64
}

// Metric selects what utilization is made of.
type Metric uint8

// The metrics. MetricMax is max(CPU, in-flight/limit): a node stuck on I/O
// shows low CPU but a full in-flight limit, and would otherwise be fed more
// traffic until it dies.
const (
	MetricMax Metric = iota
	MetricCPU
	MetricInFlight
)

var metricNames = [...]string{MetricMax: "max", MetricCPU: "cpu", MetricInFlight: "inflight"}

// String returns the metric's name as ParseMetric accepts it.
func (m Metric) String() string {
	if int(m) < len(metricNames) {
		return metricNames[m]
	}
	return fmt.Sprintf("Metric(%d)", uint8(m))
}

// ParseMetric parses "max", "cpu" or "inflight"; "" is MetricMax.
func ParseMetric(s string) (Metric, error) {
	if s == "" {
		return MetricMax, nil
	}
	for i, n := range metricNames {
		if n == s {
			return Metric(i), nil
		}
	}
	return 0, fmt.Errorf("metric: unknown %q, want max, cpu or inflight", s)
}

// Utilization is an endpoint's utilization under metric m: cpu (a share of
// its CPU limit, 1 = fully busy), inFlight/limit, or the larger of the two.
// A limit <= 0 means no in-flight limit (that term is 0). Negative or NaN
// inputs count as 0.
func Utilization(cpu, inFlight, limit float64, m Metric) float64 {
	if !(cpu > 0) {
		cpu = 0
	}
	q := 0.0
	if limit > 0 && inFlight > 0 {
		q = inFlight / limit
	}
	switch m {
	case MetricCPU:
		return cpu
	case MetricInFlight:
		return q
	default:
		return math.Max(cpu, q)
	}
}

// params is a validated Config with the defaults filled in.
type params struct {
	kp, ki, kd           float64
	min, max, initial    float64
	skip, target, ilimit float64
	maxAge               time.Duration
	metric               Metric
	penalty, minRPS      float64
	guard                bool
}

func (c Config) params() (params, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	in := func(v, lo, hi float64) bool { return v >= lo && v <= hi } // false for NaN
	p := params{kp: DefaultKp, ki: DefaultKi, kd: DefaultKd, min: c.MinWeight, max: c.MaxWeight,
		initial: c.InitialWeight, skip: DefaultSkipShare, target: c.Target, ilimit: c.IntegralLimit,
		maxAge: c.MaxAge, metric: c.Metric, penalty: DefaultErrorPenalty, minRPS: c.MinRPS, guard: true}
	for _, g := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"kp", c.Kp, &p.kp}, {"ki", c.Ki, &p.ki}, {"kd", c.Kd, &p.kd}} {
		if g.v == nil {
			continue
		}
		if !in(*g.v, 0, maxGain) {
			return params{}, bad(g.name, "%v, want 0..%d", *g.v, maxGain)
		}
		*g.dst = *g.v
	}
	if p.kp == 0 && p.ki == 0 {
		return params{}, bad("kp", "0 with ki 0: the controller would never move a weight")
	}
	if p.min == 0 {
		p.min = DefaultMinWeight
	}
	if !(p.min > 0 && p.min <= 1) {
		return params{}, bad("min_weight", "%v, want (0, 1]", c.MinWeight)
	}
	if p.max == 0 {
		p.max = DefaultMaxWeight
	}
	if !in(p.max, 1, maxBound) {
		return params{}, bad("max_weight", "%v, want 1..%d", c.MaxWeight, maxBound)
	}
	if p.initial == 0 {
		p.initial = math.Max(DefaultInitialWeight, p.min)
	}
	if !in(p.initial, p.min, p.max) {
		return params{}, bad("initial_weight", "%v, want min_weight..max_weight (%v..%v)", c.InitialWeight, p.min, p.max)
	}
	if c.SkipShare != nil {
		if !in(*c.SkipShare, 0, 1) {
			return params{}, bad("skip_share", "%v, want 0..1", *c.SkipShare)
		}
		p.skip = *c.SkipShare
	}
	if !in(p.target, 0, maxTarget) {
		return params{}, bad("target", "%v, want 0..%d (0: the mean)", c.Target, maxTarget)
	}
	if p.ilimit == 0 {
		p.ilimit = DefaultIntegralLimit
	}
	if !(p.ilimit > 0 && p.ilimit <= 100) {
		return params{}, bad("integral_limit", "%v, want (0, 100]", c.IntegralLimit)
	}
	if p.maxAge == 0 {
		p.maxAge = DefaultMaxAge
	}
	if p.maxAge < 0 || p.maxAge > time.Hour {
		return params{}, bad("max_age", "%v, want (0, 1h]", c.MaxAge)
	}
	if int(p.metric) >= len(metricNames) {
		return params{}, bad("metric", "%d, want max, cpu or inflight", uint8(c.Metric))
	}
	if c.ErrorPenalty != nil {
		if !in(*c.ErrorPenalty, 0, maxPenalty) {
			return params{}, bad("error_penalty", "%v, want 0..%d (0: off)", *c.ErrorPenalty, maxPenalty)
		}
		p.penalty = *c.ErrorPenalty
	}
	if c.ErrorGuard != nil {
		p.guard = *c.ErrorGuard
	}
	if p.minRPS == 0 {
		p.minRPS = DefaultMinRPS
	}
	if !(p.minRPS > 0 && p.minRPS <= maxMinRPS) {
		return params{}, bad("min_rps", "%v, want (0, %g]", c.MinRPS, maxMinRPS)
	}
	return p, nil
}

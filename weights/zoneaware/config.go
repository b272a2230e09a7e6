package zoneaware

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("invalid zoneaware config")

// Defaults of the Config fields.
const (
	DefaultScale             = 10000
	DefaultProbeShare        = 0.01
	DefaultTargetUtilization = 1.0
	DefaultSlowStartFraction = 0.05
	DefaultSlowStartRamp     = 60 * time.Second
	DefaultSlowStartRequests = 1000
	DefaultQueueSensitivity  = 1.0
	DefaultErrorSensitivity  = 2.0
	DefaultCapacityFloor     = 0.05
	DefaultRecoveryRamp      = 60 * time.Second
	DefaultDegradedTarget    = 0.9
	DefaultReportInterval    = 10 * time.Second
	DefaultStaleAfter        = 3
	DefaultMoveThreshold     = 0.02

	maxScale = 1 << 20
)

// Config tunes a Calculator. The zero Config is valid and means every
// default. Fields whose zero is a meaningful setting (no probe, no queue
// signal, no error signal, no hysteresis) are pointers: nil means the
// default, non-nil is the value, e.g. ProbeShare: new(0.0).
type Config struct {
	// Scale is the total of one weight vector: weights are integers >= 1
	// that sum to about Scale. Zero means 10000; at most 1<<20.
	Scale uint32

	// ProbeShare is the least share of a client zone's traffic that goes to
	// the other healthy zones together, split evenly among them (each capped
	// at that zone's capacity share, see the package doc), so that a zone no
	// client prefers is still measured.
	// Nil means 0.01; non-nil 0 turns probing off; at most 0.2.
	ProbeShare *float64

	// TargetUtilization u fills a client zone's own zone only up to u of
	// its capacity share before spilling. Zero means 1 (fill to the full
	// share); in (0, 1].
	TargetUtilization float64

	// SlowStartFraction is how much of a host a new endpoint counts as
	// before it has earned any trust. Zero means 0.05; in (0, 1]; 1 turns
	// slow start off.
	SlowStartFraction float64
	// SlowStartRamp is how long a healthy endpoint takes to earn full trust
	// when its zone has no load reports. Zero means 60 s.
	SlowStartRamp time.Duration
	// SlowStartRequests is how many successful requests an endpoint must
	// serve to earn full trust when its zone has load reports. Zero means
	// 1000.
	SlowStartRequests float64

	// QueueSensitivity s scales the queue factor of a zone whose time in
	// flight, pooled over 3 reports and less its sampling noise, is q
	// times the dead band (see the package doc): 1 / (1 + s·(q − 1)). Nil means 1; non-nil 0 ignores in-flight
	// requests; at most 100.
	QueueSensitivity *float64
	// ErrorSensitivity s scales the error factor of a zone with error
	// ratio r: max(0, 1 − s·(r − 0.01)) (errors up to 1% cost nothing),
	// before CapacityFloor. Nil means 2 (10% errors cost 18% of the
	// zone's capacity, 50% send it to the floor); non-nil 0 ignores
	// errors; at most 100.
	ErrorSensitivity *float64
	// CapacityFloor is the least a zone's health factor (queue factor ×
	// error factor) can fall to, so a zone is never written off. Zero means
	// 0.05; in (0, 1].
	CapacityFloor float64
	// RecoveryRamp limits how fast a zone's health factor rises: it is
	// multiplied by at most 1 + 2·(elapsed time / RecoveryRamp) per cycle,
	// so a recovered zone earns its share back over cycles. Falls apply at
	// once. Zero means 60 s.
	RecoveryRamp time.Duration

	// DegradedTarget is the headroom kept on a degraded zone: when a zone
	// fails more than 1% of the requests it is sent, its successful rate
	// is taken as its capacity, and until its load reports look healthy
	// again (no such errors and no time in flight above the average's dead
	// band) it is sent at most DegradedTarget of that, in requests per
	// second of the service's measured demand. Aiming below the measured
	// capacity keeps the steady state out of overload; a zone that still
	// fails more than 1% at that level is measured again, lower. Zero
	// means 0.9; in (0, 1].
	DegradedTarget float64

	// ReportInterval is the clients' load report interval. Zero means 10 s;
	// at most 1 h.
	ReportInterval time.Duration
	// StaleAfter is how many report intervals old load data may be before
	// it is refused. Zero means 3.
	StaleAfter int

	// MoveThreshold is the hysteresis: a client zone's new vector replaces
	// the previous one only if some share moved by more than this (or the
	// set of zones or the fallback changed). Nil means 0.02; non-nil 0
	// replaces on any change; below 0.5.
	MoveThreshold *float64
}

// params is a Config with every default filled in.
type params struct {
	scale                uint32
	probe                float64
	util                 float64
	f0                   float64
	ramp                 time.Duration
	requests             float64
	queueSens, errorSens float64
	floor                float64
	recovery             time.Duration
	degraded             float64
	interval             time.Duration
	staleAfter           time.Duration // StaleAfter × ReportInterval
	staleCount           int
	move                 float64
}

func inRange(v, lo, hi float64) bool { return v >= lo && v <= hi } // false for NaN

func orDefault(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

func (c Config) params() (params, error) {
	p := params{
		scale:      c.Scale,
		probe:      orDefault(c.ProbeShare, DefaultProbeShare),
		util:       c.TargetUtilization,
		f0:         c.SlowStartFraction,
		ramp:       c.SlowStartRamp,
		requests:   c.SlowStartRequests,
		queueSens:  orDefault(c.QueueSensitivity, DefaultQueueSensitivity),
		errorSens:  orDefault(c.ErrorSensitivity, DefaultErrorSensitivity),
		floor:      c.CapacityFloor,
		recovery:   c.RecoveryRamp,
		degraded:   c.DegradedTarget,
		interval:   c.ReportInterval,
		staleCount: c.StaleAfter,
		move:       orDefault(c.MoveThreshold, DefaultMoveThreshold),
	}
	if p.scale == 0 {
		p.scale = DefaultScale
	}
	if p.util == 0 {
		p.util = DefaultTargetUtilization
	}
	if p.f0 == 0 {
		p.f0 = DefaultSlowStartFraction
	}
	if p.ramp == 0 {
		p.ramp = DefaultSlowStartRamp
	}
	if p.requests == 0 {
		p.requests = DefaultSlowStartRequests
	}
	if p.floor == 0 {
		p.floor = DefaultCapacityFloor
	}
	if p.recovery == 0 {
		p.recovery = DefaultRecoveryRamp
	}
	if p.degraded == 0 {
		p.degraded = DefaultDegradedTarget
	}
	if p.interval == 0 {
		p.interval = DefaultReportInterval
	}
	if p.staleCount == 0 {
		p.staleCount = DefaultStaleAfter
	}
	bad := func(field string, v any, want string) (params, error) {
		return params{}, fmt.Errorf("%w: %s %v: %s", ErrInvalidConfig, field, v, want)
	}
	switch {
	case p.scale < 10 || p.scale > maxScale:
		return bad("Scale", p.scale, "want 10..1048576")
	case !inRange(p.probe, 0, 0.2):
		return bad("ProbeShare", p.probe, "want 0..0.2")
	case !inRange(p.util, math.SmallestNonzeroFloat64, 1):
		return bad("TargetUtilization", p.util, "want (0, 1]")
	case !inRange(p.f0, math.SmallestNonzeroFloat64, 1):
		return bad("SlowStartFraction", p.f0, "want (0, 1]")
	case p.ramp < 0:
		return bad("SlowStartRamp", p.ramp, "want > 0")
	case !inRange(p.requests, 1, math.MaxFloat64):
		return bad("SlowStartRequests", p.requests, "want >= 1")
	case !inRange(p.queueSens, 0, 100):
		return bad("QueueSensitivity", p.queueSens, "want 0..100")
	case !inRange(p.errorSens, 0, 100):
		return bad("ErrorSensitivity", p.errorSens, "want 0..100")
	case !inRange(p.floor, math.SmallestNonzeroFloat64, 1):
		return bad("CapacityFloor", p.floor, "want (0, 1]")
	case p.recovery < 0:
		return bad("RecoveryRamp", p.recovery, "want > 0")
	case !inRange(p.degraded, math.SmallestNonzeroFloat64, 1):
		return bad("DegradedTarget", p.degraded, "want (0, 1]")
	case p.interval < 0 || p.interval > time.Hour:
		return bad("ReportInterval", p.interval, "want > 0, at most 1h")
	case p.staleCount < 1 || p.staleCount > 1000:
		return bad("StaleAfter", p.staleCount, "want 1..1000 intervals")
	case !inRange(p.move, 0, 0.4999999):
		return bad("MoveThreshold", p.move, "want 0..0.5")
	}
	p.staleAfter = time.Duration(p.staleCount) * p.interval
	return p, nil
}

// config returns the Config with every default filled in.
func (p params) config() Config {
	return Config{
		Scale:             p.scale,
		ProbeShare:        new(p.probe),
		TargetUtilization: p.util,
		SlowStartFraction: p.f0,
		SlowStartRamp:     p.ramp,
		SlowStartRequests: p.requests,
		QueueSensitivity:  new(p.queueSens),
		ErrorSensitivity:  new(p.errorSens),
		CapacityFloor:     p.floor,
		RecoveryRamp:      p.recovery,
		DegradedTarget:    p.degraded,
		ReportInterval:    p.interval,
		StaleAfter:        p.staleCount,
		MoveThreshold:     new(p.move),
	}
}

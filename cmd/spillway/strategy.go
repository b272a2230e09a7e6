package main

import (
	"time"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/pid"
	"github.com/spillway/spillway/weights/subset"
	"github.com/spillway/spillway/weights/svcconfig"
	"github.com/spillway/spillway/weights/zoneaware"
)

// strategyOf turns a service's config (weights/svcconfig) into what the
// planner needs (weights.Strategy). A service without a config, or whose
// tombstone has run out, gets the defaults: zone-aware only.
func strategyOf(c svcconfig.Config) weights.Strategy {
	s := weights.Strategy{ZoneAware: true}
	switch c.Strategy {
	case svcconfig.PID:
		s = weights.Strategy{PID: true}
	case svcconfig.ZoneAwarePID:
		s = weights.Strategy{PID: true, ZoneAware: true}
	}
	if b := c.Blend; b != nil {
		// A blend moves the endpoint weights inside each zone's share:
		// zone-aware keeps deciding the zones; the controller runs when
		// either side uses it.
		usesPID := func(x string) bool { return x == svcconfig.PID || x == svcconfig.ZoneAwarePID }
		s = weights.Strategy{PID: usesPID(b.From) || usesPID(b.To), ZoneAware: true,
			Blend: &weights.Blend{From: b.From, To: b.To, Percent: b.Percent}}
	}
	if c.SubsetSize > 0 {
		s.Subset = weights.SubsetConfig{Mode: subset.Mode(c.SubsetMode), Size: c.SubsetSize}
	}
	if !s.PID {
		return s
	}
	kp, ki, kd, skip := c.PID.Kp, c.PID.Ki, c.PID.Kd, c.PID.SkipMissingShare
	guard, penalty := c.PID.ErrorGuard, c.PID.ErrorPenalty
	s.PIDConfig = pid.Config{
		Kp: &kp, Ki: &ki, Kd: &kd, SkipShare: &skip,
		MinWeight: c.PID.MinWeight, MaxWeight: c.PID.MaxWeight, InitialWeight: c.PID.InitialWeight,
		Target:     c.PID.Target,
		ErrorGuard: &guard, ErrorPenalty: &penalty, MinRPS: c.PID.MinRPS,
		// A report older than three of its intervals is missing.
		MaxAge: 3 * time.Duration(c.ReportInterval),
	}
	switch c.Metric {
	case svcconfig.MetricCPU:
		s.Metric = pid.MetricCPU
	case svcconfig.MetricInflight:
		s.Metric = pid.MetricInFlight
	default:
		s.Metric = pid.MetricMax
	}
	s.PIDConfig.Metric = s.Metric
	return s
}

// strategies reads the service config store; nil (no store) gives the
// defaults. A service with a config also gets its own
// zone-aware knobs (probe share, headroom, slow start) over base, the
// server's zone-aware config; one without keeps base.
func strategies(st *svcconfig.Store, base zoneaware.Config) weights.StrategySource {
	return weights.StrategyFunc(func(service string) weights.Strategy {
		if st == nil {
			return weights.Strategy{ZoneAware: true}
		}
		c, _, ok := st.Get(service)
		s := strategyOf(c)
		if ok {
			zc := base
			probe := c.ProbeShare
			zc.ProbeShare = &probe
			zc.TargetUtilization = c.Headroom
			zc.SlowStartFraction = c.SlowStart.Fraction
			zc.SlowStartRamp = time.Duration(c.SlowStart.Ramp)
			zc.SlowStartRequests = float64(c.SlowStart.Requests)
			s.ZoneAwareConfig = &zc
		}
		return s
	})
}

// utilizationsOf adapts a table of backends' utilization reports (this
// replica's load.UtilizationTable, or the owner's merged one) to the
// planner.
func utilizationsOf(read func(service string, now time.Time) []load.EndpointUtilization) weights.UtilizationSource {
	return weights.UtilizationFunc(func(service string, now time.Time) []weights.EndpointUtilization {
		us := read(service, now)
		out := make([]weights.EndpointUtilization, len(us))
		for i, u := range us {
			out[i] = weights.EndpointUtilization{ID: u.ID, CPU: u.CPU, InFlight: float64(u.InFlight), Limit: float64(u.Limit),
				RPS: u.RPS, EPS: u.EPS, LatencyMs: u.LatencyMs, Reported: u.Reported}
		}
		return out
	})
}

package main

import (
	"testing"
	"time"

	"github.com/spillway/spillway/weights/pid"
	"github.com/spillway/spillway/weights/svcconfig"
)

// TestStrategyOf: each configured strategy maps onto the planner's, with
// the PID knobs in the controller's units.
func TestStrategyOf(t *testing.T) {
	cfg := func(strategy string, edit func(*svcconfig.Config)) svcconfig.Config {
		c := svcconfig.Default()
		c.Strategy = strategy
		if edit != nil {
			edit(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name           string
		c              svcconfig.Config
		pid, zoneAware bool
		blend          bool
	}{
		{"default", svcconfig.Default(), false, true, false},
		{"zone-aware", cfg(svcconfig.ZoneAware, nil), false, true, false},
		{"pid", cfg(svcconfig.PID, nil), true, false, false},
		{"zone-aware+pid", cfg(svcconfig.ZoneAwarePID, nil), true, true, false},
		{"pid_guard_off", cfg(svcconfig.PID, func(c *svcconfig.Config) {
			c.PID.ErrorGuard, c.PID.ErrorPenalty, c.PID.MinRPS = false, 0, 5
		}), true, false, false},
		{"static", cfg(svcconfig.Static, nil), false, true, false},
		{"blend_to_pid", cfg(svcconfig.ZoneAware, func(c *svcconfig.Config) {
			c.Blend = &svcconfig.Blend{From: svcconfig.ZoneAware, To: svcconfig.ZoneAwarePID, Percent: 30}
		}), true, true, true},
		{"blend_static", cfg(svcconfig.ZoneAware, func(c *svcconfig.Config) {
			c.Blend = &svcconfig.Blend{From: svcconfig.ZoneAware, To: svcconfig.Static, Percent: 50}
		}), false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := strategyOf(tc.c)
			if s.PID != tc.pid || s.ZoneAware != tc.zoneAware || (s.Blend != nil) != tc.blend {
				t.Fatalf("strategyOf(%s) = PID %v, zone-aware %v, blend %v; want %v, %v, %v", tc.name, s.PID, s.ZoneAware, s.Blend != nil, tc.pid, tc.zoneAware, tc.blend)
			}
			if !s.PID {
				return
			}
			p := s.PIDConfig
			if *p.Kp != tc.c.PID.Kp || *p.Ki != tc.c.PID.Ki || p.MinWeight != tc.c.PID.MinWeight || p.InitialWeight != tc.c.PID.InitialWeight || *p.SkipShare != tc.c.PID.SkipMissingShare {
				t.Errorf("PID config %+v does not carry the service's knobs %+v", p, tc.c.PID)
			}
			if *p.ErrorGuard != tc.c.PID.ErrorGuard || *p.ErrorPenalty != tc.c.PID.ErrorPenalty || p.MinRPS != tc.c.PID.MinRPS {
				t.Errorf("PID guard %v, penalty %v, min rps %v; want the service's %v, %v, %v", *p.ErrorGuard, *p.ErrorPenalty, p.MinRPS, tc.c.PID.ErrorGuard, tc.c.PID.ErrorPenalty, tc.c.PID.MinRPS)
			}
			if want := 3 * time.Duration(tc.c.ReportInterval); p.MaxAge != want {
				t.Errorf("MaxAge = %v, want three report intervals %v", p.MaxAge, want)
			}
			if _, err := pid.New(p); err != nil {
				t.Errorf("the controller refuses the mapped config: %v", err)
			}
		})
	}
	c := cfg(svcconfig.PID, func(c *svcconfig.Config) { c.Metric = svcconfig.MetricInflight })
	if s := strategyOf(c); s.Metric != pid.MetricInFlight || s.PIDConfig.Metric != pid.MetricInFlight {
		t.Errorf("metric inflight mapped to %v / %v", s.Metric, s.PIDConfig.Metric)
	}
}

package zoneaware

import (
	"math"
	"time"
)

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

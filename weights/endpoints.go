package weights

import (
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/pid"
)

// endpointWeights runs the service's PID round when its strategy uses PID
// and fills plan.Endpoints, LocalityFromEndpoints and PID. Without a
// StrategySource, or for a strategy without PID, it drops the PID state
// and leaves the plan as zone-aware alone makes it.
func (p *Planner) endpointWeights(plan *Plan, ss *svcState, svc *registry.Service, now time.Time) {
	if p.cfg.Strategies == nil {
		return
	}
	strat := p.cfg.Strategies.Strategy(svc.Name)
	usesPID := strat.PID || (strat.Blend != nil && (strategyUsesPID(strat.Blend.From) || strategyUsesPID(strat.Blend.To)))
	if !usesPID {
		ss.pid, ss.pending = nil, nil
		return
	}
	cfg := strat.PIDConfig
	cfg.Metric = strat.Metric
	ctl, err := pid.New(cfg)
	if err != nil {
		p.cfg.Logger.Error("no endpoint weights: the service's PID config is invalid", "service", svc.Name, "err", err)
		return
	}
	if ss.pid == nil {
		ss.pid = &pid.State{}
	}
	if ss.pending != nil {
		if err := ss.pid.Restore(*ss.pending, now); err != nil {
			// ImportState checked it; keep the current state.
			p.cfg.Logger.Error("imported PID state not restored", "service", svc.Name, "err", err)
		}
		ss.pending = nil
	}
	var reports map[string]EndpointUtilization
	if p.cfg.Utilization != nil {
		us := p.cfg.Utilization.Utilizations(svc.Name, now)
		reports = make(map[string]EndpointUtilization, len(us))
		for _, u := range us {
			reports[u.ID] = u
		}
	}
	in := &p.pidIn
	in.Now, in.Endpoints = now, in.Endpoints[:0]
	var eps []*registry.Endpoint
	for _, e := range svc.Serving() {
		if !hasPort(e, p.cfg.PortName) {
			continue
		}
		ep := pid.Endpoint{ID: e.ID, Zone: e.Locality.Zone}
		if r, ok := reports[e.ID]; ok {
			ep.Utilization = pid.Utilization(r.CPU, r.InFlight, r.Limit, ctl.Metric())
			ep.Reported = r.Reported
			ep.RPS, ep.EPS, ep.LatencyMs = r.RPS, r.EPS, r.LatencyMs
		}
		in.Endpoints = append(in.Endpoints, ep)
		eps = append(eps, e)
	}
	res := &pid.Result{}
	ctl.Compute(ss.pid, in, res)
	pushed := make([]uint32, len(res.Endpoints))
	for i := range res.Endpoints {
		pushed[i] = res.Endpoints[i].Weight
	}
	if b := strat.Blend; b != nil && len(eps) > 0 {
		from := strategyWeights(b.From, res, eps)
		to := strategyWeights(b.To, res, eps)
		blended, err := pid.Blend(nil, from, to, b.Percent)
		if err != nil {
			p.cfg.Logger.Error("blend not applied: the from strategy's weights are pushed", "service", svc.Name, "err", err)
			blended = from
		}
		pushed = blended
	}
	plan.Endpoints = make(map[string]EndpointWeight, len(res.Endpoints))
	for i, r := range res.Endpoints {
		eff := 0.0
		if r.RPS > 0 {
			eff = r.Effective
		}
		plan.Endpoints[r.ID] = EndpointWeight{
			Zone: r.Zone, Weight: max(pushed[i], 1), PIDWeight: r.Weight,
			Utilization: r.Utilization, Age: r.Age, Status: r.Status.String(),
			Error: r.Error, P: r.P, I: r.I, D: r.D,
			RPS: r.RPS, ErrorRate: r.ErrorRate, LatencyMs: r.LatencyMs, Effective: eff, Guard: r.Guard.String(),
		}
	}
	plan.LocalityFromEndpoints = strat.PID && !strat.ZoneAware
	plan.PID = &PIDExplain{Outcome: res.Outcome.String(), Setpoint: res.Setpoint, Known: res.Known, Missing: res.Missing,
		MedianErrorRate: res.MedianErrorRate, MedianLatencyMs: res.MedianLatencyMs, Guarded: res.Guarded}
	if strat.Blend != nil {
		b := *strat.Blend
		plan.PID.Blend = &b
	}
}

// strategyWeights gives one strategy's endpoint weights for a blend: the
// PID weights for a strategy with PID, the registry weights for static,
// and equal weights (pid.Scale) for zone-aware or an unknown name.
func strategyWeights(name string, res *pid.Result, eps []*registry.Endpoint) []uint32 {
	out := make([]uint32, len(eps))
	for i := range out {
		switch {
		case strategyUsesPID(name):
			out[i] = res.Endpoints[i].Weight
		case name == "static":
			out[i] = max(eps[i].Weight, 1)
		default:
			out[i] = pid.Scale
		}
	}
	return out
}

// sameEndpoints reports whether two plans push the same endpoint weights
// and locality mode.
func sameEndpoints(a, b *Plan) bool {
	if a.LocalityFromEndpoints != b.LocalityFromEndpoints || (a.Endpoints == nil) != (b.Endpoints == nil) || len(a.Endpoints) != len(b.Endpoints) {
		return false
	}
	for id, w := range a.Endpoints {
		if v, ok := b.Endpoints[id]; !ok || v.Weight != w.Weight || v.Zone != w.Zone {
			return false
		}
	}
	return true
}

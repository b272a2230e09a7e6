package xds

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/zoneaware"
)

// plan is one service's zone-aware weights: what every stream of the
// service builds its endpoints from until the next plan.
type plan struct {
	gen uint64 // changes whenever a pushed vector changes
	res *zoneaware.Result
}

// planner recomputes zone-aware weights for every service every
// Config.WeightsInterval, from the load table and the connected streams.
// Its goroutine owns the per-service states; readers load the published
// plans with one atomic load.
type planner struct {
	calc  *zoneaware.Calculator
	plans atomic.Pointer[map[string]*plan]

	// Owned by the planner goroutine.
	states map[string]*zoneaware.State
	gen    uint64
	in     zoneaware.Input
}

func newPlanner(cfg zoneaware.Config) (*planner, error) {
	calc, err := zoneaware.New(cfg)
	if err != nil {
		return nil, err
	}
	p := &planner{calc: calc, states: map[string]*zoneaware.State{}}
	empty := map[string]*plan{}
	p.plans.Store(&empty)
	return p, nil
}

// planFor returns the service's current plan, or nil before the first
// cycle that saw it.
func (s *Server) planFor(service string) *plan {
	if s.planner == nil {
		return nil
	}
	return (*s.planner.plans.Load())[service]
}

// Plan returns the zone-aware result for a service, for the explain view;
// nil when zone-aware weights are off or not computed yet.
func (s *Server) Plan(service string) *zoneaware.Result {
	if p := s.planFor(service); p != nil {
		return p.res
	}
	return nil
}

// runPlanner computes a cycle at once and then every interval, until ctx
// ends.
func (s *Server) runPlanner(ctx context.Context) {
	t := time.NewTicker(s.cfg.WeightsInterval)
	defer t.Stop()
	s.planCycle(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.planCycle(now)
		}
	}
}

// planCycle computes every service's weights and publishes those that
// changed; streams of changed services are told at once.
func (s *Server) planCycle(now time.Time) {
	p := s.planner
	snap := s.store.Snapshot()
	loads := s.loads.Loads("", now)
	byService := map[string][]load.Load{}
	for _, l := range loads {
		byService[l.Service] = append(byService[l.Service], l)
	}
	clients := s.hub.clientCounts()
	old := *p.plans.Load()
	next := make(map[string]*plan, snap.Len())
	var changed []string
	var sameNum, sameDen float64
	fallbacks := map[string]int{}
	for _, name := range snap.Services() {
		svc, _ := snap.Service(name)
		st := p.states[name]
		if st == nil {
			st = &zoneaware.State{}
			p.states[name] = st
		}
		in := s.planInput(&p.in, svc, byService[name], clients[name], now)
		res := &zoneaware.Result{}
		p.calc.Compute(st, in, res)
		prev := old[name]
		if prev == nil || res.Changed {
			p.gen++
			next[name] = &plan{gen: p.gen, res: res}
			changed = append(changed, name)
		} else {
			next[name] = &plan{gen: prev.gen, res: res}
		}
		fallbacks[res.Fallback.Key()]++
		if res.Optimum > 0 {
			var demand float64
			for _, d := range in.Demand {
				demand += d.RPS
			}
			sameNum += res.SameZone * demand
			sameDen += demand
			s.metrics.sameZone.WithLabelValues(name).Set(res.SameZone)
		}
	}
	for name := range p.states {
		if _, ok := next[name]; !ok {
			delete(p.states, name)
			s.metrics.sameZone.DeleteLabelValues(name)
		}
	}
	p.plans.Store(&next)
	if sameDen > 0 {
		s.metrics.sameZoneFleet.Set(sameNum / sameDen)
	}
	for _, f := range zoneaware.Fallbacks() {
		s.metrics.fallbacks.WithLabelValues(f.Key()).Set(float64(fallbacks[f.Key()]))
	}
	if len(changed) > 0 {
		s.hub.dispatch(changed, now)
	}
}

// planInput fills in from the store and the load table. It reuses the
// slices of the previous call.
//
// Client zones are chosen by clients, and each client zone the planner
// sees gets its own route and EDS variant. So a client zone counts as
// itself only if the service has endpoints there or the zone holds a slot
// in the zone set (Config.MaxZones); the demand and client counts of the
// others are added to the zoneless row ("") and those clients get the
// zoneless route. Loads reported to upstream zones where the service has
// no endpoint are left out (the load table records none).
func (s *Server) planInput(in *zoneaware.Input, svc *registry.Service, loads []load.Load, clients map[string]int, now time.Time) *zoneaware.Input {
	in.Now = now
	in.Endpoints, in.Loads, in.Demand, in.Clients = in.Endpoints[:0], in.Loads[:0], in.Demand[:0], in.Clients[:0]
	zones := map[string]struct{}{}
	for _, e := range svc.Serving() {
		zones[e.Locality.Zone] = struct{}{}
		if _, ok := endpointPort(e, s.cfg.PortName); !ok {
			continue
		}
		in.Endpoints = append(in.Endpoints, zoneaware.Endpoint{ID: e.ID, Zone: e.Locality.Zone, Healthy: e.Health == registry.Healthy, Registered: e.Registered})
	}
	clientZone := func(z string) string {
		if _, ok := zones[z]; ok || z == "" || s.zones.has(z) {
			return z
		}
		return ""
	}
	up := map[string]int{}
	down := map[string]int{}
	for _, l := range loads {
		if l.Reporters == 0 {
			continue // only totals left: no fresh report
		}
		if _, ok := zones[l.Locality.Zone]; !ok {
			continue
		}
		i, ok := up[l.Locality.Zone]
		if !ok {
			i = len(in.Loads)
			up[l.Locality.Zone] = i
			in.Loads = append(in.Loads, zoneaware.ZoneLoad{Zone: l.Locality.Zone})
		}
		zl := &in.Loads[i]
		zl.IssuedRPS += l.Issued
		zl.SucceededRPS += l.Succeeded
		zl.ErroredRPS += l.Errored
		zl.InProgress += float64(l.InProgress)
		if l.Updated.After(zl.Updated) {
			zl.Updated = l.Updated
		}
		cz := clientZone(l.ClientZone)
		j, ok := down[cz]
		if !ok {
			j = len(in.Demand)
			down[cz] = j
			in.Demand = append(in.Demand, zoneaware.Demand{ClientZone: cz})
		}
		d := &in.Demand[j]
		d.RPS += l.Issued
		if l.Updated.After(d.Updated) {
			d.Updated = l.Updated
		}
	}
	counts := map[string]int{}
	for z, n := range clients {
		counts[clientZone(z)] += n
	}
	for z, n := range counts {
		in.Clients = append(in.Clients, zoneaware.ClientCount{Zone: z, Count: n})
	}
	return in
}

// planWeights gives the locality weights of a plan's route for one client
// zone: the zone's weight spread over its localities by healthy endpoints.
func planWeights(p *plan) LocalityWeights {
	return func(_ *registry.Service, zone string, locs []Locality) []uint32 {
		rt := p.res.Route(zone)
		healthy := map[string]int{}
		for _, l := range locs {
			healthy[l.Zone] += l.Healthy
		}
		out := make([]uint32, len(locs))
		for i, l := range locs {
			var w uint32
			for _, zw := range rt.Weights {
				if zw.Zone == l.Zone {
					w = zw.Weight
					break
				}
			}
			share := float64(w) * float64(l.Healthy) / float64(max(healthy[l.Zone], 1))
			out[i] = uint32(max(1, math.Round(share)))
		}
		return out
	}
}

// clientCounts counts the connected streams of each service per client
// zone: the demand estimate before any load report.
func (h *hub) clientCounts() map[string]map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]map[string]int{}
	for name, ws := range h.by {
		m := map[string]int{}
		for w := range ws {
			m[h.nodes[w].zone]++
		}
		out[name] = m
	}
	return out
}

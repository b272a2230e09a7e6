package xds

import (
	"maps"
	"math"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
)

// Plans gives each service's zone-aware weights (package weights). It is
// called from many goroutines at once and must be safe for that; a Plan
// it returns is never modified afterwards. *weights.Planner implements it.
type Plans interface {
	// Plan returns the service's plan, or nil when it has none: its
	// locality weights are then Config.Weights'.
	Plan(service string) *weights.Plan
}

// PlanFunc adapts a function to Plans.
type PlanFunc func(service string) *weights.Plan

// Plan implements Plans.
func (f PlanFunc) Plan(service string) *weights.Plan { return f(service) }

// planFor returns the service's current plan, or nil.
func (s *Server) planFor(service string) *weights.Plan {
	if s.cfg.Plans == nil {
		return nil
	}
	return s.cfg.Plans.Plan(service)
}

// planWeights gives the locality weights of a plan's route for one client
// zone: the zone's weight spread over its localities by healthy endpoints.
func planWeights(p *weights.Plan) LocalityWeights {
	return func(_ *registry.Service, zone string, locs []Locality) []uint32 {
		rt := p.Result.Route(zone)
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

// ClientCounts counts the connected streams of each service per client
// zone (service -> zone -> streams): the demand estimate before any load
// report. It implements weights.ClientSource. The counts are kept as
// streams come, go and change what they want, so a call copies one map
// entry per service and holds the hub's lock that long (counting every
// stream of 50,000 held it 160 ms each planner cycle); the inner maps are
// shared with other callers and must not be changed.
func (s *Server) ClientCounts() map[string]map[string]int {
	h := &s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.counts)
}

// Has reports whether a client zone holds a slot in the zone set
// (Config.MaxZones): it keeps its own name. It implements weights.ZoneSet.
func (s *Server) Has(zone string) bool { return s.zones.has(zone) }

// Dispatch tells the streams of services that their endpoints' content
// changed at now, as a store change does: the planner's OnChange (new
// weights or subsets), the region rules'. A stream whose subset of a
// service it leaves as it was is not woken (dispatchViews).
func (s *Server) Dispatch(services []string, now time.Time) { s.dispatchViews(services, now, toAll) }

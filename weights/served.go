package weights

import (
	"sync"
	"sync/atomic"
)

// PlanSource gives each service's current plan; *Planner and the mesh
// selector (replica/meshweights) implement it.
type PlanSource interface {
	Plan(service string) *Plan
}

// Served is the plan source a replica serves from: the xDS server, the DNS
// server and the Admin API read it; the server's assembly points it, once,
// at the local Planner or at the mesh selector, before anything runs.
//
// It closes the one feedback loop in the server: the planner reads the xDS
// server's streams (the demand before any load report) and the xDS server
// serves the planner's plans, so whichever of the two is built first
// needs the other afterwards. Served is built before both and names that
// step; every other part is built with what it needs.
type Served struct {
	once sync.Once
	src  atomic.Pointer[PlanSource]
}

// Serve points s at src; only the first call counts. Call it before any
// reader runs.
func (s *Served) Serve(src PlanSource) {
	s.once.Do(func() { s.src.Store(&src) })
}

// Plan implements PlanSource: src's plan, or nil before Serve (zone-aware
// weights off) or on a nil Served.
func (s *Served) Plan(service string) *Plan {
	if s == nil {
		return nil
	}
	src := s.src.Load()
	if src == nil {
		return nil
	}
	return (*src).Plan(service)
}

package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// epoch is the simulated time of step 0. The simulator never reads the
// clock: the same scenario always gives the same output.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// maxRho bounds a pod's load factor in the in-flight model: requests time
// out, so in-flight requests stop growing somewhere.
const maxRho = 100

// Report is the outcome of a scenario: one Run per strategy, in the
// scenario's order, all driven by the same clients, fleet, events and seed.
type Report struct {
	Scenario *Scenario
	Runs     []Run
	// Subsets is the outcome of the scenario's subset section, or nil.
	Subsets *SubsetReport
}

// Run is one strategy's steps.
type Run struct {
	Strategy string
	Steps    []Step
}

// Step is what happened during one step.
type Step struct {
	Index int
	Time  time.Duration // since the start
	// Events applied at the start of the step, for humans.
	Events []string
	// Issued is the rate all clients issued (rps); Errors the rate that
	// failed, over capacity or with nowhere to go (Unroutable).
	Issued, Errors, Unroutable float64
	// SameZone is the share of the issued traffic sent to the client's own
	// zone; Optimum is the most any assignment could keep in-zone without
	// overloading a zone, Σ_z min(D_z, C_z) over the real demand and real
	// (throttled, warming) capacity shares.
	SameZone, Optimum float64
	// Fallback is the strategy's state: zoneaware's fallback key for
	// spillway, "none" or why Envoy's heuristic is off for hostcount.
	Fallback string
	Zones    []ZoneStep // in Scenario.Zones order
	// Shares[z][y] is the share of client zone z's traffic sent to zone y.
	Shares [][]float64
}

// ZoneStep is one zone during one step, as clients (Issued) and as
// servers (the rest).
type ZoneStep struct {
	Clients int     // client instances in the zone
	Issued  float64 // rps its clients issued
	Routed  float64 // of which sent to some zone
	// Offered is the rps sent to the zone's pods; Capacity the most they
	// could serve (Σ capacity × throttle × warm-up); Served and Errors
	// split Offered; InFlight is their requests in progress.
	Offered, Capacity, Served, Errors, InFlight float64
	Pods, Cold                                  int // Cold: still warming up
}

// Utilization is Offered / Capacity (+Inf when traffic meets no
// capacity, 0 without traffic).
func (z ZoneStep) Utilization() float64 {
	switch {
	case z.Offered == 0:
		return 0
	case z.Capacity == 0:
		return math.Inf(1)
	}
	return z.Offered / z.Capacity
}

// Overloaded reports whether the zone failed requests for lack of
// capacity this step.
func (z ZoneStep) Overloaded() bool { return z.Errors > 1e-9*math.Max(1, z.Offered) }

// ErrorRate is Errors / Issued.
func (s *Step) ErrorRate() float64 {
	if s.Issued == 0 {
		return 0
	}
	return s.Errors / s.Issued
}

// Overloaded lists the indexes of the zones that failed requests.
func (s *Step) Overloaded() []int {
	var out []int
	for i, z := range s.Zones {
		if z.Overloaded() {
			out = append(out, i)
		}
	}
	return out
}

// Simulate runs every strategy of the scenario.
func Simulate(sc *Scenario) (*Report, error) {
	rep := &Report{Scenario: sc}
	for _, name := range sc.Strategies {
		run, err := simulate(sc, name)
		if err != nil {
			return nil, fmt.Errorf("strategy %s: %w", name, err)
		}
		rep.Runs = append(rep.Runs, run)
	}
	if sc.Subset != nil {
		sub, err := simulateSubsets(rep)
		if err != nil {
			return nil, err
		}
		rep.Subsets = sub
	}
	return rep, nil
}

// Run returns the run of a strategy, or nil.
func (r *Report) Run(strategy string) *Run {
	for i := range r.Runs {
		if r.Runs[i].Strategy == strategy {
			return &r.Runs[i]
		}
	}
	return nil
}

func simulate(sc *Scenario, strategy string) (Run, error) {
	rt, err := newRouter(strategy, sc)
	if err != nil {
		return Run{}, err
	}
	f := newFleet(sc)
	rng := rand.New(rand.NewPCG(sc.Seed, 0x5eed))
	nz := len(sc.Zones)
	run := Run{Strategy: strategy, Steps: make([]Step, 0, sc.Steps)}
	ev := 0
	var prev *Step
	for k := range sc.Steps {
		now := epoch.Add(time.Duration(k) * sc.Step)
		st := Step{Index: k, Time: now.Sub(epoch), Zones: make([]ZoneStep, nz), Shares: make([][]float64, nz)}
		for z := range st.Shares {
			st.Shares[z] = make([]float64, nz)
		}
		for ; ev < len(sc.Events) && sc.Events[ev].Step == k; ev++ {
			st.Events = append(st.Events, f.apply(&sc.Events[ev], now))
		}
		f.rates(rng, &st)
		st.Fallback = rt.route(now, f, prev, &st)
		f.serve(now, &st)
		run.Steps = append(run.Steps, st)
		prev = &run.Steps[len(run.Steps)-1]
	}
	return run, nil
}

// pod is one server of the service.
type pod struct {
	id         string
	zone       int
	capacity   float64 // rps when warm and unthrottled
	registered time.Time
	initial    bool // in the fleet from the start: warm
}

// fleet is the simulated world of one run: pods, throttles, surges.
type fleet struct {
	sc       *Scenario
	pods     []pod     // oldest first
	throttle []float64 // per zone
	surge    []float64 // per client group
	clients  []int     // client instances per zone
	next     int       // next pod number
}

func newFleet(sc *Scenario) *fleet {
	f := &fleet{sc: sc, throttle: make([]float64, len(sc.Zones)), surge: make([]float64, len(sc.Clients)), clients: make([]int, len(sc.Zones))}
	for i := range f.throttle {
		f.throttle[i] = 1
	}
	for i := range f.surge {
		f.surge[i] = 1
	}
	for _, g := range sc.Clients {
		f.clients[g.Zone] += g.Instances
	}
	for _, g := range sc.Servers {
		registered := epoch.Add(-24 * time.Hour)
		if g.New {
			registered = epoch
		}
		for range g.Count {
			f.add(g.Zone, g.Capacity, registered, true)
		}
	}
	return f
}

func (f *fleet) add(zone int, capacity float64, registered time.Time, initial bool) {
	f.pods = append(f.pods, pod{id: fmt.Sprintf("%s-%d", f.sc.Zones[zone], f.next), zone: zone, capacity: capacity, registered: registered, initial: initial})
	f.next++
}

// apply changes the fleet and returns a description of the event.
func (f *fleet) apply(e *Event, now time.Time) string {
	zone := f.sc.Zones[e.Zone]
	switch e.Action {
	case ActionScaleUp:
		for range e.Count {
			f.add(e.Zone, e.Capacity, now, false)
		}
		return fmt.Sprintf("scale_up %s +%d cold", zone, e.Count)
	case ActionRemove:
		// The newest pods of the zone go first.
		left := e.Count
		for i := len(f.pods) - 1; i >= 0 && left > 0; i-- {
			if f.pods[i].zone == e.Zone {
				f.pods = append(f.pods[:i], f.pods[i+1:]...)
				left--
			}
		}
		return fmt.Sprintf("remove %s -%d", zone, e.Count-left)
	case ActionThrottle:
		f.throttle[e.Zone] = e.Factor
		return fmt.Sprintf("throttle %s x%g", zone, e.Factor)
	case ActionRecover:
		f.throttle[e.Zone] = 1
		return fmt.Sprintf("recover %s", zone)
	case ActionSurge:
		f.surge[e.Group] = e.Factor
		return fmt.Sprintf("surge %s x%g", f.sc.Clients[e.Group].Name, e.Factor)
	}
	return e.Action
}

// warm is the share of its capacity a pod has at now: new pods start at
// Model.ColdCapacity and ramp up linearly over Model.Warmup.
func (f *fleet) warm(p *pod, now time.Time) float64 {
	m := &f.sc.Model
	if p.initial || m.Warmup == 0 {
		return 1
	}
	age := now.Sub(p.registered)
	return m.ColdCapacity + (1-m.ColdCapacity)*min(1, max(0, float64(age)/float64(m.Warmup)))
}

// rates sets each zone's client count and issued rate for the step.
func (f *fleet) rates(rng *rand.Rand, st *Step) {
	for i, g := range f.sc.Clients {
		r := float64(g.Instances) * g.RPS * f.surge[i]
		if n := f.sc.Model.Noise; n > 0 {
			r *= max(0, 1+n*rng.NormFloat64())
		}
		st.Zones[g.Zone].Issued += r
		st.Issued += r
	}
	for z := range st.Zones {
		st.Zones[z].Clients = f.clients[z]
	}
}

// inFlight is a pod's in-flight requests relative to its base concurrency
// (capacity × latency) at load factor rho: Little's law, with latency
// growing by QueueGrowth × (rho − 1) above capacity.
func (f *fleet) inFlight(rho float64) float64 {
	rho = min(rho, maxRho)
	return rho * (1 + f.sc.Model.QueueGrowth*max(0, rho-1))
}

// load is offered / capacity, maxRho when there is traffic but no
// capacity.
func load(offered, capacity float64) float64 {
	switch {
	case offered == 0:
		return 0
	case capacity == 0:
		return maxRho
	}
	return offered / capacity
}

// serve sends the step's traffic by st.Shares and measures what the pods
// make of it.
func (f *fleet) serve(now time.Time, st *Step) {
	sc := f.sc
	for z := range st.Zones {
		zs := &st.Zones[z]
		routed := 0.0
		for y, s := range st.Shares[z] {
			if s > 0 {
				st.Zones[y].Offered += zs.Issued * s
				routed += s
			}
		}
		if routed > 0 { // a row of shares sums to 1, or is empty
			zs.Routed = zs.Issued
		}
		st.Unroutable += zs.Issued - zs.Routed
		st.SameZone += zs.Issued * st.Shares[z][z]
	}
	if st.Issued > 0 {
		st.SameZone /= st.Issued
	}
	lat := sc.Model.Latency.Seconds()
	for i := range f.pods {
		p := &f.pods[i]
		zs := &st.Zones[p.zone]
		zs.Pods++
		w := f.warm(p, now)
		if w < 1 {
			zs.Cold++
		}
		zs.Capacity += p.capacity * f.throttle[p.zone] * w
	}
	leastLoaded := sc.Model.Leaf == LeafLeastLoaded
	if leastLoaded {
		// Each pod gets traffic in proportion to its real capacity: the
		// zone is one pool.
		for z := range st.Zones {
			zs := &st.Zones[z]
			zs.Served = min(zs.Offered, zs.Capacity)
			zs.Errors = zs.Offered - zs.Served
		}
	}
	for i := range f.pods {
		p := &f.pods[i]
		zs := &st.Zones[p.zone]
		c := p.capacity * f.throttle[p.zone] * f.warm(p, now)
		base := p.capacity * lat // in flight at full load when warm
		var rho float64
		if leastLoaded {
			rho = load(zs.Offered, zs.Capacity)
		} else { // every pod of the zone gets the same rate
			r := zs.Offered / float64(zs.Pods)
			served := min(r, c)
			zs.Served += served
			zs.Errors += r - served
			rho = load(r, c)
		}
		zs.InFlight += base * f.inFlight(rho)
	}
	for z := range st.Zones {
		zs := &st.Zones[z]
		if zs.Pods == 0 && zs.Offered > 0 { // nowhere to serve it
			zs.Errors = zs.Offered
		}
		st.Errors += zs.Errors
	}
	st.Errors += st.Unroutable

	// The optimum over the real demand and capacity.
	var sumD, sumC float64
	for _, zs := range st.Zones {
		sumD += zs.Issued
		sumC += zs.Capacity
	}
	if sumD > 0 && sumC > 0 {
		for _, zs := range st.Zones {
			st.Optimum += min(zs.Issued/sumD, zs.Capacity/sumC)
		}
	}
}

// Package weights decides each service's zone-aware locality weights: the
// weights step of load reports -> load -> weights -> pushes. Its planner
// turns the registry's endpoints and the load table into one Plan per
// service every cycle; xds and resolver read plans, never compute them.
//
// # Per-endpoint weights (PID)
//
// With Config.Strategies and Config.Utilization set, a service whose
// Strategy has PID also gets per-endpoint weights each cycle: weights/pid
// runs over the service's serving endpoints (those a client can dial),
// each with utilization pid.Utilization(CPU, InFlight, Limit,
// Strategy.Metric) of its latest report, and Plan.Endpoints holds the
// weight and the controller's terms of every endpoint. The PID state is
// kept per service like the zone-aware state and dropped with it (or when
// the strategy stops using PID). With zone-aware on, zone-aware decides
// each zone's share and the endpoint weights split it (EDS: locality
// weight = zone-aware's, endpoint weight = Plan.Endpoints'); with PID alone
// (Strategy.ZoneAware false) Plan.LocalityFromEndpoints is set and a
// locality weighs the sum of its endpoints' weights. Without a
// StrategySource, or for a strategy without PID, Plan.Endpoints is nil and
// nothing changes. An invalid PIDConfig is logged and the service gets no
// endpoint weights.
//
// # Blend
//
// When Strategy.Blend is set, the pushed weight of endpoint i of the n
// endpoints is, with p = Percent/100 and from_i, to_i the two strategies'
// weights of the endpoint,
//
//	w_i = max(1, round(pid.Scale · n · ((1 − p)·from_i/Σfrom + p·to_i/Σto)))
//
// (pid.Blend), where a strategy's weights are: "pid" and "zone-aware+pid":
// the controller's weights (EndpointWeight.PIDWeight); "zone-aware":
// pid.Scale for every endpoint (zone-aware alone splits a zone evenly);
// "static": the registry weight (at least 1). The endpoints are in the
// registry's order, which does not change the result. The function of
// the same inputs gives the same numbers on every replica. A blend that
// pid.Blend refuses (Percent outside 0..100) is logged and From's weights
// are pushed.
//
// Plan.Gen changes when the locality vectors change, when any endpoint's
// pushed weight changes, and when Endpoints or LocalityFromEndpoints
// appear or go.
//
// # State
//
// ExportState gives {"zoneaware": <zoneaware.Snapshot>, "pid":
// <pid.Snapshot>} ("pid" omitted without PID state); ImportState also
// takes a bare zoneaware.Snapshot, as earlier releases exported. An
// imported PID state is restored at the next cycle (pid.State.Restore at
// the cycle's time): the controller holds every weight until a report
// newer than that arrives.
package weights

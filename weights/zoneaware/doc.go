// Package zoneaware computes zone-aware locality weights for one service:
// fill the client's own zone up to its share of the service's capacity,
// spill the rest to the zones with spare capacity. Demand is measured (load
// reports per client zone) rather than assumed from client counts, and
// capacity is a dynamic model (healthy endpoints, discounted for slow
// start, queueing and errors) rather than a host count.
//
// The package is pure computation: no networking, no xDS types, no
// goroutines, no clock. The caller (the xDS server) turns a zone's weight
// into load_balancing_weight values spread over that zone's localities.
//
// # Usage
//
// One Calculator for the process, one State per service, kept between
// cycles; one Result reused by the caller:
//
//	calc, err := zoneaware.New(zoneaware.Config{}) // defaults; errors name the field
//	...
//	// every report interval, for each service:
//	calc.Compute(st, &zoneaware.Input{
//		Now:       now,
//		Endpoints: eps,     // ID, Zone, Healthy, Registered
//		Loads:     loads,   // per upstream zone: issued, succeeded, errored, in progress
//		Demand:    demand,  // per client zone: issued RPS (include ClientZone "")
//		Clients:   clients, // connected xDS clients per zone, the demand when there are no reports
//	}, &out)
//	for _, rt := range out.Routes {
//		if rt.Changed {
//			push(service, rt.ClientZone, rt.Weights)
//		}
//	}
//	// A client whose zone has no route (new zone, no zone) uses out.Route(zone),
//	// which falls back to the capacity-proportional zoneless route.
//
// A caller of many services computes them in turn with ComputeWith and
// one Scratch, so that each State keeps only what it carries to the next
// cycle, not the memory a cycle works in (the weights planner: 2.3 KiB a
// service less).
//
// Loads and Demand are two sums of the same load reports (by upstream zone
// and by client zone), so their totals must agree; Updated is the time of
// the newest report summed. A Result's memory is reused by the next
// Compute; Clone what must be kept. Each Route has an Explain (String gives
// one line for spillwayctl) and Result.Zones the capacity model per zone;
// an Explain's Capacity refers to its client zone's entry there (a
// ZoneRef, whose JSON is the ZoneInfo's, as earlier releases wrote).
//
// # Model
//
// Trust of a healthy endpoint e, with f0 = SlowStartFraction:
//
//	trust(e) = f0 + (1 − f0)·(ρ_e + (1 − ρ_e)·progress(e)),  progress in [0, 1]
//
// Slow start protects a cold endpoint among warm ones, not a fleet from
// itself: the relief ρ_e is set when e (re)starts, from the service's
// coldness κ = Σ (1 − progress) / healthy endpoints (e included):
// ρ = clamp((κ − 0.4)/0.1, 0, 1). A cohort of up to 40% of the service is
// discounted in full; one that is half of it or more (a fresh deploy, a
// full rollout) not at all, so no zone gets ahead by earning trust first.
// ρ is fixed, so trust only grows as e warms.
//
// An endpoint seen for the first time starts at progress = age/SlowStartRamp
// (age from Registered; the zero time counts as long ago), so a restarted
// control plane does not slow-start its fleet; one that comes back from
// unhealthy starts again at 0 (as Envoy's slow start does); unhealthy
// endpoints earn nothing. Each cycle, Δt after the previous one:
//
//	with load data for its zone:  progress += max(min(S_z/Σ_z trust, S/Σ trust)·min(Δt, StaleAfter·ReportInterval)·trust(e) / SlowStartRequests,
//	                                              Δt / (2·SlowStartRamp))
//	without:                      progress += Δt / SlowStartRamp
//
// where S_z is the zone's successful rate, credited to the zone's endpoints
// in proportion to their trust (Σ_z over those healthy at the previous
// cycle), but at most at the fleet's rate per unit of trust (S, Σ over the
// zones with load data): a zone sent more than its trust, because its
// clients send the most, does not earn faster than identical endpoints
// elsewhere. With load data, time alone earns at half the ramp's rate: traffic
// follows trust, so credit by requests alone would let endpoints that
// happened to start with more traffic pull ahead of identical ones and stay
// ahead.
//
// Capacity of upstream zone z, from its healthy endpoints:
//
//	T_z = Σ trust(e)                         (Healthy counts them: the raw capacity)
//	N_z, I_z = Σ InProgress_z, Σ Issued_z     over its last 3 reports (this one included)
//	N', I'   = the same sums over the other zones
//	p0 = 1.5·I_z / (1.5·I_z + I'),  n = N_z + N'
//	slow_z ⇔ N*_z = N_z − 3·√(n·p0·(1 − p0)) > n·p0
//	q_z = (N*_z / I_z) / (1.5·(N*_z + N') / (I_z + I'))
//	Q_z = 1 / (1 + QueueSensitivity·(q_z − 1)) if slow_z and q_z > 1 and N_z ≥ reports·T_z, else 1
//	r_z = Errored_z / max(Issued_z, Succeeded_z + Errored_z)
//	E_z = max(0, 1 − ErrorSensitivity·max(0, r_z − 0.01))
//	H*_z = max(CapacityFloor, Q_z·E_z)
//	H_z = H*_z if it is not above the previous H_z, else min(H*_z, H_prev·(1 + 2·Δt/RecoveryRamp))
//	c_z = T_z·H_z,   C_z = c_z / Σ c
//
// Headroom on a degraded zone: when z fails more than 1% of what it is
// sent while slow (slow_z, over the pooled reports or this one alone), it
// is at its capacity, and its limit becomes DegradedTarget·Succeeded_z
// (rps); a report with errors under 1% and a pooled time in flight within
// the band, noise not discounted (N_z ≤ 1.5·I_z·N'/I'), clears it, so a
// degraded zone held at a low rate, where its slowness is lost in the
// noise, is not let go. While set, C_z is lowered to at most limit_z / Σ Issued (the
// other zones sharing the rest by capacity) and H_z stored accordingly, so
// the zone settles under its measured capacity instead of where errors
// hold it, and recovers from there over RecoveryRamp. A zone that fails
// fast is not measured: a small pool rejects long before it is saturated.
//
// N_z / I_z is the mean time a request spends in flight in zone z
// (Little's law), so a zone is marked down for queueing, not for being
// given more traffic. grpc-go's in-progress count is a point sample taken
// when a report is made, noise at low concurrency (a third of a request
// per endpoint at 5 ms and 67 rps): the signal pools the last 3 reports,
// compares the zone with the rest of the fleet (so a zone holding most of
// the traffic does not set its own bar), and counts as slow only what is
// more than 3 standard deviations above the dead band (1.5× the rest's
// time in flight), the zone's share of the requests in flight being
// binomial under it; that much is taken off N_z before the factor. A zone
// also needs at least one request per trusted endpoint in flight. Errors
// up to 1% of what a zone is sent cost nothing: a healthy small pool
// rejects a few, and moving traffic for that only moves them.
// TestCapacityNoise checks that healthy zones keep H = 1 under such noise.
// Pooling delays the queue factor of a zone that only slows down by up to
// two cycles; errors act at once, and slow_z is also tested on this
// report alone (for the headroom below).
// Falls apply at once (a degraded zone loses its traffic in one cycle);
// rises are multiplicative (health at most doubles every RecoveryRamp/2):
// a zone just taken off traffic looks healthy because it has none, and a
// large step from the floor would overload it again. And
// the floor keeps some traffic on every zone so it stays observed. Without
// usable load data H_z = 1 and the stored H is left as it was.
//
// Demand of client zone z: d_z = Demand.RPS (Source lrs), or, when there
// are no load reports or they show no traffic, the connected clients
// (Source clients); D_z = d_z / Σ d over the client zones with a figure.
// Clients without a zone, and a client zone with no figure while others
// have one, get capacity-proportional weights and are left out of D.
//
// Fill local, spill the rest, with u = TargetUtilization:
//
//	L_z     = min(1, u·C_z / D_z)  (1 if D_z = 0; 0 if C_z = 0)
//	spare_y = max(0, u·C_y − D_y·L_y)
//	φ       = min(1, Σ spare / Σ_z D_z·(1 − L_z))
//	share_z→z = L_z
//	share_z→y = (1 − L_z)·(φ·spare_y / Σ_{y'≠z} spare_y' + (1 − φ)·C_y / Σ_{y'≠z} C_y')
//
// With u = 1 the spare exactly absorbs the spill (φ = 1): this is Envoy's
// heuristic on measured demand and modelled capacity, every zone gets at
// most its capacity share, and the same-zone share Σ_z D_z·L_z reaches the
// optimum Σ_z min(D_z, C_z) (Optimum). Capacity here is relative (shares),
// so total demand is always treated as feasible. With u < 1 a spilling
// zone keeps (1 − u) of its share as headroom, but since shares sum to one
// the traffic it refuses lands on other zones, which then carry more than
// their share (TestTargetUtilization); φ < 1 then spreads what the spare
// cannot take by capacity instead of piling it on the few zones with
// spare. Keep u = 1 until capacity is known in absolute terms.
//
// Then the probe floor: every healthy zone other than the client's gets at
// least min(ProbeShare/(n-1), 1/n, C_y) for n healthy zones (ProbeShare is
// one client zone's probe budget, shared by the others), taken from the
// zones above their floor in proportion to their surplus. Capping at C_y
// keeps probes from flooding a zone whose only endpoints are slow-starting.
// Weights are max(1, round(share·Scale)) for every zone with a healthy
// endpoint (gRPC refuses a zero weight); a zone without one is absent.
//
// Hysteresis: a client zone's new vector replaces the previous one only if
// some share moved by more than MoveThreshold, the set of zones changed, or
// its fallback changed; otherwise the previous weights are returned and
// Route.Changed is false. The comparison is always against the vector
// returned, so slow drifts add up and are pushed.
//
// # Fallbacks
//
// Load data that is stale (some row older than StaleAfter report
// intervals) or inconsistent (negative or non-finite values, a zone twice,
// a timestamp in the future, client demand and upstream totals more than
// 25% apart, e.g. demand with no upstream traffic at all) is never used:
// every route fails open to capacity-proportional weights (trust counts,
// no queue or error factor) and Result.Fallback, Reason and ReasonZone say
// why. Without any load reports the connected client counts are the
// demand (FallbackClientCounts); without those either, weights are
// capacity-proportional (FallbackNoDemand). See Fallback for the list.
//
// # Concurrency
//
// A Calculator is immutable and safe for concurrent use. A State and a
// Result belong to one Compute at a time: use one State per service (any
// goroutine, not two at once). Compute starts no goroutine, does no I/O and
// never reads the clock; the same Config, Input and State always give the
// same Result and next State. In the steady state (same endpoints and
// zones as the previous cycle) it allocates nothing.
//
// # Moving a State
//
// State.Snapshot copies what a State carries to the next Compute (the
// time of the last cycle, slow-start progress and relief per endpoint,
// health, degraded limit and recent reports per zone, the vectors last
// returned, which hysteresis compares with) into a Snapshot that survives
// JSON; State.Restore checks one (bounded counts, finite values in range,
// sorted unique zones, names the field it rejects) and loads it, after
// which the next Compute gives the same Result as on the original State.
// Another process can so carry on a service's calculation.
package zoneaware

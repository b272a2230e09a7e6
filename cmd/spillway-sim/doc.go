// Command spillway-sim is a deterministic, discrete-time what-if simulator
// of spillway's zone-aware weights. It drives the real weights/zoneaware code
// with a synthetic fleet described by a YAML scenario, side by side with
// Envoy's host-count heuristic and capacity-proportional weights, and
// prints per step the share of traffic that stays in the client's zone,
// each zone's utilization, the overloaded zones, the error rate and the
// fallback state. docs/simulator.md has the model in full and the results
// of the scenarios in scenarios/.
//
// Usage:
//
//	spillway-sim [flags] SCENARIO.yaml
//	spillway-sim [--csv FILE] [--svg FILE] pid:NAME   # per-endpoint weights (weights/pid), see pidsim.go
//	spillway-sim [--quiet] [--csv FILE] [--svg FILE] pid:stuck-io   # the death spiral, brakes off/penalty/guard, see guardsim.go
//
// Flags (before or after the scenario):
//
//	--csv FILE        write one row per step and strategy
//	--svg FILE        plot same-zone %, errors and per-zone utilization over time
//	--compare S1,S2   run these strategies instead of the scenario's
//	--probe SHARE     override spillway.probe_share (0..0.2)
//	--quiet           print only the summary
//
// Exit status: 0 on success; 2 for a bad command line or scenario, with a
// message naming the flag, or the scenario's field and line; 1 when an
// output file cannot be written.
//
// # Scenario
//
// Every field but zones, steps, clients and servers is optional:
//
//	name: degraded-zone
//	description: zone a throttled to 10% capacity at step 10
//	zones: [a, b, c]         # letters, digits, '.', '_', '-'
//	step: 10s                # step length = load report interval; default 10s, at most 1h
//	steps: 50                # 1..100000
//	seed: 1                  # seeds model.noise; default 0
//	strategy: spillway       # spillway (default), hostcount or static; or:
//	compare: [spillway, hostcount, static]   # several, same traffic, same seed
//	clients:                 # client groups; rps is per instance; name defaults to the zone
//	  - {name: web, zone: a, instances: 30, rps: 10}
//	servers:                 # capacity: rps one warm, unthrottled pod serves
//	  - {zone: a, count: 3, capacity: 200}   # new: true registers them at step 0 (a fresh deploy)
//	model:
//	  warmup: 2m             # a new pod's capacity ramps up linearly over warmup ...
//	  cold_capacity: 0.1     # ... from this share of it (default 0.1)
//	  latency: 50ms          # latency on a warm, idle pod: in flight = rps × latency
//	  queue_growth: 4        # in-flight growth above capacity (default 4)
//	  noise: 0               # relative std dev of each group's rate per step (0..1)
//	  leaf: least_loaded     # or round_robin: how a zone's traffic spreads over its pods
//	spillway:                # weights/zoneaware.Config; left out = zoneaware's default
//	  probe_share: 0.01      # also target_utilization, slow_start_fraction,
//	  recovery_ramp: 60s     # slow_start_ramp, slow_start_requests, queue_sensitivity,
//	                         # error_sensitivity, capacity_floor, degraded_target,
//	                         # stale_after, move_threshold
//	events:                  # applied at the start of the step, in file order
//	  - {step: 10, action: throttle, zone: a, factor: 0.1}   # capacity × factor (0..10)
//	  - {step: 30, action: recover, zone: a}                 # throttle back to 1
//	  - {step: 5, action: scale_up, zone: a, count: 1}       # new cold pods, Registered = now;
//	                                                         # capacity: defaults to the zone's first server group
//	  - {step: 40, action: remove, zone: a, count: 1}        # the zone's newest pods go first
//	  - {step: 12, action: surge, clients: web, factor: 2.5} # × the group's rate; 1 restores it
//	subset:                  # subsets of the last step's endpoints per client (weights/subset)
//	  size: 10               # required, 1..1000
//	  modes: [deterministic, random]   # the default: both
//	  route: spillway        # the strategy whose last-step route they follow (default: the first)
//	  churn: true            # also the pairs one change moves (default true)
//
// # Model
//
// Step k covers [k·step, (k+1)·step). At its start the step's events
// apply, then each strategy sets the zone weights: spillway by calling
// zoneaware's Calculator.Compute with one State for the whole run, the
// pods as endpoints (a scaled-up pod with Registered = now), the client
// instances per zone, and the load reports of step k−1 (per upstream zone:
// issued, succeeded, errored, in progress; per client zone: issued); step
// 0 has no reports, as after a control plane restart. Clients follow
// spillway's integer weights, as grpc-go does. hostcount is Envoy's
// heuristic on client instance counts and pod counts; static sends every
// zone's traffic in proportion to nominal capacity.
//
// Each client zone issues Σ instances × rps × surge and splits it by its
// weights. A zone's capacity is Σ pod capacity × throttle × warm-up;
// least_loaded serves min(offered, capacity) and fails the rest,
// round_robin gives every pod offered/pods and fails each pod's excess. A
// pod's requests in flight are capacity × latency × ρ × (1 + queue_growth ×
// max(0, ρ − 1)), ρ its offered rate over its real capacity (at most 100).
// What a step measures is the next step's load report.
//
// # Output
//
// Per step and strategy: same-zone (share of issued traffic sent to the
// client's zone), optimum (Σ min(D, C) over the real demand and real
// capacity shares: the most any weights could keep in-zone without
// overloading a zone), error rate, utilization per zone (offered / real
// capacity), overloaded zones (those that failed requests) and the
// fallback state (zoneaware's Fallback.Key for spillway). The summary sums
// the run and compares spillway with the others. The CSV adds rates,
// capacity, errors, in-flight, pods, cold pods and local share per zone.
//
// With a subset section, after the run every client instance gets a
// subset of the last step's pods by the real subset.Assign, once per
// mode (subsetsim.go): per upstream zone, connections per endpoint
// min/avg/max, max/avg and sd; requests per endpoint max/avg when each
// client sends its rate by the route, round robin over its subset; the
// busiest pod's utilization; beside them the closed form of random
// subsets, the binomial B(M, s/N), with the expected max by a normal
// approximation. Then the share of (client, endpoint) pairs that one
// endpoint added or removed, one client joined or leaving changes.
//
// There is no clock and no global randomness: the same scenario gives the
// same output, and every strategy of a run sees the same traffic.
package main

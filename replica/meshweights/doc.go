// Package meshweights makes every replica serve the same zone-aware weights: the
// owner of a service computes its plan from the mesh-wide load and
// publishes it through the shared store, and every replica (the owner
// included) serves the published plan while it is fresh, else its own
// local one. It is the "owner computes, everyone pushes" and "failure"
// parts of mesh-wide load (issue 13).
//
// # Usage
//
// On every replica, over the shared systemstore.KV:
//
//	sub, _ := meshweights.NewSubscriber(meshweights.SubscriberConfig{KV: kv, Shard: own.Shard})
//	sel, _ := meshweights.NewSelector(meshweights.SelectorConfig{Subscriber: sub, Local: localPlanner,
//		Services: services, Interval: interval, StoreUp: func() bool { return rep.Status().Up }, OnChange: xdsServer.Dispatch})
//	pub, _ := meshweights.NewPublisher(meshweights.PublisherConfig{ID: id, KV: kv, Ownership: own,
//		Merged: merged, Planner: ownerPlanner, Services: services, Interval: interval})
//	go sub.Run(ctx); go sel.Run(ctx); go pub.Run(ctx)
//
// xds, resolver and admin read sel.Plan(service). StoreUp should be the
// replica's store probe (replica/registrysync's Status().Up): an etcd watch
// does not fail while the store is down, so the Subscriber alone notices
// only failed Lists. The Subscriber's updates trigger the Selector it was
// built into. The local planner's changes go to sel.LocalChanged
// (localPlanner.Subscribe(sel.LocalChanged), not to xds directly), so a
// service served from its local plan is pushed when that plan changes. Before the
// ownership layer resigns a shard, it calls pub.Release(ctx, shard).
//
// # Store keys
//
//   - weights/plan/<service>: PlanRecord, JSON {v, service, owner, epoch,
//     shard, published, contributors [{replica, age_ms}], result}, result
//     being the zoneaware.Result (routes with weights and explain, zones,
//     source, fallback, reason, same-zone, optimum). Written by the owner
//     only when some route's weights changed (Gen and explain alone do not
//     count).
//   - weights/shard/<NN>: Heartbeat {v, owner, epoch, cycle, at}, written by
//     the owner of shard NN every cycle (NN two digits or more).
//   - weights/state/<service>: the owner Planner's ExportState bytes,
//     written with each plan published, for each service every
//     CheckpointEvery cycles (30; spread over the cycles, skipped when
//     unchanged) and when its shard is released.
//
// Store writes per owner cycle: one heartbeat per owned shard, two per
// changed plan (plan and state), and owned services / CheckpointEvery
// checkpoints; on etcd about one round trip per 128 of them. BenchmarkPublisherCycle (planner precomputed, in memory)
// and BenchmarkOwnerCycle (the real planner over merged load, a real
// etcd) measure them; spillway_mesh_store_writes_total counts them by
// kind.
//
// # Protocol
//
// Publisher, each cycle: note the shards held (Ownership.Epoch); for a
// shard newly held, or held at a new epoch, import the state of its
// services from weights/state/ (a missing or bad checkpoint: the service
// starts fresh; one the store fails to return is read again next cycle,
// and the shard publishes nothing before) and start the wait; end the
// wait of the shards whose acknowledgements are in; run Planner.Cycle;
// write every held shard's heartbeat; then, for each held shard whose
// wait ended before the planner ran, the changed plans (an
// acknowledgement that arrives while the planner computes counts from the
// next cycle, whose plans include that member's load). The wait for shard s taken at epoch e ends when every
// live member, this replica included, acknowledged the hold: a load
// summary of theirs that arrived after the take lists (s, e) among the
// shards it routes here (MergedLoad.Acked; every replica sends every
// recorded owner one summary a round, even with no load, and delivers its
// own in process on its sender's tick: until it has, the merged load
// lacks every client zone this replica serves). When the wait ends, the
// shard's services import their checkpoint again, so the first published
// cycle starts from it and not from the cycles computed while waiting. A member that still routes s to the old
// owner has not: there is no time bound, so no plan computed from
// partial load is published. Past 2 intervals the owner logs a warning
// and counts spillway_mesh_publish_waits_total{reason="unacked"} once per
// hold, and keeps waiting; a dead member leaves the live members within
// the member TTL, which ends the wait. The heartbeats start at once, so
// replicas keep the previous owner's plans during the wait. A replica that does not own a shard never
// runs the owner planner for it. When the store is a
// systemstore.BatchPutter (etcd), the heartbeats go in one PutBatch, then
// the plans and states in PutBatches of 64 services (a plan and a state
// each: etcd transactions of at most 128 records), 8 at a time, each
// service's plan ahead of its state in its batch, so a state is taken
// only with or after its plan; the store takes a prefix of each batch,
// and only what it took counts as written. Otherwise (bbolt, Spanner)
// the heartbeats are written one at a time, then the plans and states 16
// services at a time, one Put each (each service's plan before its
// state, the state only once the plan was taken). The
// first failed store write of a cycle ends that cycle's writes: none
// starts after it, those in flight finish (one request timeout per
// cycle); they are retried next cycle. A service whose plan is the one
// last published (the planner kept it) is not compared again.
//
// Subscriber: List weights/ (heartbeats first), then Watch from the listed
// revision; a failed watch is followed by a new List. Records are
// untrusted: at most MaxRecordBytes, validated (routes sorted by client
// zone, weights >= 1 sorted by zone, shares in [0, 1] summing to 1,
// bounded counts and names, the shard matching the service); a bad record
// is logged, counted in spillway_mesh_bad_records_total and ignored, and
// never replaces a good one. Fencing: a plan whose epoch is older than the
// newest heartbeat epoch of its shard is ignored when it arrives after
// that heartbeat (by the watch's order, or by revision in a List), as is a
// heartbeat older than the newest one; a plan already held from the
// previous owner is kept until the new owner replaces it. Each shard
// records the local time its heartbeat last changed; a heartbeat seen for
// the first time (at start) is dated by its own stamp when that is in the
// past, so only that first sighting depends on the owner's clock.
//
// # Freshness
//
// A published plan is used while its shard's heartbeat changed within
// StaleCycles × Interval (default 3 × 10s) by this replica's clock, so
// clocks of different replicas are never compared. Otherwise the selector
// serves the local plan with Source SourceLocal and a Reason:
// "no published plan yet", "published plan stale: owner r2 last heard 34s
// ago", or "store unreachable" (with the owner's age when a plan was
// held). The local planner itself falls back to capacity-proportional
// weights when its own data is stale (zoneaware's fallbacks). The selector
// hands out its own Gen per service, which changes exactly when the
// selected vectors change (a change of source with identical vectors keeps
// it), and calls OnChange when the vectors or the source change.
// Metrics: spillway_weights_source_services{source},
// spillway_mesh_plan_age_seconds, spillway_weights_fallbacks_total{reason}.
//
// # Failures
//
//   - Owner killed (kill -9): its heartbeats stop; replicas serve its last
//     plans for StaleCycles × Interval, then their local ones. Ownership
//     gives the shard to another replica at a higher epoch, which imports
//     the last checkpoint (its vectors those of the last plan published;
//     slow start, health and load history up to CheckpointEvery cycles
//     old), heartbeats at
//     once (replicas that still held the old plans keep them), and
//     publishes once every live member acknowledged its hold (the wait
//     above); its plans replace the old ones.
//   - Old owner still writing after losing the shard: its plans carry the
//     old epoch and are fenced.
//   - Store outage: nothing is written or received; replicas hold the
//     published plans for StaleCycles × Interval, then serve local ones
//     with "store unreachable" (when StoreUp says so). Back, the
//     subscriber lists again and the owners' next heartbeats make the
//     plans fresh again.
//   - Replica restart: the List restores every plan and heartbeat and the
//     published plans are served at once, unless their heartbeat's own
//     stamp is already older than StaleCycles × Interval (a dead owner's).
//   - Graceful shutdown or resign: Release checkpoints the shard's state
//     first, so the next owner starts where this one stopped.
//
// # Concurrency
//
// Every method of Publisher, Subscriber and Selector is safe for
// concurrent use. A Publisher runs one cycle at a time; a Selector one
// refresh at a time, and calls OnChange from the goroutine that refreshed,
// without its locks held. Plans handed out are never modified.
package meshweights

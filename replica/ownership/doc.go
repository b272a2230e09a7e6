// Package ownership gives each shard of services one owner replica at a
// time, chosen through the shared store, so that one replica computes a
// service's mesh-wide weights (issue 13) while every other replica knows
// which one, and rebalances the shards when replicas join or leave.
//
// A service's shard is fnv-1a 32 of its name mod Shards (--mesh-shards,
// 16 by default). The first replica records the count under "mesh/shards";
// Run refuses to start a replica configured with another count, naming
// the flag and both values (ErrShardCount). To change the count, stop
// every replica and delete mesh/shards.
//
// # Protocol
//
// All through the systemstore.KV and one systemstore.Elector per shard
// (etcdstore's or spannerstore's Election):
//
//   - Membership: each replica puts "members/<id>" = {"id", "grpc_addr",
//     "started", "expires", and the optional "identity" (its certificate's)
//     and "max_version" (the highest cluster version its binary supports,
//     package replica/clusterversion)} every TTL/3 and watches "members/" (List, then
//     Watch from the listed revision, a new List after a failed watch). A
//     member is live while the last change of its key that this replica
//     observed is less than TTL old by this replica's own clock, so clock
//     skew between replicas does not matter ("expires" is for people). A
//     record found by the first List counts from its next heartbeat. A
//     replica counts itself live; Settled says when Members lists every
//     live member (TTL/2 after Run starts). On a store with conditional deletes
//     (etcd), a member record unchanged for 3×TTL (a replica killed before
//     deleting it) is deleted at the revision observed.
//   - Who campaigns: rendezvous (highest random weight) hashing of
//     (shard, member id) over the live members, with bounded load: shards
//     are taken in order and each goes to the highest-weighted member that
//     has fewer than ceil(Shards/members) so far, so that every replica
//     seeing the same members computes the same first-ranked member per
//     shard and none has more than its share. A replica campaigns for
//     "election/shard/NN" only while it ranks first; when it no longer
//     does (a member joined and ranks first) it resigns, and the election
//     passes the shard to the first-ranked, who is already campaigning.
//     A joiner is ranked by the others only after it has been live for
//     TTL/2+TTL/10, by when it has watched members for TTL/2 (the settle
//     time after its start) and campaigns, so a holder does not give a
//     shard up to nobody. If views differ so that nobody holds a shard
//     (no live holder recorded, this replica not holding it) for 2×TTL,
//     the second-ranked campaigns too, and keeps a shard so taken while
//     the ranked members stay the same. The election is what guarantees one
//     holder at a time; ranking only decides who asks.
//   - Records: the winner of shard NN puts "ownership/shard/NN" =
//     {"owner", "grpc_addr", "epoch", "since"}, epoch one above the stored
//     record's (and any this replica has seen), so a shard's epochs grow
//     with every hold. Every replica watches "ownership/" and keeps the
//     newest epoch per shard (Owner). A holder that resigns cleanly marks
//     its record "released" first (when it still is its record); the next
//     owner overwrites it.
//
// # Join, leave, kill -9, store outage
//
// A replica that joins settles for TTL/2, then campaigns for the shards it
// ranks first for; the others see it live, stop ranking first for those
// shards after TTL/2+TTL/10 and resign, and it takes them at once. A
// replica that stops cleanly (Run's ctx ends) gives up every shard,
// marks the records released, resigns, and deletes its member record: the
// others take its shards within one coordination pass. A replica killed
// (kill -9) stops heartbeating; the others drop it from the live members
// within TTL and campaign for its shards, which they win when its election
// holds expire (etcd session TTL; Spanner lease row TTL), about TTL after
// its last renewal. While the store is unreachable a holder keeps its
// shards until its election hold is lost (etcd: the client's lease
// keep-alive deadline passes, measured 2 to 6 s with a 2 s TTL; Spanner:
// renewals failing for 2/3 of the TTL) or, sooner, until none of its
// writes (member heartbeats every TTL/3, ownership records) has
// succeeded for 2/3 of the TTL: the store may already have given the
// shard to a replica that still reaches it, so it owns nothing (measured
// about 1.4 s with a 2 s TTL) and campaigns again when its writes succeed.
// The owner recorded stays what it was. Owners that consume Owns should
// still carry the epoch with what they publish: the store expires a hold
// no sooner than 2/3 TTL after the holder's last successful write began
// (its keep-alives run every TTL/3), and the holder checks every TTL/10,
// so a holder cut off from the store and its successor can overlap by
// about that check period.
//
// With Config.Elect nil (bbolt, one replica) the replica owns every shard
// from New on, at epoch 1, and never touches the store.
//
// # Usage
//
//	o, err := ownership.New(ownership.Config{KV: kv, ID: id, GRPCAddr: addr,
//		Elect: func(name string) (systemstore.Elector, error) { return kv.Election(name, ttl) }})
//	go o.Run(ctx)
//	for range o.Changes() { ... o.Owned() ... }
//	if o.Owns(service) { /* compute and publish its weights */ }
//	owner, epoch, ok := o.Owner(service) // where to send its load
//
// # Concurrency
//
// Every method is safe for concurrent use. Owns, OwnsShard, Owner,
// Members and Shard are atomic loads, cheap enough per service per cycle.
// Owns is true only between winning the shard's election and giving it up
// (before resigning), so across replicas it is true for at most one at a
// time, as far as the election is exclusive (etcd's is; spannertest has
// no transaction isolation). Changes has one slot: a burst of changes is
// one value; it has no end and is never closed. One goroutine (Run's
// coordinator) owns the campaigns; watches and heartbeats run beside it.
//
// # Metrics
//
// spillway_mesh_shards_owned, spillway_mesh_members and
// spillway_mesh_ownership_changes_total{change="acquired"|"released"}. A
// shard taken or given up is logged ("shard taken", "shard given up" with
// shard, epoch and reason).
package ownership

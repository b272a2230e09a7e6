// Package registrysync keeps one spillway replica in step with the others that
// share its store (etcd, Spanner): every replica holds the whole registry
// in memory, takes registrations and heartbeats, and answers DNS and xDS
// locally.
//
// A Replica does four things, all through the systemstore.KV:
//
//   - Sync: it lists "registrations/" and "settings/" and then watches them
//     from the listed revision, adopting every registration into the lease
//     manager (so a heartbeat for a lease made on another replica is taken
//     here) and dropping deleted ones, and putting the panic flag and the
//     rollout config in force. A failed watch (ErrCompacted, a lost
//     connection) is followed by a fresh List that is reconciled with what
//     is held, so a replica resyncs without a restart.
//   - Last-seen: heartbeats are not store writes. Every Flush the replica
//     writes the last-seen stamps of the leases heartbeated to it, in a
//     few shard values "lastseen/<replica id>/<shard>" (one JSON map of
//     lease id to unix nanoseconds each), so the store sees about
//     Shards/Flush writes per second per replica however many heartbeats
//     arrive; each lease's stamp is written at most once per Flush. Every
//     replica watches "lastseen/" and moves its leases' deadlines forward.
//   - Election: exactly one replica, elected through the store
//     (systemstore.Elector), may expire leases (MayExpire, the lease.Decider).
//     Elected, it still waits Grace (Flush plus the probe delay) before
//     expiring anything, so stamps that other replicas had not yet flushed
//     arrive first; the same wait follows the store's return after an
//     outage. Every lease's TTL is extended by Grace on the decider for the
//     same reason (lease.Config.ExpiryGrace). Expiry deletes the record in
//     one conditional transaction (systemstore.Store.DeleteLease), so a lease
//     expires once even when two replicas briefly both think they decide.
//   - Health: every Probe the replica reads one key. While that fails the
//     store is down: nothing expires, writes fail with
//     systemstore.ErrUnavailable (the API answers UNAVAILABLE / 503), and DNS
//     and xDS keep serving the registry as it was. Sharing (the lease
//     manager's lease.Sharer) then says that heartbeats taken here cannot
//     reach the decider: the manager renews them and answers
//     lease.ErrNotShared, so that agents move to a replica that reaches
//     the store (a replica cut alone from it would otherwise let the
//     decider expire the live leases of the agents that stay on it).
//
// # Usage
//
//	r, err := registrysync.New(registrysync.Config{KV: kv, Settings: ctl, Elector: el, ...})
//	leases, err := lease.New(lease.Config{Decider: r, ExpiryGrace: r.Grace(), ...})
//	err = r.Init(ctx, leases)  // before the registry is marked synced
//	go r.Run(ctx)
//
// The Replica is the lease manager's expiry decider and feeds it, so it is
// built first and handed the leases in Init.
//
// # Concurrency
//
// Run owns the watches, the flusher, the probe and the election, each on
// one goroutine that ends with ctx. MayExpire and Status are safe for
// concurrent use.
//
// See docs/replication.md for the consistency model and the figures.
package registrysync

// Package systemstore keeps what must survive a restart and what replicas
// share: VM registrations with their leases, the panic flag, the rollout
// config, and later issues' state.
//
// KV is a small versioned key-value interface (Put, Delete, Get, List,
// Watch). A KV may also be a BatchPutter (etcdstore is), which writes
// many records per round trip; a writer with many records type-asserts
// for it and falls back to Put. Three backends implement it: boltstore, an embedded bbolt file
// (the default, one replica, in --data-dir), etcdstore (etcd v3) and
// spannerstore (Cloud Spanner). systemstoretest holds the conformance suite
// every backend runs. Store adapts any KV to the record storage of package
// lease (a Record under "registrations/<service>/<id>") and the settings
// storage of package migration ("settings/<key>"); Memory keeps both in a
// map for tests and for a server run without a data dir.
//
// Records is a per-service setting every replica shares: one JSON record
// per service under a prefix, decoded into an in-memory view that reads
// take without a lock, loaded with Init and kept in step with Follow (the
// list-then-watch loop, also used on its own). The route rules
// ("routes/<service>", xds/routing) and the per-service config
// ("svcconfig/<service>", weights/svcconfig) are both Records.
//
// Heartbeats are not stored one by one: only Register and Deregister (or
// expiry) write a registration. With several replicas, package replica
// writes last-seen stamps in batches ("lastseen/<replica>/<shard>"), and
// an expiry deletes a record only while it holds its lease
// (Store.DeleteLease; etcd: one transaction on the mod revision). A KV
// failure other than bad input is wrapped in ErrUnavailable, which the API
// edges answer with gRPC UNAVAILABLE / HTTP 503. etcdstore and
// spannerstore also elect the expiry decider (Elector).
//
// # Usage
//
//	st, err := boltstore.OpenStore(dir) // or systemstore.NewStore(etcdKV)
//	...
//	defer st.Close()
//	leases, err := lease.New(lease.Config{Storage: st, ...})
//
// A data dir written before the KV (buckets vm-registrations/v1 and
// settings/v1) is moved into the KV layout once, on open.
//
// # Concurrency
//
// Every implementation is safe for concurrent use. boltstore.KV.Put returns only
// after the write is fsynced; concurrent Puts share one transaction and one
// fsync (bbolt's Batch), so a burst of registrations does not queue on the
// disk one by one. A Watch runs one goroutine that ends with its context
// or with Close.
//
// See docs/replication.md for the backends, their URLs and watch semantics.
package systemstore

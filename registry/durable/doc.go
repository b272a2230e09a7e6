// Package durable keeps VM registrations across restarts.
//
// A Record is one registration: the lease, its TTL and the endpoint. Bolt
// stores records in an embedded bbolt file (the default, in --data-dir);
// Memory keeps them in a map for tests and for a server run without a data
// dir. Later backends (etcd, Spanner) implement the same three methods.
//
// Heartbeats are not stored: only Register and Deregister (or expiry) write.
//
// # Concurrency
//
// Both implementations are safe for concurrent use. Bolt.Put returns only
// after the record is fsynced; concurrent Puts share one transaction and one
// fsync (bbolt's Batch), so a burst of registrations does not queue on the
// disk one by one.
package durable

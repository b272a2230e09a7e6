// Package lease is the VM source of the registry: endpoints registered under
// a lease that heartbeats keep alive.
//
// # Usage
//
// New validates a Config; Restore loads durable registrations into the store
// (each gets one TTL of grace to heartbeat again); Run expires leases until
// its context ends. Register, Heartbeat and Deregister are what the gRPC and
// HTTP APIs call.
//
// Register and Deregister write the durable Storage before they return, so a
// crash right after an acknowledged registration loses nothing; if Storage
// fails, nothing changes and the error (systemstore.ErrUnavailable) is
// returned. Heartbeat writes nothing: it moves an in-memory deadline.
//
// # Owners
//
// A lease belongs to the identity that registered it (authn.FromContext
// of Register's ctx): its Name is kept in the durable record
// (systemstore.Record.Owner), so a restart (Restore) and every other replica
// (Adopt) know it. CheckOwner tells the API edge whether a caller may
// heartbeat, deregister or report under a lease (an *OwnerError wrapping
// ErrNotOwner if not); Register refuses to replace a live lease of
// another identity on the same endpoint. Anonymous is an owner like any
// identity: a lease made anonymously (Owner "", as in records written
// before owners were kept, when every caller was anonymous) takes only
// anonymous callers, so a named identity cannot heartbeat, deregister,
// report under or replace it, and a deployment without credentials,
// where every caller is anonymous, works as before. The record format is
// unchanged. The
// re-registration check is made under the endpoint's lock on this
// replica: two replicas registering one endpoint for two identities at
// the same instant both pass it, and the later write wins, as for any
// re-registration.
//
// # Replicas
//
// With several replicas on one shared store (package replica), every
// replica's manager holds every lease: Adopt and Drop apply the store's
// watch events in revision order, AdoptBatch a full List of the store
// (one registry change per few thousand records), Seen applies other replicas' last-seen
// stamps (deadlines only move forward), LocalStamps is what this replica
// publishes. Only the replica whose Config.Decider allows it expires
// leases, with every TTL extended by Config.ExpiryGrace (how late another
// replica's stamp may arrive); the mass-expiry guard then counts the
// whole fleet. An expiry deletes the record only while it holds its lease,
// so it happens once. With no Decider (one replica, bbolt) the manager
// expires on its own, as it always did. Config.Sharer tells whether a
// heartbeat taken here reaches the decider (this replica reaches the
// store); while it does not, Heartbeat renews the lease but returns
// ErrNotShared, which the API answers UNAVAILABLE, so the agent moves.
//
// # Mass-expiry guard
//
// A lease is at risk when less than half of its TTL is left, that is when it
// has missed its heartbeats for half a TTL; a client heartbeating at least
// twice per TTL is never at risk. Every tick, the manager counts the leases at
// risk. When they are at least GuardMinCount and more than GuardShare of all
// leases, it takes that for a partition between the VMs and the registry,
// not for real deaths: it expires nothing, sets the guard gauge and logs. It
// resumes as soon as heartbeats bring the count back under the threshold.
// Because the count includes leases that are past their deadline, a
// partition trips the guard before the first of its leases can expire.
//
// # Concurrency
//
// All methods are safe for concurrent use. Heartbeat takes a read lock and
// two atomic stores. One goroutine (Run) expires leases.
package lease

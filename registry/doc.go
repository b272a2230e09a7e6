// Package registry holds spillway's model of services and endpoints and the
// in-memory Store that every other part reads.
//
// # Usage
//
// Sources (VM heartbeats, Kubernetes, the static file) write with
// Store.Apply, one atomic batch of Upsert/Remove/Declare/Forget ops at a time.
// Readers (the DNS resolver, the xDS server, the admin APIs) take a Snapshot,
// which is immutable, and subscribe to changes with Store.Subscribe.
//
// Names are DNS names under the domain the store is made with
// (NewStoreWith, StoreConfig.Domain): Apply refuses, with a *FieldError
// naming the field, an endpoint whose SRV target <id>.<service>.<domain>
// or SRV name would pass 255 octets on the wire, and a service "<id>.<s>"
// next to endpoint <id> of service <s>, whichever comes second (the error
// also wraps ErrNameTaken). Edges map both to InvalidArgument / HTTP 400.
//
// A service that is unknown (Snapshot.Service returns ok=false) is different
// from a known service with zero endpoints: the first is NXDOMAIN in DNS, the
// second NODATA. Until Store.MarkSynced is called, readers must not treat
// "unknown" as final.
//
// Readers serve Service.Serving, not Service.Endpoints: when two endpoints
// of a service claim one address and port, the store serves one of them,
// by a documented precedence (serving.go), so DNS and xDS agree and never
// list an address twice.
//
// # Concurrency
//
// All Store and Snapshot methods are safe for concurrent use. Snapshot reads
// take no lock and never block writers; writers are serialised and publish a
// new Snapshot with one atomic pointer swap, copying only the shard and the
// service they change. Endpoints reachable from a Snapshot are shared and
// must not be modified; endpoints with the same port list or locality
// names share one copy of them (intern.go), so a caller that wants to
// change one works on Endpoint.Clone, which copies the port list.
package registry

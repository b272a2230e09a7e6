// Package heartbeat keeps a VM endpoint registered in spillway: it registers
// the endpoint under a lease, renews the lease over the Registry's
// HeartbeatStream RPC and deregisters the endpoint when it stops. It is the
// client behind `spillwayctl agent`.
//
// # Usage
//
// Dial the registry (the server's gRPC port, 127.0.0.1:18000 by default),
// build an Agent with New, and Run it for as long as the endpoint serves:
//
//	conn, err := grpc.NewClient("127.0.0.1:18000",
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//	if err != nil {
//		// handle error
//	}
//	defer conn.Close()
//	a, err := heartbeat.New(heartbeat.Config{
//		Conn:    conn,
//		Service: "payments",
//		Endpoint: &registryv1.Endpoint{
//			Address:  "10.0.0.7",
//			Ports:    []*registryv1.Port{{Name: "grpc", Number: 8080}},
//			Locality: &registryv1.Locality{Region: "eu-west1", Zone: "eu-west1-b"},
//		},
//	})
//	if err != nil {
//		// a Config field is invalid; the error names it
//	}
//	err = a.Run(ctx) // blocks until ctx ends, then deregisters
//
// To fail over between replicas, give the addresses instead of a
// connection; the Agent dials them itself (DialOptions, plaintext by
// default; clientcreds.Config{CA, Cert, Key, TokenFile}.DialOptions() for
// TLS/mTLS and a bearer token):
//
//	a, err := heartbeat.New(heartbeat.Config{
//		Servers:  []string{"10.0.0.1:18000", "10.0.0.2:18000", "spillway.internal:18000"},
//		Service:  "payments",
//		Endpoint: ep,
//	})
//
// An entry may also be a gRPC target: dns:///host:port (the same as
// host:port), dns://DNS-SERVER/host:port (resolved with that DNS server),
// passthrough:///host:port, unix:PATH, unix:///ABSOLUTE-PATH or
// unix-abstract:NAME; Config.Servers says what each stands for. Schemes the
// Agent cannot use (xds, ipv4, ipv6, any other) are refused by New and
// ParseServers.
//
// Run registers (retrying while the server is unreachable), then sends a
// heartbeat every Config.Interval, by default a third of the TTL the server
// granted, so that two heartbeats can be lost before the lease expires.
//
// # Failover
//
// With Config.Servers the Agent uses one server at a time (Status().Active),
// picked at random at the start so that a fleet spreads over the replicas.
// A DNS name in the list (host:port or dns:) stands for every address it
// resolves to, and is resolved again at every failover (a name that fails
// to resolve keeps its last addresses); a passthrough, unix or
// unix-abstract entry is one address, its target, which grpc-go dials (for
// passthrough:///name:port the dialer resolves name at each connection,
// so the Agent does not move between that name's addresses). An address
// a name resolved to is dialed under that name (the connection's
// authority), so TLS checks the server's certificate against the name,
// as any gRPC client dialing it would. The entries'
// addresses make one list, in order, without repeats. The Agent moves to
// the next address of the list when
// the active one fails: an RPC error, a broken stream, or no answer within
// the attempt timeout (at most half the heartbeat interval). Between moves
// it waits a random stagger of up to 100 ms; once every address failed in
// a row, a capped exponential backoff with jitter, capped at half the
// interval while it holds a lease. So a heartbeat is tried at least once
// per interval whatever the servers do, and one dead or hung server costs
// at most half an interval: it cannot eat the TTL. The Agent never stops
// trying because servers are down. Status().Failovers counts the moves;
// Collector exposes the active server and the count as metrics.
//
// The lease survives a move. What happens on the new server, in order:
//
//  1. The Agent heartbeats the lease it holds. Replicas that share a store
//     know it: same lease, no registration, no gap in DNS or xDS.
//  2. Only when the server answers that the lease is unknown (it expired,
//     an operator removed it, or the server does not share the first one's
//     store) does the Agent register again, with the same endpoint id (the
//     one configured, or else the one the server assigned at the first
//     registration) and the same metadata, so the endpoint's DNS and xDS
//     identity does not change; it carries on with the new lease.
//
// With Config.Conn there is one server: when the stream breaks (a server
// restart, a network blip), Run reconnects over the connection with capped
// exponential backoff and jitter, with the same precedence: it keeps the
// lease (the server restores leases from disk after a restart and gives
// each one a full TTL, so a restart does not churn registrations) and
// registers again only if the server then says the lease is unknown.
//
// When ctx ends, Run deregisters the endpoint with a fresh context bounded
// by DeregisterTimeout (trying the next server if the active one is down),
// so traffic stops at once instead of one TTL later, and returns nil. The
// Agent does not own Config.Conn: close it after Run returns.
//
// # Concurrency
//
// Run must be called at most once; it does all its work on its own
// goroutine plus one that receives from the heartbeat stream, and both have
// returned when Run returns, as have the connections it dialed for
// Config.Servers. LeaseID, Status and Registered are safe to call from any
// goroutine at any time, before, during or after Run.
//
// # Errors
//
// New returns an error naming the Config field that is invalid (Conn or
// Servers, e.g. `Servers[1] "b": missing port` or `Servers[0] "xds:///x":
// scheme xds is not supported here`, Service, Endpoint, TTL or Interval).
//
// Run returns nil when its context ends, whether or not it ever registered.
// Otherwise it returns only when the server refuses a registration for good,
// with the server's gRPC status wrapped (status.Code and errors.As work on
// it):
//
//   - codes.InvalidArgument: the service, the endpoint or the TTL is invalid;
//     the message names the field, e.g. "endpoint.address: ...".
//   - codes.AlreadyExists: the endpoint id belongs to another source (a
//     Kubernetes or static endpoint with the same id).
//   - codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented,
//     codes.FailedPrecondition, codes.OutOfRange: likewise not retried.
//
// It also returns when the server ends the heartbeat stream with
// codes.PermissionDenied or codes.Unauthenticated (the policy no longer
// lets this caller heartbeat, or the lease belongs to another identity):
// the error names the stream step and wraps the status. Run then tries
// to deregister as on any return; where that is refused as well, the lease
// expires within its TTL.
//
// Every other failure (Unavailable, DeadlineExceeded, Internal, a broken
// stream, no answer) is logged and retried, on the next server, until ctx
// ends. A failed deregistration is
// logged, not returned: the lease then expires on its own.
package heartbeat

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
// Run registers (retrying while the server is unreachable), then sends a
// heartbeat every Config.Interval, by default a third of the TTL the server
// granted, so that two heartbeats can be lost before the lease expires.
// When a response says the lease is unknown (it expired, or an operator
// removed it), Run registers again and carries on with the new lease. When
// the stream breaks (a server restart, a network blip), Run reconnects with
// capped exponential backoff and jitter and keeps the same lease: the server
// restores leases from disk after a restart and gives each one a full TTL,
// so a restart does not churn registrations. It registers again only if the
// server then says the lease is unknown.
//
// When ctx ends, Run deregisters the endpoint with a fresh context bounded by
// DeregisterTimeout, so traffic stops at once instead of one TTL later, and
// returns nil. The Agent does not own the connection: close it after Run
// returns.
//
// # Concurrency
//
// Run must be called at most once; it does all its work on its own
// goroutine plus one that receives from the heartbeat stream, and both have
// returned when Run returns. LeaseID and Registered are safe to call from any
// goroutine at any time, before, during or after Run.
//
// # Errors
//
// New returns an error naming the Config field that is invalid (Conn,
// Service, Endpoint, TTL or Interval).
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
// Every other failure (Unavailable, DeadlineExceeded, Internal, a broken
// stream) is logged and retried until ctx ends. A failed deregistration is
// logged, not returned: the lease then expires on its own.
package heartbeat

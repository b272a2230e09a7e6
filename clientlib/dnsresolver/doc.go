// Package dnsresolver is a gRPC name resolver that reads a service's
// endpoints from SRV records, as spillway's DNS serves them: a target
// spillway-dns:///payments resolves _grpc._tcp.payments.<domain> and gives
// the channel one endpoint per SRV record, at the addresses of its glue
// records (or of an A/AAAA lookup of the target when the glue is missing).
//
// # Usage
//
//	b, err := dnsresolver.NewBuilder(dnsresolver.Config{Server: "127.0.0.1:8053"})
//	if err != nil {
//		// a Config field is invalid; the error names it
//	}
//	conn, err := grpc.NewClient("spillway-dns:///payments",
//		grpc.WithResolvers(b),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// The builder is not registered globally: pass it with grpc.WithResolvers.
//
// # Resolution
//
// A resolver looks the name up when it is built, then again when the
// smallest TTL of the answer runs out (never sooner than Config.MinTTL,
// never later than Config.MaxTTL), and when gRPC asks it to (ResolveNow,
// after a connection fails; at most once per MinTTL). A failed lookup, or
// an answer without records, keeps the addresses the channel already has
// and is retried with capped exponential backoff; only before the first
// good answer does the resolver report the error to the channel. The
// backoff starts at MinTTL and doubles up to 10 s.
//
// Each endpoint carries its SRV weight, set with grpc-go's
// experimental/balancer/weight package. gRPC's round_robin ignores it;
// spillway's weighted balancer (package clientlib/wrr, "spillway.wrr")
// honours it, so a service config of
// {"loadBalancingConfig":[{"spillway.wrr":{}},{"round_robin":{}}]} sends
// each endpoint its SRV share where that balancer is linked in, and falls
// back to round_robin where it is not.
//
// # Concurrency
//
// A Builder may be shared by many channels. Each resolver does its lookups
// on one goroutine of its own, which has returned when Close returns.
package dnsresolver

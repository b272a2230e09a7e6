// Package propagate carries a configured set of request headers, such as
// a traffic class (x-traffic-class: synthetic), from an incoming request
// to the outgoing RPCs it causes, so that one tag at the edge of a call
// chain reaches every hop, and every hop's route rules (see
// docs/routing.md) can act on it. gRPC does not do this by itself: the
// incoming metadata of a handler is not sent on the calls it makes.
//
// # Usage
//
// Build one Propagator per process with the keys to carry, and install its
// server interceptors on the gRPC server and its client interceptors on
// the channels the handlers call through:
//
//	p, err := propagate.New(propagate.Config{Keys: []string{"x-traffic-class"}})
//	if err != nil {
//		// a key is invalid; the error names it: "propagate: keys[0]: ..."
//	}
//	srv := grpc.NewServer(p.ServerOptions()...)
//	conn, err := clientlib.Dial(ctx, "payments",
//		clientlib.WithService("checkout"),
//		clientlib.WithPropagation("x-traffic-class")) // or WithDialOptions(p.DialOptions()...)
//
// A handler then passes its own ctx to the calls it makes, as it should
// anyway; nothing else changes in the service's code.
//
// At an HTTP edge, wrap the handler with p.HTTP to lift the headers from
// the request; to call an HTTP service, p.SetHeaders copies them onto the
// outgoing request. At an edge that is neither (a queue consumer, a batch
// job), With(ctx, "x-traffic-class", "synthetic") tags the context, and
// Without removes a tag.
//
// # Precedence
//
// An outgoing RPC gets, for each key of the client Propagator:
//
//  1. what the caller put in the outgoing metadata itself
//     (metadata.AppendToOutgoingContext): an explicit value wins, and the
//     carried one is not added (grpc-go's route matchers would otherwise
//     see both, joined by a comma);
//  2. else what the context carries: the last of the incoming request's
//     value (server interceptor or HTTP middleware) and With/Without;
//  3. else nothing.
//
// # Bounds
//
// Keys are validated by ValidateKey (lower-case, no grpc- prefix, no -bin
// suffix, no transport, hop-by-hop or credential header), at most MaxKeys.
// A key whose incoming values are out of bounds (more than MaxValues
// values, one longer than MaxValueLen bytes, or bytes outside printable
// ASCII, which gRPC refuses to send) is not carried at all: the request is
// served, and its calls go untagged, to the default route, rather than
// with a truncated tag that a prefix rule might match. A Debug log line
// (Config.Logger) names the key, never the value.
//
// # Concurrency
//
// A Propagator is immutable and safe for concurrent use; the interceptors
// hold no state. A context's carried values never change; With and
// Without return a new context.
package propagate

// Package serverinfo lets a client that reached spillway's gRPC port learn
// where the same server's HTTP API is, so that spillwayctl needs one
// address (--server) for every API instead of a second --http.
//
// It is one tiny gRPC service, spillway.info.v1.ServerInfo with one method
// Get (google.protobuf.Empty → google.protobuf.Struct), described by hand:
// the messages are well-known types, so no generated code is needed. The
// answer holds the HTTP listener's address as bound ("http_addr", e.g.
// "[::]:18080") and whether it speaks TLS ("http_tls"); a client ignores
// fields it does not know, so more can be added.
//
// # Usage
//
// Server side, once the HTTP listener is bound:
//
//	serverinfo.Register(grpcSrv, serverinfo.Info{HTTPAddr: httpLis.Addr().String(), TLS: tlsOn})
//
// Client side, over any connection to the gRPC port:
//
//	info, err := serverinfo.Lookup(ctx, conn) // errors.Is(err, serverinfo.ErrNotServed): an older server
//	addr, err := info.HTTPAddrFor(target)     // target: the address conn dialled
//
// # Security
//
// Get reveals only an address, so it needs no permission: it checks no
// policy itself. It is an ordinary unary method, so the server's
// interceptors (admission, authentication) run on it like on any other:
// a call with an unknown token still fails Unauthenticated.
//
// # Concurrency
//
// Register is called once per server, before it serves. The registered
// service, Lookup and Info's methods are safe for concurrent use.
package serverinfo

// Package admin serves the spillway.admin.v1 Admin API: the load that
// clients report over LRS and the graph of who calls whom, over gRPC and as
// JSON over HTTP:
//
//	GET /v1/load?service=S   -> LoadResponse
//	GET /v1/graph            -> GraphResponse
//
// JSON uses the proto field names (snake_case) and shows empty fields.
//
// # Usage
//
//	a, err := admin.New(admin.Config{Loads: xdsSrv.Loads(), Subscriptions: xdsSrv, Logger: log})
//	a.RegisterGRPC(grpcSrv)
//	mux.Handle("/v1/load", a.Handler())
//	mux.Handle("/v1/graph", a.Handler())
//
// Load answers one service's flows: one row per client service, client
// zone and upstream locality, with the rates of the fresh LRS reports and
// the totals since the server started. A service nobody reports load for
// gets an empty list; a name that is not DNS labels joined by dots is
// InvalidArgument / HTTP 400 naming the field "service" (in the message and
// in the "field" member of the JSON error).
//
// Graph joins what the connected ADS streams subscribe to (streams, nodes
// and client zones per client service and service) with the fresh load of
// the same pair. A pair with only stale reports and no stream is left out.
//
// # Concurrency
//
// An API is read-only after New and safe for concurrent use; it reads its
// sources on every request and keeps no state of its own.
package admin

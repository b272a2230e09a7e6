// Package ui is spillway's web page: a read-only view of every HTTP JSON
// API (services, one service's endpoints, measured and planned zone
// flows, the explain text, the dependency graph, the migration state)
// and the one write the page makes, the panic flag (POST /v1/panic with
// the admin token, after a confirmation). The assets are embedded; the
// page loads nothing from the network but the server's own JSON APIs.
// docs/ui.md describes each view, the API it reads and the flow-matrix
// formula.
//
// # Usage
//
//	mux.Handle(ui.Prefix, ui.Handler())
//	mux.Handle("GET /{$}", ui.Redirect())
//
// # Concurrency
//
// The handlers keep no state and are safe for concurrent use.
package ui

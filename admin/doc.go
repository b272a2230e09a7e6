// Package admin serves the spillway.admin.v1 Admin API: the load that
// clients report over LRS, the graph of who calls whom and the zone-aware
// weights with their explanation, over gRPC and as JSON over HTTP:
//
//	GET /v1/load?service=S     -> LoadResponse
//	GET /v1/graph              -> GraphResponse
//	GET /v1/weights?service=S  -> WeightsResponse
//	GET /v1/summary?query=&name=&offset=&limit= -> Summary (plain JSON)
//
// JSON uses the proto field names (snake_case) and shows empty fields.
//
// # Usage
//
//	a, err := admin.New(admin.Config{Loads: xdsSrv.Loads(), Subscriptions: xdsSrv, Plans: planner, Logger: log,
//		Mesh: admin.JoinMesh(owners, merged)}) // optional: *ownership.Owners, *exchange.Merged
//	a.RegisterGRPC(grpcSrv)
//	for _, p := range admin.Paths { // /v1/load, /v1/graph, /v1/weights, /v1/summary
//		mux.Handle(p, a.Handler())
//	}
//
// Load answers one service's flows: one row per client service, client
// zone and upstream locality, with the rates of the fresh LRS reports and
// the totals since the flow was first reported (a flow not reported for 5
// min is forgotten). Client zones beyond the server's cap (xds
// Config.MaxZones) show as "other". A service nobody reports load for
// gets an empty list; a name that is not DNS labels joined by dots is
// InvalidArgument / HTTP 400 naming the field "service" (in the message and
// in the "field" member of the JSON error).
//
// With replicas sharing load (Config.Mesh set), the replica that owns the
// service answers with the mesh-wide table instead: the flows every
// replica summarised to it, summed per client zone and upstream zone
// (client_service "", totals 0), merged true and merged_from listing the
// replicas whose fresh summaries it sums with their ages. Any other
// replica answers with the load reported to it alone and owner_elsewhere
// true; owner names the owner when a published plan is in force. Without
// Config.Mesh (one replica) the answer is the local table, as before.
//
// Graph joins what the connected ADS streams subscribe to (streams, nodes
// and client zones, "other" beyond the cap, per client service and service) with the fresh load of
// the same pair. A pair with only stale reports and no stream is left out.
//
// Weights shows one service's zone-aware weights as of the last weights
// cycle (package zoneaware): the service-wide demand source, fallback (key,
// text, whether it fails open) and data age; the capacity model of every
// zone (healthy and slow-starting endpoints, the queue and error factors,
// adjusted capacity and its share, demand and estimated load); and per
// client zone the weights, local share, spill, demand, fallback, hysteresis
// and the one-line explanation of zoneaware.Explain; and its origin
// (weights.Plan): source "mesh" (published by the owner, with the
// contributing replicas and the age of each one's load, and when it was
// published) or "local" (this replica's own view, with the reason the
// published plan was not used). A service without
// weights (unknown, zone-aware weights off, or before the first cycle) is
// NotFound / HTTP 404; a bad name is InvalidArgument / HTTP 400 naming
// "service", as for Load.
//
// With Config.Regions (*xds.Server), Weights also carries regions: the
// service's regional redirects and exclusions as set (each marked active
// or expired), the regions with a healthy endpoint, and per client region
// (and "" for clients of no region) the regions by priority and what the
// rules did: redirect applied, or no_endpoints (its target has no healthy
// endpoint, so it does not apply), the regions excluded, and fail_open
// (the exclusions would leave nothing, so none applies). Unset for a
// service with a single region and no rule.
//
// With Config.Routes (*routing.Store), Weights also carries route_rules:
// the service's route rules in order, each with its targets and the
// targets missing now (a broken rule is left out of the
// RouteConfiguration, so its RPCs take the default route), and the
// default target. Unset for a service without rules.
//
// Summary (Config.Registry set, else HTTP 501) is the web page's services
// list (package ui, docs/ui.md): one page of the registry's services sorted
// by name, each with its endpoint counts by health and by zone, its
// sources, the distinct xDS nodes and the streams whose ADS subscription
// names it, and whether Weights has weights for it; plus the total
// matching, the registry version and the fleet's client counts (client
// services with an ADS stream, their nodes and streams, and the
// registry's services without one, which are on DNS if they call
// anything: a DNS query names no client, so the server cannot count DNS
// clients directly). query keeps names containing it (case-insensitive),
// name only that service; offset (default 0) and limit (1..1000, default
// 100) page. A bad, unknown or repeated parameter is HTTP 400 naming it.
// Only the page's services are read in full, so a page costs one pass over
// the names and the streams (BenchmarkSummary: ~6 ms at 5,000 services).
// It asks the Authorizer for "read_registry" on "", as GET /v1/services.
//
// With a Config.Authorizer, every read asks it for "read_load" (the
// service for Load and Weights, "" for Graph); a denial is
// PermissionDenied / HTTP 403 with its message.
//
// # Concurrency
//
// An API is read-only after New and safe for concurrent use; it reads its
// sources on every request and keeps no state of its own.
package admin

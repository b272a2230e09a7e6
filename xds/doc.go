// Package xds is spillway's control plane for proxyless gRPC and Envoy:
// aggregated discovery (ADS, state of the world and delta) and load
// reporting (LRS) on the server's gRPC port.
//
// # Resources
//
// For a service S: Listener S (an API listener whose HttpConnectionManager
// takes RouteConfiguration S over ADS, router filter last),
// RouteConfiguration S (one virtual host, every path to cluster S; with
// route rules, Config.Routes and package routing, the rules in order,
// then the default route: see docs/routing.md), Cluster
// S (EDS over ADS, load reports to this server; lb_policy ROUND_ROBIN and a
// load_balancing_policy list: Envoy's round_robin first, then wrr_locality
// over spillway.wrr (clientlib/wrr, which honours endpoint weights) or
// round_robin for gRPC clients without it; Envoy is told to weigh
// localities, in round_robin's locality_lb_config and in
// common_lb_config) and
// ClusterLoadAssignment S (one LocalityLbEndpoints per region/zone/sub-zone
// holding at least one healthy endpoint, health status per endpoint, the
// endpoint's id as its hostname unless Config.OmitHostnames, endpoint
// weights >= 1 (the plan's per-endpoint PID weights when it has
// them, weights.Plan.Endpoints, else the registry weights), locality
// weights from the plan or Config.Weights, by default the count of healthy
// endpoints (with PID alone, the sum of the healthy endpoints' weights;
// both kept within gRPC's uint32 sums); one endpoint per address and port, as
// registry.Service.Serving decides; priorities by the client's
// node.locality.region when the service spans regions or has region rules:
// Config.RegionPreference, Config.RegionRules, package weights/regions,
// docs/routing.md; the EDS variant is per zone variant and priorities).
// Every resource is validated before it
// is sent, against its proto constraints (those of the typed configs
// inside its Anys too) and against each rule grpc-go's parsers enforce,
// plus spillway's own rules for values grpc-go accepts and then misreads
// or fails on (check.go); an invalid one is never pushed, it is logged
// and counted (spillway_xds_invalid_resources_total), and clients keep the
// last valid one.
//
// # Resilience policies
//
// A service's resilience policy (Config.Policies, package
// weights/svcconfig's Resilience; gRFCs A50, A32, A31, A44, A33, A42,
// A48, A58) goes out in its resources; a service without one gets the
// resources above, byte for byte. Cluster S: outlier_detection (both
// ejection kinds written, 0 when off: an unset enforcing_success_rate
// would turn success-rate ejection on; the standard deviation factor in
// thousandths; Envoy's consecutive 5xx and gateway-failure ejections off,
// so that Envoy and gRPC eject alike), circuit_breakers (one DEFAULT
// threshold, max_requests), and the endpoint-picking policy in
// load_balancing_policy: ring_hash as the only entry (typed, XX_HASH, the
// ring sizes, locality weighted for Envoy), which Envoy and gRPC both
// take; least_request as Envoy's first entry (a TypedStruct, locality
// weighted) and, for gRPC, wrr_locality over least_request then
// round_robin; client_wrr as wrr_locality over
// client_side_weighted_round_robin then round_robin for gRPC, Envoy
// keeping its round_robin. lb_policy and common_lb_config are unchanged.
// RouteConfiguration S: on every RouteAction (rule, warm-up and default
// routes alike) the retry policy (retry_on the codes joined by commas,
// num_retries, retry_back_off), max_stream_duration and
// grpc_timeout_header_max both at the timeout, and for ring hash
// hash_policy [{header, terminal}]. A fault is a
// typed_per_filter_config["envoy.filters.http.fault"] HTTPFault (fixed
// delay, gRPC status, chances in millionths, max_active_faults): on the
// virtual host, or, when it is limited to RPCs with a header (grpc-go
// ignores HTTPFault.headers), on a copy of each route that also matches
// the header's presence, placed before it; Listener S then has the fault
// filter, with an empty config that injects nothing, before the router.
// Envoy takes only Clusters and endpoints from spillway (its listeners
// and routes are static: deploy/envoy), so it gets the Cluster's parts
// alone. Listener S, RouteConfiguration S and Cluster S are rebuilt when
// the policy's content changes (a fingerprint beside the cached ones),
// and Run pushes them to the streams of the services whose policy
// changed.
//
// # Subsets
//
// A plan with subsets (weights.Plan.Subsets, for a service whose config
// sets subset_mode) gives each stream only its slot's endpoints. The hub
// numbers the streams of each service per client zone label 0..n-1
// (SubsetSlots, which the planner reads); a stream keeps its slot while
// it wants the service, and when one leaves the group's last stream
// takes its slot and is pushed that slot's subset. A stream newer than
// the plan gets the subset of the slot its number wraps to, or every
// endpoint in a group the plan does not know yet. Each slot's
// ClusterLoadAssignment is encoded once per plan generation and shared
// by the streams that hold it; the locality weights are the zone plan's,
// over the subset's endpoints.
//
// # Streams
//
// Each stream has its own subscriptions and, per client zone, its own
// endpoint content. A stream's requests are read by its gRPC handler
// goroutine, the only goroutine an idle stream keeps; its responses, the
// answers to its requests and the pushes of store changes alike, are sent
// by a few fan-out workers (2×GOMAXPROCS, at least 4) that take the woken
// streams first in, first out, so that at ten thousand streams none waits
// behind streams woken after it, and yield after each push so that the
// connections' writers write in turn; streams woken only by the periodic
// Config.Resync wait behind those woken by a change or a request. A store
// change marks the service on the streams subscribed to it (and every
// Config.Resync, everything) and queues each stream once. Each service is
// coalesced on its own: a change to a service that has been quiet is
// marked at once; the changes to it that follow are gathered for
// Config.Debounce, and while it keeps changing each window doubles up to
// Config.MaxDelay, so a burst of a thousand changes to a service in a
// second reaches its streams in a handful of pushes, a service that keeps
// changing costs each stream at most one push per MaxDelay, and no change
// waits longer than MaxDelay. One service's burst never holds back
// another's change: in a region's steady churn a service that changes
// less often than every MaxDelay is pushed at once. A stream with a
// wildcard subscription, which a change to any service wakes, gets the
// registry's changes through one window for the whole store instead, the
// same doubling from Debounce to MaxDelay, so churn costs it a handful of
// pushes a second. A stream that names several services gets a push per
// dispatch that names one of them, at most one per MaxDelay for each
// service that keeps changing; those that arrive while its push is
// queued or running go out together in its next. A slow or stuck stream never
// blocks the others, and holds at most one pending change set, never a
// queue of responses: a worker whose Send has blocked for 100 ms is
// replaced at the next look of a watchdog that looks every 50 ms while
// workers run (no timer is armed per push), and the stuck Send keeps only
// its own goroutine. A response whose content equals the last one sent on
// the stream, or the last one the stream rejected, is not sent.
//
// With a Config.Authorizer, the first request of every ADS and LRS stream
// (and the first carrying a node, if earlier ones did not) asks it
// whether the caller may be an xDS client of node.cluster (action "xds");
// an LRS stream that names another cluster later asks again. A denial
// ends the stream with PermissionDenied and the Authorizer's message
// ("permission denied: IDENTITY may not xds CLUSTER") before anything is
// sent, subscribed or counted.
//
// # Bounds
//
// Zone names from node.locality, node ids and clusters, and the cluster
// names and localities of LRS reports are chosen by clients; none of them
// makes memory or metric series grow without bound. Client zones share a
// set of Config.MaxZones slots (default 64): the first zones seen keep
// their name as the zone label of spillway_xds_streams and
// spillway_lrs_requests_total, in the load table (package load) and as a
// client zone of the zone-aware planner (package weights, which asks Has);
// later ones are "other" ("none" for no zone, "invalid" for a zone that is
// not a DNS label). A zone frees its slot, and its series, 5 min after its
// last stream ended and its last report. The planner gives a route, hence
// an EDS variant, only to client zones where the service has endpoints or
// that hold a slot; the demand of the others counts as zoneless and they
// get the zoneless route, so a service has at most endpoint zones +
// MaxZones + 1 variants. A load report for a cluster that is not a
// service, or for a locality where the service has no endpoint, is not
// recorded (spillway_lrs_dropped_total); an LRS stream's samples go when
// it ends, and a flow's totals 5 min after its last report (load.Table's
// bounds).
//
// # Zone-aware weights
//
// The server does not compute weights: it reads each service's plan
// through Config.Plans (a *weights.Planner in cmd/spillway) and turns the
// route of the client's zone into locality weights; a service with no
// plan gets Config.Weights. The planner reads the load table (Loads), the
// connected streams (ClientCounts) and the zone set (Has), and calls
// Dispatch with the services whose plan changed.
// Node ids are kept only per connected stream, and logged. The encoded
// resources of a service go at the first sweep after it leaves the
// registry (every 10 s, or every Config.Resync when that is shorter), as
// do idle client zones' slots and stale load-table entries.
//
// # Cost
//
// A resource is marshaled once per content (per service version and zone
// variant; EDS from pooled messages, written field by field (appendCLA)
// into one buffer with its response field and Any, BenchmarkBuildEDS;
// the zone variants of a service version after the first copy its
// encoded endpoints and write only their own locality fields, edsShared,
// BenchmarkEDSVariants), and shared by every stream that
// gets it; a state-of-the-world response is those bytes plus a few bytes of
// framing per stream (one allocation for a one-resource response), written
// by the codec (Codec) without copying them into a new message. Spillway's
// own work per stream update is about 1 µs (BenchmarkStreamUpdate); the
// rest is grpc-go's transport and the kernel (docs/architecture.md).
//
// # Protocol
//
// Versions are content hashes; nonces count per stream. A request carrying
// an older nonce is ignored. A NACK is logged with the client's
// error_detail and counted by type and service, and the rejected version is
// not sent again. State of the world: an LDS or CDS request naming nothing
// (or "*") is a wildcard; a resource that does not exist is left out, which
// for LDS and CDS tells the client it does not exist. Delta: only changed
// resources are sent, removals and names that do not exist go in
// removed_resources, and initial_resource_versions spare a reconnecting
// client what it already holds. The first request for a type is always
// answered, with an empty response if nothing is to be sent: Envoy
// finishes starting only once each type was answered.
package xds

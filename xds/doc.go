// Package xds is spillway's control plane for proxyless gRPC and Envoy:
// aggregated discovery (ADS, state of the world and delta) and load
// reporting (LRS) on the server's gRPC port.
//
// # Resources
//
// For a service S: Listener S (an API listener whose HttpConnectionManager
// takes RouteConfiguration S over ADS, router filter last),
// RouteConfiguration S (one virtual host, every path to cluster S), Cluster
// S (EDS over ADS, load reports to this server; lb_policy ROUND_ROBIN and a
// load_balancing_policy list: Envoy's round_robin first, then wrr_locality
// over spillway.wrr (clientlib/wrr, which honours endpoint weights) or
// round_robin for gRPC clients without it; Envoy is told to weigh
// localities, in round_robin's locality_lb_config and in
// common_lb_config) and
// ClusterLoadAssignment S (one LocalityLbEndpoints per region/zone/sub-zone
// holding at least one healthy endpoint, health status per endpoint,
// endpoint weights >= 1, locality weights from Config.Weights, by default
// the count of healthy endpoints; one endpoint per address and port, as
// registry.Service.Serving decides). Every resource is validated before it
// is sent, against its proto constraints and against each rule grpc-go's
// parsers enforce (check.go); an invalid one is never pushed, it is logged
// and counted (spillway_xds_invalid_resources_total), and clients keep the
// last valid one.
//
// # Streams
//
// Each stream has its own subscriptions and, per client zone, its own
// endpoint content. A stream's requests are read by one goroutine; another
// owns its state and every Send. A store change marks the service on the
// streams subscribed to it (after Config.Debounce, and every Config.Resync
// for everything) through a one-slot channel: a slow or stuck stream never
// blocks the others, and holds at most one pending change set, never a
// queue of responses. A response whose content equals the last one sent on
// the stream, or the last one the stream rejected, is not sent.
//
// # Cost
//
// A resource is marshaled once per content (per service version and zone
// variant) and shared by every stream that gets it; a state-of-the-world
// response is those bytes plus a few bytes of framing per stream, written by
// the codec (Codec) without copying them into a new message.
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

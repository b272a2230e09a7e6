// Package wrr is a grpc-go load balancer that honours EDS endpoint weights:
// grpc-go's round_robin ignores them, so endpoints weighted 1:2:4 get equal
// traffic. This balancer, registered as "spillway.wrr" (Name), sends each
// READY endpoint its share of picks by earliest-deadline-first (EDF)
// scheduling over the endpoints' weights.
//
// # Usage
//
// Import the package for its side effect, in the main package of a client
// that dials xds:///<service>:
//
//	import _ "github.com/spillway/spillway/clientlib/wrr"
//
// Nothing else changes. spillway's Cluster resources name the balancer in
// load_balancing_policy as the endpoint-picking policy inside wrr_locality
// (gRFC A52): a client that has it registered picks a locality by locality
// weight, as before, then an endpoint inside it by endpoint weight. A client
// without it skips that entry and uses round_robin, and Envoy uses its own
// round_robin, which is weighted already.
//
// The balancer also works without xDS, through a service config, with
// weights set by a resolver with package
// google.golang.org/grpc/experimental/balancer/weight:
//
//	grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"spillway.wrr": {}}]}`)
//
// # Behaviour
//
// The balancer keeps one pick_first child, so one connection, per endpoint
// (grpc-go's endpointsharding, as round_robin does) and picks only among
// READY endpoints; while none is READY the channel reports CONNECTING, IDLE
// or TRANSIENT_FAILURE as round_robin would. An endpoint's weight is the one
// grpc-go's xDS cluster resolver attaches (the EDS weight normalised within
// its locality, times the locality's share); a missing or zero weight
// counts as 1. Over n picks among endpoints of weights w_i summing to W,
// endpoint i gets n·w_i/W picks to within 2 + 2·k·w_i/W (k endpoints),
// however long the run and however large the weights: deadlines are exact
// integer ratios, not floats. Each new picker (one per change of endpoints,
// weights or connectivity) starts every endpoint at a random phase of its
// period, so clients do not all send their first RPC to the same endpoint.
//
// The configuration is a JSON object with no fields yet; fields it does not
// know are ignored, so that a newer control plane never makes this client
// NACK a Cluster.
//
// # Concurrency
//
// Registration happens in init and is process-wide, like every grpc-go
// balancer. grpc-go serializes calls into the balancer; the picker is safe
// for concurrent Pick calls and holds a mutex only for the O(log k)
// scheduling step.
package wrr

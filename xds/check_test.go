package xds

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	v3xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	v3hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	v3cswrrpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3"
	v3leastrequestpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	v3ringhashpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	v3roundrobinpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	v3wrrlocalitypb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	v3matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	v3typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/svcconfig"
)

// Real resources from the builders, the base every rule case breaks.

func baseEDS(t *testing.T) *v3endpointpb.ClusterLoadAssignment {
	t.Helper()
	svc := svcWith(
		ep("a1", "10.0.0.1", "zone-a", registry.Healthy, 100),
		ep("a2", "10.0.0.2", "zone-a", registry.Draining, 7),
		ep("b1", "2001:db8::1", "zone-b", registry.Healthy, 100),
		ep("c1", "10.0.0.3", "zone-c", registry.Unhealthy, 100), // no healthy: dropped
	)
	cla, err := clusterLoadAssignment(svc, "grpc", "zone-a", healthyCountWeights)
	if err != nil {
		t.Fatal(err)
	}
	if len(cla.GetEndpoints()) != 2 || len(cla.GetEndpoints()[0].GetLbEndpoints()) != 2 {
		t.Fatalf("base CLA has %d localities, want 2 (zone-a with 2 endpoints, zone-b)", len(cla.GetEndpoints()))
	}
	return cla
}

func baseLDS(t *testing.T) *v3listenerpb.Listener {
	t.Helper()
	l, err := listener("web")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func hcmOf(t *testing.T, l *v3listenerpb.Listener) *v3hcmpb.HttpConnectionManager {
	t.Helper()
	h := &v3hcmpb.HttpConnectionManager{}
	if err := l.GetApiListener().GetApiListener().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	return h
}

func setHCM(t *testing.T, l *v3listenerpb.Listener, h *v3hcmpb.HttpConnectionManager) {
	t.Helper()
	a, err := anypb.New(h)
	if err != nil {
		t.Fatal(err)
	}
	l.ApiListener.ApiListener = a
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func lbPolicy(t *testing.T, ms ...proto.Message) *v3clusterpb.LoadBalancingPolicy {
	t.Helper()
	p := &v3clusterpb.LoadBalancingPolicy{}
	for _, m := range ms {
		p.Policies = append(p.Policies, &v3clusterpb.LoadBalancingPolicy_Policy{TypedExtensionConfig: &v3corepb.TypedExtensionConfig{Name: "p", TypedConfig: mustAny(t, m)}})
	}
	return p
}

func sockAddr(addr string, port uint32) *v3corepb.Address {
	return &v3corepb.Address{Address: &v3corepb.Address_SocketAddress{SocketAddress: &v3corepb.SocketAddress{
		Address: addr, PortSpecifier: &v3corepb.SocketAddress_PortValue{PortValue: port}}}}
}

func setHeader(rc *v3routepb.RouteConfiguration, h *v3routepb.HeaderMatcher) {
	rc.VirtualHosts[0].Routes[0].Match.Headers = []*v3routepb.HeaderMatcher{h}
}

func routeAction(rc *v3routepb.RouteConfiguration) *v3routepb.RouteAction {
	return rc.VirtualHosts[0].Routes[0].GetRoute()
}

// checkRule is one rule of checkForGRPC, as a change that breaks it in a
// real resource from the builders.
type checkRule struct {
	name  string
	field string // what the error must name
	// pol, if set, is the policy the CDS, LDS or RDS base is built with.
	pol func() svcconfig.Resilience
	eds func(*v3endpointpb.ClusterLoadAssignment)
	cds func(*v3clusterpb.Cluster)
	lds func(*v3listenerpb.Listener)
	rds func(*v3routepb.RouteConfiguration)
}

// build returns the broken resource and its type URL.
func (r checkRule) build(t *testing.T) (string, proto.Message) {
	t.Helper()
	var pol svcconfig.Resilience
	if r.pol != nil {
		pol = r.pol()
	}
	switch {
	case r.eds != nil:
		c := baseEDS(t)
		r.eds(c)
		return EndpointType, c
	case r.cds != nil:
		c := clusterFor("web", pol)
		r.cds(c)
		return ClusterType, c
	case r.lds != nil:
		l, err := listenerFor("web", pol)
		if err != nil {
			t.Fatal(err)
		}
		r.lds(l)
		return ListenerType, l
	}
	rc := routeFor("web", pol)
	r.rds(rc)
	return RouteType, rc
}

// checkRules are the rules, each broken once.
func checkRules(t *testing.T) []checkRule {
	lle := func(c *v3endpointpb.ClusterLoadAssignment, i int) *v3endpointpb.LocalityLbEndpoints {
		return c.Endpoints[i]
	}
	lbe := func(c *v3endpointpb.ClusterLoadAssignment, i, j int) *v3endpointpb.LbEndpoint {
		return c.Endpoints[i].LbEndpoints[j]
	}
	return []checkRule{
		// EDS: unmarshal_eds.go.
		{name: "eds_cluster_name_empty", field: "cluster_name", eds: func(c *v3endpointpb.ClusterLoadAssignment) { c.ClusterName = "" }},
		{name: "eds_drop_denominator", field: "policy.drop_overloads[0].drop_percentage.denominator", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			c.Policy = &v3endpointpb.ClusterLoadAssignment_Policy{DropOverloads: []*v3endpointpb.ClusterLoadAssignment_Policy_DropOverload{
				{Category: "x", DropPercentage: &v3typepb.FractionalPercent{Numerator: 1, Denominator: 7}}}}
		}},
		{name: "eds_locality_missing", field: "endpoints[1].locality", eds: func(c *v3endpointpb.ClusterLoadAssignment) { lle(c, 1).Locality = nil }},
		{name: "eds_locality_weight_missing", field: "endpoints[0].load_balancing_weight", eds: func(c *v3endpointpb.ClusterLoadAssignment) { lle(c, 0).LoadBalancingWeight = nil }},
		{name: "eds_locality_weight_zero", field: "endpoints[1].load_balancing_weight", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lle(c, 1).LoadBalancingWeight = wrapperspb.UInt32(0)
		}},
		{name: "eds_locality_weights_overflow", field: "endpoints[1].load_balancing_weight", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lle(c, 0).LoadBalancingWeight = wrapperspb.UInt32(math.MaxUint32)
			lle(c, 1).LoadBalancingWeight = wrapperspb.UInt32(1)
		}},
		{name: "eds_duplicate_locality", field: "endpoints[1].locality", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lle(c, 1).Locality = proto.Clone(lle(c, 0).Locality).(*v3corepb.Locality)
		}},
		{name: "eds_priority_gap", field: "endpoints", eds: func(c *v3endpointpb.ClusterLoadAssignment) { lle(c, 1).Priority = 2 }},
		{name: "eds_endpoint_weight_zero", field: "endpoints[0].lb_endpoints[1].load_balancing_weight", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lbe(c, 0, 1).LoadBalancingWeight = wrapperspb.UInt32(0)
		}},
		{name: "eds_endpoint_weights_overflow", field: "endpoints[0].lb_endpoints[1].load_balancing_weight", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lbe(c, 0, 0).LoadBalancingWeight = wrapperspb.UInt32(math.MaxUint32)
		}},
		{name: "eds_duplicate_address_across_localities", field: "endpoints[1].lb_endpoints[0].endpoint.address.socket_address", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lbe(c, 1, 0).GetEndpoint().Address = sockAddr("10.0.0.1", 8080)
		}},
		{name: "eds_duplicate_address_draining", field: "endpoints[0].lb_endpoints[1].endpoint.address.socket_address", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lbe(c, 0, 1).GetEndpoint().Address = sockAddr("10.0.0.1", 8080) // a2 is DRAINING
		}},
		{name: "eds_duplicate_additional_address", field: "endpoints[1].lb_endpoints[0].endpoint.additional_addresses[0].address.socket_address", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lbe(c, 1, 0).GetEndpoint().AdditionalAddresses = []*v3endpointpb.Endpoint_AdditionalAddress{{Address: sockAddr("10.0.0.2", 8080)}}
		}},
		{name: "eds_address_not_ip", field: "endpoints[0].lb_endpoints[0].endpoint.address.socket_address", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lbe(c, 0, 0).GetEndpoint().Address = sockAddr("web-1.example", 8080)
		}},
		{name: "eds_port_zero", field: "endpoints[0].lb_endpoints[0].endpoint.address.socket_address", eds: func(c *v3endpointpb.ClusterLoadAssignment) {
			lbe(c, 0, 0).GetEndpoint().Address = sockAddr("10.0.0.9", 0)
		}},
		{name: "eds_endpoint_missing", field: "endpoints[0].lb_endpoints[0].endpoint", eds: func(c *v3endpointpb.ClusterLoadAssignment) { lbe(c, 0, 0).HostIdentifier = nil }},
		{name: "eds_endpoint_metadata", field: "endpoints[0].lb_endpoints[0].metadata", eds: func(c *v3endpointpb.ClusterLoadAssignment) { lbe(c, 0, 0).Metadata = &v3corepb.Metadata{} }},
		{name: "eds_locality_metadata", field: "endpoints[0].metadata", eds: func(c *v3endpointpb.ClusterLoadAssignment) { lle(c, 0).Metadata = &v3corepb.Metadata{} }},

		// CDS: unmarshal_cds.go and the policy converters.
		{name: "cds_name_empty", field: "name", cds: func(c *v3clusterpb.Cluster) { c.Name = "" }},
		{name: "cds_lb_policy_unknown", field: "lb_policy", cds: func(c *v3clusterpb.Cluster) { c.LbPolicy = v3clusterpb.Cluster_RANDOM }},
		{name: "cds_ring_hash_function", field: "ring_hash_lb_config.hash_function", cds: func(c *v3clusterpb.Cluster) {
			c.LbPolicy = v3clusterpb.Cluster_RING_HASH
			c.LbConfig = &v3clusterpb.Cluster_RingHashLbConfig_{RingHashLbConfig: &v3clusterpb.Cluster_RingHashLbConfig{HashFunction: v3clusterpb.Cluster_RingHashLbConfig_MURMUR_HASH_2}}
		}},
		{name: "cds_least_request_choice_count", field: "least_request_lb_config.choice_count", cds: func(c *v3clusterpb.Cluster) {
			c.LbPolicy = v3clusterpb.Cluster_LEAST_REQUEST
			c.LbConfig = &v3clusterpb.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &v3clusterpb.Cluster_LeastRequestLbConfig{ChoiceCount: wrapperspb.UInt32(2)}}
			c.GetLeastRequestLbConfig().ChoiceCount.Value = 1
		}},
		{name: "cds_transport_socket_matches", field: "transport_socket_matches", cds: func(c *v3clusterpb.Cluster) {
			c.TransportSocketMatches = []*v3clusterpb.Cluster_TransportSocketMatch{{Name: "m"}}
		}},
		{name: "cds_transport_socket", field: "transport_socket", cds: func(c *v3clusterpb.Cluster) { c.TransportSocket = &v3corepb.TransportSocket{Name: "x"} }},
		// Outlier detection: outlierConfigFromCluster, then spillway's.
		{name: "cds_od_interval_negative", field: "outlier_detection.interval", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection.Interval = durationpb.New(-time.Second) }},
		{name: "cds_od_base_ejection_time_invalid", field: "outlier_detection.base_ejection_time", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.BaseEjectionTime = &durationpb.Duration{Seconds: 1, Nanos: -5}
		}},
		{name: "cds_od_max_ejection_time_negative", field: "outlier_detection.max_ejection_time", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.MaxEjectionTime = durationpb.New(-time.Second)
		}},
		{name: "cds_od_max_ejection_percent", field: "outlier_detection.max_ejection_percent", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection.MaxEjectionPercent = wrapperspb.UInt32(101) }},
		{name: "cds_od_enforcing_success_rate", field: "outlier_detection.enforcing_success_rate", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection.EnforcingSuccessRate = wrapperspb.UInt32(101) }},
		{name: "cds_od_failure_percentage_threshold", field: "outlier_detection.failure_percentage_threshold", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.FailurePercentageThreshold = wrapperspb.UInt32(101)
		}},
		{name: "cds_od_enforcing_failure_percentage", field: "outlier_detection.enforcing_failure_percentage", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.EnforcingFailurePercentage = wrapperspb.UInt32(101)
		}},
		{name: "cds_od_interval_zero", field: "outlier_detection.interval", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection.Interval = durationpb.New(0) }},
		{name: "cds_od_base_ejection_time_zero", field: "outlier_detection.base_ejection_time", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection.BaseEjectionTime = durationpb.New(0) }},
		{name: "cds_od_max_ejection_time_below_base", field: "outlier_detection.max_ejection_time", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.MaxEjectionTime = durationpb.New(time.Second)
		}},
		{name: "cds_od_empty", field: "outlier_detection.enforcing_success_rate", cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection = &v3clusterpb.OutlierDetection{} }},
		{name: "cds_od_consecutive_5xx", field: "outlier_detection.enforcing_consecutive_5xx", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection.EnforcingConsecutive_5Xx = nil }},
		{name: "cds_od_consecutive_gateway_failure", field: "outlier_detection.enforcing_consecutive_gateway_failure", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(100)
		}},
		{name: "cds_od_envoy_only_field", field: "outlier_detection", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) { c.OutlierDetection.SplitExternalLocalOriginErrors = true }},
		{name: "cds_od_stdev_factor", field: "outlier_detection.success_rate_stdev_factor", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.SuccessRateStdevFactor = wrapperspb.UInt32(4_000_000_000)
		}},
		{name: "cds_od_minimum_hosts", field: "outlier_detection.failure_percentage_minimum_hosts", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.FailurePercentageMinimumHosts = wrapperspb.UInt32(1)
		}},
		{name: "cds_od_request_volume", field: "outlier_detection.success_rate_request_volume", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.OutlierDetection.SuccessRateRequestVolume = wrapperspb.UInt32(0)
		}},
		// Circuit breakers: circuitBreakersFromCluster and the picker.
		{name: "cds_cb_thresholds", field: "circuit_breakers.thresholds", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.CircuitBreakers.Thresholds = append(c.CircuitBreakers.Thresholds, &v3clusterpb.CircuitBreakers_Thresholds{Priority: v3corepb.RoutingPriority_HIGH, MaxRequests: wrapperspb.UInt32(5)})
		}},
		{name: "cds_cb_priority", field: "circuit_breakers.thresholds[0].priority", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.CircuitBreakers.Thresholds[0].Priority = v3corepb.RoutingPriority_HIGH
		}},
		{name: "cds_cb_max_requests_zero", field: "circuit_breakers.thresholds[0].max_requests", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.CircuitBreakers.Thresholds[0].MaxRequests = wrapperspb.UInt32(0)
		}},
		{name: "cds_metadata", field: "metadata", cds: func(c *v3clusterpb.Cluster) { c.Metadata = &v3corepb.Metadata{} }},
		// A balancer the client lacks (spillway.wrr for a client without
		// clientlib/wrr; this test binary has it, so another name).
		{name: "cds_no_known_policy", field: "load_balancing_policy", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/test.NoSuchBalancer", Value: &structpb.Struct{}})
		}},
		{name: "cds_wrr_locality_child_unknown", field: "load_balancing_policy.policies[0].typed_extension_config.endpoint_picking_policy", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3wrrlocalitypb.WrrLocality{EndpointPickingPolicy: lbPolicy(t,
				&v3xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/test.NoSuchBalancer", Value: &structpb.Struct{}})})
		}},
		{name: "cds_policy_too_deep", field: "nested deeper than 16", cds: func(c *v3clusterpb.Cluster) {
			p := lbPolicy(t, &v3roundrobinpb.RoundRobin{})
			for range 17 {
				p = lbPolicy(t, &v3wrrlocalitypb.WrrLocality{EndpointPickingPolicy: p})
			}
			c.LoadBalancingPolicy = p
		}},
		{name: "cds_ring_hash_policy_function", field: "load_balancing_policy.policies[0].typed_extension_config.hash_function", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3ringhashpb.RingHash{HashFunction: v3ringhashpb.RingHash_MURMUR_HASH_2})
		}},
		{name: "cds_least_request_policy_choice_count", field: "load_balancing_policy.policies[0].typed_extension_config.choice_count", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3leastrequestpb.LeastRequest{ChoiceCount: wrapperspb.UInt32(1)})
		}},
		// Ring hash, least request, client-side WRR: the converters and
		// the balancers' ParseConfig, then spillway's.
		{name: "cds_ring_hash_max_over", field: "load_balancing_policy.policies[0].typed_extension_config.maximum_ring_size", pol: fullPolicy, cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3ringhashpb.RingHash{HashFunction: v3ringhashpb.RingHash_XX_HASH, MaximumRingSize: wrapperspb.UInt64(8<<20 + 1)})
		}},
		{name: "cds_ring_hash_min_over_max", field: "load_balancing_policy.policies[0].typed_extension_config.minimum_ring_size", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3ringhashpb.RingHash{HashFunction: v3ringhashpb.RingHash_XX_HASH, MinimumRingSize: wrapperspb.UInt64(4096), MaximumRingSize: wrapperspb.UInt64(2048)})
		}},
		{name: "cds_ring_hash_min_zero", field: "load_balancing_policy.policies[0].typed_extension_config: invalid RingHash.MinimumRingSize", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3ringhashpb.RingHash{HashFunction: v3ringhashpb.RingHash_XX_HASH, MinimumRingSize: wrapperspb.UInt64(0)})
		}},
		{name: "cds_ring_hash_in_wrr_locality", field: "load_balancing_policy.policies[0].typed_extension_config.endpoint_picking_policy.policies[0].typed_extension_config", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3wrrlocalitypb.WrrLocality{EndpointPickingPolicy: lbPolicy(t, &v3ringhashpb.RingHash{HashFunction: v3ringhashpb.RingHash_XX_HASH})})
		}},
		{name: "cds_least_request_choice_count_over", field: "endpoint_picking_policy.policies[0].typed_extension_config.choice_count", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, &v3wrrlocalitypb.WrrLocality{EndpointPickingPolicy: lbPolicy(t, &v3leastrequestpb.LeastRequest{ChoiceCount: wrapperspb.UInt32(11)})})
		}},
		{name: "cds_endpoint_picking_at_top", field: "load_balancing_policy.policies[0].typed_extension_config", cds: func(c *v3clusterpb.Cluster) {
			c.LoadBalancingPolicy = lbPolicy(t, clientWRR(testPolicy("client_wrr").LB.ClientWRR))
		}},
		{name: "cds_cswrr_penalty_negative", field: "endpoint_picking_policy.policies[0].typed_extension_config.error_utilization_penalty", cds: cswrrRule(t, func(w *v3cswrrpb.ClientSideWeightedRoundRobin) {
			w.ErrorUtilizationPenalty = wrapperspb.Float(-1)
		})},
		{name: "cds_cswrr_penalty_zero", field: "endpoint_picking_policy.policies[0].typed_extension_config.error_utilization_penalty", cds: cswrrRule(t, func(w *v3cswrrpb.ClientSideWeightedRoundRobin) {
			w.ErrorUtilizationPenalty = wrapperspb.Float(0)
		})},
		{name: "cds_cswrr_blackout_zero", field: "endpoint_picking_policy.policies[0].typed_extension_config.blackout_period", cds: cswrrRule(t, func(w *v3cswrrpb.ClientSideWeightedRoundRobin) {
			w.BlackoutPeriod = durationpb.New(0)
		})},
		{name: "cds_cswrr_expiration_negative", field: "endpoint_picking_policy.policies[0].typed_extension_config.weight_expiration_period", cds: cswrrRule(t, func(w *v3cswrrpb.ClientSideWeightedRoundRobin) {
			w.WeightExpirationPeriod = durationpb.New(-time.Second)
		})},
		{name: "cds_cswrr_update_period", field: "endpoint_picking_policy.policies[0].typed_extension_config.weight_update_period", cds: cswrrRule(t, func(w *v3cswrrpb.ClientSideWeightedRoundRobin) {
			w.WeightUpdatePeriod = durationpb.New(time.Millisecond)
		})},
		{name: "cds_cswrr_oob_period", field: "endpoint_picking_policy.policies[0].typed_extension_config.oob_reporting_period", cds: cswrrRule(t, func(w *v3cswrrpb.ClientSideWeightedRoundRobin) {
			w.EnableOobLoadReport, w.OobReportingPeriod = wrapperspb.Bool(true), durationpb.New(time.Second)
		})},
		{name: "cds_typed_struct_grpc_balancer", field: "endpoint_picking_policy.policies[0].typed_extension_config", cds: func(c *v3clusterpb.Cluster) {
			js, _ := structpb.NewStruct(map[string]any{"errorUtilizationPenalty": -2})
			c.LoadBalancingPolicy = lbPolicy(t, &v3wrrlocalitypb.WrrLocality{EndpointPickingPolicy: lbPolicy(t,
				&v3xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/weighted_round_robin", Value: js})})
		}},
		{name: "cds_envoy_typed_struct_does_not_convert", field: "load_balancing_policy.policies[0].typed_extension_config", cds: func(c *v3clusterpb.Cluster) {
			bad, _ := structpb.NewStruct(map[string]any{"no_such_field": true})
			c.LoadBalancingPolicy.Policies[0].TypedExtensionConfig.TypedConfig = mustAny(t, &v3xdstypepb.TypedStruct{
				TypeUrl: "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin", Value: bad})
		}},
		{name: "cds_lrs_server_not_self", field: "lrs_server", cds: func(c *v3clusterpb.Cluster) {
			c.LrsServer = &v3corepb.ConfigSource{ConfigSourceSpecifier: &v3corepb.ConfigSource_Ads{Ads: &v3corepb.AggregatedConfigSource{}}}
		}},
		{name: "cds_type_not_eds", field: "type", cds: func(c *v3clusterpb.Cluster) {
			c.ClusterDiscoveryType = &v3clusterpb.Cluster_Type{Type: v3clusterpb.Cluster_STATIC}
		}},
		{name: "cds_eds_config_not_ads", field: "eds_cluster_config.eds_config", cds: func(c *v3clusterpb.Cluster) {
			c.EdsClusterConfig.EdsConfig = &v3corepb.ConfigSource{ConfigSourceSpecifier: &v3corepb.ConfigSource_Path{Path: "/x"}}
		}},
		{name: "cds_xdstp_without_service_name", field: "eds_cluster_config.service_name", cds: func(c *v3clusterpb.Cluster) {
			c.Name, c.EdsClusterConfig.ServiceName = "xdstp://spillway/envoy.config.cluster.v3.Cluster/web", ""
		}},

		// LDS: unmarshal_lds.go.
		{name: "lds_name_empty", field: "name", lds: func(l *v3listenerpb.Listener) { l.Name = "" }},
		{name: "lds_not_api_listener", field: "api_listener", lds: func(l *v3listenerpb.Listener) { l.ApiListener = nil }},
		{name: "lds_api_listener_type", field: "api_listener.api_listener", lds: func(l *v3listenerpb.Listener) {
			l.ApiListener.ApiListener = mustAny(t, &v3routepb.RouteConfiguration{Name: "x"})
		}},
		{name: "lds_xff_hops", field: "xff_num_trusted_hops", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.XffNumTrustedHops = 1
			setHCM(t, l, h)
		}},
		{name: "lds_original_ip_detection", field: "original_ip_detection_extensions", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.OriginalIpDetectionExtensions = []*v3corepb.TypedExtensionConfig{{Name: "x"}}
			setHCM(t, l, h)
		}},
		{name: "lds_rds_config_source", field: "rds.config_source", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.GetRds().ConfigSource = &v3corepb.ConfigSource{ConfigSourceSpecifier: &v3corepb.ConfigSource_Path{Path: "/x"}}
			setHCM(t, l, h)
		}},
		{name: "lds_route_config_name_empty", field: "rds.route_config_name", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.GetRds().RouteConfigName = ""
			setHCM(t, l, h)
		}},
		{name: "lds_no_route_specifier", field: "route_specifier", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.RouteSpecifier = nil
			setHCM(t, l, h)
		}},
		{name: "lds_inline_route_invalid", field: "route_config: name", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.RouteSpecifier = &v3hcmpb.HttpConnectionManager_RouteConfig{RouteConfig: &v3routepb.RouteConfiguration{}}
			setHCM(t, l, h)
		}},
		{name: "lds_no_filters", field: "http_filters", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.HttpFilters = nil
			setHCM(t, l, h)
		}},
		{name: "lds_filter_name_empty", field: "http_filters[0].name", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.HttpFilters[0].Name = ""
			setHCM(t, l, h)
		}},
		{name: "lds_filter_name_duplicate", field: "http_filters[1].name", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.HttpFilters = append(h.HttpFilters, proto.Clone(h.HttpFilters[0]).(*v3hcmpb.HttpFilter))
			setHCM(t, l, h)
		}},
		{name: "lds_router_not_last", field: "http_filters[0]", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			again := proto.Clone(h.HttpFilters[0]).(*v3hcmpb.HttpFilter)
			again.Name = "router-2"
			h.HttpFilters = append(h.HttpFilters, again)
			setHCM(t, l, h)
		}},
		{name: "lds_only_optional_unknown_filters", field: "http_filters", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.HttpFilters = []*v3hcmpb.HttpFilter{{Name: "opt", IsOptional: true, ConfigType: &v3hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &v3xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/some.Filter"})}}}
			setHCM(t, l, h)
		}},
		// The fault filter: processHTTPFilters and fault.parseConfig.
		{name: "lds_fault_after_router", field: "http_filters[0]", pol: fullPolicy, lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.HttpFilters[0], h.HttpFilters[1] = h.HttpFilters[1], h.HttpFilters[0]
			setHCM(t, l, h)
		}},
		{name: "lds_fault_typed_struct", field: "http_filters[0].typed_config", pol: fullPolicy, lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.HttpFilters[0].ConfigType = &v3hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &v3xdstypepb.TypedStruct{TypeUrl: faultURL, Value: &structpb.Struct{}})}
			setHCM(t, l, h)
		}},
		{name: "lds_fault_invalid", field: "http_filters[0].typed_config", pol: fullPolicy, lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			h.HttpFilters[0].ConfigType = &v3hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &v3faultpb.HTTPFault{
				Abort: &v3faultpb.FaultAbort{ErrorType: &v3faultpb.FaultAbort_HttpStatus{HttpStatus: 100}, Percentage: &v3typepb.FractionalPercent{Numerator: 1}}})}
			setHCM(t, l, h)
		}},
		{name: "lds_unknown_filter", field: "http_filters[0].typed_config", lds: func(l *v3listenerpb.Listener) {
			h := hcmOf(t, l)
			unknown := &v3hcmpb.HttpFilter{Name: "unknown", ConfigType: &v3hcmpb.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &v3xdstypepb.TypedStruct{TypeUrl: "type.googleapis.com/some.Filter"})}}
			h.HttpFilters = append([]*v3hcmpb.HttpFilter{unknown}, h.HttpFilters...)
			setHCM(t, l, h)
		}},

		// RDS: unmarshal_rds.go and the xDS resolver's virtual host match.
		{name: "rds_name_empty", field: "name", rds: func(rc *v3routepb.RouteConfiguration) { rc.Name = "" }},
		{name: "rds_cluster_specifier_plugins", field: "cluster_specifier_plugins", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.ClusterSpecifierPlugins = []*v3routepb.ClusterSpecifierPlugin{{Extension: &v3corepb.TypedExtensionConfig{Name: "p"}}}
		}},
		{name: "rds_no_matching_domain", field: "virtual_hosts", rds: func(rc *v3routepb.RouteConfiguration) { rc.VirtualHosts[0].Domains = []string{"other"} }},
		{name: "rds_vhost_filter_override", field: "virtual_hosts[0].typed_per_filter_config", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{"x": mustAny(t, &v3routepb.FilterConfig{})}
		}},
		{name: "rds_vhost_retry_policy", field: "virtual_hosts[0].retry_policy.num_retries", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].RetryPolicy = &v3routepb.RetryPolicy{NumRetries: wrapperspb.UInt32(0)}
		}},
		{name: "rds_no_routes", field: "virtual_hosts[0].routes", rds: func(rc *v3routepb.RouteConfiguration) { rc.VirtualHosts[0].Routes = nil }},
		{name: "rds_route_no_match", field: "virtual_hosts[0].routes[0].match", rds: func(rc *v3routepb.RouteConfiguration) { rc.VirtualHosts[0].Routes[0].Match = nil }},
		{name: "rds_route_no_path_specifier", field: "virtual_hosts[0].routes[0].match.path_specifier", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = nil
		}},
		{name: "rds_route_bad_regex", field: "virtual_hosts[0].routes[0].match.safe_regex", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &v3routepb.RouteMatch_SafeRegex{SafeRegex: &v3matcherpb.RegexMatcher{Regex: "(["}}
		}},
		{name: "rds_header_string_match_empty", field: "virtual_hosts[0].routes[0].match.headers[0].string_match.match_pattern", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_StringMatch{StringMatch: &v3matcherpb.StringMatcher{}}})
		}},
		{name: "rds_header_prefix_empty", field: "virtual_hosts[0].routes[0].match.headers[0].string_match.prefix", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_StringMatch{StringMatch: &v3matcherpb.StringMatcher{MatchPattern: &v3matcherpb.StringMatcher_Prefix{}}}})
		}},
		{name: "rds_header_string_regex_bad", field: "virtual_hosts[0].routes[0].match.headers[0].string_match.safe_regex", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_StringMatch{StringMatch: &v3matcherpb.StringMatcher{MatchPattern: &v3matcherpb.StringMatcher_SafeRegex{SafeRegex: &v3matcherpb.RegexMatcher{Regex: "(["}}}}})
		}},
		{name: "rds_header_regex_bad", field: "virtual_hosts[0].routes[0].match.headers[0].safe_regex_match", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &v3matcherpb.RegexMatcher{Regex: "(["}}})
		}},
		{name: "rds_header_name_empty", field: "virtual_hosts[0].routes[0].match.headers[0].name", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{HeaderMatchSpecifier: &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true}})
		}},
		{name: "rds_header_name_uppercase", field: "virtual_hosts[0].routes[0].match.headers[0].name", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "X-Class", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true}})
		}},
		{name: "rds_header_name_bin", field: "virtual_hosts[0].routes[0].match.headers[0].name", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "x-bin", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true}})
		}},
		{name: "rds_header_invert", field: "virtual_hosts[0].routes[0].match.headers[0]", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "x", InvertMatch: true, HeaderMatchSpecifier: &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true}})
		}},
		{name: "rds_header_range", field: "virtual_hosts[0].routes[0].match.headers[0].header_match_specifier", rds: func(rc *v3routepb.RouteConfiguration) {
			setHeader(rc, &v3routepb.HeaderMatcher{Name: "x", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_RangeMatch{RangeMatch: &v3typepb.Int64Range{Start: 1, End: 2}}})
		}},
		{name: "rds_query_parameters", field: "virtual_hosts[0].routes[0].match.query_parameters", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match.QueryParameters = []*v3routepb.QueryParameterMatcher{{Name: "q", QueryParameterMatchSpecifier: &v3routepb.QueryParameterMatcher_PresentMatch{PresentMatch: true}}}
		}},
		{name: "rds_route_filter_override", field: "virtual_hosts[0].routes[0].typed_per_filter_config", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].TypedPerFilterConfig = map[string]*anypb.Any{"x": mustAny(t, &v3routepb.FilterConfig{})}
		}},
		{name: "rds_route_not_route_action", field: "virtual_hosts[0].routes[0].action", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Action = &v3routepb.Route_Redirect{Redirect: &v3routepb.RedirectAction{}}
		}},
		{name: "rds_route_retry_policy", field: "virtual_hosts[0].routes[0].route.retry_policy.num_retries", rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).RetryPolicy = &v3routepb.RetryPolicy{NumRetries: wrapperspb.UInt32(0)}
		}},
		// Retry, timeout and hash policies: generateRetryConfig,
		// routesProtoToSlice, hashPoliciesProtoToSlice, then spillway's.
		{name: "rds_retry_no_base_interval", field: "route.retry_policy.retry_back_off.base_interval", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).RetryPolicy.RetryBackOff.BaseInterval = nil
		}},
		{name: "rds_retry_max_interval_zero", field: "route.retry_policy.retry_back_off.max_interval", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).RetryPolicy.RetryBackOff.MaxInterval = durationpb.New(0)
		}},
		{name: "rds_retry_num_retries_over", field: "route.retry_policy.num_retries", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).RetryPolicy.NumRetries = wrapperspb.UInt32(5)
		}},
		{name: "rds_retry_max_below_base", field: "route.retry_policy.retry_back_off.max_interval", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).RetryPolicy.RetryBackOff.MaxInterval = durationpb.New(time.Millisecond)
		}},
		{name: "rds_retry_base_below_1ms", field: "route.retry_policy.retry_back_off.base_interval", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).RetryPolicy.RetryBackOff.BaseInterval = durationpb.New(500 * time.Microsecond)
		}},
		{name: "rds_retry_on_unknown", field: "route.retry_policy.retry_on", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).RetryPolicy.RetryOn = "5xx,reset"
		}},
		{name: "rds_max_stream_duration_negative", field: "route.max_stream_duration.max_stream_duration", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).MaxStreamDuration = &v3routepb.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(-5 * time.Second)}
		}},
		{name: "rds_max_stream_duration_differ", field: "route.max_stream_duration", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).MaxStreamDuration.GrpcTimeoutHeaderMax = durationpb.New(time.Hour)
		}},
		{name: "rds_hash_policy_regex", field: "route.hash_policy[0].header.regex_rewrite", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).HashPolicy[0].GetHeader().RegexRewrite = &v3matcherpb.RegexMatchAndSubstitute{Pattern: &v3matcherpb.RegexMatcher{Regex: "("}}
		}},
		{name: "rds_hash_policy_header_bin", field: "route.hash_policy[0].header.header_name", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).HashPolicy[0].GetHeader().HeaderName = "x-user-bin"
		}},
		{name: "rds_hash_policy_cookie", field: "route.hash_policy[0]", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).HashPolicy[0].PolicySpecifier = &v3routepb.RouteAction_HashPolicy_Cookie_{Cookie: &v3routepb.RouteAction_HashPolicy_Cookie{Name: "c"}}
		}},
		// Filter overrides: processHTTPFilterOverrides, fault.parseConfig,
		// then spillway's.
		{name: "rds_weighted_cluster_filter_override", field: "route.weighted_clusters.clusters[0].typed_per_filter_config", rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).ClusterSpecifier = &v3routepb.RouteAction_WeightedClusters{WeightedClusters: &v3routepb.WeightedCluster{
				Clusters: []*v3routepb.WeightedCluster_ClusterWeight{{Name: "web", Weight: wrapperspb.UInt32(1), TypedPerFilterConfig: map[string]*anypb.Any{"x": mustAny(t, &v3routepb.Route{})}}}}}
		}},
		{name: "rds_filter_override_optional", field: "virtual_hosts[0].routes[0].typed_per_filter_config", rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].TypedPerFilterConfig = map[string]*anypb.Any{"x": mustAny(t, &v3routepb.FilterConfig{Config: mustAny(t, &v3routepb.Route{}), IsOptional: true})}
		}},
		{name: "rds_fault_typed_struct", field: "virtual_hosts[0].typed_per_filter_config", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			rc.VirtualHosts[0].TypedPerFilterConfig[faultFilter] = mustAny(t, &v3xdstypepb.TypedStruct{TypeUrl: faultURL, Value: &structpb.Struct{}})
		}},
		{name: "rds_fault_override_name", field: "virtual_hosts[0].typed_per_filter_config", pol: fullPolicy, rds: func(rc *v3routepb.RouteConfiguration) {
			vh := rc.VirtualHosts[0]
			vh.TypedPerFilterConfig = map[string]*anypb.Any{"fault": vh.TypedPerFilterConfig[faultFilter]}
		}},
		{name: "rds_fault_empty", field: "virtual_hosts[0].typed_per_filter_config", pol: fullPolicy, rds: setFault(t, func(h *v3faultpb.HTTPFault) { h.Delay, h.Abort = nil, nil })},
		{name: "rds_fault_invalid", field: "virtual_hosts[0].typed_per_filter_config", pol: fullPolicy, rds: setFault(t, func(h *v3faultpb.HTTPFault) {
			h.Abort.ErrorType = &v3faultpb.FaultAbort_HttpStatus{HttpStatus: 100}
		})},
		{name: "rds_fault_headers", field: "headers", pol: fullPolicy, rds: setFault(t, func(h *v3faultpb.HTTPFault) {
			h.Headers = []*v3routepb.HeaderMatcher{{Name: "x-chaos", HeaderMatchSpecifier: &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}}
		})},
		{name: "rds_fault_grpc_status_zero", field: "abort.grpc_status", pol: fullPolicy, rds: setFault(t, func(h *v3faultpb.HTTPFault) {
			h.Abort.ErrorType = &v3faultpb.FaultAbort_GrpcStatus{GrpcStatus: 0}
		})},
		{name: "rds_fault_chance_over_whole", field: "delay.percentage", pol: fullPolicy, rds: setFault(t, func(h *v3faultpb.HTTPFault) {
			h.Delay.Percentage.Numerator = 2_000_000
		})},
		{name: "rds_fault_max_active_zero", field: "max_active_faults", pol: fullPolicy, rds: setFault(t, func(h *v3faultpb.HTTPFault) {
			h.MaxActiveFaults = wrapperspb.UInt32(0)
		})},
		{name: "rds_route_cluster_empty", field: "virtual_hosts[0].routes[0].route.cluster", rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).ClusterSpecifier = &v3routepb.RouteAction_Cluster{Cluster: ""}
		}},
		{name: "rds_weighted_clusters_zero", field: "virtual_hosts[0].routes[0].route.weighted_clusters", rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).ClusterSpecifier = &v3routepb.RouteAction_WeightedClusters{WeightedClusters: &v3routepb.WeightedCluster{
				Clusters: []*v3routepb.WeightedCluster_ClusterWeight{{Name: "web", Weight: wrapperspb.UInt32(0)}}}}
		}},
		{name: "rds_weighted_clusters_overflow", field: "virtual_hosts[0].routes[0].route.weighted_clusters", rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).ClusterSpecifier = &v3routepb.RouteAction_WeightedClusters{WeightedClusters: &v3routepb.WeightedCluster{
				Clusters: []*v3routepb.WeightedCluster_ClusterWeight{{Name: "web", Weight: wrapperspb.UInt32(math.MaxUint32)}, {Name: "web2", Weight: wrapperspb.UInt32(1)}}}}
		}},
		{name: "rds_weighted_cluster_name_empty", field: "virtual_hosts[0].routes[0].route.weighted_clusters.clusters[0].name", rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).ClusterSpecifier = &v3routepb.RouteAction_WeightedClusters{WeightedClusters: &v3routepb.WeightedCluster{
				Clusters: []*v3routepb.WeightedCluster_ClusterWeight{{Name: "", Weight: wrapperspb.UInt32(1)}}}}
		}},
		{name: "rds_cluster_specifier_plugin_action", field: "virtual_hosts[0].routes[0].route.cluster_specifier", rds: func(rc *v3routepb.RouteConfiguration) {
			routeAction(rc).ClusterSpecifier = &v3routepb.RouteAction_ClusterSpecifierPlugin{ClusterSpecifierPlugin: "p"}
		}},
	}
}

// TestCheckForGRPC: for each rule grpc-go's parsers enforce (and that
// could apply to what spillway emits), a resource from the builders
// broken in that one way is rejected, naming the field, and is not
// encoded (so never published); the unbroken resources pass.
func TestCheckForGRPC(t *testing.T) {
	// The real resources pass.
	base := map[string]proto.Message{
		EndpointType: baseEDS(t), ClusterType: cluster("web"), ListenerType: baseLDS(t), RouteType: route("web"),
	}
	for typ, m := range base {
		if err := checkForGRPC(typ, m); err != nil {
			t.Errorf("%s from the builders: %v", shortType(typ), err)
		}
		if _, err := encode("web", m); err != nil {
			t.Errorf("%s from the builders does not encode: %v", shortType(typ), err)
		}
	}

	for _, r := range checkRules(t) {
		t.Run(r.name, func(t *testing.T) {
			typ, m := r.build(t)
			err := checkForGRPC(typ, m)
			if err == nil {
				t.Fatalf("checkForGRPC accepted a %s that breaks the rule", shortType(typ))
			}
			if !errors.Is(err, errClientRejects) {
				t.Errorf("err = %v, want it to wrap errClientRejects", err)
			}
			if !strings.Contains(err.Error(), r.field) {
				t.Errorf("err = %q, want it to name %q", err, r.field)
			}
			if _, err := encode("web", m); err == nil {
				t.Errorf("encode published a %s that breaks the rule", shortType(typ))
			}
		})
	}
}

// TestCheckWrongMessage: a message of another type than its type URL, or
// a type spillway does not serve, is rejected.
func TestCheckWrongMessage(t *testing.T) {
	if err := checkForGRPC(ClusterType, route("web")); err == nil {
		t.Error("a RouteConfiguration passed as a Cluster")
	}
	if err := checkForGRPC("type.googleapis.com/envoy.config.core.v3.Node", &v3corepb.Node{}); err == nil {
		t.Error("an unserved type passed")
	}
}

// TestDuplicateAddressNeverSent: a service whose endpoints share an
// address and port (two sources claiming it) builds an EDS resource with
// the address once, which passes the check: the registry's decision
// reaches EDS.
func TestDuplicateAddressNeverSent(t *testing.T) {
	store := registry.NewStore()
	vm := ep("vm-1", "10.0.0.1", "zone-a", registry.Healthy, 100)
	vm.Source = registry.SourceVM
	static := ep("static-1", "10.0.0.1", "zone-b", registry.Healthy, 100)
	draining := ep("k8s-old", "10.0.0.1", "zone-a", registry.Draining, 100)
	draining.Source = registry.SourceKubernetes
	if _, err := store.Apply(registry.Upsert("web", vm), registry.Upsert("web", static), registry.Upsert("web", draining)); err != nil {
		t.Fatal(err)
	}
	svc, _ := store.Snapshot().Service("web")
	cla, err := clusterLoadAssignment(svc, "grpc", "zone-a", healthyCountWeights)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkForGRPC(EndpointType, cla); err != nil {
		t.Fatalf("EDS from a service with an address conflict: %v", err)
	}
	var got []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			got = append(got, e.GetEndpoint().GetHostname())
		}
	}
	if len(got) != 1 || got[0] != "vm-1" {
		t.Errorf("EDS endpoints = %v, want [vm-1] (healthy, vm over static)", got)
	}
}

// TestCheckEDSReusedAddressSets: the duplicate-address sets checkEDS
// keeps between checks (from minPooledAddrs addresses up) find a
// duplicate wherever it is, and hold nothing of one check into the next:
// a clean assignment passes after one that was rejected, at sizes on both
// sides of the pool's threshold and of a power of two.
func TestCheckEDSReusedAddressSets(t *testing.T) {
	build := func(t *testing.T, n int) *v3endpointpb.ClusterLoadAssignment {
		t.Helper()
		var eps []*registry.Endpoint
		for i := range n {
			eps = append(eps, ep(fmt.Sprintf("e%05d", i), fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff), fmt.Sprintf("zone-%d", i%3), registry.Healthy, 100))
		}
		cla, err := clusterLoadAssignment(svcWith(eps...), "grpc", "zone-a", healthyCountWeights)
		if err != nil {
			t.Fatal(err)
		}
		return cla
	}
	for _, n := range []int{minPooledAddrs - 1, minPooledAddrs, minPooledAddrs + 1, 1000, 1024, 1025} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			for round := range 3 {
				clean := build(t, n)
				if err := checkForGRPC(EndpointType, clean); err != nil {
					t.Fatalf("round %d: clean assignment of %d endpoints: %v", round, n, err)
				}
				dup := build(t, n)
				last := dup.Endpoints[len(dup.Endpoints)-1]
				first := dup.Endpoints[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress()
				sa := last.LbEndpoints[len(last.LbEndpoints)-1].GetEndpoint().GetAddress().GetSocketAddress()
				sa.Address = first.GetAddress()
				err := checkForGRPC(EndpointType, dup)
				want := fmt.Sprintf("endpoints[%d].lb_endpoints[%d].endpoint.address.socket_address", len(dup.Endpoints)-1, len(last.LbEndpoints)-1)
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "also endpoints[0].lb_endpoints[0]") {
					t.Fatalf("round %d: duplicate of the first address in the last endpoint of %d: got %v, want a rejection of %s", round, n, err, want)
				}
			}
		})
	}
}

// BenchmarkCheckEDS: the cost of the client checks on an EDS resource,
// next to encoding it, at two sizes.
func BenchmarkCheckEDS(b *testing.B) {
	for _, n := range []int{100, 10000} {
		var eps []*registry.Endpoint
		for i := range n {
			e := ep(fmt.Sprintf("e%05d", i), fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff), fmt.Sprintf("zone-%d", i%3), registry.Healthy, 100)
			eps = append(eps, e)
		}
		cla, err := clusterLoadAssignment(svcWith(eps...), "grpc", "zone-a", healthyCountWeights)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("endpoints=%d/check", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := checkForGRPC(EndpointType, cla); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("endpoints=%d/encode", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encode("web", cla); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

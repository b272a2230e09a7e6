package xds

// What a client would reject, checked before a resource is published.
//
// grpc-go rejects (NACKs) a whole response when one resource in it breaks
// one of its rules, and keeps what it had, or nothing. The rules below are
// those of grpc-go 1.85's parsers that could apply to what spillway
// emits, plus what Envoy needs of the policy spillway writes for it:
//
//   - internal/xds/xdsclient/xdsresource: unmarshal_eds.go;
//     unmarshal_cds.go (validateClusterAndConstructClusterUpdate,
//     outlierConfigFromCluster, circuitBreakersFromCluster);
//     unmarshal_lds.go (processClientSideListener, processHTTPFilters,
//     processHTTPFilterOverrides, validateHTTPFilterConfig);
//     unmarshal_rds.go (routesProtoToSlice, generateRetryConfig,
//     hashPoliciesProtoToSlice, the max_stream_duration);
//   - the load balancing policy converters
//     (internal/xds/xdsclient/xdslbregistry/converter) and the balancers'
//     ParseConfig, whose errors are NACKs too: balancer/ringhash
//     (config.go parseConfig), balancer/leastrequest,
//     balancer/weightedroundrobin;
//   - the fault filter (internal/xds/httpfilter/fault, parseConfig: a
//     typed HTTPFault only);
//   - the typed configs inside Anys (load balancing policies, HTTP
//     filters, filter overrides) pass their own proto constraints, as
//     Envoy checks them and ValidateAll on the resource does not.
//
// Where grpc-go only ignores a part (a locality of weight 0, an unknown
// route action), spillway treats it as an error too: it never means to
// send a part that a client drops. And where grpc-go accepts a value and
// then misreads or fails on it (issue 30's research, probed against a real
// client), spillway refuses it: outlier detection at interval 0 (a
// busy sweep loop), an implicit enforcing_success_rate (success-rate
// ejection on), thresholds that eject a service's only endpoint, Envoy-only
// ejections; max_requests 0 (every RPC fails); ring_hash inside
// wrr_locality (one ring per locality), an endpoint-picking policy at the
// top (no locality weights), least_request above 10 choices, a
// client-side WRR penalty or blackout of 0 (read as the defaults),
// negative or too short periods; more than 4 retries (grpc-go's xDS path
// does not cap attempts at 5), a max backoff below the base, retry_on
// codes grpc-go ignores; a negative or split max_stream_duration; hash
// policies grpc-go skips; fault configs with headers (ignored), of
// status 0 or above 16, chances above the whole, or injecting nothing.
// Fields spillway never sets and whose content grpc-go parses (TLS,
// metadata, cluster specifier plugins, a TypedStruct naming a stock gRPC
// balancer, whose struct is that balancer's JSON config) must stay
// unset: setting one must come with its rule here.
//
// Each rule is tested in check_test.go with a resource that breaks it,
// and check_grpc_test.go serves each such resource to a real grpc-go
// client: it NACKs all but those listed there (spillwayOnly), which it
// accepts and then drops or fails on.

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1udpatypepb "github.com/cncf/xds/go/udpa/type/v1"
	v3xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	v3routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	v3hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	v3cswrrpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3"
	v3leastrequestpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	v3ringhashpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	v3roundrobinpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	v3wrrlocalitypb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	v3matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	v3typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// errClientRejects is wrapped by every error of checkForGRPC.
var errClientRejects = errors.New("a client would reject it")

func rejectf(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errClientRejects)
}

// checkForGRPC returns an error naming the field if a client would reject
// m, a resource of type typeURL.
func checkForGRPC(typeURL string, m proto.Message) error {
	switch typeURL {
	case EndpointType:
		cla, ok := m.(*v3endpointpb.ClusterLoadAssignment)
		if !ok {
			return rejectf("type_url", "%s holds %T", typeURL, m)
		}
		return checkEDS(cla)
	case ClusterType:
		c, ok := m.(*v3clusterpb.Cluster)
		if !ok {
			return rejectf("type_url", "%s holds %T", typeURL, m)
		}
		return checkCDS(c)
	case ListenerType:
		l, ok := m.(*v3listenerpb.Listener)
		if !ok {
			return rejectf("type_url", "%s holds %T", typeURL, m)
		}
		return checkLDS(l)
	case RouteType:
		rc, ok := m.(*v3routepb.RouteConfiguration)
		if !ok {
			return rejectf("type_url", "%s holds %T", typeURL, m)
		}
		return checkRDS(rc)
	}
	return rejectf("type_url", "%q is not a type spillway serves", typeURL)
}

// checkEDS: unmarshal_eds.go (parseEDSRespProto, parseEndpoints,
// parseDropPolicy).
func checkEDS(cla *v3endpointpb.ClusterLoadAssignment) error {
	if cla.GetClusterName() == "" {
		return rejectf("cluster_name", "empty")
	}
	for i, d := range cla.GetPolicy().GetDropOverloads() {
		switch d.GetDropPercentage().GetDenominator().String() {
		case "HUNDRED", "TEN_THOUSAND", "MILLION":
		default:
			return rejectf(fmt.Sprintf("policy.drop_overloads[%d].drop_percentage.denominator", i), "unsupported %v", d.GetDropPercentage().GetDenominator())
		}
	}
	type localityKey struct {
		priority              uint32
		region, zone, subZone string
	}
	localities := map[localityKey]bool{}
	sums := map[uint32]uint64{}
	n := 0
	for _, lle := range cla.GetEndpoints() {
		for _, lb := range lle.GetLbEndpoints() {
			n += 1 + len(lb.GetEndpoint().GetAdditionalAddresses())
		}
	}
	addrs := takeAddrSet(n) // -> the locality and endpoint indexes holding it
	defer putAddrSet(addrs, n)
	for i, lle := range cla.GetEndpoints() {
		// Field names are built only for an error: this runs on every
		// endpoint of every EDS resource.
		f := func() string { return fmt.Sprintf("endpoints[%d]", i) }
		l := lle.GetLocality()
		if l == nil {
			return rejectf(f()+".locality", "missing")
		}
		// grpc-go drops a locality without a weight or of weight 0; its
		// endpoints would take no traffic.
		w := lle.GetLoadBalancingWeight()
		if w == nil || w.GetValue() == 0 {
			return rejectf(f()+".load_balancing_weight", "missing or 0: grpc-go drops the locality")
		}
		p := lle.GetPriority()
		if sums[p] += uint64(w.GetValue()); sums[p] > math.MaxUint32 {
			return rejectf(f()+".load_balancing_weight", "the locality weights of priority %d sum over %d", p, uint64(math.MaxUint32))
		}
		k := localityKey{p, l.GetRegion(), l.GetZone(), l.GetSubZone()}
		if localities[k] {
			return rejectf(f()+".locality", "%s/%s/%s appears twice at priority %d", k.region, k.zone, k.subZone, p)
		}
		localities[k] = true
		if lle.GetMetadata() != nil {
			return rejectf(f()+".metadata", "set: grpc-go parses it and spillway has no rule for it")
		}
		var sum uint64
		for j, lb := range lle.GetLbEndpoints() {
			ef := func() string { return fmt.Sprintf("%s.lb_endpoints[%d]", f(), j) }
			weight := uint64(1)
			if w := lb.GetLoadBalancingWeight(); w != nil {
				if w.GetValue() == 0 {
					return rejectf(ef()+".load_balancing_weight", "0")
				}
				weight = uint64(w.GetValue())
			}
			if sum += weight; sum > math.MaxUint32 {
				return rejectf(ef()+".load_balancing_weight", "the endpoint weights of the locality sum over %d", uint64(math.MaxUint32))
			}
			if lb.GetMetadata() != nil {
				return rejectf(ef()+".metadata", "set: grpc-go parses it and spillway has no rule for it")
			}
			ep := lb.GetEndpoint()
			if ep == nil {
				return rejectf(ef()+".endpoint", "missing")
			}
			extra := ep.GetAdditionalAddresses()
			for k := -1; k < len(extra); k++ {
				sa := ep.GetAddress().GetSocketAddress()
				af := func() string { return ef() + ".endpoint.address.socket_address" }
				if k >= 0 {
					sa = extra[k].GetAddress().GetSocketAddress()
					af = func() string {
						return fmt.Sprintf("%s.endpoint.additional_addresses[%d].address.socket_address", ef(), k)
					}
				}
				// grpc-go dials the address as written: spillway writes an
				// IP literal and a port.
				if _, err := netip.ParseAddr(sa.GetAddress()); err != nil || sa.GetPortValue() == 0 || sa.GetPortValue() > math.MaxUint16 {
					return rejectf(af(), "%q port %d: want an IP address and a port 1..65535", sa.GetAddress(), sa.GetPortValue())
				}
				// grpc-go compares host:port as written (parseAddress).
				key := addrKey{sa.GetAddress(), sa.GetPortValue()}
				if other, dup := addrs[key]; dup {
					return rejectf(af(), "%s is also endpoints[%d].lb_endpoints[%d]'s: grpc-go rejects duplicate addresses",
						netJoin(key.host, key.port), other[0], other[1])
				}
				addrs[key] = [2]int{i, j}
			}
		}
	}
	for p := range uint32(len(sums)) {
		if _, ok := sums[p]; !ok {
			return rejectf("endpoints", "priority %d missing (priorities must be 0..%d)", p, len(sums)-1)
		}
	}
	return nil
}

// addrKey is an address as grpc-go compares it: host and port as written.
type addrKey struct {
	host string
	port uint32
}

// addrSets keeps checkEDS's duplicate-address sets between checks, one
// pool per power of two of the addresses they were sized for, from
// minPooledAddrs up. Every build of a service's EDS is checked, and a map
// sized for a service of thousands of endpoints was most of a build's
// allocations (BenchmarkBuildEDS); grown one endpoint at a time instead,
// its rehashing was most of the check's time. Sets for fewer addresses
// are allocated each time: clearing a pooled map costs in proportion to
// its capacity, and a small one is cheap to make.
var addrSets [33]sync.Pool

const minPooledAddrs = 256

// takeAddrSet returns an empty set with room for n addresses.
func takeAddrSet(n int) map[addrKey][2]int {
	c := bits.Len(uint(n - 1)) // n <= 1<<c
	if n < minPooledAddrs || c >= len(addrSets) {
		return make(map[addrKey][2]int, n)
	}
	if m, ok := addrSets[c].Get().(map[addrKey][2]int); ok {
		return m
	}
	return make(map[addrKey][2]int, 1<<c)
}

// putAddrSet empties m, which takeAddrSet(n) returned, and keeps it for
// the next check of about n addresses. The set holds no string after.
func putAddrSet(m map[addrKey][2]int, n int) {
	c := bits.Len(uint(n - 1))
	if n < minPooledAddrs || c >= len(addrSets) {
		return
	}
	clear(m)
	addrSets[c].Put(m)
}

func netJoin(host string, port uint32) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// checkCDS: unmarshal_cds.go (validateClusterAndConstructClusterUpdate,
// securityConfigFromCluster, outlierConfigFromCluster) and
// xdslbregistry.ConvertToServiceConfig.
func checkCDS(c *v3clusterpb.Cluster) error {
	if c.GetName() == "" {
		return rejectf("name", "empty")
	}
	switch c.GetLbPolicy() {
	case v3clusterpb.Cluster_ROUND_ROBIN:
	case v3clusterpb.Cluster_RING_HASH:
		if c.GetRingHashLbConfig().GetHashFunction() != v3clusterpb.Cluster_RingHashLbConfig_XX_HASH {
			return rejectf("ring_hash_lb_config.hash_function", "%v, want XX_HASH", c.GetRingHashLbConfig().GetHashFunction())
		}
	case v3clusterpb.Cluster_LEAST_REQUEST:
		if cc := c.GetLeastRequestLbConfig().GetChoiceCount(); cc != nil && cc.GetValue() < 2 {
			return rejectf("least_request_lb_config.choice_count", "%d, want >= 2", cc.GetValue())
		}
	default:
		return rejectf("lb_policy", "%v: grpc-go knows ROUND_ROBIN, RING_HASH and LEAST_REQUEST", c.GetLbPolicy())
	}
	if len(c.GetTransportSocketMatches()) > 0 {
		return rejectf("transport_socket_matches", "set: grpc-go rejects it")
	}
	if c.GetTransportSocket() != nil {
		return rejectf("transport_socket", "set: grpc-go parses it and spillway has no rule for it")
	}
	if err := checkOutlierDetection(c.GetOutlierDetection()); err != nil {
		return err
	}
	if err := checkCircuitBreakers(c.GetCircuitBreakers()); err != nil {
		return err
	}
	if c.GetMetadata() != nil {
		return rejectf("metadata", "set: grpc-go parses it and spillway has no rule for it")
	}
	if lb := c.GetLoadBalancingPolicy(); lb != nil {
		if err := checkLBPolicy("load_balancing_policy", lb, 0); err != nil {
			return err
		}
	}
	if lrs := c.GetLrsServer(); lrs != nil && lrs.GetSelf() == nil {
		return rejectf("lrs_server", "%T: grpc-go accepts only self", lrs.GetConfigSourceSpecifier())
	}
	if c.GetType() != v3clusterpb.Cluster_EDS {
		return rejectf("type", "%v: spillway serves EDS clusters", c.GetType())
	}
	if src := c.GetEdsClusterConfig().GetEdsConfig(); src.GetAds() == nil && src.GetSelf() == nil {
		return rejectf("eds_cluster_config.eds_config", "not ADS or self")
	}
	if strings.HasPrefix(c.GetName(), "xdstp:") && c.GetEdsClusterConfig().GetServiceName() == "" {
		return rejectf("eds_cluster_config.service_name", "empty for an xdstp: cluster name")
	}
	return nil
}

// checkOutlierDetection: unmarshal_cds.go (outlierConfigFromCluster,
// gRFC A50), then spillway's rules for what grpc-go accepts but should
// not be sent: a zero interval (the sweep timer re-arms at once, a busy
// loop), an implicit enforcing_success_rate (unset turns success-rate
// ejection on), what Envoy alone would eject on, and thresholds that
// eject a service's only endpoint or judge endpoints on no requests.
func checkOutlierDetection(od *v3clusterpb.OutlierDetection) error {
	if od == nil {
		return nil
	}
	const f = "outlier_detection"
	durations := []struct {
		name string
		d    *durationpb.Duration
	}{{"interval", od.GetInterval()}, {"base_ejection_time", od.GetBaseEjectionTime()}, {"max_ejection_time", od.GetMaxEjectionTime()}}
	for _, d := range durations {
		if d.d == nil {
			continue
		}
		if err := d.d.CheckValid(); err != nil {
			return rejectf(f+"."+d.name, "%v", err)
		}
		if d.d.AsDuration() < 0 {
			return rejectf(f+"."+d.name, "%v: must be >= 0", d.d.AsDuration())
		}
	}
	percents := []struct {
		name string
		v    *wrapperspb.UInt32Value
	}{
		{"max_ejection_percent", od.GetMaxEjectionPercent()}, {"enforcing_success_rate", od.GetEnforcingSuccessRate()},
		{"failure_percentage_threshold", od.GetFailurePercentageThreshold()}, {"enforcing_failure_percentage", od.GetEnforcingFailurePercentage()},
	}
	for _, p := range percents {
		if p.v.GetValue() > 100 {
			return rejectf(f+"."+p.name, "%d: must be <= 100", p.v.GetValue())
		}
	}
	for _, d := range durations {
		if d.d != nil && d.d.AsDuration() == 0 {
			return rejectf(f+"."+d.name, "0: Envoy takes none at 0, and at an interval of 0 grpc-go sweeps without pause")
		}
	}
	if b, m := od.GetBaseEjectionTime(), od.GetMaxEjectionTime(); b != nil && m != nil && m.AsDuration() < b.AsDuration() {
		return rejectf(f+".max_ejection_time", "%v below base_ejection_time %v", m.AsDuration(), b.AsDuration())
	}
	if od.GetEnforcingSuccessRate() == nil {
		return rejectf(f+".enforcing_success_rate", "unset: success-rate ejection is on at 100%%; write 0 to leave it off")
	}
	if v := od.GetEnforcingConsecutive_5Xx(); v == nil || v.GetValue() > 0 {
		return rejectf(f+".enforcing_consecutive_5xx", "unset or above 0: Envoy would eject after consecutive 5xx, which gRPC clients never do; write 0")
	}
	if od.GetEnforcingConsecutiveGatewayFailure().GetValue() > 0 {
		return rejectf(f+".enforcing_consecutive_gateway_failure", "above 0: Envoy would eject on gateway failures, which gRPC clients never do")
	}
	if od.GetSplitExternalLocalOriginErrors() || od.GetMaxEjectionTimeJitter() != nil || od.GetSuccessfulActiveHealthCheckUnejectHost() != nil ||
		len(od.GetMonitors()) > 0 || od.GetAlwaysEjectOneHost() != nil || od.GetDetectDegradedHosts() != nil {
		return rejectf(f, "a field gRPC clients ignore is set (split_external_local_origin_errors, max_ejection_time_jitter, successful_active_health_check_uneject_host, monitors, always_eject_one_host, detect_degraded_hosts): Envoy would eject otherwise")
	}
	if od.GetEnforcingSuccessRate().GetValue() > 0 {
		if v := od.GetSuccessRateStdevFactor(); v != nil && (v.GetValue() < 1 || v.GetValue() > 10000) {
			return rejectf(f+".success_rate_stdev_factor", "%d thousandths: want 1..10000 (0.001..10)", v.GetValue())
		}
		if err := checkEjectionInputs(f+".success_rate", od.GetSuccessRateMinimumHosts(), od.GetSuccessRateRequestVolume()); err != nil {
			return err
		}
	}
	if od.GetEnforcingFailurePercentage().GetValue() > 0 {
		if err := checkEjectionInputs(f+".failure_percentage", od.GetFailurePercentageMinimumHosts(), od.GetFailurePercentageRequestVolume()); err != nil {
			return err
		}
	}
	return nil
}

// checkEjectionInputs: with fewer than 2 hosts judged, the first
// ejection passes max_ejection_percent and can take a service's only
// endpoint; with a request volume of 0, endpoints are judged on no
// requests.
func checkEjectionInputs(prefix string, hosts, volume *wrapperspb.UInt32Value) error {
	if hosts != nil && hosts.GetValue() < 2 {
		return rejectf(prefix+"_minimum_hosts", "%d: want >= 2, or a service's only endpoint may be ejected", hosts.GetValue())
	}
	if volume != nil && volume.GetValue() < 1 {
		return rejectf(prefix+"_request_volume", "0: endpoints would be judged on no requests")
	}
	return nil
}

// checkCircuitBreakers: unmarshal_cds.go (circuitBreakersFromCluster)
// reads max_requests of the first DEFAULT threshold only, and
// clusterimpl's picker fails every RPC with UNAVAILABLE while max_requests
// are in flight: spillway writes one DEFAULT threshold with max_requests
// of at least 1.
func checkCircuitBreakers(cb *v3clusterpb.CircuitBreakers) error {
	if cb == nil {
		return nil
	}
	ts := cb.GetThresholds()
	if len(ts) != 1 {
		return rejectf("circuit_breakers.thresholds", "%d thresholds, want one (DEFAULT): grpc-go reads only the first DEFAULT one", len(ts))
	}
	if p := ts[0].GetPriority(); p != v3corepb.RoutingPriority_DEFAULT {
		return rejectf("circuit_breakers.thresholds[0].priority", "%v: grpc-go ignores it, and allows 1024 requests", p)
	}
	if m := ts[0].GetMaxRequests(); m.GetValue() == 0 {
		return rejectf("circuit_breakers.thresholds[0].max_requests", "unset or 0: with 0 every RPC fails UNAVAILABLE")
	}
	return nil
}

// grpcBalancers are the balancer names of a stock grpc-go 1.85 client,
// which a TypedStruct's type_url may name (convertCustomPolicy).
var grpcBalancers = map[string]bool{
	"round_robin": true, "pick_first": true, "weighted_round_robin": true, "least_request_experimental": true,
	"ring_hash_experimental": true, "xds_wrr_locality_experimental": true,
}

// checkLBPolicy walks a load_balancing_policy as grpc-go does (gRFC A52):
// the first entry it knows wins, and must convert; there must be one.
// Envoy takes the first entry it knows too: a TypedStruct naming an Envoy
// policy must unpack into it, or Envoy rejects the Cluster, and a typed
// entry must pass the message's own constraints, which ValidateAll on the
// Cluster does not check inside an Any. depth is 0 at the top and grows
// inside wrr_locality.
func checkLBPolicy(field string, p *v3clusterpb.LoadBalancingPolicy, depth int) error {
	if depth > 15 {
		return rejectf(field, "nested deeper than 16")
	}
	chosen := false
	for i, pol := range p.GetPolicies() {
		f := fmt.Sprintf("%s.policies[%d].typed_extension_config", field, i)
		a := pol.GetTypedExtensionConfig().GetTypedConfig()
		if err := checkEnvoyTypedStruct(f, a); err != nil {
			return err
		}
		if !chosen {
			known, err := convertForGRPC(f, a, depth)
			if err != nil {
				return err
			}
			chosen = known
		}
		if err := checkTypedAny(f, a); err != nil {
			return err
		}
	}
	if !chosen {
		return rejectf(field, "no policy that grpc-go knows")
	}
	return nil
}

// Full names of the load balancing policies grpc-go converts
// (xdslbregistry/converter).
const (
	roundRobinName   = "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
	pickFirstName    = "envoy.extensions.load_balancing_policies.pick_first.v3.PickFirst"
	clientWRRName    = "envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin"
	ringHashName     = "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash"
	leastRequestName = "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest"
	wrrLocalityName  = "envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality"
)

// convertForGRPC reports whether grpc-go knows the policy a, and an error
// if it knows it and would reject its config (converter.go, then the
// balancer's ParseConfig), or spillway refuses it there (depth as for
// checkLBPolicy).
func convertForGRPC(field string, a *anypb.Any, depth int) (bool, error) {
	name := strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/")
	switch name {
	case pickFirstName:
		return true, nil
	case roundRobinName:
		return true, checkEndpointPicking(field, name, depth)
	case clientWRRName:
		w := &v3cswrrpb.ClientSideWeightedRoundRobin{}
		if err := proto.Unmarshal(a.GetValue(), w); err != nil {
			return true, rejectf(field, "client_side_weighted_round_robin: %v", err)
		}
		if err := checkClientWRR(field, w); err != nil {
			return true, err
		}
		return true, checkEndpointPicking(field, name, depth)
	case ringHashName:
		rh := &v3ringhashpb.RingHash{}
		if err := proto.Unmarshal(a.GetValue(), rh); err != nil {
			return true, rejectf(field, "ring_hash: %v", err)
		}
		return true, checkRingHash(field, rh, depth)
	case leastRequestName:
		lr := &v3leastrequestpb.LeastRequest{}
		if err := proto.Unmarshal(a.GetValue(), lr); err != nil {
			return true, rejectf(field, "least_request: %v", err)
		}
		if cc := lr.GetChoiceCount(); cc != nil && cc.GetValue() < 2 {
			return true, rejectf(field+".choice_count", "%d, want >= 2", cc.GetValue())
		}
		if cc := lr.GetChoiceCount(); cc != nil && cc.GetValue() > 10 {
			return true, rejectf(field+".choice_count", "%d: grpc-go takes at most 10 (A48)", cc.GetValue())
		}
		return true, checkEndpointPicking(field, name, depth)
	case wrrLocalityName:
		wl := &v3wrrlocalitypb.WrrLocality{}
		if err := proto.Unmarshal(a.GetValue(), wl); err != nil {
			return true, rejectf(field, "wrr_locality: %v", err)
		}
		return true, checkLBPolicy(field+".endpoint_picking_policy", wl.GetEndpointPickingPolicy(), depth+1)
	case "xds.type.v3.TypedStruct", "udpa.type.v1.TypedStruct":
		url, err := typedStructURL(a)
		if err != nil {
			return true, rejectf(field, "%v", err)
		}
		// A custom balancer the client may not have (spillway.wrr) is
		// skipped by those without it. A stock one gets the struct as
		// its JSON config, which its ParseConfig may reject: spillway
		// writes the typed policies instead, whose rules are here.
		if b := url[strings.LastIndex(url, "/")+1:]; grpcBalancers[b] {
			return true, rejectf(field, "a TypedStruct naming gRPC balancer %q: grpc-go parses the struct as its JSON config, which spillway has no rule for; write the typed policy", b)
		}
		return false, nil
	}
	return false, nil
}

// checkEndpointPicking: round_robin, least_request and
// client_side_weighted_round_robin pick an endpoint among all of the
// cluster's; chosen at the top rather than inside wrr_locality they
// ignore the locality weights, spillway's zone-aware routing.
func checkEndpointPicking(field, name string, depth int) error {
	if depth == 0 {
		return rejectf(field, "%s at the top: grpc-go ignores the locality weights; put it inside wrr_locality", name[strings.LastIndex(name, ".")+1:])
	}
	return nil
}

// ringHashMax is the largest ring grpc-go and Envoy build.
const ringHashMax = 8 << 20

// checkRingHash: converter.go (convertRingHashProtoToServiceConfig) and
// ringhash/config.go (parseConfig); at the top only.
func checkRingHash(field string, rh *v3ringhashpb.RingHash, depth int) error {
	if rh.GetHashFunction() != v3ringhashpb.RingHash_XX_HASH {
		return rejectf(field+".hash_function", "%v, want XX_HASH", rh.GetHashFunction())
	}
	lo, hi := rh.GetMinimumRingSize().GetValue(), rh.GetMaximumRingSize().GetValue()
	if lo > ringHashMax {
		return rejectf(field+".minimum_ring_size", "%d: at most %d", lo, ringHashMax)
	}
	if hi > ringHashMax {
		return rejectf(field+".maximum_ring_size", "%d: at most %d", hi, ringHashMax)
	}
	if lo > 0 && hi > 0 && lo > hi {
		return rejectf(field+".minimum_ring_size", "%d above maximum_ring_size %d", lo, hi)
	}
	if depth > 0 {
		return rejectf(field, "ring_hash inside wrr_locality: one ring per locality, so a key's endpoint depends on the locality drawn; put it at the top")
	}
	return nil
}

// checkClientWRR: converter.go (convertWeightedRoundRobinProtoToServiceConfig)
// and weightedroundrobin/balancer.go (ParseConfig). grpc-go reads 0 as
// the default (the JSON omits it), clamps the update period and takes
// negative periods, so spillway writes every field within range.
func checkClientWRR(field string, w *v3cswrrpb.ClientSideWeightedRoundRobin) error {
	p := w.GetErrorUtilizationPenalty()
	if p != nil && p.GetValue() < 0 {
		return rejectf(field+".error_utilization_penalty", "%v: must be non-negative", p.GetValue())
	}
	if !(p.GetValue() > 0 && p.GetValue() <= 10) { // NaN too
		return rejectf(field+".error_utilization_penalty", "unset or %v: grpc-go reads 0 as 1; want (0, 10]", p.GetValue())
	}
	blackout, expiry := w.GetBlackoutPeriod(), w.GetWeightExpirationPeriod()
	if blackout.AsDuration() <= 0 {
		return rejectf(field+".blackout_period", "unset or %v: grpc-go reads 0 as 10s and takes a negative one; want > 0", blackout.AsDuration())
	}
	if expiry.AsDuration() < blackout.AsDuration() {
		return rejectf(field+".weight_expiration_period", "%v below blackout_period %v: every weight would be stale", expiry.AsDuration(), blackout.AsDuration())
	}
	if u := w.GetWeightUpdatePeriod().AsDuration(); u < 100*time.Millisecond {
		return rejectf(field+".weight_update_period", "unset or %v: grpc-go takes at least 100ms", u)
	}
	if w.GetEnableOobLoadReport().GetValue() && w.GetOobReportingPeriod().AsDuration() < 30*time.Second {
		return rejectf(field+".oob_reporting_period", "%v: grpc-go servers report no more often than every 30s", w.GetOobReportingPeriod().AsDuration())
	}
	return nil
}

// checkTypedAny: a typed config (not a TypedStruct) of a message this
// binary knows must pass the message's own constraints, as the client
// that unpacks it checks them (Envoy; PGV does not look inside an Any).
func checkTypedAny(field string, a *anypb.Any) error {
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl())
	if err != nil {
		return nil
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		return rejectf(field, "%s: %v", a.GetTypeUrl(), err)
	}
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return rejectf(field, "%v", err)
		}
	}
	return nil
}

func typedStructURL(a *anypb.Any) (string, error) {
	switch strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/") {
	case "xds.type.v3.TypedStruct":
		ts := &v3xdstypepb.TypedStruct{}
		if err := proto.Unmarshal(a.GetValue(), ts); err != nil {
			return "", err
		}
		return ts.GetTypeUrl(), nil
	case "udpa.type.v1.TypedStruct":
		ts := &v1udpatypepb.TypedStruct{}
		if err := proto.Unmarshal(a.GetValue(), ts); err != nil {
			return "", err
		}
		return ts.GetTypeUrl(), nil
	}
	return "", nil
}

// checkEnvoyTypedStruct: Envoy unpacks a TypedStruct naming a message it
// has (Config::Utility::translateOpaqueConfig) and rejects the resource
// if the struct does not convert or validate.
func checkEnvoyTypedStruct(field string, a *anypb.Any) error {
	if name := strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/"); name != "xds.type.v3.TypedStruct" {
		return nil
	}
	ts := &v3xdstypepb.TypedStruct{}
	if err := proto.Unmarshal(a.GetValue(), ts); err != nil {
		return rejectf(field, "TypedStruct: %v", err)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(ts.GetTypeUrl())
	if err != nil {
		return nil // not an Envoy message (spillway.wrr): Envoy skips it
	}
	js, err := protojson.Marshal(ts.GetValue())
	if err != nil {
		return rejectf(field, "TypedStruct value: %v", err)
	}
	m := mt.New().Interface()
	if err := protojson.Unmarshal(js, m); err != nil {
		return rejectf(field, "TypedStruct value does not convert to %s: %v", ts.GetTypeUrl(), err)
	}
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return rejectf(field, "TypedStruct value as %s: %v", ts.GetTypeUrl(), err)
		}
	}
	return nil
}

// The HTTP filters grpc-go's client knows that spillway uses: the
// router, the one terminal filter, and the fault filter.
var (
	routerURL = "type.googleapis.com/" + string((&v3routerpb.Router{}).ProtoReflect().Descriptor().FullName())
	faultURL  = "type.googleapis.com/" + string((&v3faultpb.HTTPFault{}).ProtoReflect().Descriptor().FullName())
)

// checkFault: a fault filter's config (override: a route's or virtual
// host's, which must inject something; else the Listener's base config).
// grpc-go's fault filter (httpfilter/fault, parseConfig) takes only a
// typed HTTPFault and checks nothing inside it; spillway's rules are
// what it would misread: Envoy's constraints (PGV: a delay of 0 or an
// HTTP status outside 200..599 is none), a chance above the whole (read
// as always), gRPC status 0 (the RPC ends OK) or above 16 (UNKNOWN),
// max_active_faults 0 (the filter is off) and the fields grpc-go ignores,
// headers first (spillway gates a fault with routes instead).
func checkFault(field string, a *anypb.Any, override bool) error {
	if u, _ := typedStructURL(a); u != "" {
		return rejectf(field, "a TypedStruct: grpc-go's fault filter takes only a typed HTTPFault")
	}
	h := &v3faultpb.HTTPFault{}
	if err := proto.Unmarshal(a.GetValue(), h); err != nil {
		return rejectf(field, "HTTPFault: %v", err)
	}
	if err := h.ValidateAll(); err != nil {
		return rejectf(field, "%v", err)
	}
	if len(h.GetHeaders()) > 0 || h.GetUpstreamCluster() != "" || len(h.GetDownstreamNodes()) > 0 || h.GetResponseRateLimit() != nil {
		return rejectf(field+".headers", "headers, upstream_cluster, downstream_nodes or response_rate_limit set: grpc-go ignores them (Envoy does not): gate a fault with a route instead")
	}
	if override && h.GetDelay() == nil && h.GetAbort() == nil {
		return rejectf(field, "neither delay nor abort: it injects nothing")
	}
	if m := h.GetMaxActiveFaults(); m != nil && m.GetValue() == 0 {
		return rejectf(field+".max_active_faults", "0: the filter is off")
	}
	if d := h.GetDelay(); d != nil {
		if err := checkChance(field+".delay.percentage", d.GetPercentage()); err != nil {
			return err
		}
	}
	if ab := h.GetAbort(); ab != nil {
		if g, ok := ab.GetErrorType().(*v3faultpb.FaultAbort_GrpcStatus); ok && (g.GrpcStatus < 1 || g.GrpcStatus > 16) {
			return rejectf(field+".abort.grpc_status", "%d: want 1..16 (0 ends the RPC OK, above 16 is UNKNOWN)", g.GrpcStatus)
		}
		if err := checkChance(field+".abort.percentage", ab.GetPercentage()); err != nil {
			return err
		}
	}
	return nil
}

// checkChance: a fault's chance is set (Envoy and gRPC read an unset one
// apart), and no more than the whole (gRPC reads more as always).
func checkChance(field string, p *v3typepb.FractionalPercent) error {
	if p == nil {
		return rejectf(field, "unset")
	}
	whole := map[v3typepb.FractionalPercent_DenominatorType]uint32{
		v3typepb.FractionalPercent_HUNDRED: 100, v3typepb.FractionalPercent_TEN_THOUSAND: 10000, v3typepb.FractionalPercent_MILLION: 1000000,
	}[p.GetDenominator()]
	if p.GetNumerator() > whole {
		return rejectf(field, "%d over %v: more than the whole", p.GetNumerator(), p.GetDenominator())
	}
	return nil
}

// checkFilterOverrides: unmarshal_lds.go (processHTTPFilterOverrides,
// validateHTTPFilterConfig): an override (optionally in a FilterConfig)
// must be of a filter grpc-go has, unless optional; spillway writes only
// the fault filter's, under its name (an override named for no filter of
// the Listener is unused), and refuses optional ones it has no rule for.
func checkFilterOverrides(field string, m map[string]*anypb.Any) error {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		f := fmt.Sprintf("%s.typed_per_filter_config[%q]", field, name)
		a, optional := m[name], false
		if fc := (&v3routepb.FilterConfig{}); a.MessageIs(fc) {
			if err := a.UnmarshalTo(fc); err != nil {
				return rejectf(f, "FilterConfig: %v", err)
			}
			a, optional = fc.GetConfig(), fc.GetIsOptional()
		}
		url := a.GetTypeUrl()
		if u, err := typedStructURL(a); err != nil {
			return rejectf(f, "%v", err)
		} else if u != "" {
			url = u
		}
		switch {
		case url == faultURL && name != faultFilter:
			return rejectf(f, "a fault override not named %q, the fault filter's name: unused", faultFilter)
		case url == faultURL:
			if err := checkFault(f, a, true); err != nil {
				return err
			}
		case optional:
			return rejectf(f, "an optional override of %q: grpc-go skips it, and spillway has no rule for it", url)
		default:
			return rejectf(f, "%q: no filter grpc-go knows takes it", url)
		}
	}
	return nil
}

// retryCodes are the retry_on conditions grpc-go reads (generateRetryConfig).
var retryCodes = map[string]bool{"cancelled": true, "deadline-exceeded": true, "internal": true, "resource-exhausted": true, "unavailable": true}

// checkRetryPolicy: unmarshal_rds.go (generateRetryConfig), then
// spillway's rules (A44, which grpc-go's xDS path does not enforce): only
// conditions grpc-go reads, and at least one (a policy of none means no
// retries, and shadows the virtual host's), at most 4 retries (grpc-go
// does not cap attempts at 5 here), a base interval of at least 1 ms and
// a max interval no less than the base.
func checkRetryPolicy(field string, rp *v3routepb.RetryPolicy) error {
	if rp == nil {
		return nil
	}
	n := rp.GetNumRetries()
	if n != nil && n.GetValue() < 1 {
		return rejectf(field+".num_retries", "%d: must be >= 1", n.GetValue())
	}
	bo := rp.GetRetryBackOff()
	base := bo.GetBaseInterval().AsDuration()
	if bo != nil && base <= 0 {
		return rejectf(field+".retry_back_off.base_interval", "unset or %v: must be > 0", base)
	}
	if mx := bo.GetMaxInterval(); mx != nil && mx.AsDuration() <= 0 {
		return rejectf(field+".retry_back_off.max_interval", "%v: must be > 0", mx.AsDuration())
	}
	for _, c := range strings.Split(rp.GetRetryOn(), ",") {
		if !retryCodes[c] {
			return rejectf(field+".retry_on", "%q: want a comma-separated list of cancelled, deadline-exceeded, internal, resource-exhausted, unavailable (grpc-go ignores the rest, and retries on none)", rp.GetRetryOn())
		}
	}
	if n.GetValue() > 4 {
		return rejectf(field+".num_retries", "%d: at most 4 (A44: 5 attempts)", n.GetValue())
	}
	if bo != nil && base < time.Millisecond {
		return rejectf(field+".retry_back_off.base_interval", "%v: at least 1ms (A44)", base)
	}
	if mx := bo.GetMaxInterval(); mx != nil && mx.AsDuration() < base {
		return rejectf(field+".retry_back_off.max_interval", "%v below base_interval %v", mx.AsDuration(), base)
	}
	return nil
}

// checkMaxStreamDuration: grpc-go caps a deadline with
// grpc_timeout_header_max, else max_stream_duration (routesProtoToSlice)
// and checks neither: a negative one fails every RPC at once. Envoy reads
// grpc_timeout_header_max only for RPCs that carry a deadline, so the two
// must be equal for both to cap alike.
func checkMaxStreamDuration(field string, msd *v3routepb.RouteAction_MaxStreamDuration) error {
	if msd == nil {
		return nil
	}
	for _, d := range []struct {
		name string
		d    *durationpb.Duration
	}{{"max_stream_duration", msd.GetMaxStreamDuration()}, {"grpc_timeout_header_max", msd.GetGrpcTimeoutHeaderMax()}} {
		if d.d == nil {
			continue
		}
		if err := d.d.CheckValid(); err != nil || d.d.AsDuration() < 0 {
			return rejectf(field+"."+d.name, "%v: want >= 0 (grpc-go fails every RPC at once on a negative one)", d.d.AsDuration())
		}
	}
	if a, b := msd.GetMaxStreamDuration(), msd.GetGrpcTimeoutHeaderMax(); a != nil && b != nil && a.AsDuration() != b.AsDuration() {
		return rejectf(field, "max_stream_duration %v and grpc_timeout_header_max %v differ: Envoy and gRPC would cap RPCs apart", a.AsDuration(), b.AsDuration())
	}
	return nil
}

// checkHashPolicies: unmarshal_rds.go (hashPoliciesProtoToSlice): an
// invalid regex_rewrite is rejected; the policies grpc-go skips (cookie,
// connection_properties, query_parameter, filter_state of another key),
// and a header it never sees (empty, binary), give no hash, hence a
// random endpoint.
func checkHashPolicies(field string, hps []*v3routepb.RouteAction_HashPolicy) error {
	for i, hp := range hps {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch p := hp.GetPolicySpecifier().(type) {
		case *v3routepb.RouteAction_HashPolicy_Header_:
			if rr := p.Header.GetRegexRewrite(); rr != nil {
				if _, err := regexp.Compile(rr.GetPattern().GetRegex()); err != nil {
					return rejectf(f+".header.regex_rewrite", "%v", err)
				}
			}
			if n := p.Header.GetHeaderName(); n == "" || strings.HasSuffix(n, "-bin") {
				return rejectf(f+".header.header_name", "%q: grpc-go never hashes it (no hash: a random endpoint)", n)
			}
		case *v3routepb.RouteAction_HashPolicy_FilterState_:
			if k := p.FilterState.GetKey(); k != "io.grpc.channel_id" {
				return rejectf(f+".filter_state.key", "%q: grpc-go skips it (no hash: a random endpoint)", k)
			}
		default:
			return rejectf(f, "%T: grpc-go skips it (no hash: a random endpoint)", p)
		}
	}
	return nil
}

// checkLDS: unmarshal_lds.go (processClientSideListener,
// processHTTPFilters).
func checkLDS(l *v3listenerpb.Listener) error {
	if l.GetName() == "" {
		return rejectf("name", "empty")
	}
	api := l.GetApiListener().GetApiListener()
	if api == nil {
		return rejectf("api_listener", "missing: a gRPC client takes only API listeners")
	}
	hcmURL := "type.googleapis.com/" + string((&v3hcmpb.HttpConnectionManager{}).ProtoReflect().Descriptor().FullName())
	if api.GetTypeUrl() != hcmURL {
		return rejectf("api_listener.api_listener", "type %q, want %s", api.GetTypeUrl(), hcmURL)
	}
	hcm := &v3hcmpb.HttpConnectionManager{}
	if err := proto.Unmarshal(api.GetValue(), hcm); err != nil {
		return rejectf("api_listener.api_listener", "%v", err)
	}
	const hf = "api_listener.http_connection_manager"
	if hcm.GetXffNumTrustedHops() != 0 {
		return rejectf(hf+".xff_num_trusted_hops", "%d, want 0", hcm.GetXffNumTrustedHops())
	}
	if len(hcm.GetOriginalIpDetectionExtensions()) > 0 {
		return rejectf(hf+".original_ip_detection_extensions", "set")
	}
	switch rs := hcm.GetRouteSpecifier().(type) {
	case *v3hcmpb.HttpConnectionManager_Rds:
		if src := rs.Rds.GetConfigSource(); src.GetAds() == nil && src.GetSelf() == nil {
			return rejectf(hf+".rds.config_source", "not ADS or self")
		}
		if rs.Rds.GetRouteConfigName() == "" {
			return rejectf(hf+".rds.route_config_name", "empty")
		}
	case *v3hcmpb.HttpConnectionManager_RouteConfig:
		if err := checkRDS(rs.RouteConfig); err != nil {
			return fmt.Errorf("%s.route_config: %w", hf, err)
		}
	default:
		return rejectf(hf+".route_specifier", "%T: want rds or route_config", rs)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) == 0 {
		return rejectf(hf+".http_filters", "empty")
	}
	seen := map[string]bool{}
	var urls []string
	for i, f := range filters {
		ff := fmt.Sprintf("%s.http_filters[%d]", hf, i)
		if f.GetName() == "" {
			return rejectf(ff+".name", "empty")
		}
		if seen[f.GetName()] {
			return rejectf(ff+".name", "duplicate %q", f.GetName())
		}
		seen[f.GetName()] = true
		url := f.GetTypedConfig().GetTypeUrl()
		if u, err := typedStructURL(f.GetTypedConfig()); err != nil {
			return rejectf(ff+".typed_config", "%v", err)
		} else if u != "" {
			url = u
		}
		switch url {
		case routerURL:
		case faultURL:
			if err := checkFault(ff+".typed_config", f.GetTypedConfig(), false); err != nil {
				return err
			}
		default:
			if !f.GetIsOptional() {
				return rejectf(ff+".typed_config", "%q: spillway knows no rule for it, and an unknown filter is rejected", url)
			}
			continue // an optional filter grpc-go does not know is skipped
		}
		urls = append(urls, url)
	}
	if len(urls) == 0 {
		return rejectf(hf+".http_filters", "no filter grpc-go knows")
	}
	// Then, as grpc-go does after the loop: the terminal filter last,
	// and only there.
	for i, url := range urls {
		ff := fmt.Sprintf("%s.http_filters[%d]", hf, i)
		last := i == len(urls)-1
		switch {
		case url == routerURL && !last:
			return rejectf(ff, "the router is terminal and must be last")
		case url != routerURL && last:
			return rejectf(ff, "%q is last, but only the router is terminal", url)
		}
	}
	return nil
}

// checkRDS: unmarshal_rds.go (generateRDSUpdateFromRouteConfiguration,
// routesProtoToSlice, generateRetryConfig), and the xDS resolver, which
// fails every RPC when no virtual host matches the target.
func checkRDS(rc *v3routepb.RouteConfiguration) error {
	if rc.GetName() == "" {
		return rejectf("name", "empty")
	}
	if len(rc.GetClusterSpecifierPlugins()) > 0 {
		return rejectf("cluster_specifier_plugins", "set: spillway has no rule for them")
	}
	matched := false
	for i, vh := range rc.GetVirtualHosts() {
		vf := fmt.Sprintf("virtual_hosts[%d]", i)
		for _, d := range vh.GetDomains() {
			if d == "*" || strings.EqualFold(d, rc.GetName()) {
				matched = true
			}
		}
		if err := checkFilterOverrides(vf, vh.GetTypedPerFilterConfig()); err != nil {
			return err
		}
		if err := checkRetryPolicy(vf+".retry_policy", vh.GetRetryPolicy()); err != nil {
			return err
		}
		if len(vh.GetRoutes()) == 0 {
			return rejectf(vf+".routes", "empty: every RPC would fail")
		}
		for j, r := range vh.GetRoutes() {
			if err := checkRoute(fmt.Sprintf("%s.routes[%d]", vf, j), r); err != nil {
				return err
			}
		}
	}
	if !matched {
		return rejectf("virtual_hosts", "no domain matches %q: every RPC to it would fail", rc.GetName())
	}
	return nil
}

func checkRoute(f string, r *v3routepb.Route) error {
	m := r.GetMatch()
	if m == nil {
		return rejectf(f+".match", "missing")
	}
	switch ps := m.GetPathSpecifier().(type) {
	case *v3routepb.RouteMatch_Prefix, *v3routepb.RouteMatch_Path:
	case *v3routepb.RouteMatch_SafeRegex:
		if _, err := regexp.Compile(ps.SafeRegex.GetRegex()); err != nil {
			return rejectf(f+".match.safe_regex", "%v", err)
		}
	default:
		return rejectf(f+".match.path_specifier", "%T: want prefix, path or safe_regex", ps)
	}
	if len(m.GetQueryParameters()) > 0 {
		return rejectf(f+".match.query_parameters", "set: grpc-go ignores the route and spillway has no rule for them")
	}
	if m.GetRuntimeFraction() != nil {
		return rejectf(f+".match.runtime_fraction", "set: spillway has no rule for it")
	}
	for k, h := range m.GetHeaders() {
		if err := checkHeaderMatcher(fmt.Sprintf("%s.match.headers[%d]", f, k), h); err != nil {
			return err
		}
	}
	if err := checkFilterOverrides(f, r.GetTypedPerFilterConfig()); err != nil {
		return err
	}
	a, ok := r.GetAction().(*v3routepb.Route_Route)
	if !ok {
		return rejectf(f+".action", "%T: grpc-go fails RPCs on any action but route", r.GetAction())
	}
	if err := checkRetryPolicy(f+".route.retry_policy", a.Route.GetRetryPolicy()); err != nil {
		return err
	}
	if err := checkHashPolicies(f+".route.hash_policy", a.Route.GetHashPolicy()); err != nil {
		return err
	}
	if err := checkMaxStreamDuration(f+".route.max_stream_duration", a.Route.GetMaxStreamDuration()); err != nil {
		return err
	}
	switch cs := a.Route.GetClusterSpecifier().(type) {
	case *v3routepb.RouteAction_Cluster:
		if cs.Cluster == "" {
			return rejectf(f+".route.cluster", "empty")
		}
	case *v3routepb.RouteAction_WeightedClusters:
		var total uint64
		for k, c := range cs.WeightedClusters.GetClusters() {
			if c.GetName() == "" {
				return rejectf(fmt.Sprintf("%s.route.weighted_clusters.clusters[%d].name", f, k), "empty")
			}
			if total += uint64(c.GetWeight().GetValue()); total > math.MaxUint32 {
				return rejectf(f+".route.weighted_clusters", "weights sum over %d", uint64(math.MaxUint32))
			}
			if err := checkFilterOverrides(fmt.Sprintf("%s.route.weighted_clusters.clusters[%d]", f, k), c.GetTypedPerFilterConfig()); err != nil {
				return err
			}
		}
		if total == 0 {
			return rejectf(f+".route.weighted_clusters", "no cluster of weight > 0")
		}
	default:
		return rejectf(f+".route.cluster_specifier", "%T: want cluster or weighted_clusters", cs)
	}
	return nil
}

// checkHeaderMatcher: unmarshal_rds.go (routesProtoToSlice, the header
// matchers) and matcher.StringMatcherFromProto. spillway writes
// string_match (exact, prefix, safe_regex), present_match and
// safe_regex_match, on lowercase names, not inverted; the rest it has no
// rule for.
func checkHeaderMatcher(f string, h *v3routepb.HeaderMatcher) error {
	name := h.GetName()
	switch {
	case name == "":
		return rejectf(f+".name", "empty: grpc-go matches no header")
	case name != strings.ToLower(name):
		return rejectf(f+".name", "%q has uppercase: gRPC metadata keys are lowercase", name)
	case strings.HasSuffix(name, "-bin"):
		return rejectf(f+".name", "%q: grpc-go never matches binary headers", name)
	}
	if h.GetInvertMatch() || h.GetTreatMissingHeaderAsEmpty() {
		return rejectf(f, "invert_match or treat_missing_header_as_empty: spillway has no rule for them")
	}
	switch ms := h.GetHeaderMatchSpecifier().(type) {
	case *v3routepb.HeaderMatcher_PresentMatch:
		if !ms.PresentMatch {
			return rejectf(f+".present_match", "false: spillway has no rule for it")
		}
	case *v3routepb.HeaderMatcher_SafeRegexMatch:
		if _, err := regexp.Compile(ms.SafeRegexMatch.GetRegex()); err != nil {
			return rejectf(f+".safe_regex_match", "%v", err)
		}
	case *v3routepb.HeaderMatcher_StringMatch:
		sm := ms.StringMatch
		if sm == nil {
			return rejectf(f+".string_match", "missing")
		}
		if sm.GetIgnoreCase() {
			return rejectf(f+".string_match.ignore_case", "set: spillway has no rule for it")
		}
		switch p := sm.GetMatchPattern().(type) {
		case *v3matcherpb.StringMatcher_Exact:
		case *v3matcherpb.StringMatcher_Prefix:
			if p.Prefix == "" {
				return rejectf(f+".string_match.prefix", "empty")
			}
		case *v3matcherpb.StringMatcher_SafeRegex:
			if _, err := regexp.Compile(p.SafeRegex.GetRegex()); err != nil {
				return rejectf(f+".string_match.safe_regex", "%v", err)
			}
		default:
			return rejectf(f+".string_match.match_pattern", "%T: want exact, prefix or safe_regex", p)
		}
	default:
		return rejectf(f+".header_match_specifier", "%T: want string_match, present_match or safe_regex_match", ms)
	}
	return nil
}

// Keep the Envoy policy messages that checkEnvoyTypedStruct looks up by
// name in the binary.
var _ = []proto.Message{&v3roundrobinpb.RoundRobin{}, &v3wrrlocalitypb.WrrLocality{}}

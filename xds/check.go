package xds

// What a client would reject, checked before a resource is published.
//
// grpc-go rejects (NACKs) a whole response when one resource in it breaks
// one of its rules, and keeps what it had, or nothing. The rules below are
// those of grpc-go 1.85's parsers (internal/xds/xdsclient/xdsresource:
// unmarshal_eds.go, unmarshal_cds.go, unmarshal_lds.go, unmarshal_rds.go,
// and the load balancing policy converters in
// internal/xds/xdsclient/xdslbregistry) that could apply to what spillway
// emits, plus what Envoy needs of the policy spillway writes for it. Where
// grpc-go only ignores a part (a locality of weight 0, an unknown route
// action), spillway treats it as an error too: it never means to send a
// part that a client drops. Fields spillway never sets and whose content
// grpc-go parses (TLS, outlier detection, retry policies, filter
// overrides, metadata) must stay unset: setting one must come with its
// rule here.
//
// Each rule is tested in check_test.go with a resource that breaks it,
// and check_grpc_test.go serves each such resource to a real grpc-go
// client: it NACKs all but those listed there (spillwayOnly), which it
// accepts and then drops or fails on.

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	v1udpatypepb "github.com/cncf/xds/go/udpa/type/v1"
	v3xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	v3hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	v3leastrequestpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	v3ringhashpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	v3roundrobinpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	v3wrrlocalitypb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	v3matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
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
	type addrKey struct {
		host string
		port uint32
	}
	addrs := map[addrKey][2]int{} // -> the locality and endpoint indexes holding it
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
	if c.GetOutlierDetection() != nil {
		return rejectf("outlier_detection", "set: grpc-go range-checks it and spillway has no rule for it")
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

// grpcBalancers are the balancer names of a stock grpc-go 1.85 client,
// which a TypedStruct's type_url may name (convertCustomPolicy).
var grpcBalancers = map[string]bool{
	"round_robin": true, "pick_first": true, "weighted_round_robin": true, "least_request_experimental": true,
	"ring_hash_experimental": true, "xds_wrr_locality_experimental": true,
}

// checkLBPolicy walks a load_balancing_policy as grpc-go does (gRFC A52):
// the first entry it knows wins, and must convert; there must be one.
// Envoy takes the first entry it knows too: a TypedStruct naming an Envoy
// policy must unpack into it, or Envoy rejects the Cluster.
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
		if chosen {
			continue
		}
		known, err := convertForGRPC(f, a, depth)
		if err != nil {
			return err
		}
		chosen = known
	}
	if !chosen {
		return rejectf(field, "no policy that grpc-go knows")
	}
	return nil
}

// convertForGRPC reports whether grpc-go knows the policy a, and an error
// if it knows it and would reject its config.
func convertForGRPC(field string, a *anypb.Any, depth int) (bool, error) {
	name := strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/")
	switch name {
	case "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
		"envoy.extensions.load_balancing_policies.pick_first.v3.PickFirst",
		"envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin":
		return true, nil
	case "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash":
		rh := &v3ringhashpb.RingHash{}
		if err := proto.Unmarshal(a.GetValue(), rh); err != nil {
			return true, rejectf(field, "ring_hash: %v", err)
		}
		if rh.GetHashFunction() != v3ringhashpb.RingHash_XX_HASH {
			return true, rejectf(field+".hash_function", "%v, want XX_HASH", rh.GetHashFunction())
		}
		return true, nil
	case "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest":
		lr := &v3leastrequestpb.LeastRequest{}
		if err := proto.Unmarshal(a.GetValue(), lr); err != nil {
			return true, rejectf(field, "least_request: %v", err)
		}
		if cc := lr.GetChoiceCount(); cc != nil && cc.GetValue() < 2 {
			return true, rejectf(field+".choice_count", "%d, want >= 2", cc.GetValue())
		}
		return true, nil
	case "envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality":
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
		// skipped by those without it; only stock balancers count.
		return grpcBalancers[url[strings.LastIndex(url, "/")+1:]], nil
	}
	return false, nil
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

// The HTTP filter grpc-go's client knows that spillway uses, and the one
// terminal filter.
var routerURL = "type.googleapis.com/" + string((&v3routerpb.Router{}).ProtoReflect().Descriptor().FullName())

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
		if url != routerURL {
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
		if len(vh.GetTypedPerFilterConfig()) > 0 {
			return rejectf(vf+".typed_per_filter_config", "set: spillway has no rule for it")
		}
		if vh.GetRetryPolicy() != nil {
			return rejectf(vf+".retry_policy", "set: grpc-go range-checks it and spillway has no rule for it")
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
	if len(r.GetTypedPerFilterConfig()) > 0 {
		return rejectf(f+".typed_per_filter_config", "set: spillway has no rule for it")
	}
	a, ok := r.GetAction().(*v3routepb.Route_Route)
	if !ok {
		return rejectf(f+".action", "%T: grpc-go fails RPCs on any action but route", r.GetAction())
	}
	if a.Route.GetRetryPolicy() != nil || len(a.Route.GetHashPolicy()) > 0 {
		return rejectf(f+".route", "retry or hash policy: spillway has no rule for them")
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

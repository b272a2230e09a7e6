package xds

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	v3routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	v3hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/svcconfig"
)

// Type URLs of the resources served.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// typeIndex numbers the four types for per-type arrays.
func typeIndex(typeURL string) int {
	switch typeURL {
	case ListenerType:
		return 0
	case RouteType:
		return 1
	case ClusterType:
		return 2
	case EndpointType:
		return 3
	}
	return -1
}

var typeURLs = [4]string{ListenerType, RouteType, ClusterType, EndpointType}

// shortType names a type URL in logs and metrics.
func shortType(typeURL string) string {
	switch typeURL {
	case ListenerType:
		return "LDS"
	case RouteType:
		return "RDS"
	case ClusterType:
		return "CDS"
	case EndpointType:
		return "EDS"
	}
	return "unknown"
}

var adsSource = &v3corepb.ConfigSource{
	ConfigSourceSpecifier: &v3corepb.ConfigSource_Ads{Ads: &v3corepb.AggregatedConfigSource{}},
	ResourceApiVersion:    v3corepb.ApiVersion_V3,
}

// listener builds Listener S: an API listener whose HttpConnectionManager
// fetches RouteConfiguration S over ADS, with the router filter that gRPC
// requires last.
func listener(service string) (*v3listenerpb.Listener, error) {
	return listenerFor(service, svcconfig.Resilience{})
}

// listenerFor is listener with policy r: a service with a fault gets the
// fault filter before the router, with an empty config that injects
// nothing (the route configuration carries the fault as an override).
func listenerFor(service string, r svcconfig.Resilience) (*v3listenerpb.Listener, error) {
	router, err := anypb.New(&v3routerpb.Router{})
	if err != nil {
		return nil, err
	}
	filters := []*v3hcmpb.HttpFilter{{
		Name:       "envoy.filters.http.router",
		ConfigType: &v3hcmpb.HttpFilter_TypedConfig{TypedConfig: router},
	}}
	if r.Fault != nil {
		fault := &v3hcmpb.HttpFilter{Name: faultFilter, ConfigType: &v3hcmpb.HttpFilter_TypedConfig{TypedConfig: pack(&v3faultpb.HTTPFault{})}}
		filters = append([]*v3hcmpb.HttpFilter{fault}, filters...)
	}
	hcm, err := anypb.New(&v3hcmpb.HttpConnectionManager{
		StatPrefix: service,
		RouteSpecifier: &v3hcmpb.HttpConnectionManager_Rds{Rds: &v3hcmpb.Rds{
			ConfigSource:    adsSource,
			RouteConfigName: service,
		}},
		HttpFilters: filters,
	})
	if err != nil {
		return nil, err
	}
	return &v3listenerpb.Listener{
		Name:        service,
		ApiListener: &v3listenerpb.ApiListener{ApiListener: hcm},
	}, nil
}

// route builds RouteConfiguration S: one virtual host sending everything to
// cluster S.
func route(service string) *v3routepb.RouteConfiguration {
	return routeFor(service, svcconfig.Resilience{})
}

// routeFor is route with policy r (withPolicy).
func routeFor(service string, r svcconfig.Resilience) *v3routepb.RouteConfiguration {
	rc := &v3routepb.RouteConfiguration{
		Name: service,
		VirtualHosts: []*v3routepb.VirtualHost{{
			Name:    service,
			Domains: []string{"*"},
			Routes: []*v3routepb.Route{{
				Match: &v3routepb.RouteMatch{PathSpecifier: &v3routepb.RouteMatch_Prefix{Prefix: ""}},
				Action: &v3routepb.Route_Route{Route: &v3routepb.RouteAction{
					ClusterSpecifier: &v3routepb.RouteAction_Cluster{Cluster: service},
				}},
			}},
		}},
	}
	withPolicy(rc, r)
	return rc
}

// cluster builds Cluster S: EDS over ADS, load reports to this server, and
// a load_balancing_policy (gRFC A52: a client uses the first policy it
// knows, so each kind of client finds its own):
//
//  1. Envoy's round_robin (weighted by endpoint weight in Envoy, and by
//     locality weight: locality_weighted_lb_config) inside a
//     TypedStruct: Envoy unwraps it, gRPC skips it (no gRPC balancer has
//     that name). It must come before wrr_locality: Envoy builds its
//     wrr_locality too, and releases whose wrr_locality accepts only
//     client_side_weighted_round_robin inside it would reject the Cluster.
//  2. wrr_locality: gRPC picks a locality by locality weight (what lb_policy
//     ROUND_ROBIN gives it), then an endpoint with the first policy it
//     knows of: spillway.wrr (package clientlib/wrr, by endpoint weight)
//     when the client imports it, else round_robin.
//
// lb_policy stays ROUND_ROBIN, with common_lb_config's
// locality_weighted_lb_config, for clients that predate
// load_balancing_policy.
func cluster(service string) *v3clusterpb.Cluster {
	return clusterFor(service, svcconfig.Resilience{})
}

// clusterFor is cluster with policy r: its outlier detection and circuit
// breaker, and its endpoint-picking policy in load_balancing_policy
// (loadBalancingPolicy).
func clusterFor(service string, r svcconfig.Resilience) *v3clusterpb.Cluster {
	return clusterWith(service, r, 0)
}

// clusterWith is clusterFor for a service of ringN healthy endpoints,
// which sizes a ring hash's ring (ringSizes); 0 when not known.
func clusterWith(service string, r svcconfig.Resilience, ringN int) *v3clusterpb.Cluster {
	c := &v3clusterpb.Cluster{
		Name:                 service,
		ClusterDiscoveryType: &v3clusterpb.Cluster_Type{Type: v3clusterpb.Cluster_EDS},
		EdsClusterConfig:     &v3clusterpb.Cluster_EdsClusterConfig{EdsConfig: adsSource, ServiceName: service},
		LbPolicy:             v3clusterpb.Cluster_ROUND_ROBIN,
		// Envoy before load_balancing_policy reads the locality weights
		// switch here; gRPC ignores it.
		CommonLbConfig: &v3clusterpb.Cluster_CommonLbConfig{
			LocalityConfigSpecifier: &v3clusterpb.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &v3clusterpb.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			},
		},
		LoadBalancingPolicy: loadBalancingPolicy(r.LB, ringN),
		LrsServer:           &v3corepb.ConfigSource{ConfigSourceSpecifier: &v3corepb.ConfigSource_Self{Self: &v3corepb.SelfConfigSource{}}},
	}
	if o := r.OutlierDetection; o != nil {
		c.OutlierDetection = outlierDetection(o)
	}
	if r.MaxRequests > 0 {
		c.CircuitBreakers = circuitBreakers(r.MaxRequests)
	}
	return c
}

var healthStatus = map[registry.Health]v3corepb.HealthStatus{
	registry.Healthy:   v3corepb.HealthStatus_HEALTHY,
	registry.Draining:  v3corepb.HealthStatus_DRAINING,
	registry.Unhealthy: v3corepb.HealthStatus_UNHEALTHY,
}

// LocalityWeights gives the load_balancing_weight of each locality of a
// service for clients in one zone. Weights must be >= 1.
type LocalityWeights func(svc *registry.Service, clientZone string, localities []Locality) []uint32

// Locality is one (region, zone, sub-zone) of a service with its endpoint
// counts.
type Locality struct {
	registry.Locality
	Healthy, Total int
}

// healthyCountWeights is the default: a locality weighs its number of
// healthy endpoints, whatever the client's zone.
func healthyCountWeights(_ *registry.Service, _ string, locs []Locality) []uint32 {
	out := make([]uint32, len(locs))
	for i, l := range locs {
		out[i] = uint32(l.Healthy)
	}
	return out
}

// groupLocalities returns the service's endpoints grouped by locality,
// localities sorted, keeping only those with at least one healthy
// endpoint: a locality of weight 0 is dropped by gRPC anyway, and its
// endpoints could not take traffic.
func groupLocalities(svc *registry.Service, port string) ([]Locality, [][]*registry.Endpoint) {
	var g localityGroups
	return g.group(svc, port)
}

// localityGroups is groupLocalities' working memory; a claBuilder keeps
// one to reuse.
type localityGroups struct {
	idx   map[registry.Locality]int
	locs  []Locality
	eps   [][]*registry.Endpoint
	order []int
	outL  []Locality
	outE  [][]*registry.Endpoint
}

// group is groupLocalities in g's memory: what it returns is valid until
// g groups again.
func (g *localityGroups) group(svc *registry.Service, port string) ([]Locality, [][]*registry.Endpoint) {
	if g.idx == nil {
		g.idx = map[registry.Locality]int{}
	}
	clear(g.idx)
	g.locs, g.eps = g.locs[:0], g.eps[:0]
	for _, e := range svc.Serving() { // one endpoint per address and port
		if _, ok := endpointPort(e, port); !ok {
			continue
		}
		i, ok := g.idx[e.Locality]
		if !ok {
			i = len(g.locs)
			g.idx[e.Locality] = i
			g.locs = append(g.locs, Locality{Locality: e.Locality})
			if i < cap(g.eps) {
				g.eps = g.eps[:i+1]
				g.eps[i] = g.eps[i][:0]
			} else {
				g.eps = append(g.eps, nil)
			}
		}
		g.locs[i].Total++
		if e.Health == registry.Healthy {
			g.locs[i].Healthy++
		}
		g.eps[i] = append(g.eps[i], e)
	}
	g.order = g.order[:0]
	for i := range g.locs {
		g.order = append(g.order, i)
	}
	slices.SortFunc(g.order, func(a, b int) int {
		x, y := g.locs[a].Locality, g.locs[b].Locality
		return cmp.Or(strings.Compare(x.Region, y.Region), strings.Compare(x.Zone, y.Zone), strings.Compare(x.SubZone, y.SubZone))
	})
	g.outL, g.outE = g.outL[:0], g.outE[:0]
	for _, i := range g.order {
		if g.locs[i].Healthy == 0 {
			continue
		}
		g.outL = append(g.outL, g.locs[i])
		g.outE = append(g.outE, g.eps[i])
	}
	if len(g.outL) == 0 {
		return nil, nil
	}
	return g.outL, g.outE
}

// endpointPort is the port xDS clients dial: the named one, else the first.
func endpointPort(e *registry.Endpoint, name string) (registry.Port, bool) {
	if p, ok := e.Port(name); ok {
		return p, true
	}
	for _, p := range e.Ports {
		if p.Protocol == registry.TCP {
			return p, true
		}
	}
	return registry.Port{}, false
}

// clusterLoadAssignment builds ClusterLoadAssignment S for clients in zone,
// every locality at priority 0.
func clusterLoadAssignment(svc *registry.Service, port, zone string, weights LocalityWeights) (*v3endpointpb.ClusterLoadAssignment, error) {
	return clusterLoadAssignmentWith(svc, port, zone, weights, endpointWeights{}, nil)
}

// endpointWeights are a plan's per-endpoint weights (weights.Plan.Endpoints).
type endpointWeights struct {
	// byID: an endpoint listed weighs its Weight; one not listed (nil: all)
	// its registry weight.
	byID map[string]weights.EndpointWeight
	// localities: a locality weighs the sum of its healthy endpoints'
	// weights (strategy pid alone), not what LocalityWeights says.
	localities bool
	// edge, non-nil, is a subset slot's edge weights (subset.Assignment's
	// Weights, 1 for an endpoint it does not list): every endpoint's
	// weight is then scaled by edgeScale and its edge weight, so that the
	// fractions survive as integers.
	edge map[string]float64
}

// edgeScale is what a subset slot with edge weights multiplies its
// endpoints' weights by: an edge weight of 0.01 (the least) keeps ten
// units of an endpoint of weight 1.
const edgeScale = 1000

// weight is endpoint e's load_balancing_weight before fitting, at least
// 1 (gRPC rejects the whole resource for a 0).
func (w endpointWeights) weight(e *registry.Endpoint) uint64 {
	base := uint64(max(e.Weight, 1))
	if ew, ok := w.byID[e.ID]; ok {
		base = uint64(max(ew.Weight, 1))
	}
	if w.edge == nil {
		return base
	}
	f, ok := w.edge[e.ID]
	if !ok {
		f = 1
	}
	return max(1, uint64(math.Round(float64(base)*f*edgeScale)))
}

// fitUint32 scales ws down, when their sum exceeds what gRPC accepts
// (math.MaxUint32), keeping their ratios as far as integers do; every
// weight stays at least 1.
func fitUint32(ws []uint64) []uint32 {
	return fitUint32Into(make([]uint32, len(ws)), ws)
}

// fitUint32Into is fitUint32 into out, of len(ws).
func fitUint32Into(out []uint32, ws []uint64) []uint32 {
	var total uint64
	for _, w := range ws {
		total += w
	}
	f := 1.0
	if total > math.MaxUint32 {
		f = float64(math.MaxUint32-uint64(len(ws))) / float64(total)
	}
	for i, w := range ws {
		out[i] = uint32(max(1, math.Floor(float64(w)*f)))
	}
	return out
}

// validator is what go-control-plane's generated validation gives every
// resource.
type validator interface{ ValidateAll() error }

// encode validates m (the proto's own constraints, then every rule a
// client enforces: checkForGRPC) and marshals it as an Any,
// deterministically, so that equal content gives equal bytes and an equal
// version. A resource that fails is never published. The response field,
// the Any and its value share one buffer: m is marshaled once, into it.
func encode(name string, m proto.Message) (*resource, error) {
	r, _, err := encodeSpans(name, m, nil)
	return r, err
}

// encodeSpans is encode; for a ClusterLoadAssignment the field by field
// encoder takes (claEncodable), it also records in spans, one per
// locality of m, where that locality's endpoints lie in the resource's
// buffer (edsShared), and reports that it did.
func encodeSpans(name string, m proto.Message, spans []span) (*resource, bool, error) {
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return nil, false, fmt.Errorf("resource %s is invalid: %w", name, err)
		}
	}
	typeURL := anyPrefix + string(m.ProtoReflect().Descriptor().FullName())
	if err := checkForGRPC(typeURL, m); err != nil {
		return nil, false, fmt.Errorf("resource %s: %w", name, err)
	}
	cla, _ := m.(*v3endpointpb.ClusterLoadAssignment)
	if cla != nil && claEncodable(cla) { // claencode.go
		r, err := frame(name, typeURL, sizeCLA(cla), func(b []byte) ([]byte, error) {
			return appendCLASpans(b, cla, spans), nil
		})
		return r, spans != nil && err == nil, err
	}
	r, err := frame(name, typeURL, proto.MarshalOptions{Deterministic: true}.Size(m), func(b []byte) ([]byte, error) {
		return proto.MarshalOptions{Deterministic: true, UseCachedSize: true}.MarshalAppend(b, m)
	})
	return r, false, err
}

// frame makes the resource whose Any holds a message of typeURL, size
// bytes that write appends: the response field, the Any and its value
// share one buffer, of exactly the size they need.
func frame(name, typeURL string, size int, write func([]byte) ([]byte, error)) (*resource, error) {
	// The Any: type_url (1) and value (2), in field order, as proto.Marshal
	// of an anypb.Any writes them.
	rawLen := protowire.SizeTag(anyFieldTypeURL) + protowire.SizeBytes(len(typeURL)) +
		protowire.SizeTag(anyFieldValue) + protowire.SizeBytes(size)
	buf := make([]byte, 0, protowire.SizeTag(fieldResources)+protowire.SizeBytes(rawLen))
	buf = protowire.AppendTag(buf, fieldResources, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(rawLen))
	head := len(buf)
	buf = protowire.AppendTag(buf, anyFieldTypeURL, protowire.BytesType)
	buf = protowire.AppendString(buf, typeURL)
	buf = protowire.AppendTag(buf, anyFieldValue, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(size))
	value := len(buf)
	buf, err := write(buf)
	if err != nil {
		return nil, fmt.Errorf("resource %s: %w", name, err)
	}
	if len(buf)-value != size || len(buf) != cap(buf) {
		return nil, fmt.Errorf("resource %s: marshaled %d bytes, sized %d", name, len(buf)-value, size)
	}
	raw := buf[head:]
	a := &anypb.Any{TypeUrl: typeURL, Value: buf[value:]}
	return &resource{name: name, any: a, raw: raw, version: hashHex(raw), field: mem.SliceBuffer(buf)}, nil
}

// anyPrefix and the field numbers of google.protobuf.Any.
const (
	anyPrefix       = "type.googleapis.com/"
	anyFieldTypeURL = 1
	anyFieldValue   = 2
)

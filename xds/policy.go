package xds

// A service's resilience policy (svcconfig.Resilience, issue 30) in its
// Cluster, RouteConfiguration and Listener: what cluster(), route(),
// routeWith() and listener() add to today's resources when the service
// has one. The zero policy adds nothing: those resources stay byte for
// byte what they were.

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"time"

	v3xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	v3faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	v3cswrrpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3"
	v3lbcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/common/v3"
	v3leastrequestpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	v3ringhashpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	v3roundrobinpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	v3wrrlocalitypb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	v3typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillway/spillway/weights/svcconfig"
)

// Policies gives each service's resilience policy (package
// weights/svcconfig's Resilience; a *svcconfig.Store in cmd/spillway).
// Its methods are called from many goroutines at once, and must not
// block.
type Policies interface {
	// Resilience returns service's policy; false (or the zero policy)
	// when it has none. A set block comes with every field filled in
	// and in range (svcconfig's parser fills the defaults).
	Resilience(service string) (svcconfig.Resilience, bool)
	// Changed returns a channel closed at the next change of any
	// service's policy (or of more than policies: a spurious wake-up
	// costs a comparison).
	Changed() <-chan struct{}
	// Services lists the services that have, or may have, a policy.
	Services() []string
}

var _ Policies = (*svcconfig.Store)(nil)

// policyOf returns service's policy as Config.Policies gives it; the
// zero policy when there is none.
func (s *Server) policyOf(service string) svcconfig.Resilience {
	if s.cfg.Policies == nil {
		return svcconfig.Resilience{}
	}
	r, ok := s.cfg.Policies.Resilience(service)
	if !ok {
		return svcconfig.Resilience{}
	}
	return r
}

// refreshPolicy puts service's current policy in e (e.pol, and its
// fingerprint e.polKey, which the cached Listener, route and Cluster are
// compared with). Called with e.mu held.
func (s *Server) refreshPolicy(e *entry, service string) {
	r := s.policyOf(service)
	if r == e.pol { // the same blocks: a config store hands out the same pointers until it changes
		return
	}
	e.pol, e.polKey = r, policyKey(r)
}

var policySeed = maphash.MakeSeed()

// policyKey fingerprints a policy's content: 0 for the zero policy (what
// today's resources are built with), else a hash of its JSON.
func policyKey(r svcconfig.Resilience) uint64 {
	if r == (svcconfig.Resilience{}) {
		return 0
	}
	b, err := json.Marshal(r)
	if err != nil { // a NaN or an infinity, which svcconfig refuses: the blocks' identity names it
		b = fmt.Appendf(nil, "%p %p %p %p %d %d", r.OutlierDetection, r.Retry, r.Fault, r.LB, r.MaxRequests, r.Timeout)
	}
	return maphash.Bytes(policySeed, b) | 1
}

// changedPolicies returns the services of either list whose policy
// differs between old and now (each a service's policy by name).
func changedPolicies(old, now map[string]svcconfig.Resilience) []string {
	var out []string
	for n, r := range old {
		if now[n] != r {
			out = append(out, n)
		}
	}
	for n, r := range now {
		if _, ok := old[n]; !ok && r != (svcconfig.Resilience{}) {
			out = append(out, n)
		}
	}
	return out
}

// policies reads every listed service's policy.
func policies(p Policies) map[string]svcconfig.Resilience {
	out := map[string]svcconfig.Resilience{}
	for _, n := range p.Services() {
		if r, ok := p.Resilience(n); ok {
			out[n] = r
		}
	}
	return out
}

// pack wraps m in an Any. The messages built here hold plain values and
// always marshal.
func pack(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("xds: " + err.Error())
	}
	return a
}

func dur(d svcconfig.Duration) *durationpb.Duration { return durationpb.New(time.Duration(d)) }

// --- Cluster ---

// outlierDetection is A50's outlier_detection. Both ejection kinds are
// written explicitly, 0 when off: an unset enforcing_success_rate turns
// success-rate ejection on. Envoy's consecutive-5xx and gateway-failure
// ejections, which gRPC does not have, are turned off so that both eject
// alike.
func outlierDetection(o *svcconfig.OutlierDetection) *v3clusterpb.OutlierDetection {
	u32 := wrapperspb.UInt32
	od := &v3clusterpb.OutlierDetection{
		Interval:                           dur(o.Interval),
		BaseEjectionTime:                   dur(o.BaseEjectionTime),
		MaxEjectionTime:                    dur(o.MaxEjectionTime),
		MaxEjectionPercent:                 u32(o.MaxEjectionPercent),
		EnforcingConsecutive_5Xx:           u32(0),
		EnforcingConsecutiveGatewayFailure: u32(0),
		EnforcingSuccessRate:               u32(0),
		EnforcingFailurePercentage:         u32(0),
	}
	if sr := o.SuccessRate; sr != nil {
		od.EnforcingSuccessRate = u32(sr.EnforcementPercent)
		od.SuccessRateStdevFactor = u32(uint32(max(1, math.Round(sr.StdevFactor*1000)))) // thousandths
		od.SuccessRateMinimumHosts = u32(sr.MinimumHosts)
		od.SuccessRateRequestVolume = u32(sr.RequestVolume)
	}
	if fp := o.FailurePercentage; fp != nil {
		od.EnforcingFailurePercentage = u32(fp.EnforcementPercent)
		od.FailurePercentageThreshold = u32(fp.Threshold)
		od.FailurePercentageMinimumHosts = u32(fp.MinimumHosts)
		od.FailurePercentageRequestVolume = u32(fp.RequestVolume)
	}
	return od
}

// circuitBreakers is A32's circuit breaker: one DEFAULT threshold, the
// only one grpc-go reads, with max_requests.
func circuitBreakers(maxRequests uint32) *v3clusterpb.CircuitBreakers {
	return &v3clusterpb.CircuitBreakers{Thresholds: []*v3clusterpb.CircuitBreakers_Thresholds{{
		Priority:    v3corepb.RoutingPriority_DEFAULT,
		MaxRequests: wrapperspb.UInt32(maxRequests),
	}}}
}

// Names of the load balancing policy entries.
const (
	lbRoundRobin   = "envoy.load_balancing_policies.round_robin"
	lbWrrLocality  = "envoy.load_balancing_policies.wrr_locality"
	lbRingHash     = "envoy.load_balancing_policies.ring_hash"
	lbLeastRequest = "envoy.load_balancing_policies.least_request"
	lbClientWRR    = "envoy.load_balancing_policies.client_side_weighted_round_robin"
	// spillwayWRR is the spillway.wrr balancer's name as clientlib/wrr
	// registers it (wrr.TypeURL; the server does not import client code).
	spillwayWRR = "type.googleapis.com/spillway.wrr"
)

func lbEntry(name string, config proto.Message) *v3clusterpb.LoadBalancingPolicy_Policy {
	return &v3clusterpb.LoadBalancingPolicy_Policy{TypedExtensionConfig: &v3corepb.TypedExtensionConfig{
		Name: name, TypedConfig: pack(config),
	}}
}

func lbPolicies(ps ...*v3clusterpb.LoadBalancingPolicy_Policy) *v3clusterpb.LoadBalancingPolicy {
	return &v3clusterpb.LoadBalancingPolicy{Policies: ps}
}

// envoyOnly is an entry for Envoy alone: config as JSON in a TypedStruct,
// which Envoy unwraps and gRPC skips (no gRPC balancer has the message's
// name).
func envoyOnly(name string, config proto.Message, value *structpb.Struct) *v3clusterpb.LoadBalancingPolicy_Policy {
	return lbEntry(name, &v3xdstypepb.TypedStruct{
		TypeUrl: anyPrefix + string(config.ProtoReflect().Descriptor().FullName()),
		Value:   value,
	})
}

// envoyLocalityWeighted is {"locality_lb_config": {"locality_weighted_lb_config": {}}}
// and more fields: with it Envoy picks a locality by its
// load_balancing_weight, as gRPC does.
func envoyLocalityWeighted(more map[string]*structpb.Value) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{
		"locality_lb_config": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"locality_weighted_lb_config": structpb.NewStructValue(&structpb.Struct{}),
		}}),
	}}
	for k, v := range more {
		s.Fields[k] = v
	}
	return s
}

// wrrLocality is gRPC's entry: a locality by locality weight, then an
// endpoint by the first entry of endpoint it knows.
func wrrLocality(endpoint ...*v3clusterpb.LoadBalancingPolicy_Policy) *v3clusterpb.LoadBalancingPolicy_Policy {
	return lbEntry(lbWrrLocality, &v3wrrlocalitypb.WrrLocality{EndpointPickingPolicy: lbPolicies(endpoint...)})
}

// loadBalancingPolicy is the Cluster's load_balancing_policy (gRFC A52: a
// client takes the first entry it knows, so each kind of client finds
// its own; see cluster):
//
//   - none: Envoy's round_robin, then wrr_locality over spillway.wrr or
//     round_robin for gRPC;
//   - ring_hash: one typed RingHash entry, which Envoy and gRPC both
//     take: at the top, for a ring inside wrr_locality would be one per
//     locality, and a key's endpoint would depend on the locality drawn;
//   - least_request: Envoy's least_request (locality weighted) in a
//     TypedStruct, then wrr_locality over least_request for gRPC
//     (round_robin for a client without it);
//   - client_wrr: Envoy's round_robin, then wrr_locality over
//     client_side_weighted_round_robin for gRPC (round_robin for a
//     client without it).
func loadBalancingPolicy(lb *svcconfig.LB, ringN int) *v3clusterpb.LoadBalancingPolicy {
	roundRobin := lbEntry(lbRoundRobin, &v3roundrobinpb.RoundRobin{})
	envoyRR := envoyOnly(lbRoundRobin, &v3roundrobinpb.RoundRobin{}, envoyLocalityWeighted(nil))
	switch {
	case lb == nil:
	case lb.RingHash != nil:
		return lbPolicies(lbEntry(lbRingHash, ringHash(lb.RingHash, ringN)))
	case lb.LeastRequest != nil:
		cc := lb.LeastRequest.ChoiceCount
		envoyLR := envoyOnly(lbLeastRequest, &v3leastrequestpb.LeastRequest{}, envoyLocalityWeighted(map[string]*structpb.Value{
			"choice_count": structpb.NewNumberValue(float64(cc)),
		}))
		return lbPolicies(envoyLR, wrrLocality(lbEntry(lbLeastRequest, &v3leastrequestpb.LeastRequest{ChoiceCount: wrapperspb.UInt32(cc)}), roundRobin))
	case lb.ClientWRR != nil:
		return lbPolicies(envoyRR, wrrLocality(lbEntry(lbClientWRR, clientWRR(lb.ClientWRR)), roundRobin))
	}
	spillway := lbEntry("spillway.wrr", &v3xdstypepb.TypedStruct{TypeUrl: spillwayWRR, Value: &structpb.Struct{}})
	return lbPolicies(envoyRR, wrrLocality(spillway, roundRobin))
}

// ringHash is A42's ring for a service of n healthy endpoints (0: not
// known): XX_HASH (the only hash gRPC takes), the sizes (ringSizes), and
// locality weights for Envoy (gRPC weighs endpoints by locality weight ×
// endpoint weight by itself).
func ringHash(rh *svcconfig.RingHash, n int) *v3ringhashpb.RingHash {
	lo, hi := ringSizes(rh, n)
	return &v3ringhashpb.RingHash{
		HashFunction:             v3ringhashpb.RingHash_XX_HASH,
		MinimumRingSize:          wrapperspb.UInt64(lo),
		MaximumRingSize:          wrapperspb.UInt64(hi),
		LocalityWeightedLbConfig: &v3lbcommonpb.LocalityLbConfig_LocalityWeightedLbConfig{},
	}
}

// ringSizes is the ring a service of n equal endpoints is sent: exactly
// P entries an endpoint, P = max_ring_size over the power of two at or
// above n, so min = max = P·n, between max/2 and max. grpc-go (as Envoy)
// gives each of n equal endpoints ceil(min_ring_size/n) entries, so a
// fixed ring size gives every endpoint more entries when one leaves,
// and keys move between the endpoints that stay: about (n−2)/n² of them
// besides the leaver's 1/n (28 % at n = 6 against 17 %). With P fixed, an
// endpoint's entries (hashes of its address and their index) stay where
// they were, and only the leaver's keys move, until n crosses a power of
// two. Unknown n (0) sends the configured sizes.
func ringSizes(rh *svcconfig.RingHash, n int) (lo, hi uint64) {
	if n <= 0 {
		return rh.MinRingSize, rh.MaxRingSize
	}
	band := uint64(1)
	for band < uint64(n) {
		band <<= 1
	}
	per := max(1, rh.MaxRingSize/band)
	size := per * uint64(n)
	return size, size
}

// clientWRR is A58's client-side weighted round robin, every field
// written (grpc-go reads 0 as its default).
func clientWRR(w *svcconfig.ClientWRR) *v3cswrrpb.ClientSideWeightedRoundRobin {
	c := &v3cswrrpb.ClientSideWeightedRoundRobin{
		EnableOobLoadReport:     wrapperspb.Bool(w.OOBReportingPeriod > 0),
		BlackoutPeriod:          dur(w.BlackoutPeriod),
		WeightExpirationPeriod:  dur(w.WeightExpirationPeriod),
		WeightUpdatePeriod:      dur(w.WeightUpdatePeriod),
		ErrorUtilizationPenalty: wrapperspb.Float(float32(w.ErrorUtilizationPenalty)),
	}
	if w.OOBReportingPeriod > 0 {
		c.OobReportingPeriod = dur(w.OOBReportingPeriod)
	}
	return c
}

// --- RouteConfiguration ---

// routePolicy reports whether r changes the RouteConfiguration.
func routePolicy(r svcconfig.Resilience) bool {
	return r.Retry != nil || r.Timeout > 0 || r.Fault != nil || ringHashOf(r) != nil
}

func ringHashOf(r svcconfig.Resilience) *svcconfig.RingHash {
	if r.LB == nil {
		return nil
	}
	return r.LB.RingHash
}

// withPolicy adds r to rc, a RouteConfiguration of one virtual host as
// route and routeWith build it: every RouteAction gets the retry policy,
// the timeout and the ring hash's hash policy (actionPolicy); a fault
// goes on the virtual host, or, when it is limited to RPCs with a header,
// on a copy of each route that also matches that header, placed before
// it (grpc-go ignores HTTPFault.headers).
func withPolicy(rc *v3routepb.RouteConfiguration, r svcconfig.Resilience) {
	if !routePolicy(r) {
		return
	}
	vh := rc.GetVirtualHosts()[0]
	for _, rt := range vh.GetRoutes() {
		actionPolicy(rt.GetRoute(), r)
	}
	f := r.Fault
	switch {
	case f == nil:
	case f.Header == "":
		vh.TypedPerFilterConfig = faultOverride(f)
	default:
		vh.Routes = faultGated(vh.GetRoutes(), f)
	}
}

// actionPolicy sets r's route-level parts on a.
func actionPolicy(a *v3routepb.RouteAction, r svcconfig.Resilience) {
	if a == nil {
		return
	}
	if rt := r.Retry; rt != nil {
		a.RetryPolicy = &v3routepb.RetryPolicy{
			RetryOn:    strings.Join(rt.On, ","),
			NumRetries: wrapperspb.UInt32(rt.NumRetries),
			RetryBackOff: &v3routepb.RetryPolicy_RetryBackOff{
				BaseInterval: dur(rt.BaseInterval),
				MaxInterval:  dur(rt.MaxInterval),
			},
		}
	}
	if r.Timeout > 0 {
		// gRPC reads grpc_timeout_header_max (min of it and the caller's
		// deadline); Envoy caps a grpc-timeout header with it and uses
		// max_stream_duration without one.
		a.MaxStreamDuration = &v3routepb.RouteAction_MaxStreamDuration{
			MaxStreamDuration:    dur(r.Timeout),
			GrpcTimeoutHeaderMax: dur(r.Timeout),
		}
	}
	if rh := ringHashOf(r); rh != nil {
		a.HashPolicy = []*v3routepb.RouteAction_HashPolicy{{
			PolicySpecifier: &v3routepb.RouteAction_HashPolicy_Header_{Header: &v3routepb.RouteAction_HashPolicy_Header{HeaderName: rh.Header}},
			Terminal:        true,
		}}
	}
}

// faultGated returns routes with, before each, a copy that matches only
// RPCs carrying f.Header and injects f.
func faultGated(routes []*v3routepb.Route, f *svcconfig.Fault) []*v3routepb.Route {
	out := make([]*v3routepb.Route, 0, 2*len(routes))
	for _, rt := range routes {
		g := proto.Clone(rt).(*v3routepb.Route)
		g.Match.Headers = append(g.Match.Headers, &v3routepb.HeaderMatcher{
			Name: f.Header, HeaderMatchSpecifier: &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true},
		})
		g.TypedPerFilterConfig = faultOverride(f)
		out = append(out, g, rt)
	}
	return out
}

// faultFilter is the name of the fault filter in the Listener's
// HttpConnectionManager, and the key of its overrides.
const faultFilter = "envoy.filters.http.fault"

// faultOverride is a typed_per_filter_config carrying f for the fault
// filter: it replaces the Listener's empty base config.
func faultOverride(f *svcconfig.Fault) map[string]*anypb.Any {
	return map[string]*anypb.Any{faultFilter: pack(httpFault(f))}
}

// httpFault is A33's fault config: a fixed delay and a gRPC status, each
// with its chance in millionths.
func httpFault(f *svcconfig.Fault) *v3faultpb.HTTPFault {
	h := &v3faultpb.HTTPFault{}
	if d := f.Delay; d != nil {
		h.Delay = &v3faultcommonpb.FaultDelay{
			FaultDelaySecifier: &v3faultcommonpb.FaultDelay_FixedDelay{FixedDelay: dur(d.Fixed)},
			Percentage:         perMillion(d.Percent),
		}
	}
	if a := f.Abort; a != nil {
		h.Abort = &v3faultpb.FaultAbort{
			ErrorType:  &v3faultpb.FaultAbort_GrpcStatus{GrpcStatus: a.GRPCStatus},
			Percentage: perMillion(a.Percent),
		}
	}
	if f.MaxActiveFaults > 0 {
		h.MaxActiveFaults = wrapperspb.UInt32(f.MaxActiveFaults)
	}
	return h
}

// perMillion is percent (0, 100] in millionths, at least 1.
func perMillion(percent float64) *v3typepb.FractionalPercent {
	return &v3typepb.FractionalPercent{
		Numerator:   uint32(min(1e6, max(1, math.Round(percent*1e4)))),
		Denominator: v3typepb.FractionalPercent_MILLION,
	}
}

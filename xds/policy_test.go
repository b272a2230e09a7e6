package xds

import (
	"strings"
	"testing"
	"time"

	v3xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3faultcommonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	v3faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	v3cswrrpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3"
	v3ringhashpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	v3wrrlocalitypb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	v3typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillway/spillway/weights/svcconfig"
	"github.com/spillway/spillway/xds/routing"
)

// testPolicy is a policy with every part set, as svcconfig's parser
// fills it, and the endpoint-picking policy lb ("" for none,
// "ring_hash", "least_request", "client_wrr"); its fault is not gated.
func testPolicy(lb string) svcconfig.Resilience {
	d := func(v time.Duration) svcconfig.Duration { return svcconfig.Duration(v) }
	r := svcconfig.Resilience{
		OutlierDetection: &svcconfig.OutlierDetection{
			Interval: d(10 * time.Second), BaseEjectionTime: d(30 * time.Second), MaxEjectionTime: d(300 * time.Second), MaxEjectionPercent: 10,
			SuccessRate:       &svcconfig.SuccessRateEjection{StdevFactor: 1.9, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 100},
			FailurePercentage: &svcconfig.FailurePercentageEjection{Threshold: 85, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 50},
		},
		MaxRequests: 1024,
		Timeout:     d(5 * time.Second),
		Retry:       &svcconfig.Retry{On: []string{"unavailable", "resource-exhausted"}, NumRetries: 2, BaseInterval: d(25 * time.Millisecond), MaxInterval: d(250 * time.Millisecond)},
		Fault: &svcconfig.Fault{
			Delay:           &svcconfig.FaultDelay{Fixed: d(100 * time.Millisecond), Percent: 5},
			Abort:           &svcconfig.FaultAbort{GRPCStatus: 14, Percent: 0.5},
			MaxActiveFaults: 100,
		},
	}
	switch lb {
	case "ring_hash":
		r.LB = &svcconfig.LB{RingHash: &svcconfig.RingHash{Header: "x-user", MinRingSize: 1024, MaxRingSize: 4096}}
	case "least_request":
		r.LB = &svcconfig.LB{LeastRequest: &svcconfig.LeastRequest{ChoiceCount: 3}}
	case "client_wrr":
		r.LB = &svcconfig.LB{ClientWRR: &svcconfig.ClientWRR{
			BlackoutPeriod: d(10 * time.Second), WeightExpirationPeriod: d(3 * time.Minute), WeightUpdatePeriod: d(time.Second),
			ErrorUtilizationPenalty: 1, OOBReportingPeriod: d(30 * time.Second),
		}}
	}
	return r
}

// fullPolicy is testPolicy with ring hash.
func fullPolicy() svcconfig.Resilience { return testPolicy("ring_hash") }

// gated is r with its fault, if any, limited to RPCs carrying x-chaos.
func gated(r svcconfig.Resilience) svcconfig.Resilience {
	if r.Fault == nil {
		return r
	}
	f := *r.Fault
	f.Header = "x-chaos"
	r.Fault = &f
	return r
}

// cswrrRule is a check rule's change: a Cluster whose gRPC policy is
// wrr_locality over the test policy's client_side_weighted_round_robin,
// changed by f.
func cswrrRule(t *testing.T, f func(*v3cswrrpb.ClientSideWeightedRoundRobin)) func(*v3clusterpb.Cluster) {
	return func(c *v3clusterpb.Cluster) {
		w := clientWRR(testPolicy("client_wrr").LB.ClientWRR)
		f(w)
		c.LoadBalancingPolicy = lbPolicy(t, &v3wrrlocalitypb.WrrLocality{EndpointPickingPolicy: lbPolicy(t, w)})
	}
}

// setFault is a check rule's change: the virtual host's fault override
// changed by f.
func setFault(t *testing.T, f func(*v3faultpb.HTTPFault)) func(*v3routepb.RouteConfiguration) {
	return func(rc *v3routepb.RouteConfiguration) {
		vh := rc.VirtualHosts[0]
		h := &v3faultpb.HTTPFault{}
		if err := vh.TypedPerFilterConfig[faultFilter].UnmarshalTo(h); err != nil {
			t.Fatal(err)
		}
		f(h)
		vh.TypedPerFilterConfig[faultFilter] = mustAny(t, h)
	}
}

// policyVariants are the policies whose resources the tests serve: each
// endpoint-picking policy, the fault gated and not.
func policyVariants() map[string]svcconfig.Resilience {
	return map[string]svcconfig.Resilience{
		"round_robin":           testPolicy(""),
		"ring_hash":             testPolicy("ring_hash"),
		"ring_hash_gated":       gated(testPolicy("ring_hash")),
		"least_request":         testPolicy("least_request"),
		"client_wrr_gated":      gated(testPolicy("client_wrr")),
		"timeout_only":          {Timeout: svcconfig.Duration(time.Second)},
		"circuit_breaker_only":  {MaxRequests: 1},
		"fault_abort_only":      {Fault: &svcconfig.Fault{Abort: &svcconfig.FaultAbort{GRPCStatus: 8, Percent: 100}, Header: "x-chaos"}},
		"outlier_failure_only":  {OutlierDetection: &svcconfig.OutlierDetection{Interval: svcconfig.Duration(time.Second), BaseEjectionTime: svcconfig.Duration(time.Second), MaxEjectionTime: svcconfig.Duration(time.Minute), MaxEjectionPercent: 50, FailurePercentage: &svcconfig.FailurePercentageEjection{Threshold: 50, EnforcementPercent: 100, MinimumHosts: 2, RequestVolume: 10}}},
		"least_request_no_more": {LB: &svcconfig.LB{LeastRequest: &svcconfig.LeastRequest{ChoiceCount: 2}}},
	}
}

// TestZeroPolicyIsToday: the zero policy builds exactly the resources of
// a service without one.
func TestZeroPolicyIsToday(t *testing.T) {
	var zero svcconfig.Resilience
	l0, _ := listener("web")
	l1, err := listenerFor("web", zero)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		got, want proto.Message
	}{
		{"cluster", clusterFor("web", zero), cluster("web")},
		{"route", routeFor("web", zero), route("web")},
		{"listener", l1, l0},
	} {
		if diff := cmp.Diff(tc.want, tc.got, protocmp.Transform()); diff != "" {
			t.Errorf("%s (-today +zero policy):\n%s", tc.name, diff)
		}
	}
	if k := policyKey(zero); k != 0 {
		t.Errorf("policyKey(zero) = %d, want 0", k)
	}
	if k := policyKey(fullPolicy()); k == 0 {
		t.Error("policyKey(fullPolicy()) = 0, the zero policy's")
	}
}

// TestPolicyResourcesPass: every variant's Cluster, Listener and route
// (with and without rules) passes checkForGRPC and encodes.
func TestPolicyResourcesPass(t *testing.T) {
	rules, err := routing.Parse("test", []byte(`
rules:
  - name: tagged
    match: {headers: [{name: x-class, exact: batch}]}
    split: [{to: web, weight: 90}, {to: web-canary, weight: 10}, {to: web-next, weight: 0}]
default: web
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, pol := range policyVariants() {
		t.Run(name, func(t *testing.T) {
			l, err := listenerFor("web", pol)
			if err != nil {
				t.Fatal(err)
			}
			ruled, _ := routeWith("web", rules, func(string) bool { return true }, nil)
			withPolicy(ruled, pol)
			for _, m := range []proto.Message{clusterFor("web", pol), routeFor("web", pol), ruled, l} {
				if _, err := encode("web", m); err != nil {
					t.Errorf("%T: %v", m, err)
				}
			}
		})
	}
}

// TestClusterPolicy: the Cluster carries the outlier detection (both
// kinds explicit, the factor in thousandths, Envoy's own ejections off),
// one DEFAULT circuit breaker, and each endpoint-picking policy where
// each kind of client takes it; lb_policy stays ROUND_ROBIN.
func TestClusterPolicy(t *testing.T) {
	c := clusterFor("web", testPolicy("ring_hash"))
	od := c.GetOutlierDetection()
	u := func(v *wrapperspb.UInt32Value) any {
		if v == nil {
			return nil
		}
		return v.GetValue()
	}
	for name, tc := range map[string]struct{ got, want any }{
		"interval":                              {od.GetInterval().AsDuration(), 10 * time.Second},
		"base_ejection_time":                    {od.GetBaseEjectionTime().AsDuration(), 30 * time.Second},
		"max_ejection_time":                     {od.GetMaxEjectionTime().AsDuration(), 300 * time.Second},
		"max_ejection_percent":                  {u(od.GetMaxEjectionPercent()), uint32(10)},
		"enforcing_success_rate":                {u(od.GetEnforcingSuccessRate()), uint32(100)},
		"success_rate_stdev_factor":             {u(od.GetSuccessRateStdevFactor()), uint32(1900)},
		"success_rate_minimum_hosts":            {u(od.GetSuccessRateMinimumHosts()), uint32(5)},
		"success_rate_request_volume":           {u(od.GetSuccessRateRequestVolume()), uint32(100)},
		"enforcing_failure_percentage":          {u(od.GetEnforcingFailurePercentage()), uint32(100)},
		"failure_percentage_threshold":          {u(od.GetFailurePercentageThreshold()), uint32(85)},
		"failure_percentage_minimum_hosts":      {u(od.GetFailurePercentageMinimumHosts()), uint32(5)},
		"failure_percentage_request_volume":     {u(od.GetFailurePercentageRequestVolume()), uint32(50)},
		"enforcing_consecutive_5xx":             {u(od.GetEnforcingConsecutive_5Xx()), uint32(0)},
		"enforcing_consecutive_gateway_failure": {u(od.GetEnforcingConsecutiveGatewayFailure()), uint32(0)},
		"circuit_breakers":                      {len(c.GetCircuitBreakers().GetThresholds()), 1},
		"max_requests":                          {u(c.GetCircuitBreakers().GetThresholds()[0].GetMaxRequests()), uint32(1024)},
		"lb_policy":                             {c.GetLbPolicy(), v3clusterpb.Cluster_ROUND_ROBIN},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", name, tc.got, tc.want)
		}
	}
	// Success rate off: its enforcement is written as 0, not left unset.
	p := testPolicy("")
	p.OutlierDetection.SuccessRate = nil
	if v := clusterFor("web", p).GetOutlierDetection().GetEnforcingSuccessRate(); v == nil || v.GetValue() != 0 {
		t.Errorf("enforcing_success_rate without success_rate = %v, want 0", v)
	}

	// The entries of load_balancing_policy, outermost first: a typed
	// message's name, a TypedStruct's type_url's, and wrr_locality's
	// children in brackets.
	for lb, want := range map[string][]string{
		"":              {"TypedStruct:RoundRobin", "WrrLocality[TypedStruct:spillway.wrr RoundRobin]"},
		"ring_hash":     {"RingHash"},
		"least_request": {"TypedStruct:LeastRequest", "WrrLocality[LeastRequest RoundRobin]"},
		"client_wrr":    {"TypedStruct:RoundRobin", "WrrLocality[ClientSideWeightedRoundRobin RoundRobin]"},
	} {
		got := lbShape(t, clusterFor("web", testPolicy(lb)).GetLoadBalancingPolicy())
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("lb %q: load_balancing_policy (-want +got):\n%s", lb, diff)
		}
	}
	rh := &v3ringhashpb.RingHash{}
	if err := clusterFor("web", testPolicy("ring_hash")).GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(rh); err != nil {
		t.Fatal(err)
	}
	if rh.GetHashFunction() != v3ringhashpb.RingHash_XX_HASH || rh.GetMinimumRingSize().GetValue() != 1024 || rh.GetMaximumRingSize().GetValue() != 4096 || rh.GetLocalityWeightedLbConfig() == nil {
		t.Errorf("ring_hash = %v, want XX_HASH, 1024..4096, locality weighted", rh)
	}
}

// lbShape names the entries of p (see TestClusterPolicy).
func lbShape(t *testing.T, p *v3clusterpb.LoadBalancingPolicy) []string {
	t.Helper()
	var out []string
	for _, pol := range p.GetPolicies() {
		m, err := pol.GetTypedExtensionConfig().GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		short := func(n string) string { return n[strings.LastIndexAny(n, "./")+1:] }
		switch m := m.(type) {
		case *v3xdstypepb.TypedStruct:
			n := short(m.GetTypeUrl())
			if strings.HasSuffix(m.GetTypeUrl(), "spillway.wrr") {
				n = "spillway.wrr"
			}
			out = append(out, "TypedStruct:"+n)
		case *v3wrrlocalitypb.WrrLocality:
			out = append(out, "WrrLocality["+strings.Join(lbShape(t, m.GetEndpointPickingPolicy()), " ")+"]")
		default:
			out = append(out, short(string(m.ProtoReflect().Descriptor().FullName())))
		}
	}
	return out
}

// TestRoutePolicy: every RouteAction of the route (rules, warm-up and
// default) gets the retry policy, the timeout and the hash policy; an
// ungated fault is on the virtual host, a gated one on a copy of each
// route matching the header, before it; the Listener has the fault
// filter, empty, before the router.
func TestRoutePolicy(t *testing.T) {
	rules, err := routing.Parse("test", []byte(`
rules:
  - name: tagged
    match: {headers: [{name: x-class, exact: batch}]}
    split: [{to: web, weight: 90}, {to: web-next, weight: 0}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, gate := range []bool{false, true} {
		pol := testPolicy("ring_hash")
		if gate {
			pol = gated(pol)
		}
		rc, _ := routeWith("web", rules, func(string) bool { return true }, nil)
		withPolicy(rc, pol)
		vh := rc.GetVirtualHosts()[0]
		var shape []string
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			rp := a.GetRetryPolicy()
			if rp.GetRetryOn() != "unavailable,resource-exhausted" || rp.GetNumRetries().GetValue() != 2 ||
				rp.GetRetryBackOff().GetBaseInterval().AsDuration() != 25*time.Millisecond || rp.GetRetryBackOff().GetMaxInterval().AsDuration() != 250*time.Millisecond {
				t.Errorf("retry_policy = %v", rp)
			}
			if m := a.GetMaxStreamDuration(); m.GetMaxStreamDuration().AsDuration() != 5*time.Second || m.GetGrpcTimeoutHeaderMax().AsDuration() != 5*time.Second {
				t.Errorf("max_stream_duration = %v, want 5s twice", m)
			}
			if h := a.GetHashPolicy(); len(h) != 1 || h[0].GetHeader().GetHeaderName() != "x-user" || !h[0].GetTerminal() {
				t.Errorf("hash_policy = %v, want [{header x-user, terminal}]", h)
			}
			s := r.GetMatch().GetPath() + r.GetMatch().GetPrefix()
			for _, h := range r.GetMatch().GetHeaders() {
				s += " " + h.GetName()
			}
			if f := r.GetTypedPerFilterConfig()[faultFilter]; f != nil {
				s += " +fault"
			}
			shape = append(shape, s)
		}
		want := []string{" x-class", warmPath + " " + warmHeader, ""}
		vhFault := true
		if gate {
			want = []string{" x-class x-chaos +fault", " x-class", warmPath + " " + warmHeader + " x-chaos +fault", warmPath + " " + warmHeader, " x-chaos +fault", ""}
			vhFault = false
		}
		if diff := cmp.Diff(want, shape); diff != "" {
			t.Errorf("gated %t: routes (-want +got):\n%s", gate, diff)
		}
		if got := vh.GetTypedPerFilterConfig()[faultFilter] != nil; got != vhFault {
			t.Errorf("gated %t: fault on the virtual host = %t, want %t", gate, got, vhFault)
		}
	}
	h := &v3faultpb.HTTPFault{}
	if err := routeFor("web", testPolicy("")).GetVirtualHosts()[0].GetTypedPerFilterConfig()[faultFilter].UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	want := &v3faultpb.HTTPFault{
		Delay: &v3faultcommonpb.FaultDelay{FaultDelaySecifier: &v3faultcommonpb.FaultDelay_FixedDelay{FixedDelay: durationpb.New(100 * time.Millisecond)},
			Percentage: &v3typepb.FractionalPercent{Numerator: 50000, Denominator: v3typepb.FractionalPercent_MILLION}},
		Abort: &v3faultpb.FaultAbort{ErrorType: &v3faultpb.FaultAbort_GrpcStatus{GrpcStatus: 14},
			Percentage: &v3typepb.FractionalPercent{Numerator: 5000, Denominator: v3typepb.FractionalPercent_MILLION}},
		MaxActiveFaults: wrapperspb.UInt32(100),
	}
	if diff := cmp.Diff(want, h, protocmp.Transform()); diff != "" {
		t.Errorf("HTTPFault (-want +got):\n%s", diff)
	}

	l, err := listenerFor("web", testPolicy(""))
	if err != nil {
		t.Fatal(err)
	}
	hcm := hcmOf(t, l)
	if fs := hcm.GetHttpFilters(); len(fs) != 2 || fs[0].GetName() != faultFilter || fs[1].GetName() != "envoy.filters.http.router" ||
		fs[0].GetTypedConfig().GetTypeUrl() != faultURL || len(fs[0].GetTypedConfig().GetValue()) != 0 {
		t.Errorf("http_filters = %v, want [fault (empty), router]", fs)
	}
	// Without a fault, the Listener is today's.
	p := testPolicy("")
	p.Fault = nil
	l, _ = listenerFor("web", p)
	if l0, _ := listener("web"); !proto.Equal(l, l0) {
		t.Errorf("Listener without a fault = %v, want today's", l)
	}
}

// TestParsedPoliciesPass: the policies svcconfig's parser accepts, at the
// edges of its ranges and with its defaults filled in, build resources
// the checks accept: the parser's ranges and check.go's rules agree.
func TestParsedPoliciesPass(t *testing.T) {
	configs := []string{
		`
resilience:
  outlier_detection:
    {interval: 100ms, base_ejection_time: 100ms, max_ejection_time: 100ms, max_ejection_percent: 0,
     success_rate: {stdev_factor: 0.0001, minimum_hosts: 2, request_volume: 1, enforcement_percent: 1},
     failure_percentage: {threshold: 1, minimum_hosts: 1000, request_volume: 1000000}}
  max_requests: 1000000
  timeout: 1h
  retry: {on: [cancelled, deadline-exceeded, internal, resource-exhausted, unavailable], num_retries: 4, base_interval: 1ms, max_interval: 1ms}
  fault: {delay: {fixed: 1m, percent: 100}, abort: {grpc_status: 16, percent: 0.00001}, header: x-a, max_active_faults: 1000000}
  lb: {ring_hash: {header: x-u, min_ring_size: 8388608, max_ring_size: 8388608}}
`, `
resilience:
  fault: {delay: {fixed: 1ms, percent: 0.0001}}
  lb: {client_wrr: {blackout_period: 10m, weight_expiration_period: 1h, weight_update_period: 1m, error_utilization_penalty: 10, oob_reporting_period: 10m}}
`, `
resilience:
  lb: {client_wrr: {blackout_period: 1s, weight_expiration_period: 1s, weight_update_period: 100ms, error_utilization_penalty: 0.0001, oob_reporting_period: 30s}}
`, `
resilience:
  lb: {least_request: {choice_count: 10}}
  fault: {abort: {grpc_status: cancelled, percent: 100}}
`, `
resilience:
  outlier_detection: {success_rate: {}}
  retry: {}
  fault: {abort: {percent: 1}}
  lb: {least_request: {}}
`, `
resilience:
  outlier_detection: {failure_percentage: {}}
  lb: {client_wrr: {}}
`, `
resilience:
  lb: {ring_hash: {header: x-user}}
`,
	}
	rules, err := routing.Parse("test", []byte("rules:\n  - name: split\n    match: {}\n    split: [{to: web, weight: 1}, {to: web-next, weight: 0}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i, y := range configs {
		c, err := svcconfig.Parse("web.yaml", []byte(y))
		if err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
		r := c.Resilience
		l, err := listenerFor("web", r)
		if err != nil {
			t.Fatal(err)
		}
		ruled, _ := routeWith("web", rules, func(string) bool { return true }, nil)
		withPolicy(ruled, r)
		for _, m := range []proto.Message{clusterFor("web", r), routeFor("web", gated(r)), ruled, l} {
			if _, err := encode("web", m); err != nil {
				t.Errorf("config %d: %T: %v", i, m, err)
			}
		}
	}
}

package xds

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcxds "google.golang.org/grpc/xds"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/spillway/spillway/xds/routing"
)

// spillwayOnly are the rules of checkForGRPC that grpc-go 1.85 does not
// enforce by a NACK, with what it does instead: spillway refuses them
// because the client would drop, misread or fail on what it was sent, or
// because spillway has no rule yet for a field grpc-go parses.
var spillwayOnly = map[string]string{
	"eds_locality_weight_missing":             "the locality is dropped",
	"eds_locality_weight_zero":                "the locality is dropped",
	"eds_address_not_ip":                      "the address is dialed as written",
	"eds_port_zero":                           "the address is dialed as written",
	"eds_endpoint_missing":                    "an endpoint with an empty address",
	"eds_endpoint_metadata":                   "empty metadata parses",
	"eds_locality_metadata":                   "empty metadata parses",
	"cds_od_interval_zero":                    "its sweep timer re-arms at 0: a busy loop",
	"cds_od_base_ejection_time_zero":          "an ejected endpoint is back at the next sweep (Envoy rejects 0)",
	"cds_od_max_ejection_time_below_base":     "it ejects for base_ejection_time",
	"cds_od_empty":                            "an empty outlier_detection turns success-rate ejection on",
	"cds_od_consecutive_5xx":                  "ignored; Envoy ejects after 5 consecutive 5xx",
	"cds_od_consecutive_gateway_failure":      "ignored; Envoy ejects on gateway failures",
	"cds_od_envoy_only_field":                 "ignored; Envoy ejects on local-origin errors apart",
	"cds_od_stdev_factor":                     "no endpoint is ever far enough below the mean",
	"cds_od_minimum_hosts":                    "a service's only endpoint can be ejected",
	"cds_od_request_volume":                   "endpoints are judged on no requests",
	"cds_cb_thresholds":                       "it reads the first DEFAULT threshold",
	"cds_cb_priority":                         "ignored: 1024 requests are allowed",
	"cds_cb_max_requests_zero":                "every RPC fails UNAVAILABLE",
	"cds_ring_hash_min_zero":                  "0 is read as the default (Envoy rejects it)",
	"cds_ring_hash_in_wrr_locality":           "one ring per locality: a key's endpoint follows the locality drawn",
	"cds_least_request_choice_count_over":     "capped at 10",
	"cds_endpoint_picking_at_top":             "the locality weights are ignored",
	"cds_cswrr_penalty_zero":                  "0 is read as 1.0",
	"cds_cswrr_blackout_zero":                 "0 is read as 10s",
	"cds_cswrr_expiration_negative":           "every weight is stale: round robin",
	"cds_cswrr_update_period":                 "clamped to 100ms",
	"cds_cswrr_oob_period":                    "servers report every 30s at most",
	"cds_metadata":                            "empty metadata parses",
	"cds_envoy_typed_struct_does_not_convert": "a TypedStruct naming no gRPC balancer is skipped; Envoy would reject it",
	"lds_inline_route_invalid":                "an inline route configuration needs no name",
	"lds_fault_invalid":                       "an HTTP status outside 200..599 aborts nothing",
	"rds_no_matching_domain":                  "RPCs fail: no virtual host matches",
	"rds_no_routes":                           "RPCs fail: no route matches",
	"rds_route_not_route_action":              "RPCs fail: the action is unsupported",
	"rds_route_cluster_empty":                 "RPCs fail: no cluster named ''",
	"rds_weighted_cluster_name_empty":         "RPCs fail: no cluster named ''",
	"rds_header_name_empty":                   "the matcher matches no header",
	"rds_header_name_uppercase":               "grpc-go lowercases the name",
	"rds_header_name_bin":                     "binary headers never match",
	"rds_header_invert":                       "valid; spillway has no rule for it",
	"rds_header_range":                        "valid; spillway has no rule for it",
	"rds_query_parameters":                    "the route is ignored",
	"rds_retry_num_retries_over":              "6 attempts: its xDS path does not cap them at 5",
	"rds_retry_max_below_base":                "the backoff is max_interval from the first retry",
	"rds_retry_base_below_1ms":                "the interval is used as is",
	"rds_retry_on_unknown":                    "no retries (a route's policy also shadows the virtual host's)",
	"rds_max_stream_duration_negative":        "every RPC fails DEADLINE_EXCEEDED at once",
	"rds_max_stream_duration_differ":          "it reads grpc_timeout_header_max only",
	"rds_hash_policy_header_bin":              "no hash: a random endpoint",
	"rds_hash_policy_cookie":                  "skipped: a random endpoint",
	"rds_filter_override_optional":            "an optional override of an unknown type is skipped",
	"rds_fault_override_name":                 "an override of no filter is unused",
	"rds_fault_empty":                         "it injects nothing",
	"rds_fault_invalid":                       "an HTTP status outside 200..599 aborts nothing",
	"rds_fault_headers":                       "ignored: every RPC is eligible",
	"rds_fault_grpc_status_zero":              "the RPC ends OK",
	"rds_fault_chance_over_whole":             "read as always",
	"rds_fault_max_active_zero":               "the filter is off",
}

// fixedADS is a state-of-the-world ADS server that sends one fixed
// resource per type, once, and reports how the client answered it.
type fixedADS struct {
	v3discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer
	res     map[string]*anypb.Any // by type URL
	answers chan answer
}

// answer is a client's ACK (detail "") or NACK of one type.
type answer struct {
	typeURL, detail string
}

func (f *fixedADS) StreamAggregatedResources(st v3discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	sent := map[string]bool{}
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		typ := req.GetTypeUrl()
		if req.GetResponseNonce() != "" {
			a := answer{typeURL: typ}
			if d := req.GetErrorDetail(); d != nil {
				a.detail = d.GetMessage()
				if a.detail == "" {
					a.detail = "NACK"
				}
			}
			select {
			case f.answers <- a:
			default:
			}
			continue
		}
		if sent[typ] || len(req.GetResourceNames()) == 0 || f.res[typ] == nil {
			continue
		}
		sent[typ] = true
		if err := st.Send(&v3discoverypb.DiscoveryResponse{VersionInfo: "1", TypeUrl: typ, Nonce: "1", Resources: []*anypb.Any{f.res[typ]}}); err != nil {
			return nil
		}
	}
}

// grpcAnswer serves the builders' resources for service web, with broken
// in place of its type, to a real grpc-go xDS client, and returns the
// client's answer to that type.
func grpcAnswer(t *testing.T, typeURL string, broken proto.Message) answer {
	t.Helper()
	var over map[string]proto.Message
	if broken != nil {
		over = map[string]proto.Message{typeURL: broken}
	}
	return grpcAnswers(t, over, typeURL)[typeURL]
}

// grpcAnswers serves the builders' resources for service web, those of
// over in place of theirs, to a real grpc-go xDS client, and returns the
// client's answers to the types of want: all of them, or those up to the
// first NACK among them (a client that rejects a type asks for no more).
// A NACK of another type fails the test.
func grpcAnswers(t *testing.T, over map[string]proto.Message, want ...string) map[string]answer {
	t.Helper()
	base := map[string]proto.Message{
		EndpointType: baseEDS(t), ClusterType: cluster("web"), ListenerType: baseLDS(t), RouteType: route("web"),
	}
	maps.Copy(base, over)
	f := &fixedADS{res: map[string]*anypb.Any{}, answers: make(chan answer, 16)}
	for typ, m := range base {
		f.res[typ] = mustAny(t, m)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	v3discoverygrpc.RegisterAggregatedDiscoveryServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	defer func() {
		srv.Stop()
		wg.Wait()
	}()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "check", "locality": {"zone": "zone-a"}}
	}`, lis.Addr().String())
	builder, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///web", grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	timeout := time.After(10 * time.Second)
	got := map[string]answer{}
	for len(got) < len(want) {
		select {
		case a := <-f.answers:
			if !slices.Contains(want, a.typeURL) {
				if a.detail != "" {
					t.Fatalf("the client NACKed %s, which is not broken: %s", shortType(a.typeURL), a.detail)
				}
				continue
			}
			got[a.typeURL] = a
			if a.detail != "" {
				return got
			}
		case <-timeout:
			t.Fatalf("the client answered %d of %d types within 10s: %v", len(got), len(want), got)
		}
	}
	return got
}

// TestCheckRulesAgainstGRPC: each rule checkForGRPC enforces is one a
// real grpc-go client enforces too: given the broken resource, it NACKs
// it, except for the rules listed in spillwayOnly, where it accepts the
// resource and then drops or fails on part of it. The builders' resources
// are ACKed.
func TestCheckRulesAgainstGRPC(t *testing.T) {
	for _, typ := range []string{ListenerType, RouteType, ClusterType, EndpointType} {
		if a := grpcAnswer(t, typ, nil); a.detail != "" {
			t.Errorf("the builders' %s was NACKed: %s", shortType(typ), a.detail)
		}
	}
	for _, r := range checkRules(t) {
		t.Run(r.name, func(t *testing.T) {
			typ, m := r.build(t)
			a := grpcAnswer(t, typ, m)
			why, strict := spillwayOnly[r.name]
			switch {
			case !strict && a.detail == "":
				t.Errorf("grpc-go ACKed the %s: the rule is not grpc-go's (list it in spillwayOnly with what grpc-go does)", shortType(typ))
			case strict && a.detail != "":
				t.Errorf("grpc-go NACKed the %s (%s): the rule is grpc-go's, not only spillway's (%s)", shortType(typ), a.detail, why)
			}
			if d := a.detail; d != "" {
				if len(d) > 200 {
					d = d[:200] + "…"
				}
				t.Logf("grpc-go: %s", d)
			}
		})
	}
}

// TestRuledRouteAcceptedByGRPC: a RouteConfiguration built from rules
// using every condition and action routing accepts (header exact,
// prefix, present and regex, a path prefix, one target, weighted
// targets, a default) passes checkForGRPC and a real grpc-go client
// ACKs it.
func TestRuledRouteAcceptedByGRPC(t *testing.T) {
	r, err := routing.Parse("test", []byte(`
rules:
  - name: synthetic
    match:
      headers:
        - {name: x-traffic-class, exact: synthetic}
        - {name: x-team, prefix: ml-}
        - {name: x-trace, present: true}
        - {name: x-shard, regex: "[0-9]+"}
      path_prefix: /payments.v1.Payments/
    to: web-synthetic
  - name: canary
    match: {}
    split:
      - {to: web, weight: 90}
      - {to: web-canary, weight: 10}
      - {to: web-off, weight: 0}
default: web-default
`))
	if err != nil {
		t.Fatal(err)
	}
	rc, dropped := routeWith("web", r, func(string) bool { return true }, nil)
	if len(dropped) != 0 {
		t.Fatalf("dropped = %v, want none", dropped)
	}
	if err := checkForGRPC(RouteType, rc); err != nil {
		t.Fatalf("checkForGRPC: %v", err)
	}
	if err := CheckRules("web", r); err != nil {
		t.Fatalf("CheckRules: %v", err)
	}
	if a := grpcAnswer(t, RouteType, rc); a.detail != "" {
		t.Errorf("grpc-go NACKed the ruled route: %s", a.detail)
	}
}

// TestPolicyAcceptedByGRPC: the Listener, RouteConfiguration (static and
// from rules) and Cluster of a service with a resilience policy, every
// part set, each endpoint-picking policy, the fault gated and not, pass
// checkForGRPC and a real grpc-go client ACKs them all at once.
func TestPolicyAcceptedByGRPC(t *testing.T) {
	rules, err := routing.Parse("test", []byte(`
rules:
  - name: tagged
    match: {headers: [{name: x-class, exact: batch}], path_prefix: /grpc.health.v1.Health/}
    split: [{to: web, weight: 90}, {to: web-canary, weight: 10}, {to: web-next, weight: 0}]
default: web
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, pol := range policyVariants() {
		for _, ruled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ruled=%t", name, ruled), func(t *testing.T) {
				l, err := listenerFor("web", pol)
				if err != nil {
					t.Fatal(err)
				}
				rc := routeFor("web", pol)
				if ruled {
					rc, _ = routeWith("web", rules, func(string) bool { return true }, nil)
					withPolicy(rc, pol)
				}
				over := map[string]proto.Message{ListenerType: l, RouteType: rc, ClusterType: clusterFor("web", pol)}
				for typ, m := range over {
					if err := checkForGRPC(typ, m); err != nil {
						t.Fatalf("checkForGRPC: %v", err)
					}
				}
				for typ, a := range grpcAnswers(t, over, ListenerType, RouteType, ClusterType, EndpointType) {
					if a.detail != "" {
						t.Errorf("grpc-go NACKed the %s: %s", shortType(typ), a.detail)
					}
				}
			})
		}
	}
}

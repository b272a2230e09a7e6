package xds

import (
	"fmt"
	"net"
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
	"cds_outlier_detection":                   "an empty outlier_detection is valid",
	"cds_metadata":                            "empty metadata parses",
	"cds_envoy_typed_struct_does_not_convert": "a TypedStruct naming no gRPC balancer is skipped; Envoy would reject it",
	"lds_inline_route_invalid":                "an inline route configuration needs no name",
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
	base := map[string]proto.Message{
		EndpointType: baseEDS(t), ClusterType: cluster("web"), ListenerType: baseLDS(t), RouteType: route("web"),
	}
	if broken != nil {
		base[typeURL] = broken
	}
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
	for {
		select {
		case a := <-f.answers:
			if a.typeURL == typeURL {
				return a
			}
			if a.detail != "" {
				t.Fatalf("the client NACKed %s, which is not broken: %s", shortType(a.typeURL), a.detail)
			}
		case <-timeout:
			t.Fatalf("the client answered no %s within 10s", shortType(typeURL))
		}
	}
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

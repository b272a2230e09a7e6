package xds_test

// Issue 10, point 4: what an Envoy sidecar needs of spillway.

import (
	"testing"

	v3xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3roundrobinpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

// TestEnvoyStartEmptyRegistry reproduces Envoy's start on a delta stream:
// a wildcard CDS request (Envoy's legacy form, naming nothing, and the
// explicit "*") with nothing registered. The answer, empty, comes at once:
// before the answer to a request sent right after it, so it is the
// answer to the request and not a later resync. Without it Envoy waits
// its initial_fetch_timeout (15 s) before it finishes starting.
func TestEnvoyStartEmptyRegistry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
	}{{"legacy-wildcard", nil}, {"explicit-wildcard", []string{"*"}}} {
		t.Run(tc.name, func(t *testing.T) {
			store := registry.NewStore()
			store.MarkSynced()
			srv := startRawXDS(t, store, xds.Config{})
			c := newDeltaClient(t, srv.conn)
			c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: tc.names})
			c.send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: lds, ResourceNamesSubscribe: []string{"after"}})
			r := c.recvType(cds)
			if len(r.GetResources()) != 0 || len(r.GetRemovedResources()) != 0 {
				t.Fatalf("first CDS response: resources %v, removed %v; want empty", deltaVersions(r), r.GetRemovedResources())
			}
			c.ack(r)
			if a := c.recvType(lds); len(a.GetResources()) != 0 {
				t.Fatalf("LDS answer holds %v", deltaVersions(a))
			}
			// The wildcard holds: a service registered later is pushed.
			srv.apply(t, registry.Upsert("web", rawEndpoint(1, 0)))
			r = c.recvType(cds)
			if got := deltaVersions(r); len(got) != 1 || got["web"] == "" {
				t.Fatalf("after web registered: resources %v, want web", got)
			}
		})
	}
}

// TestClusterLocalityWeightedForEnvoy: the Cluster makes Envoy honour
// locality weights on both of its paths: load_balancing_policy (the
// round_robin it picks, whose locality_lb_config asks for
// locality_weighted_lb_config) and the legacy lb_policy
// (common_lb_config.locality_weighted_lb_config). The same Cluster is
// what the grpc-go clients of the other tests accept.
func TestClusterLocalityWeightedForEnvoy(t *testing.T) {
	cl := fetchCluster(t, "web")
	if cl.GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Errorf("common_lb_config = %v, want locality_weighted_lb_config", cl.GetCommonLbConfig())
	}
	envoy := lbClient{knows: func(name string, _ bool) bool {
		for _, p := range envoyPolicies {
			if p == name {
				return true
			}
		}
		return false
	}, envoy: true}
	chosen, err := envoy.choose(t, cl.GetLoadBalancingPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if chosen[0] != rrPolicy {
		t.Fatalf("Envoy picks %v, want %s", chosen, rrPolicy)
	}
	// Unpack the policy Envoy picks as Envoy does: the TypedStruct's value
	// as the JSON of RoundRobin.
	var rr *v3roundrobinpb.RoundRobin
	for _, p := range cl.GetLoadBalancingPolicy().GetPolicies() {
		ts := &v3xdstypepb.TypedStruct{}
		if err := p.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(ts); err != nil || ts.GetTypeUrl() != "type.googleapis.com/"+rrPolicy {
			continue
		}
		js, err := protojson.Marshal(ts.GetValue())
		if err != nil {
			t.Fatal(err)
		}
		rr = &v3roundrobinpb.RoundRobin{}
		if err := protojson.Unmarshal(js, rr); err != nil {
			t.Fatalf("round_robin config %s: %v", js, err)
		}
		if err := rr.ValidateAll(); err != nil {
			t.Fatalf("round_robin config: %v", err)
		}
		break
	}
	if rr == nil {
		t.Fatal("no round_robin TypedStruct in load_balancing_policy")
	}
	if rr.GetLocalityLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Errorf("round_robin = %v, want locality_lb_config.locality_weighted_lb_config", rr)
	}
	if got := cl.GetLbPolicy(); got != v3clusterpb.Cluster_ROUND_ROBIN {
		t.Errorf("lb_policy = %v, want ROUND_ROBIN", got)
	}
}

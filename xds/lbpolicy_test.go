package xds_test

// Endpoint weights (issue 7, acceptance 4): this test binary imports
// clientlib/wrr, so its grpc-go xDS clients have the spillway.wrr balancer
// and get weighted picks inside a locality. The plain-client half, in a
// binary without it, is xds/internal/plaincheck.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1udpatypepb "github.com/cncf/xds/go/udpa/type/v1"
	v3xdstypepb "github.com/cncf/xds/go/xds/type/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3wrrlocalitypb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/clientlib/wrr"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

// Full names of the xDS LB policy messages the clients below know.
const (
	rrPolicy          = "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
	wrrLocalityPolicy = "envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality"
	cswrrPolicy       = "envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin"
)

// grpcPolicies are the policy messages grpc-go 1.85 converts
// (internal/xds/xdsclient/xdslbregistry/converter/converter.go, init).
var grpcPolicies = []string{
	cswrrPolicy, rrPolicy, wrrLocalityPolicy,
	"envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash",
	"envoy.extensions.load_balancing_policies.pick_first.v3.PickFirst",
	"envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
}

// envoyPolicies are the TypedLoadBalancerFactory types of a default Envoy
// build (source/extensions/extensions_build_config.bzl).
var envoyPolicies = []string{
	cswrrPolicy, rrPolicy, wrrLocalityPolicy,
	"envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
	"envoy.extensions.load_balancing_policies.random.v3.Random",
	"envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash",
	"envoy.extensions.load_balancing_policies.maglev.v3.Maglev",
	"envoy.extensions.load_balancing_policies.subset.v3.Subset",
	"envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided",
}

// lbClient is how one kind of client reads a load_balancing_policy.
type lbClient struct {
	// knows reports whether the client implements the policy named
	// typeName; typedStruct says the name came from a TypedStruct's
	// type_url rather than from the Any itself.
	knows func(typeName string, typedStruct bool) bool
	// envoy: Envoy's wrr_locality accepts only
	// client_side_weighted_round_robin as its child and rejects the
	// Cluster otherwise (wrr_locality/config.h, loadConfig).
	envoy bool
}

// choose walks p as the client does (gRFC A52; grpc-go's
// xdslbregistry.ConvertToServiceConfig; Envoy's
// ClusterInfoImpl::configureLbPolicies): the first entry it knows wins,
// and wrr_locality descends into its endpoint_picking_policy. It returns
// the chosen names, outermost first.
func (c lbClient) choose(t *testing.T, p *v3clusterpb.LoadBalancingPolicy) ([]string, error) {
	t.Helper()
	for _, pol := range p.GetPolicies() {
		a := pol.GetTypedExtensionConfig().GetTypedConfig()
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("policy %q: %v", pol.GetTypedExtensionConfig().GetName(), err)
		}
		name, typed := string(m.ProtoReflect().Descriptor().FullName()), false
		switch ts := m.(type) {
		case *v3xdstypepb.TypedStruct:
			name, typed = ts.GetTypeUrl()[strings.LastIndex(ts.GetTypeUrl(), "/")+1:], true
		case *v1udpatypepb.TypedStruct:
			name, typed = ts.GetTypeUrl()[strings.LastIndex(ts.GetTypeUrl(), "/")+1:], true
		}
		if !c.knows(name, typed) {
			continue
		}
		if name != wrrLocalityPolicy {
			return []string{name}, nil
		}
		wl := &v3wrrlocalitypb.WrrLocality{}
		if typed {
			t.Fatalf("wrr_locality in a TypedStruct is not handled here")
		}
		if err := a.UnmarshalTo(wl); err != nil {
			t.Fatal(err)
		}
		child, err := c.choose(t, wl.GetEndpointPickingPolicy())
		if err != nil {
			return nil, fmt.Errorf("wrr_locality: %w", err)
		}
		if c.envoy && child[0] != cswrrPolicy {
			return nil, fmt.Errorf("Envoy's wrr_locality rejects child %s", child[0])
		}
		return append([]string{name}, child...), nil
	}
	return nil, fmt.Errorf("no supported policy in %v", p)
}

// fetchCluster gets Cluster service from a fresh server over a raw ADS
// stream.
func fetchCluster(t *testing.T, service string) *v3clusterpb.Cluster {
	t.Helper()
	srv := startRawXDS(t, rawStore(t, map[string]int{service: 1}), xds.Config{})
	c := newSotwClient(t, srv.conn)
	c.subscribe(cds, service)
	got := sotwResources(t, c.recvType(cds))[service]
	cl, ok := got.(*v3clusterpb.Cluster)
	if !ok {
		t.Fatalf("CDS response holds %T for %s, want a Cluster", got, service)
	}
	return cl
}

// TestClusterLoadBalancingPolicy: the Cluster validates, keeps lb_policy
// ROUND_ROBIN for old clients, and its load_balancing_policy gives each
// kind of client the policy meant for it.
func TestClusterLoadBalancingPolicy(t *testing.T) {
	cl := fetchCluster(t, "web")
	if err := cl.ValidateAll(); err != nil {
		t.Fatalf("Cluster does not validate: %v", err)
	}
	if got, want := cl.GetLbPolicy(), v3clusterpb.Cluster_ROUND_ROBIN; got != want {
		t.Errorf("lb_policy = %v, want %v", got, want)
	}
	// The TypedStruct naming the balancer carries exactly wrr.TypeURL.
	raw, err := proto.Marshal(cl.GetLoadBalancingPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), wrr.TypeURL) {
		t.Errorf("load_balancing_policy does not name %s", wrr.TypeURL)
	}

	grpcKnows := func(registered func(string) bool) func(string, bool) bool {
		return func(name string, typedStruct bool) bool {
			if typedStruct { // grpc-go: a TypedStruct names a balancer
				return registered(name)
			}
			return slices.Contains(grpcPolicies, name)
		}
	}
	envoy := lbClient{envoy: true, knows: func(name string, _ bool) bool { return slices.Contains(envoyPolicies, name) }}
	tests := []struct {
		name   string
		client lbClient
		want   []string
	}{
		{"grpc_with_clientlib_wrr", lbClient{knows: grpcKnows(func(n string) bool { return balancer.Get(n) != nil })},
			[]string{wrrLocalityPolicy, wrr.Name}},
		{"grpc_plain", lbClient{knows: grpcKnows(func(n string) bool { return n != wrr.Name && balancer.Get(n) != nil })},
			[]string{wrrLocalityPolicy, rrPolicy}},
		{"envoy", envoy, []string{rrPolicy}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.client.choose(t, cl.GetLoadBalancingPolicy())
			if err != nil {
				t.Fatalf("choose: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("chosen policy (-want +got):\n%s", diff)
			}
		})
	}
	// Without the first entry, Envoy would reach wrr_locality over
	// round_robin and reject the Cluster.
	bad := &v3clusterpb.LoadBalancingPolicy{Policies: []*v3clusterpb.LoadBalancingPolicy_Policy{
		cl.GetLoadBalancingPolicy().GetPolicies()[1],
	}}
	if _, err := envoy.choose(t, bad); err == nil {
		t.Error("Envoy model accepted wrr_locality over round_robin; want a rejection")
	}
}

// checkRelShares fails unless backend i served want[i] of the n calls made
// since the counters were zeroed, within tol of it (relative).
func checkRelShares(t *testing.T, bs []*backend, want []float64, n int, tol float64) {
	t.Helper()
	for i, b := range bs {
		got := float64(b.calls.Load()) / float64(n)
		t.Logf("backend %d (%s): %d of %d RPCs, share %.4f, want %.4f", i, b.zone, b.calls.Load(), n, got, want[i])
		if got < want[i]*(1-tol) || got > want[i]*(1+tol) {
			t.Errorf("backend %d share = %.4f, want %.4f ± %.0f%% (relative)", i, got, want[i], tol*100)
		}
	}
}

// rpcs makes n RPCs on conn, one at a time.
func rpcs(t *testing.T, conn *grpc.ClientConn, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	for i := range n {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}
}

// warmUp makes RPCs until every backend has served one (so every endpoint
// is READY in the client's picker), then zeroes the counters.
func warmUp(t *testing.T, conn *grpc.ClientConn, bs []*backend) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for slices.ContainsFunc(bs, func(b *backend) bool { return b.calls.Load() == 0 }) {
		if time.Now().After(deadline) {
			t.Fatal("not every backend served an RPC within 30s")
		}
		rpcs(t, conn, 1)
	}
	for _, b := range bs {
		b.calls.Store(0)
	}
}

// TestWeightedEndpointsOneZone is acceptance 4, first half: backends
// weighted 1:2:4 in one zone get 1/7, 2/7 and 4/7 of 7,000 RPCs, each
// within 5% of its share (relative: 1000±50, 2000±100, 4000±200).
func TestWeightedEndpointsOneZone(t *testing.T) {
	if balancer.Get(wrr.Name) == nil {
		t.Fatalf("%s is not registered in this binary", wrr.Name)
	}
	store := registry.NewStore()
	store.MarkSynced()
	var bs []*backend
	for i, w := range []uint32{1, 2, 4} {
		b := startBackend(t, "zone-a")
		bs = append(bs, b)
		e := b.endpoint(fmt.Sprintf("w%d", i))
		e.Weight = w
		if _, err := store.Apply(registry.Upsert("web", e)); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := startXDS(t, store)
	conn := dialXDS(t, addr, "web", "zone-a", "weighted-client")
	warmUp(t, conn, bs)
	const n = 7000
	rpcs(t, conn, n)
	checkRelShares(t, bs, []float64{1.0 / 7, 2.0 / 7, 4.0 / 7}, n, 0.05)
}

// TestWeightedEndpointsKeepLocalityWeights: spillway.wrr works inside
// wrr_locality, so locality weights still split traffic between zones and
// endpoint weights split it inside a zone. Zone-a (locality weight 3) has
// endpoints weighted 1:3, zone-b (weight 1) one endpoint: shares 3/16,
// 9/16, 4/16. grpc-go picks localities at random, so the bound is 10%
// relative (over 4σ for the smallest share at 8,000 RPCs).
func TestWeightedEndpointsKeepLocalityWeights(t *testing.T) {
	store := registry.NewStore()
	store.MarkSynced()
	var bs []*backend
	for i, s := range []struct {
		zone string
		w    uint32
	}{{"zone-a", 1}, {"zone-a", 3}, {"zone-b", 5}} {
		b := startBackend(t, s.zone)
		bs = append(bs, b)
		e := b.endpoint(fmt.Sprintf("e%d", i))
		e.Weight = s.w
		if _, err := store.Apply(registry.Upsert("web", e)); err != nil {
			t.Fatal(err)
		}
	}
	weights := func(_ *registry.Service, _ string, locs []xds.Locality) []uint32 {
		out := make([]uint32, len(locs))
		for i, l := range locs {
			out[i] = map[string]uint32{"zone-a": 3, "zone-b": 1}[l.Zone]
		}
		return out
	}
	srv := startRawXDS(t, store, xds.Config{Weights: weights})
	conn := dialXDS(t, srv.addr, "web", "zone-a", "weighted-client")
	warmUp(t, conn, bs)
	const n = 8000
	rpcs(t, conn, n)
	checkRelShares(t, bs, []float64{3.0 / 16, 9.0 / 16, 4.0 / 16}, n, 0.10)
}

package main

import (
	"context"
	"net"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/e2e/bench/xdsbench/internal/benchdata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var allTypes = []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

// TestEndpointChangeSendsOnlyEDS opens a raw SotW ADS stream to the
// baseline, subscribes to the four types of one service, ACKs everything,
// makes two endpoint changes (one on the stream's service, one on another)
// and checks that only EDS responses followed, each at a new EDS version,
// and that the cache kept the other types' versions. A baseline built with
// cache.NewSnapshot (one version for all types) re-sends all four types on
// every change and fails here.
func TestEndpointChangeSendsOnlyEDS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := newModel(ctx, testData())
	if err != nil {
		t.Fatalf("newModel: %v", err)
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	srv := newGRPCServer(srvCtx, m.cache)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(lis) }()
	defer func() { stopSrv(); srv.Stop(); <-served }()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ads, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	const name = "svc-001"
	node := &v3corepb.Node{Id: "test-0", Locality: &v3corepb.Locality{Region: benchdata.Region, Zone: "zone-a"}}
	for i, typ := range allTypes {
		req := &v3discoverypb.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{name}}
		if i == 0 {
			req.Node = node
		}
		if err := ads.Send(req); err != nil {
			t.Fatalf("subscribe %s: %v", typ, err)
		}
	}
	// recv reads one response and ACKs it.
	recv := func() *v3discoverypb.DiscoveryResponse {
		t.Helper()
		resp, err := ads.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if err := ads.Send(&v3discoverypb.DiscoveryRequest{
			TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: []string{name},
		}); err != nil {
			t.Fatalf("ack: %v", err)
		}
		return resp
	}

	initial := map[string]string{} // type -> version
	for len(initial) < len(allTypes) {
		resp := recv()
		if _, dup := initial[resp.GetTypeUrl()]; dup {
			t.Fatalf("initial sync: second %s response before all four types arrived", resp.GetTypeUrl())
		}
		if n := len(resp.GetResources()); n != 1 {
			t.Fatalf("initial %s: %d resources, want 1", resp.GetTypeUrl(), n)
		}
		initial[resp.GetTypeUrl()] = resp.GetVersionInfo()
	}

	// Change 1 adds an endpoint to the stream's service; change 2 removes
	// one from another service, which still bumps the zone's EDS version.
	v1, err := m.change(ctx, "add", name, "add-0", "10.200.0.1", "zone-b")
	if err != nil {
		t.Fatalf("change 1: %v", err)
	}
	resp := recv()
	if resp.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("after change 1: %s response (version %s), want only EDS", resp.GetTypeUrl(), resp.GetVersionInfo())
	}
	if resp.GetVersionInfo() != v1 {
		t.Fatalf("after change 1: EDS version %s, want %s", resp.GetVersionInfo(), v1)
	}
	if !hasAddress(t, resp, "10.200.0.1") {
		t.Errorf("after change 1: EDS of %s does not hold the added 10.200.0.1", name)
	}
	v2, err := m.change(ctx, "remove", "svc-002", "", "10.1.2.1", "")
	if err != nil {
		t.Fatalf("change 2: %v", err)
	}
	resp = recv()
	if resp.GetTypeUrl() != resource.EndpointType || resp.GetVersionInfo() != v2 {
		t.Fatalf("after change 2: %s response at version %s, want only EDS at %s", resp.GetTypeUrl(), resp.GetVersionInfo(), v2)
	}

	snap, err := m.snapshots.GetSnapshot("zone-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range allTypes[:3] {
		if got := snap.GetVersion(typ); got != initial[typ] {
			t.Errorf("%s version after two endpoint changes = %s, want %s (unchanged)", typ, got, initial[typ])
		}
	}
	if got := snap.GetVersion(resource.EndpointType); got == initial[resource.EndpointType] {
		t.Errorf("EDS version after two endpoint changes = %s, want a new one", got)
	}
}

// testData is 4 services of 3 endpoints over 3 zones.
func testData() dataSet {
	return dataSet{services: benchdata.Services(4, 3, 3), zones: benchdata.Zones(3)}
}

// TestLinearAnswersOnlyChangedResource opens a raw SotW ADS stream to the
// LinearCache baseline, subscribes to the four types of one service and
// ACKs everything; then it changes another service and then its own. The
// first response after the initial four must be the EDS of its own
// service's change: the LinearCache answers only the watches of the
// resource that changed (a SnapshotCache would send one for each change).
func TestLinearAnswersOnlyChangedResource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := newLinearModel(testData())
	if err != nil {
		t.Fatalf("newLinearModel: %v", err)
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	srv := newGRPCServer(srvCtx, m.cache)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(lis) }()
	defer func() { stopSrv(); srv.Stop(); <-served }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ads, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	const name = "svc-001"
	node := &v3corepb.Node{Id: "test-0", Locality: &v3corepb.Locality{Region: benchdata.Region, Zone: "zone-b"}}
	for i, typ := range allTypes {
		req := &v3discoverypb.DiscoveryRequest{TypeUrl: typ, ResourceNames: []string{name}}
		if i == 0 {
			req.Node = node
		}
		if err := ads.Send(req); err != nil {
			t.Fatalf("subscribe %s: %v", typ, err)
		}
	}
	recv := func() *v3discoverypb.DiscoveryResponse {
		t.Helper()
		resp, err := ads.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if err := ads.Send(&v3discoverypb.DiscoveryRequest{
			TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: []string{name},
		}); err != nil {
			t.Fatalf("ack: %v", err)
		}
		return resp
	}
	seen := map[string]bool{}
	for len(seen) < len(allTypes) {
		resp := recv()
		if seen[resp.GetTypeUrl()] {
			t.Fatalf("initial sync: second %s response before all four types arrived", resp.GetTypeUrl())
		}
		if n := len(resp.GetResources()); n != 1 {
			t.Fatalf("initial %s: %d resources, want 1", resp.GetTypeUrl(), n)
		}
		seen[resp.GetTypeUrl()] = true
	}
	if _, err := m.change(ctx, "remove", "svc-002", "", "10.1.2.1", ""); err != nil {
		t.Fatalf("change of svc-002: %v", err)
	}
	if _, err := m.change(ctx, "add", name, "add-0", "10.200.0.1", "zone-a"); err != nil {
		t.Fatalf("change of %s: %v", name, err)
	}
	resp := recv()
	if resp.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("after the changes: %s response, want EDS", resp.GetTypeUrl())
	}
	if !hasAddress(t, resp, "10.200.0.1") {
		t.Errorf("first response after the changes does not hold %s's added 10.200.0.1: the stream was sent svc-002's change", name)
	}
}

func hasAddress(t *testing.T, resp *v3discoverypb.DiscoveryResponse, addr string) bool {
	t.Helper()
	for _, a := range resp.GetResources() {
		cla := new(v3endpointpb.ClusterLoadAssignment)
		if err := proto.Unmarshal(a.GetValue(), cla); err != nil {
			t.Fatalf("EDS: %v", err)
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				if e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() == addr {
					return true
				}
			}
		}
	}
	return false
}

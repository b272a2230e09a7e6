// Tests of the Envoy sidecar bootstrap (envoy.yaml): it decodes with
// Envoy's own protos, validates, and is what spillway serves to.
package envoy_test

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	v3bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	v3httpupstreampb "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	// The typed configs the bootstrap names, so that their Anys decode.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loadBootstrap reads envoy.yaml as Envoy does: YAML to JSON to the
// Bootstrap proto, unknown fields and unknown types rejected, then the
// proto constraints.
func loadBootstrap(t *testing.T) *v3bootstrappb.Bootstrap {
	t.Helper()
	raw, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("envoy.yaml as JSON: %v", err)
	}
	b := &v3bootstrappb.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatalf("envoy.yaml does not decode as envoy.config.bootstrap.v3.Bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml does not validate: %v", err)
	}
	return b
}

// TestBootstrap: the bootstrap decodes and validates, and says what an
// Envoy sidecar of spillway needs: a zone, CDS over ADS (no LDS: the
// listeners are here), ADS and LRS to a static HTTP/2 cluster on
// spillway's default gRPC address, and routes to clusters by service name.
func TestBootstrap(t *testing.T) {
	b := loadBootstrap(t)
	if b.GetNode().GetId() == "" || b.GetNode().GetLocality().GetZone() == "" {
		t.Errorf("node = %v, want an id and locality.zone", b.GetNode())
	}
	dyn := b.GetDynamicResources()
	if dyn.GetCdsConfig().GetAds() == nil {
		t.Errorf("cds_config = %v, want ads", dyn.GetCdsConfig())
	}
	if dyn.GetLdsConfig() != nil {
		t.Errorf("lds_config = %v, want none: spillway's listeners are API listeners", dyn.GetLdsConfig())
	}
	ads := dyn.GetAdsConfig()
	if k := ads.GetApiType(); k != v3corepb.ApiConfigSource_DELTA_GRPC && k != v3corepb.ApiConfigSource_GRPC {
		t.Errorf("ads_config.api_type = %v, want DELTA_GRPC or GRPC", k)
	}
	adsCluster := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	lrsCluster := b.GetClusterManager().GetLoadStatsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	if lrsCluster != adsCluster {
		t.Errorf("load_stats_config cluster %q, want the ADS cluster %q", lrsCluster, adsCluster)
	}
	static := map[string]*v3clusterpb.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		static[c.GetName()] = c
	}
	sp, ok := static[adsCluster]
	if !ok {
		t.Fatalf("ADS cluster %q is not a static cluster", adsCluster)
	}
	sa := sp.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if got := netip.AddrPortFrom(netip.MustParseAddr(sa.GetAddress()), uint16(sa.GetPortValue())).String(); got != "127.0.0.1:18000" {
		t.Errorf("spillway at %s, want its default gRPC address 127.0.0.1:18000", got)
	}
	opts := &v3httpupstreampb.HttpProtocolOptions{}
	if err := sp.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(opts); err != nil {
		t.Fatalf("spillway cluster protocol options: %v", err)
	}
	if err := opts.ValidateAll(); err != nil {
		t.Fatalf("spillway cluster protocol options: %v", err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("spillway cluster does not speak HTTP/2: gRPC needs it")
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		if a := l.GetAddress().GetSocketAddress().GetAddress(); a != "127.0.0.1" {
			t.Errorf("listener %s on %s, want 127.0.0.1", l.GetName(), a)
		}
	}
	if got := routedClusters(t, b); len(got) == 0 {
		t.Error("no route to a spillway cluster")
	}
}

// routedClusters lists the clusters the static listeners route to.
func routedClusters(t *testing.T, b *v3bootstrappb.Bootstrap) []string {
	t.Helper()
	var out []string
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &v3hcmpb.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatalf("listener %s: %v", l.GetName(), err)
				}
				// Validation does not enter an Any: validate it here.
				if err := hcm.ValidateAll(); err != nil {
					t.Fatalf("listener %s: http_connection_manager: %v", l.GetName(), err)
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						out = append(out, r.GetRoute().GetCluster())
					}
				}
			}
		}
	}
	return out
}

// TestBootstrapAgainstSpillway: an Envoy start with this bootstrap's node,
// replayed on a delta stream to a spillway server: the wildcard CDS gets
// the clusters the routes name, with locality-weighted round robin, and
// EDS gets the endpoints weighted for the bootstrap's zone.
func TestBootstrapAgainstSpillway(t *testing.T) {
	b := loadBootstrap(t)
	routed := routedClusters(t, b)
	store := registry.NewStore()
	for i, zone := range []string{"zone-a", "zone-b", "zone-b"} {
		if _, err := store.Apply(registry.Upsert(routed[0], &registry.Endpoint{
			ID: "e" + string(rune('0'+i)), Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy, Source: registry.SourceStatic,
		})); err != nil {
			t.Fatal(err)
		}
	}
	store.MarkSynced()
	x, err := xds.New(xds.Config{Store: store, Debounce: 10 * time.Millisecond, LRSInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(xds.Codec()))
	x.Register(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	wg.Go(func() { x.Run(ctx) })
	defer func() {
		cancel()
		srv.Stop()
		wg.Wait()
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&v3discoverypb.DeltaDiscoveryRequest{Node: b.GetNode(), TypeUrl: xds.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	clusters := map[string]*v3clusterpb.Cluster{}
	for _, r := range resp.GetResources() {
		c := &v3clusterpb.Cluster{}
		if err := r.GetResource().UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		if err := c.ValidateAll(); err != nil {
			t.Fatalf("cluster %s: %v", c.GetName(), err)
		}
		clusters[c.GetName()] = c
	}
	c, ok := clusters[routed[0]]
	if !ok {
		t.Fatalf("CDS gave %v, want the routed cluster %s", clusters, routed[0])
	}
	if c.GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Errorf("cluster %s: no locality_weighted_lb_config", c.GetName())
	}
	if err := stream.Send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType, ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&v3discoverypb.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType,
		ResourceNamesSubscribe: []string{c.GetEdsClusterConfig().GetServiceName()}}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTypeUrl() != xds.EndpointType || len(resp.GetResources()) != 1 {
		t.Fatalf("EDS response: type %s, %d resources", resp.GetTypeUrl(), len(resp.GetResources()))
	}
	cla := &v3endpointpb.ClusterLoadAssignment{}
	if err := resp.GetResources()[0].GetResource().UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	weights := map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		weights[l.GetLocality().GetZone()] = l.GetLoadBalancingWeight().GetValue()
	}
	if weights["zone-a"] == 0 || weights["zone-b"] == 0 {
		t.Errorf("locality weights = %v, want both zones weighted", weights)
	}
}

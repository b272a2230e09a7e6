package xds_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

// TestEndpointHostnames: an EDS endpoint's hostname is its id unless
// Config.OmitHostnames, then it is empty, in every client zone's variant
// (the first zone's is built in full, the next ones copy its endpoints),
// and the addresses and ports are the same either way.
func TestEndpointHostnames(t *testing.T) {
	for _, tc := range []struct {
		name string
		omit bool
	}{
		{"id", false},
		{"none", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := registry.NewStore()
			var ops []registry.Op
			for i := range 6 {
				e := &registry.Endpoint{
					ID:       fmt.Sprintf("web-%d", i),
					Address:  netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}),
					Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
					Locality: registry.Locality{Region: "r1", Zone: []string{"zone-a", "zone-b"}[i%2]},
					Health:   registry.Healthy, Source: registry.SourceStatic,
				}
				ops = append(ops, registry.Upsert("web", e))
			}
			if _, err := store.Apply(ops...); err != nil {
				t.Fatal(err)
			}
			store.MarkSynced()
			srv := startRawXDS(t, store, xds.Config{OmitHostnames: tc.omit})
			for _, zone := range []string{"zone-a", "zone-b", "zone-c"} {
				c := newSotwClient(t, srv.conn)
				c.node = &v3corepb.Node{Id: "client-" + zone, Cluster: "tests", Locality: &v3corepb.Locality{Region: "r1", Zone: zone}}
				c.subscribe(edsURL, "web")
				resp := c.recvType(edsURL)
				if len(resp.GetResources()) != 1 {
					t.Fatalf("zone %s: %d resources, want 1", zone, len(resp.GetResources()))
				}
				cla := &v3endpointpb.ClusterLoadAssignment{}
				if err := resp.GetResources()[0].UnmarshalTo(cla); err != nil {
					t.Fatalf("zone %s: %v", zone, err)
				}
				var addrs, hosts []string
				for _, l := range cla.GetEndpoints() {
					for _, e := range l.GetLbEndpoints() {
						sa := e.GetEndpoint().GetAddress().GetSocketAddress()
						addrs = append(addrs, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
						if h := e.GetEndpoint().GetHostname(); h != "" {
							hosts = append(hosts, h)
						}
					}
				}
				slices.Sort(addrs)
				slices.Sort(hosts)
				wantAddrs := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.4:8080", "10.0.0.5:8080", "10.0.0.6:8080"}
				if !slices.Equal(addrs, wantAddrs) {
					t.Errorf("zone %s: addresses %v, want %v", zone, addrs, wantAddrs)
				}
				wantHosts := []string{"web-0", "web-1", "web-2", "web-3", "web-4", "web-5"}
				if tc.omit {
					wantHosts = nil
				}
				if !slices.Equal(hosts, wantHosts) {
					t.Errorf("zone %s: hostnames %v, want %v", zone, hosts, wantHosts)
				}
			}
		})
	}
}

package xds

import (
	"fmt"
	"net/netip"
	"testing"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/spillway/spillway/registry"
)

func svcWith(eps ...*registry.Endpoint) *registry.Service {
	return &registry.Service{Name: "web", Version: 1, Endpoints: eps}
}

func ep(id, addr, zone string, h registry.Health, weight uint32) *registry.Endpoint {
	return &registry.Endpoint{
		ID: id, Address: netip.MustParseAddr(addr),
		Ports:    []registry.Port{{Name: "http", Number: 80, Protocol: registry.TCP}, {Name: "grpc", Number: 8080, Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "r1", Zone: zone}, Health: h, Weight: weight, Source: registry.SourceStatic,
	}
}

func TestClusterLoadAssignment(t *testing.T) {
	svc := svcWith(
		ep("a1", "10.0.0.1", "zone-b", registry.Healthy, 100),
		ep("a2", "10.0.0.2", "zone-b", registry.Draining, 100),
		ep("a3", "10.0.0.3", "zone-a", registry.Healthy, 7),
		ep("a4", "10.0.0.4", "zone-c", registry.Unhealthy, 100), // zone-c has no healthy endpoint
	)
	cla, err := clusterLoadAssignment(svc, "grpc", "zone-a", healthyCountWeights)
	if err != nil {
		t.Fatal(err)
	}
	type lle struct {
		Zone   string
		Weight uint32
		Eps    []string
	}
	var got []lle
	for _, l := range cla.GetEndpoints() {
		x := lle{Zone: l.GetLocality().GetZone(), Weight: l.GetLoadBalancingWeight().GetValue()}
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			x.Eps = append(x.Eps, fmt.Sprintf("%s:%d %s w%d", sa.GetAddress(), sa.GetPortValue(), e.GetHealthStatus(), e.GetLoadBalancingWeight().GetValue()))
		}
		got = append(got, x)
	}
	want := []lle{
		{"zone-a", 1, []string{"10.0.0.3:8080 HEALTHY w7"}},
		{"zone-b", 1, []string{"10.0.0.1:8080 HEALTHY w100", "10.0.0.2:8080 DRAINING w100"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CLA (-want +got):\n%s", diff)
	}
	if _, err := encode("web", cla); err != nil {
		t.Errorf("valid CLA failed validation: %v", err)
	}
}

func TestZeroLocalityWeightRejected(t *testing.T) {
	svc := svcWith(ep("a1", "10.0.0.1", "zone-a", registry.Healthy, 1))
	zero := func(*registry.Service, string, []Locality) []uint32 { return []uint32{0} }
	if _, err := clusterLoadAssignment(svc, "grpc", "zone-a", zero); err == nil {
		t.Error("a locality weight of 0 was accepted; gRPC would drop the locality")
	}
}

func TestStaticResourcesValidate(t *testing.T) {
	for typ := range 3 {
		s := &Server{}
		r, err := s.buildStatic(typ, "payments.prod")
		if err != nil {
			t.Fatalf("%s: %v", shortType(typeURLs[typ]), err)
		}
		if r.any.GetTypeUrl() != typeURLs[typ] {
			t.Errorf("type %s, want %s", r.any.GetTypeUrl(), typeURLs[typ])
		}
	}
}

// TestRawResponseDecodes: what the codec writes is the DiscoveryResponse a
// client decodes, field for field.
func TestRawResponseDecodes(t *testing.T) {
	var res []*resource
	for i := range 3 {
		cla := &v3endpointpb.ClusterLoadAssignment{ClusterName: fmt.Sprintf("svc-%d", i)}
		r, err := encode(cla.ClusterName, cla)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	raw := newRawResponse("v1", EndpointType, "7", res)
	var b []byte
	for _, buf := range raw.bufs {
		b = append(b, buf.ReadOnlyData()...)
	}
	got := &v3discoverypb.DiscoveryResponse{}
	if err := proto.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	want := &v3discoverypb.DiscoveryResponse{VersionInfo: "v1", TypeUrl: EndpointType, Nonce: "7"}
	for _, r := range res {
		want.Resources = append(want.Resources, r.any)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("decoded response (-want +got):\n%s", diff)
	}
	// Equal content, equal bytes and version.
	again, _ := encode("svc-0", &v3endpointpb.ClusterLoadAssignment{ClusterName: "svc-0"})
	if again.version != res[0].version {
		t.Error("the same content encoded twice got two versions")
	}
}

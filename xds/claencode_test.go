package xds

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// appendCLA must write exactly what the generic deterministic marshaler
// writes, for every assignment the builder makes: random services (up to
// 40 endpoints over 3 regions of 3 zones, some not healthy, some without
// the port, endpoint weights from a plan or by locality, priorities by
// region), plus the shapes a random service rarely gives: no endpoint, an
// empty locality, empty strings, a port of 0, a weight wrapper holding 0.
func TestCLAEncodingMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(what string, cla *v3endpointpb.ClusterLoadAssignment) {
		t.Helper()
		if !claEncodable(cla) {
			t.Fatalf("%s: claEncodable = false for a built assignment", what)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
		if err != nil {
			t.Fatal(err)
		}
		if n := sizeCLA(cla); n != len(want) {
			t.Fatalf("%s: sizeCLA = %d, the marshaler wrote %d", what, n, len(want))
		}
		if got := appendCLA(nil, cla); !bytes.Equal(got, want) {
			t.Fatalf("%s: appendCLA differs from proto.Marshal:\n got %x\nwant %x", what, got, want)
		}
	}
	b := new(claBuilder)
	for i := range 500 {
		svc := randomService(t, rng, fmt.Sprintf("svc%d", i%7))
		prio, epw := randomBuild(rng, svc)
		cla, err := b.build(svc, "grpc", fmt.Sprintf("z%d", rng.IntN(3)), healthyCountWeights, epw, prio)
		if err != nil {
			continue // a priority missing: refused before encoding
		}
		check(fmt.Sprintf("build %d", i), cla)
	}
	port := func(p uint32) *v3corepb.SocketAddress_PortValue {
		return &v3corepb.SocketAddress_PortValue{PortValue: p}
	}
	lb := func(addr, host string, p uint32, h v3corepb.HealthStatus, w *wrapperspb.UInt32Value) *v3endpointpb.LbEndpoint {
		return &v3endpointpb.LbEndpoint{
			HostIdentifier: &v3endpointpb.LbEndpoint_Endpoint{Endpoint: &v3endpointpb.Endpoint{
				Address:  &v3corepb.Address{Address: &v3corepb.Address_SocketAddress{SocketAddress: &v3corepb.SocketAddress{Address: addr, PortSpecifier: port(p)}}},
				Hostname: host,
			}},
			HealthStatus: h, LoadBalancingWeight: w,
		}
	}
	for name, cla := range map[string]*v3endpointpb.ClusterLoadAssignment{
		"empty":            {},
		"name only":        {ClusterName: "web"},
		"empty locality":   {ClusterName: "web", Endpoints: []*v3endpointpb.LocalityLbEndpoints{{Locality: &v3corepb.Locality{}}}},
		"no locality":      {ClusterName: "web", Endpoints: []*v3endpointpb.LocalityLbEndpoints{{Priority: 3}}},
		"zero port, empty": {ClusterName: "web", Endpoints: []*v3endpointpb.LocalityLbEndpoints{{LbEndpoints: []*v3endpointpb.LbEndpoint{lb("", "", 0, 0, nil)}}}},
		"zero weights": {ClusterName: "web", Endpoints: []*v3endpointpb.LocalityLbEndpoints{{
			Locality:            &v3corepb.Locality{SubZone: "s"},
			LoadBalancingWeight: wrapperspb.UInt32(0),
			LbEndpoints:         []*v3endpointpb.LbEndpoint{lb("10.0.0.1", "h", 65535, v3corepb.HealthStatus_DRAINING, wrapperspb.UInt32(0))},
		}}},
		"large values": {ClusterName: "web", Endpoints: []*v3endpointpb.LocalityLbEndpoints{{
			Locality: &v3corepb.Locality{Region: "r", Zone: "z"}, Priority: 1 << 31,
			LoadBalancingWeight: wrapperspb.UInt32(1<<32 - 1),
			LbEndpoints:         []*v3endpointpb.LbEndpoint{lb("2001:db8::1", "a-long-hostname", 8080, v3corepb.HealthStatus_UNHEALTHY, wrapperspb.UInt32(1<<32-1))},
		}}},
	} {
		check(name, cla)
	}
}

// An assignment holding a field appendCLA does not write is marshaled
// the generic way, and encodes as before.
func TestCLAEncodingFallsBack(t *testing.T) {
	for name, cla := range map[string]*v3endpointpb.ClusterLoadAssignment{
		"policy": {ClusterName: "web", Policy: &v3endpointpb.ClusterLoadAssignment_Policy{
			DropOverloads: []*v3endpointpb.ClusterLoadAssignment_Policy_DropOverload{{Category: "c", DropPercentage: &v3typepb.FractionalPercent{Numerator: 1}}},
		}},
		"endpoint name": {ClusterName: "web", Endpoints: []*v3endpointpb.LocalityLbEndpoints{{
			Locality:    &v3corepb.Locality{},
			LbEndpoints: []*v3endpointpb.LbEndpoint{{HostIdentifier: &v3endpointpb.LbEndpoint_EndpointName{EndpointName: "x"}}},
		}}},
		"named port": {ClusterName: "web", Endpoints: []*v3endpointpb.LocalityLbEndpoints{{
			LbEndpoints: []*v3endpointpb.LbEndpoint{{HostIdentifier: &v3endpointpb.LbEndpoint_Endpoint{Endpoint: &v3endpointpb.Endpoint{
				Address: &v3corepb.Address{Address: &v3corepb.Address_SocketAddress{SocketAddress: &v3corepb.SocketAddress{Address: "10.0.0.1", PortSpecifier: &v3corepb.SocketAddress_NamedPort{NamedPort: "grpc"}}}},
			}}}},
		}}},
	} {
		if claEncodable(cla) {
			t.Errorf("%s: claEncodable = true", name)
		}
	}
}

// BenchmarkEncodeCLA is the marshaling alone of a built assignment of
// 1,000 endpoints: the generic marshaler against appendCLA.
//
//	go test -run '^$' -bench BenchmarkEncodeCLA -benchmem ./xds/
func BenchmarkEncodeCLA(b *testing.B) {
	svc, _ := benchStore(b, 1000).Snapshot().Service("web")
	cla, err := new(claBuilder).build(svc, "grpc", "zone-a", healthyCountWeights, endpointWeights{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			opts := proto.MarshalOptions{Deterministic: true}
			buf := make([]byte, 0, opts.Size(cla))
			if _, err := opts.MarshalAppend(buf, cla); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendCLA", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf := make([]byte, 0, sizeCLA(cla))
			_ = appendCLA(buf, cla)
		}
	})
}

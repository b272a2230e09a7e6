package main

import (
	"errors"
	"fmt"
	"testing"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// cla is an assignment of name holding addrs in zone-a.
func cla(t *testing.T, name string, addrs ...string) *anypb.Any {
	t.Helper()
	var lbs []*v3endpointpb.LbEndpoint
	for _, a := range addrs {
		lbs = append(lbs, &v3endpointpb.LbEndpoint{HostIdentifier: &v3endpointpb.LbEndpoint_Endpoint{Endpoint: &v3endpointpb.Endpoint{
			Address: &v3corepb.Address{Address: &v3corepb.Address_SocketAddress{SocketAddress: &v3corepb.SocketAddress{
				Address: a, PortSpecifier: &v3corepb.SocketAddress_PortValue{PortValue: 8080},
			}}},
		}}})
	}
	a, err := anypb.New(&v3endpointpb.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints:   []*v3endpointpb.LocalityLbEndpoints{{Locality: &v3corepb.Locality{Zone: "zone-a"}, LbEndpoints: lbs}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestReflects(t *testing.T) {
	resp := &v3discoverypb.DiscoveryResponse{Resources: []*anypb.Any{
		cla(t, "svc-1", "10.250.0.10"),
		cla(t, "svc-2", "10.250.0.1", "10.0.0.7"),
	}}
	for _, tc := range []struct {
		name    string
		service string
		address string
		add     bool
		want    bool
	}{
		{"added_present", "svc-2", "10.250.0.1", true, true},
		{"added_absent", "svc-2", "10.250.0.2", true, false},
		{"prefix_of_another_is_absent", "svc-1", "10.250.0.1", true, false},
		{"removed_absent", "svc-1", "10.250.0.1", false, true},
		{"removed_present", "svc-2", "10.0.0.7", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := claNamed(resp, tc.service)
			if err != nil || b == nil {
				t.Fatalf("claNamed(%s) = %v, %v; want its assignment", tc.service, b, err)
			}
			p := &pendingChange{address: tc.address, add: tc.add}
			if got := p.reflects(b); got != tc.want {
				t.Errorf("reflects = %v, want %v", got, tc.want)
			}
		})
	}
	if b, err := claNamed(resp, "svc-3"); b != nil || err != nil {
		t.Errorf("claNamed(svc-3) = %v, %v; want nil, nil", b, err)
	}
}

func TestFailureSummary(t *testing.T) {
	reset := func(from string) error {
		return errors.New("rpc error: code = Unavailable desc = error reading from server: read tcp " + from + "->127.0.0.1:4000: read: connection reset by peer")
	}
	for _, tc := range []struct {
		name string
		errs []error
		want string
	}{
		{"none", nil, ""},
		{"addresses differ, one kind", []error{reset("127.100.0.1:5000"), reset("127.100.0.2:6000")},
			"2× rpc error: code = Unavailable desc = error reading from server: read tcp ADDR->ADDR: read: connection reset by peer"},
		{"most frequent first", []error{errors.New("b"), errors.New("a"), errors.New("a")}, "2× a; 1× b"},
		{"kinds bounded", func() []error {
			var errs []error
			for i := range maxFailureKinds + 3 {
				errs = append(errs, fmt.Errorf("kind %02d", i))
			}
			return errs
		}(), "3× other; 1× kind 00; 1× kind 01; 1× kind 02; 1× kind 03; 1× kind 04; 1× kind 05; 1× kind 06; 1× kind 07"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fleet{}
			for _, err := range tc.errs {
				f.noteFailure(err)
			}
			if got := f.failureSummary(); got != tc.want {
				t.Errorf("failureSummary() = %q, want %q", got, tc.want)
			}
		})
	}
}

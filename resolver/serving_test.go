package resolver

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
)

// TestAddressConflictAnswers: two endpoints claiming one address and port
// (a VM agent and a static entry) give one SRV record and one A record,
// the VM's, as xDS serves it (registry.Service.Serving).
func TestAddressConflictAnswers(t *testing.T) {
	store, s := newTestServer(t)
	vm := &registry.Endpoint{ID: "vm-1", Address: netip.MustParseAddr("10.0.0.1"),
		Ports:  []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
		Health: registry.Healthy, Weight: 100, Source: registry.SourceVM}
	static := vm.Clone()
	static.ID, static.Source = "a-static", registry.SourceStatic
	mustApply(t, store, registry.Upsert("web", vm), registry.Upsert("web", static))

	srv, _ := query(t, s, newQuery("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), true)
	if diff := cmp.Diff(zone("_grpc._tcp.web.spillway.internal. 5 IN SRV 0 65535 8080 vm-1.web.spillway.internal."), rrStrings(srv.Answer)); diff != "" {
		t.Errorf("SRV answer (-want +got):\n%s", diff)
	}
	a, _ := query(t, s, newQuery("web.spillway.internal.", dns.TypeA), true)
	if diff := cmp.Diff(zone("web.spillway.internal. 5 IN A 10.0.0.1"), rrStrings(a.Answer)); diff != "" {
		t.Errorf("A answer (-want +got):\n%s", diff)
	}
}

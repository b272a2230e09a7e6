package registry

import (
	"fmt"
	"net/netip"
	"testing"
	"unsafe"
)

func TestInternSharesPortsAndNames(t *testing.T) {
	ep := func(id, addr, zone string, ports ...Port) *Endpoint {
		return &Endpoint{ID: id, Address: netip.MustParseAddr(addr), Ports: ports, Locality: Locality{Region: "r1", Zone: zone}, Source: SourceVM}
	}
	grpc := Port{Name: "grpc", Number: 8080, Protocol: TCP}
	cases := []struct {
		name       string
		a, b       *Endpoint
		sharePorts bool
		shareZone  bool
	}{
		{"same_ports_same_zone", ep("a", "10.0.0.1", "z1", grpc), ep("b", "10.0.0.2", "z1", grpc), true, true},
		{"same_ports_other_zone", ep("a", "10.0.0.1", "z1", grpc), ep("b", "10.0.0.2", "z2", grpc), true, false},
		{"other_number", ep("a", "10.0.0.1", "z1", grpc), ep("b", "10.0.0.2", "z1", Port{Name: "grpc", Number: 9090, Protocol: TCP}), false, true},
		{"other_protocol", ep("a", "10.0.0.1", "z1", grpc), ep("b", "10.0.0.2", "z1", Port{Name: "grpc", Number: 8080, Protocol: UDP}), false, true},
		{"two_ports_against_one", ep("a", "10.0.0.1", "z1", grpc), ep("b", "10.0.0.2", "z1", grpc, Port{Name: "http", Number: 80, Protocol: TCP}), false, true},
		{"ports_in_other_order", ep("a", "10.0.0.1", "z1", grpc, Port{Name: "http", Number: 80}), ep("b", "10.0.0.2", "z1", Port{Name: "http", Number: 80}, grpc), false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewStore()
			if _, err := s.Apply(Upsert("svc", c.a), Upsert("svc", c.b)); err != nil {
				t.Fatal(err)
			}
			svc, _ := s.Snapshot().Service("svc")
			a, _ := svc.Endpoint("a")
			b, _ := svc.Endpoint("b")
			if got := &a.Ports[0] == &b.Ports[0]; got != c.sharePorts {
				t.Errorf("ports shared = %v, want %v", got, c.sharePorts)
			}
			if got := a.Locality.Zone == b.Locality.Zone && unsafeData(a.Locality.Zone) == unsafeData(b.Locality.Zone); got != c.shareZone {
				t.Errorf("zone shared = %v, want %v", got, c.shareZone)
			}
			for i, p := range c.a.Ports {
				if a.Ports[i].Name != p.Name || a.Ports[i].Number != p.Number {
					t.Errorf("port %d = %+v, want %+v", i, a.Ports[i], p)
				}
			}
			if a.Locality != c.a.Locality {
				t.Errorf("locality = %+v, want %+v", a.Locality, c.a.Locality)
			}
			// A caller's clone is its own.
			cl := a.Clone()
			cl.Ports[0].Number = 1
			if a.Ports[0].Number == 1 {
				t.Fatal("modifying a clone changed the store's shared port list")
			}
			// The caller's endpoint is not the store's.
			c.a.Ports[0].Number = 2
			if a.Ports[0].Number == 2 {
				t.Fatal("modifying the upserted endpoint changed the store's")
			}
		})
	}
}

func TestInternBounded(t *testing.T) {
	var in interner
	for i := range maxInterned + 10 {
		in.portList([]Port{{Name: "p", Number: uint16(i + 1), Protocol: TCP}})
		in.name(fmt.Sprintf("zone-%d", i))
	}
	if len(in.ports) != maxInterned || len(in.names) != maxInterned {
		t.Fatalf("tables hold %d port lists and %d names, want at most %d each", len(in.ports), len(in.names), maxInterned)
	}
	// Past the bound a value is kept as given, and still correct.
	ps := []Port{{Name: "q", Number: 1, Protocol: TCP}}
	if got := in.portList(ps); &got[0] != &ps[0] {
		t.Error("a port list past the bound was not left as given")
	}
	if got := in.name("zone-new"); got != "zone-new" {
		t.Errorf("name = %q, want zone-new", got)
	}
}

// unsafeData is the address of s's bytes, to tell a shared string from
// an equal copy.
func unsafeData(s string) *byte { return unsafe.StringData(s) }

package registry

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func validEndpoint() *Endpoint {
	return &Endpoint{
		ID:       "web-1",
		Address:  netip.MustParseAddr("10.0.0.1"),
		Ports:    []Port{{Name: "grpc", Number: 8080, Protocol: TCP}},
		Locality: Locality{Region: "us-east1", Zone: "us-east1-a"},
		Health:   Healthy,
		Weight:   100,
		Metadata: map[string]string{"version": "v1"},
		Source:   SourceVM,
	}
}

func TestEndpointValidate(t *testing.T) {
	bigMeta := map[string]string{}
	for i := range 20 {
		bigMeta[strings.Repeat("k", 10)+string(rune('a'+i))] = strings.Repeat("v", 250)
	}
	tests := []struct {
		name  string
		edit  func(e *Endpoint)
		field string // "" means valid
	}{
		{"valid", func(*Endpoint) {}, ""},
		{"ipv6", func(e *Endpoint) { e.Address = netip.MustParseAddr("2001:db8::1") }, ""},
		{"empty_id", func(e *Endpoint) { e.ID = "" }, "endpoint.id"},
		{"id_64_chars", func(e *Endpoint) { e.ID = strings.Repeat("a", 64) }, "endpoint.id"},
		{"id_63_chars", func(e *Endpoint) { e.ID = strings.Repeat("a", 63) }, ""},
		{"id_underscore", func(e *Endpoint) { e.ID = "web_1" }, "endpoint.id"},
		{"id_leading_hyphen", func(e *Endpoint) { e.ID = "-web" }, "endpoint.id"},
		{"no_address", func(e *Endpoint) { e.Address = netip.Addr{} }, "endpoint.address"},
		{"unspecified_address", func(e *Endpoint) { e.Address = netip.MustParseAddr("0.0.0.0") }, "endpoint.address"},
		{"multicast_address", func(e *Endpoint) { e.Address = netip.MustParseAddr("224.0.0.1") }, "endpoint.address"},
		{"no_ports", func(e *Endpoint) { e.Ports = nil }, "endpoint.ports"},
		{"port_zero", func(e *Endpoint) { e.Ports[0].Number = 0 }, "endpoint.ports[0].number"},
		{"duplicate_port_name", func(e *Endpoint) { e.Ports = append(e.Ports, Port{Name: "grpc", Number: 9, Protocol: TCP}) }, "endpoint.ports[1].name"},
		{"bad_port_name", func(e *Endpoint) { e.Ports[0].Name = "gr pc" }, "endpoint.ports[0].name"},
		{"bad_protocol", func(e *Endpoint) { e.Ports[0].Protocol = "sctp" }, "endpoint.ports[0].protocol"},
		{"bad_zone", func(e *Endpoint) { e.Locality.Zone = "Zone A" }, "endpoint.locality.zone"},
		{"bad_health", func(e *Endpoint) { e.Health = "sick" }, "endpoint.health"},
		{"weight_zero", func(e *Endpoint) { e.Weight = 0 }, "endpoint.weight"},
		{"weight_too_big", func(e *Endpoint) { e.Weight = MaxWeight + 1 }, "endpoint.weight"},
		{"metadata_too_many_keys", func(e *Endpoint) {
			e.Metadata = map[string]string{}
			for i := range MaxMetadataKeys + 1 {
				e.Metadata[strings.Repeat("k", i+1)] = "v"
			}
		}, "endpoint.metadata"},
		{"metadata_value_too_long", func(e *Endpoint) { e.Metadata["big"] = strings.Repeat("x", MaxMetadataValLen+1) }, "endpoint.metadata[big]"},
		{"metadata_total_too_big", func(e *Endpoint) { e.Metadata = bigMeta }, "endpoint.metadata"},
		{"metadata_bad_key", func(e *Endpoint) { e.Metadata["a b"] = "v" }, "endpoint.metadata"},
		{"bad_source", func(e *Endpoint) { e.Source = "dhcp" }, "endpoint.source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := validEndpoint()
			tt.edit(e)
			err := e.Validate("endpoint")
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError for %s", err, tt.field)
			}
			if fe.Field != tt.field {
				t.Errorf("Validate field = %q, want %q (err: %v)", fe.Field, tt.field, err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false, want true", err)
			}
		})
	}
}

func TestValidateService(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"payments", true},
		{"payments.prod", true},
		{"a", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"pay_ments", false},
		{"pay..ments", false},
		{".payments", false},
		{"-payments", false},
		{"Payments", false}, // callers normalise first
		{strings.Repeat(strings.Repeat("a", 60)+".", 5), false},
	}
	for _, tt := range tests {
		err := ValidateService("service", tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateService(%.20q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "service: ") {
			t.Errorf("ValidateService(%.20q) = %q, want the field named first", tt.name, err)
		}
	}
}

func TestDefaultEndpointID(t *testing.T) {
	tests := []struct {
		addr string
		port uint16
		want string
	}{
		{"10.0.0.7", 8080, "10-0-0-7-8080"},
		{"2001:db8::1", 443, "2001-db8--1-443"},
		{"::ffff:10.1.2.3", 80, "10-1-2-3-80"},
	}
	for _, tt := range tests {
		got := DefaultEndpointID(netip.MustParseAddr(tt.addr), tt.port)
		if got != tt.want {
			t.Errorf("DefaultEndpointID(%s, %d) = %q, want %q", tt.addr, tt.port, got, tt.want)
		}
		if err := ValidateLabel("id", got); err != nil {
			t.Errorf("DefaultEndpointID(%s, %d) = %q is not a label: %v", tt.addr, tt.port, got, err)
		}
	}
}

package registry

import (
	"errors"
	"strings"
	"testing"
)

// svcOfLen is a valid service name of exactly n characters, in labels of
// at most 60.
func svcOfLen(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		l := min(60, n-b.Len())
		if rest := n - b.Len() - l; rest == 1 {
			l-- // never leave a lone dot at the end
		}
		b.WriteString(strings.Repeat("s", l))
	}
	return b.String()
}

// wire is the wire length of a presentation-form FQDN without escapes,
// counted label by label, to check the store's arithmetic independently.
func wire(fqdn string) int {
	n := 1 // root
	for _, l := range strings.Split(strings.TrimSuffix(fqdn, "."), ".") {
		n += 1 + len(l)
	}
	return n
}

func withID(id string) *Endpoint {
	e := validEndpoint()
	e.ID = id
	return e
}

func withPort(name string) *Endpoint {
	e := validEndpoint()
	e.ID = "a"
	e.Ports[0].Name = name
	return e
}

// TestNameLengths: every SRV target <id>.<service>.<domain> and SRV name
// fits in 255 octets, with the limit taken from the configured domain, and
// the error names the field. The boundary cases are exact: 255 passes,
// 256 does not.
func TestNameLengths(t *testing.T) {
	const long = "a-much-longer-domain-name-for-testing.example.internal."
	svc180 := svcOfLen(180)
	tests := []struct {
		name   string
		domain string
		op     Op
		target string // the DNS name at stake; its wire length is checked
		field  string // "" when the op must be accepted
	}{
		{"id_at_255", "", Upsert(svc180, withID(strings.Repeat("i", 54))), strings.Repeat("i", 54) + "." + svc180 + ".spillway.internal.", ""},
		{"id_at_256", "", Upsert(svc180, withID(strings.Repeat("i", 55))), strings.Repeat("i", 55) + "." + svc180 + ".spillway.internal.", "endpoint.id"},
		{"id_fits_default_domain_not_long_one", long, Upsert(svc180, withID(strings.Repeat("i", 54))), strings.Repeat("i", 54) + "." + svc180 + "." + long, "endpoint.id"},
		{"id_fits_long_domain", long, Upsert(svc180, withID(strings.Repeat("i", 17))), strings.Repeat("i", 17) + "." + svc180 + "." + long, ""},
		{"port_at_255", "", Upsert(svc180, withPort(strings.Repeat("p", 48))), "_" + strings.Repeat("p", 48) + "._tcp." + svc180 + ".spillway.internal.", ""},
		{"port_at_256", "", Upsert(svc180, withPort(strings.Repeat("p", 49))), "_" + strings.Repeat("p", 49) + "._tcp." + svc180 + ".spillway.internal.", "endpoint.ports[0].name"},
		{"service_at_255", "", Declare(svcOfLen(233)), "x." + svcOfLen(233) + ".spillway.internal.", ""},
		{"service_at_256", "", Declare(svcOfLen(234)), "x." + svcOfLen(234) + ".spillway.internal.", "service"},
		{"service_at_256_upsert", "", Upsert(svcOfLen(234), withID("x")), "x." + svcOfLen(234) + ".spillway.internal.", "service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewStoreWith(StoreConfig{Domain: tt.domain})
			if err != nil {
				t.Fatal(err)
			}
			w := wire(tt.target)
			if want := tt.field == ""; want != (w <= MaxWireName) {
				t.Fatalf("premise: %s is %d octets, but the case says accepted=%v", tt.target, w, want)
			}
			_, err = s.Apply(tt.op)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Apply (%d octets) = %v, want accepted", w, err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Apply (%d octets) = %v, want a *FieldError on %s wrapping ErrInvalid", w, err, tt.field)
			}
			if !strings.Contains(fe.Reason, "255") || !strings.Contains(fe.Reason, s.Domain()) {
				t.Errorf("reason %q: want the limit and the domain named", fe.Reason)
			}
			if v := s.Snapshot().Version(); v != 0 || s.Snapshot().Len() != 0 {
				t.Errorf("after a rejected write: version %d, %d services; want 0, 0", v, s.Snapshot().Len())
			}
		})
	}
}

func TestStoreConfigDomain(t *testing.T) {
	for _, d := range []string{".", "bad_label.internal", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 60)} {
		var fe *FieldError
		if _, err := NewStoreWith(StoreConfig{Domain: d}); !errors.As(err, &fe) || fe.Field != "Domain" {
			t.Errorf("NewStoreWith(Domain %.20q…) = %v, want a *FieldError on Domain", d, err)
		}
	}
	s, err := NewStoreWith(StoreConfig{Domain: "Example.Internal"})
	if err != nil || s.Domain() != "example.internal." {
		t.Errorf("NewStoreWith(Example.Internal): domain %q, %v; want example.internal.", s.Domain(), err)
	}
	if d := NewStore().Domain(); d != DefaultDomain {
		t.Errorf("NewStore().Domain() = %q, want %q", d, DefaultDomain)
	}
}

// TestNameCollisions: service "<id>.<s>" and endpoint <id> of service <s>
// would share a DNS name; whichever comes second is rejected, with an error
// naming both, and the store is unchanged.
func TestNameCollisions(t *testing.T) {
	tests := []struct {
		name  string
		setup []Op
		op    []Op
		field string // "" when accepted
		names []string
	}{
		{"service_after_endpoint", []Op{Upsert("b", withID("a"))}, []Op{Declare("a.b")}, "service", []string{`"a.b"`, "endpoint a", `service "b"`}},
		{"service_after_endpoint_by_upsert", []Op{Upsert("b", withID("a"))}, []Op{Upsert("a.b", withID("x"))}, "service", []string{`"a.b"`, "endpoint a", `service "b"`}},
		{"endpoint_after_service", []Op{Declare("a.b")}, []Op{Upsert("b", withID("a"))}, "endpoint.id", []string{`service "a.b"`, "endpoint a", `service "b"`}},
		{"deeper_service_after_endpoint", []Op{Upsert("a.b", withID("x"))}, []Op{Declare("x.a.b")}, "service", []string{`"x.a.b"`, "endpoint x", `service "a.b"`}},
		{"deeper_endpoint_after_service", []Op{Declare("x.a.b")}, []Op{Upsert("a.b", withID("x"))}, "endpoint.id", []string{`service "x.a.b"`, "endpoint x", `service "a.b"`}},
		{"same_batch", nil, []Op{Upsert("b", withID("a")), Declare("a.b")}, "service", []string{`"a.b"`}},
		{"same_batch_reversed", nil, []Op{Declare("a.b"), Upsert("b", withID("a"))}, "endpoint.id", []string{`"a.b"`}},
		{"removed_in_batch_frees_name", []Op{Upsert("b", withID("a"))}, []Op{Remove("b", "a", SourceVM), Declare("a.b")}, "", nil},
		{"forgotten_service_frees_name", []Op{Declare("a.b")}, []Op{Forget("a.b"), Upsert("b", withID("a"))}, "", nil},
		{"other_id_fine", []Op{Declare("a.b")}, []Op{Upsert("b", withID("c"))}, "", nil},
		{"other_parent_fine", []Op{Upsert("c", withID("a"))}, []Op{Declare("a.b")}, "", nil},
		{"grandparent_is_not_a_collision", []Op{Upsert("b", withID("x"))}, []Op{Declare("x.a.b")}, "", nil},
		{"existing_endpoint_update_fine", []Op{Upsert("b", withID("c")), Declare("a.b")}, []Op{Upsert("b", func() *Endpoint { e := withID("c"); e.Weight = 7; return e }())}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore()
			if len(tt.setup) > 0 {
				mustApply(t, s, tt.setup...)
			}
			before := s.Snapshot()
			_, err := s.Apply(tt.op...)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Apply = %v, want accepted", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrNameTaken) {
				t.Fatalf("Apply = %v, want a *FieldError on %s wrapping ErrInvalid and ErrNameTaken", err, tt.field)
			}
			for _, n := range tt.names {
				if !strings.Contains(fe.Reason, n) {
					t.Errorf("reason %q does not name %s", fe.Reason, n)
				}
			}
			if s.Snapshot() != before {
				t.Errorf("a rejected batch changed the store: version %d, want %d", s.Snapshot().Version(), before.Version())
			}
		})
	}
}

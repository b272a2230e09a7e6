package authz

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spillway/spillway/security/authn"
)

const testPolicy = `identities:
  - match: "spiffe://example.org/ns/prod/sa/payments"
    allow:
      endpoints: ["payments", "payments-*"]
      xds: [own]
  - match: "spiffe://example.org/ns/prod/sa/checkout"
    allow:
      register: [checkout]
      heartbeat: [checkout]
      xds: [own, "payments"]
  - match: "spiffe://example.org/ns/sre/*"
    allow: {panic: true, rollout: true, config: ["*"], read_load: true}
  - match: "*.ops.example.org"
    allow: {routes: [web-*], read_audit: true}
default: {read_registry: true, xds: ["public-*"]}
`

func ctxOf(name string, m authn.Method) context.Context {
	return authn.NewContext(context.Background(), authn.Identity{Name: name, Method: m})
}

func TestAuthorize(t *testing.T) {
	p, err := Parse("policy.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	const (
		payments = "spiffe://example.org/ns/prod/sa/payments"
		checkout = "spiffe://example.org/ns/prod/sa/checkout"
		sre      = "spiffe://example.org/ns/sre/alice"
	)
	tests := []struct {
		name     string
		identity string
		action   Action
		resource string
		want     bool
	}{
		{"exact_register_own_service", payments, Register, "payments", true},
		{"exact_glob_resource", payments, Heartbeat, "payments-eu", true},
		{"exact_shorthand_deregister", payments, Deregister, "payments", true},
		{"exact_shorthand_report", payments, Report, "payments-x", true},
		{"exact_other_service", payments, Register, "checkout", false},
		{"glob_resource_needs_dash", payments, Register, "paymentsx", false},
		{"exact_no_global", payments, Panic, "", false},
		{"own_xds_own_service", payments, XDS, "payments", true},
		{"own_xds_glob_service", payments, XDS, "payments-canary", true},
		{"own_xds_other_service", payments, XDS, "checkout", false},
		{"default_xds_for_named", payments, XDS, "public-api", true},
		{"own_plus_list", checkout, XDS, "payments", true},
		{"own_follows_register", checkout, XDS, "checkout", true},
		{"no_deregister_listed", checkout, Deregister, "checkout", false},
		{"identity_glob_panic", sre, Panic, "", true},
		{"identity_glob_config_any", sre, Config, "anything", true},
		{"identity_glob_read_load_all", sre, ReadLoad, "", true},
		{"identity_glob_no_register", sre, Register, "payments", false},
		{"identity_glob_not_prefix_of_other", "spiffe://example.org/ns/sre", Panic, "", false},
		{"identity_glob_leading_star", "node1.ops.example.org", Routes, "web-a", true},
		{"identity_glob_leading_star_resource", "node1.ops.example.org", Routes, "api", false},
		{"global_bool", "node1.ops.example.org", ReadAudit, "", true},
		{"default_read_registry_named", payments, ReadRegistry, "", true},
		{"anonymous_default_read_registry", "", ReadRegistry, "checkout", true},
		{"anonymous_default_xds", "", XDS, "public-web", true},
		{"anonymous_no_register", "", Register, "payments", false},
		{"anonymous_no_panic", "", Panic, "", false},
		{"unknown_identity_default_only", "spiffe://other/x", Register, "payments", false},
		{"unknown_identity_default_read", "spiffe://other/x", ReadRegistry, "", true},
		{"service_action_empty_resource_needs_all", payments, Register, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := authn.Certificate
			if tt.identity == "" {
				m = authn.None
			}
			err := p.Authorize(ctxOf(tt.identity, m), tt.action, tt.resource)
			if got := err == nil; got != tt.want {
				t.Fatalf("Authorize(%q, %s, %q) = %v, want allowed %v", tt.identity, tt.action, tt.resource, err, tt.want)
			}
			if err == nil {
				return
			}
			var d *Denied
			if !errors.As(err, &d) || !errors.Is(err, ErrDenied) {
				t.Fatalf("error %T %v, want *Denied", err, err)
			}
			if d.Identity.Name != tt.identity || d.Action != tt.action || d.Resource != tt.resource {
				t.Errorf("Denied = %+v, want identity %q action %s resource %q", d, tt.identity, tt.action, tt.resource)
			}
		})
	}
}

func TestDeniedMessage(t *testing.T) {
	for _, tt := range []struct {
		d    Denied
		want string
	}{
		{Denied{Identity: authn.Identity{Name: "spiffe://e/x", Method: authn.Certificate}, Action: Register, Resource: "checkout"}, "permission denied: spiffe://e/x may not register checkout"},
		{Denied{Identity: authn.Identity{}, Action: Panic}, "permission denied: anonymous may not panic"},
	} {
		if got := tt.d.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	anyone := []Action{Register, Heartbeat, Deregister, Report, ReadRegistry, ReadLoad, XDS, Mesh}
	adminOnly := []Action{Panic, Rollout, Routes, Config, ReadAudit}
	callers := map[string]authn.Identity{
		"anonymous": {},
		"token":     {Name: "payments", Method: authn.Token},
		"cert":      {Name: "spiffe://example.org/ns/prod/sa/payments", Method: authn.Certificate},
		"admin":     {Name: authn.AdminIdentity, Method: authn.Token},
	}
	for cname, id := range callers {
		for _, a := range anyone {
			for _, res := range []string{"", "payments"} {
				if !p.Allowed(id, a, res) {
					t.Errorf("default: %s may not %s %q, want allowed", cname, a, res)
				}
			}
		}
		for _, a := range adminOnly {
			res := ""
			if kinds[a] == service {
				res = "payments"
			}
			if got, want := p.Allowed(id, a, res), cname == "admin"; got != want {
				t.Errorf("default: %s %s %q allowed = %v, want %v", cname, a, res, got, want)
			}
		}
	}
	// Every action is covered by the lists above.
	if len(anyone)+len(adminOnly) != len(Actions) {
		t.Errorf("test covers %d actions, want all %d", len(anyone)+len(adminOnly), len(Actions))
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"unknown_top_key", "identities: []\nextra: 1\n", "p.yaml:2: extra: unknown key"},
		{"unknown_identity_key", "identities:\n  - match: a\n    allw: {}\n", "p.yaml:3: identities[0].allw: unknown key, want match or allow"},
		{"unknown_action", "identities:\n  - match: a\n    allow:\n      registr: [x]\n", "p.yaml:4: identities[0].allow.registr: unknown action"},
		{"bad_glob_upper", "identities:\n  - match: a\n    allow:\n      register: [Payments]\n", `p.yaml:4: identities[0].allow.register[0]: service glob "Payments" has 'P'`},
		{"bad_glob_dot", "default:\n  register: [\"a.b\"]\n", `p.yaml:2: default.register[0]: service glob "a.b"`},
		{"empty_glob", "default:\n  register: [\"\"]\n", "p.yaml:2: default.register[0]: empty service glob"},
		{"list_for_global", "identities:\n  - match: a\n    allow:\n      panic: [x]\n", "p.yaml:4: identities[0].allow.panic: a global action takes true or false"},
		{"own_not_xds", "default:\n  register: [own]\n", `p.yaml:2: default.register[0]: "own" is for xds only`},
		{"missing_match", "identities:\n  - allow: {panic: true}\n", "p.yaml:2: identities[0].match: missing"},
		{"duplicate_match", "identities:\n  - match: a\n  - match: a\n", "p.yaml:3: identities[1].match: a is also identities[0]"},
		{"duplicate_key", "default:\n  panic: true\n  panic: false\n", "p.yaml:3: default.panic: given twice"},
		{"anonymous_match", "identities:\n  - match: anonymous\n", "p.yaml:2: identities[0].match: \"anonymous\" is not an identity"},
		{"space_in_match", "identities:\n  - match: \"a b\"\n", "p.yaml:2: identities[0].match: identity \"a b\" has byte 0x20"},
		{"identities_not_list", "identities: {a: b}\n", "p.yaml:1: identities: want a list"},
		{"value_not_list", "default:\n  register: payments\n", "p.yaml:2: default.register: want true, false or a list"},
		{"number_in_list", "default:\n  register: [1]\n", "p.yaml:2: default.register[0]: want a service glob"},
		{"top_not_mapping", "- a\n", "p.yaml:1: policy: want a mapping"},
		{"two_documents", "default: {}\n---\ndefault: {}\n", "p.yaml:2: one YAML document wanted"},
		{"syntax", "default: [\n", "p.yaml: yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "# nothing\n", "identities:\ndefault:\n"} {
		p, err := Parse("p.yaml", []byte(in))
		if err != nil {
			t.Fatalf("Parse(%q) = %v", in, err)
		}
		if p.Allowed(authn.Identity{Name: "x"}, ReadRegistry, "") {
			t.Errorf("Parse(%q) allows read_registry, want an empty policy to allow nothing", in)
		}
	}
}

func TestMatchGlob(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"a", "a", true},
		{"a", "ab", false},
		{"*", "", true},
		{"*", "anything/at:all", true},
		{"a*", "a", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"*b*", "abc", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXcYb", false},
		{"spiffe://e/ns/*/sa/web", "spiffe://e/ns/prod/sa/web", true},
		{"spiffe://e/ns/*/sa/web", "spiffe://e/ns/prod/sa/api", false},
	} {
		if got := matchGlob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

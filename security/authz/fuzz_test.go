package authz

import (
	"strings"
	"testing"

	"github.com/spillway/spillway/security/authn"
)

// FuzzParsePolicy: Parse never panics; a policy it accepts answers every
// question without panicking, and an error names the file.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(testPolicy))
	f.Add([]byte(DefaultYAML))
	f.Add([]byte("identities:\n  - match: a\n    allow: {xds: [own, \"x-*\"]}\n"))
	f.Add([]byte("default: {panic: [x]}\n"))
	f.Add([]byte("identities: [{match: '*', allow: {endpoints: true}}]\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse("f.yaml", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, id := range []authn.Identity{{}, {Name: "a"}, {Name: "spiffe://example.org/ns/prod/sa/payments"}} {
			for _, a := range Actions {
				p.Allowed(id, a, "payments")
				p.Allowed(id, a, "")
			}
		}
	})
}

// FuzzMatchGlob: '*' alone matches everything; a pattern without '*'
// matches only itself.
func FuzzMatchGlob(f *testing.F) {
	f.Add("a*b", "axxb")
	f.Add("spiffe://e/*", "spiffe://e/x")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		got := matchGlob(pattern, s)
		if !strings.Contains(pattern, "*") && got != (pattern == s) {
			t.Fatalf("matchGlob(%q, %q) = %v without a star", pattern, s, got)
		}
		if !matchGlob("*", s) || !matchGlob(s+"*", s) {
			t.Fatalf("star patterns do not match %q", s)
		}
		if got && !strings.HasPrefix(s, strings.SplitN(pattern, "*", 2)[0]) {
			t.Fatalf("matchGlob(%q, %q) = true without the literal prefix", pattern, s)
		}
	})
}

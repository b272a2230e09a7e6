package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// tokenIdentity plays the authn middleware: the bearer testToken is
// identity admin.
func tokenIdentity(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+testToken {
			r = r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: "admin", Method: authn.Token}))
		}
		h.ServeHTTP(w, r)
	})
}

type adminAuditor struct{}

func (adminAuditor) Authorize(ctx context.Context, a authz.Action, _ string) error {
	if id := authn.FromContext(ctx); id.Name != "admin" {
		return errors.New("permission denied: " + id.String() + " may not " + string(a))
	}
	return nil
}

// TestAuditCommand lists a real audit log through the HTTP API: the
// table (times in the viewer's zone, old → new, the reason of a denial),
// -o json, --since, --limit, and the errors.
func TestAuditCommand(t *testing.T) {
	zone := time.FixedZone("CEST", 2*3600)
	defer func(f func() *time.Location) { viewerZone = f }(viewerZone)
	viewerZone = func() *time.Location { return zone }

	now := time.Now().UTC().Truncate(time.Second)
	l, err := audit.New(audit.Config{KV: systemstoretest.NewMemKV(), Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	admin := authn.NewContext(context.Background(), authn.Identity{Name: "admin", Method: authn.Token})
	l.Record(admin, audit.Entry{Time: now.Add(-3 * time.Hour), Action: "panic", Old: "off", New: "on"})
	l.Record(admin, audit.Entry{Time: now.Add(-2 * time.Hour), Action: "rollout", Old: "", New: "rules:\n- name: all\n  percent: 10\n"})
	l.Denied(context.Background(), "spiffe://example.org/ns/prod/sa/web", "register", "checkout",
		"permission denied: spiffe://example.org/ns/prod/sa/web may not register checkout")
	srv := httptest.NewServer(tokenIdentity(l.Handler(adminAuditor{})))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	tests := []struct {
		name    string
		args    []string
		code    int
		want    []string // in stdout (code 0) or stderr
		notWant string
	}{
		{"table", []string{"--token", testToken}, exitOK, []string{
			"TIME                      IDENTITY",
			now.Add(-3*time.Hour).In(zone).Format("2006-01-02 15:04:05") + " CEST  admin",
			"panic     -         allowed  off → on",
			"rollout   -         allowed  ∅ → rules: - name: all percent: 10",
			"spiffe://example.org/ns/prod/sa/web  register  checkout  denied   - (permission denied: spiffe://example.org/ns/prod/sa/web may not register checkout)",
		}, ""},
		{"since", []string{"--token", testToken, "--since", "150m"}, exitOK, []string{"rollout", "register"}, "panic"},
		{"limit", []string{"--token", testToken, "--limit", "1"}, exitOK, []string{"register"}, "rollout"},
		{"json", []string{"--token", testToken, "-o", "json"}, exitOK, []string{`"identity":"admin"`, `"old":"off","new":"on"`}, ""},
		{"noToken", nil, exitError, []string{"permission denied: anonymous may not read_audit (HTTP 403)"}, ""},
		{"badLimit", []string{"--limit", "5000"}, exitUsage, []string{"--limit 5000: want 1 to 1000"}, ""},
		{"badSince", []string{"--since", "yesterday"}, exitUsage, []string{`--since "yesterday"`}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"audit", "--http", addr}, tt.args...)
			code := run(context.Background(), args, &stdout, &stderr)
			out := stdout.String()
			if code != exitOK {
				out = stderr.String()
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", code, tt.code, stdout.String(), stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tt.notWant != "" && strings.Contains(out, tt.notWant) {
				t.Errorf("output has %q:\n%s", tt.notWant, out)
			}
			if tt.name == "json" {
				var list []audit.Entry
				if err := json.Unmarshal(stdout.Bytes(), &list); err != nil || len(list) != 3 {
					t.Errorf("-o json = %d entries, %v; want 3", len(list), err)
				}
			}
		})
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"1h", now.Add(-time.Hour), true},
		{"2026-02-01T00:00:00+01:00", time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC), true},
		{"-1h", time.Time{}, false},
		{"0s", time.Time{}, false},
		{"soon", time.Time{}, false},
	} {
		got, err := parseSince(tc.in, now)
		if (err == nil) != tc.ok || (tc.ok && !got.Equal(tc.want)) {
			t.Errorf("parseSince(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

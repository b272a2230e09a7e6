package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
	"github.com/spillway/spillway/security/webguard"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/routing"
)

// tokenAuthz allows a change when the request carries the test token, as
// the server's authn middleware and policy would for the admin.
type tokenAuthz struct{}

func (tokenAuthz) Authorize(ctx context.Context, _ authz.Action, svc string) error {
	if authn.FromContext(ctx).String() == "admin" {
		return nil
	}
	return errPermission(svc)
}

type permErr string

func (e permErr) Error() string { return string(e) }

func errPermission(svc string) error {
	return permErr("permission denied: anonymous may not routes " + svc)
}

// TestRouteCommand drives spillwayctl route against the real API handler:
// set, get, list, a dry run with a sample request, delete; and #15
// acceptance 5: validate of rules with an unknown field, a missing target
// or weights that do not sum to a positive total is refused naming the
// field, and nothing changes (get shows the old rules at the same
// revision).
func TestRouteCommand(t *testing.T) {
	targets := map[string]int{"payments": 2, "payments-synthetic": 1, "payments-canary": 1}
	store, err := routing.NewStore(routing.StoreConfig{
		Targets: routing.TargetsFunc(func(s string) (bool, int) { n, ok := targets[s]; return ok, n }),
		Check:   xds.CheckRules,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := store.Handler(tokenAuthz{}, nil)
	srv := httptest.NewServer(webguard.Handler(webguard.Config{}, tokenIdentity(h))) // as spillway serves it
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `rules:
  - name: synthetic
    match:
      headers: [{name: x-traffic-class, exact: synthetic}]
    to: payments-synthetic
  - name: canary
    split:
      - {to: payments, weight: 90}
      - {to: payments-canary, weight: 10}
`)
	unknown := write("unknown.yaml", "rules:\n  - to: payments-synthetic\n    match:\n      header: [{name: x, exact: y}]\n")
	missing := write("missing.yaml", "rules:\n  - split:\n      - {to: payments, weight: 1}\n      - {to: payments-gone, weight: 1}\n")
	zero := write("zero.yaml", "rules:\n  - split:\n      - {to: payments, weight: 0}\n      - {to: payments-canary, weight: 0}\n")

	var version int64
	unchanged := func() bool {
		r, st, ok := store.Get("payments")
		return ok && st.Version == version && len(r.Rules) == 2 && r.Rules[0].To == "payments-synthetic"
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		want     string // in stdout (code 0) or stderr
		wantTrue func() bool
	}{
		{"setNoToken", []string{"set", "payments", good}, exitError, "(HTTP 403)", func() bool { _, _, ok := store.Get("payments"); return !ok }},
		{"set", []string{"set", "--token", testToken, "payments", "-f", good}, exitOK, "service payments: 2 rules, version 1",
			func() bool { _, st, ok := store.Get("payments"); version = st.Version; return ok }},
		{"get", []string{"get", "payments"}, exitOK, "1  canary     *                          payments:90 payments-canary:10  ok", nil},
		{"getYAML", []string{"get", "-o", "yaml", "payments"}, exitOK, "exact: synthetic", nil},
		{"list", []string{"list"}, exitOK, "payments  2      payments", nil},
		{"validateSample", []string{"validate", "payments", good, "--path", "/payments.v1.Payments/Pay", "--header", "x-traffic-class: synthetic"}, exitOK,
			"sample /payments.v1.Payments/Pay map[x-traffic-class:synthetic]: rule synthetic → payments-synthetic", unchanged},
		{"validateUnknownField", []string{"validate", "payments", unknown}, exitError, "body:4: rules[0].match.header: unknown field; known are headers, path_prefix (HTTP 400)", unchanged},
		{"validateMissingTarget", []string{"validate", "payments", missing}, exitError, "rules[0].split[1].to: payments-gone: no such target service (HTTP 409)", unchanged},
		{"validateZeroWeights", []string{"validate", "payments", zero}, exitError, "body:3: rules[0].split: the weights sum to 0", unchanged},
		{"setMissingTarget", []string{"set", "--token", testToken, "payments", missing}, exitError, "rules[0].split[1].to", unchanged},
		{"getAfterRefusals", []string{"get", "payments"}, exitOK, "service payments: 2 rules, version 1", unchanged},
		{"delete", []string{"delete", "--token", testToken, "payments"}, exitOK, "no route rules, every RPC goes to payments",
			func() bool { _, _, ok := store.Get("payments"); return !ok }},
		{"usage", []string{"validate", "payments"}, exitUsage, "validate wants 2 arguments", nil},
		{"usageHeader", []string{"get", "payments", "--header", "a: b"}, exitUsage, "--path and --header are for validate", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"route", "--http", addr}, tt.args...)
			code := run(context.Background(), args, &stdout, &stderr)
			out := stdout.String()
			if code != exitOK {
				out = stderr.String()
			}
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Fatalf("spillwayctl %v = %d, stdout %q stderr %q; want %d with %q", args, code, stdout.String(), stderr.String(), tt.code, tt.want)
			}
			if tt.wantTrue != nil && !tt.wantTrue() {
				t.Fatalf("spillwayctl %v: the store is not as expected", args)
			}
		})
	}
}

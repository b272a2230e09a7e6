package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestWarnOpenPolicy: a shared store without --authz-file starts with a
// warning that names what is open; a policy file, or one replica on
// bbolt, starts without it.
func TestWarnOpenPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		authz  string
		want   bool
	}{
		{"shared_default_policy", true, "", true},
		{"shared_with_policy", true, "/etc/spillway/policy.yaml", false},
		{"bbolt_default_policy", false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			cfg := Config{AuthzFile: tc.authz}
			cfg.Store.URL = "etcd://e1:2379/p"
			warnOpenPolicy(cfg, tc.shared, slog.New(slog.NewTextHandler(&buf, nil)))
			out := buf.String()
			if got := strings.Contains(out, "level=WARN"); got != tc.want {
				t.Fatalf("warned = %v, want %v; log: %s", got, tc.want, out)
			}
			if !tc.want {
				return
			}
			for _, open := range []string{"register", "mesh load summaries", "--authz-file", "docs/security.md"} {
				if !strings.Contains(out, open) {
					t.Errorf("warning does not name %q: %s", open, out)
				}
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway/spillway/security/webguard"
	"github.com/spillway/spillway/weights/svcconfig"
)

// TestConfigCommand drives spillwayctl config against the real API
// handler: set, get, list, delete (tombstone), undelete, and the errors
// that name the field or the missing token.
func TestConfigCommand(t *testing.T) {
	store, err := svcconfig.NewStore(svcconfig.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(webguard.Handler(webguard.Config{}, store.Handler(testToken, nil))) // as spillway serves it
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("strategy: pid\npid:\n  kp: 0.7\n"), 0o644)
	os.WriteFile(bad, []byte("strategy: pid\nheadroom: 2\n"), 0o644)

	tests := []struct {
		name     string
		args     []string
		code     int
		want     string // in stdout (code 0) or stderr
		wantTrue func() bool
	}{
		{"setNoToken", []string{"set", "cart", good}, exitError, "(HTTP 401)", nil},
		{"setBadField", []string{"set", "--token", testToken, "cart", bad}, exitError, "body:2: headroom: 2 is out of range", nil},
		{"set", []string{"set", "--token", testToken, "cart", good}, exitOK, "service cart: active, from api",
			func() bool { c, _, ok := store.Get("cart"); return ok && c.PID.Kp == 0.7 }},
		{"getYAML", []string{"get", "-o", "yaml", "cart"}, exitOK, "kp: 0.7", nil},
		{"list", []string{"list"}, exitOK, "cart     pid", nil},
		{"delete", []string{"delete", "--token", testToken, "cart"}, exitOK, "deleted 20",
			func() bool { _, st, ok := store.Get("cart"); return ok && st.Deleted }},
		{"undelete", []string{"undelete", "--token", testToken, "cart"}, exitOK, "service cart: active",
			func() bool { _, st, ok := store.Get("cart"); return ok && !st.Deleted }},
		{"getUnknown", []string{"get", "search"}, exitOK, "no config, the defaults apply", nil},
		{"usage", []string{"get"}, exitUsage, "get wants 1 arguments", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"config", "--http", addr}, tt.args...)
			code := run(context.Background(), args, &stdout, &stderr)
			out := stdout.String()
			if code != exitOK {
				out = stderr.String()
			}
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Fatalf("spillwayctl %v = %d, stdout %q stderr %q; want %d with %q", args, code, stdout.String(), stderr.String(), tt.code, tt.want)
			}
			if tt.wantTrue != nil && !tt.wantTrue() {
				t.Fatalf("spillwayctl %v: the store did not change as expected", args)
			}
		})
	}
}

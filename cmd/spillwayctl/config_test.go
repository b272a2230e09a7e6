package main

import (
	"bytes"
	"context"
	"fmt"
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
		{"setIfVersionStale", []string{"set", "--token", testToken, "--if-version", "999999", "cart", good}, exitError, "version 999999 was read, the current one is",
			func() bool { _, st, ok := store.Get("cart"); return ok && st.Version != 999999 }},
		{"setIfNoneExisting", []string{"set", "--token", testToken, "--if-version", "-1", "cart", good}, exitError, "(HTTP 412)", nil},
		{"deleteIfVersionStale", []string{"delete", "--token", testToken, "--if-version", "999999", "cart"}, exitError, "(HTTP 412)",
			func() bool { _, st, ok := store.Get("cart"); return ok && !st.Deleted }},
		{"ifVersionOnGet", []string{"get", "--if-version", "3", "cart"}, exitUsage, "--if-version is for set and delete", nil},
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

	// At the version get shows, a conditional set applies.
	_, st, _ := store.Get("cart")
	var stdout, stderr bytes.Buffer
	args := []string{"config", "--http", addr, "set", "--token", testToken, "--if-version", fmt.Sprint(st.Version), "cart", bad}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), "headroom") {
		t.Errorf("spillwayctl %v = %d %q, want the config's own error (the version matched)", args, code, stderr.String())
	}
	stderr.Reset()
	args[len(args)-1] = good
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Errorf("spillwayctl %v = %d %q, want applied at the current version", args, code, stderr.String())
	}
	if _, now, _ := store.Get("cart"); now.Version == st.Version {
		t.Errorf("version still %d after a conditional set", now.Version)
	}
}

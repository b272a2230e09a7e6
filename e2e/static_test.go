package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStaticFile: a server started with --static-file serves the file's
// endpoints before it is ready, and picks up an edit of the file.
func TestStaticFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "services.yaml")
	write := func(body string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil { // how editors and config management replace files
			t.Fatal(err)
		}
	}
	write(`services:
  - name: ledger
    endpoints:
      - address: 10.5.0.1
        ports: ["grpc=7000"]
        zone: zone-a
      - address: 10.5.0.2
        ports: ["grpc=7000"]
        zone: zone-b
`)
	s := newServer(t, "--static-file", file)
	s.start()
	c := s.client()
	if got := endpointIDs(t, c, "ledger"); len(got) != 2 || !got["10-5-0-1-7000"] || !got["10-5-0-2-7000"] {
		t.Fatalf("at ready: ledger endpoints = %v, want the file's two", got)
	}

	write(`services:
  - name: ledger
    endpoints:
      - address: 10.5.0.2
        ports: ["grpc=7000"]
        zone: zone-b
      - address: 10.5.0.3
        ports: ["grpc=7000"]
        zone: zone-c
`)
	var got map[string]bool
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = endpointIDs(t, c, "ledger")
		if len(got) == 2 && got["10-5-0-3-7000"] {
			break
		}
	}
	if len(got) != 2 || !got["10-5-0-2-7000"] || !got["10-5-0-3-7000"] {
		t.Fatalf("after editing the file: ledger endpoints = %v, want 10-5-0-2-7000 and 10-5-0-3-7000", got)
	}

	// A broken edit keeps the last good state.
	write("services:\n  - name: ledger\n    endpoints:\n      - address: not-an-ip\n")
	for deadline := time.Now().Add(30 * time.Second); s.metric("spillway_static_load_failures_total") != "1"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the broken edit was never reported: spillway_static_load_failures_total = %q", s.metric("spillway_static_load_failures_total"))
		}
	}
	if got := endpointIDs(t, c, "ledger"); len(got) != 2 {
		t.Errorf("after a broken edit: ledger endpoints = %v, want the last good two", got)
	}
}

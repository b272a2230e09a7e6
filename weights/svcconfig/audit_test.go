package svcconfig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
)

// TestAudit: put, delete and undelete of a service's config, through the
// HTTP API and the directory, are recorded with who (the identity of the
// request, "file:PATH" for the directory), from where, and the old and
// new YAML; refused changes are recorded as failed.
func TestAudit(t *testing.T) {
	ctx := context.Background()
	log, err := audit.New(audit.Config{Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewStore(StoreConfig{KV: openKV(t), Audit: log})
	dir := t.TempDir()
	d, _ := NewDir(DirConfig{Path: dir, Store: s})
	// The authn middleware's part: the token's identity in the context.
	withAdmin := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: "admin", Method: authn.Token})))
		})
	}
	srv := httptest.NewServer(audit.HTTPPeer(withAdmin(s.Handler("s3cret", nil))))
	defer srv.Close()
	do := func(method, path, body string, code int) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Fatalf("%s %s = %d, want %d", method, path, resp.StatusCode, code)
		}
	}

	do("PUT", "/v1/config/cart", "strategy: pid\n", 200)
	do("PUT", "/v1/config/cart", "strategy: static\n", 200)
	do("PUT", "/v1/config/cart", "headroom: 7\n", 400)
	do("DELETE", "/v1/config/cart", "", 200)
	do("POST", "/v1/config/cart/undelete", "", 200)
	os.WriteFile(filepath.Join(dir, "payments.yaml"), []byte("strategy: pid\n"), 0o644)
	if err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	do("PUT", "/v1/config/payments", "strategy: static\n", 409)
	os.Remove(filepath.Join(dir, "payments.yaml"))
	if err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}

	got, err := log.List(ctx, time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	file := "file:" + filepath.Join(dir, "payments.yaml")
	want := []audit.Entry{ // newest first
		{Identity: file, Method: "file", Action: "config", Resource: "payments", Outcome: "allowed", Reason: "delete", Old: "strategy: pid\n", New: "strategy: pid\n" + deletedMark},
		{Identity: "admin", Method: "token", Action: "config", Resource: "payments", Outcome: "failed", Old: "strategy: pid\n", New: "strategy: static\n"},
		{Identity: file, Method: "file", Action: "config", Resource: "payments", Outcome: "allowed", Reason: "put", New: "strategy: pid\n"},
		{Identity: "admin", Method: "token", Action: "config", Resource: "cart", Outcome: "allowed", Reason: "undelete", Old: "strategy: static\n" + deletedMark, New: "strategy: static\n"},
		{Identity: "admin", Method: "token", Action: "config", Resource: "cart", Outcome: "allowed", Reason: "delete", Old: "strategy: static\n", New: "strategy: static\n" + deletedMark},
		{Identity: "admin", Method: "token", Action: "config", Resource: "cart", Outcome: "failed", Old: "strategy: static\n", New: "headroom: 7\n"},
		{Identity: "admin", Method: "token", Action: "config", Resource: "cart", Outcome: "allowed", Reason: "put", Old: "strategy: pid\n", New: "strategy: static\n"},
		{Identity: "admin", Method: "token", Action: "config", Resource: "cart", Outcome: "allowed", Reason: "put", New: "strategy: pid\n"},
	}
	for i, e := range got {
		switch {
		case e.Identity == "admin" && !strings.HasPrefix(e.Peer, "127.0.0.1:"):
			t.Errorf("API entry %+v: peer %q, want the client's 127.0.0.1 address", e, e.Peer)
		case e.Outcome == "failed":
			if !strings.Contains(e.Reason, "headroom") && !strings.Contains(e.Reason, "payments.yaml") {
				t.Errorf("failed entry reason %q, want the field or the owning file named", e.Reason)
			}
			got[i].Reason = "" // checked
		}
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(audit.Entry{}, "Time", "Peer", "Replica")); diff != "" {
		t.Errorf("audit entries (-want +got):\n%s", diff)
	}
}

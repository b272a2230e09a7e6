package migration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
)

// recorder keeps the entries it is given, completed the way audit.Log
// completes them (identity from the context).
type recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (r *recorder) Record(ctx context.Context, e audit.Entry) {
	id := authn.FromContext(ctx)
	e.Identity, e.Method = id.String(), string(id.Method)
	r.mu.Lock()
	r.entries = append(r.entries, e)
	r.mu.Unlock()
}

// TestControllerAudit: every change of the panic flag and the rollout
// config, and every failed one, is recorded with the identity of the
// context and the old and new value; a change to the value in force
// records nothing.
func TestControllerAudit(t *testing.T) {
	rec := &recorder{}
	st := &flakyStorage{Memory: systemstore.NewMemory()}
	c, err := NewController(ControllerConfig{Store: registry.NewStore(), Storage: st, Audit: rec, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	alice := authn.NewContext(context.Background(), authn.Identity{Name: "spiffe://example.org/ns/sre/sa/alice", Method: authn.Certificate})
	admin := authn.NewContext(context.Background(), authn.Identity{Name: "admin", Method: authn.Token})
	v1 := "rules:\n- name: all\n  percent: 10\n"
	v2 := "rules:\n- name: all\n  percent: 20\n"

	c.SetPanic(alice, true)
	c.SetPanic(alice, true) // in force: nothing
	st.fail = true
	c.SetPanic(admin, false) // storage fails
	st.fail = false
	c.SetPanic(admin, false)
	c.SetRollout(admin, []byte(v1))
	c.SetRollout(admin, []byte(v1)) // in force: nothing
	c.SetRollout(alice, []byte(v2))
	c.SetRollout(alice, []byte("rules:\n- percent: 200\n")) // invalid

	want := []audit.Entry{
		{Identity: "spiffe://example.org/ns/sre/sa/alice", Method: "certificate", Action: "panic", Outcome: "allowed", Old: "off", New: "on"},
		{Identity: "admin", Method: "token", Action: "panic", Outcome: "failed", Reason: "set panic flag: disk full", Old: "on", New: "off"},
		{Identity: "admin", Method: "token", Action: "panic", Outcome: "allowed", Old: "on", New: "off"},
		{Identity: "admin", Method: "token", Action: "rollout", Outcome: "allowed", Reason: "version 0 -> 1", Old: "", New: v1},
		{Identity: "spiffe://example.org/ns/sre/sa/alice", Method: "certificate", Action: "rollout", Outcome: "allowed", Reason: "version 1 -> 2", Old: v1, New: v2},
		{Identity: "spiffe://example.org/ns/sre/sa/alice", Method: "certificate", Action: "rollout", Outcome: "failed", Old: v2, New: "rules:\n- percent: 200\n"},
	}
	if diff := cmp.Diff(want, rec.entries, cmpopts.IgnoreFields(audit.Entry{}, "Reason")); diff != "" {
		t.Errorf("audit entries (-want +got):\n%s", diff)
	}
	for i, w := range want {
		if w.Reason != "" && i < len(rec.entries) && rec.entries[i].Reason != w.Reason {
			t.Errorf("entry %d reason = %q, want %q", i, rec.entries[i].Reason, w.Reason)
		}
	}
	if n := len(rec.entries); n == len(want) && rec.entries[5].Reason == "" {
		t.Error("the invalid rollout's entry has no reason")
	}
}

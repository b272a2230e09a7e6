package routing

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

// legacyRecord is the record as the release before registry/settings
// wrote and read it, verbatim.
type legacyRecord struct {
	YAML      string    `json:"yaml"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TestRecordsCompatible: in a rolling upgrade both releases share the
// KV, so a put writes, byte for byte, the record the previous release
// wrote (no source, file or tombstone fields), a delete removes the key
// (routes have no tombstones), and the previous release's records read
// back the same.
func TestRecordsCompatible(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kv := systemstoretest.NewMemKV()
	ft := &fakeTargets{healthy: map[string]int{"payments": 2, "payments-synthetic": 1, "payments-canary": 1}}
	s, err := NewStore(StoreConfig{KV: kv, Targets: ft, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "payments", []byte(example)); err != nil {
		t.Fatal(err)
	}
	got, _, err := kv.Get(ctx, KeyPrefix+"payments")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(legacyRecord{YAML: example, UpdatedAt: t0})
	if string(got) != string(want) {
		t.Errorf("record = %s, want the previous release's %s", got, want)
	}
	if err := s.Delete(ctx, "payments"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kv.Get(ctx, KeyPrefix+"payments"); !errors.Is(err, systemstore.ErrNotFound) {
		t.Errorf("after Delete the key: %v, want it removed (no tombstone)", err)
	}

	old := systemstoretest.NewMemKV()
	b, _ := json.Marshal(legacyRecord{YAML: "default: payments-canary\n", UpdatedAt: t0})
	if _, err := old.Put(ctx, KeyPrefix+"payments", b); err != nil {
		t.Fatal(err)
	}
	s2, _ := NewStore(StoreConfig{KV: old, Targets: ft})
	if _, err := s2.Init(ctx); err != nil {
		t.Fatal(err)
	}
	r, st, ok := s2.Get("payments")
	if !ok || r.Default != "payments-canary" || st.YAML != "default: payments-canary\n" || !st.UpdatedAt.Equal(t0) || st.Version == 0 {
		t.Errorf("Get of the previous release's record = %+v %+v %v", r, st, ok)
	}
}

package svcconfig

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/settings"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

// deletedMark ends the audit rendering of a tombstoned config.
const deletedMark = settings.DeletedMark

// legacyRecord is the record as the release before registry/settings
// wrote and read it, verbatim.
type legacyRecord struct {
	YAML      string     `json:"yaml"`
	Source    string     `json:"source"`
	File      string     `json:"file,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}

// TestRecordsCompatible: in a rolling upgrade both releases share the
// KV, so every record this release writes (put from the API and from a
// file, tombstone, undelete) is, byte for byte, the one the previous
// release wrote, and the previous release's records read back the same.
func TestRecordsCompatible(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: t0}
	kv := systemstoretest.NewMemKV()
	s, err := NewStore(StoreConfig{KV: kv, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Hour)
	for _, step := range []struct {
		name    string
		do      func() error
		service string
		want    legacyRecord
		literal string // "" to check against want only
	}{
		{"putAPI", func() error { _, err := s.Set(ctx, "cart", []byte("strategy: pid\n"), SourceAPI, ""); return err },
			"cart", legacyRecord{YAML: "strategy: pid\n", Source: "api", UpdatedAt: t0},
			`{"yaml":"strategy: pid\n","source":"api","updated_at":"2026-01-01T00:00:00Z"}`},
		{"putDir", func() error {
			_, err := s.Set(ctx, "payments", []byte("metric: cpu\n"), SourceDir, "payments.yaml")
			return err
		}, "payments", legacyRecord{YAML: "metric: cpu\n", Source: "dir", File: "payments.yaml", UpdatedAt: t0}, ""},
		{"tombstone", func() error { clock.add(time.Hour); _, err := s.Delete(ctx, "payments", SourceDir); return err },
			"payments", legacyRecord{YAML: "metric: cpu\n", Source: "dir", File: "payments.yaml", UpdatedAt: t0, DeletedAt: &t1},
			`{"yaml":"metric: cpu\n","source":"dir","file":"payments.yaml","updated_at":"2026-01-01T00:00:00Z","deleted_at":"2026-01-01T01:00:00Z"}`},
		{"undelete", func() error { _, err := s.Undelete(ctx, "payments"); return err },
			"payments", legacyRecord{YAML: "metric: cpu\n", Source: "api", UpdatedAt: t1}, ""},
	} {
		t.Run(step.name, func(t *testing.T) {
			if err := step.do(); err != nil {
				t.Fatal(err)
			}
			got, _, err := kv.Get(ctx, KeyPrefix+step.service)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(step.want)
			if string(got) != string(want) {
				t.Errorf("record = %s, want the previous release's %s", got, want)
			}
			if step.literal != "" && string(got) != step.literal {
				t.Errorf("record = %s, want %s", got, step.literal)
			}
		})
	}

	// The previous release's records, read by this one.
	old := systemstoretest.NewMemKV()
	for svc, rec := range map[string]legacyRecord{
		"cart":     {YAML: "strategy: static\n", Source: "api", UpdatedAt: t0},
		"payments": {YAML: "strategy: pid\n", Source: "dir", File: "payments.yaml", UpdatedAt: t0, DeletedAt: &t1},
	} {
		b, _ := json.Marshal(rec)
		if _, err := old.Put(ctx, KeyPrefix+svc, b); err != nil {
			t.Fatal(err)
		}
	}
	s2, _ := NewStore(StoreConfig{KV: old, Now: clock.now, Tombstone: 48 * time.Hour})
	if _, err := s2.Init(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		service  string
		strategy string
		want     Status
	}{
		{"cart", Static, Status{Source: "api", YAML: "strategy: static\n", Version: 1, UpdatedAt: t0}},
		{"payments", PID, Status{Source: "dir", File: "payments.yaml", YAML: "strategy: pid\n", Version: 2, UpdatedAt: t0, Deleted: true, DeletedAt: t1, Until: t1.Add(48 * time.Hour)}},
	} {
		c, st, ok := s2.Get(tc.service)
		if !ok || c.Strategy != tc.strategy {
			t.Errorf("Get(%s) = %s %v, want %s", tc.service, c.Strategy, ok, tc.strategy)
		}
		st.Version = tc.want.Version // the MemKV's numbering is not the point
		if d := cmp.Diff(tc.want, st); d != "" {
			t.Errorf("Get(%s) status (-want +got):\n%s", tc.service, d)
		}
	}
}

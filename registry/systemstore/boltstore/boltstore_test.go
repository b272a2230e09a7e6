package boltstore_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock for tombstone expiry.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestBoltConformance(t *testing.T) {
	clocks := map[systemstore.KV]*clock{}
	var mu sync.Mutex
	systemstoretest.RunConformance(t, systemstoretest.Backend{
		SingleClient: true,
		Fresh: func(t *testing.T) func(t *testing.T) systemstore.KV {
			dir := t.TempDir()
			c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			return func(t *testing.T) systemstore.KV {
				kv, err := boltstore.Open(dir, boltstore.Options{Now: c.Now, TombstoneRetention: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				clocks[kv] = c
				mu.Unlock()
				return kv
			}
		},
		Compact: func(t *testing.T, kv systemstore.KV, rev int64) {
			mu.Lock()
			c := clocks[kv]
			mu.Unlock()
			c.add(2 * time.Hour) // every tombstone so far is past the retention
			if err := kv.(*boltstore.KV).CompactTombstones(); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestBoltLegacyLayout: a data dir written by spillway before the KV
// (records in vm-registrations/v1, settings in settings/v1) loads, once
// moved, and the old buckets are gone so nothing reads stale copies.
func TestBoltLegacyLayout(t *testing.T) {
	dir := t.TempDir()
	r := systemstore.Record{
		LeaseID: "lease-1", Service: "web", TTL: 30 * time.Second,
		Endpoint: registry.Endpoint{
			ID: "e001", Address: netip.MustParseAddr("2001:db8::2"),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r", Zone: "z"}, Weight: 7, Source: registry.SourceVM,
			Registered: time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC),
		},
	}
	old, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(dir+"/registrations.db", 0o640, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("vm-registrations/v1"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte(r.Key()), old); err != nil {
			return err
		}
		s, err := tx.CreateBucket([]byte("settings/v1"))
		if err != nil {
			return err
		}
		return s.Put([]byte("migration/panic"), []byte(`{"panic":true}`))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	for round := range 2 { // the second open finds the KV layout only
		st, err := boltstore.OpenStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		recs, err := st.List(ctx)
		if err != nil || len(recs) != 1 {
			t.Fatalf("round %d: List = %d records, %v; want 1", round, len(recs), err)
		}
		if diff := cmp.Diff(r, recs[0], cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("round %d: record (-want +got):\n%s", round, diff)
		}
		set, err := st.Settings(ctx)
		if err != nil || string(set["migration/panic"]) != `{"panic":true}` || len(set) != 1 {
			t.Errorf("round %d: Settings = %q, %v; want migration/panic only", round, set, err)
		}
		st.Close()
	}
	db, err = bolt.Open(dir+"/registrations.db", 0o640, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		for _, name := range []string{"vm-registrations/v1", "settings/v1"} {
			if tx.Bucket([]byte(name)) != nil {
				t.Errorf("bucket %s still there after the move", name)
			}
		}
		return nil
	})
}

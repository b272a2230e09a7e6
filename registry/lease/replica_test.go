package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

func record(lid string, i int, ttl time.Duration) systemstore.Record {
	e := vmEndpoint(i)
	e.ID = registry.DefaultEndpointID(e.Address, 8080)
	return systemstore.Record{LeaseID: lid, Service: "vm", TTL: ttl, Endpoint: *e}
}

// TestAdoptDrop: watch events apply in revision order whatever the
// arrival: an older put or delete than what is held changes nothing.
func TestAdoptDrop(t *testing.T) {
	type step struct {
		op      string // "adopt" or "drop"
		lease   string
		rev     int64
		want    bool   // endpoint served after the step
		wantLid string // lease held after the step ("" when none)
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"adopt_then_drop", []step{{"adopt", "l1", 5, true, "l1"}, {"drop", "", 6, false, ""}}},
		{"stale_drop_ignored", []step{{"adopt", "l1", 5, true, "l1"}, {"drop", "", 4, true, "l1"}}},
		{"newer_lease_replaces", []step{{"adopt", "l1", 5, true, "l1"}, {"adopt", "l2", 7, true, "l2"}}},
		{"older_lease_ignored", []step{{"adopt", "l2", 7, true, "l2"}, {"adopt", "l1", 5, true, "l2"}}},
		{"drop_of_unknown", []step{{"drop", "", 3, false, ""}}},
		{"same_revision_twice", []step{{"adopt", "l1", 5, true, "l1"}, {"adopt", "l1", 5, true, "l1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			key := systemstore.Key("vm", registry.DefaultEndpointID(vmEndpoint(1).Address, 8080))
			for i, s := range tc.steps {
				var err error
				if s.op == "adopt" {
					err = f.m.Adopt(record(s.lease, 1, time.Minute), s.rev, time.Time{})
				} else {
					err = f.m.Drop(key, s.rev)
				}
				if err != nil {
					t.Fatalf("step %d %s: %v", i, s.op, err)
				}
				if got := f.count() == 1; got != s.want {
					t.Errorf("step %d %s: served = %v, want %v", i, s.op, got, s.want)
				}
				_, lid, _ := f.m.LastSeen("vm", registry.DefaultEndpointID(vmEndpoint(1).Address, 8080))
				if lid != s.wantLid {
					t.Errorf("step %d %s: lease = %q, want %q", i, s.op, lid, s.wantLid)
				}
			}
			if recs, err := f.storage.List(context.Background()); err != nil || len(recs) != 0 {
				t.Errorf("Adopt and Drop wrote %d records to Storage, want none", len(recs))
			}
		})
	}
}

// TestAdoptValidates: a record that does not validate is refused,
// naming what is wrong, and nothing is served.
func TestAdoptValidates(t *testing.T) {
	bad := record("", 1, time.Minute)
	f := newFixture(t, Config{})
	if err := f.m.Adopt(bad, 1, time.Time{}); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("Adopt(no lease id) = %v, want ErrInvalid", err)
	}
	if f.count() != 0 {
		t.Errorf("an invalid record is served")
	}
}

// TestSeenKeepsAlive: stamps from another replica move a lease's deadline
// forward, never back; the grace is added before expiry; a Decider that
// says no holds every expiry.
func TestSeenKeepsAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var may switchDecider
		may.Store(true)
		f := newFixture(t, Config{Tick: 100 * time.Millisecond, MinTTL: time.Second, ExpiryGrace: time.Second, Decider: &may, GuardShare: 1})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { f.m.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		if err := f.m.Adopt(record("remote", 1, 2*time.Second), 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		for range 10 { // another replica sees it every second
			time.Sleep(time.Second)
			f.m.Seen("remote", time.Now())
			f.m.Seen("remote", time.Now().Add(-time.Hour)) // an old stamp moves nothing back
		}
		synctest.Wait()
		if f.count() != 1 {
			t.Fatalf("a lease stamped by another replica expired")
		}
		time.Sleep(2*time.Second + 500*time.Millisecond) // past the TTL, within the grace
		synctest.Wait()
		if f.count() != 1 {
			t.Errorf("expired before TTL + ExpiryGrace")
		}
		may.Store(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		if f.count() != 1 {
			t.Errorf("expired while the Decider says no")
		}
		may.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		if f.count() != 0 {
			t.Errorf("not expired once the Decider allows it")
		}
	})
}

// switchDecider is a Decider that a test turns on and off.
type switchDecider struct{ atomic.Bool }

func (d *switchDecider) MayExpire() bool { return d.Load() }

// failingStorage fails every write while down.
type failingStorage struct {
	*systemstore.Memory
	down atomic.Bool
}

var errStore = errors.New("etcd http://127.0.0.1:2379: context deadline exceeded")

func (s *failingStorage) Put(ctx context.Context, r systemstore.Record) error {
	if s.down.Load() {
		return errors.Join(systemstore.ErrUnavailable, errStore)
	}
	return s.Memory.Put(ctx, r)
}

func (s *failingStorage) Delete(ctx context.Context, key string) error {
	if s.down.Load() {
		return errors.Join(systemstore.ErrUnavailable, errStore)
	}
	return s.Memory.Delete(ctx, key)
}

// TestStorageDownRemovesNothing: a deregistration or an expiry that
// cannot be stored removes nothing; a registration is refused.
func TestStorageDownRemovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &failingStorage{Memory: systemstore.NewMemory()}
		store := registry.NewStore()
		m, err := New(Config{Store: store, Storage: st, Tick: 100 * time.Millisecond, MinTTL: time.Second, GuardShare: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		l, err := m.Register(ctx, "vm", vmEndpoint(1), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st.down.Store(true)
		if _, err := m.Register(ctx, "vm", vmEndpoint(2), time.Second); !errors.Is(err, systemstore.ErrUnavailable) {
			t.Errorf("Register with the store down = %v, want ErrUnavailable", err)
		}
		if _, err := m.Deregister(ctx, l.ID); !errors.Is(err, systemstore.ErrUnavailable) {
			t.Errorf("Deregister with the store down = %v, want ErrUnavailable", err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { m.Run(rctx); close(done) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if svc, ok := store.Snapshot().Service("vm"); !ok || len(svc.Endpoints) != 1 {
			t.Errorf("the endpoint was removed while its expiry could not be stored")
		}
		st.down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		if svc, ok := store.Snapshot().Service("vm"); ok && len(svc.Endpoints) != 0 {
			t.Errorf("the endpoint did not expire once the store was back")
		}
		cancel()
		<-done
	})
}

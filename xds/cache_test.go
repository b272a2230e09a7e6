package xds

import (
	"context"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
)

// TestCacheSweep: the sweep drops the cached resources of a service that
// left the registry and keeps the others'; a service that comes back is
// built again.
func TestCacheSweep(t *testing.T) {
	store := pidStore(t)
	s, err := New(Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, zone := range []string{"a", "b", "c"} {
		if r, ok := s.lookup(3, "web", zone, store.Snapshot()); !ok || r == nil {
			t.Fatalf("no EDS for web in zone %s", zone)
		}
	}
	if r, ok := s.lookup(0, "web", "", store.Snapshot()); !ok || r == nil {
		t.Fatal("no listener for web")
	}
	if _, ok := s.lookup(3, "nope", "a", store.Snapshot()); ok {
		t.Fatal("a lookup of a missing service found it")
	}
	if n := s.cache.len(); n != 1 {
		t.Fatalf("cache holds %d entries, want 1 (a missing service builds none)", n)
	}
	s.sweep(time.Now())
	if n := s.cache.len(); n != 1 {
		t.Fatalf("after a sweep with web registered: %d entries, want 1", n)
	}
	forgetWeb(t, store)
	s.sweep(time.Now())
	if n := s.cache.len(); n != 0 {
		t.Fatalf("after web left the registry and a sweep: %d entries, want 0", n)
	}
	back := pidStore(t)
	if r, ok := s.lookup(3, "web", "a", back.Snapshot()); !ok || r == nil {
		t.Fatal("web back in the registry: no EDS")
	}
}

// TestCacheSweepAgesShared: what a service version's EDS variants share
// lasts through one sweep and goes at the second, and a variant looked up
// after that is the same resource a full build gives.
func TestCacheSweepAgesShared(t *testing.T) {
	store := pidStore(t)
	s, err := New(Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	shared := func() *edsShared {
		e := s.cache.entry("web")
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.shared
	}
	if r, ok := s.lookup(3, "web", "a", store.Snapshot()); !ok || r == nil {
		t.Fatal("no EDS for web in zone a")
	}
	if shared() == nil {
		t.Fatal("no shared endpoints after web's first EDS build")
	}
	s.sweep(time.Now())
	if shared() == nil {
		t.Fatal("the shared endpoints went at the first sweep after they were made")
	}
	s.sweep(time.Now())
	if shared() != nil {
		t.Fatal("the shared endpoints outlived a second sweep")
	}
	svc, _ := store.Snapshot().Service("web")
	want, err := s.buildEDS(svc, "b", s.cfg.Weights, endpointWeights{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := s.lookup(3, "web", "b", store.Snapshot())
	if !ok || got == nil || got.version != want.version {
		t.Fatalf("zone b after the shared endpoints went: %v, want version %s", got, want.version)
	}
}

// TestSweepPeriod: the sweep keeps its 10 s when the resync is longer,
// and follows a shorter resync as it always did.
func TestSweepPeriod(t *testing.T) {
	for _, tc := range []struct {
		name             string
		resync           time.Duration
		wantResync, want time.Duration
	}{
		{"default", 0, time.Minute, sweepPeriod},
		{"long_resync", time.Hour, time.Hour, sweepPeriod},
		{"short_resync", 2 * time.Second, 2 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Store: registry.NewStore(), Resync: tc.resync})
			if err != nil {
				t.Fatal(err)
			}
			if s.cfg.Resync != tc.wantResync || s.sweepEvery != tc.want {
				t.Fatalf("resync %v, sweep every %v; want %v and %v", s.cfg.Resync, s.sweepEvery, tc.wantResync, tc.want)
			}
		})
	}
}

// TestRunSweepsWithoutResync: Run frees a departed service's resources at
// the sweep's period while the resync's is far off, and the sweep marks
// no stream for a re-evaluation.
func TestRunSweepsWithoutResync(t *testing.T) {
	store := pidStore(t)
	s, err := New(Config{Store: store, Resync: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.sweepEvery = 20 * time.Millisecond
	resyncs := make(chan bool, 16)
	w := newWatcher(func(resync bool) {
		select {
		case resyncs <- resync:
		default:
		}
	})
	s.hub.mu.Lock()
	s.hub.nodes[w] = nodeInfo{}
	s.hub.mu.Unlock()
	if r, ok := s.lookup(3, "web", "a", store.Snapshot()); !ok || r == nil {
		t.Fatal("no EDS for web")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	forgetWeb(t, store)
	deadline := time.Now().Add(10 * time.Second)
	for s.cache.len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("web left the registry 10 s ago: the cache still holds %d entries", s.cache.len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Sweeps went by (the cache emptied): none marked the stream whole.
	w.mu.Lock()
	all := w.all
	w.mu.Unlock()
	if all {
		t.Fatal("a stream was marked for a full re-evaluation with the resync an hour away")
	}
	for len(resyncs) > 0 {
		if <-resyncs {
			t.Fatal("a stream was woken for a resync with the resync an hour away")
		}
	}
}

// forgetWeb removes pidStore's service web from store: its endpoints,
// then the service.
func forgetWeb(t *testing.T, store *registry.Store) {
	t.Helper()
	var ops []registry.Op
	for _, id := range []string{"a-0", "a-1", "b-0", "b-1"} {
		ops = append(ops, registry.Remove("web", id, registry.SourceStatic))
	}
	ops = append(ops, registry.Forget("web"))
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
}

package xds

import (
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
	var ops []registry.Op
	for _, id := range []string{"a-0", "a-1", "b-0", "b-1"} {
		ops = append(ops, registry.Remove("web", id, registry.SourceStatic))
	}
	ops = append(ops, registry.Forget("web"))
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
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

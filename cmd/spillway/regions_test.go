package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore/boltstore"
	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/weights/svcconfig"
)

// TestWatchRegionRules: a redirect set in the service config store reaches
// the region table and dispatches the service (one push), and so does its
// removal.
func TestWatchRegionRules(t *testing.T) {
	kv, err := boltstore.Open(t.TempDir(), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	store, err := svcconfig.NewStore(svcconfig.StoreConfig{KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { store.Run(ctx, 0) })
	table := regions.NewTable()
	pushed := make(chan []string, 10)
	wg.Go(func() { watchRegionRules(ctx, store, table, func(s []string, _ time.Time) { pushed <- s }) })

	wait := func(what string) []string {
		t.Helper()
		select {
		case s := <-pushed:
			return s
		case <-time.After(30 * time.Second): // a hang, not a speed check
			t.Fatalf("no dispatch after %s", what)
			return nil
		}
	}
	if _, err := store.Set(ctx, "pay", []byte("redirects: [{from: r1, to: r2}]\n"), "api", ""); err != nil {
		t.Fatal(err)
	}
	if s := wait("the redirect was set"); !slices.Equal(s, []string{"pay"}) {
		t.Fatalf("dispatched %v, want [pay]", s)
	}
	if r, _ := table.Rules("pay"); len(r.Redirects) != 1 || r.Redirects[0].To != "r2" {
		t.Fatalf("table rules %+v, want r1 -> r2", r)
	}
	if _, err := store.Set(ctx, "pay", []byte("strategy: zone-aware\n"), "api", ""); err != nil {
		t.Fatal(err)
	}
	if s := wait("the redirect was removed"); !slices.Equal(s, []string{"pay"}) {
		t.Fatalf("dispatched %v, want [pay]", s)
	}
	if r, _ := table.Rules("pay"); !r.Empty() {
		t.Fatalf("table rules %+v after removal, want none", r)
	}
}

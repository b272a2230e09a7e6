package meshweights

import (
	"context"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCheckpoints: a service's state is checkpointed with each plan
// published, and otherwise once every CheckpointEvery cycles when it
// changed; an unchanged state is not written again.
func TestCheckpoints(t *testing.T) {
	ctx := context.Background()
	kv := systemstoretest.NewMemKV()
	services := testServices(8)
	own := newOwnership(1, "A")
	planner := newTestPlanner(t, own.Owns, services)
	const every = 3
	pub, err := NewPublisher(PublisherConfig{
		ID: "A", KV: kv, Ownership: own, Merged: &fakeMerged{fresh: map[string]bool{"A": true}}, Planner: planner,
		Services: func() []string { return services }, Shards: testShards, Interval: interval, CheckpointEvery: every,
	})
	if err != nil {
		t.Fatal(err)
	}
	stored := func(svc string) string {
		b, _, err := kv.Get(ctx, StateKey(svc))
		if err != nil {
			t.Fatalf("state of %s: %v", svc, err)
		}
		return string(b)
	}
	current := func(svc string) string {
		b, _ := planner.ExportState(svc)
		return string(b)
	}
	n := int64(len(services))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	// Cycle 1 publishes every plan, each with its state.
	pub.Cycle(ctx, now)
	if w := pub.Writes(); w.Plan != n || w.State != n {
		t.Fatalf("writes after the first cycle = %+v, want plan %d, state %d", w, n, n)
	}
	for _, svc := range services {
		if diff := cmp.Diff(current(svc), stored(svc)); diff != "" {
			t.Errorf("%s: state stored with the plan differs (-exported +stored):\n%s", svc, diff)
		}
	}

	// Constant plans for `every` cycles: each service's (changing) state
	// is due exactly once.
	for range every {
		now = now.Add(interval)
		pub.Cycle(ctx, now)
	}
	if w := pub.Writes(); w.Plan != n || w.State != 2*n {
		t.Errorf("writes after %d constant cycles = %+v, want plan %d, state %d", every, w, n, 2*n)
	}

	// New demand: a service whose plan is published this cycle has its
	// state of this cycle stored.
	planner.setDemand(map[string]int{"a": 20, "b": 20, "c": 60})
	now = now.Add(interval)
	pub.Cycle(ctx, now)
	published := 0
	for _, svc := range services {
		if !getPlan(t, kv, svc).Published.Equal(now) {
			continue
		}
		published++
		if diff := cmp.Diff(current(svc), stored(svc)); diff != "" {
			t.Errorf("%s: plan published without this cycle's state (-exported +stored):\n%s", svc, diff)
		}
	}
	if published == 0 {
		t.Fatal("no plan published after the demand changed")
	}
}

// TestCheckpointUnchangedSkipped: a state equal to the last checkpoint
// is not written again when due.
func TestCheckpointUnchangedSkipped(t *testing.T) {
	ctx := context.Background()
	kv := systemstoretest.NewMemKV()
	services := testServices(4)
	pl := newBenchPlanner(services, 0)
	pl.frozen = true
	pub, err := NewPublisher(PublisherConfig{
		ID: "r1", KV: kv, Ownership: benchOwnership{}, Merged: &fakeMerged{fresh: map[string]bool{"r1": true, "r2": true, "r3": true}},
		Planner: pl, Services: func() []string { return services }, Interval: interval, CheckpointEvery: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for range 5 {
		pub.Cycle(ctx, now)
		now = now.Add(interval)
	}
	if got, want := pub.Writes().State, int64(len(pl.order)); got != want {
		t.Errorf("state writes after 5 cycles of an unchanged state = %d, want %d (with the first plans only)", got, want)
	}
}

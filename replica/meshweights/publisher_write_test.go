package meshweights

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

// flakyKV fails every Put after the first ok ones until healed.
type flakyKV struct {
	systemstore.KV
	mu     sync.Mutex
	ok     int
	healed bool
	failed int
}

var errFlaky = errors.New("store unreachable")

func (k *flakyKV) Put(ctx context.Context, key string, v []byte) (int64, error) {
	k.mu.Lock()
	if !k.healed {
		if k.ok == 0 {
			k.failed++
			k.mu.Unlock()
			return 0, errFlaky
		}
		k.ok--
	}
	k.mu.Unlock()
	return k.KV.Put(ctx, key, v)
}

func (k *flakyKV) heal() {
	k.mu.Lock()
	k.healed = true
	k.mu.Unlock()
}

// TestPublisherConcurrentWrites: plans and states are written several
// services at a time, and what the publisher records stays what the
// store took: after a write fails no further write starts, a state is
// never in the store without its service's plan, the plans the store
// took are not written again, and the next cycle writes the other
// plans.
func TestPublisherConcurrentWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   int // puts the store takes before it fails
	}{
		{name: "fails_at_once", ok: 6}, // the heartbeats only
		{name: "fails_midway", ok: 6 + 41},
		{name: "never_fails", ok: 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := systemstoretest.NewMemKV()
			kv := &flakyKV{KV: mem, ok: tc.ok}
			services := testServices(100)
			pl := newBenchPlanner(services, 0)
			pl.frozen = true
			pub, err := NewPublisher(PublisherConfig{
				ID: "r1", KV: kv, Ownership: benchOwnership{}, Merged: &fakeMerged{fresh: map[string]bool{"r1": true, "r2": true, "r3": true}},
				Planner: pl, Services: func() []string { return services }, Interval: interval, CheckpointEvery: 1 << 20,
			})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			pub.Cycle(ctx, now)
			stored := func() (plans, states map[string]bool) {
				plans, states = map[string]bool{}, map[string]bool{}
				kvs, _, err := mem.List(ctx, Prefix)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range kvs {
					if svc, ok := strings.CutPrefix(e.Key, PlanPrefix); ok {
						plans[svc] = true
					}
					if svc, ok := strings.CutPrefix(e.Key, StatePrefix); ok {
						states[svc] = true
					}
				}
				return plans, states
			}
			plans, states := stored()
			for svc := range states {
				if !plans[svc] {
					t.Errorf("state of %s stored without its plan", svc)
				}
			}
			w := pub.Writes()
			if int(w.Plan) != len(plans) || int(w.State) != len(states) {
				t.Errorf("writes counted = %d plans, %d states; the store holds %d, %d", w.Plan, w.State, len(plans), len(states))
			}
			kv.mu.Lock()
			failed := kv.failed
			kv.mu.Unlock()
			if failed > publishWriters {
				t.Errorf("puts tried after the first failure = %d, want at most the %d in flight", failed, publishWriters)
			}

			kv.heal()
			pub.Cycle(ctx, now.Add(interval))
			plans, states = stored()
			// A plan the store took whose state it did not waits for its
			// state until the spread checkpoint, as with one write at a time.
			if len(plans) != len(pl.order) {
				t.Errorf("after the store came back: %d plans stored, want %d", len(plans), len(pl.order))
			}
			for svc := range states {
				if !plans[svc] {
					t.Errorf("after the store came back: state of %s stored without its plan", svc)
				}
			}
			if w2 := pub.Writes(); int(w2.Plan) != len(pl.order) {
				t.Errorf("plan writes = %d, want %d: each owned plan written once", w2.Plan, len(pl.order))
			}
		})
	}
}

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

// flakyKV fails every write after the first ok records until healed, and
// notes every state written while its service's plan is not in the
// store.
type flakyKV struct {
	systemstore.KV
	mu      sync.Mutex
	ok      int
	healed  bool
	failed  int      // writes (Put) or PutBatch calls refused
	orphans []string // states written before their plan
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
	return k.put(ctx, key, v)
}

// put writes one record, noting a state whose plan is not stored yet.
func (k *flakyKV) put(ctx context.Context, key string, v []byte) (int64, error) {
	if svc, ok := strings.CutPrefix(key, StatePrefix); ok {
		if _, _, err := k.KV.Get(ctx, PlanKey(svc)); err != nil {
			k.mu.Lock()
			k.orphans = append(k.orphans, svc)
			k.mu.Unlock()
		}
	}
	return k.KV.Put(ctx, key, v)
}

func (k *flakyKV) heal() {
	k.mu.Lock()
	k.healed = true
	k.mu.Unlock()
}

// batchKV is a flakyKV that writes batches in round trips of txn
// records, each taken whole or not at all, as etcdstore's transactions
// are, and records the batches it was given.
type batchKV struct {
	*flakyKV
	txn     int
	batches [][]string // keys of each PutBatch, in call order
}

func (k *batchKV) PutBatch(ctx context.Context, puts []systemstore.KeyValue) (int, error) {
	keys := make([]string, len(puts))
	for i, p := range puts {
		keys[i] = p.Key
	}
	k.mu.Lock()
	k.batches = append(k.batches, keys)
	k.mu.Unlock()
	n := 0
	for lo := 0; lo < len(puts); lo += k.txn {
		txn := puts[lo:min(lo+k.txn, len(puts))]
		k.mu.Lock()
		if !k.healed {
			if k.ok < len(txn) {
				k.failed++
				k.mu.Unlock()
				return n, errFlaky
			}
			k.ok -= len(txn)
		}
		k.mu.Unlock()
		for _, p := range txn {
			if _, err := k.put(ctx, p.Key, p.Value); err != nil {
				return n, err
			}
		}
		n += len(txn)
	}
	return n, nil
}

// TestPublisherConcurrentWrites: plans and states are written several
// services at a time, one Put per record or in batches when the store
// has PutBatch, and what the publisher records stays what the store
// took: after a write fails no further write starts, a state is never
// in the store without its service's plan (nor written before it), the
// plans the store took are not written again, and the next cycle writes
// the other plans.
func TestPublisherConcurrentWrites(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch int // records per round trip of a batching store; 0: Put only
		ok    int // records the store takes before it fails
		// heartbeats the store takes in the first cycle (of 6).
		heartbeats int
	}{
		{name: "put/fails_at_heartbeats", ok: 3, heartbeats: 3},
		{name: "put/fails_at_once", ok: 6, heartbeats: 6}, // the heartbeats only
		{name: "put/fails_midway", ok: 6 + 41, heartbeats: 6},
		{name: "put/never_fails", ok: 1 << 30, heartbeats: 6},
		{name: "batch/fails_at_heartbeats", batch: 4, ok: 5, heartbeats: 4}, // the first round trip of 4 taken
		{name: "batch/fails_at_once", batch: 128, ok: 6, heartbeats: 6},
		{name: "batch/fails_midway", batch: 128, ok: 6 + 300, heartbeats: 6},
		{name: "batch/fails_within_a_batch", batch: 7, ok: 6 + 41, heartbeats: 6}, // a round trip ends between a plan and its state
		{name: "batch/never_fails", batch: 128, ok: 1 << 30, heartbeats: 6},
		{name: "batch/small_round_trips", batch: 7, ok: 1 << 30, heartbeats: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := systemstoretest.NewMemKV()
			flaky := &flakyKV{KV: mem, ok: tc.ok}
			var kv systemstore.KV = flaky
			var bkv *batchKV
			if tc.batch > 0 {
				bkv = &batchKV{flakyKV: flaky, txn: tc.batch}
				kv = bkv
			}
			services := testServices(500)
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
				heartbeats := 0
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
					if strings.HasPrefix(e.Key, ShardPrefix) {
						heartbeats++
					}
				}
				if w := pub.Writes(); w.Heartbeat < int64(heartbeats) {
					t.Errorf("heartbeat writes counted = %d; the store holds %d", w.Heartbeat, heartbeats)
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
			if int(w.Heartbeat) != tc.heartbeats {
				t.Errorf("heartbeat writes counted = %d, want %d", w.Heartbeat, tc.heartbeats)
			}
			if int(w.Plan) != len(plans) || int(w.State) != len(states) {
				t.Errorf("writes counted = %d plans, %d states; the store holds %d, %d", w.Plan, w.State, len(plans), len(states))
			}
			flaky.mu.Lock()
			failed := flaky.failed
			flaky.mu.Unlock()
			inFlight := publishWriters
			if bkv != nil {
				inFlight = publishBatches
			}
			if failed > inFlight {
				t.Errorf("writes tried after the first failure = %d, want at most the %d in flight", failed, inFlight)
			}
			if tc.ok < 1<<30 && failed == 0 {
				t.Errorf("no write failed; the case needs the store to fail")
			}

			flaky.heal()
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
			if len(flaky.orphans) > 0 {
				t.Errorf("states written before their plan: %v", flaky.orphans)
			}
			if bkv == nil {
				return
			}
			if len(bkv.batches) == 0 {
				t.Fatal("the publisher never called PutBatch")
			}
			for i, keys := range bkv.batches {
				if len(keys) > 2*publishBatch || len(keys) > 128 {
					t.Errorf("batch %d has %d records, want at most %d (etcd's 128 operations per transaction)", i, len(keys), 2*publishBatch)
				}
				seen := map[string]bool{}
				for _, k := range keys {
					if seen[k] {
						t.Errorf("batch %d writes %s twice", i, k)
					}
					seen[k] = true
					if svc, ok := strings.CutPrefix(k, PlanPrefix); ok && seen[StateKey(svc)] {
						t.Errorf("batch %d has the state of %s before its plan", i, svc)
					}
				}
			}
		})
	}
}

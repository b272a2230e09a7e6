package meshweights

import (
	"context"
	"encoding/json"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/weights"
)

// TestNewOwnerRestoresWaitsAndFences: A owns every shard (epoch 1) and
// publishes; A gives its shards up (Release checkpoints the state) and C
// takes them at epoch 2. C imports what A exported, heartbeats at once,
// and publishes nothing until B's load is fresh; meanwhile B keeps A's
// vectors. A late write of A (epoch 1) is ignored; C's plans are served.
func TestNewOwnerRestoresWaitsAndFences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		kv := systemstoretest.NewMemKV()
		services := testServices(6)
		a := newOwner(t, "A", kv, services, newOwnership(1, "A", "B", "C"))
		a.merged.setFresh("B", true)
		a.merged.setFresh("C", true)
		b := newNode(t, kv, services, nil)
		b.run(ctx, &wg)
		for range 3 {
			a.pub.Cycle(ctx, time.Now())
			time.Sleep(interval)
		}
		synctest.Wait()
		b.sel.Refresh(time.Now())
		before := map[string]*weights.Plan{}
		exported := map[string][]byte{}
		for _, svc := range services {
			before[svc] = b.sel.Plan(svc)
			if before[svc].Owner != "A" {
				t.Fatalf("%s: owner %q, want A", svc, before[svc].Owner)
			}
		}
		// A gives its shards up: checkpoint first.
		for s := range testShards {
			a.pub.Release(ctx, s)
		}
		for _, svc := range services {
			exported[svc], _ = a.planner.ExportState(svc)
		}
		a.own.set(map[int]int64{})

		// C takes every shard at epoch 2; B's summary has not arrived.
		c := newOwner(t, "C", kv, services, newOwnership(2, "A", "B", "C"))
		c.planner.setDemand(map[string]int{"a": 20, "b": 60, "c": 20})
		c.merged.setFresh("A", true)
		c.pub.Cycle(ctx, time.Now())
		for _, svc := range services {
			if diff := cmp.Diff(string(exported[svc]), string(c.planner.importedState(svc))); diff != "" {
				t.Errorf("%s: C imported a state other than A's export (-A +C):\n%s", svc, diff)
			}
		}
		time.Sleep(interval / 2)
		c.pub.Cycle(ctx, time.Now())
		if w := c.pub.Writes(); w.Plan != 0 || w.Heartbeat != 2*testShards {
			t.Fatalf("C before B's load is fresh: writes %+v, want heartbeats only (%d)", w, 2*testShards)
		}
		synctest.Wait()
		b.sel.Refresh(time.Now())
		for _, svc := range services {
			if p := b.sel.Plan(svc); p != before[svc] {
				t.Fatalf("%s during C's wait: %+v, want A's plan held", svc, p)
			}
		}

		// A zombie write from A (epoch 1) after C's heartbeat: ignored.
		zombie := getPlan(t, kv, services[0])
		zombie.Published = time.Now()
		zombie.Result = c.planner.Plan(services[0]).Result // other vectors
		buf, _ := json.Marshal(zombie)
		if _, err := kv.Put(ctx, PlanKey(services[0]), buf); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		b.sel.Refresh(time.Now())
		if got := b.sub.BadRecords("fenced"); got != 1 {
			t.Errorf("fenced records = %d, want 1", got)
		}
		if p := b.sel.Plan(services[0]); p != before[services[0]] {
			t.Errorf("after the zombie write: %+v, want A's plan held", p)
		}

		// B's summary arrives: C publishes everything under epoch 2.
		c.merged.setFresh("B", true)
		time.Sleep(interval / 2)
		c.pub.Cycle(ctx, time.Now())
		synctest.Wait()
		b.sel.Refresh(time.Now())
		if w := c.pub.Writes(); w.Plan != int64(len(services)) {
			t.Errorf("C's plan writes once fresh = %d, want %d", w.Plan, len(services))
		}
		for _, svc := range services {
			p := b.sel.Plan(svc)
			if p.Owner != "C" || p.Source != weights.SourceMesh {
				t.Errorf("%s: owner %q source %v, want mesh from C", svc, p.Owner, p.Source)
			}
			if diff := cmp.Diff(vectors(c.planner.Plan(svc)), vectors(p)); diff != "" {
				t.Errorf("%s: served vectors differ from C's plan:\n%s", svc, diff)
			}
			if rec := getPlan(t, kv, svc); rec.Epoch != 2 || rec.Owner != "C" {
				t.Errorf("%s: stored plan epoch %d owner %q, want 2, C", svc, rec.Epoch, rec.Owner)
			}
		}
	})
}

// TestNewOwnerWaitsForAcks: C takes every shard at epoch 5 while B still
// routes them to the old owner (its summaries list epoch 4). C publishes
// nothing, even long past 2 intervals (warned and counted once per
// shard); once B lists epoch 5 C publishes.
func TestNewOwnerWaitsForAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		kv := systemstoretest.NewMemKV()
		services := testServices(3)
		c := newOwner(t, "C", kv, services, newOwnership(5, "B", "C"))
		var old, acked []ackKey
		for s := range testShards {
			old = append(old, ackKey{s, 4})
			acked = append(acked, ackKey{s, 5})
		}
		c.merged.setAcked("B", old...)
		var plans []int64
		for range 6 {
			c.pub.Cycle(ctx, time.Now())
			plans = append(plans, c.pub.Writes().Plan)
			time.Sleep(interval)
		}
		if want := []int64{0, 0, 0, 0, 0, 0}; !cmp.Equal(plans, want) {
			t.Errorf("plan writes per cycle (B routes to epoch 4) = %v, want %v", plans, want)
		}
		if got := testutil.ToFloat64(c.pub.waits.WithLabelValues("unacked")); got != testShards {
			t.Errorf("publish waits unacked = %v, want %d (once per shard)", got, testShards)
		}
		c.merged.setAcked("B", acked...)
		c.pub.Cycle(ctx, time.Now())
		if got := c.pub.Writes().Plan; got != int64(len(services)) {
			t.Errorf("plan writes once B acked epoch 5 = %d, want %d", got, len(services))
		}
	})
}

// TestNewOwnerAckDuringPlanning: B's acknowledging summary, and with it
// B's load, arrives while C's planner is computing. The plans of that
// cycle were computed without B's load, so C publishes nothing in it;
// the next cycle's plans, computed with B's load, are the first published.
func TestNewOwnerAckDuringPlanning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		kv := systemstoretest.NewMemKV()
		services := testServices(3)
		c := newOwner(t, "C", kv, services, newOwnership(5, "B", "C"))
		c.planner.setDemand(map[string]int{"c": 100}) // C's own clients only
		c.pub.Cycle(ctx, time.Now())
		time.Sleep(interval)
		c.planner.during = func() {
			c.merged.setFresh("B", true)
			c.planner.setDemand(map[string]int{"a": 50, "c": 50}) // B's clients are in a
		}
		c.pub.Cycle(ctx, time.Now())
		c.planner.during = nil
		if got := c.pub.Writes().Plan; got != 0 {
			t.Fatalf("plan writes in the cycle whose planner ran before B's ack = %d, want 0", got)
		}
		time.Sleep(interval)
		c.pub.Cycle(ctx, time.Now())
		if got := c.pub.Writes().Plan; got != int64(len(services)) {
			t.Fatalf("plan writes the cycle after B's ack = %d, want %d", got, len(services))
		}
		for _, svc := range services {
			rec := getPlan(t, kv, svc)
			got := vectors(&weights.Plan{Result: rec.Result})
			if _, ok := got["a"]; !ok {
				t.Errorf("%s: published vectors %v have no entry for zone a: computed without B's load", svc, got)
			}
			if diff := cmp.Diff(vectors(c.planner.Plan(svc)), got); diff != "" {
				t.Errorf("%s: published vectors differ from the plan computed with B's load:\n%s", svc, diff)
			}
		}
	})
}

// TestNewOwnerDeadMemberDropped: B never acknowledges; once it leaves the
// live members (dead past the member TTL) C publishes.
func TestNewOwnerDeadMemberDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		kv := systemstoretest.NewMemKV()
		services := testServices(3)
		own := newOwnership(5, "B", "C")
		c := newOwner(t, "C", kv, services, own)
		for range 3 {
			c.pub.Cycle(ctx, time.Now())
			time.Sleep(interval)
		}
		if got := c.pub.Writes().Plan; got != 0 {
			t.Fatalf("plan writes while B is live and silent = %d, want 0", got)
		}
		own.mu.Lock()
		own.members = []string{"C"}
		own.mu.Unlock()
		c.pub.Cycle(ctx, time.Now())
		if got := c.pub.Writes().Plan; got != int64(len(services)) {
			t.Errorf("plan writes once B left the live members = %d, want %d", got, len(services))
		}
		if c.merged.asked == 0 {
			t.Error("the publisher never asked MergedLoad.Acked")
		}
	})
}

// TestBadStateStartsFresh: a corrupt checkpoint is skipped, the others are
// imported.
func TestBadStateStartsFresh(t *testing.T) {
	ctx := t.Context()
	kv := systemstoretest.NewMemKV()
	services := testServices(2)
	kv.Put(ctx, StateKey(services[0]), []byte("{not json"))
	good := []byte(`{"service":"svc-01","cycles":7}`)
	kv.Put(ctx, StateKey(services[1]), good)
	c := newOwner(t, "C", kv, services, newOwnership(1, "C"))
	c.pub.Cycle(ctx, time.Now())
	if got := c.planner.importedState(services[0]); got != nil {
		t.Errorf("%s imported %q, want nothing", services[0], got)
	}
	if got := c.planner.importedState(services[1]); string(got) != string(good) {
		t.Errorf("%s imported %q, want %q", services[1], got, good)
	}
}

// TestLostShardIsNotPublished: a shard lost between cycles gets no
// heartbeat or plan; regained at a new epoch, everything is published
// again under it.
func TestLostShardIsNotPublished(t *testing.T) {
	ctx := t.Context()
	kv := systemstoretest.NewMemKV()
	services := testServices(8)
	o := newOwner(t, "A", kv, services, newOwnership(1, "A"))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	o.pub.Cycle(ctx, now)
	o.own.set(map[int]int64{0: 1, 1: 1, 2: 1})
	before := o.pub.Writes()
	now = now.Add(interval)
	o.pub.Cycle(ctx, now)
	if w := o.pub.Writes(); w.Heartbeat-before.Heartbeat != 3 || w.Plan != before.Plan {
		t.Errorf("after losing shard 3: writes %+v -> %+v, want 3 heartbeats and no plan", before, w)
	}
	o.own.set(map[int]int64{0: 1, 1: 1, 2: 1, 3: 4})
	now = now.Add(interval)
	o.pub.Cycle(ctx, now) // the wait: nothing from shard 3
	now = now.Add(2 * interval)
	o.pub.Cycle(ctx, now)
	in3 := 0
	for _, svc := range services {
		if shardOf(svc) == 3 {
			in3++
			if rec := getPlan(t, kv, svc); rec.Epoch != 4 {
				t.Errorf("%s: epoch %d, want 4", svc, rec.Epoch)
			}
		}
	}
	if in3 == 0 {
		t.Fatal("no test service in shard 3")
	}
	if w := o.pub.Writes(); w.Plan != before.Plan+int64(in3) {
		t.Errorf("plan writes = %d, want %d", w.Plan, before.Plan+int64(in3))
	}
}

// TestRemovedServiceIsUnpublished: a service that leaves the registry has
// its plan and state deleted by its owner.
func TestRemovedServiceIsUnpublished(t *testing.T) {
	ctx := t.Context()
	kv := systemstoretest.NewMemKV()
	services := testServices(3)
	current := services
	own := newOwnership(1, "A")
	o := newOwner(t, "A", kv, services, own)
	o.pub.cfg.Services = func() []string { return current }
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for range 6 {
		o.pub.Cycle(ctx, now)
		now = now.Add(interval)
	}
	if n := kv.KeysUnder(StatePrefix); n != 3 {
		t.Fatalf("state keys = %d, want 3", n)
	}
	current = services[:2]
	o.pub.Cycle(ctx, now)
	if _, _, err := kv.Get(ctx, PlanKey(services[2])); err == nil {
		t.Errorf("plan of removed %s still stored", services[2])
	}
	if n, m := kv.KeysUnder(PlanPrefix), kv.KeysUnder(StatePrefix); n != 2 || m != 2 {
		t.Errorf("plan keys %d, state keys %d after removing one of 3, want 2 and 2", n, m)
	}
}

// TestTakeDuringOutageRestoresLater: a shard taken while the store fails
// publishes nothing until its checkpoints could be read, then imports
// them.
func TestTakeDuringOutageRestoresLater(t *testing.T) {
	ctx := t.Context()
	kv := systemstoretest.NewMemKV()
	services := testServices(3)
	state := []byte(`{"service":"svc-00","cycles":42}`)
	kv.Put(ctx, StateKey(services[0]), state)
	c := newOwner(t, "C", kv, services, newOwnership(3, "C"))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	kv.Down.Store(true)
	for range 3 {
		c.pub.Cycle(ctx, now)
		now = now.Add(interval)
	}
	if got := c.planner.importedState(services[0]); got != nil {
		t.Fatalf("imported %q while the store was down", got)
	}
	kv.Down.Store(false)
	c.pub.Cycle(ctx, now)
	if got := c.planner.importedState(services[0]); string(got) != string(state) {
		t.Errorf("imported %q after the outage, want %q", got, state)
	}
	if w := c.pub.Writes(); w.Plan != int64(len(services)) || w.Heartbeat != testShards {
		t.Errorf("writes = %+v, want %d plans and %d heartbeats (the cycle after the outage)", w, len(services), testShards)
	}
}

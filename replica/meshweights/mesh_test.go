package meshweights

import (
	"context"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/weights"
)

const interval = 10 * time.Second

// replicaNode is one replica's subscriber and selector over a store.
type replicaNode struct {
	sub     *Subscriber
	sel     *Selector
	local   *fakeLocal
	changes *changes
	storeUp func() bool
}

func newNode(t testing.TB, kv systemstore.KV, services []string, storeUp func() bool) *replicaNode {
	t.Helper()
	n := &replicaNode{local: newFakeLocal(services), changes: &changes{}}
	var err error
	n.sub, err = NewSubscriber(SubscriberConfig{KV: kv, Shard: shardOf})
	if err != nil {
		t.Fatal(err)
	}
	n.sel, err = NewSelector(SelectorConfig{
		Subscriber: n.sub, Local: n.local, Services: func() []string { return services },
		Interval: interval, StoreUp: storeUp, OnChange: n.changes.OnChange,
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// run starts the subscriber until the test's context ends.
func (n *replicaNode) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { n.sub.Run(ctx) })
}

type owner struct {
	pub     *Publisher
	planner *testPlanner
	own     *fakeOwnership
	merged  *fakeMerged
}

func newOwner(t testing.TB, id string, kv systemstore.KV, services []string, own *fakeOwnership) *owner {
	t.Helper()
	// The owner's own sender acknowledges its holds, as every member's.
	o := &owner{own: own, merged: &fakeMerged{fresh: map[string]bool{id: true}}}
	o.planner = newTestPlanner(t, own.Owns, services)
	var err error
	o.pub, err = NewPublisher(PublisherConfig{
		ID: id, KV: kv, Ownership: own, Merged: o.merged, Planner: o.planner,
		Services: func() []string { return services }, Shards: testShards, Interval: interval,
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func getPlan(t testing.TB, kv systemstore.KV, svc string) *PlanRecord {
	t.Helper()
	b, _, err := kv.Get(context.Background(), PlanKey(svc))
	if err != nil {
		t.Fatalf("get plan of %s: %v", svc, err)
	}
	rec, err := DecodePlan(PlanKey(svc), b)
	if err != nil {
		t.Fatalf("decode plan of %s: %v", svc, err)
	}
	return rec
}

// TestPublishedPlansReachEveryReplica: the owner A publishes; B's selector
// (and A's own) serve vectors identical to the published ones, with owner
// and contributors; constant input writes heartbeats only; a change of
// demand writes each changed plan once and moves Gen once.
func TestPublishedPlansReachEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		mem := systemstoretest.NewMemKV()
		kv := &countingKV{KV: mem}
		services := testServices(10)
		o := newOwner(t, "A", kv, services, newOwnership(1, "A", "B"))
		o.merged.setFresh("B", true)
		a, b := newNode(t, kv, services, nil), newNode(t, kv, services, nil)
		a.run(ctx, &wg)
		b.run(ctx, &wg)

		o.pub.Cycle(ctx, time.Now())
		synctest.Wait()
		b.sel.Refresh(time.Now())
		a.sel.Refresh(time.Now())
		gens := map[string]uint64{}
		for _, svc := range services {
			rec := getPlan(t, mem, svc)
			want := vectors(&weights.Plan{Result: rec.Result})
			if diff := cmp.Diff(want, vectors(o.planner.Plan(svc))); diff != "" {
				t.Fatalf("%s: published vectors differ from the owner's plan (-published +owner):\n%s", svc, diff)
			}
			for name, n := range map[string]*replicaNode{"A": a, "B": b} {
				p := n.sel.Plan(svc)
				if diff := cmp.Diff(want, vectors(p)); diff != "" {
					t.Errorf("%s on %s: vectors differ from the published ones (-published +served):\n%s", svc, name, diff)
				}
				if p.Source != weights.SourceMesh || p.Owner != "A" || p.Reason != "" || len(p.Contributors) != 2 || !p.Published.Equal(rec.Published) {
					t.Errorf("%s on %s: source %v owner %q reason %q contributors %v published %v, want mesh from A", svc, name, p.Source, p.Owner, p.Reason, p.Contributors, p.Published)
				}
			}
			gens[svc] = b.sel.Plan(svc).Gen
		}
		if got := kv.count(PlanPrefix); got != len(services) {
			t.Fatalf("plan writes after the first cycle = %d, want %d", got, len(services))
		}

		// Five more cycles with the same input: heartbeats only (the
		// states went with the first plans; none is due again yet).
		for range 5 {
			time.Sleep(interval)
			o.pub.Cycle(ctx, time.Now())
		}
		synctest.Wait()
		b.changes.take()
		b.sel.Refresh(time.Now())
		w := o.pub.Writes()
		if w.Plan != int64(len(services)) || w.Heartbeat != 6*testShards || w.State != int64(len(services)) {
			t.Errorf("writes after 6 constant cycles = %+v, want plan %d, heartbeat %d, state %d", w, len(services), 6*testShards, len(services))
		}
		if got, want := kv.count(PlanPrefix), len(services); got != want {
			t.Errorf("store plan puts = %d, want %d", got, want)
		}
		if got, want := kv.count(ShardPrefix), 6*testShards; got != want {
			t.Errorf("store heartbeat puts = %d, want %d", got, want)
		}
		if got := b.changes.take(); len(got) != 0 {
			t.Errorf("OnChange on B with constant plans: %v, want none", got)
		}
		for _, svc := range services {
			if g := b.sel.Plan(svc).Gen; g != gens[svc] {
				t.Errorf("%s: Gen moved %d -> %d without a vector change", svc, gens[svc], g)
			}
		}

		// New demand: every plan changes, is written once, and B's Gen
		// moves once.
		o.planner.setDemand(map[string]int{"a": 20, "b": 20, "c": 60})
		time.Sleep(interval)
		o.pub.Cycle(ctx, time.Now())
		time.Sleep(interval)
		o.pub.Cycle(ctx, time.Now())
		synctest.Wait()
		b.sel.Refresh(time.Now())
		if got, want := o.pub.Writes().Plan, int64(2*len(services)); got != want {
			t.Errorf("plan writes after a demand change = %d, want %d", got, want)
		}
		if got := b.changes.take(); len(got) != 1 || len(got[0]) != len(services) {
			t.Errorf("OnChange on B after a demand change: %v, want one call with %d services", got, len(services))
		}
		for _, svc := range services {
			p := b.sel.Plan(svc)
			if p.Gen == gens[svc] {
				t.Errorf("%s: Gen %d did not move with the vectors", svc, p.Gen)
			}
			if diff := cmp.Diff(vectors(o.planner.Plan(svc)), vectors(p)); diff != "" {
				t.Errorf("%s on B after the change (-owner +served):\n%s", svc, diff)
			}
		}
	})
}

// TestOwnerGoneFallsBackAfterStaleCycles: when the heartbeat stops, the
// last published plan is served until StaleCycles × Interval, then the
// local one with the reason, and metrics say so.
func TestOwnerGoneFallsBackAfterStaleCycles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		kv := systemstoretest.NewMemKV()
		services := testServices(3)
		o := newOwner(t, "r2", kv, services, newOwnership(1, "r2"))
		b := newNode(t, kv, services, nil)
		b.run(ctx, &wg)
		o.pub.Cycle(ctx, time.Now())
		synctest.Wait()
		b.sel.Refresh(time.Now())
		svc := services[0]
		mesh := b.sel.Plan(svc)
		if mesh.Source != weights.SourceMesh {
			t.Fatalf("source = %v, want mesh", mesh.Source)
		}
		b.changes.take()
		// The owner dies (kill -9): no more heartbeats.
		for i := 1; i <= 3; i++ {
			time.Sleep(interval)
			b.sel.Refresh(time.Now())
			if p := b.sel.Plan(svc); p != mesh {
				t.Fatalf("%v after the last heartbeat: plan %+v, want the published one held", time.Duration(i)*interval, p)
			}
		}
		time.Sleep(4 * time.Second)
		b.sel.Refresh(time.Now())
		p := b.sel.Plan(svc)
		if p.Source != weights.SourceLocal {
			t.Fatalf("34s after the last heartbeat: source %v, want local", p.Source)
		}
		if want := "published plan stale: owner r2 last heard 34s ago"; p.Reason != want {
			t.Errorf("reason = %q, want %q", p.Reason, want)
		}
		if diff := cmp.Diff(vectors(b.local.Plan(svc)), vectors(p)); diff != "" {
			t.Errorf("fallback vectors differ from the local plan:\n%s", diff)
		}
		if p.Gen == mesh.Gen {
			t.Errorf("Gen %d unchanged though the vectors changed", p.Gen)
		}
		if got := b.changes.take(); len(got) != 1 || len(got[0]) != len(services) {
			t.Errorf("OnChange at the fallback: %v, want one call with every service", got)
		}
		if m, l := b.sel.Sources(); m != 0 || l != len(services) {
			t.Errorf("sources = mesh %d local %d, want 0 and %d", m, l, len(services))
		}
		if got := counterValue(t, b.sel.falls.WithLabelValues(KindStale)); got != float64(len(services)) {
			t.Errorf("stale fallbacks = %v, want %d", got, len(services))
		}
		if got := gaugeValue(t, b.sel.age); got != 34 {
			t.Errorf("plan age = %vs, want 34s", got)
		}
		// A later Refresh only updates the reason: no push, same Gen.
		time.Sleep(interval)
		b.sel.Refresh(time.Now())
		if q := b.sel.Plan(svc); q.Gen != p.Gen || !strings.HasSuffix(q.Reason, "44s ago") {
			t.Errorf("later refresh: gen %d reason %q, want gen %d and 44s", q.Gen, q.Reason, p.Gen)
		}
		if got := b.changes.take(); len(got) != 0 {
			t.Errorf("OnChange without a change: %v", got)
		}
	})
}

// TestStoreOutageHoldsThenFallsBack: with the store unreachable the
// published vectors are held while fresh, then the local ones with reason
// "store unreachable"; the store back and the owner heartbeating again,
// the published plan returns.
func TestStoreOutageHoldsThenFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		kv := systemstoretest.NewMemKV()
		services := testServices(2)
		o := newOwner(t, "r1", kv, services, newOwnership(1, "r1"))
		var up sync.Mutex
		storeUp := true
		b := newNode(t, kv, services, func() bool { up.Lock(); defer up.Unlock(); return storeUp })
		b.run(ctx, &wg)
		o.pub.Cycle(ctx, time.Now())
		synctest.Wait()
		b.sel.Refresh(time.Now())
		svc := services[1]
		mesh := b.sel.Plan(svc)

		kv.Down.Store(true)
		up.Lock()
		storeUp = false
		up.Unlock()
		for range 3 {
			time.Sleep(interval)
			o.pub.Cycle(ctx, time.Now()) // fails: nothing written
			b.sel.Refresh(time.Now())
			if p := b.sel.Plan(svc); p != mesh {
				t.Fatalf("store down, plan %v old: %+v, want the published one held", time.Since(mesh.Published), p)
			}
		}
		time.Sleep(interval)
		b.sel.Refresh(time.Now())
		p := b.sel.Plan(svc)
		if p.Source != weights.SourceLocal || p.Reason != "store unreachable: owner r1 last heard 40s ago" {
			t.Fatalf("store down 40s: source %v reason %q, want local, store unreachable", p.Source, p.Reason)
		}
		if got := counterValue(t, b.sel.falls.WithLabelValues(KindStoreUnreachable)); got != float64(len(services)) {
			t.Errorf("store_unreachable fallbacks = %v, want %d", got, len(services))
		}

		kv.Down.Store(false)
		up.Lock()
		storeUp = true
		up.Unlock()
		time.Sleep(interval)
		o.pub.Cycle(ctx, time.Now())
		synctest.Wait()
		b.sel.Refresh(time.Now())
		q := b.sel.Plan(svc)
		if q.Source != weights.SourceMesh || q.Reason != "" {
			t.Fatalf("store back: source %v reason %q, want mesh", q.Source, q.Reason)
		}
		if diff := cmp.Diff(vectors(mesh), vectors(q)); diff != "" {
			t.Errorf("recovered vectors differ from the published ones:\n%s", diff)
		}
	})
}

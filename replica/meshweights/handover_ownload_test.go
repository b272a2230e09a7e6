package meshweights

// A new owner's own load: the real weights.Planner over a real
// exchange.Merged behind a Publisher. The old owner O (no clients)
// publishes from A's (zone-a, 400 rps) and B's (zone-b, zone-c, 100 rps
// each) summaries and dies without Release. B takes every shard at epoch
// 2 and restores O's checkpoint; A's acknowledging summary is in B's
// Merged but B's own summary (delivered on B's sender tick) may not be
// yet. Found in e2e TestMeshLoad/kill_owner on a busy machine: before
// the owner waited for its own acknowledgement, that first cycle planned
// from zone-a's demand alone, every route failed open to capacity
// (2500/2500/5000) and the replicas pushed it for a cycle.

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

const ownLoadService = "zonal"

func ownLoadRegistry(t *testing.T) *registry.Store {
	store := registry.NewStore()
	reg := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ops []registry.Op
	n := 0
	for _, zc := range []struct {
		zone string
		n    int
	}{{"zone-a", 2}, {"zone-b", 2}, {"zone-c", 4}} {
		for i := range zc.n {
			n++
			ops = append(ops, registry.Upsert(ownLoadService, &registry.Endpoint{
				ID: fmt.Sprintf("%s-%d", zc.zone, i), Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}),
				Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
				Locality: registry.Locality{Region: "r1", Zone: zc.zone}, Health: registry.Healthy,
				Source: registry.SourceStatic, Registered: reg,
			}))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	return store
}

// ownLoadSummary is replica's summary: its clients' flows (client zone ->
// rps, spread 90/5/5 own zone first) and one xDS stream per zone (every
// replica has the test's raw EDS watches), listing every shard at epoch.
func ownLoadSummary(replica string, at time.Time, epoch int64, demand map[string]float64) load.Summary {
	ss := load.ServiceSummary{Service: ownLoadService}
	for _, cz := range []string{"zone-a", "zone-b", "zone-c"} {
		if d := demand[cz]; d > 0 {
			for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
				r := d * 0.05
				if z == cz {
					r = d * 0.9
				}
				ss.Flows = append(ss.Flows, load.Flow{ClientZone: cz, Zone: z, Issued: r, Succeeded: r, InProgress: 1, Reporters: 1, Updated: at.Add(-500 * time.Millisecond)})
			}
		}
		ss.Clients = append(ss.Clients, load.ClientCount{Zone: cz, Count: 1})
	}
	s := load.Summary{Replica: replica, At: at, Interval: time.Second, Services: []load.ServiceSummary{ss}}
	for sh := range testShards {
		s.Shards = append(s.Shards, load.ShardEpoch{Shard: sh, Epoch: epoch})
	}
	return s
}

// afterPlanner runs after each planner cycle, before the publisher
// writes: what arrives while it writes heartbeats.
type afterPlanner struct {
	*weights.Planner
	after func()
}

func (p *afterPlanner) Cycle(now time.Time) {
	p.Planner.Cycle(now)
	if p.after != nil {
		p.after()
		p.after = nil
	}
}

type ownLoadOwner struct {
	merged  *exchange.Merged
	planner *afterPlanner
	pub     *Publisher
}

func newOwnLoadOwner(t *testing.T, id string, store *registry.Store, kv *systemstoretest.MemKV, own *fakeOwnership, clock *time.Time) *ownLoadOwner {
	merged := exchange.NewMerged(exchange.MergedConfig{Now: func() time.Time { return *clock }})
	pl, err := weights.NewPlanner(weights.Config{
		Registry: store, Loads: merged, Clients: merged, Zones: anyZoneSet{},
		ZoneAware: zoneaware.Config{ReportInterval: time.Second}, Interval: time.Second, Owns: own.Owns,
	})
	if err != nil {
		t.Fatal(err)
	}
	ap := &afterPlanner{Planner: pl}
	pub, err := NewPublisher(PublisherConfig{
		ID: id, KV: kv, Ownership: own, Merged: benchMergedLoad{merged}, Planner: ap,
		Services: func() []string { return []string{ownLoadService} }, Shards: testShards, Interval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &ownLoadOwner{merged: merged, planner: ap, pub: pub}
}

func recordString(rec *PlanRecord) string {
	s := fmt.Sprintf("owner %s epoch %d contributors %+v source %v fallback %v:", rec.Owner, rec.Epoch, rec.Contributors, rec.Result.Source, rec.Result.Fallback)
	for _, rt := range rec.Result.Routes {
		if rt.ClientZone == "" {
			continue
		}
		s += fmt.Sprintf(" %s{%v", rt.ClientZone, rt.Explain.Fallback)
		for _, w := range rt.Weights {
			s += fmt.Sprintf(" %s:%d", w.Zone, w.Weight)
		}
		s += "}"
	}
	return s
}

// routeWeights is a record's vectors by client zone.
func routeWeights(rec *PlanRecord) map[string]map[string]uint32 {
	return vectors(&weights.Plan{Result: rec.Result})
}

// TestNewOwnerWaitsForItsOwnLoad: a new owner publishes nothing until its
// own summary, as every live member's, has acknowledged its hold; its
// first record then holds the vectors it restored (the demand has not
// changed), whether its own summary came before its first cycle or
// after.
func TestNewOwnerWaitsForItsOwnLoad(t *testing.T) {
	t.Run("own_summary_late", func(t *testing.T) { testNewOwnerOwnLoad(t, false) })
	t.Run("own_summary_first", func(t *testing.T) { testNewOwnerOwnLoad(t, true) })
}

func testNewOwnerOwnLoad(t *testing.T, ownFirst bool) {
	ctx := t.Context()
	store := ownLoadRegistry(t)
	kv := systemstoretest.NewMemKV()
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	zoneA := map[string]float64{"zone-a": 400}
	zoneBC := map[string]float64{"zone-b": 100, "zone-c": 100}

	// The old owner O: every second A's and B's summaries (and O's own,
	// streams only) arrive, then O's cycle.
	o := newOwnLoadOwner(t, "O", store, kv, newOwnership(1, "A", "B", "O"), &clock)
	for range 6 {
		arr := clock.Add(-100 * time.Millisecond)
		for _, s := range []load.Summary{ownLoadSummary("A", arr, 1, zoneA), ownLoadSummary("B", arr, 1, zoneBC), ownLoadSummary("O", arr, 1, nil)} {
			if err := o.merged.Add(s, arr); err != nil {
				t.Fatal(err)
			}
		}
		o.pub.Cycle(ctx, clock)
		clock = clock.Add(time.Second)
	}
	before := getPlan(t, kv, ownLoadService)
	t.Logf("old owner's last record: %s", recordString(before))
	if before.Owner != "O" {
		t.Fatalf("old owner published nothing: %s", recordString(before))
	}

	// O is SIGKILLed (no Release). 2 s later B holds every shard at epoch
	// 2; O left the live members. A's summary listing epoch 2 arrives
	// just after B's publisher ticks; B's own is delivered either before
	// the cycle or while the publisher writes its heartbeats.
	clock = clock.Add(2 * time.Second)
	b := newOwnLoadOwner(t, "B", store, kv, newOwnership(2, "A", "B"), &clock)
	if err := b.merged.Add(ownLoadSummary("A", clock.Add(50*time.Millisecond), 2, zoneA), clock.Add(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	b.planner.after = func() {
		at := clock.Add(150 * time.Millisecond)
		if err := b.merged.Add(ownLoadSummary("B", at, 2, zoneBC), at); err != nil {
			t.Fatal(err)
		}
	}
	if ownFirst {
		b.planner.after()
		b.planner.after = nil
	}
	b.pub.Cycle(ctx, clock)
	if !ownFirst {
		if n := b.pub.Writes().Plan; n != 0 {
			t.Fatalf("new owner wrote %d plans before its own summary acknowledged its hold, want 0: %s", n, recordString(getPlan(t, kv, ownLoadService)))
		}
		// The demand moved a little, within the hysteresis: a first
		// cycle that starts from the restored state holds the vectors,
		// one that starts from the state of the waiting cycle (planned
		// from zone-a alone) computes new ones.
		clock = clock.Add(time.Second)
		for _, s := range []load.Summary{ownLoadSummary("A", clock, 2, map[string]float64{"zone-a": 405}), ownLoadSummary("B", clock, 2, zoneBC)} {
			if err := b.merged.Add(s, clock); err != nil {
				t.Fatal(err)
			}
		}
		b.pub.Cycle(ctx, clock)
	}
	first := getPlan(t, kv, ownLoadService)
	t.Logf("new owner's first record: %s", recordString(first))
	if first.Owner != "B" {
		t.Fatalf("new owner published nothing once every member acknowledged it: %s", recordString(first))
	}
	if diff := cmp.Diff(routeWeights(before), routeWeights(first)); diff != "" {
		t.Errorf("new owner's first record moved the vectors the replicas serve (-old owner's last +new owner's first):\n%s", diff)
	}
	if n := b.pub.Writes().Plan; n != 1 {
		t.Errorf("plan writes by the new owner = %d, want 1", n)
	}
}

package mesh

// Reproduction (investigation of e2e TestMeshLoad/kill_owner), not a
// product test: the real weights.Planner over a real exchange.Merged
// behind a Publisher. The old owner O (no clients) publishes from A's
// (zone-a, 400 rps) and B's (zone-b, zone-c, 100 rps each) summaries and
// dies without Release. B takes every shard at epoch 2 and restores O's
// checkpoint; A's acknowledging summary is in B's Merged but B's own
// summary (delivered on B's sender tick) is not yet. The wait ignores B
// itself, so the first cycle is ready and its plan, from zone-a's demand
// only, is a capacity split on every route; B's own summary lands while
// the publisher writes heartbeats, so the record lists A and B.

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/load/exchange"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/durable/durabletest"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

const reproService = "zonal"

func reproRegistry(t *testing.T) *registry.Store {
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
			ops = append(ops, registry.Upsert(reproService, &registry.Endpoint{
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

// reproSummary is replica's summary: its clients' flows (client zone ->
// rps, spread 90/5/5 own zone first) and one xDS stream per zone (every
// replica has the test's raw EDS watches), listing every shard at epoch.
func reproSummary(replica string, at time.Time, epoch int64, demand map[string]float64) load.Summary {
	ss := load.ServiceSummary{Service: reproService}
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

type reproOwner struct {
	merged  *exchange.Merged
	planner *afterPlanner
	pub     *Publisher
}

func newReproOwner(t *testing.T, id string, store *registry.Store, kv *durabletest.MemKV, own *fakeOwnership, clock *time.Time) *reproOwner {
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
		Services: func() []string { return []string{reproService} }, Shards: testShards, Interval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &reproOwner{merged: merged, planner: ap, pub: pub}
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

func TestReproNewOwnerWithoutOwnLoad(t *testing.T) {
	ctx := t.Context()
	store := reproRegistry(t)
	kv := durabletest.NewMemKV()
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	zoneA := map[string]float64{"zone-a": 400}
	zoneBC := map[string]float64{"zone-b": 100, "zone-c": 100}

	// The old owner O: every second A's and B's summaries (and O's own,
	// streams only) arrive, then O's cycle.
	o := newReproOwner(t, "O", store, kv, newOwnership(1, "A", "B", "O"), &clock)
	for range 6 {
		arr := clock.Add(-100 * time.Millisecond)
		for _, s := range []load.Summary{reproSummary("A", arr, 1, zoneA), reproSummary("B", arr, 1, zoneBC), reproSummary("O", arr, 1, nil)} {
			if err := o.merged.Add(s, arr); err != nil {
				t.Fatal(err)
			}
		}
		o.pub.Cycle(ctx, clock)
		clock = clock.Add(time.Second)
	}
	before := getPlan(t, kv, reproService)
	t.Logf("old owner's last record: %s", recordString(before))

	// O is SIGKILLed (no Release). 2 s later B holds every shard at epoch
	// 2; O left the live members.
	clock = clock.Add(2 * time.Second)
	b := newReproOwner(t, "B", store, kv, newOwnership(2, "A", "B"), &clock)
	// A saw the new record and its sender ticked: its summary, listing
	// epoch 2, arrives a moment after B's publisher tick (the cycle runs
	// late on a busy machine). B's own sender has not ticked since it took
	// the shard: its summary is delivered while the publisher writes.
	if err := b.merged.Add(reproSummary("A", clock.Add(50*time.Millisecond), 2, zoneA), clock.Add(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	b.planner.after = func() {
		at := clock.Add(150 * time.Millisecond)
		if err := b.merged.Add(reproSummary("B", at, 2, zoneBC), at); err != nil {
			t.Fatal(err)
		}
	}
	b.pub.Cycle(ctx, clock)
	first := getPlan(t, kv, reproService)
	t.Logf("new owner's first record: %s", recordString(first))
	if first.Owner != "B" {
		t.Fatalf("new owner published nothing in its first cycle")
	}
	split := true
	for _, rt := range first.Result.Routes {
		want := map[string]uint32{"zone-a": 2500, "zone-b": 2500, "zone-c": 5000}
		for _, w := range rt.Weights {
			if d := int(w.Weight) - int(want[w.Zone]); d < -2 || d > 2 {
				split = false
			}
		}
	}
	if split {
		t.Errorf("REPRODUCED: new owner's first record is a capacity split on every route (source %v, fallback %v), not the restored vectors", first.Result.Source, first.Result.Fallback)
	}
	clock = clock.Add(time.Second)
	for _, s := range []load.Summary{reproSummary("A", clock, 2, zoneA), reproSummary("B", clock, 2, zoneBC)} {
		if err := b.merged.Add(s, clock); err != nil {
			t.Fatal(err)
		}
	}
	b.pub.Cycle(ctx, clock)
	t.Logf("new owner's second record: %s", recordString(getPlan(t, kv, reproService)))
	t.Logf("plan writes by B: %d", b.pub.Writes().Plan)
}

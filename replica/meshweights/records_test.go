package meshweights

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

func validRecord() PlanRecord {
	return PlanRecord{
		V: recordVersion, Service: "svc", Owner: "r1", Epoch: 3, Shard: shardOf("svc"),
		Published:    time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Contributors: []ContributorJSON{{Replica: "r1", AgeMS: 100}, {Replica: "r2", AgeMS: 2500}},
		Result: &zoneaware.Result{
			Routes: []zoneaware.Route{
				{ClientZone: "", Weights: []zoneaware.ZoneWeight{{Zone: "a", Weight: 2500, Share: 0.25}, {Zone: "b", Weight: 7500, Share: 0.75}}},
				{ClientZone: "a", Weights: []zoneaware.ZoneWeight{{Zone: "a", Weight: 10000, Share: 1}, {Zone: "b", Weight: 1, Share: 0}},
					Explain: zoneaware.Explain{ClientZone: "a", LocalFirst: true, Local: 1, HasDemand: true, Demand: 40}},
			},
			Zones:  []zoneaware.ZoneInfo{{Zone: "a", Healthy: 1, Trusted: 1, Health: 1}, {Zone: "b", Healthy: 3, Trusted: 3, Health: 1}},
			Source: zoneaware.SourceLRS, SameZone: 0.8, Optimum: 0.8,
		},
	}
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodePlan(t *testing.T) {
	good := validRecord()
	got, err := DecodePlan(PlanKey("svc"), encode(t, &good))
	if err != nil {
		t.Fatalf("valid record: %v", err)
	}
	if diff := cmp.Diff(&good, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	tests := []struct {
		name  string
		key   string
		edit  func(r *PlanRecord)
		raw   string
		field string
	}{
		{name: "not-json", raw: "{", field: "value"},
		{name: "trailing", raw: string(encode(t, &good)) + "{}", field: "value"},
		{name: "oversize", raw: `{"v":1,"owner":"` + strings.Repeat("x", MaxRecordBytes) + `"}`, field: "value"},
		{name: "version", edit: func(r *PlanRecord) { r.V = 2 }, field: "v"},
		{name: "other-service", key: PlanKey("other"), field: "service"},
		{name: "no-owner", edit: func(r *PlanRecord) { r.Owner = "" }, field: "owner"},
		{name: "negative-epoch", edit: func(r *PlanRecord) { r.Epoch = -1 }, field: "epoch"},
		{name: "shard-range", edit: func(r *PlanRecord) { r.Shard = 1 << 20 }, field: "shard"},
		{name: "no-published", edit: func(r *PlanRecord) { r.Published = time.Time{} }, field: "published"},
		{name: "contributor-age", edit: func(r *PlanRecord) { r.Contributors[1].AgeMS = -5 }, field: "contributors[1].age_ms"},
		{name: "no-result", edit: func(r *PlanRecord) { r.Result = nil }, field: "result"},
		{name: "no-routes", edit: func(r *PlanRecord) { r.Result.Routes = nil }, field: "result.routes"},
		{name: "routes-unsorted", edit: func(r *PlanRecord) { r.Result.Routes[0], r.Result.Routes[1] = r.Result.Routes[1], r.Result.Routes[0] }, field: "result.routes[1].ClientZone"},
		{name: "zero-weight", edit: func(r *PlanRecord) { r.Result.Routes[1].Weights[1].Weight = 0 }, field: "result.routes[1].Weights[1].Weight"},
		{name: "share-range", edit: func(r *PlanRecord) { r.Result.Routes[0].Weights[0].Share = 1.5 }, field: "result.routes[0].Weights[0].Share"},
		{name: "shares-sum", edit: func(r *PlanRecord) { r.Result.Routes[0].Weights[0].Share = 0.5 }, field: "result.routes[0].Weights"},
		{name: "zones-unsorted", edit: func(r *PlanRecord) { r.Result.Routes[0].Weights[0].Zone = "c" }, field: "result.routes[0].Weights[1].Zone"},
		{name: "zone-twice", edit: func(r *PlanRecord) { r.Result.Routes[1].Weights[1].Zone = "a" }, field: "result.routes[1].Weights[1].Zone"},
		{name: "long-zone", edit: func(r *PlanRecord) { r.Result.Zones[0].Zone = strings.Repeat("z", 300) }, field: "result.zones[0].Zone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.raw)
			if tt.raw == "" {
				r := validRecord()
				if tt.edit != nil {
					tt.edit(&r)
				}
				b = encode(t, &r)
			}
			key := tt.key
			if key == "" {
				key = PlanKey("svc")
			}
			_, err := DecodePlan(key, b)
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("DecodePlan = %v, want ErrBadRecord", err)
			}
			if !strings.HasPrefix(err.Error(), tt.field+":") {
				t.Errorf("error %q does not name field %q", err, tt.field)
			}
		})
	}
}

func TestDecodeHeartbeat(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	good := encode(t, Heartbeat{V: 1, Owner: "r1", Epoch: 2, Cycle: 9, At: at})
	shard, hb, err := DecodeHeartbeat(ShardKey(7), good)
	if err != nil || shard != 7 || *hb != (Heartbeat{V: 1, Owner: "r1", Epoch: 2, Cycle: 9, At: at}) {
		t.Fatalf("DecodeHeartbeat = %d, %+v, %v; want shard 7 and the record", shard, hb, err)
	}
	tests := []struct{ name, key, value, field string }{
		{"key-not-number", ShardPrefix + "xx", string(good), "key"},
		{"key-one-digit", ShardPrefix + "7", string(good), "key"},
		{"not-json", ShardKey(1), "[]", "value"},
		{"version", ShardKey(1), `{"v":0,"owner":"r1","at":"2026-03-01T12:00:00Z"}`, "v"},
		{"no-owner", ShardKey(1), `{"v":1,"at":"2026-03-01T12:00:00Z"}`, "owner"},
		{"negative-epoch", ShardKey(1), `{"v":1,"owner":"r1","epoch":-3,"at":"2026-03-01T12:00:00Z"}`, "epoch"},
		{"no-at", ShardKey(1), `{"v":1,"owner":"r1","epoch":3}`, "at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := DecodeHeartbeat(tt.key, []byte(tt.value))
			if !errors.Is(err, ErrBadRecord) || !strings.HasPrefix(err.Error(), tt.field+":") {
				t.Errorf("DecodeHeartbeat = %v, want ErrBadRecord naming %q", err, tt.field)
			}
		})
	}
}

// TestCorruptRecordsIgnored: bad plans and heartbeats are counted and
// ignored, never replace a good record, through the watch and through a
// fresh List.
func TestCorruptRecordsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		kv := systemstoretest.NewMemKV()
		services := testServices(4)
		svc := services[2]
		kv.Put(ctx, PlanKey(svc), []byte("garbage"))
		o := newOwner(t, "r1", kv, services, newOwnership(1, "r1"))
		b := newNode(t, kv, services, nil)
		b.run(ctx, &wg)
		synctest.Wait()
		b.sel.Refresh(time.Now())
		if p := b.sel.Plan(svc); p.Source != weights.SourceLocal || p.Reason != ReasonNoPlan {
			t.Fatalf("with only a corrupt plan: source %v reason %q, want local, %q", p.Source, p.Reason, ReasonNoPlan)
		}
		o.pub.Cycle(ctx, time.Now())
		synctest.Wait()
		b.sel.Refresh(time.Now())
		good := b.sel.Plan(svc)
		if good.Source != weights.SourceMesh {
			t.Fatalf("source %v, want mesh", good.Source)
		}

		rec := getPlan(t, kv, svc)
		wrongShard := *rec
		wrongShard.Shard = (rec.Shard + 1) % testShards
		badVector := *rec
		badVector.Result = rec.Result.Clone()
		badVector.Result.Routes[0].Weights[0].Weight = 0
		writes := [][2]string{
			{PlanKey(svc), "{\"v\":1"},
			{PlanKey(svc), string(encode(t, &wrongShard))},
			{PlanKey(svc), string(encode(t, &badVector))},
			{ShardKey(rec.Shard), "not a heartbeat"},
			{ShardPrefix + "zz", string(encode(t, Heartbeat{V: 1, Owner: "x", Epoch: 9, At: time.Now()}))},
		}
		for _, w := range writes {
			if _, err := kv.Put(ctx, w[0], []byte(w[1])); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		b.sel.Refresh(time.Now())
		if got := b.sub.BadRecords("plan"); got != 4 {
			t.Errorf("bad plan records = %d, want 4 (1 before the good one, 3 after)", got)
		}
		if got := b.sub.BadRecords("heartbeat"); got != 2 {
			t.Errorf("bad heartbeat records = %d, want 2", got)
		}
		if p := b.sel.Plan(svc); p != good {
			t.Errorf("after corrupt writes: %+v, want the good plan kept", p)
		}
		if got := counterValue(t, b.sub.bad.WithLabelValues("plan")); got != 4 {
			t.Errorf("spillway_mesh_bad_records_total{kind=plan} = %v, want 4", got)
		}

		// A replica starting now lists the corrupt records and ignores them.
		c := newNode(t, kv, services, nil)
		if _, err := c.sub.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		c.sel.Refresh(time.Now())
		if p := c.sel.Plan(svc); p.Source != weights.SourceLocal || p.Reason != ReasonNoPlan {
			t.Errorf("new replica: source %v reason %q, want local (its plan is corrupt)", p.Source, p.Reason)
		}
		if got := c.sub.BadRecords("plan") + c.sub.BadRecords("heartbeat"); got != 3 {
			t.Errorf("new replica: bad records = %d, want 3 (plan, heartbeat, bad key)", got)
		}
	})
}

func FuzzDecodePlan(f *testing.F) {
	r := validRecord()
	b, _ := json.Marshal(&r)
	f.Add(b)
	f.Add([]byte(`{"v":1,"service":"svc","owner":"r","published":"2026-03-01T12:00:00Z","result":{"Routes":[{"ClientZone":""}]}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodePlan(PlanKey("svc"), b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
			return
		}
		// What decodes is servable and survives a round trip.
		for _, rt := range rec.Result.Routes {
			if rec.Result.Route(rt.ClientZone) == nil {
				t.Fatalf("route %q not found", rt.ClientZone)
			}
		}
		again, err := DecodePlan(PlanKey("svc"), encode(t, rec))
		if err != nil {
			t.Fatalf("re-encoded record rejected: %v", err)
		}
		if vectorKey(again.Result) != vectorKey(rec.Result) {
			t.Fatalf("vectors changed in a round trip")
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add("weights/shard/03", []byte(`{"v":1,"owner":"r1","epoch":2,"cycle":9,"at":"2026-03-01T12:00:00Z"}`))
	f.Add("weights/shard/x", []byte(`{}`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		shard, hb, err := DecodeHeartbeat(key, b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
			return
		}
		if shard < 0 || hb.Owner == "" || hb.Epoch < 0 {
			t.Fatalf("accepted shard %d %+v", shard, hb)
		}
	})
}

// TestRestartSeesDeadOwner: a replica starting after the owner died
// dates the first sighting of a heartbeat by its stamp, so a plan whose
// owner stopped long ago is not served as fresh; one whose owner is alive
// is served at once.
func TestRestartSeesDeadOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		kv := systemstoretest.NewMemKV()
		services := testServices(4)
		o := newOwner(t, "r9", kv, services, newOwnership(1, "r9"))
		o.pub.Cycle(ctx, time.Now())
		fresh := newNode(t, kv, services, nil)
		if _, err := fresh.sub.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		fresh.sel.Refresh(time.Now())
		if p := fresh.sel.Plan(services[0]); p.Source != weights.SourceMesh {
			t.Errorf("owner alive: source %v reason %q, want mesh", p.Source, p.Reason)
		}
		time.Sleep(5 * interval) // the owner is dead
		late := newNode(t, kv, services, nil)
		if _, err := late.sub.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		late.sel.Refresh(time.Now())
		if p := late.sel.Plan(services[0]); p.Source != weights.SourceLocal || p.Reason != "published plan stale: owner r9 last heard 50s ago" {
			t.Errorf("owner dead 50s: source %v reason %q, want local, stale 50s", p.Source, p.Reason)
		}
	})
}

// TestPlanZonelessEndpoints: a service with an endpoint registered without
// a zone gets a vector with a "" zone, which every replica must take (it
// was refused as "Weights[0].Zone: is empty", so such a service had no
// mesh weights on any replica).
func TestPlanZonelessEndpoints(t *testing.T) {
	calc, err := zoneaware.New(zoneaware.Config{})
	if err != nil {
		t.Fatal(err)
	}
	in := &zoneaware.Input{Now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Endpoints: []zoneaware.Endpoint{
		{ID: "e1", Zone: "a", Healthy: true}, {ID: "e2", Zone: "", Healthy: true}, {ID: "e3", Zone: "b", Healthy: true},
	}}
	var st zoneaware.State
	var res zoneaware.Result
	calc.Compute(&st, in, &res)
	rec := validRecord()
	rec.Result = &res
	got, err := DecodePlan(PlanKey("svc"), encode(t, &rec))
	if err != nil {
		t.Fatalf("DecodePlan of a plan with a zoneless endpoint: %v", err)
	}
	zones := map[string]bool{}
	for _, w := range got.Result.Routes[0].Weights {
		zones[w.Zone] = true
	}
	if !zones[""] || !zones["a"] || !zones["b"] {
		t.Errorf("decoded route %q weights %+v, want zones \"\", a and b", got.Result.Routes[0].ClientZone, got.Result.Routes[0].Weights)
	}
}

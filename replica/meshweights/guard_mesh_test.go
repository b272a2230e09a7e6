package meshweights

// The PID death-spiral guard on a mesh owner: a backend's requests,
// errors and latency reach a replica that does not own its service; the
// owner's planner, over a real exchange.Merged fed through the wire
// encoding, sees them and guards the failing endpoint. Before the
// exchange carried them the owner saw reports without them and the guard
// stayed off.

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/exchange/meshv1"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

const guardService = "checkout"

// overTheWire is s as the owner's Server decodes it from a sender.
func overTheWire(t *testing.T, s load.Summary) load.Summary {
	t.Helper()
	b, err := proto.Marshal(exchange.ToProto(s))
	if err != nil {
		t.Fatal(err)
	}
	var m meshv1.Summary
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out, err := exchange.FromProto(&m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mergedUtilizations adapts Merged.Utilizations to the planner, as
// cmd/spillway's utilizationsOf does.
func mergedUtilizations(m *exchange.Merged) weights.UtilizationSource {
	return weights.UtilizationFunc(func(service string, now time.Time) []weights.EndpointUtilization {
		var out []weights.EndpointUtilization
		for _, u := range m.Utilizations(service, now) {
			out = append(out, weights.EndpointUtilization{ID: u.ID, CPU: u.CPU, InFlight: float64(u.InFlight), Limit: float64(u.Limit),
				RPS: u.RPS, EPS: u.EPS, LatencyMs: u.LatencyMs, Reported: u.Reported})
		}
		return out
	})
}

func TestOwnerGuardsFromAnotherReplicasReports(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rates     bool // the sender forwards requests, errors, latency
		wantGuard string
	}{
		{"rates", true, "errors"},
		// What the owner got before the exchange carried them, and gets
		// from a previous-release sender: utilization alone.
		{"no_rates", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := runGuardOwner(t, tc.rates)
			w, ok := rec.Endpoints["ep-3"]
			if !ok || rec.PID == nil {
				t.Fatalf("published record has no PID weights: %+v", rec)
			}
			if w.Guard != tc.wantGuard {
				t.Errorf("ep-3 (40%% errors) Guard = %q, want %q (record endpoints %+v)", w.Guard, tc.wantGuard, rec.Endpoints)
			}
			if !tc.rates {
				if rec.PID.Guarded != 0 || w.RPS != 0 || w.ErrorRate != 0 || w.LatencyMs != 0 {
					t.Errorf("without rates: pid %+v, ep-3 %+v; want no guard and no rates", rec.PID, w)
				}
				return
			}
			if rec.PID.Guarded != 1 || rec.PID.MedianErrorRate != 0.01 || rec.PID.MedianLatencyMs != 20 {
				t.Errorf("pid = %+v, want 1 guarded, median error rate 0.01, median latency 20 ms", rec.PID)
			}
			if w.RPS != 100 || w.ErrorRate != 0.4 || w.LatencyMs != 25 {
				t.Errorf("ep-3 = %+v, want rps 100, error rate 0.4, latency 25 ms", w)
			}
			if w.PIDWeight >= rec.Endpoints["ep-0"].PIDWeight {
				t.Errorf("ep-3 PID weight %d, want below healthy ep-0's %d", w.PIDWeight, rec.Endpoints["ep-0"].PIDWeight)
			}
		})
	}
}

// runGuardOwner runs the owner O of guardService for a few cycles while
// replica A (the only one the backends report to) sends summaries of
// four endpoints at the same utilization, ep-3 failing 40% of its
// requests; it returns O's last published record.
func runGuardOwner(t *testing.T, rates bool) *PlanRecord {
	ctx := t.Context()
	store := registry.NewStore()
	reg := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ops []registry.Op
	for i := range 4 {
		ops = append(ops, registry.Upsert(guardService, &registry.Endpoint{
			ID: fmt.Sprintf("ep-%d", i), Address: netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: "r1", Zone: "zone-a"}, Health: registry.Healthy,
			Source: registry.SourceStatic, Registered: reg,
		}))
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	kv := systemstoretest.NewMemKV()
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	own := newOwnership(1, "A", "O")
	merged := exchange.NewMerged(exchange.MergedConfig{Now: func() time.Time { return clock }})
	pl, err := weights.NewPlanner(weights.Config{
		Registry: store, Loads: merged, Clients: merged, Zones: anyZoneSet{},
		ZoneAware: zoneaware.Config{ReportInterval: time.Second}, Interval: time.Second, Owns: own.Owns,
		Strategies:  weights.StrategyFunc(func(string) weights.Strategy { return weights.Strategy{PID: true} }),
		Utilization: mergedUtilizations(merged),
	})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(PublisherConfig{
		ID: "O", KV: kv, Ownership: own, Merged: benchMergedLoad{merged}, Planner: pl,
		Services: func() []string { return []string{guardService} }, Shards: testShards, Interval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	summary := func(replica string, at time.Time, withEndpoints bool) load.Summary {
		s := load.Summary{Replica: replica, At: at, Interval: time.Second}
		if withEndpoints {
			ss := load.ServiceSummary{Service: guardService}
			for i := range 4 {
				u := load.EndpointUtilization{ID: fmt.Sprintf("ep-%d", i), CPU: 0.5, Utilization: 0.5,
					Reported: at.Add(-100 * time.Millisecond), Interval: time.Second}
				if rates {
					u.RPS, u.EPS, u.LatencyMs = 100, 1, 20
					if i == 3 {
						u.EPS, u.LatencyMs = 40, 25
					}
				}
				ss.Endpoints = append(ss.Endpoints, u)
			}
			s.Services = []load.ServiceSummary{ss}
		}
		for sh := range testShards {
			s.Shards = append(s.Shards, load.ShardEpoch{Shard: sh, Epoch: 1})
		}
		return s
	}
	for range 5 {
		arr := clock.Add(-100 * time.Millisecond)
		for _, s := range []load.Summary{overTheWire(t, summary("A", arr, true)), summary("O", arr, false)} {
			if err := merged.Add(s, arr); err != nil {
				t.Fatal(err)
			}
		}
		pub.Cycle(ctx, clock)
		clock = clock.Add(time.Second)
	}
	return getPlan(t, kv, guardService)
}

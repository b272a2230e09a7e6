package weights

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/weights/pid"
	"github.com/spillway/spillway/weights/zoneaware"
)

// fakeUtil holds reports by service.
type fakeUtil map[string][]EndpointUtilization

func (f fakeUtil) Utilizations(service string, _ time.Time) []EndpointUtilization { return f[service] }

// reportsAt gives web's endpoints CPU a-0 0.9, a-1 0.3, b-2 0.6, b-3 0.6
// taken at at.
func reportsAt(at time.Time) fakeUtil {
	return fakeUtil{"web": {
		{ID: "a-0", CPU: 0.9, Reported: at}, {ID: "a-1", CPU: 0.3, Reported: at},
		{ID: "b-2", CPU: 0.6, Reported: at}, {ID: "b-3", CPU: 0.6, Reported: at},
	}}
}

func pidPlanner(t testing.TB, util UtilizationSource, strat func(string) Strategy) *Planner {
	t.Helper()
	p, err := NewPlanner(Config{
		Registry: testStore(t, t0.Add(-time.Hour)), Loads: fakeLoads{}, Clients: fakeClients{}, Zones: fakeZones{},
		Utilization: util, Strategies: StrategyFunc(strat),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func webPID(zoneAware bool, blend *Blend) func(string) Strategy {
	return func(s string) Strategy {
		if s != "web" {
			return Strategy{ZoneAware: true}
		}
		return Strategy{PID: true, ZoneAware: zoneAware, Blend: blend}
	}
}

// TestPlannerPIDWeights: a PID service gets per-endpoint weights (the busy
// endpoint less, the idle one more), others none; Gen moves with the
// weights and holds when the round is skipped.
func TestPlannerPIDWeights(t *testing.T) {
	var util fakeUtil = reportsAt(t0)
	p := pidPlanner(t, UtilizationFunc(func(s string, now time.Time) []EndpointUtilization { return util.Utilizations(s, now) }), webPID(true, nil))
	p.Cycle(t0)
	web, api := p.Plan("web"), p.Plan("api")
	if api.Endpoints != nil || api.PID != nil {
		t.Fatalf("api (zone-aware only) has endpoint weights %v", api.Endpoints)
	}
	if len(web.Endpoints) != 4 || web.PID == nil || web.PID.Outcome != "computed" {
		t.Fatalf("web endpoints %v, pid %+v; want 4 computed", web.Endpoints, web.PID)
	}
	if web.LocalityFromEndpoints {
		t.Error("zone-aware+pid: LocalityFromEndpoints set")
	}
	e := web.Endpoints
	if !(e["a-1"].Weight > e["b-2"].Weight && e["b-2"].Weight > e["a-0"].Weight) {
		t.Errorf("weights a-0 %d a-1 %d b-2 %d: want a-1 (CPU 0.3) > b-2 (0.6) > a-0 (0.9)", e["a-0"].Weight, e["a-1"].Weight, e["b-2"].Weight)
	}
	if got := e["a-0"]; got.Status != "fresh" || got.Utilization != 0.9 || got.Error >= 0 || got.P >= 0 || got.Zone != "a" || got.Weight != got.PIDWeight {
		t.Errorf("a-0 explain %+v: want fresh, utilization 0.9, negative error and P, zone a, weight = PID weight", got)
	}
	gen1 := web.Gen
	util = reportsAt(t0.Add(10 * time.Second))
	p.Cycle(t0.Add(10 * time.Second))
	web2 := p.Plan("web")
	if web2.Gen == gen1 || web2.Endpoints["a-1"].Weight == e["a-1"].Weight {
		t.Errorf("second round: gen %d -> %d, a-1 %d -> %d; want both to change", gen1, web2.Gen, e["a-1"].Weight, web2.Endpoints["a-1"].Weight)
	}
	// Every report missing: the round is skipped, weights and Gen hold.
	util = nil
	p.Cycle(t0.Add(20 * time.Second))
	web3 := p.Plan("web")
	if web3.PID.Outcome != "skipped_missing" || web3.Gen != web2.Gen || web3.Endpoints["a-1"].Weight != web2.Endpoints["a-1"].Weight {
		t.Errorf("missing reports: outcome %s gen %d (was %d) a-1 %d (was %d); want skipped_missing and both held",
			web3.PID.Outcome, web3.Gen, web2.Gen, web3.Endpoints["a-1"].Weight, web2.Endpoints["a-1"].Weight)
	}
	if web3.Endpoints["a-1"].Status != "missing" {
		t.Errorf("a-1 status %q, want missing", web3.Endpoints["a-1"].Status)
	}
}

// TestPlannerPIDAlone: strategy pid without zone-aware sets
// LocalityFromEndpoints; a strategy that stops using PID drops the
// weights.
func TestPlannerPIDAlone(t *testing.T) {
	on := true
	p := pidPlanner(t, reportsAt(t0), func(s string) Strategy {
		if on {
			return Strategy{PID: true}
		}
		return Strategy{ZoneAware: true}
	})
	p.Cycle(t0)
	if pl := p.Plan("web"); !pl.LocalityFromEndpoints || len(pl.Endpoints) != 4 {
		t.Fatalf("pid alone: LocalityFromEndpoints %v, %d endpoints; want true, 4", pl.LocalityFromEndpoints, len(pl.Endpoints))
	}
	gen := p.Plan("web").Gen
	on = false
	p.Cycle(t0.Add(time.Second))
	if pl := p.Plan("web"); pl.Endpoints != nil || pl.LocalityFromEndpoints || pl.Gen == gen {
		t.Errorf("PID off: endpoints %v, LocalityFromEndpoints %v, gen %d (was %d); want none, false, a new gen", pl.Endpoints, pl.LocalityFromEndpoints, pl.Gen, gen)
	}
	if _, ok := p.states["web"]; !ok || p.states["web"].pid != nil {
		t.Error("PID off: the PID state is kept")
	}
}

// TestPlannerPIDBadConfig: an invalid PID config gives no endpoint
// weights, not an error for the other services.
func TestPlannerPIDBadConfig(t *testing.T) {
	p := pidPlanner(t, reportsAt(t0), func(string) Strategy {
		return Strategy{PID: true, ZoneAware: true, PIDConfig: pid.Config{MaxWeight: 0.5}}
	})
	p.Cycle(t0)
	if pl := p.Plan("web"); pl == nil || pl.Endpoints != nil || pl.Result == nil {
		t.Fatalf("bad pid config: plan %+v; want zone-aware only", pl)
	}
}

// TestPlannerBlend: at 30% from zone-aware to pid, every pushed weight is
// the documented formula over the PID weights, and two replicas of the
// same inputs push the same numbers.
func TestPlannerBlend(t *testing.T) {
	blend := &Blend{From: "zone-aware", To: "pid", Percent: 30}
	var plans []*Plan
	for range 2 {
		p := pidPlanner(t, reportsAt(t0), webPID(true, blend))
		p.Cycle(t0)
		plans = append(plans, p.Plan("web"))
	}
	pl := plans[0]
	ids := []string{"a-0", "a-1", "b-2", "b-3"}
	var sumPID float64
	for _, id := range ids {
		sumPID += float64(pl.Endpoints[id].PIDWeight)
	}
	n := float64(len(ids))
	for _, id := range ids {
		w := pl.Endpoints[id]
		// w_i = max(1, round(Scale·n·(0.7·(1/n) + 0.3·pid_i/Σpid)))
		want := uint32(max(1, int64(pid.Scale*n*(0.7/n+0.3*float64(w.PIDWeight)/sumPID)+0.5)))
		if w.Weight != want {
			t.Errorf("%s: pushed %d (pid %d), want %d", id, w.Weight, w.PIDWeight, want)
		}
		if plans[1].Endpoints[id].Weight != w.Weight {
			t.Errorf("%s: replica 2 pushes %d, replica 1 %d", id, plans[1].Endpoints[id].Weight, w.Weight)
		}
	}
	if pl.Endpoints["a-1"].Weight >= pl.Endpoints["a-1"].PIDWeight || pl.Endpoints["a-1"].Weight <= pid.Scale {
		t.Errorf("a-1 blended %d: want between equal %d and pid %d", pl.Endpoints["a-1"].Weight, pid.Scale, pl.Endpoints["a-1"].PIDWeight)
	}
	if pl.PID.Blend == nil || pl.PID.Blend.Percent != 30 {
		t.Errorf("explain blend %+v, want 30%%", pl.PID.Blend)
	}
}

// TestPlannerPIDStateMoves: the PID state travels in ExportState; the new
// owner holds the old owner's weights (no reset to equal) until a report
// newer than the import arrives. A bare zoneaware snapshot (the format of
// earlier releases) still imports.
func TestPlannerPIDStateMoves(t *testing.T) {
	old := pidPlanner(t, reportsAt(t0), webPID(true, nil))
	old.Cycle(t0)
	old.Cycle(t0.Add(10 * time.Second))
	b, ok := old.ExportState("web")
	if !ok || !strings.Contains(string(b), `"pid":`) || !strings.Contains(string(b), `"zoneaware":`) {
		t.Fatalf("exported %s, %v: want zoneaware and pid", b, ok)
	}
	var util fakeUtil = reportsAt(t0) // reports from before the move
	nw := pidPlanner(t, UtilizationFunc(func(s string, now time.Time) []EndpointUtilization { return util.Utilizations(s, now) }), webPID(true, nil))
	if err := nw.ImportState("web", b); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(20 * time.Second)
	nw.Cycle(at)
	got, want := nw.Plan("web"), old.Plan("web")
	if got.PID.Outcome != "waiting" {
		t.Errorf("first cycle after import: %s, want waiting", got.PID.Outcome)
	}
	for id, w := range want.Endpoints {
		if g := got.Endpoints[id].Weight; g != w.Weight {
			t.Errorf("%s: new owner %d, old owner %d; want the restored weight", id, g, w.Weight)
		}
	}
	util = reportsAt(at.Add(time.Second))
	nw.Cycle(at.Add(5 * time.Second))
	if o := nw.Plan("web").PID.Outcome; o != "computed" {
		t.Errorf("after a fresh report: %s, want computed", o)
	}

	za := &zoneaware.State{}
	legacy, err := json.Marshal(za.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := nw.ImportState("api", legacy); err != nil {
		t.Errorf("bare zoneaware snapshot: %v", err)
	}
	bad := `{"zoneaware":` + string(legacy) + `,"pid":{"endpoints":[{"id":"","weight":1}]}}`
	if err := nw.ImportState("web", []byte(bad)); err == nil || !strings.Contains(err.Error(), "pid") {
		t.Errorf("bad pid state: %v, want an error naming pid", err)
	}
}

// TestPlannerPIDGuard: the reports' request and error rates reach the
// controller. a-1 has the lowest CPU but fails half its requests: with the
// guard (the default) it is held down, never above the median weight, and
// the plan says why; with the strategy's PIDConfig turning the guard and
// the penalty off it gets the most weight, as on CPU alone.
func TestPlannerPIDGuard(t *testing.T) {
	reports := func(at time.Time) []EndpointUtilization {
		return []EndpointUtilization{
			{ID: "a-0", CPU: 0.6, RPS: 100, EPS: 1, LatencyMs: 10, Reported: at},
			{ID: "a-1", CPU: 0.1, RPS: 100, EPS: 50, LatencyMs: 3, Reported: at},
			{ID: "b-2", CPU: 0.6, RPS: 100, EPS: 1, LatencyMs: 10, Reported: at},
			{ID: "b-3", CPU: 0.6, RPS: 100, EPS: 0, LatencyMs: 11, Reported: at},
		}
	}
	off := false
	for _, tt := range []struct {
		name    string
		cfg     pid.Config
		guarded bool
	}{{"guard", pid.Config{}, true}, {"off", pid.Config{ErrorGuard: &off, ErrorPenalty: new(0.0)}, false}} {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			p := pidPlanner(t, UtilizationFunc(func(s string, _ time.Time) []EndpointUtilization {
				if s != "web" {
					return nil
				}
				return reports(now)
			}), func(s string) Strategy {
				if s != "web" {
					return Strategy{ZoneAware: true}
				}
				return Strategy{PID: true, ZoneAware: true, PIDConfig: tt.cfg}
			})
			for k := range 5 {
				now = t0.Add(time.Duration(k) * 10 * time.Second)
				p.Cycle(now)
			}
			web := p.Plan("web")
			e := web.Endpoints
			t.Logf("weights a-0 %d a-1 %d b-2 %d b-3 %d; pid %+v", e["a-0"].Weight, e["a-1"].Weight, e["b-2"].Weight, e["b-3"].Weight, web.PID)
			if got := e["a-1"]; (got.Guard == "errors") != tt.guarded || got.RPS != 100 || got.ErrorRate != 0.5 {
				t.Errorf("a-1 explain %+v: want rps 100, error rate 0.5, guard errors: %v", got, tt.guarded)
			}
			if tt.guarded {
				if web.PID.Guarded != 1 || web.PID.MedianErrorRate != 0.01 {
					t.Errorf("pid explain %+v, want 1 guarded, median error rate 0.01", web.PID)
				}
				if e["a-1"].Weight >= e["a-0"].Weight {
					t.Errorf("a-1 weight %d, want below a healthy endpoint's %d", e["a-1"].Weight, e["a-0"].Weight)
				}
			} else if e["a-1"].Weight <= e["a-0"].Weight {
				t.Errorf("guard off: a-1 (CPU 0.1) weight %d, want above a-0's %d (CPU 0.6)", e["a-1"].Weight, e["a-0"].Weight)
			}
		})
	}
}

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/weights/zoneaware"
)

func loadScenario(t testing.TB, name string) *Scenario {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("scenarios", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ParseScenario(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return sc
}

func mustSimulate(t testing.TB, sc *Scenario) *Report {
	t.Helper()
	rep, err := Simulate(sc)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, rep)
	return rep
}

func mustRun(t testing.TB, rep *Report, strategy string) *Run {
	t.Helper()
	r := rep.Run(strategy)
	if r == nil {
		t.Fatalf("scenario %s has no %s run", rep.Scenario.Name, strategy)
	}
	return r
}

// offeredShare is the share of all traffic that lands on zone z.
func offeredShare(st *Step, z int) float64 {
	var sum float64
	for _, zs := range st.Zones {
		sum += zs.Offered
	}
	if sum == 0 {
		return 0
	}
	return st.Zones[z].Offered / sum
}

// logRun prints a run in the test log, for -v and failures.
func logRun(t *testing.T, rep *Report, strategy string) {
	t.Helper()
	var b strings.Builder
	for _, st := range mustRun(t, rep, strategy).Steps {
		fmt.Fprintf(&b, "\n%s step %2d: same-zone %5.1f%% optimum %5.1f%% errors %5.1f%% util", strategy, st.Index, 100*st.SameZone, 100*st.Optimum, 100*st.ErrorRate())
		for _, zs := range st.Zones {
			fmt.Fprintf(&b, " %.3f", zs.Utilization())
		}
		fmt.Fprintf(&b, " %s %s", st.Fallback, strings.Join(st.Events, "; "))
	}
	t.Log(b.String())
}

// scenarioChecks asserts each scenario's outcome: the acceptance
// criteria of the zone-aware issue, and what docs/simulator.md reports.
// Every file in scenarios/ must have an entry.
var scenarioChecks = map[string]func(t *testing.T, sc *Scenario){
	"worked-example":         checkWorkedExample,
	"heterogeneous-clients":  checkHeterogeneous,
	"degraded-zone":          checkDegradedZone,
	"cold-pod":               checkColdPod,
	"client-surge":           checkClientSurge,
	"zone-outage":            checkZoneOutage,
	"new-service":            checkNewService,
	"new-service-small-zone": checkNewService,
	"subsetting":             checkSubsetting,
	"subsetting-zones":       checkSubsettingZones,
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("scenarios/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			check, ok := scenarioChecks[name]
			if !ok {
				t.Fatalf("no assertions for scenarios/%s.yaml: add them to scenarioChecks", name)
			}
			check(t, loadScenario(t, name))
		})
	}
}

// Acceptance 1: the worked example. With the default 1% probe every
// figure is within 1.5 points of the design's (zone a 62.5% local, 85%
// same-zone) and no zone is overloaded; with probe 0 they are exact (to
// the 1/10000 that integer weights of at least 1 leak to zones with a
// share of 0).
func checkWorkedExample(t *testing.T, sc *Scenario) {
	const a = 0
	for _, tc := range []struct {
		name  string
		probe *float64
		tol   float64
	}{
		{"probe-default", nil, 0.015},
		{"probe-0", new(0.0), 0.0005},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := *sc
			sc.Spillway.ProbeShare = tc.probe
			rep := mustSimulate(t, &sc)
			logRun(t, rep, StrategySpillway)
			for _, run := range rep.Runs {
				for _, st := range run.Steps {
					if over := st.Overloaded(); len(over) > 0 {
						t.Errorf("%s step %d: zones %v overloaded", run.Strategy, st.Index, over)
					}
				}
			}
			for _, strategy := range []string{StrategySpillway, StrategyHostCount} {
				for _, st := range mustRun(t, rep, strategy).Steps {
					if local := st.Shares[a][a]; math.Abs(local-0.625) > tc.tol {
						t.Errorf("%s step %d: zone a keeps %.4f local, want 0.625 ± %g", strategy, st.Index, local, tc.tol)
					}
					if math.Abs(st.SameZone-0.85) > tc.tol {
						t.Errorf("%s step %d: same-zone %.4f, want 0.85 ± %g", strategy, st.Index, st.SameZone, tc.tol)
					}
					if math.Abs(st.Optimum-0.85) > 1e-9 {
						t.Errorf("%s step %d: optimum %.4f, want 0.85", strategy, st.Index, st.Optimum)
					}
				}
			}
			// Capacity-proportional weights keep Σ D·C = 35% in-zone.
			for _, st := range mustRun(t, rep, StrategyStatic).Steps {
				if math.Abs(st.SameZone-0.35) > 1e-9 {
					t.Errorf("static step %d: same-zone %.4f, want 0.35", st.Index, st.SameZone)
				}
			}
		})
	}
}

// Acceptance 2: zone a has 20% of the instances and 70% of the traffic.
// Host counts overload zone a at every step. spillway overloads no zone
// once it has load reports (step 0 runs on client counts, like a freshly
// started server) and, once converged, keeps within 1 point of the
// optimum Σ min(D, C) = 1/3 + 0.15 + 0.15.
func checkHeterogeneous(t *testing.T, sc *Scenario) {
	rep := mustSimulate(t, sc)
	logRun(t, rep, StrategySpillway)
	const opt = 1.0/3 + 0.3
	for _, st := range mustRun(t, rep, StrategyHostCount).Steps {
		if over := st.Overloaded(); !slices.Equal(over, []int{0}) {
			t.Errorf("hostcount step %d: overloaded zones %v, want [a]", st.Index, over)
		}
	}
	steps := mustRun(t, rep, StrategySpillway).Steps
	for _, st := range steps[1:] {
		if math.Abs(st.Optimum-opt) > 1e-9 {
			t.Fatalf("step %d: optimum %.4f, want %.4f", st.Index, st.Optimum, opt)
		}
		for z, zs := range st.Zones {
			if u := zs.Utilization(); u > 1 {
				t.Errorf("spillway step %d: zone %s at %.3f of its capacity", st.Index, sc.Zones[z], u)
			}
		}
	}
	converged := 6 // the error factor's cut after step 0 undone by RecoveryRamp
	for _, st := range steps[converged:] {
		if st.SameZone < opt-0.01 || st.SameZone > opt+1e-9 {
			t.Errorf("spillway step %d: same-zone %.4f, want within 1 point of the optimum %.4f", st.Index, st.SameZone, opt)
		}
	}
}

// Acceptance 3: zone a runs at 10% capacity from step 10 to step 30.
// spillway's errors over the run are far below host-count and static
// weights', and when a recovers its share comes back gradually: never
// above its healthy share by more than MoveThreshold + 1 point, never
// falling back, no errors.
func checkDegradedZone(t *testing.T, sc *Scenario) {
	rep := mustSimulate(t, sc)
	logRun(t, rep, StrategySpillway)
	const a, degraded, recovered = 0, 10, 30
	spill := mustRun(t, rep, StrategySpillway)
	sum := spill.Summary(sc)
	for _, other := range []string{StrategyHostCount, StrategyStatic} {
		o := mustRun(t, rep, other).Summary(sc)
		cut := 1 - sum.Errors/o.Errors
		t.Logf("errors: spillway %.0f, %s %.0f: %.1f%% lower", sum.Errors, other, o.Errors, 100*cut)
		// A regression guard at what weights/zoneaware achieves today; the
		// acceptance figure is checked below.
		if cut < 0.85 {
			t.Errorf("spillway's errors %.0f are %.1f%% below %s's %.0f, want at least 85%%", sum.Errors, 100*cut, other, o.Errors)
		}
	}
	// Issue 10, point 2: after the first report of the throttle zone a's
	// load climbs back (health rising over the recovery ramp) without
	// overload to DegradedTarget of its measured capacity; once settled
	// (three cycles later) it runs at or under its capacity and under
	// 0.1% of the requests fail, without oscillating, for as long as it
	// stays degraded.
	const settled = degraded + 4
	for _, st := range spill.Steps[degraded+2 : settled] {
		if u, p := st.Zones[a].Utilization(), spill.Steps[st.Index-1].Zones[a].Utilization(); u < p || u > 1 || st.Errors > 0 {
			t.Errorf("step %d (degraded, settling): zone a's utilization %.3f -> %.3f, errors %.1f rps: want a climb to at most 1, no errors", st.Index, p, u, st.Errors)
		}
	}
	for _, st := range spill.Steps[settled:recovered] {
		if u := st.Zones[a].Utilization(); u > 1 {
			t.Errorf("step %d (degraded, settled): zone a at %.3f of its capacity, want at most 1", st.Index, u)
		}
		if st.ErrorRate() >= 0.001 {
			t.Errorf("step %d (degraded, settled): %.2f%% of requests fail, want under 0.1%%", st.Index, 100*st.ErrorRate())
		}
		if p := &spill.Steps[st.Index-1]; st.Index > settled && math.Abs(st.Zones[a].Utilization()-p.Zones[a].Utilization()) > 0.05 {
			t.Errorf("step %d (degraded, settled): zone a's utilization moved %.3f -> %.3f: oscillation", st.Index, p.Zones[a].Utilization(), st.Zones[a].Utilization())
		}
	}
	healthy := offeredShare(&spill.Steps[degraded-1], a)
	prev := 0.0
	for _, st := range spill.Steps[recovered:] {
		share := offeredShare(&st, a)
		if st.Errors > 0 {
			t.Errorf("step %d (recovered): errors %.1f rps", st.Index, st.Errors)
		}
		if share > healthy+zoneaware.DefaultMoveThreshold+0.01 {
			t.Errorf("step %d (recovered): zone a has %.4f of the traffic, healthy %.4f: overshoot", st.Index, share, healthy)
		}
		if share < prev-0.005 {
			t.Errorf("step %d (recovered): zone a's share fell %.4f -> %.4f: oscillation", st.Index, prev, share)
		}
		prev = share
	}
	if last := offeredShare(&spill.Steps[len(spill.Steps)-1], a); math.Abs(last-healthy) > 0.01 {
		t.Errorf("after recovery zone a has %.4f of the traffic, want back to %.4f", last, healthy)
	}

	t.Run("acceptance-errors-90pct-lower", func(t *testing.T) {
		o := mustRun(t, rep, StrategyHostCount).Summary(sc)
		if cut := 1 - sum.Errors/o.Errors; cut < 0.90 {
			t.Errorf("acceptance 3: errors %.1f%% lower than hostcount, want >= 90%%", 100*cut)
		}
	})
}

// Acceptance 4: a new, cold pod in a zone that had one pod. Host counts
// overload the zone as the pod joins; spillway never overloads a zone.
func checkColdPod(t *testing.T, sc *Scenario) {
	rep := mustSimulate(t, sc)
	logRun(t, rep, StrategySpillway)
	const join = 5
	for _, st := range mustRun(t, rep, StrategySpillway).Steps {
		if over := st.Overloaded(); len(over) > 0 || st.Errors > 0 {
			t.Errorf("spillway step %d: overloaded zones %v, errors %.1f rps", st.Index, over, st.Errors)
		}
	}
	if over := mustRun(t, rep, StrategyHostCount).Steps[join].Overloaded(); !slices.Equal(over, []int{0}) {
		t.Errorf("hostcount at the join: overloaded zones %v, want [a]", over)
	}
}

// client-surge: zone a's clients send 2.5× from step 10 to 25. Host
// counts do not see it and overload a for the whole surge; spillway is
// overloaded only in the step the surge starts (before a report shows it)
// and cuts errors by more than 90%.
func checkClientSurge(t *testing.T, sc *Scenario) {
	rep := mustSimulate(t, sc)
	logRun(t, rep, StrategySpillway)
	for _, st := range mustRun(t, rep, StrategySpillway).Steps {
		if over := st.Overloaded(); (len(over) > 0) != (st.Index == 10) {
			t.Errorf("spillway step %d: overloaded zones %v, want a only at step 10", st.Index, over)
		}
	}
	for _, st := range mustRun(t, rep, StrategyHostCount).Steps {
		if over := len(st.Overloaded()) > 0; over != (st.Index >= 10 && st.Index < 25) {
			t.Errorf("hostcount step %d: overloaded %v, want during the surge only", st.Index, over)
		}
	}
	s, h := mustRun(t, rep, StrategySpillway).Summary(sc), mustRun(t, rep, StrategyHostCount).Summary(sc)
	if cut := 1 - s.Errors/h.Errors; cut < 0.90 {
		t.Errorf("spillway's errors %.0f, hostcount's %.0f: %.1f%% lower, want at least 90%%", s.Errors, h.Errors, 100*cut)
	}
}

// zone-outage: zone c loses its pods at step 10 and gets 4 cold ones at
// step 20. spillway fails no request; host counts overload c when the
// cold pods arrive.
func checkZoneOutage(t *testing.T, sc *Scenario) {
	rep := mustSimulate(t, sc)
	logRun(t, rep, StrategySpillway)
	const c = 2
	for _, st := range mustRun(t, rep, StrategySpillway).Steps {
		if st.Errors > 0 {
			t.Errorf("spillway step %d: errors %.1f rps", st.Index, st.Errors)
		}
	}
	host := mustRun(t, rep, StrategyHostCount).Steps
	if over := host[20].Overloaded(); !slices.Equal(over, []int{c}) {
		t.Errorf("hostcount as the cold pods arrive: overloaded zones %v, want [c]", over)
	}
	if fb := host[15].Fallback; fb != "off_no_local_hosts" {
		t.Errorf("hostcount while c has no pods: fallback %q, want off_no_local_hosts", fb)
	}
}

// Issue 10, point 1: a new service whose pods all register at step 0,
// the heaviest client zone holding few of them. From the first cycle with
// load reports (step 1) no zone carries more than its capacity share + 5
// points, and from the third on same-zone is within 2 points of the
// optimum: slow start neither skews the plan towards the zone whose
// clients send the most nor holds it away from the optimum.
func checkNewService(t *testing.T, sc *Scenario) {
	rep := mustSimulate(t, sc)
	logRun(t, rep, StrategySpillway)
	for _, st := range mustRun(t, rep, StrategySpillway).Steps[1:] {
		var sumC float64
		for _, zs := range st.Zones {
			sumC += zs.Capacity
		}
		for z, zs := range st.Zones {
			if load, c := offeredShare(&st, z), zs.Capacity/sumC; load > c+0.05 {
				t.Errorf("step %d: zone %s carries %.1f%% of the load on %.1f%% of the capacity, want at most 5 points above", st.Index, sc.Zones[z], 100*load, 100*c)
			}
		}
		if st.Errors > 0 {
			t.Errorf("step %d: errors %.1f rps", st.Index, st.Errors)
		}
		if st.Index >= 3 && math.Abs(st.SameZone-st.Optimum) > 0.02 {
			t.Errorf("step %d: same-zone %.4f, optimum %.4f: more than 2 points apart", st.Index, st.SameZone, st.Optimum)
		}
	}
}

// TestHostCountMatchesZoneaware: the hostcount strategy (Envoy's
// heuristic, written independently) gives the same vectors as zoneaware
// fed only client counts, with slow start, probing and hysteresis off.
func TestHostCountMatchesZoneaware(t *testing.T) {
	calc, err := zoneaware.New(zoneaware.Config{SlowStartFraction: 1, ProbeShare: new(0.0), MoveThreshold: new(0.0)})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("scenarios/*.yaml")
	for _, f := range files {
		sc := loadScenario(t, strings.TrimSuffix(filepath.Base(f), ".yaml"))
		if len(sc.Zones) < 2 {
			continue // Envoy's heuristic is off with one zone (off_one_zone)
		}
		fl := newFleet(sc)
		st := &Step{Shares: make([][]float64, len(sc.Zones))}
		for z := range st.Shares {
			st.Shares[z] = make([]float64, len(sc.Zones))
		}
		if fb := (hostCount{}).route(epoch, fl, nil, st); fb != "none" {
			t.Fatalf("%s: hostcount is %s", sc.Name, fb)
		}
		sp := &spillway{calc: calc}
		zst := &Step{Shares: make([][]float64, len(sc.Zones))}
		for z := range zst.Shares {
			zst.Shares[z] = make([]float64, len(sc.Zones))
		}
		sp.route(epoch, fl, nil, zst)
		for z := range sc.Zones {
			got := make([]float64, len(sc.Zones))
			for _, w := range sp.res.Route(sc.Zones[z]).Weights {
				got[indexOf(sc.Zones, w.Zone)] = w.Share
			}
			if diff := cmp.Diff(st.Shares[z], got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); diff != "" {
				t.Errorf("%s: client zone %s: hostcount vs zoneaware (-hostcount +zoneaware):\n%s", sc.Name, sc.Zones[z], diff)
			}
		}
	}
}

func TestHostCountOff(t *testing.T) {
	sc, err := ParseScenario([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	st := &Step{Shares: [][]float64{make([]float64, 2), make([]float64, 2)}}
	if fb := (hostCount{}).route(epoch, newFleet(sc), nil, st); fb != "off_cluster_too_small" {
		t.Errorf("2 hosts: fallback %q, want off_cluster_too_small", fb)
	}
	if want := [][]float64{{1, 0}, {1, 0}}; !cmp.Equal(st.Shares, want) {
		t.Errorf("shares %v, want %v", st.Shares, want)
	}
}

// TestDeterministic: the same scenario and seed give the same report;
// every strategy of a run sees the same traffic, noise included; another
// seed gives other traffic.
func TestDeterministic(t *testing.T) {
	sc := loadScenario(t, "degraded-zone")
	sc.Model.Noise = 0.1
	sc.Seed = 42
	a, b := mustSimulate(t, sc), mustSimulate(t, sc)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two runs differ (-first +second):\n%s", diff)
	}
	for k := range sc.Steps {
		for _, run := range a.Runs[1:] {
			if got, want := run.Steps[k].Issued, a.Runs[0].Steps[k].Issued; got != want {
				t.Fatalf("step %d: %s issued %v, %s %v: strategies saw other traffic", k, run.Strategy, got, a.Runs[0].Strategy, want)
			}
		}
	}
	if a.Runs[0].Steps[3].Issued == a.Runs[0].Steps[4].Issued {
		t.Errorf("noise 0.1 left the rate unchanged")
	}
	sc.Seed = 43
	if c := mustSimulate(t, sc); c.Runs[0].Steps[3].Issued == a.Runs[0].Steps[3].Issued {
		t.Errorf("seeds 42 and 43 gave the same traffic")
	}
}

// TestRoundRobinLeaf: with grpc-go's round_robin inside a zone, a cold
// pod gets half of its zone's traffic whatever the zone's weight, so the
// pod in cold-pod.yaml fails requests at the join even under spillway.
func TestRoundRobinLeaf(t *testing.T) {
	sc := loadScenario(t, "cold-pod")
	sc.Model.Leaf = LeafRoundRobin
	rep := mustSimulate(t, sc)
	st := mustRun(t, rep, StrategySpillway).Steps[5]
	if st.Zones[0].Errors == 0 {
		t.Errorf("round_robin, step 5: zone a errors 0, want the cold pod overloaded")
	}
	s, h := mustRun(t, rep, StrategySpillway).Summary(sc), mustRun(t, rep, StrategyHostCount).Summary(sc)
	t.Logf("round_robin leaf: spillway errors %.0f, hostcount %.0f", s.Errors, h.Errors)
	if s.Errors >= h.Errors {
		t.Errorf("round_robin leaf: spillway errors %.0f, want fewer than hostcount's %.0f", s.Errors, h.Errors)
	}
}

// TestWarm: a new pod's capacity ramps linearly from ColdCapacity to 1
// over Warmup; pods of the initial fleet are warm.
func TestWarm(t *testing.T) {
	sc := loadScenario(t, "cold-pod")
	f := newFleet(sc)
	joined := epoch.Add(time.Minute)
	f.add(0, 100, joined, false)
	p := &f.pods[len(f.pods)-1]
	for _, tc := range []struct {
		after time.Duration
		want  float64
	}{{0, 0.1}, {time.Minute, 0.55}, {2 * time.Minute, 1}, {time.Hour, 1}} {
		if got := f.warm(p, joined.Add(tc.after)); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("warm after %v = %v, want %v", tc.after, got, tc.want)
		}
	}
	if got := f.warm(&f.pods[0], epoch); got != 1 {
		t.Errorf("initial pod: warm = %v, want 1", got)
	}
}

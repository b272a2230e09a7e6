package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// minimal is the smallest valid scenario; the error cases edit it.
const minimal = `zones: [a, b]
steps: 5
clients:
  - {zone: a, instances: 2, rps: 10}
servers:
  - {zone: a, count: 2, capacity: 100}
`

func TestParseScenarioDefaults(t *testing.T) {
	sc, err := ParseScenario([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := &Scenario{
		Zones:      []string{"a", "b"},
		Step:       10 * time.Second,
		Steps:      5,
		Strategies: []string{StrategySpillway},
		Clients:    []ClientGroup{{Name: "a", Zone: 0, Instances: 2, RPS: 10}},
		Servers:    []ServerGroup{{Zone: 0, Count: 2, Capacity: 100}},
		Model:      Model{Warmup: 2 * time.Minute, ColdCapacity: 0.1, Latency: 50 * time.Millisecond, QueueGrowth: 4, Leaf: LeafLeastLoaded},
	}
	want.Spillway.ReportInterval = 10 * time.Second
	if diff := cmp.Diff(want, sc); diff != "" {
		t.Errorf("ParseScenario(minimal) (-want +got):\n%s", diff)
	}
}

func TestParseScenarioFull(t *testing.T) {
	in := `name: full
description: every field
zones: [a, b, c]
step: 5s
steps: 30
seed: 7
compare: [hostcount, spillway]
clients:
  - {name: batch, zone: a, instances: 2, rps: 100}
  - {zone: a, instances: 10, rps: 1.5}
servers:
  - {zone: b, count: 3, capacity: 50}
model:
  warmup: 30s
  cold_capacity: 0.2
  latency: 10ms
  queue_growth: 2
  noise: 0.05
  leaf: round_robin
spillway:
  probe_share: 0
  slow_start_ramp: 1m
  stale_after: 2
  move_threshold: 0.01
events:
  - {step: 20, action: recover, zone: b}
  - {step: 3, action: scale_up, zone: c, count: 2, capacity: 80}
  - {step: 3, action: throttle, zone: b, factor: 0.5}
  - {step: 4, action: surge, clients: batch, factor: 3}
  - {step: 25, action: remove, zone: c, count: 2}
`
	sc, err := ParseScenario([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sc.Strategies, []string{StrategyHostCount, StrategySpillway}; !cmp.Equal(got, want) {
		t.Errorf("Strategies = %v, want %v", got, want)
	}
	if got := sc.Clients[1].Name; got != "a" {
		t.Errorf("unnamed group's name = %q, want the zone, a", got)
	}
	if *sc.Spillway.ProbeShare != 0 || sc.Spillway.SlowStartRamp != time.Minute || sc.Spillway.StaleAfter != 2 ||
		*sc.Spillway.MoveThreshold != 0.01 || sc.Spillway.ReportInterval != 5*time.Second {
		t.Errorf("Spillway = %+v", sc.Spillway)
	}
	var order []string
	for _, e := range sc.Events {
		order = append(order, e.Action)
	}
	// Sorted by step, file order within a step.
	if want := []string{"scale_up", "throttle", "surge", "recover", "remove"}; !cmp.Equal(order, want) {
		t.Errorf("events in order %v, want %v", order, want)
	}
	if e := sc.Events[0]; e.Zone != 2 || e.Count != 2 || e.Capacity != 80 || e.Index != 1 || e.Line != 27 {
		t.Errorf("scale_up event = %+v", e)
	}
	if e := sc.Events[2]; e.Group != 0 || e.Factor != 3 {
		t.Errorf("surge event = %+v", e)
	}
}

// errorCases are scenarios that must be refused; want is the start of the
// error: the line and the field.
var errorCases = []struct {
	name, in, want string
}{
	{"empty", "", "file: empty scenario"},
	{"malformed", "zones: [a\n", "malformed YAML"},
	{"two-documents", minimal + "---\nzones: [c]\n", "line 7: file: more than one YAML document"},
	{"not-a-mapping", "- a\n", "line 1: file: want a mapping"},
	{"unknown-field", minimal + "bogus: 1\n", "line 7: bogus: unknown field"},
	{"field-twice", minimal + "steps: 6\n", "line 7: steps: field is listed twice"},
	{"zones-required", "steps: 1\n", "line 1: zones: is required"},
	{"zones-empty", strings.Replace(minimal, "[a, b]", "[]", 1), "line 1: zones: 0 zones"},
	{"zone-twice", strings.Replace(minimal, "[a, b]", "[a, a]", 1), `line 1: zones[1]: zone "a" is already zones[0]`},
	{"zone-name", strings.Replace(minimal, "[a, b]", `[a, "b c"]`, 1), `line 1: zones[1]: "b c": want only letters`},
	{"steps-required", strings.Replace(minimal, "steps: 5\n", "", 1), "line 1: steps: is required"},
	{"steps-zero", strings.Replace(minimal, "steps: 5", "steps: 0", 1), `line 2: steps: "0", want a whole number 1..100000`},
	{"steps-float", strings.Replace(minimal, "steps: 5", "steps: 2.5", 1), `line 2: steps: "2.5", want a whole number`},
	{"step-no-unit", minimal + "step: 10\n", `line 7: step: "10", want a duration like 10s`},
	{"step-too-long", minimal + "step: 2h\n", `line 7: step: "2h", want a duration`},
	{"seed-negative", minimal + "seed: -1\n", `line 7: seed: "-1", want a whole number`},
	{"strategy-unknown", minimal + "strategy: envoy\n", `line 7: strategy: unknown strategy "envoy"`},
	{"strategy-and-compare", minimal + "strategy: spillway\ncompare: [static]\n", "line 8: compare: set strategy or compare, not both"},
	{"compare-twice", minimal + "compare: [static, static]\n", `line 7: compare[1]: "static" is listed twice`},
	{"compare-empty", minimal + "compare: []\n", "line 7: compare: empty list"},
	{"clients-not-list", strings.Replace(minimal, "clients:\n  - {zone: a, instances: 2, rps: 10}", "clients: {zone: a}", 1), "line 3: clients: want a list, got a mapping"},
	{"client-zone-unknown", strings.Replace(minimal, "{zone: a, instances", "{zone: x, instances", 1), `line 4: clients[0].zone: zone "x" is not in zones [a b]`},
	{"client-rps-negative", strings.Replace(minimal, "rps: 10", "rps: -1", 1), `line 4: clients[0].rps: "-1", want a number in 0..1e+09`},
	{"client-rps-nan", strings.Replace(minimal, "rps: 10", "rps: .nan", 1), `line 4: clients[0].rps: ".nan", want a number`},
	{"client-rps-string", strings.Replace(minimal, "rps: 10", "rps: fast", 1), `line 4: clients[0].rps: "fast", want a number`},
	{"client-instances-missing", strings.Replace(minimal, "instances: 2, ", "", 1), "line 4: clients[0].instances: is required"},
	{"client-unknown-field", strings.Replace(minimal, "rps: 10}", "rps: 10, qps: 3}", 1), "line 4: clients[0].qps: unknown field"},
	{"client-names-clash", strings.Replace(minimal, "  - {zone: a, instances: 2, rps: 10}", "  - {zone: a, instances: 2, rps: 10}\n  - {zone: a, instances: 1, rps: 1}", 1),
		`line 5: clients[1].name: group "a" is already clients[0]`},
	{"server-capacity-zero", strings.Replace(minimal, "capacity: 100", "capacity: 0", 1), `line 6: servers[0].capacity: 0, want a number above 0`},
	{"server-count-huge", strings.Replace(minimal, "count: 2", "count: 200000", 1), `line 6: servers[0].count: "200000", want a whole number 0..100000`},
	{"servers-required", strings.Replace(minimal, "servers:\n  - {zone: a, count: 2, capacity: 100}\n", "", 1), "line 1: servers: is required"},
	{"model-leaf", minimal + "model: {leaf: random}\n", `line 7: model.leaf: unknown leaf balancer "random"`},
	{"model-cold", minimal + "model:\n  cold_capacity: 1.5\n", `line 8: model.cold_capacity: "1.5", want a number in 0..1`},
	{"model-unknown", minimal + "model:\n  warm: 1s\n", "line 8: model.warm: unknown field"},
	{"spillway-probe", minimal + "spillway:\n  probe_share: 0.5\n", `line 8: spillway.probe_share: "0.5", want 0..0.2`},
	{"spillway-floor", minimal + "spillway:\n  capacity_floor: 0\n", "line 8: spillway.capacity_floor: 0 is not allowed"},
	{"spillway-fraction", minimal + "spillway:\n  slow_start_fraction: 2\n", `line 8: spillway.slow_start_fraction: "2", want (0, 1]`},
	{"spillway-ramp", minimal + "spillway:\n  recovery_ramp: 0s\n", `line 8: spillway.recovery_ramp: "0s", want a duration`},
	{"spillway-unknown", minimal + "spillway:\n  scale: 10\n", "line 8: spillway.scale: unknown field"},
	{"event-action-unknown", minimal + "events:\n  - {step: 1, action: explode, zone: a}\n", `line 8: events[0].action: unknown action "explode"`},
	{"event-action-missing", minimal + "events:\n  - {step: 1, zone: a}\n", "line 8: events[0].action: is required"},
	{"event-step-range", minimal + "events:\n  - {step: 5, action: recover, zone: a}\n", `line 8: events[0].step: "5", want a whole number 0..4`},
	{"event-field-of-other-action", minimal + "events:\n  - {step: 1, action: throttle, zone: a, factor: 0.5, count: 2}\n", "line 8: events[0].count: not a field of action throttle"},
	{"event-factor-missing", minimal + "events:\n  - {step: 1, action: throttle, zone: a}\n", "line 8: events[0].factor: is required"},
	{"event-throttle-range", minimal + "events:\n  - {step: 1, action: throttle, zone: a, factor: 11}\n", `line 8: events[0].factor: "11", want a number in 0..10`},
	{"event-surge-group", minimal + "events:\n  - {step: 1, action: surge, clients: b, factor: 2}\n", `line 8: events[0].clients: no client group named "b"`},
	{"event-remove-too-many", minimal + "events:\n  - {step: 1, action: remove, zone: a, count: 1}\n  - {step: 2, action: remove, zone: a, count: 2}\n",
		"line 9: events[1].count: removes 2 pods but zone a has 1 at step 2"},
	{"event-scale-up-capacity", minimal + "events:\n  - {step: 1, action: scale_up, zone: b, count: 1}\n", "line 8: events[0].capacity: is required: zone b has no server group"},
	{"alias", "zones: &z [a]\nsteps: *z\n", "line 2: steps: YAML aliases (*z) are not supported"},
	{"subset-not-mapping", minimal + "subset: 10\n", "line 7: subset: want a mapping with fields size, modes, route, churn"},
	{"subset-size-missing", minimal + "subset: {modes: [random]}\n", "line 7: subset.size: is required"},
	{"subset-size-zero", minimal + "subset: {size: 0}\n", `line 7: subset.size: "0", want a whole number 1..1000`},
	{"subset-size-too-big", minimal + "subset: {size: 1001}\n", `line 7: subset.size: "1001", want a whole number 1..1000`},
	{"subset-size-float", minimal + "subset:\n  size: 2.5\n", `line 8: subset.size: "2.5", want a whole number`},
	{"subset-unknown-field", minimal + "subset: {size: 2, seed: 3}\n", "line 7: subset.seed: unknown field"},
	{"subset-modes-empty", minimal + "subset: {size: 2, modes: []}\n", "line 7: subset.modes: empty list"},
	{"subset-modes-not-list", minimal + "subset: {size: 2, modes: random}\n", "line 7: subset.modes: want a list"},
	{"subset-mode-unknown", minimal + "subset:\n  size: 2\n  modes: [random, ring]\n", `line 9: subset.modes[1]: unknown mode "ring", want deterministic or random`},
	{"subset-mode-off", minimal + "subset: {size: 2, modes: [off]}\n", `line 7: subset.modes[0]: unknown mode "off"`},
	{"subset-mode-twice", minimal + "subset: {size: 2, modes: [random, random]}\n", `line 7: subset.modes[1]: "random" is listed twice`},
	{"subset-route-unknown", minimal + "subset: {size: 2, route: envoy}\n", `line 7: subset.route: unknown strategy "envoy"`},
	{"subset-route-not-run", minimal + "subset: {size: 2, route: static}\n", `line 7: subset.route: strategy "static" does not run, want one of spillway`},
	{"subset-churn-not-bool", minimal + "subset: {size: 2, churn: 1}\n", `line 7: subset.churn: "1", want true or false`},
	{"subset-too-many-clients", strings.Replace(minimal, "instances: 2,", "instances: 2000000,", 1) + "subset: {size: 2}\n",
		"line 7: subset: 2000000 client instances, want at most 1048576"},
	{"subset-too-much-work", strings.Replace(strings.Replace(minimal, "instances: 2,", "instances: 100000,", 1), "count: 2,", "count: 10000,", 1) + "subset:\n  size: 10\n",
		"line 8: subset: 100000 clients × 10000 endpoints × size 10 is 1e+10, want at most 2e+08"},
	{"subset-after-events", strings.Replace(minimal, "instances: 2,", "instances: 2000,", 1) + "events:\n  - {step: 1, action: scale_up, zone: a, count: 20000}\nsubset: {size: 10}\n",
		"line 9: subset: 2000 clients × 20002 endpoints × size 10 is 4e+08"},
}

func TestParseScenarioErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := ParseScenario([]byte(tc.in))
			if err == nil {
				t.Fatalf("ParseScenario = %+v, want an error %q", sc, tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to start with %q", err, tc.want)
			}
			var se *ScenarioError
			if !errors.As(err, &se) {
				t.Fatalf("error %T, want *ScenarioError", err)
			}
		})
	}
}

func TestEveryScenarioParses(t *testing.T) {
	files, err := filepath.Glob("scenarios/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("scenarios/*.yaml: %d files (%v), want at least 5", len(files), err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ParseScenario(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".yaml"); sc.Name != want {
			t.Errorf("%s: name %q, want %q", f, sc.Name, want)
		}
		if sc.Description == "" {
			t.Errorf("%s: no description", f)
		}
	}
}

// FuzzParseScenario: no input panics the parser (or the simulator, run
// on what parses); every refusal is a *ScenarioError that names the field
// and its line, unless the YAML itself is malformed.
func FuzzParseScenario(f *testing.F) {
	files, _ := filepath.Glob("scenarios/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(minimal))
	for _, tc := range errorCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario(data)
		if err != nil {
			var se *ScenarioError
			if !errors.As(err, &se) {
				t.Fatalf("error %T %q, want *ScenarioError", err, err)
			}
			switch {
			case se.Field == "":
				if !strings.HasPrefix(se.Msg, "malformed YAML") {
					t.Fatalf("error %q names no field", err)
				}
			case se.Line <= 0 && se.Msg != "empty scenario":
				t.Fatalf("error %q has no line", err)
			}
			return
		}
		// Run what parsed, cut down to a size a fuzzer can afford.
		pods := 0
		for _, g := range sc.Servers {
			pods += g.Count
		}
		for _, e := range sc.Events {
			if e.Action == ActionScaleUp {
				pods += e.Count
			}
		}
		if pods > 300 || len(sc.Zones) > 8 {
			return
		}
		if sc.Subset != nil {
			clients := 0
			for _, g := range sc.Clients {
				clients += g.Instances
			}
			if clients*pods*min(sc.Subset.Size, pods) > 1e6 {
				sc.Subset = nil
			}
		}
		sc.Steps = min(sc.Steps, 12)
		var evs []Event
		for _, e := range sc.Events {
			if e.Step < sc.Steps {
				evs = append(evs, e)
			}
		}
		sc.Events = evs
		sc.Strategies = strategyNames
		rep, err := Simulate(sc)
		if err != nil {
			t.Fatalf("Simulate: %v", err)
		}
		checkInvariants(t, rep)
	})
}

// checkInvariants holds for every step of every run: traffic is
// conserved, shares are shares, nothing is NaN.
func checkInvariants(t testing.TB, rep *Report) {
	t.Helper()
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Max(math.Abs(a), math.Abs(b))) }
	for _, run := range rep.Runs {
		for _, st := range run.Steps {
			where := func() string { return run.Strategy + " step " + st.Time.String() }
			var routed, offered, issued float64
			for z, zs := range st.Zones {
				routed += zs.Routed
				offered += zs.Offered
				issued += zs.Issued
				for _, v := range []float64{zs.Issued, zs.Routed, zs.Offered, zs.Capacity, zs.Served, zs.Errors, zs.InFlight} {
					if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
						t.Fatalf("%s: zone %d has %+v", where(), z, zs)
					}
				}
				if !near(zs.Served+zs.Errors, zs.Offered) {
					t.Fatalf("%s: zone %d served %v + errors %v != offered %v", where(), z, zs.Served, zs.Errors, zs.Offered)
				}
				if zs.Served > zs.Capacity*(1+1e-9)+1e-9 {
					t.Fatalf("%s: zone %d served %v above capacity %v", where(), z, zs.Served, zs.Capacity)
				}
				var sum float64
				for _, s := range st.Shares[z] {
					if s < 0 || math.IsNaN(s) {
						t.Fatalf("%s: shares of zone %d %v", where(), z, st.Shares[z])
					}
					sum += s
				}
				if sum != 0 && !near(sum, 1) {
					t.Fatalf("%s: shares of zone %d sum to %v", where(), z, sum)
				}
			}
			if !near(routed, offered) || !near(issued, st.Issued) || !near(issued-routed, st.Unroutable) {
				t.Fatalf("%s: issued %v (%v), routed %v, offered %v, unroutable %v", where(), issued, st.Issued, routed, offered, st.Unroutable)
			}
			for _, v := range []float64{st.SameZone, st.Optimum} {
				if !(v >= 0 && v <= 1+1e-9) {
					t.Fatalf("%s: same-zone %v, optimum %v", where(), st.SameZone, st.Optimum)
				}
			}
			if !(st.Errors >= 0 && st.Errors <= st.Issued*(1+1e-9)+1e-9) {
				t.Fatalf("%s: errors %v of %v issued", where(), st.Errors, st.Issued)
			}
		}
	}
}

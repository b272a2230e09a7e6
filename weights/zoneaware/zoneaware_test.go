package zoneaware

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fleet returns healthy endpoints, counts[z] in zone z, registered an hour
// before t0 (fully trusted).
func fleet(counts map[string]int) []Endpoint {
	var eps []Endpoint
	for _, z := range sortedKeys(counts) {
		for i := range counts[z] {
			eps = append(eps, Endpoint{ID: fmt.Sprintf("%s-%d", z, i), Zone: z, Healthy: true, Registered: t0.Add(-time.Hour)})
		}
	}
	return eps
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// lrsInput returns load data at now: demand[z] RPS issued by clients in z;
// upstream[y] RPS received by zone y (all successful, 10 ms latency, so
// in-flight is 0.01 × RPS).
func lrsInput(now time.Time, eps []Endpoint, demand, upstream map[string]float64) *Input {
	in := &Input{Now: now, Endpoints: eps}
	for _, z := range sortedKeys(demand) {
		in.Demand = append(in.Demand, Demand{ClientZone: z, RPS: demand[z], Updated: now})
	}
	for _, y := range sortedKeys(upstream) {
		r := upstream[y]
		in.Loads = append(in.Loads, ZoneLoad{Zone: y, IssuedRPS: r, SucceededRPS: r, InProgress: 0.01 * r, Updated: now})
	}
	return in
}

// shares maps upstream zone to share.
func shares(rt *Route) map[string]float64 {
	m := map[string]float64{}
	for _, w := range rt.Weights {
		m[w.Zone] = w.Share
	}
	return m
}

// loadOn is computed independently of the package: load_y = Σ_z D_z ·
// share_z→y, D normalised.
func loadOn(out *Result, demand map[string]float64) map[string]float64 {
	var sum float64
	for _, d := range demand {
		sum += d
	}
	load := map[string]float64{}
	for z, d := range demand {
		for y, s := range shares(out.Route(z)) {
			load[y] += d / sum * s
		}
	}
	return load
}

func sameZone(out *Result, demand map[string]float64) float64 {
	var sum, same float64
	for _, d := range demand {
		sum += d
	}
	for z, d := range demand {
		same += d / sum * shares(out.Route(z))[z]
	}
	return same
}

// optimum is Σ min(D_z, C_z), computed here independently of Optimum.
func optimum(demand, capacity map[string]float64) float64 {
	var sd, sc, opt float64
	for _, v := range demand {
		sd += v
	}
	for _, v := range capacity {
		sc += v
	}
	for z := range demand {
		opt += math.Min(demand[z]/sd, capacity[z]/sc)
	}
	return opt
}

func mustNew(t testing.TB, cfg Config) *Calculator {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func compute(t testing.TB, cfg Config, in *Input) *Result {
	t.Helper()
	var st State
	var out Result
	mustNew(t, cfg).Compute(&st, in, &out)
	return &out
}

var approx = cmpopts.EquateApprox(0, 1e-9)

// TestWorkedExample is the design's example: clients 40/40/20 % in zones
// a/b/c, capacity 25/50/25 %. Without probing: zone a keeps 62.5% and
// sends 25% to b and 12.5% to c, b and c stay local, 85% stays in-zone
// (the optimum) and no zone gets more than its capacity. With the default
// 1% probe every figure is within 1.5 points: b and c send their 1% probe
// budget, half a point to each other zone, and keep 99%.
func TestWorkedExample(t *testing.T) {
	eps := fleet(map[string]int{"a": 5, "b": 10, "c": 5})
	demand := map[string]float64{"a": 400, "b": 400, "c": 200}
	capacity := map[string]float64{"a": 0.25, "b": 0.5, "c": 0.25}
	upstream := map[string]float64{"a": 250, "b": 500, "c": 250}
	for _, tc := range []struct {
		name  string
		probe *float64
		want  map[string]map[string]float64
		tol   float64 // on zone a's shares, same-zone and load above capacity
	}{
		{"probe-0", new(0.0), map[string]map[string]float64{
			"a": {"a": 0.625, "b": 0.25, "c": 0.125},
			"b": {"a": 0, "b": 1, "c": 0},
			"c": {"a": 0, "b": 0, "c": 1},
		}, 1e-9},
		{"probe-default", nil, map[string]map[string]float64{
			"a": {"a": 0.625, "b": 0.25, "c": 0.125},
			"b": {"a": 0.005, "b": 0.99, "c": 0.005},
			"c": {"a": 0.005, "b": 0.005, "c": 0.99},
		}, 0.015},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := compute(t, Config{ProbeShare: tc.probe}, lrsInput(t0, eps, demand, upstream))
			for z, w := range tc.want {
				tol := 1e-9
				if z == "a" {
					tol = tc.tol
				}
				if diff := cmp.Diff(w, shares(out.Route(z)), cmpopts.EquateApprox(0, tol)); diff != "" {
					t.Errorf("zone %s shares (-want +got):\n%s", z, diff)
				}
				t.Logf("%s", out.Route(z).Explain.String())
			}
			got := sameZone(out, demand)
			t.Logf("same-zone %.4f, loads %v", got, loadOn(out, demand))
			if math.Abs(got-0.85) > tc.tol {
				t.Errorf("same-zone = %.4f, want 0.85 ± %g", got, tc.tol)
			}
			if math.Abs(out.SameZone-got) > 1e-9 {
				t.Errorf("Result.SameZone = %v, want %v", out.SameZone, got)
			}
			if diff := cmp.Diff(0.85, out.Optimum, approx); diff != "" {
				t.Errorf("Optimum (-want +got):\n%s", diff)
			}
			for y, l := range loadOn(out, demand) {
				if l > capacity[y]+tc.tol {
					t.Errorf("zone %s load = %.4f, want <= capacity %.4f + %g", y, l, capacity[y], tc.tol)
				}
				if math.Abs(out.Zones[slices.IndexFunc(out.Zones, func(z ZoneInfo) bool { return z.Zone == y })].Load-l) > 1e-9 {
					t.Errorf("zone %s: ZoneInfo.Load differs from %v", y, l)
				}
			}
		})
	}
}

// TestTargetUtilization shows what u < 1 does to the worked example: the
// clients' own zone is filled to u of its share, and since shares sum to
// one the rest lands on other zones, which go above their share by that
// much (see the package doc).
func TestTargetUtilization(t *testing.T) {
	eps := fleet(map[string]int{"a": 5, "b": 10, "c": 5})
	demand := map[string]float64{"a": 400, "b": 400, "c": 200}
	out := compute(t, Config{ProbeShare: new(0.0), TargetUtilization: 0.8},
		lrsInput(t0, eps, demand, map[string]float64{"a": 250, "b": 500, "c": 250}))
	want := map[string]map[string]float64{
		"a": {"a": 0.5, "b": 1.0 / 3, "c": 1.0 / 6},
		"b": {"a": 0, "b": 1, "c": 0},
		"c": {"a": 0, "b": 0, "c": 1},
	}
	for z, w := range want {
		if diff := cmp.Diff(w, shares(out.Route(z)), approx); diff != "" {
			t.Errorf("zone %s shares (-want +got):\n%s", z, diff)
		}
	}
	if diff := cmp.Diff(map[string]float64{"a": 0.2, "b": 0.4 + 0.4/3, "c": 0.2 + 0.4/6}, loadOn(out, demand), approx); diff != "" {
		t.Errorf("loads (-want +got):\n%s", diff)
	}
}

// TestHeterogeneousClients: zone a has 20% of the client instances but 70%
// of the traffic; capacity is even. Weights from client counts (Envoy's
// host-count heuristic) overload zone a; weights from LRS demand keep every
// zone at or under capacity and reach the optimum same-zone share.
func TestHeterogeneousClients(t *testing.T) {
	eps := fleet(map[string]int{"a": 4, "b": 4, "c": 4})
	demand := map[string]float64{"a": 700, "b": 150, "c": 150} // what clients really send
	capacity := map[string]float64{"a": 1, "b": 1, "c": 1}
	clients := []ClientCount{{"a", 20}, {"b", 40}, {"c", 40}}
	opt := optimum(demand, capacity)
	if math.Abs(opt-(1.0/3+0.3)) > 1e-12 {
		t.Fatalf("optimum = %v, want 0.6333", opt)
	}

	t.Run("client-counts", func(t *testing.T) {
		out := compute(t, Config{ProbeShare: new(0.0)}, &Input{Now: t0, Endpoints: eps, Clients: clients})
		if out.Source != SourceClients || out.Fallback != FallbackClientCounts {
			t.Fatalf("Source, Fallback = %v, %v; want clients, client counts", out.Source, out.Fallback)
		}
		load := loadOn(out, demand)
		t.Logf("loads from client counts: %v", load)
		if load["a"] <= 1.0/3+0.1 {
			t.Errorf("load a = %.3f, want an overload well above 0.333", load["a"])
		}
	})
	for _, tc := range []struct {
		name  string
		probe *float64
		over  float64
	}{
		{"lrs-probe-0", new(0.0), 1e-9},
		{"lrs-probe-default", nil, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream := map[string]float64{"a": 1000.0 / 3, "b": 1000.0 / 3, "c": 1000.0 / 3}
			in := lrsInput(t0, eps, demand, upstream)
			in.Clients = clients
			out := compute(t, Config{ProbeShare: tc.probe}, in)
			if out.Source != SourceLRS || out.Fallback != FallbackNone {
				t.Fatalf("Source, Fallback = %v, %v; want lrs, none", out.Source, out.Fallback)
			}
			load := loadOn(out, demand)
			t.Logf("loads from LRS: %v", load)
			for y, l := range load {
				if l > 1.0/3+tc.over {
					t.Errorf("zone %s load = %.4f, want <= 0.3333 + %g", y, l, tc.over)
				}
			}
			if got := sameZone(out, demand); got < opt-0.01 || got > opt+1e-9 {
				t.Errorf("same-zone = %.4f, want within 1 point of the optimum %.4f", got, opt)
			}
		})
	}
}

// TestFailOpen: stale, missing or inconsistent load data never drives the
// weights: every client zone gets capacity-proportional weights, and the
// fallback is named.
func TestFailOpen(t *testing.T) {
	eps := fleet(map[string]int{"a": 1, "b": 2, "c": 1})
	capShare := map[string]float64{"a": 0.25, "b": 0.5, "c": 0.25}
	good := func() *Input {
		return lrsInput(t0, eps, map[string]float64{"a": 400, "b": 400, "c": 200}, map[string]float64{"a": 250, "b": 500, "c": 250})
	}
	tests := []struct {
		name       string
		in         func() *Input
		fallback   Fallback
		reason     string
		localFirst bool
		text       string // in Explain.FallbackText
	}{
		{"fresh", good, FallbackNone, "", true, "none"},
		{"stale", func() *Input {
			in := good()
			in.Loads[1].Updated = t0.Add(-45 * time.Second)
			return in
		}, FallbackStale, ReasonOld, false, "stale load data (report older than the staleness limit, b, age 45s)"},
		{"stale-at-limit-is-fresh", func() *Input {
			in := good()
			in.Loads[1].Updated = t0.Add(-30 * time.Second)
			return in
		}, FallbackNone, "", true, "none"},
		{"nan", func() *Input {
			in := good()
			in.Loads[0].ErroredRPS = math.NaN()
			return in
		}, FallbackInconsistent, ReasonNegative, false, "inconsistent load data (negative or non-finite value, a, age 0s)"},
		{"negative-demand", func() *Input {
			in := good()
			in.Demand[2].RPS = -1
			return in
		}, FallbackInconsistent, ReasonNegative, false, "inconsistent"},
		{"infinite-inflight", func() *Input {
			in := good()
			in.Loads[2].InProgress = math.Inf(1)
			return in
		}, FallbackInconsistent, ReasonNegative, false, "inconsistent"},
		{"demand-without-upstream-total", func() *Input {
			in := good()
			in.Loads = nil
			return in
		}, FallbackInconsistent, ReasonTotalsMismatch, false, "client demand does not match upstream totals"},
		{"totals-mismatch", func() *Input {
			in := good()
			in.Demand[0].RPS = 4000
			return in
		}, FallbackInconsistent, ReasonTotalsMismatch, false, "inconsistent"},
		{"duplicate-zone", func() *Input {
			in := good()
			in.Loads = append(in.Loads, in.Loads[0])
			in.Demand[0].RPS += 250
			return in
		}, FallbackInconsistent, ReasonDuplicate, false, "zone reported twice"},
		{"future", func() *Input {
			in := good()
			in.Demand[0].Updated = t0.Add(time.Hour)
			return in
		}, FallbackInconsistent, ReasonFuture, false, "timestamp in the future"},
		{"no-load-data-client-counts", func() *Input {
			return &Input{Now: t0, Endpoints: eps, Clients: []ClientCount{{"a", 4}, {"b", 4}, {"c", 2}}}
		}, FallbackClientCounts, ReasonNoReports, true, "no load data, client counts (no load reports)"},
		{"no-traffic-client-counts", func() *Input {
			in := lrsInput(t0, eps, map[string]float64{"a": 0, "b": 0, "c": 0}, map[string]float64{"a": 0, "b": 0, "c": 0})
			in.Clients = []ClientCount{{"a", 4}, {"b", 4}, {"c", 2}}
			return in
		}, FallbackClientCounts, ReasonNoTraffic, true, "load reports show no traffic"},
		{"nothing", func() *Input { return &Input{Now: t0, Endpoints: eps} }, FallbackNoDemand, "", false, "no demand data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := compute(t, Config{ProbeShare: new(0.0)}, tc.in())
			if out.Fallback != tc.fallback || out.Reason != tc.reason {
				t.Errorf("Fallback, Reason = %v, %q; want %v, %q", out.Fallback, out.Reason, tc.fallback, tc.reason)
			}
			for _, rt := range out.Routes[1:] {
				e := &rt.Explain
				if e.LocalFirst != tc.localFirst {
					t.Errorf("zone %s LocalFirst = %v, want %v", rt.ClientZone, e.LocalFirst, tc.localFirst)
				}
				if got := e.FallbackText(); !strings.Contains(got, tc.text) {
					t.Errorf("zone %s FallbackText = %q, want it to contain %q", rt.ClientZone, got, tc.text)
				}
				if !tc.localFirst {
					if diff := cmp.Diff(capShare, shares(&rt), approx); diff != "" {
						t.Errorf("zone %s: not capacity-proportional (-want +got):\n%s", rt.ClientZone, diff)
					}
				}
			}
			if tc.fallback == FallbackStale || tc.fallback == FallbackInconsistent {
				for _, z := range out.Zones {
					if z.Health != 1 || z.QueueFactor != 1 || z.ErrorFactor != 1 {
						t.Errorf("zone %s factors from refused data: %+v", z.Zone, z)
					}
				}
			}
		})
	}
}

// TestRoutesWithoutDemand: clients without a zone, and client zones that
// have no demand figure while others do, get capacity-proportional weights;
// Route of an unknown zone is the zoneless route.
func TestRoutesWithoutDemand(t *testing.T) {
	eps := fleet(map[string]int{"a": 1, "b": 2, "c": 1})
	in := lrsInput(t0, eps, map[string]float64{"a": 400, "b": 600}, map[string]float64{"a": 250, "b": 500, "c": 250})
	in.Clients = []ClientCount{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 3}}
	out := compute(t, Config{ProbeShare: new(0.0)}, in)
	capShare := map[string]float64{"a": 0.25, "b": 0.5, "c": 0.25}
	for _, tc := range []struct {
		zone     string
		fallback Fallback
	}{
		{"", FallbackZoneless},
		{"c", FallbackUnknownDemand},
		{"d", FallbackUnknownDemand},
		{"never-seen", FallbackZoneless},
	} {
		rt := out.Route(tc.zone)
		if rt.Explain.Fallback != tc.fallback || rt.Explain.LocalFirst {
			t.Errorf("Route(%q): Fallback %v LocalFirst %v; want %v, false", tc.zone, rt.Explain.Fallback, rt.Explain.LocalFirst, tc.fallback)
		}
		if diff := cmp.Diff(capShare, shares(rt), approx); diff != "" {
			t.Errorf("Route(%q) (-want +got):\n%s", tc.zone, diff)
		}
	}
	if got := out.Route("a").Explain; !got.LocalFirst || got.Fallback != FallbackNone {
		t.Errorf("zone a: LocalFirst %v Fallback %v; want true, none", got.LocalFirst, got.Fallback)
	}
	var zones []string
	for _, rt := range out.Routes {
		zones = append(zones, rt.ClientZone)
	}
	if diff := cmp.Diff([]string{"", "a", "b", "c", "d"}, zones); diff != "" {
		t.Errorf("route zones (-want +got):\n%s", diff)
	}
}

// TestMoveThreshold: a tiny change in the inputs returns the previous
// vector unchanged; a big one replaces it.
func TestMoveThreshold(t *testing.T) {
	eps := fleet(map[string]int{"a": 5, "b": 10, "c": 5})
	calc := mustNew(t, Config{})
	var st State
	var out Result
	up := map[string]float64{"a": 250, "b": 500, "c": 250}
	steps := []struct {
		demandA     float64
		wantChanged bool
	}{
		{400, true},  // first vector: a keeps 62.5%
		{400, false}, // same inputs
		{410, false}, // a's local share would be 61.6%: 0.9 point
		{420, false}, // 60.7%: 1.8 points from the vector returned (not from the last computed)
		{440, true},  // 59.1%: 3.4 points
		{445, false}, // 58.6%: 0.4 point from 59.1%
	}
	var prev []ZoneWeight
	for i, s := range steps {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		d := map[string]float64{"a": s.demandA, "b": 400, "c": 200}
		var sum float64
		for _, v := range d {
			sum += v
		}
		in := lrsInput(now, eps, d, map[string]float64{"a": up["a"] / 1000 * sum, "b": up["b"] / 1000 * sum, "c": up["c"] / 1000 * sum})
		calc.Compute(&st, in, &out)
		rt := out.Route("a")
		t.Logf("step %d demand a %v: local %.4f held %v moved %.4f", i, s.demandA, rt.Explain.Local, rt.Explain.Held, rt.Explain.Moved)
		if rt.Changed != s.wantChanged {
			t.Errorf("step %d: Changed = %v, want %v", i, rt.Changed, s.wantChanged)
		}
		if !s.wantChanged {
			if diff := cmp.Diff(prev, rt.Weights); diff != "" {
				t.Errorf("step %d: held vector differs (-prev +got):\n%s", i, diff)
			}
		}
		prev = slices.Clone(rt.Weights)
	}
}

// TestWeights: weights are integers >= 1 for every healthy zone, about
// Scale in total; a zone without a healthy endpoint is absent.
func TestWeights(t *testing.T) {
	eps := fleet(map[string]int{"a": 3, "b": 3, "c": 3, "d": 2})
	for i := range eps {
		if eps[i].Zone == "d" {
			eps[i].Healthy = false
		}
	}
	for _, tc := range []struct {
		name  string
		scale uint32
		in    *Input
	}{
		{"lrs", 0, lrsInput(t0, eps, map[string]float64{"a": 990, "b": 5, "c": 5, "d": 100}, map[string]float64{"a": 500, "b": 300, "c": 300})},
		{"all-local", 0, lrsInput(t0, eps, map[string]float64{"a": 1, "b": 1, "c": 1}, map[string]float64{"a": 1, "b": 1, "c": 1})},
		{"small-scale", 10, lrsInput(t0, eps, map[string]float64{"a": 1, "b": 1, "c": 1}, map[string]float64{"a": 1, "b": 1, "c": 1})},
		{"fail-open", 0, &Input{Now: t0, Endpoints: eps}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Scale: tc.scale, ProbeShare: new(0.0)}
			out := compute(t, cfg, tc.in)
			scale := float64(mustNew(t, cfg).Config().Scale)
			for _, rt := range out.Routes {
				var zones []string
				var sum uint32
				var shareSum float64
				for _, w := range rt.Weights {
					zones = append(zones, w.Zone)
					if w.Weight < 1 {
						t.Errorf("zone %s -> %s: weight %d", rt.ClientZone, w.Zone, w.Weight)
					}
					sum += w.Weight
					shareSum += w.Share
				}
				if diff := cmp.Diff([]string{"a", "b", "c"}, zones); diff != "" {
					t.Errorf("zone %q: weighted zones (-want +got):\n%s", rt.ClientZone, diff)
				}
				if math.Abs(float64(sum)-scale) > 3 {
					t.Errorf("zone %q: weights sum to %d, want %v ± 3", rt.ClientZone, sum, scale)
				}
				if math.Abs(shareSum-1) > 1e-9 {
					t.Errorf("zone %q: shares sum to %v", rt.ClientZone, shareSum)
				}
			}
		})
	}
	t.Run("no-healthy-endpoint", func(t *testing.T) {
		for i := range eps {
			eps[i].Healthy = false
		}
		out := compute(t, Config{}, &Input{Now: t0, Endpoints: eps})
		if out.Fallback != FallbackNoEndpoints {
			t.Errorf("Fallback = %v, want no healthy endpoints", out.Fallback)
		}
		for _, rt := range out.Routes {
			if len(rt.Weights) != 0 {
				t.Errorf("zone %q: weights %v, want none", rt.ClientZone, rt.Weights)
			}
		}
	})
}

// TestProbeFloor: the other healthy zones share ProbeShare evenly (here 3%
// over two zones: 1.5% each), but a zone never gets more than its capacity
// share (a zone whose only endpoint is cold must not be flooded by probes).
func TestProbeFloor(t *testing.T) {
	eps := fleet(map[string]int{"a": 50, "b": 50})
	eps = append(eps, Endpoint{ID: "c-new", Zone: "c", Healthy: true, Registered: t0})
	in := &Input{Now: t0, Endpoints: eps, Clients: []ClientCount{{"a", 1}, {"b", 1}, {"c", 1}}}
	out := compute(t, Config{ProbeShare: new(0.03)}, in)
	cShare := out.Zones[2].CapacityShare // 0.05 / 100.05
	got := shares(out.Route("a"))
	if math.Abs(got["b"]-0.015) > 1e-9 || math.Abs(got["c"]-cShare) > 1e-9 {
		t.Errorf("zone a shares = %v, want b 0.015 and c its capacity share %.5f", got, cShare)
	}
	got = shares(out.Route("c"))
	t.Logf("zone c (one cold endpoint) shares: %v", got)
	if got["a"] < 0.015 || got["b"] < 0.015 {
		t.Errorf("zone c shares = %v, want a and b >= 0.015", got)
	}
}

// TestConfig: zero values take the defaults; bad values are refused with
// the field named.
func TestConfig(t *testing.T) {
	got := mustNew(t, Config{}).Config()
	want := Config{
		Scale: 10000, ProbeShare: new(0.01), TargetUtilization: 1, SlowStartFraction: 0.05,
		SlowStartRamp: time.Minute, SlowStartRequests: 1000, QueueSensitivity: new(1.0),
		ErrorSensitivity: new(2.0), CapacityFloor: 0.05, RecoveryRamp: time.Minute,
		DegradedTarget: 0.9, ReportInterval: 10 * time.Second, StaleAfter: 3, MoveThreshold: new(0.02),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if got := *mustNew(t, Config{ProbeShare: new(0.0)}).Config().ProbeShare; got != 0 {
		t.Errorf("explicit ProbeShare 0 = %v", got)
	}
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"Scale", Config{Scale: 5}},
		{"ProbeShare", Config{ProbeShare: new(-0.1)}},
		{"ProbeShare", Config{ProbeShare: new(math.NaN())}},
		{"TargetUtilization", Config{TargetUtilization: 1.5}},
		{"TargetUtilization", Config{TargetUtilization: -1}},
		{"SlowStartFraction", Config{SlowStartFraction: 2}},
		{"SlowStartRamp", Config{SlowStartRamp: -time.Second}},
		{"SlowStartRequests", Config{SlowStartRequests: 0.5}},
		{"QueueSensitivity", Config{QueueSensitivity: new(-1.0)}},
		{"ErrorSensitivity", Config{ErrorSensitivity: new(math.Inf(1))}},
		{"CapacityFloor", Config{CapacityFloor: -0.1}},
		{"RecoveryRamp", Config{RecoveryRamp: -1}},
		{"DegradedTarget", Config{DegradedTarget: 1.1}},
		{"DegradedTarget", Config{DegradedTarget: -0.5}},
		{"DegradedTarget", Config{DegradedTarget: math.NaN()}},
		{"ReportInterval", Config{ReportInterval: -1}},
		{"ReportInterval", Config{ReportInterval: 2 * time.Hour}},
		{"StaleAfter", Config{StaleAfter: -2}},
		{"MoveThreshold", Config{MoveThreshold: new(0.5)}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+" ") {
				t.Errorf("New = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

// TestDeterministic: two States fed the same inputs give the same results,
// and Clone shares no memory with the Result it copies.
func TestDeterministic(t *testing.T) {
	calc := mustNew(t, Config{})
	var st1, st2 State
	var out1, out2 Result
	var kept []*Result
	for i, in := range fuzzInputs(42, 20) {
		calc.Compute(&st1, in, &out1)
		calc.Compute(&st2, in, &out2)
		if diff := cmp.Diff(&out1, &out2, cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("cycle %d differs (-1 +2):\n%s", i, diff)
		}
		kept = append(kept, out1.Clone())
	}
	if diff := cmp.Diff(kept[len(kept)-1], &out1, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("Clone differs (-clone +result):\n%s", diff)
	}
	if len(kept[0].Routes) > 0 && len(out1.Routes) > 0 && len(kept[0].Routes[0].Weights) > 0 &&
		&kept[0].Routes[0].Weights[0] == &out1.Routes[0].Weights[0] {
		t.Error("Clone shares Weights with the Result")
	}
}

// TestOptimum checks the exported helper.
func TestOptimum(t *testing.T) {
	for _, tc := range []struct {
		name             string
		demand, capacity map[string]float64
		want             float64
	}{
		{"worked-example", map[string]float64{"a": 40, "b": 40, "c": 20}, map[string]float64{"a": 1, "b": 2, "c": 1}, 0.85},
		{"matching", map[string]float64{"a": 1, "b": 1}, map[string]float64{"a": 5, "b": 5}, 1},
		{"disjoint", map[string]float64{"a": 1}, map[string]float64{"b": 1}, 0},
		{"empty", nil, map[string]float64{"b": 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Optimum(tc.demand, tc.capacity); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Optimum = %v, want %v", got, tc.want)
			}
		})
	}
}

package main

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/weights/subset"
)

func TestParseSubset(t *testing.T) {
	both := []subset.Mode{subset.Deterministic, subset.Random}
	for _, tc := range []struct {
		name, in string
		want     *SubsetOptions
	}{
		{"absent", minimal, nil},
		{"null", minimal + "subset:\n", nil},
		{"defaults", minimal + "subset: {size: 3}\n", &SubsetOptions{Size: 3, Modes: both, Churn: true}},
		{"every-field", minimal + "compare: [static, spillway]\nsubset:\n  size: 1000\n  modes: [random, deterministic]\n  route: spillway\n  churn: false\n",
			&SubsetOptions{Size: 1000, Modes: []subset.Mode{subset.Random, subset.Deterministic}, Route: StrategySpillway}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := ParseScenario([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, sc.Subset); diff != "" {
				t.Errorf("Subset (-want +got):\n%s", diff)
			}
		})
	}
}

// subsetOutput is the printed subset report, read back.
type subsetOutput struct {
	header string
	rows   map[string][]string // "zone/mode" → the columns after zone and mode
	churn  map[string][]float64
}

// readSubsetOutput parses what writeSubsets printed.
func readSubsetOutput(t *testing.T, out string, modes int) subsetOutput {
	t.Helper()
	o := subsetOutput{rows: map[string][]string{}, churn: map[string][]float64{}}
	section := ""
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "subsets of "):
			o.header = line
		case len(f) > 0 && f[0] == "zone":
			section = "table"
		case strings.HasPrefix(line, "binomial "), line == "":
			section = ""
		case strings.HasPrefix(line, "churn:"):
			section = "churn-header"
		case section == "churn-header":
			section = "churn"
		case section == "table":
			o.rows[f[0]+"/"+f[1]] = f[2:]
		case section == "churn":
			// change words, then "n (p%)" per mode
			name := strings.Join(f[:len(f)-2*modes], " ")
			for i := range modes {
				p, err := strconv.ParseFloat(strings.Trim(f[len(f)-2*modes+2*i+1], "(%)"), 64)
				if err != nil {
					t.Fatalf("churn row %q: %v", line, err)
				}
				o.churn[name] = append(o.churn[name], p/100)
			}
		}
	}
	return o
}

// num reads column c (0: endpoints, 1: min, 2: avg, 3: max, 4: max/avg,
// 5: sd, 6: requests max/avg) of a printed row.
func num(t *testing.T, row []string, c int) float64 {
	t.Helper()
	if c >= len(row) {
		t.Fatalf("row %v has no column %d", row, c)
	}
	v, err := strconv.ParseFloat(row[c], 64)
	if err != nil {
		t.Fatalf("row %v column %d: %v", row, c, err)
	}
	return v
}

// normalQuantile is Φ⁻¹(q) by bisection on math.Erf, independently of
// the simulator's math.Erfinv.
func normalQuantile(q float64) float64 {
	lo, hi := -10.0, 10.0
	for range 200 {
		mid := (lo + hi) / 2
		if 0.5*(1+math.Erf(mid/math.Sqrt2)) < q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// checkSubsetting checks the printed figures of scenarios/subsetting.yaml
// against the closed form computed here: M = 1,000 clients, N = 100
// endpoints, s = 10; deterministic max/avg <= 1.05; random within the
// binomial band; churn at most 3 % for one endpoint, 1 % for one client.
func checkSubsetting(t *testing.T, sc *Scenario) {
	const m, n, s = 1000, 100, 10
	rep := mustSimulate(t, sc)
	var b bytes.Buffer
	if err := writeSubsets(&b, rep.Subsets); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	out := readSubsetOutput(t, b.String(), 2)
	if want := "subsets of 10: 1000 clients, 100 endpoints;"; !strings.HasPrefix(out.header, want) {
		t.Fatalf("header %q, want it to start with %q", out.header, want)
	}
	p := float64(s) / n
	mean, sd := m*p, math.Sqrt(m*p*(1-p))
	z := normalQuantile((n - 0.375) / (n + 0.25))
	bound := math.Sqrt(2 * math.Log(n))

	for _, key := range []string{"a/deterministic", "a/random", "a/binomial"} {
		row := out.rows[key]
		if row == nil {
			t.Fatalf("no row %s in:\n%s", key, b.String())
		}
		if got := num(t, row, 0); got != n {
			t.Errorf("%s: %v endpoints, want %d", key, got, n)
		}
		if got := num(t, row, 2); got != mean {
			t.Errorf("%s: avg %v, want M·s/N = %v", key, got, mean)
		}
		if got, want := num(t, row, 4), num(t, row, 3)/num(t, row, 2); math.Abs(got-want) > 0.0005 {
			t.Errorf("%s: max/avg %v, want max/avg = %.4f", key, got, want)
		}
		// Every client sends alike: requests follow the connections.
		if key != "a/binomial" {
			if got, want := num(t, row, 6), num(t, row, 4); got != want {
				t.Errorf("%s: requests max/avg %v, want the connections' %v", key, got, want)
			}
		}
	}
	det, rnd, bin := out.rows["a/deterministic"], out.rows["a/random"], out.rows["a/binomial"]
	if got := num(t, det, 4); got > 1.05 {
		t.Errorf("deterministic max/avg %v, want <= 1.05", got)
	}
	if got := num(t, det, 5); got > 0.5 {
		t.Errorf("deterministic sd %v, want <= 0.5 (counts a step apart at most)", got)
	}
	// The binomial row is the closed form.
	for _, c := range []struct {
		col  int
		want float64
		prec float64
	}{{1, mean - z*sd, 0.05}, {3, mean + z*sd, 0.05}, {4, (mean + z*sd) / mean, 0.0005}, {5, sd, 0.005}} {
		if got := num(t, bin, c.col); math.Abs(got-c.want) > c.prec {
			t.Errorf("binomial column %d = %v, want %.4f", c.col, got, c.want)
		}
	}
	if want := "bound mean + sd*sqrt(2 ln N) = " + strconv.FormatFloat(mean+sd*bound, 'f', 1, 64); !strings.Contains(b.String(), want) {
		t.Errorf("no %q in the output", want)
	}
	// Random is in the binomial band.
	if got := num(t, rnd, 5); got < 0.75*sd || got > 1.25*sd {
		t.Errorf("random sd %v, want within 25%% of the binomial's %.2f", got, sd)
	}
	if got := num(t, rnd, 3); got < mean+sd*(z-1.5) || got > mean+sd*(bound+1) {
		t.Errorf("random max %v, want %.1f..%.1f (mean + sd·(z − 1.5) .. mean + sd·(sqrt(2 ln N) + 1))", got, mean+sd*(z-1.5), mean+sd*(bound+1))
	}
	if got := num(t, rnd, 1); got > mean-sd*(z-1.5) || got < mean-sd*(bound+1) {
		t.Errorf("random min %v, want %.1f..%.1f", got, mean-sd*(bound+1), mean-sd*(z-1.5))
	}
	checkChurn(t, out.churn, 0.03, 0.01)
}

// checkChurn bounds every mode's churn: an endpoint change moves at most
// endpoint of the pairs, a client change at most client.
func checkChurn(t *testing.T, churn map[string][]float64, endpoint, client float64) {
	t.Helper()
	if len(churn) != 5 {
		t.Errorf("%d churn rows, want 5: %v", len(churn), churn)
	}
	for name, shares := range churn {
		bound := client
		if strings.HasPrefix(name, "endpoint") {
			bound = endpoint
		}
		for i, s := range shares {
			if s > bound || s == 0 {
				t.Errorf("churn %q, mode %d: %.2f%% of the pairs, want (0, %.0f%%]", name, i, 100*s, 100*bound)
			}
		}
	}
}

// checkSubsettingZones: over three zones on spillway's route, each
// upstream zone's deterministic connections are even (one step per
// client zone sending there), random ones spread as the sum of
// binomials, requests add up to the traffic issued, and the batch group
// makes random subsets' requests lumpier than their connections.
func checkSubsettingZones(t *testing.T, sc *Scenario) {
	rep := mustSimulate(t, sc)
	var b bytes.Buffer
	if err := writeSubsets(&b, rep.Subsets); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	sub := rep.Subsets
	if !slices.Equal(sub.Modes, []subset.Mode{subset.Deterministic, subset.Random}) || len(sub.Zones) != 3 {
		t.Fatalf("modes %v, %d zones; want both modes, 3 zones", sub.Modes, len(sub.Zones))
	}
	last := mustRun(t, rep, StrategySpillway).Steps[sc.Steps-1]
	for mi, mode := range sub.Modes {
		var sent float64
		for _, z := range sub.Zones {
			sent += z.Modes[mi].Requests * float64(z.Endpoints)
		}
		if math.Abs(sent-last.Issued) > 1e-6*last.Issued {
			t.Errorf("%s: endpoints are sent %.3f rps in all, want the %.3f issued", mode, sent, last.Issued)
		}
	}
	for _, z := range sub.Zones {
		det, rnd, bin := z.Modes[0], z.Modes[1], z.Binomial
		if det.MaxAvg > 1.05 || det.Max-det.Min > len(bin.Terms) {
			t.Errorf("zone %s: deterministic %d..%d, max/avg %.3f; want <= 1.05 and a spread of at most %d", z.Zone, det.Min, det.Max, det.MaxAvg, len(bin.Terms))
		}
		if det.RequestsMaxAvg > 1.10 {
			t.Errorf("zone %s: deterministic requests max/avg %.3f, want <= 1.10", z.Zone, det.RequestsMaxAvg)
		}
		for _, m := range z.Modes {
			if math.Abs(m.Mean-bin.Mean) > 1e-9 {
				t.Errorf("zone %s %s: mean %.4f, want the binomial's %.4f (every slot holds K)", z.Zone, m.Mode, m.Mean, bin.Mean)
			}
		}
		if rnd.SD < 0.6*bin.SD || rnd.SD > 1.4*bin.SD {
			t.Errorf("zone %s: random sd %.2f, want within 40%% of the binomial's %.2f", z.Zone, rnd.SD, bin.SD)
		}
		if hi := bin.Bound + bin.SD; float64(rnd.Max) > hi {
			t.Errorf("zone %s: random max %d, want at most %.1f", z.Zone, rnd.Max, hi)
		}
		// Every client zone the route sends to zone z holds at least one
		// of its endpoints (a probe share too).
		y := indexOf(sc.Zones, z.Zone)
		for c, row := range last.Shares {
			if row[y] == 0 {
				continue
			}
			if !slices.ContainsFunc(bin.Terms, func(tm BinomialTerm) bool { return tm.ClientZone == sc.Zones[c] && tm.K >= 1 }) {
				t.Errorf("zone %s: client zone %s sends it %.4f of its traffic but holds none of its endpoints (terms %v)", z.Zone, sc.Zones[c], row[y], bin.Terms)
			}
		}
	}
	if a := sub.Zones[0].Modes[1]; a.RequestsMaxAvg < a.MaxAvg+0.1 {
		t.Errorf("zone a random: requests max/avg %.3f, connections %.3f: want the batch group to show", a.RequestsMaxAvg, a.MaxAvg)
	}
	out := readSubsetOutput(t, b.String(), 2)
	checkChurn(t, out.churn, 0.03, 0.01)
}

// TestSubsetRandomBand: the random subsets of scenarios/subsetting.yaml
// stay in the binomial band whatever the seed, not for one lucky seed.
func TestSubsetRandomBand(t *testing.T) {
	sc := loadScenario(t, "subsetting")
	sc.Subset.Modes, sc.Subset.Churn = []subset.Mode{subset.Random}, false
	for seed := range uint64(5) {
		sc.Seed = seed
		z := mustSimulate(t, sc).Subsets.Zones[0]
		r, b := z.Modes[0], z.Binomial
		t.Logf("seed %d: random sd %.2f, max %d, min %d; binomial sd %.2f, max %.1f, min %.1f", seed, r.SD, r.Max, r.Min, b.SD, b.Max, b.Min)
		if r.SD < 0.75*b.SD || r.SD > 1.25*b.SD {
			t.Errorf("seed %d: random sd %.2f, want within 25%% of %.2f", seed, r.SD, b.SD)
		}
		if lo, hi := b.Mean+b.SD*(b.Z-1.5), b.Bound+b.SD; float64(r.Max) < lo || float64(r.Max) > hi {
			t.Errorf("seed %d: random max %d, want %.1f..%.1f", seed, r.Max, lo, hi)
		}
	}
}

// TestBlomZ: Blom's approximation is within 0.03 of the expected largest
// of N standard normal draws, computed here by integration.
func TestBlomZ(t *testing.T) {
	exact := func(n int) float64 {
		const h = 1e-3
		var sum float64
		for x := -10.0; x <= 10; x += h {
			phi := math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
			cdf := 0.5 * (1 + math.Erf(x/math.Sqrt2))
			sum += x * float64(n) * phi * math.Pow(cdf, float64(n-1)) * h
		}
		return sum
	}
	if got := blomZ(1); math.Abs(got) > 1e-12 {
		t.Errorf("blomZ(1) = %v, want 0", got)
	}
	for _, n := range []int{2, 5, 25, 100, 1000} {
		got, want := blomZ(n), exact(n)
		t.Logf("N = %d: Blom %.4f, exact %.4f, sqrt(2 ln N) %.4f", n, got, want, math.Sqrt(2*math.Log(float64(n))))
		if math.Abs(got-want) > 0.03 {
			t.Errorf("blomZ(%d) = %.4f, want %.4f ± 0.03", n, got, want)
		}
	}
}

// TestPairsChanged against a count by brute force, client by client.
func TestPairsChanged(t *testing.T) {
	g := subset.Group{Zone: "a"}
	in := subset.Input{Size: 2, Mode: subset.Deterministic, Seed: "t", Slots: map[subset.Group]int{g: 5},
		Localities: map[string][]string{"a": {"e0", "e1", "e2", "e3", "e4", "e5"}}}
	a, err := subset.Assign(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	in.Slots = map[subset.Group]int{g: 4}
	b, err := subset.Assign(a, in)
	if err != nil {
		t.Fatal(err)
	}
	brute := func(from []int) int {
		// Client c held a's slot c; in b, slot i holds client from[i].
		held := map[int][]string{}
		for i, c := range from {
			held[c] = b.Subset(g, i)
		}
		n := 0
		for c := range 5 {
			n += symDiff(a.Subset(g, c), held[c])
		}
		return n
	}
	for _, tc := range []struct {
		name string
		from map[subset.Group][]int
		f    []int
	}{
		{"newest-left", nil, []int{0, 1, 2, 3}},
		{"slot-1-left", map[subset.Group][]int{g: {0, 4, 2, 3}}, []int{0, 4, 2, 3}},
	} {
		if got, want := pairsChanged(a, b, tc.from), brute(tc.f); got != want {
			t.Errorf("%s: pairsChanged = %d, want %d", tc.name, got, want)
		}
	}
	if got := pairsChanged(a, a, nil); got != 0 {
		t.Errorf("pairsChanged(a, a) = %d, want 0", got)
	}
	if got, want := pairsChanged(b, a, nil), a.Pairs()-b.Pairs()+symDiffSlots(a, b, g, 4); got != want {
		t.Errorf("a client joined: pairsChanged = %d, want %d", got, want)
	}
}

func symDiffSlots(a, b *subset.Assignment, g subset.Group, n int) int {
	d := 0
	for i := range n {
		d += symDiff(a.Subset(g, i), b.Subset(g, i))
	}
	return d
}

func TestRunSubsets(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--quiet", "scenarios/subsetting.yaml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr.String())
	}
	for _, want := range []string{"summary over 1 steps", "subsets of 10: 1000 clients, 100 endpoints; fleet and spillway route of step 0", "binomial a: B(1000, 10/100)", "churn: (client, endpoint) pairs changed, of 10000"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout has no %q:\n%s", want, stdout.String())
		}
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"--compare", "hostcount", "scenarios/subsetting-zones.yaml"}, &stdout, &stderr); code != 2 {
		t.Errorf("route spillway with --compare hostcount: exit %d, want 2", code)
	}
	if want := "subset.route: strategy spillway does not run (want one of hostcount)"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
}

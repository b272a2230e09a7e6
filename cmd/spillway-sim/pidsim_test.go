package main

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spillway/spillway/weights/pid"
)

func mustPID(t *testing.T, name string) (*PIDScenario, []PIDStep) {
	t.Helper()
	sc, err := pidScenario(name)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := SimulatePID(sc)
	if err != nil {
		t.Fatal(err)
	}
	return sc, steps
}

func TestPIDHeterogeneous(t *testing.T) {
	_, steps := mustPID(t, "heterogeneous")
	start, end := steps[0].RRMaxAvg, steps[len(steps)-1].MaxAvg
	t.Logf("max/avg: round robin %.3f, pid after %d cycles %.3f", start, len(steps)-1, end)
	if end > 1.05 {
		t.Errorf("max/avg after %d cycles = %.3f, want <= 1.05 (round robin %.3f)", len(steps)-1, end, start)
	}
	if start < 1.3 {
		t.Errorf("round robin max/avg = %.3f, want the speeds' imbalance (>= 1.3)", start)
	}
}

func TestPIDStuckIO(t *testing.T) {
	for _, tt := range []struct {
		name string
		less bool
	}{{"stuck-inflight", true}, {"stuck-inflight-cpu", false}} {
		_, steps := mustPID(t, tt.name)
		w := steps[len(steps)-1].Weights
		t.Logf("%s: final weights %v", tt.name, w)
		if got := w[2] < w[0]; got != tt.less {
			t.Errorf("%s: stuck endpoint weight %d vs healthy %d: less = %v, want %v", tt.name, w[2], w[0], got, tt.less)
		}
	}
}

func TestPIDCold(t *testing.T) {
	sc, steps := mustPID(t, "cold")
	first := steps[sc.ColdAt]
	if got, want := float64(first.Weights[3])/float64(first.Weights[0]), pid.DefaultInitialWeight; math.Abs(got-want) > 0.01 {
		t.Errorf("cold endpoint's first weight = %.3f of the others, want %.2f", got, want)
	}
	var peak float64
	for _, s := range steps[sc.ColdAt:] {
		mean := (s.Util[0] + s.Util[1] + s.Util[2] + s.Util[3]) / 4
		peak = max(peak, s.Util[3]/mean)
	}
	last := steps[len(steps)-1]
	final := last.Util[3] / ((last.Util[0] + last.Util[1] + last.Util[2] + last.Util[3]) / 4)
	t.Logf("cold endpoint: peak %.3f of the mean, final %.3f", peak, final)
	if peak > 1.10 || final < 0.95 {
		t.Errorf("cold endpoint peak %.3f, final %.3f of the mean, want peak <= 1.10, final >= 0.95", peak, final)
	}
}

func TestPIDMissing(t *testing.T) {
	_, steps := mustPID(t, "missing")
	s := steps[10]
	if s.Outcome != pid.OutcomeSkippedMissing || s.MissingShare != 0.4 {
		t.Fatalf("step 10: outcome %v, missing %.2f, want skipped at 0.40", s.Outcome, s.MissingShare)
	}
	if diff := cmp.Diff(steps[9].Weights, s.Weights); diff != "" {
		t.Errorf("weights changed in the skipped round (-step 9 +step 10):\n%s", diff)
	}
	if steps[11].Outcome != pid.OutcomeComputed {
		t.Errorf("step 11: outcome %v, want computed", steps[11].Outcome)
	}
}

func TestPIDGoldenCSV(t *testing.T) {
	const golden = "testdata/pid-heterogeneous.csv.golden"
	sc, steps := mustPID(t, "heterogeneous")
	var got bytes.Buffer
	if err := writePIDCSV(&got, sc, steps); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("CSV differs from %s (-want +got):\n%s\nIf the change is intended, run: go test ./cmd/spillway-sim -run TestPIDGoldenCSV -update", golden, diff)
	}
}

func TestPIDRun(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"--svg", dir + "/p.svg", "pid:heterogeneous"}, &out, &errb); code != 0 {
		t.Fatalf("run = %d, stderr %q", code, errb.String())
	}
	svg, err := os.ReadFile(dir + "/p.svg")
	if err != nil || !strings.Contains(string(svg), "<polyline") {
		t.Errorf("svg = %q, %v, want a plot", svg, err)
	}
	if code := run([]string{"pid:nope"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "pid:heterogeneous") {
		t.Errorf("unknown scenario: run = %d, stderr %q, want 2 naming the scenarios", code, errb.String())
	}
}

// TestPIDStuckIOGuard is the death spiral (issue 30): an endpoint whose
// I/O degrades keeps a low CPU and fails more the more it is sent. With
// the guard and penalty off its weight climbs to several times the median
// and the service fails a third of its requests; the A58 penalty alone
// stops the climb but the endpoint still fails a quarter of its requests;
// with the guard it never sits above the median weight and the service's
// errors stay under 1%.
func TestPIDStuckIOGuard(t *testing.T) {
	sc, err := pidScenario("stuck-io")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := simulateIOAll(sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("%d variants, want off, penalty, guard", len(runs))
	}
	sum := map[string]ioSummary{}
	for _, r := range runs {
		s := summarizeIO(sc, r.Steps)
		sum[r.Variant.Name] = s
		t.Logf("%s: max w/med %.2f, final %.2f, its errors %.1f%%, service %.2f%%, failed %.0f, guarded %d", r.Variant.Name, s.MaxRatio, s.FinalRatio, 100*s.StuckRate, 100*s.ServiceRate, s.Failed, s.Guarded)
		for k, st := range r.Steps[:sc.IO.From] {
			if st.Weights[sc.IO.Endpoint] != st.Median || st.Guard != pid.GuardNone {
				t.Errorf("%s step %d: before the failure endpoint weight %d, median %d, guard %q; want the median, no guard", r.Variant.Name, k, st.Weights[sc.IO.Endpoint], st.Median, st.Guard)
			}
		}
	}
	off, pen, grd := sum["off"], sum["penalty"], sum["guard"]
	if off.MaxRatio < 3 || off.ServiceRate < 0.3 {
		t.Errorf("off: max w/med %.2f, service errors %.1f%%; want the spiral (>= 3, >= 30%%)", off.MaxRatio, 100*off.ServiceRate)
	}
	// The spiral: its weight and errors climb together.
	offSteps := runs[0].Steps
	for k := sc.IO.From + 1; k < sc.IO.From+10; k++ {
		if offSteps[k].Weights[sc.IO.Endpoint] <= offSteps[k-1].Weights[sc.IO.Endpoint] || offSteps[k].StuckRate <= offSteps[k-1].StuckRate {
			t.Errorf("off step %d: weight %d (was %d), errors %.3f (were %.3f); want both to climb", k, offSteps[k].Weights[sc.IO.Endpoint], offSteps[k-1].Weights[sc.IO.Endpoint], offSteps[k].StuckRate, offSteps[k-1].StuckRate)
		}
	}
	if pen.MaxRatio > 1 || pen.StuckRate < 0.2 {
		t.Errorf("penalty: max w/med %.2f, its errors %.1f%%; want <= 1 and still >= 20%%", pen.MaxRatio, 100*pen.StuckRate)
	}
	if grd.MaxRatio > 1 || grd.ServiceRate > 0.01 || grd.Guarded == 0 {
		t.Errorf("guard: max w/med %.2f, service errors %.2f%%, guarded %d steps; want <= 1, < 1%%, > 0", grd.MaxRatio, 100*grd.ServiceRate, grd.Guarded)
	}
	for _, st := range runs[2].Steps {
		if st.Weights[sc.IO.Endpoint] > st.Median {
			t.Fatalf("guard: endpoint weight %d above the median %d", st.Weights[sc.IO.Endpoint], st.Median)
		}
	}
}

func TestPIDStuckIORun(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"--quiet", "--svg", dir + "/g.svg", "--csv", dir + "/g.csv", "pid:stuck-io"}, &out, &errb); code != 0 {
		t.Fatalf("run = %d, stderr %q", code, errb.String())
	}
	if !strings.Contains(out.String(), "failed requests") || strings.Contains(out.String(), "# step 5") {
		t.Errorf("--quiet output:\n%s\nwant the summary only", out.String())
	}
	svg, err := os.ReadFile(dir + "/g.svg")
	if err != nil || strings.Count(string(svg), "<polyline") != 3 {
		t.Errorf("svg = %q, %v, want three lines", svg, err)
	}
	csv, err := os.ReadFile(dir + "/g.csv")
	if err != nil || strings.Count(string(csv), "\n") != 1+3*40 || !strings.HasPrefix(string(csv), "step,variant,") {
		t.Errorf("csv: %d lines, %v; want a header and 120 rows", strings.Count(string(csv), "\n"), err)
	}
}

package main

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGoldenCSV pins the CSV of degraded-zone.yaml: any change in the
// simulator or in weights/zoneaware's behaviour shows up here.
func TestGoldenCSV(t *testing.T) {
	const golden = "testdata/degraded-zone.csv.golden"
	rep := mustSimulate(t, loadScenario(t, "degraded-zone"))
	var got bytes.Buffer
	if err := writeCSV(&got, rep); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with: go test ./cmd/spillway-sim -run TestGoldenCSV -update)", err)
	}
	if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(got.String(), "\n")); diff != "" {
		t.Errorf("CSV differs from %s (-want +got):\n%s\nIf the change is intended, run: go test ./cmd/spillway-sim -run TestGoldenCSV -update", golden, diff)
	}
}

func TestCSV(t *testing.T) {
	sc := loadScenario(t, "worked-example")
	var b bytes.Buffer
	if err := writeCSV(&b, mustSimulate(t, sc)); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(rows), 1+sc.Steps*len(sc.Strategies); got != want {
		t.Fatalf("%d rows, want %d", got, want)
	}
	hdr := rows[0]
	col := func(name string) int {
		for i, h := range hdr {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %q in %v", name, hdr)
		return -1
	}
	// Row 1 is spillway at step 0 (client counts), row 4 spillway at step
	// 1 (load reports), row 5 hostcount at step 1.
	if r := rows[1]; r[col("strategy")] != "spillway" || r[col("step")] != "0" || r[col("fallback")] != "client_counts" {
		t.Errorf("row 1 = %v", r)
	}
	if r := rows[4]; r[col("strategy")] != "spillway" || r[col("step")] != "1" || r[col("time_s")] != "10" || r[col("fallback")] != "none" {
		t.Errorf("row 4 = %v", r)
	}
	r := rows[5]
	for name, want := range map[string]string{
		"strategy": "hostcount", "local_a": "0.6250", "local_b": "1.0000", "same_zone": "0.8500", "util_a": "0.5000",
		"offered_a": "250.00", "capacity_a": "500.00", "pods_b": "10", "overloaded": "", "errors_rps": "0.00",
	} {
		if got := r[col(name)]; got != want {
			t.Errorf("hostcount step 1: %s = %q, want %q", name, got, want)
		}
	}
}

// TestSVG: the plot of every scenario is well-formed XML with an svg
// root, one polyline per series, axes labels and a legend naming every
// zone.
func TestSVG(t *testing.T) {
	files, _ := filepath.Glob("scenarios/*.yaml")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			sc := loadScenario(t, name)
			rep := mustSimulate(t, sc)
			var b bytes.Buffer
			if err := writeSVG(&b, rep); err != nil {
				t.Fatal(err)
			}
			dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
			var root string
			elems := map[string]int{}
			var texts []string
			for {
				tok, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("not well-formed XML: %v", err)
				}
				switch tok := tok.(type) {
				case xml.StartElement:
					if root == "" {
						root = tok.Name.Space + " " + tok.Name.Local
					}
					elems[tok.Name.Local]++
				case xml.CharData:
					if s := strings.TrimSpace(string(tok)); s != "" {
						texts = append(texts, s)
					}
				}
			}
			if root != "http://www.w3.org/2000/svg svg" {
				t.Errorf("root element %q, want svg in the SVG namespace", root)
			}
			if got, want := elems["polyline"], len(rep.Runs)*(3+len(sc.Zones)); got != want {
				t.Errorf("%d polylines, want %d", got, want)
			}
			all := strings.Join(texts, "\n")
			want := []string{"time (s)", "utilization", "same-zone %", "error rate %", "capacity"}
			for _, z := range sc.Zones {
				want = append(want, "zone "+z)
			}
			for _, s := range sc.Strategies {
				want = append(want, s+": same-zone and errors")
			}
			for _, w := range want {
				if !strings.Contains(all, w) {
					t.Errorf("no text %q in the SVG", w)
				}
			}
		})
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	csvPath, svgPath := filepath.Join(dir, "out.csv"), filepath.Join(dir, "out.svg")
	var stdout, stderr bytes.Buffer
	code := run([]string{"--csv", csvPath, "scenarios/cold-pod.yaml", "--svg", svgPath, "--compare", "spillway,hostcount"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"scenario cold-pod: one new pod joins zone a",
		"# step 5: scale_up a +1 cold",
		"summary over 40 steps of 10s:",
		"spillway vs hostcount: errors -100.0%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "static") {
		t.Errorf("--compare spillway,hostcount still ran static")
	}
	for _, p := range []string{csvPath, svgPath} {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}

	stdout.Reset()
	if code := run([]string{"--quiet", "--probe", "0", "scenarios/worked-example.yaml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), "client_counts") || !strings.Contains(stdout.String(), "spillway vs hostcount: no errors either way, same-zone +0.0 points") {
		t.Errorf("--quiet --probe 0:\n%s", stdout.String())
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(minimal, "rps: 10", "rps: lots", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no-scenario", nil, 2, "usage: spillway-sim"},
		{"two-scenarios", []string{"a.yaml", "b.yaml"}, 2, "usage: spillway-sim"},
		{"unknown-flag", []string{"--bogus", "a.yaml"}, 2, "flag provided but not defined: -bogus"},
		{"bad-compare", []string{"--compare", "spillway,envoy", "a.yaml"}, 2, `unknown strategy "envoy"`},
		{"bad-probe", []string{"--probe", "0.5", "a.yaml"}, 2, "want 0..0.2"},
		{"missing-file", []string{filepath.Join(dir, "none.yaml")}, 2, "no such file"},
		{"bad-scenario", []string{bad}, 2, `bad.yaml: line 4: clients[0].rps: "lots", want a number`},
		{"unwritable-csv", []string{"--csv", filepath.Join(dir, "no", "such", "dir.csv"), "scenarios/worked-example.yaml"}, 1, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tc.want)
			}
		})
	}
}

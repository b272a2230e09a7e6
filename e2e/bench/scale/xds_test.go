package main

import (
	"strings"
	"testing"
)

func TestXDSFiguresCPURatioNeedsCleanWindows(t *testing.T) {
	r := newRegion(0.1)
	clean := func(target string, cpu float64) xdsResult {
		return xdsResult{Target: target, InuseKiB: 30, GrossCPUPerUpdateUS: cpu, Updates: 100}
	}
	for _, tc := range []struct {
		name             string
		spillway, linear int64 // streams reopened in the window
		wantPass         bool
		wantInNote       string
	}{
		{"both clean, ratio judged", 0, 0, true, ""},
		{"baseline reopened streams", 0, 12, false, "not comparable: 12 streams of linear failed"},
		{"spillway reopened streams", 3, 0, false, "not comparable: 3 streams of spillway failed"},
		{"both reopened streams", 3, 12, false, "not comparable: 3 streams of spillway and 12 streams of linear failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp, lin := clean("spillway", 400), clean("linear", 1000)
			sp.ReopenedInWindow, lin.ReopenedInWindow = tc.spillway, tc.linear
			got := map[string]xdsResult{
				"spillway": sp, "baseline": clean("baseline", 100000),
				"linear": lin, "linear-same": clean("linear-same", 1000),
			}
			var f *figure
			for _, g := range xdsFigures(r, r.Streams, r.Streams, got) {
				if g.Name == "CPU per stream update, spillway / LinearCache" {
					f = &g
				}
			}
			if f == nil {
				t.Fatal("no LinearCache CPU ratio among the figures")
			}
			if f.Pass == nil || *f.Pass != tc.wantPass {
				t.Errorf("Pass = %v, want %v (value %v, note %q)", f.Pass, tc.wantPass, f.Value, f.Note)
			}
			if !strings.Contains(f.Note, tc.wantInNote) {
				t.Errorf("Note = %q, want it to hold %q", f.Note, tc.wantInNote)
			}
		})
	}
}

func TestDropsText(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{-1, "unknown"}, {0, "0"}, {293097, "293097"}} {
		if got := dropsText(tc.n); got != tc.want {
			t.Errorf("dropsText(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

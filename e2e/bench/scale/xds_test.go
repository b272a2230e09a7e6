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
		name       string
		reopened   int64
		wantPass   bool
		wantInNote string
	}{
		{"both clean, ratio judged", 0, true, ""},
		{"baseline reopened streams", 12, false, "not comparable: 12 streams of linear"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lin := clean("linear", 1000)
			lin.ReopenedInWindow = tc.reopened
			got := map[string]xdsResult{
				"spillway": clean("spillway", 400), "baseline": clean("baseline", 100000),
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

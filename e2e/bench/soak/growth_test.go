package main

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// series returns a sample every 10 s from `from` to `to` (inclusive),
// with RSS rss(t) KiB and goroutines g(t).
func series(from, to time.Duration, rss func(time.Duration) int64, g func(time.Duration) int) []point {
	var out []point
	for t := from; t <= to; t += 10 * time.Second {
		out = append(out, point{At: t, RSSKiB: rss(t), Goroutines: g(t)})
	}
	return out
}

func flat[T int | int64](v T) func(time.Duration) T { return func(time.Duration) T { return v } }

func TestJudge(t *testing.T) {
	rule := growthRule{Warmup: 2 * time.Minute, Edge: time.Minute, Limit: 0.10}
	m := time.Minute
	tests := []struct {
		name        string
		start, end  time.Duration
		pts         []point
		judged, ok  bool
		rss, gorts  float64 // growths (final/base - 1) when judged
		peakRSS     float64
		from        time.Duration
		whyNotEmpty bool
	}{
		{
			name: "flat", start: 0, end: 10 * m,
			pts:    series(0, 10*m, flat[int64](100_000), flat(800)),
			judged: true, ok: true, from: 2 * m,
		},
		{
			name: "warmup_ignored", start: 0, end: 10 * m,
			// Big growth during the first 2 minutes, flat after.
			pts: series(0, 10*m, func(t time.Duration) int64 {
				return 50_000 + 50_000*int64(min(t, 2*m))/int64(2*m)
			}, flat(800)),
			judged: true, ok: true, from: 2 * m,
		},
		{
			name: "linear_leak", start: 0, end: 10 * m,
			// +500 KiB every sample after 2:00: base the median of 2:00..2:50,
			// final of 9:10..10:00.
			pts: series(0, 10*m, func(t time.Duration) int64 {
				return 100_000 + 500*int64(max(t-2*m, 0)/(10*time.Second))
			}, flat(800)),
			judged: true, ok: false, from: 2 * m,
			rss: 122_750.0/101_250 - 1, peakRSS: 124_000.0/101_250 - 1,
		},
		{
			name: "goroutine_leak", start: 0, end: 6 * m,
			pts: series(0, 6*m, flat[int64](100_000), func(t time.Duration) int {
				return 800 + int(t/(10*time.Second))*5 // 5 more every sample
			}),
			judged: true, ok: false, from: 2 * m,
			gorts: 967.5/872.5 - 1,
		},
		{
			name: "gc_sawtooth", start: 0, end: 10 * m,
			// 100 MB and 130 MB in turn: a GC cycle, not growth.
			pts: series(0, 10*m, func(t time.Duration) int64 {
				if int(t/(10*time.Second))%2 == 0 {
					return 100_000
				}
				return 130_000
			}, flat(800)),
			judged: true, ok: true, peakRSS: 130.0/115 - 1, from: 2 * m,
		},
		{
			name: "spike_that_goes_away", start: 0, end: 10 * m,
			pts: series(0, 10*m, func(t time.Duration) int64 {
				if t == 5*m {
					return 200_000
				}
				return 100_000
			}, flat(800)),
			judged: true, ok: true, peakRSS: 1, from: 2 * m,
		},
		{
			name: "restarted_process_counts_after_its_own_warmup", start: 123 * time.Second, end: 8 * m,
			// Its first samples (a relist from etcd) are high; they fall
			// before 4:03 and do not count.
			pts: series(130*time.Second, 8*m, func(t time.Duration) int64 {
				if t < 243*time.Second {
					return 300_000
				}
				return 100_000
			}, flat(800)),
			judged: true, ok: true, from: 243 * time.Second,
		},
		{
			name: "window_too_short", start: 363 * time.Second, end: 10 * m,
			pts:  series(370*time.Second, 10*m, flat[int64](100_000), flat(800)),
			from: 483 * time.Second, whyNotEmpty: true,
		},
		{
			name: "killed_before_warmup_ends", start: 0, end: 2 * m,
			pts:  series(0, 2*m, flat[int64](100_000), flat(800)),
			from: 2 * m, whyNotEmpty: true,
		},
		{
			name: "no_samples_in_the_base_window", start: 0, end: 10 * m,
			pts:  series(4*m, 10*m, flat[int64](100_000), flat(800)),
			from: 2 * m, whyNotEmpty: true,
		},
		{
			name: "one_high_sample_at_the_end_is_not_growth", start: 0, end: 6 * m,
			// A relist after a store hiccup, 10 s before a kill.
			pts: series(0, 6*m, func(t time.Duration) int64 {
				if t == 350*time.Second {
					return 180_000
				}
				return 150_000
			}, flat(800)),
			judged: true, ok: true, peakRSS: 0.2, from: 2 * m,
		},
		{
			name: "a_rise_that_holds_half_the_final_window", start: 0, end: 6 * m,
			pts: series(0, 6*m, func(t time.Duration) int64 {
				if t > 320*time.Second {
					return 180_000
				}
				return 150_000
			}, flat(800)),
			judged: true, ok: false, rss: 0.2, peakRSS: 0.2, from: 2 * m,
		},
		{
			name: "exactly_at_the_limit", start: 0, end: 4 * m,
			pts: series(0, 4*m, func(t time.Duration) int64 {
				if t > 3*m {
					return 110_000
				}
				return 100_000
			}, flat(800)),
			judged: true, ok: true, rss: 0.10, peakRSS: 0.10, from: 2 * m,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := rule.judge(tt.start, tt.end, tt.pts)
			if j.Judged != tt.judged || j.OK(rule.Limit) != tt.ok {
				t.Fatalf("judge = judged %v ok %v (%+v), want judged %v ok %v", j.Judged, j.OK(rule.Limit), j, tt.judged, tt.ok)
			}
			if j.From != tt.from || j.To != tt.end {
				t.Errorf("window = %v..%v, want %v..%v", j.From, j.To, tt.from, tt.end)
			}
			if (j.Why != "") != tt.whyNotEmpty {
				t.Errorf("Why = %q, want empty %v", j.Why, !tt.whyNotEmpty)
			}
			if !tt.judged {
				return
			}
			approx := cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })
			if diff := cmp.Diff([]float64{tt.rss, tt.gorts, tt.peakRSS}, []float64{j.RSS.Growth(), j.Gorts.Growth(), j.RSS.PeakGrowth()}, approx); diff != "" {
				t.Errorf("growth RSS, goroutines, peak RSS (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIncarnations(t *testing.T) {
	kills := []kill{
		{replica: 0, at: 120 * time.Second, restarted: 123 * time.Second, oldPID: 10, newPID: 13},
		{replica: 1, at: 240 * time.Second, restarted: 243 * time.Second, oldPID: 11, newPID: 14},
		{replica: 0, at: 480 * time.Second, restarted: 483 * time.Second, oldPID: 13, newPID: 15},
		{replica: 2, at: 360 * time.Second, oldPID: 12}, // the restart failed
	}
	got := incarnations([]int{10, 11, 12}, kills, 600*time.Second)
	s := time.Second
	want := [][]incarnation{
		{{0, 1, 10, 0, 120 * s}, {0, 2, 13, 123 * s, 480 * s}, {0, 3, 15, 483 * s, 600 * s}},
		{{1, 1, 11, 0, 240 * s}, {1, 2, 14, 243 * s, 600 * s}},
		{{2, 1, 12, 0, 360 * s}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(incarnation{})); diff != "" {
		t.Errorf("incarnations (-want +got):\n%s", diff)
	}
}

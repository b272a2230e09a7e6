package main

import (
	"fmt"
	"slices"
	"time"
)

// growthRule judges whether one process's RSS and goroutines grew over a
// run (the package documentation explains the rule).
type growthRule struct {
	// Warmup is how long after a process started (or the load started, for
	// the processes started before it) its samples begin to count.
	Warmup time.Duration
	// Edge is the width of the base window at the start of what counts and
	// of the final window at its end; each window's value is the median of
	// its samples.
	Edge time.Duration
	// Limit is the largest growth that passes, as a fraction (0.10).
	Limit float64
}

// point is one sample of one process.
type point struct {
	At         time.Duration // since the load started
	RSSKiB     int64
	Goroutines int
}

// growth is the judgement of one figure over one window.
type growth struct {
	Base  float64 // the median of the base window
	Final float64 // the median of the final window
	Peak  float64 // the largest value in the whole window
}

// Growth is Final/Base - 1.
func (g growth) Growth() float64 { return g.Final/g.Base - 1 }

// PeakGrowth is Peak/Base - 1, shown but not judged.
func (g growth) PeakGrowth() float64 { return g.Peak/g.Base - 1 }

// within reports whether Final is at most Base × (1 + limit) (so that a
// growth of exactly the limit passes whatever the rounding of Growth).
func (g growth) within(limit float64) bool { return g.Final <= g.Base*(1+limit) }

// judgement is one incarnation's verdict.
type judgement struct {
	From, To   time.Duration // the window that counts
	Judged     bool
	Why        string // when not judged
	RSS, Gorts growth
}

// OK reports whether a judged window grew no more than limit in both
// figures.
func (j judgement) OK(limit float64) bool {
	return j.Judged && j.RSS.within(limit) && j.Gorts.within(limit)
}

// judge applies the rule to the samples of one incarnation that ran from
// start to end (both since the load started; the samples are those of its
// pid, in time order).
func (r growthRule) judge(start, end time.Duration, pts []point) judgement {
	from := start + r.Warmup
	j := judgement{From: from, To: end}
	switch {
	case end <= from:
		j.Why = fmt.Sprintf("ended %v after its start, within the %v warmup", (end - start).Round(time.Second), r.Warmup)
		return j
	case end-from < 2*r.Edge:
		j.Why = fmt.Sprintf("counted window %v shorter than 2 × %v", (end - from).Round(time.Second), r.Edge)
		return j
	}
	var baseRSS, baseG, finalRSS, finalG []float64
	for _, p := range pts {
		if p.At < from || p.At > end {
			continue
		}
		rss, g := float64(p.RSSKiB), float64(p.Goroutines)
		j.RSS.Peak, j.Gorts.Peak = max(j.RSS.Peak, rss), max(j.Gorts.Peak, g)
		if p.At < from+r.Edge {
			baseRSS, baseG = append(baseRSS, rss), append(baseG, g)
		}
		if p.At > end-r.Edge {
			finalRSS, finalG = append(finalRSS, rss), append(finalG, g)
		}
	}
	nBase, nFinal := len(baseRSS), len(finalRSS)
	j.RSS.Base, j.Gorts.Base = median(baseRSS), median(baseG)
	j.RSS.Final, j.Gorts.Final = median(finalRSS), median(finalG)
	switch {
	case nBase == 0 || nFinal == 0:
		j.Why = fmt.Sprintf("%d samples in the base window, %d in the final one", nBase, nFinal)
	case j.RSS.Base <= 0 || j.Gorts.Base <= 0:
		j.Why = "a base of 0"
	default:
		j.Judged = true
	}
	return j
}

// median is the middle value of vs (the mean of the two middle ones for
// an even count), 0 for none. It sorts vs.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

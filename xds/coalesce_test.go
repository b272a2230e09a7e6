package xds

import (
	"testing"
	"time"
)

// runCoalescer replays changes at the given offsets through a coalescer on
// a virtual clock and returns when each dispatch happened and the longest
// any change waited for the dispatch that carried it.
func runCoalescer(first, limit time.Duration, changes []time.Duration) (dispatches []time.Duration, worst time.Duration) {
	co := newCoalescer(first, limit)
	var deadline time.Duration = -1 // the open window's end; -1: none
	var waiting []time.Duration     // changes gathered, not yet dispatched
	flush := func(at time.Duration) {
		dispatches = append(dispatches, at)
		for _, c := range waiting {
			worst = max(worst, at-c)
		}
		waiting = waiting[:0]
	}
	expire := func() {
		at := deadline
		dispatch, arm := co.expire()
		deadline = -1
		if dispatch {
			flush(at)
		}
		if arm > 0 {
			deadline = at + arm
		}
	}
	for _, at := range changes {
		for deadline >= 0 && deadline <= at {
			expire()
		}
		waiting = append(waiting, at)
		dispatch, arm := co.change()
		if dispatch {
			flush(at)
		}
		if arm > 0 {
			deadline = at + arm
		}
	}
	for deadline >= 0 {
		expire()
	}
	return dispatches, worst
}

func TestCoalescer(t *testing.T) {
	const debounce, limit = 100 * time.Millisecond, 800 * time.Millisecond
	spread := func(n int, over, start time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = start + over*time.Duration(i)/time.Duration(n)
		}
		return out
	}
	tests := []struct {
		name          string
		changes       []time.Duration
		maxDispatches int
		wantFirst     time.Duration // when the first dispatch happens
		maxWait       time.Duration
	}{
		{name: "lone_change_goes_out_at_once", changes: []time.Duration{5 * time.Second},
			maxDispatches: 1, wantFirst: 5 * time.Second, maxWait: 0},
		{name: "two_lone_changes_apart", changes: []time.Duration{0, 10 * time.Second},
			maxDispatches: 2, wantFirst: 0, maxWait: 0},
		{name: "pair_within_window", changes: []time.Duration{0, 30 * time.Millisecond},
			maxDispatches: 2, wantFirst: 0, maxWait: debounce},
		{name: "burst_1000_in_1s", changes: spread(1000, time.Second, 0),
			maxDispatches: 6, wantFirst: 0, maxWait: limit},
		{name: "burst_10000_in_10s", changes: spread(10000, 10*time.Second, 0),
			maxDispatches: 17, wantFirst: 0, maxWait: limit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, worst := runCoalescer(debounce, limit, tt.changes)
			if len(got) == 0 || len(got) > tt.maxDispatches {
				t.Fatalf("dispatches = %d (%v), want 1..%d", len(got), got, tt.maxDispatches)
			}
			if got[0] != tt.wantFirst {
				t.Errorf("first dispatch at %v, want %v (the leading edge)", got[0], tt.wantFirst)
			}
			if worst > tt.maxWait {
				t.Errorf("a change waited %v, want at most %v", worst, tt.maxWait)
			}
			t.Logf("%d changes: %d dispatches at %v; longest wait %v", len(tt.changes), len(got), got, worst)
		})
	}
}

func TestCoalescerQuietAfterBurst(t *testing.T) {
	// After a burst and one empty window the next change goes out at once
	// and the window starts again from the first length.
	co := newCoalescer(100*time.Millisecond, 800*time.Millisecond)
	for range 3 {
		co.change()
	}
	if d, arm := co.expire(); !d || arm != 200*time.Millisecond {
		t.Fatalf("expire after a gathered change = (%v, %v), want (true, 200ms)", d, arm)
	}
	if d, arm := co.expire(); d || arm != 0 {
		t.Fatalf("expire of an empty window = (%v, %v), want (false, 0)", d, arm)
	}
	if d, arm := co.change(); !d || arm != 100*time.Millisecond {
		t.Fatalf("change after the burst = (%v, %v), want (true, 100ms)", d, arm)
	}
}

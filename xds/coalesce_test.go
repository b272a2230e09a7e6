package xds

import (
	"fmt"
	"testing"
	"time"
)

// change is one store change in a coalescer replay: a service changed at
// an offset from the start.
type change struct {
	at      time.Duration
	service string
}

// replay is what runCoalescer saw: per service, when each dispatch that
// named it happened, and the longest any of its changes waited.
type replay struct {
	dispatches map[string][]time.Duration
	worst      map[string]time.Duration
	// open is the most windows the coalescer held at once.
	open int
}

// runCoalescer replays changes (sorted by at) through a coalescer on a
// virtual clock, expiring windows as the Run loop's timer would, and then
// lets every window end.
func runCoalescer(first, limit time.Duration, changes []change) replay {
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	co := newCoalescer(first, limit)
	r := replay{dispatches: map[string][]time.Duration{}, worst: map[string]time.Duration{}}
	waiting := map[string][]time.Duration{} // changes gathered, not yet dispatched
	flush := func(at time.Duration, services []string) {
		for _, s := range services {
			r.dispatches[s] = append(r.dispatches[s], at)
			for _, c := range waiting[s] {
				r.worst[s] = max(r.worst[s], at-c)
			}
			waiting[s] = waiting[s][:0]
		}
	}
	expireUntil := func(limit time.Duration, inclusive bool) {
		for {
			end, ok := co.next()
			if !ok {
				return
			}
			at := end.Sub(base)
			if at > limit || at == limit && !inclusive {
				return
			}
			names, _ := co.expire(end)
			flush(at, names)
		}
	}
	for _, c := range changes {
		expireUntil(c.at, true)
		waiting[c.service] = append(waiting[c.service], c.at)
		flush(c.at, co.change([]string{c.service}, base.Add(c.at)))
		r.open = max(r.open, len(co.open))
	}
	expireUntil(time.Duration(1<<62), true)
	if len(co.open) != 0 || len(co.ends) != 0 {
		panic(fmt.Sprintf("after every window ended: %d open, %d in the heap", len(co.open), len(co.ends)))
	}
	return r
}

// spread is n changes to service, evenly over the span from start.
func spread(service string, n int, over, start time.Duration) []change {
	out := make([]change, n)
	for i := range out {
		out[i] = change{start + over*time.Duration(i)/time.Duration(n), service}
	}
	return out
}

func TestCoalescer(t *testing.T) {
	const debounce, limit = 100 * time.Millisecond, 800 * time.Millisecond
	tests := []struct {
		name          string
		changes       []change
		service       string // the service checked
		maxDispatches int
		wantFirst     time.Duration // when its first dispatch happens
		maxWait       time.Duration
	}{
		{name: "lone_change_goes_out_at_once", changes: []change{{5 * time.Second, "a"}}, service: "a",
			maxDispatches: 1, wantFirst: 5 * time.Second, maxWait: 0},
		{name: "two_lone_changes_apart", changes: []change{{0, "a"}, {10 * time.Second, "a"}}, service: "a",
			maxDispatches: 2, wantFirst: 0, maxWait: 0},
		{name: "pair_within_window", changes: []change{{0, "a"}, {30 * time.Millisecond, "a"}}, service: "a",
			maxDispatches: 2, wantFirst: 0, maxWait: debounce},
		{name: "burst_1000_in_1s", changes: spread("a", 1000, time.Second, 0), service: "a",
			maxDispatches: 6, wantFirst: 0, maxWait: limit},
		{name: "burst_10000_in_10s", changes: spread("a", 10000, 10*time.Second, 0), service: "a",
			maxDispatches: 17, wantFirst: 0, maxWait: limit},
		// Steady changes: more often than MaxDelay, gathered to at most
		// one push per MaxDelay once the window has grown; less often,
		// each at once.
		{name: "every_150ms_for_10s", changes: spread("a", 67, 10*time.Second, 0), service: "a",
			maxDispatches: 17, wantFirst: 0, maxWait: limit},
		{name: "every_700ms_for_10s", changes: spread("a", 15, 10500*time.Millisecond, 0), service: "a",
			maxDispatches: 15, wantFirst: 0, maxWait: limit},
		{name: "every_2s", changes: spread("a", 5, 10*time.Second, 0), service: "a",
			maxDispatches: 5, wantFirst: 0, maxWait: 0},
		// The region's churn: one service bursting does not hold back a
		// change to another that was quiet.
		{name: "quiet_service_beside_a_burst", service: "b",
			changes:       merge(spread("a", 1000, time.Second, 0), []change{{500 * time.Millisecond, "b"}}),
			maxDispatches: 1, wantFirst: 500 * time.Millisecond, maxWait: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCoalescer(debounce, limit, tt.changes)
			got := r.dispatches[tt.service]
			if len(got) == 0 || len(got) > tt.maxDispatches {
				t.Fatalf("dispatches of %s = %d (%v), want 1..%d", tt.service, len(got), got, tt.maxDispatches)
			}
			if got[0] != tt.wantFirst {
				t.Errorf("first dispatch of %s at %v, want %v (the leading edge)", tt.service, got[0], tt.wantFirst)
			}
			if w := r.worst[tt.service]; w > tt.maxWait {
				t.Errorf("a change to %s waited %v, want at most %v", tt.service, w, tt.maxWait)
			}
			t.Logf("%d changes: %s dispatched %d times at %v; longest wait %v", len(tt.changes), tt.service, len(got), got, r.worst[tt.service])
		})
	}
}

// merge returns a and b as one list sorted by time.
func merge(a, b []change) []change {
	out := make([]change, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || i < len(a) && a[i].at <= b[j].at {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// TestCoalescerRegionChurn replays a region's churn: 1,000 changes a
// second for 10 s over 50,000 services, one hot service taking 1 % of
// them. Every service that changes less often than every MaxDelay goes
// out at once; the hot one is gathered (at most 1.25 pushes a second
// once its window reaches MaxDelay, none later than MaxDelay); and the
// coalescer holds state only for the services changed lately, not for
// every service ever changed.
func TestCoalescerRegionChurn(t *testing.T) {
	const debounce, limit = 100 * time.Millisecond, 800 * time.Millisecond
	var changes []change
	for i := range 10_000 {
		at := time.Duration(i) * time.Millisecond
		svc := fmt.Sprintf("svc-%05d", (i*7919)%50_000)
		if i%100 == 0 {
			svc = "hot"
		}
		changes = append(changes, change{at, svc})
	}
	r := runCoalescer(debounce, limit, changes)
	delayed := 0
	for s, w := range r.worst {
		switch {
		case s == "hot":
			if w > limit {
				t.Errorf("a change to the hot service waited %v, want at most %v", w, limit)
			}
		case w > 0:
			delayed++
		}
	}
	if delayed > 0 {
		t.Errorf("%d services that changed once were held back; want every one at once", delayed)
	}
	// 100 changes over 10 s, 10 a second: gathered into at most 1.25
	// pushes a second once its window reaches MaxDelay.
	if n := len(r.dispatches["hot"]); n > 20 {
		t.Errorf("the hot service was dispatched %d times for 100 changes in 10 s, want at most 20", n)
	}
	// A service stays warm for MaxDelay after its last dispatch: about
	// 800 services at once at 1,000 changes a second.
	if r.open > 1000 {
		t.Errorf("the coalescer held %d services at once, want about 800 (those dispatched in the last MaxDelay)", r.open)
	}
	t.Logf("hot: %d dispatches, longest wait %v; at most %d windows open", len(r.dispatches["hot"]), r.worst["hot"], r.open)
}

func TestCoalescerWarmThenQuiet(t *testing.T) {
	// After a burst, a window that gathers nothing leaves the service
	// warm: a change then waits for a window of the length reached. Once
	// MaxDelay has passed since its last dispatch with no change, it is
	// quiet, and the next change goes out at once with the first length.
	base := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	co := newCoalescer(100*time.Millisecond, 800*time.Millisecond)
	for i := range 3 {
		got := co.change([]string{"a"}, base.Add(time.Duration(i)*time.Millisecond))
		if want := i == 0; (len(got) == 1) != want {
			t.Fatalf("change %d dispatched %v, want at once only the first", i, got)
		}
	}
	end, _ := co.next()
	if names, first := co.expire(end); len(names) != 1 || !first.Equal(base.Add(time.Millisecond)) {
		t.Fatalf("expire after gathered changes = (%v, %v), want ([a], the second change's time)", names, first)
	}
	last := end // the trailing dispatch
	if next, _ := co.next(); next.Sub(last) != 200*time.Millisecond {
		t.Fatalf("next window ends %v after the dispatch, want 200ms", next.Sub(last))
	}
	end, _ = co.next()
	if names, _ := co.expire(end); len(names) != 0 {
		t.Fatalf("expire of an empty window = %v, want nothing", names)
	}
	// Warm: a change 300 ms after the last dispatch is gathered into a
	// window of 200 ms.
	at := last.Add(300 * time.Millisecond)
	if got := co.change([]string{"a"}, at); len(got) != 0 {
		t.Fatalf("change to a warm service dispatched %v at once, want it gathered", got)
	}
	if next, _ := co.next(); next.Sub(at) != 200*time.Millisecond {
		t.Fatalf("a warm service's window is %v, want the 200ms it had reached", next.Sub(at))
	}
	end, _ = co.next()
	if names, first := co.expire(end); len(names) != 1 || !first.Equal(at) {
		t.Fatalf("expire of the warm window = (%v, %v), want ([a], %v)", names, first, at)
	}
	last = end
	// Then nothing: the 400 ms window ends empty, and at last + 800 ms
	// the service is quiet.
	for range 2 {
		end, _ = co.next()
		if names, _ := co.expire(end); len(names) != 0 {
			t.Fatalf("expire at %v after the dispatch = %v, want nothing", end.Sub(last), names)
		}
	}
	if end.Sub(last) != 800*time.Millisecond {
		t.Errorf("quiet %v after the last dispatch, want MaxDelay, 800ms", end.Sub(last))
	}
	if _, ok := co.next(); ok || len(co.open) != 0 {
		t.Fatalf("after the warm spell: %d services held, want none", len(co.open))
	}
	at = end.Add(time.Second)
	if got := co.change([]string{"a"}, at); len(got) != 1 {
		t.Fatalf("change to a quiet service dispatched %v, want [a] at once", got)
	}
	if next, _ := co.next(); next.Sub(at) != 100*time.Millisecond {
		t.Fatalf("window after quiet is %v, want the first length, 100ms", next.Sub(at))
	}
}

// runBurst replays changes at the given offsets through a burst on a
// virtual clock and returns when each dispatch happened and the longest
// any change waited for the dispatch that carried it.
func runBurst(first, limit time.Duration, changes []time.Duration) (dispatches []time.Duration, worst time.Duration) {
	b := newBurst(first, limit)
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
		dispatch, arm := b.expire()
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
		dispatch, arm := b.change()
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

// The wildcard streams' window: changes to any services, one window.
func TestBurst(t *testing.T) {
	const debounce, limit = 100 * time.Millisecond, 800 * time.Millisecond
	at := func(cs []change) []time.Duration {
		out := make([]time.Duration, len(cs))
		for i, c := range cs {
			out[i] = c.at
		}
		return out
	}
	tests := []struct {
		name          string
		changes       []time.Duration
		maxDispatches int
		maxWait       time.Duration
	}{
		{name: "lone_change_goes_out_at_once", changes: []time.Duration{5 * time.Second}, maxDispatches: 1, maxWait: 0},
		{name: "pair_within_window", changes: []time.Duration{0, 30 * time.Millisecond}, maxDispatches: 2, maxWait: debounce},
		{name: "region_churn_1000_a_second_for_10s", changes: at(spread("any", 10000, 10*time.Second, 0)), maxDispatches: 17, maxWait: limit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, worst := runBurst(debounce, limit, tt.changes)
			if len(got) == 0 || len(got) > tt.maxDispatches {
				t.Fatalf("dispatches = %d (%v), want 1..%d", len(got), got, tt.maxDispatches)
			}
			if got[0] != tt.changes[0] {
				t.Errorf("first dispatch at %v, want %v (the leading edge)", got[0], tt.changes[0])
			}
			if worst > tt.maxWait {
				t.Errorf("a change waited %v, want at most %v", worst, tt.maxWait)
			}
		})
	}
}

func TestBurstQuietAfterBurst(t *testing.T) {
	// After a burst and one empty window the next change goes out at once
	// and the window starts again from the first length.
	b := newBurst(100*time.Millisecond, 800*time.Millisecond)
	for range 3 {
		b.change()
	}
	if d, arm := b.expire(); !d || arm != 200*time.Millisecond {
		t.Fatalf("expire after a gathered change = (%v, %v), want (true, 200ms)", d, arm)
	}
	if d, arm := b.expire(); d || arm != 0 {
		t.Fatalf("expire of an empty window = (%v, %v), want (false, 0)", d, arm)
	}
	if d, arm := b.change(); !d || arm != 100*time.Millisecond {
		t.Fatalf("change after the burst = (%v, %v), want (true, 100ms)", d, arm)
	}
}

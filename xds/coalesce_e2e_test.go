package xds_test

import (
	"slices"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

// A lone change after a quiet period is pushed at once, not after the
// debounce: with a debounce of an hour, the stream still gets it (the
// receive gives up after rawRecvTimeout, far less than an hour).
func TestLoneChangeIsNotDebounced(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{Debounce: time.Hour, Resync: time.Hour})
	c := newSotwClient(t, srv.conn)
	c.subscribe(eds, "web")
	c.ack(c.recvType(eds))
	srv.apply(t, registry.Upsert("web", rawEndpoint(2, 0)))
	resp := c.recvType(eds)
	if got := endpointCount(sotwResources(t, resp)["web"]); got != 2 {
		t.Fatalf("endpoints after the change = %d, want 2", got)
	}
}

// Each service has its own windows: while one service's burst is being
// gathered, a change to another, quiet service is pushed at once. With a
// debounce of an hour, the first change to "hot" opens its window and the
// second waits in it; "cold"'s change still reaches its stream (the
// receive gives up after rawRecvTimeout), where one window for the whole
// store held it for the hour.
func TestQuietServiceNotHeldByAnotherBurst(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"hot": 1, "cold": 1}), xds.Config{Debounce: time.Hour, Resync: time.Hour})
	hot, cold := newSotwClient(t, srv.conn), newSotwClient(t, srv.conn)
	hot.subscribe(eds, "hot")
	hot.ack(hot.recvType(eds))
	cold.subscribe(eds, "cold")
	cold.ack(cold.recvType(eds))
	srv.apply(t, registry.Upsert("hot", rawEndpoint(2, 0)))
	hot.ack(hot.recvType(eds)) // the leading edge: at once
	srv.apply(t, registry.Upsert("hot", rawEndpoint(3, 0)))
	srv.apply(t, registry.Upsert("cold", rawEndpoint(2, 0)))
	resp := cold.recvType(eds)
	if got := endpointCount(sotwResources(t, resp)["cold"]); got != 2 {
		t.Fatalf("cold's endpoints after its change = %d, want 2", got)
	}
}

// A stream with a wildcard subscription, which a change to any service
// wakes, shares one window for the whole store: after the leading edge, a
// change to another service waits in that window (an hour here), though
// it reaches the streams named for it at once. So a region's churn costs
// such a stream a handful of pushes a second, not one per service.
func TestWildcardStreamSharesOneWindow(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"a": 1}), xds.Config{Debounce: time.Hour, Resync: time.Hour})
	wild := newSotwClient(t, srv.conn)
	wild.subscribe(lds) // every service's listener
	wild.ack(wild.recvType(lds))
	named := newSotwClient(t, srv.conn)
	named.subscribe(eds, "c")
	named.ack(named.recvType(eds)) // empty: c does not exist yet

	srv.apply(t, registry.Upsert("b", rawEndpoint(1, 0)))
	resp := wild.recvType(lds) // the leading edge: at once
	if got := sotwNames(t, resp); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("wildcard listeners after b appeared = %v, want [a b]", got)
	}
	wild.ack(resp)

	srv.apply(t, registry.Upsert("c", rawEndpoint(1, 0)))
	resp = named.recvType(eds) // c's own window was quiet: at once
	if got := endpointCount(sotwResources(t, resp)["c"]); got != 1 {
		t.Fatalf("c's endpoints = %d, want 1", got)
	}
	// The Run loop has handled c's change, and marked no wildcard stream:
	// none gets a push. (A barrier would not do here: any push of a
	// wildcard stream, the barrier's answer too, re-reads its wildcard
	// types and would send c.)
	wild.expectNone(500 * time.Millisecond)
}

// A burst of 1,000 registrations in about a second reaches a stream in a
// handful of pushes (the leading change at once, then windows that double
// up to MaxDelay), every push carries new content, and the last holds all
// of them.
func TestBurstBecomesAHandfulOfPushes(t *testing.T) {
	const n = 1000
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{Debounce: 100 * time.Millisecond})
	c := newSotwClient(t, srv.conn)
	c.subscribe(eds, "web")
	c.ack(c.recvType(eds))

	const debounce, maxDelay = 100 * time.Millisecond, 800 * time.Millisecond // MaxDelay's default, 8×Debounce
	done := make(chan struct{})
	var burst time.Duration // how long the writes took; read after done
	go func() {
		defer close(done)
		// Bounded: n writes, paced over about a second.
		start := time.Now()
		defer func() { burst = time.Since(start) }()
		for i := range n {
			if _, err := srv.store.Apply(registry.Upsert("web", rawEndpoint(i+2, 0))); err != nil {
				t.Error(err)
				return
			}
			if next := start.Add(time.Second * time.Duration(i+1) / n); time.Until(next) > 0 {
				time.Sleep(time.Until(next))
			}
		}
	}()
	seen := map[string]bool{}
	pushes := 0
	for {
		resp := c.recvType(eds)
		pushes++
		if seen[resp.GetVersionInfo()] {
			t.Fatalf("push %d repeats version %s", pushes, resp.GetVersionInfo())
		}
		seen[resp.GetVersionInfo()] = true
		c.ack(resp)
		if endpointCount(sotwResources(t, resp)["web"]) == n+1 {
			break
		}
		if pushes > 50 {
			t.Fatalf("%d pushes and the stream does not hold all %d endpoints yet", pushes, n+1)
		}
	}
	<-done
	c.barrier(cds)
	// The bound follows the burst as it ran: a busy machine that took
	// three seconds for the writes gets the windows of three seconds.
	// With the writes paced exactly (one second) that is 5 pushes, at 0,
	// 0.1, 0.3, 0.7 and 1.5 s. Two more are allowed for a push that ends
	// a window late, and then starts the next late.
	want := coalescedPushes(burst, debounce, maxDelay) + 2
	t.Logf("%d registrations over %v reached the stream in %d pushes (at most %d for that burst)", n, burst.Round(time.Millisecond), pushes, want)
	if pushes > want {
		t.Errorf("pushes = %d for a burst of %v, want at most %d (the coalescing windows of that burst, plus 2)", pushes, burst.Round(time.Millisecond), want)
	}
}

// coalescedPushes is how many pushes a burst of changes lasting d makes
// when every window is twice the one before, from first up to max: the
// leading change at once, then one push at the end of each window that
// starts before the burst ends.
func coalescedPushes(d, first, max time.Duration) int {
	pushes := 1
	var end time.Duration
	for w := first; end < d; w = min(2*w, max) {
		end += w
		pushes++
	}
	return pushes
}

func TestCoalescedPushes(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 1},
		{50 * time.Millisecond, 2},
		{time.Second, 5}, // 0, 0.1, 0.3, 0.7, 1.5
		{1500 * time.Millisecond, 5},
		{3 * time.Second, 7}, // then 2.3, 3.1
	} {
		if got := coalescedPushes(tc.d, 100*time.Millisecond, 800*time.Millisecond); got != tc.want {
			t.Errorf("coalescedPushes(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

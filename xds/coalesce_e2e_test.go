package xds_test

import (
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

	done := make(chan struct{})
	go func() {
		defer close(done)
		// Bounded: n writes, paced over about a second.
		start := time.Now()
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
	t.Logf("%d registrations reached the stream in %d pushes", n, pushes)
	// 5 with the writes paced exactly (0, 0.1, 0.3, 0.7 and 1.5 s); a
	// slower machine stretches the burst by a window or two.
	if pushes > 8 {
		t.Errorf("pushes = %d, want at most 8", pushes)
	}
}

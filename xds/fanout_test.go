package xds

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testCore is a stream whose push records its name, after waiting for
// gate if it has one.
func testCore(f *fanout, name string, mu *sync.Mutex, order *[]string, gate chan struct{}) *streamCore {
	c := &streamCore{fan: f}
	c.w = newWatcher(c.wake)
	c.push = func() error {
		if gate != nil {
			<-gate
		}
		mu.Lock()
		*order = append(*order, name)
		mu.Unlock()
		c.w.take()
		return nil
	}
	return c
}

// The fan-out runs streams woken by changes before streams woken by the
// resync, each queue first in first out, and a change moves a stream that
// waits for the resync to the back of the first queue.
func TestFanoutOrder(t *testing.T) {
	f := &fanout{workers: 1, stuck: time.Hour}
	var mu sync.Mutex
	var order []string
	gate := make(chan struct{})
	blocker := testCore(f, "blocker", &mu, &order, gate)
	blocker.w.mark("x", false, time.Time{}) // occupies the only worker
	a := testCore(f, "a", &mu, &order, nil)
	b := testCore(f, "b", &mu, &order, nil)
	c := testCore(f, "c", &mu, &order, nil)
	d := testCore(f, "d", &mu, &order, nil)
	a.w.mark("", true, time.Time{})   // resync
	b.w.mark("x", false, time.Time{}) // change
	c.w.mark("", true, time.Time{})   // resync, then a change: promoted
	d.w.mark("x", false, time.Time{}) // change
	c.w.mark("x", false, time.Time{})
	a.w.mark("", true, time.Time{}) // again: keeps its place
	close(gate)
	for _, x := range []*streamCore{blocker, a, b, c, d} {
		x.wg.Wait()
	}
	want := []string{"blocker", "b", "d", "c", "a"}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("push order (-want +got):\n%s", diff)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running != 0 || !f.hot.empty() || !f.cold.empty() {
		t.Errorf("after the pushes: %d workers counted, queues empty %v/%v; want 0 and empty", f.running, f.hot.empty(), f.cold.empty())
	}
}

// A worker stuck in a push is replaced: the streams behind it go on.
func TestFanoutReplacesStuckWorker(t *testing.T) {
	f := &fanout{workers: 1, stuck: 10 * time.Millisecond}
	var mu sync.Mutex
	var order []string
	gate := make(chan struct{})
	defer close(gate)
	stuck := testCore(f, "stuck", &mu, &order, gate)
	stuck.w.mark("x", false, time.Time{})
	next := testCore(f, "next", &mu, &order, nil)
	next.w.mark("x", false, time.Time{})
	next.wg.Wait() // returns only if another worker took over
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"next"}, order); diff != "" {
		t.Errorf("pushes done while one is stuck (-want +got):\n%s", diff)
	}
}

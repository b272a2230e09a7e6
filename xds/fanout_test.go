package xds

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/internal/testwait"
)

// fanoutWait bounds every wait of these tests: far above what a push
// takes on a loaded machine, so reaching it means a push never ran.
const fanoutWait = 30 * time.Second

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
		testwait.Group(t, fanoutWait, "pushes", &x.wg)
	}
	mu.Lock()
	got := append([]string(nil), order...)
	mu.Unlock()
	want := []string{"blocker", "b", "d", "c", "a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("push order (-want +got):\n%s", diff)
	}
	// A stream's push is done before the worker that ran it looks for the
	// next one and stops counting, so the count is waited for, not read.
	testwait.For(t, fanoutWait, "workers stop once the queues are empty", func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		seen := fmt.Sprintf("%d workers counted, queues empty %v/%v", f.running, f.hot.empty(), f.cold.empty())
		return f.running == 0 && f.hot.empty() && f.cold.empty(), seen
	})
}

// A worker stuck in a push is replaced: the streams behind it go on.
func TestFanoutReplacesStuckWorker(t *testing.T) {
	f := &fanout{workers: 1, stuck: 10 * time.Millisecond}
	var mu sync.Mutex
	var order []string
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	stuck := testCore(f, "stuck", &mu, &order, gate)
	stuck.w.mark("x", false, time.Time{})
	next := testCore(f, "next", &mu, &order, nil)
	next.w.mark("x", false, time.Time{})
	testwait.Group(t, fanoutWait, "the push behind a stuck one (another worker takes over)", &next.wg)
	mu.Lock()
	if diff := cmp.Diff([]string{"next"}, order); diff != "" {
		t.Errorf("pushes done while one is stuck (-want +got):\n%s", diff)
	}
	mu.Unlock()
	// The stuck push returns: the replaced worker leaves without counting
	// itself out a second time, and once the queues are empty no worker
	// is counted and the watchdog has ended.
	release()
	testwait.Group(t, fanoutWait, "the stuck push", &stuck.wg)
	testwait.For(t, fanoutWait, "no worker counted and no watchdog once the queues are empty", func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		seen := fmt.Sprintf("%d workers counted, %d busy, watchdog running %v", f.running, len(f.busy), f.quit != nil)
		return f.running == 0 && len(f.busy) == 0 && f.quit == nil, seen
	})
}

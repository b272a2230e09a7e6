package xds

import (
	"runtime"
	"sync"
	"time"
)

// fanout runs the pushes of woken streams on a few workers, in the order
// the streams were woken (first in, first out), so that a change reaching
// ten thousand streams is not ten thousand goroutines fighting for two
// cores and no stream waits behind streams woken after it. A stream woken
// again while it waits keeps its place; one woken while its push runs goes
// to the back of the queue.
//
// A push that blocks (a client that does not read fills its HTTP/2 window
// and Send waits) must not hold up the queue: a worker whose push takes
// longer than stuck stops counting against the limit and a new worker
// takes its place; the blocked one leaves once its push returns. So a
// stuck stream holds one goroutine of its own, as before, and never a
// worker.
type fanout struct {
	workers int           // read-only: workers that drain the queue at most
	stuck   time.Duration // read-only

	// mu guards the queue and running.
	mu      sync.Mutex
	queue   []*streamCore // queue[head:] wait, oldest first
	head    int
	running int // workers counted against the limit
}

func newFanout() *fanout {
	return &fanout{workers: max(4, 2*runtime.GOMAXPROCS(0)), stuck: 100 * time.Millisecond}
}

// enqueue puts c at the back of the queue and starts a worker if fewer
// than the limit run.
func (f *fanout) enqueue(c *streamCore) {
	f.mu.Lock()
	f.queue = append(f.queue, c)
	start := f.running < f.workers
	if start {
		f.running++
	}
	f.mu.Unlock()
	if start {
		go f.work()
	}
}

// next pops the oldest waiting stream; nil (and the worker no longer
// counts) when none waits.
func (f *fanout) next() *streamCore {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.head == len(f.queue) {
		f.running--
		f.queue, f.head = f.queue[:0], 0
		if cap(f.queue) > 1024 {
			f.queue = nil // a burst's queue is not kept for good
		}
		return nil
	}
	c := f.queue[f.head]
	f.queue[f.head] = nil
	f.head++
	return c
}

// replace stops counting a worker stuck in a push and starts another if
// streams wait.
func (f *fanout) replace() {
	f.mu.Lock()
	start := f.head < len(f.queue)
	if !start {
		f.running--
	}
	f.mu.Unlock()
	if start {
		go f.work()
	}
}

func (f *fanout) work() {
	timer := time.AfterFunc(time.Hour, f.replace)
	timer.Stop()
	for {
		c := f.next()
		if c == nil {
			return
		}
		timer.Reset(f.stuck)
		c.runPush(f)
		if !timer.Stop() {
			return // replaced while its push ran
		}
	}
}

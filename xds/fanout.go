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
// There are two queues: streams woken by a change, or to answer a request,
// go before streams woken only by the periodic resync, so that a change
// does not wait behind a full re-evaluation of every stream. A stream
// waiting for a resync that a change then wakes moves to the first queue.
//
// After each push a worker yields (see work), so that the writers of the
// connections it pushed to write in turn instead of piling up.
//
// A push that blocks (a client that does not read fills its HTTP/2 window
// and Send waits) must not hold up the queue: a worker whose push takes
// longer than stuck stops counting against the limit and a new worker
// takes its place; the blocked one leaves once its push returns. So a
// stuck stream holds one goroutine of its own, as before, and never a
// worker.
type fanout struct {
	workers int           // read-only: workers that drain the queues at most
	stuck   time.Duration // read-only

	// mu guards the queues, running and every streamCore's slot.
	mu      sync.Mutex
	hot     queue // woken by a change or a request
	cold    queue // woken by a resync only
	running int   // workers counted against the limit
}

// Where a stream's entry is; streamCore.slot, guarded by fanout.mu. An
// entry popped from a queue other than its stream's slot is a leftover of
// a move from cold to hot, and is skipped.
const (
	slotNone = iota // not queued (its push may be running)
	slotHot
	slotCold
)

// queue is a FIFO of streams.
type queue struct {
	items []*streamCore // items[head:] wait, oldest first
	head  int
}

func (q *queue) push(c *streamCore) { q.items = append(q.items, c) }

func (q *queue) pop() *streamCore {
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
		if cap(q.items) > 1024 {
			q.items = nil // a burst's queue is not kept for good
		}
		return nil
	}
	c := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	return c
}

func (q *queue) empty() bool { return q.head == len(q.items) }

func newFanout() *fanout {
	return &fanout{workers: max(4, 2*runtime.GOMAXPROCS(0)), stuck: 100 * time.Millisecond}
}

// enqueue puts c at the back of a queue (cold: the resync's) and starts a
// worker if fewer than the limit run.
func (f *fanout) enqueue(c *streamCore, cold bool) {
	f.mu.Lock()
	if cold {
		c.slot = slotCold
		f.cold.push(c)
	} else {
		c.slot = slotHot
		f.hot.push(c)
	}
	start := f.running < f.workers
	if start {
		f.running++
	}
	f.mu.Unlock()
	if start {
		go f.work()
	}
}

// promote moves c, if it waits for a resync, to the back of the first
// queue.
func (f *fanout) promote(c *streamCore) {
	f.mu.Lock()
	if c.slot == slotCold {
		c.slot = slotHot
		f.hot.push(c)
	}
	f.mu.Unlock()
}

// next pops the oldest waiting stream, changes before resyncs; nil (and
// the worker no longer counts) when none waits.
func (f *fanout) next() *streamCore {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		c, slot := f.hot.pop(), slotHot
		if c == nil {
			c, slot = f.cold.pop(), slotCold
		}
		if c == nil {
			f.running--
			return nil
		}
		if c.slot == slot {
			c.slot = slotNone
			return c
		}
	}
}

// replace stops counting a worker stuck in a push and starts another if
// streams wait.
func (f *fanout) replace() {
	f.mu.Lock()
	start := !f.hot.empty() || !f.cold.empty()
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
		// Let the connection's writer, which the push woke, run before
		// the next push wakes another. grpc-go's writer takes a pooled
		// write buffer for a small response and yields once before it
		// writes, holding the buffer; a worker that pushed on without
		// yielding left one woken writer per pushed stream waiting, each
		// holding a 16 KiB buffer (up to 500 of them for a change to
		// 1,000 streams, measured), and that heap stays resident.
		runtime.Gosched()
	}
}

package xds

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
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

	// mu guards the queues, running, busy, quit and every
	// streamCore's slot.
	mu      sync.Mutex
	hot     queue     // woken by a change or a request
	cold    queue     // woken by a resync only
	running int       // workers counted against the limit
	busy    []*worker // those workers, for the watchdog
	// quit is closed to end the watchdog when the last counted worker
	// stops; nil while none runs.
	quit chan struct{}
}

// worker is one fan-out worker's clock: since is when its push began (on
// monoNow's clock), 0 between pushes, and -1 once the watchdog replaced
// it. A worker does not arm a timer per push: moving a timer earlier on
// every push made the runtime rescan every timer of the process about ten
// times a second while pushes ran, which at 16,667 client connections
// (three grpc-go timers each) was 12–14 % of the CPU of a push window.
type worker struct {
	since atomic.Int64
}

// monoStart anchors monoNow: nanoseconds on the monotonic clock, never 0.
var monoStart = time.Now()

func monoNow() int64 { return int64(time.Since(monoStart)) + 1 }

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
	w := f.startLocked()
	f.mu.Unlock()
	if w != nil {
		go f.work(w)
	}
}

// startLocked counts a new worker if fewer than the limit run, and starts
// the watchdog if none runs; nil if the limit is reached. f.mu is held.
func (f *fanout) startLocked() *worker {
	if f.running >= f.workers {
		return nil
	}
	f.running++
	w := &worker{}
	f.busy = append(f.busy, w)
	if f.quit == nil {
		f.quit = make(chan struct{})
		go f.watch(f.quit)
	}
	return w
}

// stopLocked stops counting w. f.mu is held.
func (f *fanout) stopLocked(w *worker) {
	f.running--
	if i := slices.Index(f.busy, w); i >= 0 {
		f.busy = slices.Delete(f.busy, i, i+1)
	}
	if f.running == 0 && f.quit != nil {
		close(f.quit)
		f.quit = nil
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
// w no longer counts) when none waits.
func (f *fanout) next(w *worker) *streamCore {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		c, slot := f.hot.pop(), slotHot
		if c == nil {
			c, slot = f.cold.pop(), slotCold
		}
		if c == nil {
			f.stopLocked(w)
			return nil
		}
		if c.slot == slot {
			c.slot = slotNone
			return c
		}
	}
}

// watch is the watchdog: every stuck/2 while workers are counted, it
// replaces each worker whose push has run for stuck or longer, so a push
// is replaced between stuck and 1.5×stuck after it began (for stuck of 2
// ms or more; later when the machine is too busy to tick on time). It
// ends when quit is closed: no worker is counted any more.
func (f *fanout) watch(quit <-chan struct{}) {
	tick := time.NewTicker(max(f.stuck/2, time.Millisecond))
	defer tick.Stop()
	var starts []*worker
	for {
		select {
		case <-quit:
			return
		case <-tick.C:
		}
		now := monoNow()
		f.mu.Lock()
		for i := 0; i < len(f.busy); {
			w := f.busy[i]
			since := w.since.Load()
			if since > 0 && now-since >= int64(f.stuck) && w.since.CompareAndSwap(since, -1) {
				// Replaced: it no longer counts, and another takes its
				// place if streams wait.
				f.stopLocked(w)
				if !f.hot.empty() || !f.cold.empty() {
					if nw := f.startLocked(); nw != nil {
						starts = append(starts, nw)
					}
				}
				continue
			}
			i++
		}
		f.mu.Unlock()
		for _, w := range starts {
			go f.work(w)
		}
		starts = starts[:0]
	}
}

func (f *fanout) work(w *worker) {
	for {
		c := f.next(w)
		if c == nil {
			return
		}
		began := monoNow()
		w.since.Store(began)
		c.runPush(f)
		if !w.since.CompareAndSwap(began, 0) {
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

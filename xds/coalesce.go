package xds

import (
	"container/heap"
	"slices"
	"time"
)

// coalescer decides when each service's store changes reach the streams.
// Each service has its own windows, so what one service does never holds
// back another's changes:
//   - a change to a quiet service goes out at once (the leading edge);
//   - the changes to it that follow within its window are gathered and go
//     out together when the window ends (the trailing edge), and the next
//     window is twice as long, up to max;
//   - a window that ends with nothing gathered leaves the service warm
//     until max after its last dispatch: a change then opens a window of
//     the length it had reached, and waits for its end. A service that
//     stays warm that long with no change becomes quiet again.
//
// So a change to a service that changed in the last max waits at most
// max; a service that keeps changing costs each of its streams at most
// one push per window, down to one per max (1.25 a second at the default
// 800 ms) however fast it changes; and in a region's steady churn (a
// thousand changes a second spread over tens of thousands of services)
// a service that changes less often than every max goes out at once. A
// stream that subscribes to several services gets at most a push per
// dispatch that names one of them; those dispatched while its push is
// queued or running go in its next push together (streamCore.wake).
//
// It holds an entry only for a service dispatched within the last max or
// with an open window; it is plain state for the Run loop, which owns
// the timer.
type coalescer struct {
	min, max time.Duration // read-only after newCoalescer

	open map[string]*window // by service: those not quiet
	ends windowHeap         // the same, soonest end first
}

// window is a service's coalescing state while it is not quiet.
type window struct {
	service string
	length  time.Duration // of its open window, or of the next one
	opened  bool          // a window is open; else the service is warm
	// end is when the open window ends, or when the warm service
	// becomes quiet.
	end time.Time
	// last is its last dispatch.
	last time.Time
	// first is the earliest change gathered in the open window; zero
	// when none was.
	first time.Time
	i     int // index in coalescer.ends
}

func newCoalescer(first, limit time.Duration) *coalescer {
	return &coalescer{min: first, max: max(first, limit), open: map[string]*window{}}
}

// change records that services changed at now, and returns those to
// dispatch now: the quiet ones. The others are gathered in their open
// window, or open one if they are warm.
func (c *coalescer) change(services []string, now time.Time) (dispatch []string) {
	for _, s := range services {
		w := c.open[s]
		switch {
		case w == nil:
			w = &window{service: s, length: c.min, opened: true, end: now.Add(c.min), last: now}
			c.open[s] = w
			heap.Push(&c.ends, w)
			dispatch = append(dispatch, s)
		case !w.opened:
			w.opened, w.first, w.end = true, now, now.Add(w.length)
			heap.Fix(&c.ends, w.i)
		case w.first.IsZero():
			w.first = now
		}
	}
	return dispatch
}

// expire moves on the services whose window or warm spell is over by
// now. It returns those whose window gathered changes, sorted, to
// dispatch together, and the earliest of those changes; each of them
// opens a window twice as long (up to max). A window that gathered
// nothing leaves its service warm; a warm spell that is over, quiet.
func (c *coalescer) expire(now time.Time) (dispatch []string, first time.Time) {
	for len(c.ends) > 0 && !c.ends[0].end.After(now) {
		w := c.ends[0]
		switch {
		case w.opened && !w.first.IsZero():
			dispatch = append(dispatch, w.service)
			if first.IsZero() || w.first.Before(first) {
				first = w.first
			}
			w.first, w.last = time.Time{}, now
			w.length = min(2*w.length, c.max)
			w.end = now.Add(w.length)
			heap.Fix(&c.ends, 0)
		case w.opened && w.last.Add(c.max).After(now):
			w.opened, w.end = false, w.last.Add(c.max)
			heap.Fix(&c.ends, 0)
		default:
			heap.Pop(&c.ends)
			delete(c.open, w.service)
		}
	}
	slices.Sort(dispatch)
	return dispatch, first
}

// next reports when the soonest window or warm spell ends; false when
// every service is quiet.
func (c *coalescer) next() (time.Time, bool) {
	if len(c.ends) == 0 {
		return time.Time{}, false
	}
	return c.ends[0].end, true
}

// windowHeap orders open windows by end (container/heap).
type windowHeap []*window

func (h windowHeap) Len() int           { return len(h) }
func (h windowHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h windowHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *windowHeap) Push(x any) {
	w := x.(*window)
	w.i = len(*h)
	*h = append(*h, w)
}
func (h *windowHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// burst decides when store changes reach the streams with a wildcard
// subscription, which every change to any service wakes: one window for
// the whole store, so that a region's churn costs such a stream a handful
// of pushes a second, not one per service changed. A change after a quiet
// period goes out at once (the leading edge); changes that follow it
// within the window are gathered and go out together when the window ends
// (the trailing edge). While changes keep coming, each window is twice the
// one before, up to max, so a long burst costs a handful of pushes per
// stream and no change waits longer than max. A window that ends with
// nothing gathered ends the burst: the next change goes out at once again.
//
// It is plain state for the Run loop, which owns the timer.
type burst struct {
	min, max time.Duration // read-only after newBurst

	window  time.Duration // the open window's length; 0 when quiet
	pending bool          // a change arrived inside the open window
}

func newBurst(first, limit time.Duration) burst {
	return burst{min: first, max: max(first, limit)}
}

// change records a store change. It reports whether to dispatch now, and
// the length of the window to open (0: a window is already open).
func (c *burst) change() (dispatch bool, arm time.Duration) {
	if c.window == 0 {
		c.window = c.min
		return true, c.window
	}
	c.pending = true
	return false, 0
}

// expire is called when the open window ends. It reports whether to
// dispatch what was gathered, and the next window to open (0: quiet).
func (c *burst) expire() (dispatch bool, arm time.Duration) {
	if !c.pending {
		c.window = 0
		return false, 0
	}
	c.pending = false
	c.window = min(2*c.window, c.max)
	return true, c.window
}

// alarm is the Run loop's wake-up for the end of the soonest coalescing
// window. It never moves a timer that is pending: the Go runtime answers
// a pending timer moved by Reset by walking every timer of its P when
// the moved one comes due (runtime.(*timers).adjust), and a replica of a
// region holds some fifty thousand of them (three per grpc-go
// connection). Under a region's churn the window timer was moved on
// nearly every registration, and those walks took about 7% of the
// server's CPU (BenchmarkAlarm). So an alarm asked for a time later than
// the one it will ring at keeps ringing at the earlier one (the loop
// finds nothing due and asks again), and one asked for an earlier time
// stops its timer, which the runtime drops cheaply, and starts a new one.
// It is plain state for the Run loop.
type alarm struct {
	t  *time.Timer
	at time.Time // when t rings; zero when there is no t or it rang
}

// C is the channel the alarm rings on; nil before the first set.
func (a *alarm) C() <-chan time.Time {
	if a.t == nil {
		return nil
	}
	return a.t.C
}

// rang is called after a value was received from C.
func (a *alarm) rang() { a.at = time.Time{} }

// set makes the alarm ring at at, or before if it already would.
func (a *alarm) set(at time.Time) {
	switch {
	case !a.at.IsZero() && !at.Before(a.at):
		return // rings early enough
	case a.t != nil && a.at.IsZero():
		a.t.Reset(time.Until(at)) // it rang and was read: nothing to move
	default:
		if a.t != nil {
			a.t.Stop()
		}
		a.t = time.NewTimer(time.Until(at))
	}
	a.at = at
}

package xds

import "time"

// coalescer decides when store changes reach the streams. A change after a
// quiet period goes out at once (the leading edge); changes that follow it
// within the window are gathered and go out together when the window ends
// (the trailing edge). While changes keep coming, each window is twice the
// one before, up to max, so a long burst costs a handful of pushes per
// stream and no change waits longer than max. A window that ends with
// nothing gathered ends the burst: the next change goes out at once again.
//
// It is plain state for the Run loop, which owns the timer.
type coalescer struct {
	min, max time.Duration // read-only after newCoalescer

	window  time.Duration // the open window's length; 0 when quiet
	pending bool          // a change arrived inside the open window
}

func newCoalescer(first, limit time.Duration) coalescer {
	return coalescer{min: first, max: max(first, limit)}
}

// change records a store change. It reports whether to dispatch now, and
// the length of the window to open (0: a window is already open).
func (c *coalescer) change() (dispatch bool, arm time.Duration) {
	if c.window == 0 {
		c.window = c.min
		return true, c.window
	}
	c.pending = true
	return false, 0
}

// expire is called when the open window ends. It reports whether to
// dispatch what was gathered, and the next window to open (0: quiet).
func (c *coalescer) expire() (dispatch bool, arm time.Duration) {
	if !c.pending {
		c.window = 0
		return false, 0
	}
	c.pending = false
	c.window = min(2*c.window, c.max)
	return true, c.window
}

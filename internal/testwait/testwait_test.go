package testwait

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping the
// test that uses it.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// run calls f with a recorder and returns what it failed with ("" if
// nothing).
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != any(r) {
				panic(p)
			}
		}()
		f(r)
	}()
	return r.msg
}

func TestForReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	msg := run(t, func(tb testing.TB) {
		For(tb, 10*time.Second, "third poll", func() (bool, string) {
			return n.Add(1) >= 3, fmt.Sprint(n.Load())
		})
	})
	if msg != "" || n.Load() != 3 {
		t.Errorf("For = %q after %d polls, want no failure after 3", msg, n.Load())
	}
}

func TestForFailsWithLastSeen(t *testing.T) {
	msg := run(t, func(tb testing.TB) {
		For(tb, 20*time.Millisecond, "never", func() (bool, string) { return false, "count 7" })
	})
	if !strings.Contains(msg, "never") || !strings.Contains(msg, "count 7") {
		t.Errorf("failure = %q, want it to name the wait and the last seen value", msg)
	}
}

func TestGroup(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	msg := run(t, func(tb testing.TB) { Group(tb, 20*time.Millisecond, "stuck group", &wg) })
	if !strings.Contains(msg, "stuck group") {
		t.Errorf("failure = %q, want one naming the group", msg)
	}
	wg.Done()
	if msg := run(t, func(tb testing.TB) { Group(tb, 10*time.Second, "done group", &wg) }); msg != "" {
		t.Errorf("Group on a finished group failed: %q", msg)
	}
}

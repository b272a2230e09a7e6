// Package testwait gives tests one way to wait for a condition: poll it
// until it holds or a deadline passes, then fail saying what was last
// seen. A test that waits this way never hangs and never reads state the
// instant another goroutine signalled, before that goroutine has finished
// its bookkeeping.
package testwait

import (
	"sync"
	"testing"
	"time"
)

// Poll is how often a condition is checked.
const Poll = 5 * time.Millisecond

// For polls cond until it reports true, failing t (Fatalf) once within
// has passed. cond's string says what it saw; the failure quotes the last
// one. It returns how long the wait took.
func For(t testing.TB, within time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		ok, seen := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v; last seen: %s", what, within, seen)
		}
		time.Sleep(Poll)
	}
}

// Group waits for wg like wg.Wait, failing t (Fatalf) once within has
// passed instead of hanging. The goroutine left waiting on wg after a
// failure ends when wg does.
func Group(t testing.TB, within time.Duration, what string, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("%s: not done after %v", what, within)
	}
}

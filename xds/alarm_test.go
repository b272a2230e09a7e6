package xds

import (
	"fmt"
	"testing"
	"time"
)

// TestAlarm: an alarm rings at the earliest time it was asked for since it
// last rang, and again after it is set once more. The times asked for are
// far apart (an hour against a few milliseconds), so the outcome does not
// hang on the machine's speed: the test waits up to a deadline for the
// ring that must come, and checks that the ring that must not come has
// not come while the one that must did.
func TestAlarm(t *testing.T) {
	const soon, late = 5 * time.Millisecond, time.Hour
	for _, c := range []struct {
		name string
		sets []time.Duration // from now, in order
	}{
		{"one", []time.Duration{soon}},
		{"earlier_replaces_later", []time.Duration{late, soon}},
		{"later_keeps_earlier", []time.Duration{soon, late}},
		{"earliest_of_several", []time.Duration{late, 2 * late, soon, late}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var a alarm
			for round := range 3 { // set again after each ring
				now := time.Now()
				for _, d := range c.sets {
					a.set(now.Add(d))
				}
				select {
				case at := <-a.C():
					a.rang()
					if at.Sub(now) >= late {
						t.Fatalf("round %d: rang at %v, after the earliest time asked (%v)", round, at.Sub(now), soon)
					}
				case <-time.After(time.Minute):
					t.Fatalf("round %d: no ring within a minute of asking for one in %v", round, soon)
				}
			}
			select {
			case <-a.C():
				t.Fatal("rang again without being set")
			default:
			}
		})
	}
	var a alarm
	if a.C() != nil {
		t.Fatal("an alarm never set has a channel: its select case would be live")
	}
}

// BenchmarkAlarm: what it costs the process to move the coalescing
// window's wake-up while the Run loop waits on it, among as many other
// timers as a replica of a region holds (cpu-ns/op): with
// time.Timer.Reset, as the Run loop did, and with alarm. Each op is what
// the loop does on a change: it waits on its window (far off) and on
// changes, a change comes first, the window moves nearer, and the loop
// waits for it. A timer the loop waited on stays in the runtime's heap;
// moving it there makes the runtime walk every timer of its P when the
// moved one comes due (runtime.(*timers).adjust).
func BenchmarkAlarm(b *testing.B) {
	for _, n := range []int{0, 50_000} {
		for _, how := range []string{"reset", "alarm"} {
			b.Run(fmt.Sprintf("timers=%d/%s", n, how), func(b *testing.B) {
				defer otherTimers(n)()
				const far, near = time.Second, 200 * time.Microsecond
				t := time.NewTimer(far)
				<-t.C // rang and read, as the loop leaves it
				var a alarm
				window := func() <-chan time.Time { return t.C }
				set := func(at time.Time) { t.Reset(time.Until(at)) }
				if how == "alarm" {
					window, set = a.C, a.set
				}
				change := time.NewTimer(time.Hour)
				change.Stop()
				cpu0 := processCPU()
				for b.Loop() {
					set(time.Now().Add(far))
					change.Reset(near)
					select {
					case <-change.C:
					case <-window():
						b.Fatal("the far window rang first")
					}
					set(time.Now().Add(near))
					<-window()
					a.rang()
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

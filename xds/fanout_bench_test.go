package xds

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFanoutTimers pushes through the fan-out with as many other
// timers in the process as a server with 16,667 client connections holds
// (grpc-go keeps three per connection), and reports the process's CPU per
// push (cpu-ns/op). When each worker moved a timer earlier for every
// push, the runtime rescanned every timer of a P about ten times a second
// while pushes ran, about 3 ms a scan at 50,000 timers spread over the
// heap: here 0.3–0.4 µs more per 20 µs push at 50,000 timers than at none
// (22.0–22.2 against 21.7–21.9), and 12–14 % of the server's CPU in the
// region's push window, where pushes are fewer and larger
// (docs/benchmarks.md). With the watchdog the two are equal.
func BenchmarkFanoutTimers(b *testing.B) {
	for _, n := range []int{0, 50_000} {
		b.Run(fmt.Sprintf("timers=%d", n), func(b *testing.B) {
			defer otherTimers(n)()
			f := newFanout()
			const streams = 64
			var pushes sync.WaitGroup
			cores := make([]*streamCore, streams)
			for i := range cores {
				c := &streamCore{fan: f}
				c.w = newWatcher(c.wake)
				c.push = func() error {
					c.w.take()
					// About what a small push costs the worker.
					for s := time.Now(); time.Since(s) < 20*time.Microsecond; {
					}
					pushes.Done()
					return nil
				}
				cores[i] = c
			}
			cpu0 := processCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i += streams {
				k := min(streams, b.N-i)
				pushes.Add(k)
				for _, c := range cores[:k] {
					c.w.mark("x", false, time.Time{})
				}
				pushes.Wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			for _, c := range cores {
				c.wg.Wait()
			}
		})
	}
}

// otherTimers starts n timers that do not ring during a benchmark, as a
// server with n/3 client connections holds (grpc-go keeps three per
// connection), and returns what stops them. They are made by many
// goroutines, as connections make theirs, so that every P's timer heap
// holds some, and spread over a large heap as a server's are, so that a
// walk over them misses the CPU's caches.
func otherTimers(n int) (stop func()) {
	others := make([]*time.Timer, n)
	spread := make([][]byte, n)
	var made sync.WaitGroup
	for g := range 1000 {
		made.Go(func() {
			for i := g; i < n; i += 1000 {
				spread[i] = make([]byte, 4096)
				others[i] = time.AfterFunc(time.Hour+time.Duration(i)*time.Millisecond, func() {})
			}
		})
	}
	made.Wait()
	return func() {
		clear(spread)
		for _, t := range others {
			t.Stop()
		}
	}
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

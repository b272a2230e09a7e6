package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/e2e/bench/internal/procstat"
)

// sample is one replica at one moment; the rates and counts are over the
// time since its previous sample.
type sample struct {
	At         time.Duration // since the load started
	PID        int
	Up         bool // the process ran and answered /metrics
	RSSKiB     int64
	Goroutines int
	CPUSec     float64 // utime+stime of the process since it started
	HBPerSec   float64 // heartbeats it answered found=true, per second
	XDSOpen    int64   // ADS streams open on it
	RegOK      int64   // registrations it acknowledged
	RegFailed  int64   // registration attempts on it that failed
	Err        string  // why Up is false
}

// counters is what a sample's differences are taken from.
type counters struct {
	at                time.Time
	hb, regOK, regBad int64
}

func (r *replica) counters() counters {
	return counters{at: time.Now(), hb: r.stats.hbAcked.Load(), regOK: r.stats.regOK.Load(), regBad: r.stats.regFailed.Load()}
}

// read samples the replica now, against its previous counters.
func (r *replica) read(at time.Duration, prev counters) (sample, counters) {
	cur := r.counters()
	s := sample{At: at, XDSOpen: r.stats.xdsOpen.Load(), RegOK: cur.regOK - prev.regOK, RegFailed: cur.regBad - prev.regBad}
	if d := cur.at.Sub(prev.at).Seconds(); d > 0 {
		s.HBPerSec = float64(cur.hb-prev.hb) / d
	}
	pid, up := r.up()
	s.PID = pid
	if !up {
		s.Err = "not running"
		return s, cur
	}
	rss, err := procstat.RSSKiB(pid)
	if err != nil {
		s.Err = fmt.Sprintf("VmRSS: %v", err)
		return s, cur
	}
	m, err := benchproc.Scrape("http://"+r.httpAddr+"/metrics", "go_goroutines")
	if err != nil {
		s.Err = fmt.Sprintf("/metrics: %v", err)
		return s, cur
	}
	g, ok := m["go_goroutines"]
	if !ok {
		s.Err = "/metrics: no go_goroutines"
		return s, cur
	}
	cpu, err := procstat.CPUSeconds(pid)
	if err != nil {
		s.Err = fmt.Sprintf("CPU: %v", err)
		return s, cur
	}
	s.Up, s.RSSKiB, s.Goroutines, s.CPUSec = true, rss, int(g), cpu
	return s, cur
}

// sampler samples every replica at t0, t0+every, ... up to t0+until
// (each replica in parallel) and returns the samples per replica.
func sampler(ctx context.Context, reps []*replica, t0 time.Time, every, until time.Duration) [][]sample {
	out := make([][]sample, len(reps))
	prev := make([]counters, len(reps))
	for i, r := range reps {
		prev[i] = r.counters()
		prev[i].at = t0
	}
	for k := 0; time.Duration(k)*every <= until; k++ {
		at := time.Duration(k) * every
		if !sleepUntil(ctx, t0.Add(at)) {
			break
		}
		var wg sync.WaitGroup
		for i, r := range reps {
			wg.Go(func() {
				var s sample
				s, prev[i] = r.read(at, prev[i])
				out[i] = append(out[i], s)
			})
		}
		wg.Wait()
	}
	return out
}

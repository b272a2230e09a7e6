package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/spillway/spillway/e2e/bench/consistency/model"
)

// fault is one fault the driver ran, and what it saw.
type fault struct {
	name  string
	start int64 // when it was injected (recording clock)
	end   int64 // when it was lifted
	lines []string
}

func (f *fault) logf(format string, args ...any) {
	f.lines = append(f.lines, fmt.Sprintf(format, args...))
}

// driver runs the faults against the cluster.
type driver struct {
	c    config
	rec  *model.Recorder
	etcd *proc
	reps []*replica
	rng  *rand.Rand // fault goroutine only
}

func (d *driver) secs(from int64) string {
	return fmt.Sprintf("%.2f s", time.Duration(d.rec.Now()-from).Seconds())
}

// decider returns the replica whose /readyz says it decides expiry,
// waiting up to 30 s, or -1.
func (d *driver) decider(ctx context.Context, except int) int {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		for i, r := range d.reps {
			if i != except && r.decides() {
				return i
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return -1
}

// notDecider picks a random replica that does not decide expiry.
func (d *driver) notDecider(ctx context.Context) int {
	dec := d.decider(ctx, -1)
	for {
		if i := d.rng.IntN(len(d.reps)); i != dec {
			return i
		}
	}
}

// kill sends SIGKILL to a replica (the expiry decider, or another one),
// keeps it down for --down and restarts it on the same data dir.
func (d *driver) kill(ctx context.Context, decider bool) (*fault, error) {
	f := &fault{name: "kill -9 of a replica"}
	var i int
	if decider {
		f.name = "kill -9 of the expiry decider"
		if i = d.decider(ctx, -1); i < 0 {
			return f, fmt.Errorf("%s: no replica says it decides expiry", f.name)
		}
	} else {
		i = d.notDecider(ctx)
	}
	r := d.reps[i]
	p := r.process()
	f.start = d.rec.Now()
	p.Kill()
	f.logf("SIGKILL to %s (pid %d)", r.name, p.PID())
	if decider {
		d.rec.Pause(f.start, f.start, "decider "+r.name+" killed")
		if next := d.decider(ctx, i); next >= 0 {
			f.logf("%s decides expiry %s after the kill (--election-ttl %v)", d.reps[next].name, d.secs(f.start), d.c.electionTTL)
		} else {
			f.logf("no new expiry decider within 30 s")
		}
	}
	sleep(ctx, d.c.down-time.Duration(d.rec.Now()-f.start))
	restarted := d.rec.Now()
	if err := r.start(); err != nil {
		return f, err
	}
	if err := r.waitReady(ctx); err != nil {
		return f, err
	}
	f.end = restarted
	f.logf("restarted on the same data dir and flags %s after the kill; /readyz 200 %s after the restart", time.Duration(restarted-f.start).Round(10*time.Millisecond), d.secs(restarted))
	return f, nil
}

// etcdStop sends SIGSTOP to etcd (by its pid), and SIGCONT after
// --etcd-stop.
func (d *driver) etcdStop(ctx context.Context) (*fault, error) {
	f := &fault{name: fmt.Sprintf("SIGSTOP of etcd for %v", d.c.etcdStop)}
	f.start = d.rec.Now()
	if err := d.etcd.Signal(syscall.SIGSTOP); err != nil {
		return f, fmt.Errorf("SIGSTOP etcd: %w", err)
	}
	f.logf("SIGSTOP to etcd (pid %d)", d.etcd.PID())
	down := d.watchStore(ctx, d.reps, d.c.etcdStop, false)
	if err := d.etcd.Signal(syscall.SIGCONT); err != nil {
		return f, fmt.Errorf("SIGCONT etcd: %w", err)
	}
	f.end = d.rec.Now()
	d.rec.Outage(-1, f.start, f.end, "etcd stopped (SIGSTOP)")
	d.rec.Pause(f.start, f.end, "etcd stopped (SIGSTOP)")
	f.logf("/readyz named the store unreachable after: %s", down)
	f.logf("SIGCONT after %s; /readyz up again after: %s", time.Duration(f.end-f.start).Round(10*time.Millisecond), d.watchStore(ctx, d.reps, 30*time.Second, true))
	return f, nil
}

// cut makes a replica that does not decide expiry lose the store: its
// proxy holds every connection without forwarding for --cut, then closes
// them.
func (d *driver) cut(ctx context.Context) (*fault, error) {
	f := &fault{name: fmt.Sprintf("one replica cut from etcd for %v", d.c.cut)}
	i := d.notDecider(ctx)
	r := d.reps[i]
	f.start = d.rec.Now()
	held := r.proxy.Cut()
	f.logf("%s's proxy to etcd drops traffic (%d connection ends held open)", r.name, held)
	down := d.watchStore(ctx, []*replica{r}, d.c.cut, false)
	closed := r.proxy.Restore()
	f.end = d.rec.Now()
	d.rec.Outage(i, f.start, f.end, r.name+" cut from etcd")
	f.logf("%s's /readyz named the store unreachable after: %s", r.name, down)
	f.logf("after %s the proxy closed the %d held connection ends and forwards again; /readyz up again after: %s",
		time.Duration(f.end-f.start).Round(10*time.Millisecond), closed, d.watchStore(ctx, []*replica{r}, 30*time.Second, true))
	return f, nil
}

// watchStore polls the replicas' /readyz every 200 ms for d and returns,
// per replica, how long until it said the store was up (wantUp) or
// unreachable; with wantUp it returns as soon as all have.
func (d *driver) watchStore(ctx context.Context, reps []*replica, dur time.Duration, wantUp bool) string {
	start := time.Now()
	seen := make([]time.Duration, len(reps))
	for time.Since(start) < dur && ctx.Err() == nil {
		all := true
		for i, r := range reps {
			if seen[i] != 0 {
				continue
			}
			if up, ok := r.storeUp(); ok && up == wantUp {
				seen[i] = time.Since(start)
			} else {
				all = false
			}
		}
		if all && wantUp {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	out := ""
	for i, r := range reps {
		if i > 0 {
			out += ", "
		}
		if seen[i] == 0 {
			out += r.name + " never"
		} else {
			out += fmt.Sprintf("%s %.1f s", r.name, seen[i].Seconds())
		}
	}
	return out
}

// monitor is what driver.monitor saw.
type monitor struct {
	mu      sync.Mutex // guards changes and trips
	changes []string
	trips   int
}

// monitor polls every replica's gauges every 250 ms until ctx ends,
// noting each change of expiry decider, and records a Pause for every
// time the decider's mass-expiry guard was on.
func (d *driver) monitor(ctx context.Context, m *monitor) {
	const poll = 250 * time.Millisecond
	last := -1
	var guardFrom int64 = -1
	var guardLast int64
	for ctx.Err() == nil {
		dec, guard := -1, false
		for i, r := range d.reps {
			isDec, g, err := r.gauges()
			if err == nil && isDec {
				dec, guard = i, g
			}
		}
		now := d.rec.Now()
		if dec >= 0 && dec != last {
			m.mu.Lock()
			m.changes = append(m.changes, fmt.Sprintf("%.1f s: %s", time.Duration(now).Seconds(), d.reps[dec].name))
			m.mu.Unlock()
			last = dec
		}
		switch {
		case guard && guardFrom < 0:
			guardFrom, guardLast = now-int64(poll), now
			m.mu.Lock()
			m.trips++
			m.mu.Unlock()
		case guard:
			guardLast = now
		case guardFrom >= 0 && dec >= 0:
			d.rec.Pause(guardFrom, guardLast+int64(poll), "mass-expiry guard on")
			guardFrom = -1
		}
		sleep(ctx, poll)
	}
	if guardFrom >= 0 {
		d.rec.Pause(guardFrom, d.rec.Now(), "mass-expiry guard on")
	}
}

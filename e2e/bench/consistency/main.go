// Command consistency checks spillway's consistency promise under faults:
// it records what clients of 3 replicas on one real etcd see while
// replicas are killed, etcd is stopped and a replica is cut from etcd, and
// checks the history with porcupine against the model of package
// e2e/bench/consistency/model (docs/replication.md, "What a client sees").
//
// It builds cmd/spillway once into a temporary directory, starts
// /usr/bin/etcd (--etcd) on 127.0.0.1 ports picked at random, and
// --replicas spillway processes with --store etcd://PROXY/consistency,
// each through its own TCP proxy in this process that forwards to etcd
// (so that any replica can be cut from it), with short timings:
// --lastseen-flush 1s, --election-ttl 2s, --lease-tick 500ms, leases of
// --ttl 4s.
//
// The workload, bounded in count and time: --endpoints endpoints over
// --services services (--initial at once, then one every --arrival),
// each registered through a replica over the registry gRPC API
// (registry/registryv1) and heartbeated there every --heartbeat (moving to
// the next replica when a heartbeat fails, registering again when one
// answers NotFound). A quarter are deregistered, through a random replica,
// and a quarter left to expire, --min-life to --max-life after they were
// created; the rest live to the end. Every --read-interval a reader per
// replica lists every service (ListEndpoints). Every RPC is recorded with
// its call and return time.
//
// The faults, one after another in one run (--faults), each followed by
// --settle of normal running:
//
//   - kill: SIGKILL of a random replica that does not decide expiry, down
//     for --down, restarted on the same data dir;
//   - kill-decider: SIGKILL of the replica whose /readyz says "this
//     replica decides expiry", restarted the same way;
//   - etcd-stop: SIGSTOP of the etcd process (by its pid) for
//     --etcd-stop, then SIGCONT;
//   - cut: a replica that does not decide expiry loses etcd: its proxy
//     stops forwarding and holds every connection open, reading and writing
//     nothing, for --cut, then closes them.
//
// After the last fault no endpoint is created; the run goes on for a
// cool-down long enough for every abandoned lease to expire. Then the
// history is checked with porcupine (model.Check) under the promise
// (--bound, the TTL, the grace and the resume and recovery times), and
// under a ladder of bounds to find the smallest one that passes. It
// prints the history's size, each fault's outcome, porcupine's result per
// partition (endpoint), and the largest staleness seen in each phase
// (model.Lags); on a violation it names the endpoints, lists their stale
// reads and writes porcupine's visualization to --viz. --out also writes
// the report to a file.
//
// Usage, from the repository root (about 5 minutes):
//
//	go run ./e2e/bench/consistency
//	go run ./e2e/bench/consistency --faults cut --guard-share 1 --out /tmp/cut.md
//
// Everything runs on 127.0.0.1; every loop is bounded in count and time;
// the processes are stopped by pid on exit, including on Ctrl-C, and die
// with the driver if it is killed (Pdeathsig). The exit code is 1 on a
// violation.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spillway/spillway/e2e/bench/consistency/model"
)

// probe is the replicas' store probe interval (registrysync's default).
const probe = time.Second

type config struct {
	replicas     int
	endpoints    int
	initial      int
	arrival      time.Duration
	services     int
	ttl          time.Duration
	beat         time.Duration
	readEvery    time.Duration
	minLife      time.Duration
	maxLife      time.Duration
	writeTimeout time.Duration
	bound        time.Duration
	recovery     time.Duration
	flush        time.Duration
	electionTTL  time.Duration
	leaseTick    time.Duration
	settle       time.Duration
	down         time.Duration
	etcdStop     time.Duration
	cut          time.Duration
	faults       []string
	guardShare   string
	seed         int64
	etcdBin      string
	out          string
	viz          string
	logs         string
	checkTimeout time.Duration
}

var allFaults = []string{"kill", "kill-decider", "etcd-stop", "cut"}

func main() {
	var c config
	var faults string
	flag.IntVar(&c.replicas, "replicas", 3, "spillway replicas sharing the etcd store")
	flag.IntVar(&c.endpoints, "endpoints", 300, "endpoints the workload creates in all")
	flag.IntVar(&c.initial, "initial", 150, "endpoints created at the start")
	flag.DurationVar(&c.arrival, "arrival", time.Second, "one more endpoint every arrival, until the faults are over")
	flag.IntVar(&c.services, "services", 4, "services the endpoints are spread over")
	flag.DurationVar(&c.ttl, "ttl", 4*time.Second, "lease TTL asked at registration (whole seconds)")
	flag.DurationVar(&c.beat, "heartbeat", time.Second, "heartbeat interval of every endpoint")
	flag.DurationVar(&c.readEvery, "read-interval", 150*time.Millisecond, "each replica lists every service this often")
	flag.DurationVar(&c.minLife, "min-life", 3*time.Second, "shortest time before an endpoint is deregistered or abandoned")
	flag.DurationVar(&c.maxLife, "max-life", 20*time.Second, "longest time before an endpoint is deregistered or abandoned")
	flag.DurationVar(&c.writeTimeout, "write-timeout", 7*time.Second, "bound on one Register or Deregister RPC")
	flag.DurationVar(&c.bound, "bound", 2*time.Second, "the promise's bound N on propagation and expiry")
	flag.DurationVar(&c.recovery, "recovery", 2*time.Second, "how soon after its store outage ends a replica is back within N")
	flag.DurationVar(&c.flush, "lastseen-flush", time.Second, "the replicas' --lastseen-flush")
	flag.DurationVar(&c.electionTTL, "election-ttl", 2*time.Second, "the replicas' --election-ttl")
	flag.DurationVar(&c.leaseTick, "lease-tick", 500*time.Millisecond, "the replicas' --lease-tick")
	flag.DurationVar(&c.settle, "settle", 20*time.Second, "normal running before the first fault and after each")
	flag.DurationVar(&c.down, "down", 3*time.Second, "how long a killed replica stays down")
	flag.DurationVar(&c.etcdStop, "etcd-stop", 30*time.Second, "how long etcd stays stopped")
	flag.DurationVar(&c.cut, "cut", 20*time.Second, "how long the cut replica's proxy drops traffic")
	flag.StringVar(&faults, "faults", strings.Join(allFaults, ","), "faults to run, in order: "+strings.Join(allFaults, ", "))
	flag.StringVar(&c.guardShare, "guard-share", "", "the replicas' --guard-share (empty: spillway's default; 1 disables the mass-expiry guard)")
	flag.Int64Var(&c.seed, "seed", 0, "random seed (0: from the clock)")
	flag.StringVar(&c.etcdBin, "etcd", "/usr/bin/etcd", "etcd server binary")
	flag.StringVar(&c.out, "out", "", "also write the report, with every partition's result, to this file")
	flag.StringVar(&c.viz, "viz", filepath.Join(os.TempDir(), "spillway-consistency.html"), "porcupine's visualization of violating endpoints goes here")
	flag.StringVar(&c.logs, "logs", "", "keep the processes' logs in this directory (default: removed with the run's temporary directory)")
	flag.DurationVar(&c.checkTimeout, "check-timeout", 2*time.Minute, "bound on each porcupine call")
	flag.Parse()
	if faults != "" {
		c.faults = strings.Split(faults, ",")
	}
	if c.seed == 0 {
		c.seed = time.Now().UnixNano()
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "consistency:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Pdeathsig fires when the thread that started a child exits: keep the
	// children's parent thread alive for the whole run.
	runtime.LockOSThread()
	ok, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consistency:", err)
		stop()
		os.Exit(1)
	}
	if !ok {
		stop()
		os.Exit(1)
	}
}

func (c config) validate() error {
	for _, f := range c.faults {
		if !slices.Contains(allFaults, f) {
			return fmt.Errorf("--faults: %q, want some of %v", f, allFaults)
		}
	}
	switch {
	case c.replicas < 2:
		return fmt.Errorf("--replicas: %d, want >= 2", c.replicas)
	case c.endpoints < 1 || c.endpoints > 60000:
		return fmt.Errorf("--endpoints: %d, want 1..60000", c.endpoints)
	case c.initial < 0:
		return fmt.Errorf("--initial: %d, want >= 0", c.initial)
	case c.arrival < 10*time.Millisecond:
		return fmt.Errorf("--arrival: %v, want >= 10ms", c.arrival)
	case c.services < 1:
		return fmt.Errorf("--services: %d, want >= 1", c.services)
	case c.ttl < time.Second || c.ttl%time.Second != 0:
		return fmt.Errorf("--ttl: %v, want whole seconds >= 1s", c.ttl)
	case c.beat <= 0 || c.beat > c.ttl/2:
		return fmt.Errorf("--heartbeat: %v, want > 0 and at most half the TTL", c.beat)
	case c.readEvery < 10*time.Millisecond:
		return fmt.Errorf("--read-interval: %v, want >= 10ms", c.readEvery)
	case c.minLife <= 0 || c.maxLife < c.minLife:
		return fmt.Errorf("--min-life %v, --max-life %v: want 0 < min <= max", c.minLife, c.maxLife)
	case c.bound <= 0:
		return fmt.Errorf("--bound: %v, want > 0", c.bound)
	case c.writeTimeout <= 0 || c.recovery < 0 || c.down < 0:
		return errors.New("--write-timeout: want > 0; --recovery, --down: want >= 0")
	case c.settle < 0 || c.settle > 10*time.Minute, c.etcdStop > 10*time.Minute, c.cut > 10*time.Minute:
		return errors.New("--settle, --etcd-stop and --cut: at most 10m each")
	}
	return nil
}

// promise is the promise checked, from the flags: the grace is
// --lastseen-flush plus two probes; expiry resumes after a pause within an
// election TTL, the grace, a probe and a lease tick.
func (c config) promise(bound time.Duration) model.Promise {
	grace := c.flush + 2*probe
	return model.Promise{
		Propagation: bound, TTL: c.ttl, Grace: grace,
		Resume:   c.electionTTL + grace + probe + c.leaseTick,
		Recovery: c.recovery,
	}
}

func run(ctx context.Context, c config) (bool, error) {
	dir, err := os.MkdirTemp("", "consistency-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	logDir := dir
	if c.logs != "" {
		if err := os.MkdirAll(c.logs, 0o755); err != nil {
			return false, fmt.Errorf("--logs: %w", err)
		}
		logDir = c.logs
	}
	fmt.Fprintln(os.Stderr, "building spillway into", dir)
	bin := filepath.Join(dir, "spillway")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/spillway")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return false, fmt.Errorf("go build ./cmd/spillway (run from the repository root): %w", err)
	}
	etcd, etcdAddr, err := startEtcd(ctx, dir, logDir, c.etcdBin)
	if err != nil {
		return false, err
	}
	defer etcd.Stop()
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.close()
			r.proxy.Close()
		}
	}()
	for i := range c.replicas {
		px, err := newProxy(etcdAddr)
		if err != nil {
			return false, err
		}
		r, err := newReplica(i, bin, dir, logDir, px, c)
		if err != nil {
			px.Close()
			return false, err
		}
		reps = append(reps, r)
		if err := r.start(); err != nil {
			return false, err
		}
	}
	for _, r := range reps {
		if err := r.waitReady(ctx); err != nil {
			return false, err
		}
	}
	fmt.Fprintf(os.Stderr, "etcd pid %d and %d replicas ready; seed %d\n", etcd.PID(), len(reps), c.seed)

	sw, stopWatch, err := watchRegistrations(ctx, etcdAddr)
	if err != nil {
		return false, fmt.Errorf("watch etcd: %w", err)
	}
	defer stopWatch()
	rec := model.NewRecorder()
	d := &driver{c: c, rec: rec, etcd: etcd, reps: reps, rng: rand.New(rand.NewPCG(uint64(c.seed), 0xfa17))}
	w := newWorkload(c, rec, reps)
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	stopCreating := make(chan struct{})
	workDone := make(chan struct{})
	go func() { w.run(wctx, stopCreating); close(workDone) }()
	mctx, stopMonitor := context.WithCancel(ctx)
	mon := &monitor{}
	monDone := make(chan struct{})
	go func() { d.monitor(mctx, mon); close(monDone) }()
	defer func() { stopMonitor(); <-monDone }()

	var faults []*fault
	sleep(ctx, c.settle)
	for _, name := range c.faults {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "%.0f s: fault %s\n", time.Duration(rec.Now()).Seconds(), name)
		var f *fault
		switch name {
		case "kill":
			f, err = d.kill(ctx, false)
		case "kill-decider":
			f, err = d.kill(ctx, true)
		case "etcd-stop":
			f, err = d.etcdStop(ctx)
		case "cut":
			f, err = d.cut(ctx)
		}
		faults = append(faults, f)
		if err != nil {
			stopWorkload()
			<-workDone
			return false, err
		}
		sleep(ctx, c.settle)
	}
	close(stopCreating)
	cool := c.maxLife + c.ttl + c.promise(c.bound).Grace + c.promise(c.bound).Resume + 5*time.Second
	fmt.Fprintf(os.Stderr, "%.0f s: faults over; cool-down %v\n", time.Duration(rec.Now()).Seconds(), cool)
	sleep(ctx, cool)
	stopWorkload()
	<-workDone
	stopMonitor()
	<-monDone // the pauses it saw are recorded
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	h := rec.History()
	return report(c, h, faults, w, mon, sw)
}

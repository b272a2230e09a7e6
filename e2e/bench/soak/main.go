// Command soak runs 3 spillway replicas on one real etcd under a steady
// load for 10 minutes, killing one replica every 2 minutes, and checks
// that nothing acknowledged is lost, that no live endpoint expires and
// that no replica's memory or goroutines keep growing (issue #27, item 8).
//
// It builds cmd/spillway once into a temporary directory (or takes --bin),
// starts /usr/bin/etcd (--etcd; one member, default settings) and
// --replicas spillway processes with --store etcd://127.0.0.1:PORT/soak,
// their own --data-dir and default timings (--lastseen-flush 10s,
// --election-ttl 5s, --lease-tick 1s), everything on 127.0.0.1. Then:
//
//   - Leases: --leases endpoints over --services services are registered
//     over the registry gRPC API (registry/registryv1), endpoint n first
//     on replica n%N, with --ttl, and heartbeated every
//     --heartbeat-interval (a tenth of them each tenth of it) over
//     HeartbeatStream streams: per tick one stream per replica for the
//     leases it holds (--heartbeat-batch leases at most a stream). When a
//     stream fails or ends early, the leases it did not answer move to the
//     next replica and are heartbeated there at once, as the agent of
//     clientlib/heartbeat moves; they stay there. A heartbeat of a live
//     lease answered found=false is a live endpoint expired: it is counted
//     and the endpoint registers again.
//   - xDS: --xds-streams raw ADS streams (state of the world, the
//     go-control-plane discovery protos), stream i on replica i%N, each
//     subscribed to one service's Cluster and ClusterLoadAssignment and
//     ACKing every response; a stream that ends is opened again on the
//     same replica after a backoff of 250 ms to 2 s, like a grpc-go client
//     of one server (so each replica keeps its share of streams across
//     the kills, which keeps the growth check fair).
//   - Churn: --churn times a second a new endpoint is registered (round
//     robin over the replicas, the next one after a failure) and a random
//     live one is deregistered (its heartbeats stop first).
//   - Kills: every --kill-every, replica k%N gets SIGKILL (by the pid this
//     command started), stays down --down, and is started again with the
//     same flags and data dir.
//   - Samples: every --sample-every, per replica, VmRSS (/proc/PID/status),
//     go_goroutines (its /metrics), its CPU time (/proc/PID/stat), the
//     heartbeats it acknowledged per second, the ADS streams open on it
//     and the registrations it acknowledged and refused.
//
// After --duration the churn and the kills stop; the heartbeats and the
// streams go on for --settle, then every replica lists every service
// (ListEndpoints) and the checks run:
//
//   - 0 acknowledged registrations lost: every endpoint whose latest
//     registration was acknowledged and that was not deregistered is
//     listed by every replica (a listing names no lease: a lease id is
//     its holder's secret);
//   - 0 live endpoints expired: no heartbeat of a live lease answered
//     found=false, and every delete of a registration in etcd (watched
//     directly with go.etcd.io/etcd/client/v3) is of an endpoint that was
//     being deregistered;
//   - 0 deregistered endpoints still listed; every killed replica came back;
//   - growth: see below.
//
// # The growth rule
//
// A killed replica is a new process, with its own warm-up (it lists the
// whole registry from etcd, its caches fill), so the rule is applied per
// process. A process's samples count from --warmup (2m) after it started,
// or after the load started for the processes started before it, to its
// kill or the end of --duration. Its base is the median of the samples in
// the first --growth-edge (1m) of that window, its final value the median
// of those in the last --growth-edge; growth = final / base − 1 must be at
// most --growth-limit (10%) for RSS and for goroutines. Medians, because
// one sample is not a trend: the Go heap is a sawtooth, and when etcd
// stalls every replica lists the whole registry again, a spike of about
// 20 MiB at 20,000 endpoints that the runtime gives back within a minute
// (the first full run caught one 10 s before a kill: +11.5% compared by
// maxima, +5.0% by medians). A rise that holds for more than half of the
// last --growth-edge is growth; a spike is not (the window's peak is
// printed beside it, not judged). A window shorter than twice
// --growth-edge is not judged, and a replica none of whose processes was
// judged fails. With the defaults (10m; kills at 2:00, 4:00, 6:00 and
// 8:00 of r0, r1, r2, r0, each back 3 s later) the judged windows are r0
// 4:03–8:00, r1 2:00–4:00 and 6:03–10:00, r2 2:00–6:00; the others are too
// short (r2's second process, 8:03–10:00, by 3 s).
//
// It prints markdown (the load, the kills, a table per replica over time,
// the growth per process, the checks and the verdict) and writes it to
// --out; --csv writes every sample. The exit code is 1 when a check fails.
//
// Usage, from the repository root (scripts/soak.sh wraps it):
//
//	go run ./e2e/bench/soak                      # 10 minutes
//	go run ./e2e/bench/soak --short              # a 90 s smoke run: kills every 30s
//	go run ./e2e/bench/soak --duration 30m --out /tmp/soak.md --logs /tmp/soak-logs
//
// Every load loop is bounded in count and in time; only processes this
// command started are signalled, by pid; they are stopped on exit,
// including on Ctrl-C, and die with the driver if it is killed
// (Pdeathsig).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	pb "github.com/spillway/spillway/registry/registryv1"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/e2e/bench/internal/procstat"
)

type config struct {
	replicas    int
	leases      int
	services    int
	xdsStreams  int
	xdsPerConn  int
	churn       float64
	duration    time.Duration
	killEvery   time.Duration
	down        time.Duration
	ttl         time.Duration
	beat        time.Duration
	hbBatch     int
	sampleEvery time.Duration
	tableEvery  time.Duration
	warmup      time.Duration
	edge        time.Duration
	limit       float64
	settle      time.Duration
	seed        int64
	etcdBin     string
	bin         string
	out, csv    string
	logs        string
	short       bool
}

// shortDefaults are the flags --short changes, unless they are given.
var shortDefaults = map[string]string{
	"duration": "90s", "kill-every": "30s", "sample-every": "5s", "table-every": "10s",
	"warmup": "20s", "growth-edge": "15s",
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "soak")
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		log.Error("bad flags", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Pdeathsig fires when the thread that started a child exits: keep
	// the first children's parent thread alive for the whole run.
	runtime.LockOSThread()
	ok, err := run(ctx, c, log)
	if err != nil {
		log.Error("soak failed", "err", err)
		stop()
		os.Exit(1)
	}
	if !ok {
		stop()
		os.Exit(1)
	}
}

// parseFlags reads the command line: --short changes the flags of
// shortDefaults that are not given, then the whole is validated.
func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.IntVar(&c.replicas, "replicas", 3, "spillway replicas sharing the etcd store")
	fs.IntVar(&c.leases, "leases", 20000, "endpoints registered at the start and heartbeated (churn keeps the count)")
	fs.IntVar(&c.services, "services", 200, "services the endpoints and the xDS streams are spread over")
	fs.IntVar(&c.xdsStreams, "xds-streams", 2000, "ADS streams, spread over the replicas")
	fs.IntVar(&c.xdsPerConn, "xds-per-conn", 100, "ADS streams per gRPC connection")
	fs.Float64Var(&c.churn, "churn", 50, "registrations per second of new endpoints, each with the deregistration of a live one")
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "length of the load (at most 30m)")
	fs.DurationVar(&c.killEvery, "kill-every", 2*time.Minute, "SIGKILL of a replica, round robin, this often (0: none)")
	fs.DurationVar(&c.down, "down", 3*time.Second, "how long a killed replica stays down")
	fs.DurationVar(&c.ttl, "ttl", 30*time.Second, "lease TTL asked at registration (whole seconds)")
	fs.DurationVar(&c.beat, "heartbeat-interval", 10*time.Second, "each lease is heartbeated once per interval")
	fs.IntVar(&c.hbBatch, "heartbeat-batch", 2000, "most leases heartbeated over one stream")
	fs.DurationVar(&c.sampleEvery, "sample-every", 10*time.Second, "sample every replica this often")
	fs.DurationVar(&c.tableEvery, "table-every", time.Minute, "a row of the per-replica tables this often (a multiple of --sample-every; --csv has every sample)")
	fs.DurationVar(&c.warmup, "warmup", 2*time.Minute, "a process's samples count from this long after its start")
	fs.DurationVar(&c.edge, "growth-edge", time.Minute, "width of the base and final windows of the growth rule")
	fs.Float64Var(&c.limit, "growth-limit", 0.10, "largest growth of RSS and goroutines that passes")
	fs.DurationVar(&c.settle, "settle", 15*time.Second, "after the load, how long the heartbeats go on before the replicas are listed")
	fs.Int64Var(&c.seed, "seed", 1, "random seed (which endpoints are deregistered)")
	fs.StringVar(&c.etcdBin, "etcd", "/usr/bin/etcd", "etcd server binary")
	fs.StringVar(&c.bin, "bin", "", "spillway binary to run (default: build ./cmd/spillway)")
	fs.StringVar(&c.out, "out", "", "also write the report to this file")
	fs.StringVar(&c.csv, "csv", "", "write every sample to this CSV file")
	fs.StringVar(&c.logs, "logs", "", "keep the processes' logs and the replicas' final goroutine profiles in this directory")
	fs.BoolVar(&c.short, "short", false, "a 90 s smoke run: --duration 90s --kill-every 30s --sample-every 5s --table-every 10s --warmup 20s --growth-edge 15s, unless given")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range shortDefaults {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return c, fmt.Errorf("--short: --%s %s: %w", name, v, err)
				}
			}
		}
	}
	return c, c.validate()
}

func (c config) validate() error {
	switch {
	case c.replicas < 2 || c.replicas > 9:
		return fmt.Errorf("--replicas: %d, want 2..9", c.replicas)
	case c.leases < 1 || c.leases > 200000:
		return fmt.Errorf("--leases: %d, want 1..200000", c.leases)
	case c.services < 1 || c.services > 10000:
		return fmt.Errorf("--services: %d, want 1..10000", c.services)
	case c.xdsStreams < 0 || c.xdsStreams > 20000:
		return fmt.Errorf("--xds-streams: %d, want 0..20000", c.xdsStreams)
	case c.xdsPerConn < 1 || c.xdsPerConn > 1000:
		return fmt.Errorf("--xds-per-conn: %d, want 1..1000 (spillway's --grpc-max-streams-per-conn)", c.xdsPerConn)
	case c.churn < 0 || c.churn > 1000:
		return fmt.Errorf("--churn: %g, want 0..1000", c.churn)
	case c.duration < 30*time.Second || c.duration > 30*time.Minute:
		return fmt.Errorf("--duration: %v, want 30s..30m", c.duration)
	case c.killEvery != 0 && c.killEvery < 10*time.Second:
		return fmt.Errorf("--kill-every: %v, want 0 or >= 10s", c.killEvery)
	case c.down < 0 || c.down > time.Minute:
		return fmt.Errorf("--down: %v, want 0..1m", c.down)
	case c.ttl < 3*time.Second || c.ttl%time.Second != 0:
		return fmt.Errorf("--ttl: %v, want whole seconds >= 3s", c.ttl)
	case c.beat < 10*slots*time.Millisecond || c.beat > c.ttl/2:
		return fmt.Errorf("--heartbeat-interval: %v, want 100ms..half the TTL (%v)", c.beat, c.ttl/2)
	case c.hbBatch < 1:
		return fmt.Errorf("--heartbeat-batch: %d, want >= 1", c.hbBatch)
	case c.sampleEvery < time.Second || c.sampleEvery > time.Minute:
		return fmt.Errorf("--sample-every: %v, want 1s..1m", c.sampleEvery)
	case c.tableEvery < c.sampleEvery || c.tableEvery%c.sampleEvery != 0:
		return fmt.Errorf("--table-every: %v, want a multiple of --sample-every %v", c.tableEvery, c.sampleEvery)
	case c.warmup < 0 || c.edge < c.sampleEvery:
		return fmt.Errorf("--warmup %v, --growth-edge %v: want >= 0 and >= --sample-every", c.warmup, c.edge)
	case c.limit <= 0:
		return fmt.Errorf("--growth-limit: %g, want > 0", c.limit)
	case c.settle < 0 || c.settle > 5*time.Minute:
		return fmt.Errorf("--settle: %v, want 0..5m", c.settle)
	}
	return nil
}

// setupTimeout bounds everything before the load starts: the build,
// etcd, the replicas, the first registrations, the xDS streams.
const setupTimeout = 10 * time.Minute

func run(ctx context.Context, c config, log *slog.Logger) (bool, error) {
	dir, err := os.MkdirTemp("", "soak-")
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
	res := &result{c: c, date: time.Now(), loadBefore: benchproc.LoadAvg(), cpus: runtime.NumCPU(),
		machine: fmt.Sprintf("%d CPUs, %s, %s/%s", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)}
	setup, cancelSetup := context.WithTimeout(ctx, setupTimeout)
	defer cancelSetup()

	bin := c.bin
	res.spillway = "binary " + bin
	if bin == "" {
		log.Info("building spillway", "dir", dir)
		if bin, err = benchproc.BuildSpillway(setup, dir); err != nil {
			return false, err
		}
		res.spillway = "built from the working tree" + gitDescribe()
	}
	res.etcdVersion = benchproc.EtcdVersion(c.etcdBin)
	etcd, etcdAddr, err := benchproc.StartEtcd(setup, "soak", dir, logDir, c.etcdBin)
	if err != nil {
		return false, fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Stop()

	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	for i := range c.replicas {
		r, err := newReplica(i, bin, dir, logDir, etcdAddr)
		if err != nil {
			return false, err
		}
		reps = append(reps, r)
		if _, err := r.start(); err != nil {
			return false, err
		}
	}
	for _, r := range reps {
		if err := r.waitReady(setup); err != nil {
			return false, err
		}
		res.pids = append(res.pids, r.process().PID())
	}
	log.Info("replicas ready", "etcd_pid", etcd.PID(), "pids", res.pids)

	w := newWorkload(c, log, reps)
	sw, err := watchStore(ctx, etcdAddr, w.classify, w.since)
	if err != nil {
		return false, err
	}
	defer sw.stop()
	start := time.Now()
	if err := w.registerInitial(setup); err != nil {
		return false, err
	}
	res.initialWall = time.Since(start)
	if err := waitListed(setup, reps, c.leases); err != nil {
		return false, err
	}
	log.Info("registered", "leases", c.leases, "took", res.initialWall.Round(time.Millisecond))

	// The load's loops run on load (ended after the checks); the churn and
	// the kills stop at --duration.
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	xf, err := openXDS(load, c, reps)
	if err != nil {
		return false, err
	}
	defer xf.close()
	if err := xf.waitSynced(setup, 3*time.Minute); err != nil {
		return false, err
	}
	log.Info("xds streams open", "streams", c.xdsStreams)

	t0 := time.Now()
	w.t0.Store(t0.UnixNano())
	etcdCPU0, _ := procstat.CPUSeconds(etcd.PID())
	driverCPU0, _ := procstat.CPUSeconds(os.Getpid())
	hard := c.duration + c.settle + 10*time.Minute // every loop's bound in time
	loadCtx, stopHard := context.WithTimeout(load, hard)
	defer stopHard()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeats(loadCtx, int(hard/(c.beat/slots)))
	}()
	stopChurn := make(chan struct{})
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); w.churn(loadCtx, stopChurn, c.duration) }()
	killCtx, stopKills := context.WithTimeout(loadCtx, c.duration)
	defer stopKills()
	killsDone := make(chan []kill, 1)
	go func() { killsDone <- killer(killCtx, log, reps, t0, c.killEvery, c.down, c.duration) }()
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
	samplesDone := make(chan [][]sample, 1)
	go func() { samplesDone <- sampler(loadCtx, reps, t0, c.sampleEvery, c.duration) }()

	log.Info("load started", "duration", c.duration)
	end := time.NewTimer(c.duration)
	defer end.Stop()
waiting:
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-progress.C:
			log.Info("progress", "t", clock(time.Since(t0)), "live", w.liveCount(), "expired", len(w.expiries()),
				"xds_open", xdsOpen(reps), "reg_failed", sumStat(reps, func(s *repStats) int64 { return s.regFailed.Load() }))
		case <-end.C:
			break waiting
		}
	}
	res.elapsed = time.Since(t0)
	res.hbAtEnd = sumStat(reps, func(s *repStats) int64 { return s.hbAcked.Load() })
	etcdCPU1, _ := procstat.CPUSeconds(etcd.PID())
	driverCPU1, _ := procstat.CPUSeconds(os.Getpid())
	res.etcdCPU, res.driverCPU = etcdCPU1-etcdCPU0, driverCPU1-driverCPU0
	close(stopChurn)
	res.kills = <-killsDone
	res.samples = <-samplesDone
	<-churnDone
	log.Info("load over; settling", "settle", c.settle)
	if !sleep(ctx, c.settle) {
		return false, ctx.Err()
	}
	res.served = w.checkServed(ctx)
	stopLoad()
	<-hbDone
	w.regWait.Wait() // after the heartbeats: they start these
	xf.close()
	if err := sw.catchUp(ctx, 30*time.Second); err != nil {
		log.Warn("etcd watch behind", "err", err)
	}
	res.storePuts, res.deletes, res.oddDeletes, res.watchErr = sw.summary()
	res.expired = w.expiries()
	res.t = collect(w, xf, reps)
	if c.logs != "" {
		saveProfiles(log, reps, c.logs)
	}
	res.loadAfter = benchproc.LoadAvg()

	md, ok := res.report()
	fmt.Print(md)
	var werr error
	if c.out != "" {
		werr = errors.Join(werr, writeFile("--out", c.out, md))
	}
	if c.csv != "" {
		werr = errors.Join(werr, writeFile("--csv", c.csv, res.csv()))
	}
	return ok, werr
}

func writeFile(flagName, path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	return nil
}

// collect sums the loops' counters.
func collect(w *workload, xf *xdsFleet, reps []*replica) totals {
	sum := func(f func(*repStats) int64) int64 { return sumStat(reps, f) }
	return totals{
		hbAcked:       sum(func(s *repStats) int64 { return s.hbAcked.Load() }),
		hbNotFound:    sum(func(s *repStats) int64 { return s.hbNotFound.Load() }),
		hbStreamFails: sum(func(s *repStats) int64 { return s.hbStreamFails.Load() }),
		hbMoved:       w.hbMoved.Load(), hbGaveUp: w.hbGaveUp.Load(), hbMismatch: w.hbMismatch.Load(),
		regOK:        sum(func(s *repStats) int64 { return s.regOK.Load() }),
		regFailed:    sum(func(s *repStats) int64 { return s.regFailed.Load() }),
		regAbandoned: w.regAbandoned.Load(), regAgain: w.regAgain.Load(),
		deregOK:       sum(func(s *repStats) int64 { return s.deregOK.Load() }),
		deregFailed:   sum(func(s *repStats) int64 { return s.deregFailed.Load() }),
		deregNotFound: w.deregNotFound.Load(), deregAbandoned: w.deregAbandoned.Load(),
		churnAdds: w.churnAdds.Load(), churnRemoves: w.churnRemoves.Load(), churnDrop: w.churnDrop.Load(),
		xdsOpened:    sum(func(s *repStats) int64 { return s.xdsOpened.Load() }),
		xdsFailed:    sum(func(s *repStats) int64 { return s.xdsFailed.Load() }),
		xdsResponses: sum(func(s *repStats) int64 { return s.xdsResponses.Load() }),
		xdsEDS:       xf.eds.Load(), xdsCDS: xf.cds.Load(),
		liveAtEnd: w.liveCount(), hbFailCodes: w.streamFailures(),
	}
}

func sumStat(reps []*replica, f func(*repStats) int64) int64 {
	var n int64
	for _, r := range reps {
		n += f(r.stats)
	}
	return n
}

func xdsOpen(reps []*replica) int64 {
	return sumStat(reps, func(s *repStats) int64 { return s.xdsOpen.Load() })
}

// waitListed waits (at most 2 minutes) until every replica lists want
// endpoints (ListServices).
func waitListed(ctx context.Context, reps []*replica, want int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, r := range reps {
		for {
			lctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			resp, err := r.reg.ListServices(lctx, &pb.ListServicesRequest{})
			cancel()
			n := 0
			for _, s := range resp.GetServices() {
				n += int(s.Endpoints)
			}
			if n >= want {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("replica %s lists %d endpoints, want %d (err %v)", r.name, n, want, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// saveProfiles writes each running replica's goroutine profile (debug=1:
// counts per stack) to dir, for reading a growth.
func saveProfiles(log *slog.Logger, reps []*replica, dir string) {
	client := &http.Client{Timeout: 10 * time.Second}
	for _, r := range reps {
		resp, err := client.Get("http://" + r.httpAddr + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			log.Warn("goroutine profile", "replica", r.name, "err", err)
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, r.name+"-goroutines.txt"), b, 0o644)
		}
		if err != nil {
			log.Warn("goroutine profile", "replica", r.name, "err", err)
		}
	}
}

// gitDescribe is " at <commit>" (with "+ local changes" when the tree has
// them), read-only, or "" outside a git checkout.
func gitDescribe() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	s := " at " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		s += " + local changes"
	}
	return s
}

// Command xdsbench is the xDS fan-out benchmark: spillway's ADS server
// against a minimal go-control-plane server (e2e/bench/xdsbench/baseline),
// side by side in one run, with the same data and the same clients.
//
// For each K in --streams and each target it builds and starts a fresh
// server on loopback, loads the data set (--services services of
// --endpoints endpoints over --zones zones; into spillway through the
// registry gRPC API, the baseline builds the same set itself), and opens K
// raw state-of-the-world ADS streams with the go-control-plane discovery v3
// client stubs, --streams-per-conn streams per gRPC connection. Stream i has
// node id xdsbench-<i>, node.locality.zone zone i%zones and subscribes to
// Listener, RouteConfiguration, Cluster and ClusterLoadAssignment of service
// i%services; it ACKs every response. Once every stream has its initial EDS
// it measures:
//
//   - RSS per stream: the server's VmRSS with the streams open minus VmRSS
//     before the first stream, over K. Each VmRSS is read twice, --settle
//     apart, after --settle; the later reading counts.
//   - Fan-out: --changes endpoint changes, one after the other, each on a
//     different service, alternately adding a new endpoint and removing an
//     existing one (spillway: Register/Deregister; baseline: its HTTP
//     /change, which calls SetSnapshot for every zone). For each change, the
//     time from just before the call to each stream subscribed to that
//     service receiving an EDS response that shows the change (the address
//     present or gone). p50/p99/max over all those latencies. The next
//     change starts once every affected stream has it, no response has
//     arrived for --quiet, and --gap has passed.
//   - CPU per change: the server's utime+stime (/proc/PID/stat) over the
//     whole change window, over --changes; and the server's CPU over an
//     idle window of the same length right after (capped at --max-idle and
//     scaled), also over --changes, so that "net" = CPU − idle is the cost
//     of a change. Responses that arrive in the idle window (e.g. follow-up
//     weight pushes) are counted and shown. The driver's own CPU over the
//     change window is shown too: it shares the cores with the server.
//
// It prints a table per K with the ratios spillway/baseline against the
// targets (RSS and p99 at most 1/2, net CPU at most 1/3 of the baseline's),
// and writes the tables as markdown to --out if set.
//
// Usage, from the repository root:
//
//	go run ./e2e/bench/xdsbench --target both --streams 1000,10000
//	go run ./e2e/bench/xdsbench --target baseline --streams 1000 --out /tmp/xds.md
//
// Everything runs on 127.0.0.1; every wait is bounded; the servers are
// stopped on exit, including on Ctrl-C, and die with the driver if it is
// killed (Pdeathsig). The driver raises its own RLIMIT_NOFILE to the hard
// limit. Clients and servers share the machine's cores: the fan-out
// latencies include the clients' own work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spillway/spillway/e2e/bench/xdsbench/internal/benchdata"
)

// config is the command line.
type config struct {
	targets       []string
	streams       []int
	services      int
	endpoints     int
	zones         int
	changes       int
	perConn       int
	settle        time.Duration
	quiet         time.Duration
	gap           time.Duration
	syncTimeout   time.Duration
	changeTimeout time.Duration
	maxIdle       time.Duration
	out           string
	keep          string
	spillwayBin   string
	baselineBin   string
	commandLine   string
	baselinePprof bool
}

// result is one target at one K.
type result struct {
	target string
	k      int
	err    error

	rssBeforeKiB, rssAfterKiB int64
	setup                     time.Duration // stream open to all initial EDS
	badInitial                int64         // initial EDS with a wrong endpoint count

	lat          []time.Duration // every affected stream's fan-out latency
	missed       int             // affected streams that never saw their change
	calls        []time.Duration // change call durations
	cpu, idleCPU float64         // seconds over the change window and the idle window
	window       time.Duration
	responses    [len(typeURLs)]int64 // responses received during the change window
	idleResp     int64                // responses received during the idle window
	clientCPU    float64              // the driver's own CPU seconds over the change window
}

func (r *result) rssPerStream() float64 {
	return float64(r.rssAfterKiB-r.rssBeforeKiB) / float64(r.k)
}

func (r *result) perChange(x float64) float64 { return x / float64(max(1, len(r.calls))) }

func (r *result) netCPU() float64 { return max(0, r.perChange(r.cpu)-r.perChange(r.idleCPU)) }

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "xdsbench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if lim, err := raiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "xdsbench: raise RLIMIT_NOFILE:", err)
	} else if need := uint64(slices.Max(cfg.streams)/cfg.perConn + 100); lim < need {
		fmt.Fprintf(os.Stderr, "xdsbench: RLIMIT_NOFILE is %d, want at least %d\n", lim, need)
		return 1
	}

	work, err := os.MkdirTemp("", "xdsbench.")
	if err != nil {
		fmt.Fprintln(os.Stderr, "xdsbench:", err)
		return 1
	}
	defer os.RemoveAll(work)
	logDir := work
	if cfg.keep != "" {
		logDir = cfg.keep
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "xdsbench:", err)
			return 1
		}
	}
	if err := build(ctx, &cfg, work); err != nil {
		fmt.Fprintln(os.Stderr, "xdsbench:", err)
		return 1
	}

	fmt.Printf("== xdsbench: %s\n", machine())
	fmt.Printf("== %d services x %d endpoints over %d zones; %d changes; %d streams per connection\n",
		cfg.services, cfg.endpoints, cfg.zones, cfg.changes, cfg.perConn)
	var tables []string
	failed := false
	for _, k := range cfg.streams {
		var rs []*result
		for _, t := range cfg.targets {
			if ctx.Err() != nil {
				break
			}
			r := runOne(ctx, &cfg, t, k, work, logDir)
			if r.err != nil {
				failed = true
				fmt.Printf("   %s K=%d FAILED: %v\n", t, k, r.err)
			}
			rs = append(rs, r)
		}
		tbl := table(&cfg, k, rs)
		fmt.Println()
		fmt.Println(tbl)
		tables = append(tables, tbl)
	}
	if cfg.out != "" {
		if err := writeMarkdown(&cfg, cfg.out, tables); err != nil {
			fmt.Fprintln(os.Stderr, "xdsbench:", err)
			return 1
		}
		fmt.Println("wrote", cfg.out)
	}
	if cfg.keep != "" {
		fmt.Println("server logs in", cfg.keep)
	}
	if ctx.Err() != nil {
		return 130
	}
	if failed {
		return 1
	}
	return 0
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("xdsbench", flag.ContinueOnError)
	target := fs.String("target", "both", "spillway, baseline or both")
	streams := fs.String("streams", "1000,10000", "comma-separated stream counts K, each a separate run")
	var cfg config
	fs.IntVar(&cfg.services, "services", 100, "services in the data set")
	fs.IntVar(&cfg.endpoints, "endpoints", 9, "endpoints per service")
	fs.IntVar(&cfg.zones, "zones", 3, "zones (endpoints and clients round-robin)")
	fs.IntVar(&cfg.changes, "changes", 20, "endpoint changes measured per run, each on a different service")
	fs.IntVar(&cfg.perConn, "streams-per-conn", 100, "ADS streams per client gRPC connection")
	fs.DurationVar(&cfg.settle, "settle", 3*time.Second, "wait before each of the two RSS readings")
	fs.DurationVar(&cfg.quiet, "quiet", 500*time.Millisecond, "a change is over when no response arrived for this long")
	fs.DurationVar(&cfg.gap, "gap", time.Second, "pause after a change is over, before the next")
	fs.DurationVar(&cfg.syncTimeout, "sync-timeout", 5*time.Minute, "limit on opening all streams and getting their initial EDS")
	fs.DurationVar(&cfg.changeTimeout, "change-timeout", 60*time.Second, "limit on one change reaching all affected streams, and on going quiet")
	fs.DurationVar(&cfg.maxIdle, "max-idle", 3*time.Minute, "cap on the idle CPU window (scaled up to the change window if capped)")
	fs.StringVar(&cfg.out, "out", "", "also write the tables as markdown to this file")
	fs.StringVar(&cfg.keep, "keep", "", "directory to keep the server logs in (default: a temp dir, removed)")
	fs.BoolVar(&cfg.baselinePprof, "baseline-pprof", false, "save the baseline's heap and goroutine profiles after the sync and a CPU profile of the change window (up to 60 s) into the --keep directory")
	fs.StringVar(&cfg.spillwayBin, "spillway-bin", "", "prebuilt spillway binary (default: go build ./cmd/spillway)")
	fs.StringVar(&cfg.baselineBin, "baseline-bin", "", "prebuilt baseline binary (default: go build ./e2e/bench/xdsbench/baseline)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.commandLine = "go run ./e2e/bench/xdsbench " + strings.Join(args, " ")
	switch *target {
	case "both":
		cfg.targets = []string{"spillway", "baseline"}
	case "spillway", "baseline":
		cfg.targets = []string{*target}
	default:
		return cfg, fmt.Errorf("--target: %q, want spillway, baseline or both", *target)
	}
	for f := range strings.SplitSeq(*streams, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return cfg, fmt.Errorf("--streams: %q is not a positive number", f)
		}
		cfg.streams = append(cfg.streams, k)
	}
	if err := benchdata.Validate(cfg.services, cfg.endpoints, cfg.zones); err != nil {
		return cfg, err
	}
	switch {
	case cfg.changes < 1 || cfg.changes > cfg.services:
		return cfg, fmt.Errorf("--changes: %d, want 1..%d (one service each)", cfg.changes, cfg.services)
	case cfg.perConn < 1:
		return cfg, fmt.Errorf("--streams-per-conn: %d, want >= 1", cfg.perConn)
	case cfg.settle < 0 || cfg.gap < 0:
		return cfg, errors.New("--settle and --gap must not be negative")
	case cfg.quiet <= 0 || cfg.syncTimeout <= 0 || cfg.changeTimeout <= 0 || cfg.maxIdle <= 0:
		return cfg, errors.New("--quiet, --sync-timeout, --change-timeout and --max-idle must be positive")
	}
	if slices.Min(cfg.streams) < cfg.services {
		fmt.Fprintf(os.Stderr, "xdsbench: warning: K=%d < %d services: some changes have no affected stream\n", slices.Min(cfg.streams), cfg.services)
	}
	return cfg, nil
}

// build compiles the binaries that were not given, from the module root.
func build(ctx context.Context, cfg *config, work string) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	for _, b := range []struct {
		target string
		bin    *string
		pkg    string
	}{
		{"spillway", &cfg.spillwayBin, "./cmd/spillway"},
		{"baseline", &cfg.baselineBin, "./e2e/bench/xdsbench/baseline"},
	} {
		if !slices.Contains(cfg.targets, b.target) || *b.bin != "" {
			continue
		}
		out := filepath.Join(work, b.target)
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		cmd := exec.CommandContext(bctx, "go", "build", "-o", out, b.pkg)
		cmd.Dir = root
		msg, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, msg)
		}
		*b.bin = out
	}
	return nil
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the spillway module: run from the repository root")
	}
	return filepath.Dir(gomod), nil
}

// runOne measures one target at one K on a fresh server.
func runOne(ctx context.Context, cfg *config, target string, k int, work, logDir string) *result {
	r := &result{target: target, k: k}
	say := func(format string, a ...any) {
		fmt.Printf("   %-8s K=%-6d %s\n", target, k, fmt.Sprintf(format, a...))
	}
	fmt.Printf("\n== %s, K=%d\n", target, k)
	services := benchdata.Services(cfg.services, cfg.endpoints, cfg.zones)
	plan, err := benchdata.Plan(services, cfg.zones, cfg.changes)
	if err != nil {
		r.err = err
		return r
	}
	dir := filepath.Join(logDir, fmt.Sprintf("k%d", k))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.err = err
		return r
	}
	var srv *server
	switch target {
	case "spillway":
		srv, err = startSpillway(ctx, cfg.spillwayBin, dir, services)
	case "baseline":
		srv, err = startBaseline(ctx, cfg.baselineBin, dir, cfg.services, cfg.endpoints, cfg.zones, cfg.baselinePprof)
	}
	if err != nil {
		r.err = err
		return r
	}
	defer srv.stop()
	say("server pid %d, ADS on %s; data loaded", srv.pid(), srv.adsAddr)

	settled := func() (int64, error) {
		var v int64
		for range 2 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(cfg.settle):
			}
			if err := srv.alive(); err != nil {
				return 0, err
			}
			var err error
			if v, err = rssKiB(srv.pid()); err != nil {
				return 0, err
			}
		}
		return v, nil
	}
	if r.rssBeforeKiB, err = settled(); err != nil {
		r.err = err
		return r
	}
	say("RSS before streams: %d KiB", r.rssBeforeKiB)

	start := time.Now()
	fl, err := openFleet(ctx, srv.adsAddr, k, cfg.perConn, services, benchdata.Zones(cfg.zones))
	if err != nil {
		r.err = explain(target, err)
		return r
	}
	defer fl.close()
	if err := fl.waitSynced(ctx, cfg.syncTimeout, func(n int64) { say("%d of %d streams synced", n, k) }); err != nil {
		if aerr := srv.alive(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		r.err = explain(target, err)
		return r
	}
	r.setup = time.Since(start)
	r.badInitial = fl.badInitial.Load()
	if !fl.waitQuiet(ctx, cfg.quiet, cfg.changeTimeout) {
		r.err = errors.Join(errors.New("streams did not go quiet after the initial sync"), fl.err, ctx.Err())
		return r
	}
	say("%d streams on %d connections synced in %v (%d initial EDS with a wrong endpoint count)",
		k, len(fl.conns), r.setup.Round(time.Millisecond), r.badInitial)
	if r.rssAfterKiB, err = settled(); err != nil {
		r.err = err
		return r
	}
	say("RSS with streams: %d KiB (%.1f KiB per stream)", r.rssAfterKiB, r.rssPerStream())
	profiling := target == "baseline" && cfg.baselinePprof
	var cpuProfile chan error
	if profiling {
		for _, p := range []string{"heap", "goroutine"} {
			if err := srv.savePprof(ctx, p, filepath.Join(dir, "baseline-"+p+".pprof")); err != nil {
				say("pprof %s: %v", p, err)
			}
		}
		cpuProfile = make(chan error, 1)
		go func() {
			secs := min(60, cfg.changes*3)
			cpuProfile <- srv.savePprof(ctx, fmt.Sprintf("profile?seconds=%d", secs), filepath.Join(dir, "baseline-cpu.pprof"))
		}()
	}

	// Changes.
	cpu0, err := cpuSeconds(srv.pid())
	if err != nil {
		r.err = err
		return r
	}
	self0, err := cpuSeconds(os.Getpid())
	if err != nil {
		r.err = err
		return r
	}
	resp0 := fl.totalResponses()
	t0 := time.Now()
	for _, c := range plan {
		p := newPendingChange(c, fl.affected(c.Service))
		p.start = time.Now()
		fl.pending[c.Service].Store(p)
		cctx, cancel := context.WithTimeout(ctx, cfg.changeTimeout)
		err := srv.change(cctx, c)
		cancel()
		r.calls = append(r.calls, time.Since(p.start))
		if err != nil {
			fl.pending[c.Service].Store(nil)
			r.err = fmt.Errorf("change %d: %w", c.Seq, err)
			return r
		}
		timer := time.NewTimer(cfg.changeTimeout)
		select {
		case <-p.done:
		case <-timer.C:
		case <-fl.errCh:
		case <-ctx.Done():
		}
		timer.Stop()
		fl.pending[c.Service].Store(nil)
		lat := p.latencies()
		r.lat = append(r.lat, lat...)
		r.missed += p.want - len(lat)
		if fl.err != nil || ctx.Err() != nil {
			r.err = errors.Join(fl.err, ctx.Err(), srv.alive())
			return r
		}
		if !fl.waitQuiet(ctx, cfg.quiet, cfg.changeTimeout) {
			say("change %d: streams still receiving after %v", c.Seq, cfg.changeTimeout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(cfg.gap):
		}
	}
	r.window = time.Since(t0)
	cpu1, err := cpuSeconds(srv.pid())
	if err != nil {
		r.err = err
		return r
	}
	r.cpu = cpu1 - cpu0
	if self1, err := cpuSeconds(os.Getpid()); err == nil {
		r.clientCPU = self1 - self0
	}
	resp1 := fl.totalResponses()
	for j := range r.responses {
		r.responses[j] = resp1[j] - resp0[j]
	}
	say("%d changes in %v: server CPU %.2f s, driver CPU %.2f s; %d fan-out samples, %d missed", len(plan), r.window.Round(time.Millisecond), r.cpu, r.clientCPU, len(r.lat), r.missed)
	if profiling {
		if err := <-cpuProfile; err != nil {
			say("pprof profile: %v", err)
		}
		say("profiles in %s", dir)
	}

	// Idle window of the same length (capped, then scaled).
	idle := min(r.window, cfg.maxIdle)
	cpuA, err := cpuSeconds(srv.pid())
	if err != nil {
		r.err = err
		return r
	}
	idleResp0 := fl.totalResponses()
	select {
	case <-ctx.Done():
		r.err = ctx.Err()
		return r
	case <-time.After(idle):
	}
	cpuB, err := cpuSeconds(srv.pid())
	if err != nil {
		r.err = err
		return r
	}
	r.idleCPU = (cpuB - cpuA) * float64(r.window) / float64(idle)
	idleResp := fl.totalResponses()
	for j := range idleResp {
		r.idleResp += idleResp[j] - idleResp0[j]
	}
	say("idle %v: server CPU %.2f s (scaled to the change window: %.2f s); %d responses while idle", idle.Round(time.Millisecond), cpuB-cpuA, r.idleCPU, r.idleResp)
	if err := srv.alive(); err != nil {
		r.err = err
	}
	return r
}

// explain adds a hint to the error of a server without ADS.
func explain(target string, err error) error {
	if target == "spillway" && isUnimplemented(err) {
		return fmt.Errorf("spillway does not serve ADS yet (the xds package is not wired into cmd/spillway): %w", err)
	}
	return err
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 1) of
// sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// table renders the results at one K, with ratios if both targets ran.
func table(cfg *config, k int, rs []*result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "K = %d streams (%d services x %d endpoints, %d zones; %d changes, %d affected streams each)\n\n",
		k, cfg.services, cfg.endpoints, cfg.zones, cfg.changes, k/cfg.services)
	fmt.Fprintln(&b, "| target | RSS/stream KiB | fan-out p50 ms | p99 ms | max ms | samples (missed) | CPU s/change | idle CPU s/change | net CPU s/change | responses/change (L/R/C/E) | idle responses | change call p50 ms | driver CPU s/change | setup s |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	byTarget := map[string]*result{}
	for _, r := range rs {
		if r.err != nil {
			fmt.Fprintf(&b, "| %s | failed: %s |\n", r.target, oneLine(r.err))
			continue
		}
		byTarget[r.target] = r
		lat := slices.Clone(r.lat)
		slices.Sort(lat)
		calls := slices.Clone(r.calls)
		slices.Sort(calls)
		m := float64(max(1, len(r.calls)))
		fmt.Fprintf(&b, "| %s | %.1f | %s | %s | %s | %d (%d) | %.3f | %.3f | %.3f | %.0f/%.0f/%.0f/%.0f | %d | %s | %.3f | %.1f |\n",
			r.target, r.rssPerStream(), ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(percentile(lat, 1)),
			len(r.lat), r.missed, r.perChange(r.cpu), r.perChange(r.idleCPU), r.netCPU(),
			float64(r.responses[0])/m, float64(r.responses[1])/m, float64(r.responses[2])/m, float64(r.responses[3])/m,
			r.idleResp, ms(percentile(calls, 0.5)), r.perChange(r.clientCPU), r.setup.Seconds())
	}
	s, okS := byTarget["spillway"]
	bl, okB := byTarget["baseline"]
	if okS && okB {
		sl, bll := slices.Clone(s.lat), slices.Clone(bl.lat)
		slices.Sort(sl)
		slices.Sort(bll)
		var rows strings.Builder
		ratio := func(name string, spill, base, want float64) {
			if base <= 0 {
				fmt.Fprintf(&rows, "| %s | n/a (baseline is 0) | at most %.2f | |\n", name, want)
				return
			}
			verdict := "meets"
			if spill/base > want {
				verdict = "misses"
			}
			fmt.Fprintf(&rows, "| %s | %.2f | at most %.2f | %s |\n", name, spill/base, want, verdict)
		}
		ratio("RSS per stream", s.rssPerStream(), bl.rssPerStream(), 0.5)
		ratio("fan-out p99", float64(percentile(sl, 0.99)), float64(percentile(bll, 0.99)), 0.5)
		ratio("net CPU per change", s.netCPU(), bl.netCPU(), 1.0/3)
		fmt.Fprintf(&b, "\n| spillway/baseline | ratio | target | |\n|---|---:|---:|---|\n%s", rows.String())
	}
	fmt.Fprintf(&b, "\nLoad average after K=%d: %s (the server, the %d client streams and anything else share %d CPUs).\n", k, loadAverage(), k, runtime.NumCPU())
	return b.String()
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// machine describes the machine for the report.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s, load average %s, %s", runtime.NumCPU(), model, runtime.Version(), loadAverage(), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}

// loadAverage is the 1, 5 and 15 minute load average: a busy machine
// (other work sharing the cores) shows here.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func writeMarkdown(cfg *config, path string, tables []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := io.Writer(f)
	fmt.Fprintf(w, "## xDS fan-out (`e2e/bench/xdsbench`)\n\n%s\n\n```\n%s\n```\n\n", machine(), cfg.commandLine)
	for _, t := range tables {
		fmt.Fprintln(w, t)
	}
	fmt.Fprintln(w, "RSS/stream: server VmRSS with the streams open minus before, over K. Fan-out: from just before the change call to each subscribed stream's EDS showing it. "+
		"CPU: server utime+stime over the change window, over the number of changes; idle: the same over an equally long idle window; net = CPU − idle. "+
		"Responses/change: responses of each type (Listener/Route/Cluster/EDS) all streams received per change; idle responses: all responses during the idle window. "+
		"Driver CPU: the benchmark client's own CPU over the change window, per change (it shares the cores with the server).")
	return f.Close()
}

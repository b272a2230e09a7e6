// Command xdsbench is the xDS fan-out benchmark: spillway's ADS server
// against a go-control-plane server set up as its users set it up
// (e2e/bench/xdsbench/baseline: SnapshotCache, a snapshot per zone, a
// version per resource type), with the same data and the same clients, in
// one run.
//
// A row is one K in --streams and one layout in --streams-per-conn (1 is
// what grpc-go clients do: one ADS stream per target, one connection per
// target). Each row runs --rounds rounds; a round runs every target once,
// the order alternating (spillway first in odd rounds), each on a freshly
// started server on loopback. A run loads the data set (--services services
// of --endpoints endpoints over --zones zones; into spillway through the
// registry gRPC API, the baseline builds the same set itself) and opens K
// raw state-of-the-world ADS streams with the go-control-plane discovery v3
// client stubs. Stream i has node id xdsbench-<i>, node.locality.zone zone
// i%zones and subscribes to Listener, RouteConfiguration, Cluster and
// ClusterLoadAssignment of service i%services; it ACKs every response. Once
// every stream has its initial EDS it measures:
//
//   - RSS per stream: the server's VmRSS with the streams open minus VmRSS
//     before the first stream, over K. Each VmRSS is read twice, --settle
//     apart, after --settle; the later reading counts. With --steady (the
//     default) it also prints the same figure in steady state: each server
//     runs exactly one runtime.GC (GET /debug/pprof/heap?gc=1, both
//     servers serve /debug/pprof/) before the streams and again with them,
//     then VmRSS is read as above after --scavenge (the background
//     scavenger's time), and the runtime's stack bytes in use per stream
//     (the heap profile's "# Stack" line) before and after that GC, and
//     the heap and stacks in use right after it ("# HeapInuse" plus
//     "# Stack"): a Go server keeps freed garbage's pages up to its heap
//     goal and streams reuse them, so where the server held much garbage
//     before the streams (spillway after parsing a large --static-file)
//     only this difference says what the streams hold. At
//     K=1,000 (one run): spillway 44.9 -> 44.0 KiB, baseline 90.2 -> 81.9;
//     stacks 18.3 and 28.4 KiB per stream, unchanged by the GC.
//   - Peak RSS per stream: VmHWM, read with the streams open, minus VmRSS
//     before the first stream, over K: the worst of the storm of opening
//     every stream at once, which a memory limit must cover.
//   - Fan-out: --changes endpoint changes, one after the other, each on a
//     different service, alternately adding a new endpoint and removing an
//     existing one (spillway: Register/Deregister; baseline: its HTTP
//     /change, which builds the EDS resources and calls SetSnapshot for
//     every zone). For each change, the time from just before the call to
//     each stream subscribed to that service receiving an EDS response that
//     shows the change (the address present or gone). p50/p99/max over all
//     those latencies. The next change starts once every affected stream
//     has it, no response has arrived for --quiet, and --gap has passed.
//   - CPU per stream update: the server's CPU time (its threads' run time
//     from /proc/PID/task/*/schedstat, in ns; utime+stime from
//     /proc/PID/stat, in 10 ms ticks, where that is missing) over
//     the whole change window, idle work included ("gross"), over the
//     stream updates the changes needed (changes x streams subscribed to
//     the changed service); "net" subtracts the server's CPU over an idle
//     window right after (capped at --max-idle, at least --min-idle,
//     scaled to the change window). The CPU per EDS response actually sent, the responses per
//     change by type and the server's idle CPU are shown too.
//   - The machine's other CPU use: the CPU every other process used over
//     the change window (utime+stime of every /proc/PID/stat; a process
//     that ended in the window is missed), in cores, printed for every round
//     so a noisy round shows.
//   - Lost streams: the streams that failed and were opened again during
//     the change window (and the churn window), and the packets the
//     kernel's input backlog dropped in it (/proc/net/softnet_stat), with
//     a warning that says why the streams failed. A window with lost
//     streams holds their new initial responses, so its CPU figures do
//     not compare with a clean window's.
//   - Churn, with --churn R (0, the default, is off): after the idle
//     window, R endpoint registrations a second for --churn-for, one call
//     at a time (a late call is not made up for), each a new endpoint on
//     the service of a random stream (benchdata.ChurnPlan: drawn in
//     proportion to the services' streams, the same draw for every
//     target; additions only, so a response that holds a service's last
//     added endpoint holds every change made to it). The window lasts
//     until every stream of each changed service has seen that service's
//     last change and no response came for --quiet. It reports the
//     registrations a second achieved, the server's CPU over the window
//     (cores, per stream change: a change x its service's streams, and
//     per EDS response sent), the responses and bytes, and the time from
//     each service's last change to its streams: p50/p99 over streams,
//     and to the service's last stream, p50/p99/max over services (the
//     issue's "reaching the last stream of its service", under churn). A
//     server that coalesces sends fewer responses than stream changes; one
//     that answers every change sends one per stream change. The driver
//     reads every response, so at a high rate it can be the machine's
//     bottleneck: compare targets at a rate each achieved.
//
// With --subset-size N (0, the default, is off) every round also runs
// the target spillway+subset, right after spillway: spillway started with
// a --service-config-dir holding one SERVICE.yaml per service,
// "subset_mode: deterministic" and "subset_size: N", so that each stream
// gets only its slot's subset of the service's endpoints (package
// weights/subset). Both spillway targets then run with --weights-interval
// (default 1s with --subset-size; spillway's own 10s otherwise), the
// baseline as before. The subset run differs in three places:
//
//   - Sync: a stream is synced at its first EDS holding some but not all
//     of the service's endpoints; then the driver waits until the plan of
//     every service gives a slot to each of its streams (the admin API's
//     Weights, subsets.slots, over the gRPC address) and the streams are
//     quiet, checks that every stream holds a subset and that the first
//     stream of every service holds exactly the subset the admin API names
//     for its node, and only then takes the memory readings. After the
//     idle window it checks every stream that way.
//   - Fan-out: a change reaches only the streams whose subset it changes,
//     some only at the next weights cycle, and may reach none (an added
//     endpoint whose share is no slot). A change is over once the streams
//     show it (added: some stream holds the endpoint; removed: none does
//     and each that held it got its replacement) or, two weights cycles
//     on, the service's plan counts it (Weights, zones' healthy
//     endpoints), then once no response came for --quiet. Its stream
//     updates are the streams whose endpoints differ from before the
//     change; its latencies, the time to the EDS that gave each its final
//     endpoints, include the wait for the weights cycle.
//   - The ratios spillway+subset/spillway: RSS per stream, after one GC,
//     server CPU per change (gross: the change window's idle work too;
//     changes on services of the same number of streams, so per stream of
//     the changed service) and idle server CPU (K streams in both), each
//     against at most 1.2: the "memory and CPU per stream". CPU
//     per stream update (per stream whose endpoints a change changed: a
//     tenth of the service's streams with subsets of 10 of 100, so the
//     change's fixed work is shared by fewer), net CPU per stream update
//     and CPU per EDS response are printed without target.
//
// It prints, per row, the medians over the rounds, the ratios
// spillway/baseline of the medians against the targets (RSS, gross CPU per
// stream update and fan-out p99 at most 1/2 of the baseline's), and every
// round; --out writes the same as markdown. With --pprof and --keep, round
// 1 of every row saves each server's heap and goroutine profiles, and the
// heap profile's text form (its runtime.MemStats lines give the stack
// total), after the sync (spillway with its --pprof on its HTTP address);
// with --cpu-profile D also a CPU profile of the first D of the change
// window (which the idle window and, for spillway+subset, the final check
// follow) and, with --churn, of the first D of the churn window
// (TARGET-churn-cpu.pprof), and with --idle-profile one of the idle
// window.
//
// # Targets and data files
//
// --target takes a comma-separated list: spillway, baseline (the
// SnapshotCache above) and linear (the baseline binary with --cache
// linear: a go-control-plane LinearCache per resource type, EDS one per
// zone, under a MuxCache; a change answers only the watches of the changed
// resource), and linear-same (linear with the baseline's --same-content:
// assignments with spillway's content for the same data, its hostnames
// and weights, so that both send the same bytes and only the servers'
// work differs); "both" is spillway,baseline and "all"
// spillway,baseline,linear (linear-same runs only when named). With --data
// FILE (internal/benchdata's data file: a data set of any shape, such as
// the region of e2e/bench/scale) the services come from the file, spillway
// loads them as its --static-file and the baselines read the file; the K
// streams are spread over the services in proportion to their endpoints
// (benchdata.Spread), and the changes come in pairs on services drawn as
// the service of a random stream (benchdata.PairPlan: an endpoint added,
// then removed). Every connection dials from its own 127.100.x.y source
// address, so spillway's --grpc-max-streams-per-identity (10,000 per
// anonymous peer address by default) sees a client per connection, as
// with real hosts, and stays on. A stream that fails (a reset in a
// connection storm, a keepalive a starved client answered late) is opened
// again, up to 5 times, as an xDS client would; the runs print how often.
// --json FILE writes every round's figures for other programs
// (e2e/bench/scale's xds part).
//
// Usage, from the repository root:
//
//	go run ./e2e/bench/xdsbench                      # K=1000,10000; 1 and 10 streams per connection; 5 rounds
//	go run ./e2e/bench/xdsbench --streams 1000 --streams-per-conn 1 --rounds 3 --out /tmp/xds.md
//	go run ./e2e/bench/xdsbench --streams 10000 --rounds 1 --pprof --keep /tmp/xdsprof
//	go run ./e2e/bench/xdsbench --target spillway --subset-size 10 --streams 2000 --streams-per-conn 1 --services 20 --endpoints 100 --changes 20
//	go run ./e2e/bench/xdsbench --data region-10.tsv --target spillway,linear --streams 5000 --streams-per-conn 1 --rounds 1 --changes 4 --churn 25 --churn-for 10s
//
// Everything runs on 127.0.0.1; every wait is bounded; the servers are
// stopped on exit, including on Ctrl-C, and die with the driver if it is
// killed (Pdeathsig). The driver raises its own RLIMIT_NOFILE, which the
// servers inherit, to K/streams-per-conn + 1,000, the hard limit too where
// it may (root), else to the hard limit (K=50,000 with one stream per
// connection needs 51,000 descriptors in the driver and as many in the
// server). Clients and servers share the
// machine's cores: the fan-out latencies include the clients' own work.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spillway/spillway/e2e/bench/internal/procstat"
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
	perConns      []int
	rounds        int
	settle        time.Duration
	quiet         time.Duration
	gap           time.Duration
	syncTimeout   time.Duration
	changeTimeout time.Duration
	maxIdle       time.Duration
	minIdle       time.Duration // the idle window's least length
	out           string
	keep          string
	spillwayBin   string
	baselineBin   string
	commandLine   string
	pprof         bool
	steady        bool          // also measure after one runtime.GC in each server
	scavenge      time.Duration // wait after that GC for the background scavenger
	// subsetSize > 0 adds the target subsetTarget: spillway with
	// deterministic subsets of that size for every service.
	subsetSize int
	// cpuProfile > 0: with pprof, round 1 also saves a CPU profile of the
	// server over the first cpuProfile of the change window.
	cpuProfile time.Duration
	// idleProfile: with pprof, round 1 also saves a CPU profile of the
	// server over the idle window (whole seconds of it).
	idleProfile bool
	// weightsInterval is spillway's --weights-interval in both spillway
	// targets; 0 leaves spillway's default.
	weightsInterval time.Duration
	// dataFile, when set, is the data set (a benchdata data file) in
	// place of --services, --endpoints and --zones; see "Data files".
	dataFile string
	// jsonOut, when set, is where every round's figures go as JSON.
	jsonOut string
	// churnRate > 0 adds a churn window after the idle one: churnRate
	// registrations a second for churnFor (benchdata.ChurnPlan).
	churnRate int
	churnFor  time.Duration
}

// result is one target at one K.
type result struct {
	target  string
	k       int
	perConn int
	round   int
	err     error

	rssBeforeKiB, rssAfterKiB int64
	peakKiB                   int64 // VmHWM with the streams: the most ever resident
	// With --steady: the same readings after one runtime.GC in the server
	// (GET /debug/pprof/heap?gc=1) and --scavenge, and the runtime's
	// stack bytes in use (MemStats.StackInuse) before and after that GC.
	rssBeforeGCKiB, rssAfterGCKiB int64
	stackBefore, stackAfter       int64 // before any forced GC
	stackBeforeGC, stackAfterGC   int64 // right after the forced GC
	// The runtime's heap and stacks in use right after the forced GC
	// (HeapInuse + StackInuse), in bytes.
	inuseBefore, inuseAfter int64
	setup                   time.Duration // stream open to all initial EDS
	badInitial              int64         // initial EDS with a wrong endpoint count

	lat          []time.Duration // every affected stream's fan-out latency
	missed       int             // affected streams that never saw their change
	calls        []time.Duration // change call durations
	cpu, idleCPU float64         // seconds over the change window and the idle window
	window       time.Duration
	responses    [len(typeURLs)]int64 // responses received during the change window
	edsBytes     int64                // bytes of the assignments those EDS responses held
	idleResp     int64                // responses received during the idle window
	clientCPU    float64              // the driver's own CPU seconds over the change window
	others       float64              // CPU seconds of every other process over the change window
	updates      int                  // stream updates the changes needed: affected streams, summed
	idleWindow   time.Duration        // the idle window actually waited
	idleRaw      float64              // server CPU seconds over idleWindow (unscaled)
	reopened     int64                // failed streams opened again during the change window
	drops        int64                // packets the kernel's input backlog dropped in it (-1: unknown)

	// The subset target's streams after the sync: the fewest and most
	// endpoints a stream holds, and the services whose first stream was
	// checked against the admin API's subset.
	subsetMin, subsetMax, subsetChecked int

	churn churnResult
}

// churnResult is what the churn window measured (--churn).
type churnResult struct {
	changes  int           // registrations made
	sending  time.Duration // from the first to the last call's return
	window   time.Duration // from the first call to every stream final and quiet
	cpu      float64       // server CPU seconds over window
	needed   int           // stream changes: each change × the streams of its service
	services int           // services changed
	// lat is, for each changed service's last change, every stream of it
	// that saw it: the time from that change's call to the stream's
	// first response holding it; missed are the streams that did not
	// within --change-timeout of the last call.
	lat    []time.Duration
	missed int
	// last is, for each changed service whose every stream saw its last
	// change, the time to the last of them: the issue's "reaching the
	// last stream of its service", one figure per service.
	last      []time.Duration
	responses int64 // EDS responses received over window
	edsBytes  int64
	clientCPU float64
	others    float64
	reopened  int64 // failed streams opened again over window
	drops     int64 // packets the kernel's input backlog dropped in it (-1: unknown)
}

// rate is the registrations a second the window achieved.
func (c *churnResult) rate() float64 {
	if c.sending <= 0 {
		return 0
	}
	return float64(c.changes) / c.sending.Seconds()
}

// cores is the server's CPU over the window, in cores.
func (c *churnResult) cores() float64 {
	if c.window <= 0 {
		return 0
	}
	return c.cpu / c.window.Seconds()
}

// perNeeded is the server's CPU per stream change, in µs.
func (c *churnResult) perNeeded() float64 { return c.cpu / float64(max(1, c.needed)) * 1e6 }

// perResponse is the server's CPU per EDS response sent, in µs.
func (c *churnResult) perResponse() float64 { return c.cpu / float64(max(1, c.responses)) * 1e6 }

func (c *churnResult) p(q float64) time.Duration {
	lat := slices.Clone(c.lat)
	slices.Sort(lat)
	return percentile(lat, q)
}

// pLast is the q-quantile over the changed services of the time their
// last change took to reach their last stream.
func (c *churnResult) pLast(q float64) time.Duration {
	lat := slices.Clone(c.last)
	slices.Sort(lat)
	return percentile(lat, q)
}

// otherCPU is the CPU the rest of the machine used during the change
// window, in cores.
func (r *result) otherCPU() float64 {
	if r.window <= 0 {
		return 0
	}
	return r.others / r.window.Seconds()
}

// perUpdate is x seconds per stream update, in µs.
func (r *result) perUpdate(x float64) float64 { return x / float64(max(1, r.updates)) * 1e6 }

// grossPerUpdate is the server's CPU over the change window per stream
// update, in µs, idle work included.
func (r *result) grossPerUpdate() float64 { return r.perUpdate(r.cpu) }

// netPerUpdate subtracts the idle window's CPU, scaled to the change window.
func (r *result) netPerUpdate() float64 { return r.perUpdate(max(0, r.cpu-r.idleCPU)) }

// perEDS is the server's CPU over the change window per EDS response sent, in µs.
func (r *result) perEDS() float64 {
	return r.cpu / float64(max(1, r.responses[edsIndex])) * 1e6
}

// idleRate is the server's CPU while idle, in ms per second.
func (r *result) idleRate() float64 {
	if r.idleWindow <= 0 {
		return 0
	}
	return r.idleRaw / r.idleWindow.Seconds() * 1e3
}

func (r *result) p(q float64) time.Duration {
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	return percentile(lat, q)
}

func (r *result) rssPerStream() float64 {
	return float64(r.rssAfterKiB-r.rssBeforeKiB) / float64(r.k)
}

// peakPerStream is the server's peak resident memory (VmHWM, read with
// the streams) over the reading before the streams, per stream: what the
// connection storm of opening them all at once cost at its worst.
func (r *result) peakPerStream() float64 {
	return float64(r.peakKiB-r.rssBeforeKiB) / float64(r.k)
}

// rssSteadyPerStream is rssPerStream from the readings after one GC in
// the server and the scavenger's wait (--steady).
func (r *result) rssSteadyPerStream() float64 {
	return float64(r.rssAfterGCKiB-r.rssBeforeGCKiB) / float64(r.k)
}

// inusePerStream is the server's heap and stacks in use after one GC,
// with the streams minus before them, per stream, in KiB (--steady).
func (r *result) inusePerStream() float64 {
	return float64(r.inuseAfter-r.inuseBefore) / 1024 / float64(r.k)
}

// stackPerStream is the server's stack bytes in use per stream, in KiB,
// before the forced GC (gc false) or right after it (gc true).
func (r *result) stackPerStream(gc bool) float64 {
	if gc {
		return float64(r.stackAfterGC-r.stackBeforeGC) / 1024 / float64(r.k)
	}
	return float64(r.stackAfter-r.stackBefore) / 1024 / float64(r.k)
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

	// The driver holds a descriptor per connection, and so does the server.
	need := uint64(slices.Max(cfg.streams)/slices.Min(cfg.perConns) + 1000)
	if lim, err := raiseFileLimit(need); err != nil {
		fmt.Fprintln(os.Stderr, "xdsbench: raise RLIMIT_NOFILE:", err)
	} else if lim < need {
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
	if cfg.dataFile != "" {
		fmt.Printf("== %d services over %d zones from %s; %d changes per run; %d rounds; streams per connection %v\n",
			cfg.services, cfg.zones, cfg.dataFile, cfg.changes, cfg.rounds, cfg.perConns)
	} else {
		fmt.Printf("== %d services x %d endpoints over %d zones; %d changes per run; %d rounds; streams per connection %v\n",
			cfg.services, cfg.endpoints, cfg.zones, cfg.changes, cfg.rounds, cfg.perConns)
	}
	if cfg.weightsInterval > 0 {
		fmt.Printf("== spillway --weights-interval %v in every spillway run\n", cfg.weightsInterval)
	}
	if cfg.subsetSize > 0 {
		fmt.Printf("== %s: every service with subset_mode deterministic, subset_size %d\n", subsetTarget, cfg.subsetSize)
	}
	var tables []string
	var all []*result
	failed := false
	for _, k := range cfg.streams {
		for _, perConn := range cfg.perConns {
			var rs []*result
			for round := 1; round <= cfg.rounds && ctx.Err() == nil; round++ {
				order := slices.Clone(cfg.targets)
				if round%2 == 0 {
					slices.Reverse(order)
				}
				for _, t := range order {
					if ctx.Err() != nil {
						break
					}
					r := runOne(ctx, &cfg, t, k, perConn, round, work, logDir)
					if r.err != nil {
						failed = true
						fmt.Printf("   %s K=%d round %d FAILED: %v\n", t, k, round, r.err)
					} else {
						fmt.Printf("   round %d %-8s K=%d/%d per conn: RSS/stream %.1f KiB (%s after one GC), peak %.1f KiB, p99 %s ms, gross CPU %.1f µs per stream update (%d updates), %.1f per EDS response, other processes %.2f cores\n",
							round, t, k, perConn, r.rssPerStream(), steadyCell(&cfg, "%.1f", r.rssSteadyPerStream()), r.peakPerStream(), ms(r.p(0.99)), r.grossPerUpdate(), r.updates, r.perEDS(), r.otherCPU())
						if c := &r.churn; c.changes > 0 {
							fmt.Printf("   round %d %-8s K=%d/%d per conn, churn at %.0f/s: server %.3f cores, %.1f µs per stream change (%d), %.1f per EDS response (%d, %.1f MB), last change p99 over streams %s ms, to a service's last stream p99 over services %s ms\n",
								round, t, k, perConn, c.rate(), c.cores(), c.perNeeded(), c.needed, c.perResponse(), c.responses, float64(c.edsBytes)/1e6, ms(c.p(0.99)), ms(c.pLast(0.99)))
						}
					}
					rs = append(rs, r)
				}
			}
			all = append(all, rs...)
			tbl := table(&cfg, k, perConn, rs)
			fmt.Println()
			fmt.Println(tbl)
			tables = append(tables, tbl)
		}
	}
	if cfg.out != "" {
		if err := writeMarkdown(&cfg, cfg.out, tables); err != nil {
			fmt.Fprintln(os.Stderr, "xdsbench:", err)
			return 1
		}
		fmt.Println("wrote", cfg.out)
	}
	if cfg.jsonOut != "" {
		if err := writeJSON(cfg.jsonOut, all); err != nil {
			fmt.Fprintln(os.Stderr, "xdsbench:", err)
			return 1
		}
		fmt.Println("wrote", cfg.jsonOut)
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
	target := fs.String("target", "both", "comma-separated targets: spillway, baseline (SnapshotCache), linear (LinearCache), linear-same (LinearCache with the baseline's --same-content: spillway's content); both is spillway,baseline; all is spillway,baseline,linear")
	streams := fs.String("streams", "1000,10000", "comma-separated stream counts K, each a separate row")
	perConn := fs.String("streams-per-conn", "1,10", "comma-separated ADS streams per client gRPC connection, each a separate row (grpc-go opens one stream per connection)")
	var cfg config
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds per row; each round runs every target once on a fresh server, the order alternating")
	fs.IntVar(&cfg.services, "services", 100, "services in the data set")
	fs.IntVar(&cfg.endpoints, "endpoints", 9, "endpoints per service")
	fs.IntVar(&cfg.zones, "zones", 3, "zones (endpoints and clients round-robin)")
	fs.IntVar(&cfg.changes, "changes", 10, "endpoint changes measured per run, each on a different service")
	fs.DurationVar(&cfg.settle, "settle", 2*time.Second, "wait before each of the two RSS readings")
	fs.DurationVar(&cfg.quiet, "quiet", 300*time.Millisecond, "a change is over when no response arrived for this long")
	fs.DurationVar(&cfg.gap, "gap", 250*time.Millisecond, "pause after a change is over, before the next")
	fs.DurationVar(&cfg.syncTimeout, "sync-timeout", 5*time.Minute, "limit on opening all streams and getting their initial EDS")
	fs.DurationVar(&cfg.changeTimeout, "change-timeout", 60*time.Second, "limit on one change reaching all affected streams, and on going quiet")
	fs.DurationVar(&cfg.maxIdle, "max-idle", 10*time.Second, "cap on the idle CPU window (scaled up to the change window if capped)")
	fs.DurationVar(&cfg.minIdle, "min-idle", 0, "least length of the idle CPU window, above --max-idle if need be (the kernel counts CPU in 10 ms ticks: a few seconds of an idle server are a handful of them)")
	fs.StringVar(&cfg.out, "out", "", "also write the tables as markdown to this file")
	fs.StringVar(&cfg.keep, "keep", "", "directory to keep the server logs (and profiles) in (default: a temp dir, removed)")
	fs.BoolVar(&cfg.pprof, "pprof", false, "save each server's heap profile after the sync (round 1 only) into the --keep directory")
	fs.BoolVar(&cfg.steady, "steady", true, "also measure RSS per stream in steady state: after one runtime.GC in each server (GET /debug/pprof/heap?gc=1, before the streams and with them) and --scavenge; prints both readings")
	fs.DurationVar(&cfg.scavenge, "scavenge", 5*time.Second, "with --steady, wait after the GC for the background scavenger before the two RSS readings (--settle apart)")
	fs.StringVar(&cfg.spillwayBin, "spillway-bin", "", "prebuilt spillway binary (default: go build ./cmd/spillway)")
	fs.StringVar(&cfg.baselineBin, "baseline-bin", "", "prebuilt baseline binary (default: go build ./e2e/bench/xdsbench/baseline)")
	fs.DurationVar(&cfg.cpuProfile, "cpu-profile", 0, "with --pprof: round 1 also saves each server's CPU profile of the first this long (whole seconds) of the change window (0: none)")
	fs.BoolVar(&cfg.idleProfile, "idle-profile", false, "with --pprof: round 1 also saves each server's CPU profile of the idle window (TARGET-idle.pprof)")
	fs.IntVar(&cfg.subsetSize, "subset-size", 0, "also run "+subsetTarget+": spillway with subset_mode deterministic and this subset_size for every service (0: off)")
	fs.StringVar(&cfg.dataFile, "data", "", "read the data set from this data file (internal/benchdata) instead of --services, --endpoints and --zones; streams are spread over its services in proportion to their endpoints, and changes come in add/remove pairs")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write every round's figures as JSON to this file")
	fs.IntVar(&cfg.churnRate, "churn", 0, "after the idle window, also measure a churn window: this many endpoint registrations a second, drawn in proportion to the services' streams, for --churn-for, sent one at a time (0: off)")
	fs.DurationVar(&cfg.churnFor, "churn-for", 10*time.Second, "length of the churn window's sending")
	fs.DurationVar(&cfg.weightsInterval, "weights-interval", 0, "spillway's --weights-interval, in both spillway targets (0: spillway's default, 10s; 1s with --subset-size)")
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
	case "all":
		cfg.targets = []string{"spillway", "baseline", linearTarget}
	default:
		for t := range strings.SplitSeq(*target, ",") {
			if t != "spillway" && t != "baseline" && t != linearTarget && t != linearSameTarget {
				return cfg, fmt.Errorf("--target: %q, want spillway, baseline, linear, linear-same, both or all", t)
			}
			cfg.targets = append(cfg.targets, t)
		}
	}
	var err error
	if cfg.streams, err = positiveList("--streams", *streams); err != nil {
		return cfg, err
	}
	if cfg.perConns, err = positiveList("--streams-per-conn", *perConn); err != nil {
		return cfg, err
	}
	if cfg.dataFile != "" {
		svcs, zones, err := benchdata.ReadFile(cfg.dataFile)
		if err != nil {
			return cfg, fmt.Errorf("--data: %w", err)
		}
		cfg.services, cfg.zones = len(svcs), len(zones)
		if cfg.subsetSize > 0 {
			return cfg, errors.New("--subset-size and --data do not go together")
		}
		if cfg.changes%2 != 0 {
			return cfg, fmt.Errorf("--changes: %d, want an even number with --data (add/remove pairs)", cfg.changes)
		}
	} else if err := benchdata.Validate(cfg.services, cfg.endpoints, cfg.zones); err != nil {
		return cfg, err
	}
	switch {
	case cfg.rounds < 1:
		return cfg, fmt.Errorf("--rounds: %d, want >= 1", cfg.rounds)
	case cfg.changes < 1 || cfg.changes > cfg.services:
		return cfg, fmt.Errorf("--changes: %d, want 1..%d (one service each)", cfg.changes, cfg.services)
	case cfg.settle < 0 || cfg.gap < 0:
		return cfg, errors.New("--settle and --gap must not be negative")
	case cfg.quiet <= 0 || cfg.syncTimeout <= 0 || cfg.changeTimeout <= 0 || cfg.maxIdle <= 0:
		return cfg, errors.New("--quiet, --sync-timeout, --change-timeout and --max-idle must be positive")
	case cfg.minIdle < 0:
		return cfg, errors.New("--min-idle must not be negative")
	case cfg.pprof && cfg.keep == "":
		return cfg, errors.New("--pprof needs --keep (where the profiles go)")
	case cfg.cpuProfile != 0 && (!cfg.pprof || cfg.cpuProfile < time.Second):
		return cfg, errors.New("--cpu-profile needs --pprof and at least 1s")
	case cfg.idleProfile && !cfg.pprof:
		return cfg, errors.New("--idle-profile needs --pprof")
	case cfg.scavenge < 0:
		return cfg, errors.New("--scavenge must not be negative")
	case cfg.subsetSize < 0 || cfg.subsetSize >= cfg.endpoints:
		return cfg, fmt.Errorf("--subset-size: %d, want 0 (off) or 1..%d (fewer than --endpoints)", cfg.subsetSize, cfg.endpoints-1)
	case cfg.subsetSize > 0 && !slices.Contains(cfg.targets, "spillway"):
		return cfg, errors.New("--subset-size needs --target spillway or both (the subset run is compared with spillway's)")
	case cfg.churnRate < 0 || cfg.churnRate > 5000:
		return cfg, fmt.Errorf("--churn: %d, want 0 (off) to 5000 registrations a second", cfg.churnRate)
	case cfg.churnRate > 0 && (cfg.churnFor < time.Second || cfg.churnFor > 5*time.Minute):
		return cfg, fmt.Errorf("--churn-for: %v, want 1s to 5m", cfg.churnFor)
	case cfg.churnRate > 0 && churnCount(&cfg) > benchdata.MaxChurn:
		return cfg, fmt.Errorf("--churn %d for %v: %d registrations, want at most %d", cfg.churnRate, cfg.churnFor, churnCount(&cfg), benchdata.MaxChurn)
	case cfg.churnRate > 0 && cfg.subsetSize > 0:
		return cfg, errors.New("--churn and --subset-size do not go together")
	case cfg.weightsInterval != 0 && cfg.weightsInterval < 100*time.Millisecond:
		return cfg, fmt.Errorf("--weights-interval: %v, want at least 100ms (spillway's minimum) or 0", cfg.weightsInterval)
	}
	if cfg.subsetSize > 0 {
		// Right after spillway, so that the two spillway runs of a round
		// are next to each other.
		i := slices.Index(cfg.targets, "spillway")
		cfg.targets = slices.Insert(cfg.targets, i+1, subsetTarget)
		if cfg.weightsInterval == 0 {
			cfg.weightsInterval = time.Second
		}
	}
	if slices.Min(cfg.streams) < cfg.services && cfg.dataFile == "" {
		fmt.Fprintf(os.Stderr, "xdsbench: warning: K=%d < %d services: some changes have no affected stream\n", slices.Min(cfg.streams), cfg.services)
	}
	return cfg, nil
}

func positiveList(name, v string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	return out, nil
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
		used := slices.Contains(cfg.targets, b.target) || b.target == "baseline" && (slices.Contains(cfg.targets, linearTarget) || slices.Contains(cfg.targets, linearSameTarget))
		if !used || *b.bin != "" {
			continue
		}
		out := filepath.Join(work, b.target)
		args := []string{"build", "-o", out}
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		cmd := exec.CommandContext(bctx, "go", append(args, b.pkg)...)
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
func runOne(ctx context.Context, cfg *config, target string, k, perConn, round int, work, logDir string) *result {
	r := &result{target: target, k: k, perConn: perConn, round: round}
	fmt.Printf("\n== %s, K=%d, %d streams per connection, round %d\n", target, k, perConn, round)
	d, err := loadData(cfg, k)
	if err != nil {
		r.err = err
		return r
	}
	services, plan := d.services, d.plan
	dir := filepath.Join(logDir, fmt.Sprintf("k%d-c%d-r%d", k, perConn, round))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.err = err
		return r
	}
	profiling := cfg.pprof && round == 1
	debug := profiling || cfg.steady // the server serves /debug/pprof/
	srv, err := startTarget(ctx, cfg, target, dir, d, debug)
	if err != nil {
		r.err = err
		return r
	}
	defer srv.stop()
	m := &meter{cfg: cfg, srv: srv, target: target, k: k}
	m.say("server pid %d, ADS on %s; data loaded", srv.pid(), srv.adsAddr)

	if err := m.memoryBefore(ctx, r); err != nil {
		r.err = err
		return r
	}
	start := time.Now()
	subsets := target == subsetTarget
	fl, err := openFleet(ctx, srv.adsAddr, k, perConn, services, d.svcOf, d.zones, subsets)
	if err != nil {
		r.err = explain(target, err)
		return r
	}
	defer fl.close()
	if err := m.sync(ctx, fl, start, r); err != nil {
		r.err = err
		return r
	}
	if subsets {
		if err := m.syncSubsets(ctx, fl, r); err != nil {
			r.err = err
			return r
		}
		r.setup = time.Since(start)
	}
	if err := m.memoryWith(ctx, r); err != nil {
		r.err = err
		return r
	}
	if profiling {
		m.saveProfiles(ctx, dir)
	}
	var cpuProfile sync.WaitGroup
	if profiling && cfg.cpuProfile > 0 {
		file := filepath.Join(dir, target+"-cpu.pprof")
		cpuProfile.Go(func() {
			if err := srv.savePprof(ctx, fmt.Sprintf("profile?seconds=%d", int(cfg.cpuProfile.Seconds())), file); err != nil {
				m.say("CPU profile: %v", err)
			} else {
				m.say("saved %s", file)
			}
		})
	}
	defer cpuProfile.Wait() // before the server stops
	if err := m.changes(ctx, fl, plan, r); err != nil {
		r.err = err
		return r
	}
	idleProfile := ""
	if profiling && cfg.idleProfile {
		idleProfile = filepath.Join(dir, target+"-idle.pprof")
	}
	if err := m.idle(ctx, fl, r, idleProfile); err != nil {
		r.err = err
		return r
	}
	if d.churn != nil {
		var saved sync.WaitGroup
		if profiling && cfg.cpuProfile > 0 {
			cpuProfile.Wait() // a server takes one CPU profile at a time
			file := filepath.Join(dir, target+"-churn-cpu.pprof")
			saved.Go(func() {
				if err := srv.savePprof(ctx, fmt.Sprintf("profile?seconds=%d", int(cfg.cpuProfile.Seconds())), file); err != nil {
					m.say("churn CPU profile: %v", err)
				} else {
					m.say("saved %s", file)
				}
			})
		}
		err := m.churn(ctx, fl, d.churn, r)
		saved.Wait()
		if err != nil {
			r.err = fmt.Errorf("churn: %w", err)
			return r
		}
	}
	if subsets {
		// After the measurements: every stream's subset, as the changes
		// left it, is the one the plan gives its slot.
		all := make([]int, k)
		for i := range all {
			all[i] = i
		}
		if err := m.checkSubsets(ctx, fl, all, plan); err != nil {
			r.err = fmt.Errorf("after the changes: %w", err)
			return r
		}
		m.say("after the changes, each of the %d streams holds exactly the subset the admin API names for it", k)
	}
	if err := srv.alive(); err != nil {
		r.err = err
	}
	return r
}

// startTarget starts the server of target, "spillway", subsetTarget,
// "baseline", linearTarget or linearSameTarget (parseFlags accepts no
// other), with the data set loaded, serving /debug/pprof/ when debug is
// set. Both spillway targets get --weights-interval when set; subsetTarget
// also a --service-config-dir giving every service subsets of
// --subset-size.
func startTarget(ctx context.Context, cfg *config, target, dir string, d *dataSet, debug bool) (*server, error) {
	services := d.services
	var extra []string
	if cfg.weightsInterval > 0 {
		extra = append(extra, "--weights-interval", cfg.weightsInterval.String())
	}
	switch target {
	case "spillway":
		if cfg.dataFile != "" {
			static, err := writeStaticFile(dir, services)
			if err != nil {
				return nil, err
			}
			return startSpillway(ctx, cfg.spillwayBin, dir, services, static, debug, extra...)
		}
		return startSpillway(ctx, cfg.spillwayBin, dir, services, "", debug, extra...)
	case subsetTarget:
		cfgDir, err := writeSubsetConfig(dir, services, cfg.subsetSize)
		if err != nil {
			return nil, err
		}
		return startSpillway(ctx, cfg.spillwayBin, dir, services, "", debug, append(extra, "--service-config-dir", cfgDir)...)
	case "baseline", linearTarget, linearSameTarget:
		return startBaseline(ctx, cfg, target, dir, services, debug)
	default:
		return nil, fmt.Errorf("unknown target %q", target)
	}
}

// linearTarget is the baseline binary with --cache linear: a LinearCache
// per resource type (EDS: per zone). linearSameTarget adds the baseline's
// --same-content: its assignments carry spillway's content.
const (
	linearTarget     = "linear"
	linearSameTarget = "linear-same"
)

// dataSet is one run's data: the services, the zones, each stream's
// service (nil: stream i has service i%len(services)) and the changes.
type dataSet struct {
	services []benchdata.Service
	zones    []string
	svcOf    []int
	plan     []benchdata.Change
	churn    []benchdata.Change // --churn's; nil without it
}

// churnCount is the registrations of --churn's window.
func churnCount(cfg *config) int {
	return int(math.Ceil(float64(cfg.churnRate) * cfg.churnFor.Seconds()))
}

// loadData builds the data set of a run of k streams: from --data (streams
// spread in proportion to endpoints, changes in pairs) or from
// --services, --endpoints and --zones.
func loadData(cfg *config, k int) (*dataSet, error) {
	d := &dataSet{}
	if cfg.dataFile == "" {
		d.services, d.zones = benchdata.Services(cfg.services, cfg.endpoints, cfg.zones), benchdata.Zones(cfg.zones)
		plan, err := benchdata.Plan(d.services, cfg.zones, cfg.changes)
		if err != nil {
			return nil, err
		}
		d.plan = plan
	} else {
		services, zones, err := benchdata.ReadFile(cfg.dataFile)
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		d.services, d.zones, d.svcOf = services, zones, benchdata.Spread(services, k)
		if d.plan, err = benchdata.PairPlan(services, zones, d.svcOf, cfg.changes); err != nil {
			return nil, err
		}
	}
	if cfg.churnRate > 0 {
		churn, err := benchdata.ChurnPlan(d.services, d.zones, d.svcOf, k, churnCount(cfg), len(d.plan))
		if err != nil {
			return nil, err
		}
		d.churn = churn
	}
	return d, nil
}

// meter takes the readings of one run's server: one target at one K.
type meter struct {
	cfg    *config
	srv    *server
	target string
	k      int
}

// say prints one progress line of the run.
func (m *meter) say(format string, a ...any) {
	fmt.Printf("   %-8s K=%-6d %s\n", m.target, m.k, fmt.Sprintf(format, a...))
}

// settled reads the server's VmRSS twice, the first time after first and
// the second --settle later, and returns the later reading; it fails if
// the server died or ctx ends.
func (m *meter) settled(ctx context.Context, first time.Duration) (int64, error) {
	var v int64
	for i := range 2 {
		wait := m.cfg.settle
		if i == 0 {
			wait = first
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		if err := m.srv.alive(); err != nil {
			return 0, err
		}
		var err error
		if v, err = procstat.RSSKiB(m.srv.pid()); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// steady reads the stacks in use, runs one runtime.GC in the server,
// reads the stacks again and, after the scavenger's wait, VmRSS: what
// a server that has run its periodic GC (at least every 2 minutes)
// holds. No FreeOSMemory, no GOGC or GOMEMLIMIT change.
//
// It also returns the heap and stacks in use right after that GC
// (inuse): unlike VmRSS, they do not hold the pages the runtime keeps
// after freeing garbage (up to its heap goal), which the streams then
// reuse, so their difference is what the streams hold.
func (m *meter) steady(ctx context.Context, rss, stack, stackGC, inuse *int64) error {
	var err error
	if *stack, _, err = m.srv.stackInuse(ctx, false); err != nil {
		return err
	}
	var heap int64
	if *stackGC, heap, err = m.srv.stackInuse(ctx, true); err != nil {
		return err
	}
	*inuse = *stackGC + heap
	*rss, err = m.settled(ctx, m.cfg.scavenge)
	return err
}

// memoryBefore takes the memory readings before the first stream: VmRSS
// and, with --steady, the readings after one GC.
func (m *meter) memoryBefore(ctx context.Context, r *result) error {
	var err error
	if r.rssBeforeKiB, err = m.settled(ctx, m.cfg.settle); err != nil {
		return err
	}
	m.say("RSS before streams: %d KiB", r.rssBeforeKiB)
	if m.cfg.steady {
		if err := m.steady(ctx, &r.rssBeforeGCKiB, &r.stackBefore, &r.stackBeforeGC, &r.inuseBefore); err != nil {
			return err
		}
		m.say("after one GC and %v: RSS %d KiB, stacks %d KiB (%d before the GC)", m.cfg.scavenge, r.rssBeforeGCKiB, r.stackBeforeGC>>10, r.stackBefore>>10)
	}
	return nil
}

// sync waits for every stream of fl, opened at start, to get its initial
// EDS and then for the streams to go quiet; it records the setup time and
// the initial EDS with a wrong endpoint count.
func (m *meter) sync(ctx context.Context, fl *fleet, start time.Time, r *result) error {
	if err := fl.waitSynced(ctx, m.cfg.syncTimeout, func(n int64) { m.say("%d of %d streams synced", n, m.k) }); err != nil {
		if aerr := m.srv.alive(); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return explain(m.target, err)
	}
	r.setup = time.Since(start)
	r.badInitial = fl.badInitial.Load()
	if !fl.waitQuiet(ctx, m.cfg.quiet, m.cfg.changeTimeout) {
		return errors.Join(errors.New("streams did not go quiet after the initial sync"), fl.err, ctx.Err())
	}
	m.say("%d streams on %d connections synced in %v (%d initial EDS with a wrong endpoint count; failed streams opened again: %d)",
		m.k, len(fl.conns), r.setup.Round(time.Millisecond), r.badInitial, fl.reopened.Load())
	return nil
}

// memoryWith takes the memory readings with the streams open: VmRSS,
// VmHWM and, with --steady, the readings after one GC.
func (m *meter) memoryWith(ctx context.Context, r *result) error {
	var err error
	if r.rssAfterKiB, err = m.settled(ctx, m.cfg.settle); err != nil {
		return err
	}
	if r.peakKiB, err = procstat.PeakRSSKiB(m.srv.pid()); err != nil {
		return err
	}
	m.say("RSS with streams: %d KiB (%.1f KiB per stream); peak %d KiB (%.1f KiB per stream)", r.rssAfterKiB, r.rssPerStream(), r.peakKiB, r.peakPerStream())
	if m.cfg.steady {
		if err := m.steady(ctx, &r.rssAfterGCKiB, &r.stackAfter, &r.stackAfterGC, &r.inuseAfter); err != nil {
			return err
		}
		m.say("after one GC and %v: RSS %d KiB (%.1f KiB per stream); stacks %.2f KiB per stream before the GC, %.2f after; heap and stacks in use after it %.1f KiB per stream",
			m.cfg.scavenge, r.rssAfterGCKiB, r.rssSteadyPerStream(), r.stackPerStream(false), r.stackPerStream(true), r.inusePerStream())
	}
	return nil
}

// saveProfiles saves the server's heap and goroutine profiles and the
// heap profile's text form into dir; a profile that fails is reported
// and skipped.
func (m *meter) saveProfiles(ctx context.Context, dir string) {
	// heap?debug=1 is the text form: its runtime.MemStats lines give
	// the stack and heap totals the profile itself does not show.
	for _, p := range []string{"heap", "goroutine", "heap?debug=1"} {
		file := filepath.Join(dir, m.target+"-"+p+".pprof")
		if p == "heap?debug=1" {
			file = filepath.Join(dir, m.target+"-heap.txt")
		}
		if err := m.srv.savePprof(ctx, p, file); err != nil {
			m.say("pprof %s: %v", p, err)
		} else {
			m.say("saved %s", file)
		}
	}
}

// changes makes the changes of plan one after the other and records the
// change window: its length, the server's, the driver's and the other
// processes' CPU over it, and the responses sent in it.
func (m *meter) changes(ctx context.Context, fl *fleet, plan []benchdata.Change, r *result) error {
	start, err := m.read(fl)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for _, c := range plan {
		change := m.change
		if fl.views != nil {
			change = m.changeSubset
		}
		if err := change(ctx, fl, c, r); err != nil {
			return err
		}
	}
	r.window = time.Since(t0)
	d, err := m.since(fl, start)
	if err != nil {
		return err
	}
	r.cpu, r.clientCPU, r.others, r.responses, r.edsBytes = d.cpu, d.self, d.others, d.responses, d.edsBytes
	r.reopened, r.drops = d.reopened, d.drops
	m.say("%d changes in %v: server CPU %.2f s, driver CPU %.2f s, other processes %.2f cores; %d fan-out samples, %d missed; %d EDS responses holding %.1f MB of assignments; failed streams opened again so far: %d",
		len(plan), r.window.Round(time.Millisecond), r.cpu, r.clientCPU, r.otherCPU(), len(r.lat), r.missed, r.responses[edsIndex], float64(r.edsBytes)/1e6, fl.reopened.Load())
	m.warnFailures(fl, d)
	return nil
}

// change makes one change and records the call's duration and the
// fan-out latency of every affected stream that saw it (the others count
// as missed) within --change-timeout; then it waits for the streams to
// go quiet and for --gap. It fails if the call fails, a stream fails or
// ctx ends.
func (m *meter) change(ctx context.Context, fl *fleet, c benchdata.Change, r *result) error {
	p := newPendingChange(c, fl.affected(c.Service))
	r.updates += p.want
	p.start = time.Now()
	fl.pending[c.Service].Store(p)
	cctx, cancel := context.WithTimeout(ctx, m.cfg.changeTimeout)
	err := m.srv.change(cctx, c)
	cancel()
	r.calls = append(r.calls, time.Since(p.start))
	if err != nil {
		fl.pending[c.Service].Store(nil)
		return fmt.Errorf("change %d: %w", c.Seq, err)
	}
	timer := time.NewTimer(m.cfg.changeTimeout)
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
		return errors.Join(fl.err, ctx.Err(), m.srv.alive())
	}
	if !fl.waitQuiet(ctx, m.cfg.quiet, m.cfg.changeTimeout) {
		m.say("change %d: streams still receiving after %v", c.Seq, m.cfg.changeTimeout)
	}
	select {
	case <-ctx.Done():
	case <-time.After(m.cfg.gap):
	}
	return nil
}

// counters are what a measured window is read from: the server's and the
// driver's CPU seconds, every process's ticks, the responses received by
// type and the EDS bytes.
type counters struct {
	cpu, self float64
	procs     map[int]int64
	responses [len(typeURLs)]int64
	edsBytes  int64
	// reopened is the fleet's streams opened again after failing, and
	// drops the packets the kernel dropped from its input backlog
	// (softnetDrops; -1 where it cannot be read).
	reopened, drops int64
}

// read takes the counters at the start of a window.
func (m *meter) read(fl *fleet) (counters, error) {
	cpu, err := serverCPU(m.srv.pid())
	if err != nil {
		return counters{}, err
	}
	self, err := procstat.CPUSeconds(os.Getpid())
	if err != nil {
		return counters{}, err
	}
	return counters{cpu: cpu, self: self, procs: processTicks(), responses: fl.totalResponses(), edsBytes: fl.edsBytes.Load(),
		reopened: fl.reopened.Load(), drops: softnetDrops()}, nil
}

// warnFailures says when streams failed or the kernel dropped packets
// during a window, and why the streams failed: the server's CPU over that
// window then holds the new initial responses of the streams opened
// again, so its per-update figures do not compare with a clean run's.
func (m *meter) warnFailures(fl *fleet, d windowDelta) {
	if d.reopened > 0 {
		m.say("WARNING: %d failed streams opened again in this window: its CPU figures hold their initial responses and do not compare with a clean window's; why streams failed so far: %s",
			d.reopened, fl.failureSummary())
	}
	if d.drops > 0 {
		m.say("WARNING: the kernel dropped %d packets from its input backlog in this window (/proc/net/softnet_stat; on loopback every connection shares it: raise net.core.netdev_max_backlog, now %s)",
			d.drops, readSysctl("net/core/netdev_max_backlog"))
	}
}

// softnetDrops is the packets every CPU's input backlog dropped since boot
// (the second column of /proc/net/softnet_stat), or -1 where it cannot be
// read. Loopback traffic passes through that backlog, and a burst from
// thousands of connections can overflow it (net.core.netdev_max_backlog,
// 1,000 by default): the dropped segments are sent again after a
// retransmission timeout, and a connection whose data stays unacknowledged
// past its TCP_USER_TIMEOUT (grpc-go sets it to the keepalive timeout) is
// reset.
func softnetDrops() int64 {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return -1
	}
	var sum int64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			return -1
		}
		n, err := strconv.ParseInt(f[1], 16, 64)
		if err != nil {
			return -1
		}
		sum += n
	}
	return sum
}

// readSysctl is the value of /proc/sys/NAME, or "unknown".
func readSysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// windowDelta is a window's counters less its start's; others is the
// CPU seconds of every other process.
type windowDelta struct {
	counters
	others float64
}

// since reads the counters again and returns what the window added since
// start. The driver's CPU stays 0 if it cannot be read.
func (m *meter) since(fl *fleet, start counters) (windowDelta, error) {
	var d windowDelta
	cpu, err := serverCPU(m.srv.pid())
	if err != nil {
		return d, err
	}
	d.cpu = cpu - start.cpu
	if self, err := procstat.CPUSeconds(os.Getpid()); err == nil {
		d.self = self - start.self
	}
	d.others = otherCPUSeconds(start.procs, processTicks(), m.srv.pid(), os.Getpid())
	resp := fl.totalResponses()
	for j := range resp {
		d.responses[j] = resp[j] - start.responses[j]
	}
	d.edsBytes = fl.edsBytes.Load() - start.edsBytes
	d.reopened = fl.reopened.Load() - start.reopened
	// -1 when either reading failed, or when the sum went down: each
	// CPU's counter is 32 bits and wraps, and an offline CPU's line goes.
	d.drops = -1
	if now := softnetDrops(); now >= 0 && start.drops >= 0 && now >= start.drops {
		d.drops = now - start.drops
	}
	return d, nil
}

// churn makes the churn window's registrations at --churn a second, one
// call at a time (a late call is not made up for by sending faster),
// then waits until every stream of each changed service has seen that
// service's last change and the streams are quiet. Every change is an
// addition (benchdata.ChurnPlan), so a response that holds a service's
// last endpoint holds the service's final state: a stream that saw it
// ended where the changes left its service. The server's CPU, the
// responses and their bytes are read over the whole window, sending and
// draining.
func (m *meter) churn(ctx context.Context, fl *fleet, plan []benchdata.Change, r *result) error {
	c := &r.churn
	start, err := m.read(fl)
	if err != nil {
		return err
	}
	last := map[int]*pendingChange{}
	interval := time.Second / time.Duration(m.cfg.churnRate)
	t0 := time.Now()
	for i, ch := range plan {
		if wait := time.Until(t0.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		p := newPendingChange(ch, fl.affected(ch.Service))
		c.needed += p.want
		last[ch.Service] = p
		p.start = time.Now()
		fl.pending[ch.Service].Store(p)
		cctx, cancel := context.WithTimeout(ctx, m.cfg.changeTimeout)
		err := m.srv.change(cctx, ch)
		cancel()
		if err != nil {
			return fmt.Errorf("change %d: %w", ch.Seq, err)
		}
		if fl.err != nil {
			return errors.Join(fl.err, m.srv.alive())
		}
	}
	c.sending = time.Since(t0)
	c.changes, c.services = len(plan), len(last)
	deadline := time.NewTimer(m.cfg.changeTimeout)
	defer deadline.Stop()
wait:
	for _, p := range last {
		select {
		case <-p.done:
		case <-deadline.C:
			break wait
		case <-fl.errCh:
			return errors.Join(fl.err, m.srv.alive())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for svc, p := range last {
		fl.pending[svc].Store(nil)
		lat := p.latencies()
		c.lat = append(c.lat, lat...)
		c.missed += p.want - len(lat)
		if len(lat) == p.want && len(lat) > 0 {
			c.last = append(c.last, slices.Max(lat))
		}
	}
	if !fl.waitQuiet(ctx, m.cfg.quiet, m.cfg.changeTimeout) {
		m.say("churn: streams still receiving after %v", m.cfg.changeTimeout)
	}
	c.window = time.Since(t0)
	d, err := m.since(fl, start)
	if err != nil {
		return err
	}
	c.cpu, c.clientCPU, c.others, c.responses, c.edsBytes = d.cpu, d.self, d.others, d.responses[edsIndex], d.edsBytes
	c.reopened, c.drops = d.reopened, d.drops
	m.warnFailures(fl, d)
	m.say("churn: %d registrations on %d services in %v (%.0f/s), every stream final and quiet after %v: server CPU %.2f s (%.2f cores), driver CPU %.2f s, other processes %.2f s; %d stream changes, %d EDS responses holding %.1f MB; each service's last change: over streams p50 %s ms, p99 %s ms; to the service's last stream, over services p50 %s ms, p99 %s ms, max %s ms; %d streams missed it",
		c.changes, c.services, c.sending.Round(time.Millisecond), c.rate(), c.window.Round(time.Millisecond), c.cpu, c.cores(), c.clientCPU, c.others, c.needed, c.responses, float64(c.edsBytes)/1e6, ms(c.p(0.5)), ms(c.p(0.99)), ms(c.pLast(0.5)), ms(c.pLast(0.99)), ms(c.pLast(1)), c.missed)
	if c.missed > 0 {
		return fmt.Errorf("%d streams did not see their service's last change within --change-timeout (%v)", c.missed, m.cfg.changeTimeout)
	}
	return nil
}

// idle measures the server's CPU and the responses over an idle window
// as long as the change window, capped at --max-idle, and scales that
// CPU to the change window.
func (m *meter) idle(ctx context.Context, fl *fleet, r *result, profile string) error {
	idle := max(min(r.window, m.cfg.maxIdle), m.cfg.minIdle)
	if profile != "" && idle >= time.Second {
		var saved sync.WaitGroup
		defer saved.Wait()
		saved.Go(func() {
			if err := m.srv.savePprof(ctx, fmt.Sprintf("profile?seconds=%d", int(idle.Seconds())), profile); err != nil {
				m.say("idle CPU profile: %v", err)
			} else {
				m.say("saved %s", profile)
			}
		})
	}
	cpuA, err := serverCPU(m.srv.pid())
	if err != nil {
		return err
	}
	idleResp0 := fl.totalResponses()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idle):
	}
	cpuB, err := serverCPU(m.srv.pid())
	if err != nil {
		return err
	}
	r.idleWindow, r.idleRaw = idle, cpuB-cpuA
	r.idleCPU = (cpuB - cpuA) * float64(r.window) / float64(idle)
	idleResp := fl.totalResponses()
	for j := range idleResp {
		r.idleResp += idleResp[j] - idleResp0[j]
	}
	m.say("idle %v: server CPU %.2f s (scaled to the change window: %.2f s); %d responses while idle", idle.Round(time.Millisecond), cpuB-cpuA, r.idleCPU, r.idleResp)
	return nil
}

// serverCPU is the CPU time the server's threads have run, in seconds:
// from the scheduler's nanosecond counts (procstat.RunSeconds) where the
// kernel keeps them, else from utime+stime, in 10 ms ticks, which an idle
// window of a few seconds holds only a handful of.
func serverCPU(pid int) (float64, error) {
	if v, err := procstat.RunSeconds(pid); err == nil {
		return v, nil
	}
	return procstat.CPUSeconds(pid)
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

// median is the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// med is the median over rs of f.
func med(rs []*result, f func(*result) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// table renders one row of the run (one K, one streams-per-connection):
// the medians over the rounds, the ratios spillway/baseline of the medians
// against the targets, and every round with the machine's other CPU use.
func table(cfg *config, k, perConn int, rs []*result) string {
	var b strings.Builder
	if cfg.dataFile != "" {
		fmt.Fprintf(&b, "K = %d streams, %d per connection (%d connections); %d services of %s over %d zones, streams spread in proportion to endpoints; %d changes per round in add/remove pairs; medians of %d rounds\n\n",
			k, perConn, (k+perConn-1)/perConn, cfg.services, cfg.dataFile, cfg.zones, cfg.changes, cfg.rounds)
	} else {
		fmt.Fprintf(&b, "K = %d streams, %d per connection (%d connections); %d services x %d endpoints, %d zones; %d changes per round, on services of %d streams each; medians of %d rounds\n\n",
			k, perConn, (k+perConn-1)/perConn, cfg.services, cfg.endpoints, cfg.zones, cfg.changes, k/cfg.services, cfg.rounds)
	}
	if cfg.subsetSize > 0 {
		fmt.Fprintf(&b, "%s: subsets of %d for every service; spillway --weights-interval %v in both spillway targets. Its stream updates are the streams whose endpoints a change changed, its fan-out latencies the time to their final endpoints (a subset moves at the next weights cycle).\n\n",
			subsetTarget, cfg.subsetSize, cfg.weightsInterval)
	}
	fmt.Fprintln(&b, "| target | rounds ok | RSS/stream KiB | peak RSS/stream KiB | RSS/stream KiB after one GC | stack KiB/stream (before GC / after) | fan-out p50 ms | p99 ms | max ms | missed | gross CPU µs/stream update | net µs/stream update | CPU µs/EDS response | stream updates/change | EDS responses/change | L+R+C responses/change | endpoints/stream | idle server CPU ms/s | idle responses/s | driver CPU cores | other processes cores (min-max) | setup s |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	ok := map[string][]*result{}
	for _, r := range rs {
		if r.err == nil {
			ok[r.target] = append(ok[r.target], r)
		}
	}
	for _, t := range cfg.targets {
		g := ok[t]
		if len(g) == 0 {
			fmt.Fprintf(&b, "| %s | 0 | all rounds failed |\n", t)
			continue
		}
		others := make([]float64, len(g))
		for i, r := range g {
			others[i] = r.otherCPU()
		}
		eps := fmt.Sprint(cfg.endpoints)
		if t == subsetTarget {
			eps = fmt.Sprintf("%d-%d", slices.Min(collect(g, func(r *result) int { return r.subsetMin })), slices.Max(collect(g, func(r *result) int { return r.subsetMax })))
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %s | %s | %.1f | %.1f | %.1f | %d | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %s | %.1f | %.1f | %.2f | %.2f (%.2f-%.2f) | %.1f |\n",
			t, len(g),
			med(g, (*result).rssPerStream),
			med(g, (*result).peakPerStream),
			steadyCell(cfg, "%.1f", med(g, (*result).rssSteadyPerStream)),
			steadyCell(cfg, "%.2f / %.2f", med(g, func(r *result) float64 { return r.stackPerStream(false) }), med(g, func(r *result) float64 { return r.stackPerStream(true) })),
			med(g, func(r *result) float64 { return msf(r.p(0.5)) }),
			med(g, func(r *result) float64 { return msf(r.p(0.99)) }),
			med(g, func(r *result) float64 { return msf(r.p(1)) }),
			int(med(g, func(r *result) float64 { return float64(r.missed) })),
			med(g, (*result).grossPerUpdate),
			med(g, (*result).netPerUpdate),
			med(g, (*result).perEDS),
			med(g, func(r *result) float64 { return r.perChange(float64(r.updates)) }),
			med(g, func(r *result) float64 { return r.perChange(float64(r.responses[edsIndex])) }),
			med(g, func(r *result) float64 { return r.perChange(float64(r.responses[0] + r.responses[1] + r.responses[2])) }),
			eps,
			med(g, (*result).idleRate),
			med(g, func(r *result) float64 { return float64(r.idleResp) / max(r.idleWindow.Seconds(), 1e-9) }),
			med(g, func(r *result) float64 { return r.clientCPU / max(r.window.Seconds(), 1e-9) }),
			median(others), slices.Min(others), slices.Max(others),
			med(g, func(r *result) float64 { return r.setup.Seconds() }))
	}
	// ratio prints the ratio of the medians of f over num and den against
	// want (0: no target).
	ratio := func(num, den []*result, name string, f func(*result) float64, want float64) {
		nv, dv := med(num, f), med(den, f)
		switch {
		case dv <= 0:
			fmt.Fprintf(&b, "| %s | n/a (the denominator is 0) | | |\n", name)
		case want == 0:
			fmt.Fprintf(&b, "| %s | %.2f | | |\n", name, nv/dv)
		default:
			verdict := "meets"
			if nv/dv > want {
				verdict = "misses"
			}
			fmt.Fprintf(&b, "| %s | %.2f | at most %.2f | %s |\n", name, nv/dv, want, verdict)
		}
	}
	s := ok["spillway"]
	for _, ref := range []string{"baseline", linearTarget, linearSameTarget} {
		bl := ok[ref]
		if len(s) == 0 || len(bl) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n| spillway/%s (medians) | ratio | target | |\n|---|---:|---:|---|\n", ref)
		ratio(s, bl, "RSS per stream", (*result).rssPerStream, 0.5)
		ratio(s, bl, "peak RSS per stream (opening every stream at once)", (*result).peakPerStream, 0)
		if cfg.steady {
			ratio(s, bl, "RSS per stream after one GC (steady state)", (*result).rssSteadyPerStream, 0.5)
		}
		ratio(s, bl, "gross CPU per stream update", (*result).grossPerUpdate, 0.5)
		ratio(s, bl, "fan-out p99", func(r *result) float64 { return msf(r.p(0.99)) }, 0.5)
		ratio(s, bl, "net CPU per stream update", (*result).netPerUpdate, 0)
		if cfg.churnRate > 0 {
			ratio(s, bl, fmt.Sprintf("churn at %d/s: server CPU over the window (the same registrations to the same streams)", cfg.churnRate), func(r *result) float64 { return r.churn.cpu }, 0.5)
			ratio(s, bl, "churn: EDS bytes sent", func(r *result) float64 { return float64(r.churn.edsBytes) }, 0)
			ratio(s, bl, "churn: CPU per EDS response", func(r *result) float64 { return r.churn.perResponse() }, 0)
			ratio(s, bl, "churn: p99 over streams to their service's last change", func(r *result) float64 { return msf(r.churn.p(0.99)) }, 0)
			ratio(s, bl, "churn: p99 over services to their last stream", func(r *result) float64 { return msf(r.churn.pLast(0.99)) }, 0)
		}
	}
	if sub := ok[subsetTarget]; len(s) > 0 && len(sub) > 0 {
		// The subset run's stream updates are the streams whose subset a
		// change changed (changeSubset); spillway's, every stream of the
		// changed service.
		fmt.Fprintf(&b, "\n| %s/spillway (medians) | ratio | target | |\n|---|---:|---:|---|\n", subsetTarget)
		ratio(sub, s, "RSS per stream", (*result).rssPerStream, subsetWant)
		ratio(sub, s, "peak RSS per stream (opening every stream at once)", (*result).peakPerStream, 0)
		if cfg.steady {
			ratio(sub, s, "RSS per stream after one GC (steady state)", (*result).rssSteadyPerStream, subsetWant)
		}
		// CPU per stream: the server's CPU over the streams it serves,
		// for the same clients and the same changes. A change's streams
		// are the changed service's (the same number in both runs), so
		// the ratio per change is the ratio per stream; idle, both serve
		// K streams.
		ratio(sub, s, "server CPU per change, gross (per stream of the changed service)", func(r *result) float64 { return r.perChange(r.cpu) }, subsetWant)
		ratio(sub, s, "idle server CPU (per stream: K in both)", (*result).idleRate, subsetWant)
		ratio(sub, s, "gross CPU per stream update (a stream whose endpoints changed)", (*result).grossPerUpdate, 0)
		ratio(sub, s, "net CPU per stream update", (*result).netPerUpdate, 0)
		ratio(sub, s, "CPU per EDS response sent", (*result).perEDS, 0)
	}
	fmt.Fprintf(&b, "\n| round | target | RSS/stream KiB | peak | after one GC | p99 ms | gross CPU µs/stream update | net µs/stream update | other processes cores |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.err != nil {
			fmt.Fprintf(&b, "| %d | %s | failed: %s |\n", r.round, r.target, oneLine(r.err))
			continue
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f | %.1f | %s | %.1f | %.1f | %.1f | %.2f |\n",
			r.round, r.target, r.rssPerStream(), r.peakPerStream(), steadyCell(cfg, "%.1f", r.rssSteadyPerStream()), msf(r.p(0.99)), r.grossPerUpdate(), r.netPerUpdate(), r.otherCPU())
	}
	if cfg.churnRate > 0 {
		fmt.Fprintf(&b, "\nChurn: %d registrations a second for %v, one call at a time, after the idle window; the window runs until every stream of each changed service saw that service's last change and the streams were quiet.\n\n", cfg.churnRate, cfg.churnFor)
		fmt.Fprintf(&b, "| round | target | registrations/s achieved | services changed | window s | server CPU s | cores | µs per stream change | stream changes | EDS responses | MB sent | µs per EDS response | p99 over streams to the last change ms | p50 / p99 / max over services to the last stream ms | driver CPU s | other processes CPU s |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rs {
			if c := &r.churn; r.err == nil && c.changes > 0 {
				fmt.Fprintf(&b, "| %d | %s | %.0f | %d | %.1f | %.2f | %.3f | %.1f | %d | %d | %.1f | %.1f | %.1f | %.0f / %.0f / %.0f | %.2f | %.2f |\n",
					r.round, r.target, c.rate(), c.services, c.window.Seconds(), c.cpu, c.cores(), c.perNeeded(), c.needed, c.responses, float64(c.edsBytes)/1e6, c.perResponse(), msf(c.p(0.99)), msf(c.pLast(0.5)), msf(c.pLast(0.99)), msf(c.pLast(1)), c.clientCPU, c.others)
			}
		}
	}
	fmt.Fprintf(&b, "\nLoad average after this row: %s (%d CPUs).\n", loadAverage(), runtime.NumCPU())
	return b.String()
}

// subsetWant is the target of the subset run's cost per stream over
// spillway's without subsets (RSS, CPU per change and idle CPU).
const subsetWant = 1.2

// collect is f of every result of rs.
func collect(rs []*result, f func(*result) int) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// steadyCell formats a --steady figure, or "-" without --steady.
func steadyCell(cfg *config, format string, v ...any) string {
	if !cfg.steady {
		return "-"
	}
	return fmt.Sprintf(format, v...)
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
	fmt.Fprintln(w, "RSS/stream: server VmRSS with the streams open minus before, over K. "+
		"Fan-out: from just before the change call (spillway: Register/Deregister; baseline: its /change, which builds the EDS resources and calls SetSnapshot) to each subscribed stream's EDS showing it. "+
		"Gross CPU: server utime+stime over the change window (idle work included) over the stream updates the changes needed (changes x affected streams); "+
		"net: minus the idle window's CPU scaled to the change window; per EDS response: gross CPU over the EDS responses actually sent. "+
		"Idle server CPU and responses: the server's CPU, and the responses all streams received, over an idle window after the changes. "+
		"Other processes: the CPU of every other process (utime+stime from /proc/PID/stat; processes that ended in the window are missed) over the change window, in cores.")
	return f.Close()
}

// jsonResult is one round of one target in the --json file: the figures
// the tables print, by name.
type jsonResult struct {
	Target  string `json:"target"`
	Streams int    `json:"streams"`
	PerConn int    `json:"streams_per_conn"`
	Round   int    `json:"round"`
	Error   string `json:"error,omitempty"`

	RSSPerStreamKiB       float64    `json:"rss_per_stream_kib"`
	RSSSteadyPerStreamKiB float64    `json:"rss_after_gc_per_stream_kib"`
	InusePerStreamKiB     float64    `json:"inuse_after_gc_per_stream_kib"`
	PeakPerStreamKiB      float64    `json:"peak_rss_per_stream_kib"`
	RSSBeforeKiB          int64      `json:"rss_before_kib"`
	RSSAfterKiB           int64      `json:"rss_after_kib"`
	GrossCPUPerUpdateUS   float64    `json:"gross_cpu_us_per_stream_update"`
	NetCPUPerUpdateUS     float64    `json:"net_cpu_us_per_stream_update"`
	CPUPerEDSUS           float64    `json:"cpu_us_per_eds_response"`
	ServerCPUSeconds      float64    `json:"server_cpu_s"`
	Updates               int        `json:"stream_updates"`
	Changes               int        `json:"changes"`
	EDSResponses          int64      `json:"eds_responses"`
	EDSBytes              int64      `json:"eds_bytes"`
	P50MS                 float64    `json:"fanout_p50_ms"`
	P99MS                 float64    `json:"fanout_p99_ms"`
	MaxMS                 float64    `json:"fanout_max_ms"`
	Missed                int        `json:"missed"`
	SetupSeconds          float64    `json:"setup_s"`
	OtherCores            float64    `json:"other_processes_cores"`
	IdleCPUMSPerS         float64    `json:"idle_server_cpu_ms_per_s"`
	ReopenedInWindow      int64      `json:"reopened_in_window"`
	BacklogDrops          int64      `json:"backlog_drops_in_window"`
	Churn                 *jsonChurn `json:"churn,omitempty"`
}

// jsonChurn is the churn window of one round (--churn).
type jsonChurn struct {
	Registrations      int     `json:"registrations"`
	RatePerS           float64 `json:"registrations_per_s"`
	Services           int     `json:"services_changed"`
	WindowS            float64 `json:"window_s"`
	ServerCPUSeconds   float64 `json:"server_cpu_s"`
	Cores              float64 `json:"server_cores"`
	StreamChanges      int     `json:"stream_changes"`
	CPUPerStreamChange float64 `json:"cpu_us_per_stream_change"`
	EDSResponses       int64   `json:"eds_responses"`
	EDSBytes           int64   `json:"eds_bytes"`
	CPUPerEDSUS        float64 `json:"cpu_us_per_eds_response"`
	P99MS              float64 `json:"last_change_p99_ms"`
	LastStreamP50MS    float64 `json:"to_last_stream_p50_ms"`
	LastStreamP99MS    float64 `json:"to_last_stream_p99_ms"`
	DriverCPUSeconds   float64 `json:"driver_cpu_s"`
	OthersCPUSeconds   float64 `json:"other_processes_cpu_s"`
	ReopenedInWindow   int64   `json:"reopened_in_window"`
	BacklogDrops       int64   `json:"backlog_drops_in_window"`
}

// writeJSON writes rs to path as a JSON array of jsonResult.
func writeJSON(path string, rs []*result) error {
	out := make([]jsonResult, 0, len(rs))
	for _, r := range rs {
		j := jsonResult{Target: r.target, Streams: r.k, PerConn: r.perConn, Round: r.round}
		if r.err != nil {
			j.Error = r.err.Error()
			out = append(out, j)
			continue
		}
		j.RSSPerStreamKiB, j.RSSSteadyPerStreamKiB, j.PeakPerStreamKiB = r.rssPerStream(), r.rssSteadyPerStream(), r.peakPerStream()
		j.InusePerStreamKiB = r.inusePerStream()
		j.RSSBeforeKiB, j.RSSAfterKiB = r.rssBeforeKiB, r.rssAfterKiB
		j.GrossCPUPerUpdateUS, j.NetCPUPerUpdateUS, j.CPUPerEDSUS = r.grossPerUpdate(), r.netPerUpdate(), r.perEDS()
		j.ServerCPUSeconds, j.Updates, j.Changes, j.EDSResponses, j.EDSBytes = r.cpu, r.updates, len(r.calls), r.responses[edsIndex], r.edsBytes
		j.P50MS, j.P99MS, j.MaxMS, j.Missed = msf(r.p(0.5)), msf(r.p(0.99)), msf(r.p(1)), r.missed
		j.SetupSeconds, j.OtherCores, j.IdleCPUMSPerS = r.setup.Seconds(), r.otherCPU(), r.idleRate()
		j.ReopenedInWindow, j.BacklogDrops = r.reopened, r.drops
		if c := &r.churn; c.changes > 0 {
			j.Churn = &jsonChurn{
				Registrations: c.changes, RatePerS: c.rate(), Services: c.services, WindowS: c.window.Seconds(),
				ServerCPUSeconds: c.cpu, Cores: c.cores(), StreamChanges: c.needed, CPUPerStreamChange: c.perNeeded(),
				EDSResponses: c.responses, EDSBytes: c.edsBytes, CPUPerEDSUS: c.perResponse(), P99MS: msf(c.p(0.99)),
				LastStreamP50MS: msf(c.pLast(0.5)), LastStreamP99MS: msf(c.pLast(0.99)),
				DriverCPUSeconds: c.clientCPU, OthersCPUSeconds: c.others,
				ReopenedInWindow: c.reopened, BacklogDrops: c.drops,
			}
		}
		out = append(out, j)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The xds part: r.Streams xDS streams on one spillway replica holding the
// whole region, against go-control-plane in the same run, twice: with a
// SnapshotCache (a snapshot per zone, a version per resource type: an
// endpoint change answers every EDS watch of every zone) and with
// LinearCaches (one per resource type, EDS one per zone under a MuxCache:
// a change answers only the watches of the changed resource). A third
// go-control-plane run, the extra comparison, is the LinearCaches again
// with assignments that carry spillway's content for the same data
// (xdsbench's target linear-same, the baseline's --same-content: each
// endpoint's id as its hostname, spillway's weights, every locality at
// priority 0), so that both send the same bytes and only the servers'
// work differs; it runs at the LinearCache's K.
//
// It runs e2e/bench/xdsbench (one round per target) on a data file of the
// region (r.Walk: every service, its sizes, 3 zones), which both baselines
// read and spillway loads as its --static-file. The streams are spread
// over the services in proportion to their endpoints (a service with more
// endpoints serves more traffic, so it has more clients: at 100 % the
// largest service, 10,000 endpoints, has 500 streams, and a service of
// about 12 endpoints has 0 or 1), one stream per connection, each
// connection from its own 127.100.x.y source address (spillway's
// --grpc-max-streams-per-identity stays at its default 10,000 per peer
// address: each connection is one client). Each change is drawn as the
// service of a random stream, so in proportion to endpoints as churn is:
// xdsChanges changes in pairs, an endpoint added to the service and then
// removed again.
//
// A last run, spillway alone, adds the region's churn (xdsbench --churn):
// new endpoints registered at churnRate a second for 10 s, each on the
// service of a random stream, and the time from each service's last
// change to its last stream, the push target under churn.
func init() {
	register(part{
		name: "xds",
		doc:  "xDS streams: RSS per stream, CPU per stream update and push p99 against go-control-plane's SnapshotCache and LinearCache",
		run:  runXDS,
	})
}

const (
	xdsChanges = 20 // per target and size: 10 add/remove pairs
	// xdsWant is the ratio spillway/go-control-plane for RSS per
	// stream and server CPU per stream update.
	xdsWant = 0.5
	// xdsPushWant is the push latency p99, in ms.
	xdsPushWant = 1000
	// xdsChurnMax is the most registrations a second the churn run makes:
	// the driver reads every response on the same cores, and at 100 %
	// it keeps up with about 200 a second (a fifth of the region's).
	xdsChurnMax = 200
)

// churnRate is the churn run's registrations a second at r: the region's
// 1,000 a second scaled to r, at most xdsChurnMax.
func churnRate(r region) int { return max(1, min(xdsChurnMax, int(1000*r.Fraction))) }

// xdsTargets are xdsbench's targets, in the order it runs them.
var xdsTargets = []struct{ target, label string }{
	{"spillway", "spillway"},
	{"baseline", "go-control-plane SnapshotCache"},
	{"linear", "go-control-plane LinearCache"},
	{"linear-same", "go-control-plane LinearCache, spillway's content"},
}

// xdsResult is the part of xdsbench's --json output this part reads.
type xdsResult struct {
	Target              string  `json:"target"`
	Error               string  `json:"error"`
	RSSPerStreamKiB     float64 `json:"rss_per_stream_kib"`
	RSSAfterGCKiB       float64 `json:"rss_after_gc_per_stream_kib"`
	InuseKiB            float64 `json:"inuse_after_gc_per_stream_kib"`
	GrossCPUPerUpdateUS float64 `json:"gross_cpu_us_per_stream_update"`
	Updates             int     `json:"stream_updates"`
	EDSResponses        int64   `json:"eds_responses"`
	EDSBytes            int64   `json:"eds_bytes"`
	ServerCPUSeconds    float64 `json:"server_cpu_s"`
	P99MS               float64 `json:"fanout_p99_ms"`
	Missed              int     `json:"missed"`
	SetupSeconds        float64 `json:"setup_s"`
	OtherCores          float64 `json:"other_processes_cores"`
	IdleCPUMSPerS       float64 `json:"idle_server_cpu_ms_per_s"`
	ReopenedInWindow    int64   `json:"reopened_in_window"`
	BacklogDrops        int64   `json:"backlog_drops_in_window"`
	Churn               *struct {
		RatePerS        float64 `json:"registrations_per_s"`
		Cores           float64 `json:"server_cores"`
		StreamChanges   int     `json:"stream_changes"`
		EDSResponses    int64   `json:"eds_responses"`
		LastStreamP50MS float64 `json:"to_last_stream_p50_ms"`
		LastStreamP99MS float64 `json:"to_last_stream_p99_ms"`
		P99MS           float64 `json:"last_change_p99_ms"`
	} `json:"churn"`
}

func runXDS(ctx context.Context, e *env, r region) ([]figure, error) {
	spillway, err := e.Spillway(ctx)
	if err != nil {
		return nil, err
	}
	bench := filepath.Join(e.TmpDir, "xdsbench")
	baseline := filepath.Join(e.TmpDir, "xdsbench-baseline")
	if _, err := os.Stat(bench); err != nil {
		if err := goBuild(ctx, bench, "./e2e/bench/xdsbench"); err != nil {
			return nil, err
		}
		if err := goBuild(ctx, baseline, "./e2e/bench/xdsbench/baseline"); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp(e.TmpDir, "xds-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "region.tsv")
	if err := writeRegionData(data, r); err != nil {
		return nil, err
	}
	// The SnapshotCache runs with fewer streams where K would not fit
	// (snapshotStreams); the LinearCaches run at K, up to
	// linearMaxStreams.
	kSnap, kLin := snapshotStreams(r), min(r.Streams, linearMaxStreams)
	runs := []struct {
		targets string
		k       int
	}{{"spillway,linear,linear-same", r.Streams}, {"baseline", kSnap}}
	if kLin < r.Streams {
		runs = []struct {
			targets string
			k       int
		}{{"spillway", r.Streams}, {"linear,linear-same", kLin}, {"baseline", kSnap}}
	}
	got := map[string]xdsResult{}
	for i, run := range runs {
		res, err := runXDSBench(ctx, e, r, dir, fmt.Sprint(i), bench, spillway, baseline, data, run.targets, run.k)
		if err != nil {
			return nil, err
		}
		maps.Copy(got, res)
	}
	churn, err := runXDSBench(ctx, e, r, dir, "churn", bench, spillway, baseline, data, "spillway", r.Streams,
		"--churn", fmt.Sprint(churnRate(r)), "--churn-for", "10s")
	if err != nil {
		return nil, err
	}
	return append(xdsFigures(r, kSnap, kLin, got), churnFigures(r, churn["spillway"])...), nil
}

// churnFigures are the churn run's figures.
func churnFigures(r region, g xdsResult) []figure {
	c := g.Churn
	if c == nil {
		return []figure{figure{Name: "xDS under churn", Note: "xdsbench gave no churn figures"}.judge(false)}
	}
	last := atMost("churn: time from a service's last change to its last stream, p99 over services", c.LastStreamP99MS, "ms", xdsPushWant)
	last.Note = fmt.Sprintf("p50 %.0f ms; %d stream changes, %d EDS responses", c.LastStreamP50MS, c.StreamChanges, c.EDSResponses)
	return []figure{
		{Name: "churn: registrations a second (the region's 1,000 scaled, at most 200: the driver reads every response on the same cores)", Value: c.RatePerS,
			Note: fmt.Sprintf("asked for %d", churnRate(r))},
		last,
		{Name: "churn: each service's last change, p99 over streams", Value: c.P99MS, Unit: "ms"},
		{Name: "churn: server CPU over the window", Value: c.Cores, Unit: "cores"},
	}
}

// snapshotBudget bounds the SnapshotCache baseline's streams × services.
// go-control-plane v0.14's SnapshotCache keeps, per stream and type, the
// map of returned resources of its last response, made with room for
// every resource of the type (createResponse: make(map, len(resources)))
// although it holds one: measured at 5,000 services, 1,287 KiB per
// stream, about 0.26 KiB per stream per service. At the region's 10 %
// (5,000 streams, 5,000 services) that is 6.6 GB, at 100 % about 600 GB;
// 12M stream-services is about 3 GB, what this shared machine gives one
// process.
const snapshotBudget = 12_000_000

// linearMaxStreams bounds the LinearCache baseline's streams. Its memory
// per stream falls as its streams grow (181 KiB at 5,000, 61 at 25,000,
// 50 at 50,000: a cost per subscribed resource spread over more streams),
// and 50,000 streams took about 3.5 GB beside the region's assignments,
// so it runs at the region's K, as spillway does: a smaller K would put
// its per-stream figures where they are higher.
const linearMaxStreams = 50_000

// snapshotStreams is the number of streams the SnapshotCache baseline
// runs with at r: r.Streams while streams × services stays within
// snapshotBudget, else fewer. Its figures are per stream, at that K.
func snapshotStreams(r region) int {
	return max(100, min(r.Streams, snapshotBudget/r.Services))
}

// maxConns is the most connections a run opens: this machine's
// RLIMIT_NOFILE is 20,000, hard (no CAP_SYS_RESOURCE to raise it), and
// the server, which inherits it from xdsbench, needs a descriptor per
// connection too.
const maxConns = 18_000

// streamsPerConn is the fewest streams per connection that keep k
// streams within maxConns connections: 1 (as grpc-go and Envoy clients
// do) up to 18,000 streams, 2 at 25,000, 3 at 50,000.
func streamsPerConn(k int) int { return (k + maxConns - 1) / maxConns }

// runXDSBench runs xdsbench once: targets (comma-separated) at k streams,
// one round, on the region's data file, with extra arguments; it returns
// each target's result.
func runXDSBench(ctx context.Context, e *env, r region, dir, tag, bench, spillway, baseline, data, targets string, k int, extra ...string) (map[string]xdsResult, error) {
	out := filepath.Join(dir, "xds-"+tag+".json")
	logPath := filepath.Join(dir, "xdsbench-"+tag+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{
		"--data", data, "--target", targets, "--rounds", "1",
		"--streams", fmt.Sprint(k), "--streams-per-conn", fmt.Sprint(streamsPerConn(k)),
		"--changes", fmt.Sprint(xdsChanges),
		// --scavenge 8s: spillway parses its static file before the
		// first reading, and the background scavenger needs seconds to
		// return that garbage's pages; with 2 s the reading before the
		// streams held pages the streams then reused.
		"--settle", "1s", "--scavenge", "8s", "--max-idle", "3s", "--gap", "100ms",
		"--spillway-bin", spillway, "--baseline-bin", baseline, "--json", out,
	}
	args = append(args, extra...)
	e.Logf("xds at %s: xdsbench %s (progress in %s)", r.Label(), strings.Join(args, " "), logPath)
	start := time.Now()
	cmd := exec.CommandContext(ctx, bench, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// xdsbench, and the servers with it, die with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if e.Verbose {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	runErr := cmd.Run()
	e.Logf("xds at %s: xdsbench %s took %v", r.Label(), targets, time.Since(start).Round(time.Second))
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("xdsbench: %v, and no results: %w; last lines of its log:\n%s", runErr, err, tailFile(logPath, 20))
	}
	var results []xdsResult
	if err := json.Unmarshal(b, &results); err != nil {
		return nil, fmt.Errorf("xdsbench results %s: %w", out, err)
	}
	got := map[string]xdsResult{}
	for _, res := range results {
		if res.Error != "" {
			return nil, fmt.Errorf("xdsbench %s: %s", res.Target, res.Error)
		}
		got[res.Target] = res
	}
	for t := range strings.SplitSeq(targets, ",") {
		if _, ok := got[t]; !ok {
			return nil, fmt.Errorf("xdsbench: no result for %s (%v); last lines of its log:\n%s", t, runErr, tailFile(logPath, 20))
		}
	}
	return got, nil
}

// xdsFigures turns xdsbench's results into the part's figures.
func xdsFigures(r region, kSnap, kLin int, got map[string]xdsResult) []figure {
	s, snap, lin, linSame := got["spillway"], got["baseline"], got["linear"], got["linear-same"]
	ratio := func(name string, num, den float64) figure {
		if den <= 0 {
			return figure{Name: name, Note: "the denominator is 0"}
		}
		return atMost(name, num/den, "x", xdsWant)
	}
	var figs []figure
	figs = append(figs,
		figure{Name: "xDS streams", Value: float64(r.Streams)},
		figure{Name: "xDS streams per connection", Value: float64(streamsPerConn(r.Streams)),
			Note: "more than 1 only where the streams would need more connections than this machine's RLIMIT_NOFILE (20,000, hard) lets the server hold"})
	snapK := figure{Name: "xDS streams, go-control-plane SnapshotCache", Value: float64(kSnap)}
	if kSnap < r.Streams {
		snapK.Note = fmt.Sprintf("fewer than %d: its memory per stream grows with the services (about 0.26 KiB per service), so %d streams over %d services would not fit this machine", r.Streams, r.Streams, r.Services)
	}
	figs = append(figs, snapK)
	// The LinearCache with spillway's content runs at the same K.
	linK := figure{Name: "xDS streams, go-control-plane LinearCache", Value: float64(kLin)}
	if kLin < r.Streams {
		linK.Note = fmt.Sprintf("fewer than %d (at most %d, about 3.5 GB at 50 KiB a stream); its memory per stream falls as its streams grow, so this K flatters spillway's ratio", r.Streams, linearMaxStreams)
	}
	figs = append(figs, linK)
	// Memory per stream is the Go runtime's heap and stacks in use
	// (HeapInuse + StackInuse) right after one GC in each server, with the
	// streams minus before them. VmRSS differences do not work here: a Go
	// server keeps the pages of freed garbage up to its heap goal (spillway
	// holds what parsing its static file left, a gigabyte at 100 %), and
	// the streams' memory then fits in pages already resident, so RSS per
	// stream came out near 0 or negative. Both servers are Go programs;
	// the kernel's socket buffers are in neither figure.
	for _, t := range xdsTargets {
		g := got[t.target]
		figs = append(figs, figure{Name: "memory per stream (heap + stacks in use after one GC), " + t.label, Value: g.InuseKiB, Unit: "KiB",
			Note: fmt.Sprintf("VmRSS per stream: %.1f KiB, after one GC %.1f KiB", g.RSSPerStreamKiB, g.RSSAfterGCKiB)})
	}
	figs = append(figs,
		ratio("memory per stream, spillway / SnapshotCache", s.InuseKiB, snap.InuseKiB),
		ratio("memory per stream, spillway / LinearCache", s.InuseKiB, lin.InuseKiB))
	for _, t := range xdsTargets {
		g := got[t.target]
		figs = append(figs, figure{Name: "server CPU per stream update (gross), " + t.label, Value: g.GrossCPUPerUpdateUS, Unit: "µs",
			Note: fmt.Sprintf("%d stream updates, %d EDS responses sent, other processes %.2f cores, %d streams opened again, %s packets dropped by the kernel's input backlog", g.Updates, g.EDSResponses, g.OtherCores, g.ReopenedInWindow, dropsText(g.BacklogDrops))})
	}
	// A change window in which streams failed and were opened again holds
	// their new initial responses: its CPU does not compare.
	cpuRatio := func(name string, num, den xdsResult) figure {
		f := ratio(name, num.GrossCPUPerUpdateUS, den.GrossCPUPerUpdateUS)
		var lost []string
		for _, g := range []xdsResult{num, den} {
			if g.ReopenedInWindow > 0 {
				lost = append(lost, fmt.Sprintf("%d streams of %s", g.ReopenedInWindow, g.Target))
			}
		}
		if len(lost) > 0 {
			f = f.judge(false)
			f.Note = "not comparable: " + strings.Join(lost, " and ") + " failed and were opened again in the change window"
		}
		return f
	}
	figs = append(figs,
		cpuRatio("CPU per stream update, spillway / SnapshotCache", s, snap),
		cpuRatio("CPU per stream update, spillway / LinearCache", s, lin),
		cpuRatio("CPU per stream update, spillway / LinearCache with spillway's content", s, linSame))
	// What the CPU bought: the assignments' bytes each stream update
	// carried (over every EDS response of the change window, the
	// SnapshotCache's to unchanged services too), and the server's CPU
	// per MB of them.
	for _, t := range xdsTargets {
		g := got[t.target]
		figs = append(figs, figure{Name: "EDS bytes sent per stream update, " + t.label, Value: float64(g.EDSBytes) / float64(max(1, g.Updates)) / 1024, Unit: "KiB",
			Note: fmt.Sprintf("server CPU %.0f ms per MB of assignments sent", g.ServerCPUSeconds*1e3/max(float64(g.EDSBytes)/1e6, 1e-9))})
	}
	// Gross CPU holds the server's background work over the change
	// window: its idle CPU, read right after, shows how much.
	for _, t := range xdsTargets {
		figs = append(figs, figure{Name: "idle server CPU, " + t.label, Value: got[t.target].IdleCPUMSPerS, Unit: "ms/s"})
	}
	for _, t := range xdsTargets {
		g := got[t.target]
		f := atMost("push p99 to the last stream of the changed service, "+t.label, g.P99MS, "ms", xdsPushWant)
		if g.Missed > 0 {
			f = f.judge(false)
			f.Note = fmt.Sprintf("%d stream updates missed", g.Missed)
		}
		figs = append(figs, f)
	}
	for _, t := range xdsTargets {
		figs = append(figs, figure{Name: "time to open all streams (initial EDS), " + t.label, Value: got[t.target].SetupSeconds, Unit: "s"})
	}
	return figs
}

// dropsText is xdsbench's backlog_drops_in_window as text: -1 is
// "unknown" (it could not read /proc/net/softnet_stat).
func dropsText(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}

// writeRegionData writes the region as an xdsbench data file (package
// e2e/bench/xdsbench/internal/benchdata): SERVICE ID ADDRESS ZONE, tab
// separated, one endpoint a line. The ids are r.Walk's with dots as
// dashes: a registry id is a DNS label.
func writeRegionData(path string, r region) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var b strings.Builder
	var werr error
	r.Walk(func(ep Endpoint) bool {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", ep.Service, strings.ReplaceAll(ep.ID, ".", "-"), ep.Addr, ep.Zone)
		if b.Len() >= 1<<20 {
			_, werr = f.WriteString(b.String())
			b.Reset()
		}
		return werr == nil
	})
	if werr == nil {
		_, werr = f.WriteString(b.String())
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return fmt.Errorf("write region data %s: %w", path, werr)
	}
	return nil
}

// tailFile is the last n lines of the file at path.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Command replicabench measures spillway replicas on a real etcd: how many
// registrations per second 3 replicas acknowledge with etcd fsyncing every
// commit, how many store writes the heartbeats of 100,000 leases cost, and
// how much memory an endpoint costs a replica.
//
// It builds cmd/spillway once into a temporary directory, starts
// /usr/bin/etcd (--etcd) with its default settings (one member, WAL fsync on
// every commit) on 127.0.0.1 ports picked at random and a temporary
// --data-dir, and starts --replicas spillway processes with
// --store etcd://127.0.0.1:PORT/replicabench, distinct ports, their own
// temporary --data-dir and --pprof. Then, in order:
//
//   - Memory before: after --settle, a GC in each replica (GET
//     /debug/pprof/heap?gc=1), then VmRSS (/proc/PID/status) and
//     go_memstats_heap_inuse_bytes (/metrics).
//   - Registrations: --leases Register calls over the registry gRPC API
//     (registry/registryv1), round-robin across the replicas, at most
//     --register-concurrency in flight, spread over --services services.
//     Acknowledged registrations per second, latency p50/p99/max, and etcd's
//     own work over the phase: the revision delta (one per committed write),
//     etcd_mvcc_put_total and the WAL fsyncs
//     (etcd_disk_wal_fsync_duration_seconds_count, _sum) from etcd's
//     /metrics, and the CPU (utime+stime) etcd and the replicas used.
//   - Memory after: once every replica lists all the endpoints
//     (ListServices), the same readings; (after − before) / leases per
//     replica.
//   - Heartbeats: for --duration, every lease is heartbeated once per
//     --heartbeat-interval to the replica that registered it, over
//     --streams HeartbeatStream streams per replica, each stream's share
//     paced in steps of 100 ms. Acknowledged heartbeats per second against
//     etcd's revisions and puts per second over the same window, with the
//     bound replicas × 32 / --lastseen-flush, and the replicas' CPU per
//     heartbeat.
//
// Registrations ask for --ttl (default 1 h, with --lease-max-ttl raised to
// match) so that no lease expires while the fleet is still being registered:
// the stamp writes do not depend on the TTL (every flush writes each changed
// shard once).
//
// It prints markdown tables and writes them to --out if set.
//
// Usage, from the repository root:
//
//	go run ./e2e/bench/replicabench --leases 10000 --duration 30s
//	go run ./e2e/bench/replicabench --leases 100000 --out /tmp/replicas.md
//
// Everything runs on 127.0.0.1; every loop is bounded in count and time; the
// processes are stopped by pid on exit, including on Ctrl-C, and die with
// the driver if it is killed (Pdeathsig).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/e2e/bench/internal/hbload"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/spillway/spillway/registry/registryv1"

	"github.com/spillway/spillway/e2e/bench/internal/procstat"
)

type config struct {
	replicas    int
	leases      int
	concurrency int
	services    int
	interval    time.Duration
	duration    time.Duration
	flush       time.Duration
	streams     int
	ttl         time.Duration
	settle      time.Duration
	regTimeout  time.Duration
	etcdBin     string
	out         string
}

func main() {
	var c config
	flag.IntVar(&c.replicas, "replicas", 3, "spillway replicas sharing the etcd store")
	flag.IntVar(&c.leases, "leases", 100000, "endpoints registered (one lease each)")
	flag.IntVar(&c.concurrency, "register-concurrency", 64, "registrations in flight at once")
	flag.IntVar(&c.services, "services", 100, "services the endpoints are spread over")
	flag.DurationVar(&c.interval, "heartbeat-interval", 10*time.Second, "each lease is heartbeated once per interval")
	flag.DurationVar(&c.duration, "duration", 60*time.Second, "length of the heartbeat window")
	flag.DurationVar(&c.flush, "lastseen-flush", 10*time.Second, "the replicas' --lastseen-flush")
	flag.IntVar(&c.streams, "streams", 4, "HeartbeatStream streams per replica")
	flag.DurationVar(&c.ttl, "ttl", time.Hour, "lease TTL asked for at registration")
	flag.DurationVar(&c.settle, "settle", 3*time.Second, "wait before each memory reading")
	flag.DurationVar(&c.regTimeout, "register-timeout", 30*time.Minute, "bound on the registration phase")
	flag.StringVar(&c.etcdBin, "etcd", "/usr/bin/etcd", "etcd server binary")
	flag.StringVar(&c.out, "out", "", "also write the markdown tables to this file")
	flag.Parse()
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "replicabench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Pdeathsig fires when the thread that started a child exits: keep the
	// children's parent thread alive for the whole run.
	runtime.LockOSThread()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "replicabench:", err)
		stop()
		os.Exit(1)
	}
}

func (c config) validate() error {
	switch {
	case c.replicas < 1:
		return fmt.Errorf("--replicas: %d, want >= 1", c.replicas)
	case c.leases < 1:
		return fmt.Errorf("--leases: %d, want >= 1", c.leases)
	case c.concurrency < 1:
		return fmt.Errorf("--register-concurrency: %d, want >= 1", c.concurrency)
	case c.services < 1:
		return fmt.Errorf("--services: %d, want >= 1", c.services)
	case c.interval < 100*time.Millisecond:
		return fmt.Errorf("--heartbeat-interval: %v, want >= 100ms", c.interval)
	case c.duration < c.interval:
		return fmt.Errorf("--duration: %v, want >= --heartbeat-interval %v", c.duration, c.interval)
	case c.duration > time.Hour:
		return fmt.Errorf("--duration: %v, want <= 1h", c.duration)
	case c.flush <= 0:
		return fmt.Errorf("--lastseen-flush: %v, want > 0", c.flush)
	case c.streams < 1:
		return fmt.Errorf("--streams: %d, want >= 1", c.streams)
	case c.ttl < time.Second:
		return fmt.Errorf("--ttl: %v, want >= 1s", c.ttl)
	}
	return nil
}

// replica is one spillway process and its registry client.
type replica struct {
	*proc
	grpcAddr, httpAddr string
	client             pb.RegistryClient
	conn               *grpc.ClientConn
}

// memReading is one replica's memory after a forced GC.
type memReading struct {
	rssKiB    int64
	heapInuse float64
}

func run(ctx context.Context, c config) error {
	dir, err := os.MkdirTemp("", "replicabench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "building spillway into", dir)
	bin := filepath.Join(dir, "spillway")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/spillway")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/spillway (run from the repository root): %w", err)
	}
	etcdVersion := benchproc.EtcdVersion(c.etcdBin)

	etcd, etcdURL, err := startEtcd(ctx, dir, c.etcdBin)
	if err != nil {
		return err
	}
	defer etcd.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()

	reps, err := startReplicas(ctx, c, dir, bin, strings.TrimPrefix(etcdURL, "http://"))
	for _, r := range reps {
		defer r.Stop()
		defer r.conn.Close()
	}
	if err != nil {
		return err
	}

	before, err := readMem(ctx, c, reps)
	if err != nil {
		return err
	}
	reg, homes, err := register(ctx, c, etcd, reps, cli, etcdURL)
	if err != nil {
		return err
	}
	if err := waitListed(ctx, reps, c.leases); err != nil {
		return err
	}
	after, err := readMem(ctx, c, reps)
	if err != nil {
		return err
	}
	hb, err := heartbeat(ctx, c, etcd, reps, homes, cli, etcdURL)
	if err != nil {
		return err
	}
	afterHB, err := readMem(ctx, c, reps)
	if err != nil {
		return err
	}
	md := report(c, etcdVersion, reg, hb, before, after, afterHB)
	fmt.Print(md)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	return nil
}

func startEtcd(ctx context.Context, dir, bin string) (*proc, string, error) {
	p, client, err := benchproc.StartEtcd(ctx, "bench", dir, dir, bin)
	return p, "http://" + client, err
}

func startReplicas(ctx context.Context, c config, dir, bin, etcdHost string) ([]*replica, error) {
	var reps []*replica
	for i := range c.replicas {
		grpcAddr, err1 := freeAddr()
		httpAddr, err2 := freeAddr()
		dnsAddr, err3 := freeAddr()
		if err := errors.Join(err1, err2, err3); err != nil {
			return reps, err
		}
		id := fmt.Sprintf("r%d", i)
		data := filepath.Join(dir, id)
		p, err := startProc(dir, id, bin,
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--dns-addr", dnsAddr,
			"--data-dir", data, "--store", "etcd://"+etcdHost+"/replicabench",
			"--replica-id", id, "--lastseen-flush", c.flush.String(),
			"--lease-max-ttl", c.ttl.String(), "--pprof", "--log-level", "warn")
		if err != nil {
			return reps, err
		}
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.Stop()
			return reps, fmt.Errorf("dial %s: %w", id, err)
		}
		reps = append(reps, &replica{proc: p, grpcAddr: grpcAddr, httpAddr: httpAddr, client: pb.NewRegistryClient(conn), conn: conn})
	}
	for _, r := range reps {
		if err := r.WaitHTTP(ctx, "http://"+r.httpAddr+"/readyz", 60*time.Second); err != nil {
			return reps, err
		}
	}
	return reps, nil
}

// readMem forces a GC in every replica after --settle and reads its RSS and
// heap in use.
func readMem(ctx context.Context, c config, reps []*replica) ([]memReading, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(c.settle):
	}
	out := make([]memReading, len(reps))
	for i, r := range reps {
		if err := forceGC(r.httpAddr); err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		m, err := scrape("http://"+r.httpAddr+"/metrics", "go_memstats_heap_inuse_bytes")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		rss, err := procstat.RSSKiB(r.PID())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		out[i] = memReading{rssKiB: rss, heapInuse: m["go_memstats_heap_inuse_bytes"]}
	}
	return out, nil
}

// etcdCounters is what etcd had done at one moment.
type etcdCounters struct {
	rev      int64
	puts     float64
	fsyncs   float64
	fsyncSum float64 // seconds spent in WAL fsyncs
	commits  float64
}

var etcdMetrics = []string{
	"etcd_mvcc_put_total", "etcd_debugging_mvcc_put_total",
	"etcd_disk_wal_fsync_duration_seconds_count",
	"etcd_disk_wal_fsync_duration_seconds_sum",
	"etcd_disk_backend_commit_duration_seconds_count",
}

func readEtcd(ctx context.Context, cli *clientv3.Client, etcdURL string) (etcdCounters, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(gctx, "replicabench-revision-probe")
	if err != nil {
		return etcdCounters{}, fmt.Errorf("etcd revision: %w", err)
	}
	m, err := scrape(etcdURL+"/metrics", etcdMetrics...)
	if err != nil {
		return etcdCounters{}, fmt.Errorf("etcd metrics: %w", err)
	}
	puts, ok := m["etcd_mvcc_put_total"]
	if !ok {
		puts = m["etcd_debugging_mvcc_put_total"]
	}
	return etcdCounters{
		rev:      resp.Header.Revision,
		puts:     puts,
		fsyncs:   m["etcd_disk_wal_fsync_duration_seconds_count"],
		fsyncSum: m["etcd_disk_wal_fsync_duration_seconds_sum"],
		commits:  m["etcd_disk_backend_commit_duration_seconds_count"],
	}, nil
}

// cpuOf returns the CPU seconds of etcd and of all the replicas together
// (0 for a process whose stat cannot be read).
func cpuOf(etcd *proc, reps []*replica) (etcdCPU, repCPU float64) {
	etcdCPU, _ = procstat.CPUSeconds(etcd.PID())
	for _, r := range reps {
		s, _ := procstat.CPUSeconds(r.PID())
		repCPU += s
	}
	return etcdCPU, repCPU
}

func (a etcdCounters) sub(b etcdCounters) etcdCounters {
	return etcdCounters{rev: a.rev - b.rev, puts: a.puts - b.puts, fsyncs: a.fsyncs - b.fsyncs, fsyncSum: a.fsyncSum - b.fsyncSum, commits: a.commits - b.commits}
}

type regResult struct {
	acked, failed int
	firstErr      error
	wall          time.Duration
	etcdCPU       float64 // seconds of CPU etcd used over the phase
	replicaCPU    float64 // seconds of CPU all the replicas used
	p50, p99, max time.Duration
	etcd          etcdCounters
}

func endpointRequest(i, services int, ttl time.Duration) *pb.RegisterRequest {
	return &pb.RegisterRequest{
		Service: fmt.Sprintf("svc-%d", i%services),
		Endpoint: &pb.Endpoint{
			Address:  fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
			Ports:    []*pb.Port{{Name: "grpc", Number: 8080}},
			Locality: &pb.Locality{Region: "r1", Zone: fmt.Sprintf("zone-%c", 'a'+i%3)},
		},
		TtlSeconds: uint32(ttl / time.Second),
	}
}

// register registers c.leases endpoints, endpoint i on replica i%N, and
// returns each replica's lease ids.
func register(ctx context.Context, c config, etcd *proc, reps []*replica, cli *clientv3.Client, etcdURL string) (regResult, [][]string, error) {
	var res regResult
	ctx, cancel := context.WithTimeout(ctx, c.regTimeout)
	defer cancel()
	e0, err := readEtcd(ctx, cli, etcdURL)
	if err != nil {
		return res, nil, err
	}
	lat := make([]time.Duration, c.leases)
	leases := make([]string, c.leases)
	var next, failed atomic.Int64
	var errOnce sync.Once
	fmt.Fprintf(os.Stderr, "registering %d endpoints, %d in flight\n", c.leases, c.concurrency)
	ecpu0, rcpu0 := cpuOf(etcd, reps)
	start := time.Now()
	var wg sync.WaitGroup
	for range c.concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= c.leases || ctx.Err() != nil {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
				t0 := time.Now()
				resp, err := reps[i%len(reps)].client.Register(rctx, endpointRequest(i, c.services, c.ttl))
				lat[i] = time.Since(t0)
				rcancel()
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { res.firstErr = fmt.Errorf("register %d on r%d: %w", i, i%len(reps), err) })
					continue
				}
				leases[i] = resp.LeaseId
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	ecpu1, rcpu1 := cpuOf(etcd, reps)
	res.etcdCPU, res.replicaCPU = ecpu1-ecpu0, rcpu1-rcpu0
	if err := ctx.Err(); err != nil {
		return res, nil, fmt.Errorf("registration phase: %w", err)
	}
	e1, err := readEtcd(ctx, cli, etcdURL)
	if err != nil {
		return res, nil, err
	}
	res.etcd = e1.sub(e0)
	res.failed = int(failed.Load())
	res.acked = c.leases - res.failed
	homes := make([][]string, len(reps))
	var ok []time.Duration
	for i, l := range leases {
		if l != "" {
			homes[i%len(reps)] = append(homes[i%len(reps)], l)
			ok = append(ok, lat[i])
		}
	}
	slices.Sort(ok)
	if n := len(ok); n > 0 {
		res.p50, res.p99, res.max = ok[n/2], ok[min(n-1, n*99/100)], ok[n-1]
	}
	if res.failed > 0 {
		fmt.Fprintf(os.Stderr, "%d registrations failed; first: %v\n", res.failed, res.firstErr)
	}
	return res, homes, nil
}

// waitListed waits (at most 2 minutes) until every replica lists want
// endpoints.
func waitListed(ctx context.Context, reps []*replica, want int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, r := range reps {
		for {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := r.client.ListServices(lctx, &pb.ListServicesRequest{})
			cancel()
			n := 0
			if err == nil {
				for _, s := range resp.Services {
					n += int(s.Endpoints)
				}
			}
			if n >= want {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s lists %d endpoints, want %d (err %v)", r.Name, n, want, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

type hbResult struct {
	sent, acked, notFound int64
	streamErrs            int64
	window                time.Duration
	etcdCPU, replicaCPU   float64
	etcd                  etcdCounters
}

// heartbeat heartbeats every lease once per interval for c.duration over
// c.streams streams per replica.
func heartbeat(ctx context.Context, c config, etcd *proc, reps []*replica, homes [][]string, cli *clientv3.Client, etcdURL string) (hbResult, error) {
	var res hbResult
	const step = 100 * time.Millisecond
	steps := int(c.interval / step)
	rounds := int(c.duration / c.interval)
	e0, err := readEtcd(ctx, cli, etcdURL)
	if err != nil {
		return res, err
	}
	var counts hbload.Counts
	var sent atomic.Int64
	acked, notFound, streamErrs := &counts.Acked, &counts.NotFound, &counts.StreamErrs
	fmt.Fprintf(os.Stderr, "heartbeating for %v: %d rounds of %v\n", time.Duration(rounds)*c.interval, rounds, c.interval)
	ecpu0, rcpu0 := cpuOf(etcd, reps)
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, c.duration+time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for h, ls := range homes {
		for s := range c.streams {
			share := ls[s*len(ls)/c.streams : (s+1)*len(ls)/c.streams]
			if len(share) == 0 {
				continue
			}
			wg.Go(func() {
				stream, err := reps[h].client.HeartbeatStream(sctx)
				if err != nil {
					streamErrs.Add(1)
					return
				}
				recvDone := counts.Receive(stream)
				// Step k of the run sends its slice of the share at
				// start + k×step; a late step is sent at once.
			send:
				for k := range rounds * steps {
					if d := time.Until(start.Add(time.Duration(k) * step)); d > 0 {
						select {
						case <-sctx.Done():
							break send
						case <-time.After(d):
						}
					}
					j := k % steps
					for _, l := range share[j*len(share)/steps : (j+1)*len(share)/steps] {
						if stream.Send(&pb.HeartbeatRequest{LeaseId: l}) != nil {
							streamErrs.Add(1)
							break send
						}
						sent.Add(1)
					}
				}
				stream.CloseSend()
				<-recvDone
			})
		}
	}
	wg.Wait()
	res.window = time.Since(start)
	ecpu1, rcpu1 := cpuOf(etcd, reps)
	res.etcdCPU, res.replicaCPU = ecpu1-ecpu0, rcpu1-rcpu0
	e1, err := readEtcd(ctx, cli, etcdURL)
	if err != nil {
		return res, err
	}
	res.etcd = e1.sub(e0)
	res.sent, res.acked, res.notFound, res.streamErrs = sent.Load(), acked.Load(), notFound.Load(), streamErrs.Load()
	return res, nil
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

func report(c config, etcdVersion string, reg regResult, hb hbResult, before, after, afterHB []memReading) string {
	var b strings.Builder
	fmt.Fprintf(&b, "replicabench %s: %d replicas, %d leases over %d services, etcd %s (one member, default settings: WAL fsync per commit), %s, %d CPUs, load average at the end %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), c.replicas, c.leases, c.services, etcdVersion, runtime.Version(), runtime.NumCPU(), benchproc.LoadAvg())

	fmt.Fprintf(&b, "Registrations (%d in flight, round-robin over the replicas):\n\n", c.concurrency)
	b.WriteString("| acknowledged | failed | wall s | registrations/s | p50 ms | p99 ms | max ms | etcd revisions | etcd puts | etcd WAL fsyncs | mean fsync ms | registrations per fsync | etcd CPU s | replicas CPU s |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	perFsync, fsyncMs := 0.0, 0.0
	if reg.etcd.fsyncs > 0 {
		perFsync = float64(reg.acked) / reg.etcd.fsyncs
		fsyncMs = reg.etcd.fsyncSum / reg.etcd.fsyncs * 1000
	}
	fmt.Fprintf(&b, "| %d | %d | %.1f | %.0f | %s | %s | %s | %d | %.0f | %.0f | %.2f | %.1f | %.1f | %.1f |\n\n",
		reg.acked, reg.failed, reg.wall.Seconds(), float64(reg.acked)/reg.wall.Seconds(),
		ms(reg.p50), ms(reg.p99), ms(reg.max), reg.etcd.rev, reg.etcd.puts, reg.etcd.fsyncs, fsyncMs, perFsync, reg.etcdCPU, reg.replicaCPU)

	w := hb.window.Seconds()
	fmt.Fprintf(&b, "Heartbeats (each lease every %v, %d HeartbeatStream streams per replica, --lastseen-flush %v):\n\n", c.interval, c.streams, c.flush)
	b.WriteString("| window s | target/s | sent/s | acknowledged/s | unknown lease | stream errors | etcd revisions/s | etcd puts/s | bound replicas×32/flush | heartbeats per store write | replicas CPU per 1,000 heartbeats ms |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	perWrite, cpuPerK := 0.0, 0.0
	if hb.etcd.rev > 0 {
		perWrite = float64(hb.acked) / float64(hb.etcd.rev)
	}
	if hb.acked > 0 {
		cpuPerK = hb.replicaCPU / float64(hb.acked) * 1e6
	}
	fmt.Fprintf(&b, "| %.1f | %.0f | %.0f | %.0f | %d | %d | %.2f | %.2f | %.1f | %.0f | %.1f |\n\n",
		w, float64(c.leases)/c.interval.Seconds(), float64(hb.sent)/w, float64(hb.acked)/w, hb.notFound, hb.streamErrs,
		float64(hb.etcd.rev)/w, hb.etcd.puts/w, float64(c.replicas*32)/c.flush.Seconds(), perWrite, cpuPerK)

	b.WriteString("Memory per replica (after a forced GC; per endpoint = (after registrations − before) / leases):\n\n")
	b.WriteString("| replica | RSS before MiB | RSS after MiB | RSS after heartbeats MiB | RSS per endpoint B | heap in use before MiB | after MiB | after heartbeats MiB | heap per endpoint B | heap per endpoint with stamps B |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	const mib = 1 << 20
	n := float64(c.leases)
	for i := range before {
		fmt.Fprintf(&b, "| r%d | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f |\n", i,
			float64(before[i].rssKiB)/1024, float64(after[i].rssKiB)/1024, float64(afterHB[i].rssKiB)/1024,
			float64(after[i].rssKiB-before[i].rssKiB)*1024/n,
			before[i].heapInuse/mib, after[i].heapInuse/mib, afterHB[i].heapInuse/mib,
			(after[i].heapInuse-before[i].heapInuse)/n, (afterHB[i].heapInuse-before[i].heapInuse)/n)
	}
	return b.String()
}

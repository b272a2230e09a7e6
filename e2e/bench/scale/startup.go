package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/e2e/bench/internal/procstat"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// storeBaseline names a git revision whose spillway the startup and
// heartbeat parts also run, beside the working tree's, on the same etcd:
// a before/after of a change in one run.
var storeBaseline = flag.String("store-baseline", "", "startup, heartbeat: also measure spillway built at this git `revision` (before/after in one run)")

func init() {
	register(part{
		name: "startup",
		doc:  "a replica starting on an etcd holding the region: exec to ready to serve every endpoint, RSS and heap per endpoint",
		run:  runStartup,
	})
}

// spillwayBin is one spillway build: the working tree's, or a baseline's.
type spillwayBin struct {
	Label string // "" for the working tree, else "REV: "
	Path  string
}

// spillwayBins is the working tree's spillway and, with --store-baseline,
// the baseline's (built once per run from `git archive`).
func spillwayBins(ctx context.Context, e *env) ([]spillwayBin, error) {
	bin, err := e.Spillway(ctx)
	if err != nil {
		return nil, err
	}
	out := []spillwayBin{{Path: bin}}
	if *storeBaseline == "" {
		return out, nil
	}
	base := filepath.Join(e.TmpDir, "spillway-"+*storeBaseline)
	if _, err := os.Stat(base); err != nil {
		src := filepath.Join(e.TmpDir, "src-"+*storeBaseline)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, err
		}
		e.Logf("building spillway at %s", *storeBaseline)
		cmd := exec.CommandContext(ctx, "sh", "-c", `git archive "$1" | tar -x -C "$2" && cd "$2" && go build -o "$3" ./cmd/spillway`, "sh", *storeBaseline, src, base)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("--store-baseline %s: build: %w", *storeBaseline, err)
		}
		os.RemoveAll(src)
	}
	return append([]spillwayBin{{Label: *storeBaseline + ": ", Path: base}}, out...), nil
}

// replicaProc is one spillway replica on an etcdRegion.
type replicaProc struct {
	*benchproc.Proc
	GRPC, HTTP, DNS string
	conn            *grpc.ClientConn
	Client          pb.RegistryClient
	started         time.Time
}

// startReplica execs bin as a replica on x's store, with its own
// 127.0.0.1 ports, data dir and --pprof, and returns once it listens on
// its HTTP port (it does not wait for it to serve). A free port can be
// taken between FreeAddr and the replica's bind (an outgoing connection's
// ephemeral port): a replica that exits on "address already in use" is
// started again on new ports, at most 3 times.
func startReplica(e *env, bin, name string, x *etcdRegion, extra ...string) (*replicaProc, error) {
	for attempt := 1; ; attempt++ {
		p, err := startReplicaOnce(e, bin, name, x, extra...)
		if err != nil {
			return nil, err
		}
		err = p.waitListening(2 * time.Minute)
		if err == nil {
			return p, nil
		}
		p.Stop()
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
		e.Logf("%s: a port was taken before it bound (attempt %d), starting it again on new ports", name, attempt)
	}
}

func startReplicaOnce(e *env, bin, name string, x *etcdRegion, extra ...string) (*replicaProc, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := benchproc.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	data := filepath.Join(e.TmpDir, name+"-data")
	args := append([]string{
		"--grpc-addr", addrs[0], "--http-addr", addrs[1], "--dns-addr", addrs[2],
		"--data-dir", data, "--store", x.StoreURL(), "--replica-id", name,
		"--pprof", "--log-level", "warn",
	}, extra...)
	started := time.Now()
	p, err := benchproc.Start(e.TmpDir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("dial %s: %w", name, err)
	}
	return &replicaProc{Proc: p, GRPC: addrs[0], HTTP: addrs[1], DNS: addrs[2], conn: conn, Client: pb.NewRegistryClient(conn), started: started}, nil
}

// waitListening waits until p accepts a TCP connection on its HTTP port,
// or fails with its log's tail when it exits first.
func (p *replicaProc) waitListening(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.Done:
			return fmt.Errorf("%s exited before it listened:\n%s", p.Name, p.Tail())
		default:
		}
		if c, err := net.DialTimeout("tcp", p.HTTP, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening on %s after %v:\n%s", p.Name, p.HTTP, timeout, p.Tail())
}

// Stop closes the client and stops the process.
func (p *replicaProc) Stop() {
	p.conn.Close()
	p.Proc.Stop()
	os.RemoveAll(filepath.Join(filepath.Dir(p.Log), p.Name+"-data"))
}

// readyEndpoints returns the endpoint count /readyz reports, or an error
// while it is not 200.
func (p *replicaProc) readyEndpoints() (int, error) {
	code, body, err := benchproc.Get("http://" + p.HTTP + "/readyz")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/readyz %d", code)
	}
	// "ok: 5000 services, 100000 endpoints, version 7"
	f := strings.Fields(body)
	for i := 1; i < len(f); i++ {
		if strings.HasPrefix(f[i], "endpoints") {
			return strconv.Atoi(strings.TrimSuffix(f[i-1], ","))
		}
	}
	return 0, fmt.Errorf("/readyz: no endpoint count in %q", body)
}

// waitServing waits until p serves all of r: /readyz answers 200 with
// r.Endpoints endpoints, the last service answers over DNS (dig, A) and
// the registry API lists all its endpoints (ListEndpoints). It returns
// the time from exec to the first moment all three held.
func (p *replicaProc) waitServing(ctx context.Context, r region, timeout time.Duration) (time.Duration, error) {
	sizes := r.Sizes()
	return p.waitServingCounts(ctx, r.Endpoints, ServiceName(r.Services-1), sizes[len(sizes)-1], timeout)
}

// waitServingCounts is waitServing for a store holding endpoints
// registrations, lastSize of them of service last.
func (p *replicaProc) waitServingCounts(ctx context.Context, endpoints int, last string, lastSize int, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	var why error
	for time.Now().Before(deadline) {
		select {
		case <-p.Done:
			return 0, fmt.Errorf("%s exited before ready:\n%s", p.Name, p.Tail())
		case <-ctx.Done():
			return 0, ctx.Err()
		default:
		}
		why = p.serving(ctx, endpoints, last, lastSize)
		if why == nil {
			return time.Since(p.started), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s not serving the region after %v: %v\n%s", p.Name, timeout, why, p.Tail())
}

func (p *replicaProc) serving(ctx context.Context, endpoints int, last string, lastSize int) error {
	n, err := p.readyEndpoints()
	if err != nil {
		return err
	}
	if n != endpoints {
		return fmt.Errorf("/readyz: %d endpoints, want %d", n, endpoints)
	}
	host, port, _ := strings.Cut(p.DNS, ":")
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(dctx, "dig", "@"+host, "-p", port, "+short", "+tries=1", "+time=2", last+".spillway.internal.", "A").Output()
	if err != nil {
		return fmt.Errorf("dig %s: %w", last, err)
	}
	if !strings.HasPrefix(string(out), "10.") {
		return fmt.Errorf("dig %s A: %q", last, out)
	}
	resp, err := p.Client.ListEndpoints(dctx, &pb.ListEndpointsRequest{Service: last})
	if err != nil {
		return fmt.Errorf("ListEndpoints %s: %w", last, err)
	}
	if len(resp.Endpoints) != lastSize {
		return fmt.Errorf("ListEndpoints %s: %d endpoints, want %d", last, len(resp.Endpoints), lastSize)
	}
	return nil
}

// memory forces a GC in p and returns its RSS and Go heap in use.
func (p *replicaProc) memory() (rss, heap float64, err error) {
	resp, err := http.Get("http://" + p.HTTP + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, errors.New("GET /debug/pprof/heap?gc=1: " + resp.Status)
	}
	m, err := benchproc.Scrape("http://"+p.HTTP+"/metrics", "go_memstats_heap_inuse_bytes")
	if err != nil {
		return 0, 0, err
	}
	kib, err := procstat.RSSKiB(p.PID())
	if err != nil {
		return 0, 0, err
	}
	return float64(kib) * 1024, m["go_memstats_heap_inuse_bytes"], nil
}

// startupTimeout bounds one replica's start at any size.
const startupTimeout = 4 * time.Minute

func runStartup(ctx context.Context, e *env, r region) ([]figure, error) {
	bins, err := spillwayBins(ctx, e)
	if err != nil {
		return nil, err
	}
	x, err := startEtcdRegion(ctx, e, r, "etcd-startup")
	if err != nil {
		return nil, err
	}
	defer x.Stop()
	figs := []figure{
		{Name: "etcd load (bench side)", Value: x.Loaded.Seconds(), Unit: "s", Note: fmt.Sprintf("%d registrations, %.0f MB of keys and values, in txns of ≤ %d puts; largest txn %d bytes", r.Endpoints, float64(x.Bytes)/1e6, etcdMaxTxnOps, x.MaxTxn)},
	}
	for i, b := range bins {
		name := fmt.Sprintf("startup-%d", i)
		p, err := startReplica(e, b.Path, name, x)
		if err != nil {
			return nil, err
		}
		took, err := p.waitServing(ctx, r, startupTimeout)
		if err != nil {
			p.Stop()
			return nil, fmt.Errorf("%sstartup: %w", b.Label, err)
		}
		cpu, _ := procstat.CPUSeconds(p.PID())
		rss, heap, err := p.memory()
		p.Stop()
		if err != nil {
			return nil, fmt.Errorf("%sstartup memory: %w", b.Label, err)
		}
		e.Logf("%sstartup at %s: ready in %v, CPU %.1f s, RSS %.0f MB, heap %.0f MB", b.Label, r.Label(), took.Round(time.Millisecond), cpu, rss/1e6, heap/1e6)
		n := float64(r.Endpoints)
		ready := atMost(b.Label+"exec to ready", took.Seconds(), "s", 60)
		ready.Note = "ready: /readyz 200 with every endpoint counted, the last service's A record over DNS (dig), and ListEndpoints of the last service complete; polled every 20 ms"
		figs = append(figs,
			ready,
			figure{Name: b.Label + "CPU until ready", Value: cpu, Unit: "s"},
			figure{Name: b.Label + "RSS per endpoint", Value: rss / n, Unit: "B", Note: "VmRSS after a GC (/debug/pprof/heap?gc=1) once ready"},
			figure{Name: b.Label + "Go heap per endpoint", Value: heap / n, Unit: "B", Note: "go_memstats_heap_inuse_bytes after that GC"},
		)
	}
	return figs, nil
}

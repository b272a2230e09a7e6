package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/clientlib/utilization"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// The PID tests (issue 14, acceptance 2) run one service on three real
// gRPC backends of different speeds (1.0, 1.3 and 0.7: the CPU work per
// request is 1/speed of the base cost) in one zone, each a "container"
// of one core: a single worker does every request's CPU-bound work in
// turn, and the backend's CPU use is that worker's busy time (what its
// cgroup's cpu.stat would say). Each installs clientlib/utilization with
// that CPU sampler and reports to spillway; one real grpc-go client,
// through clientlib (xDS, spillway.wrr honouring endpoint weights), sends
// an open-loop load. Round robin sends each backend a third, so the slow
// one is the busiest (max/avg ≈ 1.3); PID weights give each the same
// utilization.
const (
	pidService  = "speeds"
	pidRate     = 240 // RPCs per second
	pidBaseCost = 2 * time.Millisecond
	pidWindow   = 6 * time.Second
	// pidBound is acceptance 2's bound on max/avg utilization with PID.
	pidBound = 1.10
)

var pidSpeeds = []float64{1.0, 1.3, 0.7}

// spinPerMs is how many spin iterations take about a millisecond here,
// measured once.
var spinPerMs = sync.OnceValue(func() int {
	const n = 200_000
	start := time.Now()
	spin(n)
	ms := max(float64(time.Since(start))/float64(time.Millisecond), 0.01)
	return int(float64(n) / ms)
})

var spinSink atomic.Uint64

func spin(n int) {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	spinSink.Add(x & 1)
}

// pidBackend is one backend: a single worker, its busy time, and the
// utilization helper reading it.
type pidBackend struct {
	id    string
	speed float64
	port  uint32
	work  int // spin iterations per request
	jobs  chan chan struct{}
	busy  atomic.Int64 // ns the worker spent working
	util  *utilization.Utilization
	// stalled, once set, makes every request wait stall for an I/O that
	// never completes, with no CPU work, and fail (pid_guard_test.go).
	stalled atomic.Bool
	stall   time.Duration
}

func startPIDBackend(t *testing.T, id string, speed float64) *pidBackend {
	return startPIDBackendWith(t, id, speed, 0)
}

// startPIDBackendWith is startPIDBackend whose utilization counts its
// requests and errors over rateWindow (0: clientlib/utilization's
// default).
func startPIDBackendWith(t *testing.T, id string, speed float64, rateWindow time.Duration) *pidBackend {
	t.Helper()
	b := &pidBackend{id: id, speed: speed, work: int(float64(spinPerMs()) * float64(pidBaseCost) / float64(time.Millisecond) / speed), jobs: make(chan chan struct{}, 256)}
	u, err := utilization.New(utilization.Config{
		Limit:       256,
		SampleEvery: 250 * time.Millisecond,
		RateWindow:  rateWindow,
		Sampler: utilization.SamplerFunc(func() (time.Duration, float64, error) {
			return time.Duration(b.busy.Load()), 1, nil // one core: the worker
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	b.util = u
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case reply := <-b.jobs:
				start := time.Now()
				spin(b.work)
				b.busy.Add(int64(time.Since(start)))
				close(reply)
			}
		}
	}()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.port = uint32(lis.Addr().(*net.TCPAddr).Port)
	opts := append(u.ServerOptions(), grpc.ChainUnaryInterceptor(b.serve))
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(func() {
		srv.Stop()
		cancel()
		<-done
	})
	return b
}

func (b *pidBackend) serve(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if b.stalled.Load() {
		// The I/O never completes: no CPU, give up after stall.
		t := time.NewTimer(b.stall)
		defer t.Stop()
		select {
		case <-t.C:
			return nil, status.Errorf(codes.Unavailable, "backend %s: I/O timed out", b.id)
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	reply := make(chan struct{})
	select {
	case b.jobs <- reply:
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "backend %s: queue full", b.id)
	}
	select {
	case <-reply:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return h(ctx, req)
}

// pidFixture is the server, the backends and the client.
type pidFixture struct {
	s        *server
	dir      string // service config directory
	backends []*pidBackend
	conn     *clientlib.Conn
	ok, fail atomic.Int64
}

func newPIDFixture(t *testing.T, strategy string) *pidFixture {
	t.Helper()
	f := &pidFixture{dir: t.TempDir()}
	f.setStrategy(t, strategy)
	f.s = newServer(t, "--xds-debounce", "20ms", "--lrs-interval", "1s", "--weights-interval", "1s",
		"--lease-ttl", "1h", "--service-config-dir", f.dir)
	f.s.start()
	reg := f.s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, rcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { rcancel(); wg.Wait() })
	for i, speed := range pidSpeeds {
		b := startPIDBackend(t, fmt.Sprintf("b%d", i), speed)
		resp, err := reg.Register(ctx, &pb.RegisterRequest{Service: pidService, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1",
			Ports:    []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}})
		if err != nil {
			t.Fatalf("register %s: %v", b.id, err)
		}
		r := &utilization.Reporter{Target: f.s.grpcAddr, Service: pidService, EndpointID: b.id, LeaseID: resp.GetLeaseId(), Interval: 500 * time.Millisecond, Source: b.util}
		wg.Go(func() { r.Run(rctx) })
		f.backends = append(f.backends, b)
	}
	rollout := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(rollout, []byte("rules:\n  - name: everyone\n    match: {}\n    percent: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := clientlib.Dial(context.Background(), pidService,
		clientlib.WithService("pid-caller"), clientlib.WithZone("zone-a"), clientlib.WithRegion("r1"),
		clientlib.WithControlPlane(f.s.grpcAddr), clientlib.WithDNSServer(f.s.flag("--dns-addr")),
		clientlib.WithRolloutFile(rollout), clientlib.WithXDSTimeout(10*time.Second), clientlib.WithPerConnBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.conn = conn
	for deadline := time.Now().Add(30 * time.Second); conn.Status().Channel != clientlib.XDS; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("client not on xDS after 30s: %+v", conn.Status())
		}
	}
	return f
}

// setStrategy writes the service's config file (the directory is
// watched).
func (f *pidFixture) setStrategy(t *testing.T, strategy string) {
	t.Helper()
	body := fmt.Sprintf("strategy: %s\nreport_interval: 1s\n", strategy)
	tmp := filepath.Join(f.dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, pidService+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// load sends pidRate RPCs per second until stop is called.
func (f *pidFixture) load() (stop func()) {
	hc := healthpb.NewHealthClient(f.conn)
	quit := make(chan struct{})
	var wg, rpcs sync.WaitGroup
	wg.Go(func() {
		defer rpcs.Wait()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		start, issued := time.Now(), 0
		for {
			select {
			case <-quit:
				return
			case now := <-tick.C:
				due := min(int(pidRate*now.Sub(start).Seconds())-issued, pidRate/50)
				issued = int(pidRate * now.Sub(start).Seconds())
				for range due {
					rpcs.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
						cancel()
						if err != nil {
							f.fail.Add(1)
						} else {
							f.ok.Add(1)
						}
					})
				}
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(quit); wg.Wait() }) }
}

// utilization measures each backend's busy share over d and returns it
// with max/avg.
func (f *pidFixture) utilization(d time.Duration) ([]float64, float64) {
	before := make([]int64, len(f.backends))
	for i, b := range f.backends {
		before[i] = b.busy.Load()
	}
	start := time.Now()
	time.Sleep(d)
	el := time.Since(start)
	u := make([]float64, len(f.backends))
	var sum float64
	for i, b := range f.backends {
		u[i] = float64(b.busy.Load()-before[i]) / float64(el)
		sum += u[i]
	}
	return u, slices.Max(u) / (sum / float64(len(u)))
}

// converge measures pidWindow after pidWindow until max/avg utilization
// is at most pidBound or within has passed, logging each window, and
// returns the last window's max/avg. On a busy machine the controller
// needs more cycles (its inputs are noisier), so the test waits for the
// outcome rather than judging a fixed window.
func (f *pidFixture) converge(t *testing.T, within time.Duration, what string) float64 {
	t.Helper()
	start := time.Now()
	for {
		u, ratio := f.utilization(pidWindow)
		t.Logf("%s, window ending %v in: %s; max/avg %.3f", what, time.Since(start).Round(time.Second), fmtUtil(u), ratio)
		if ratio <= pidBound || time.Since(start)+pidWindow > within {
			return ratio
		}
	}
}

func fmtUtil(u []float64) string {
	var parts []string
	for i, v := range u {
		parts = append(parts, fmt.Sprintf("speed %.1f: %.1f%%", pidSpeeds[i], 100*v))
	}
	return strings.Join(parts, ", ")
}

// TestPIDBalancesSpeeds is issue 14's acceptance 2: with real backends of
// different speeds reporting their utilization, PID endpoint weights
// bring max/avg utilization to at most 1.10, from round robin's figure in
// the same run.
func TestPIDBalancesSpeeds(t *testing.T) {
	f := newPIDFixture(t, "zone-aware")
	stop := f.load()
	defer stop()
	time.Sleep(3 * time.Second)
	rr, rrRatio := f.utilization(pidWindow)
	t.Logf("round robin (strategy zone-aware, equal endpoint weights): %s; max/avg %.3f", fmtUtil(rr), rrRatio)
	if rrRatio < 1.2 {
		t.Fatalf("round robin max/avg = %.3f: the backends' speeds should make it about 1.3; the test shows nothing", rrRatio)
	}

	f.setStrategy(t, "zone-aware+pid")
	// The controller converges in about 20 cycles (1 s each, simulator);
	// a minute allows for a busy machine.
	ratio := f.converge(t, time.Minute, "PID after the change")
	stop()
	t.Logf("%d RPCs ok, %d failed", f.ok.Load(), f.fail.Load())
	if ratio > pidBound {
		t.Errorf("max/avg utilization with PID = %.3f, want at most %.2f (round robin: %.3f)", ratio, pidBound, rrRatio)
	}
	if n := f.fail.Load(); n > f.ok.Load()/100 {
		t.Errorf("%d RPCs failed, want under 1%%", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := f.s.ctl(ctx, "weights", pidService)
	if !strings.Contains(out, "b2") {
		t.Errorf("spillwayctl weights %s shows no endpoint table:\n%s", pidService, out)
	}
	t.Logf("spillwayctl weights %s:\n%s", pidService, out)
}

// TestPIDOwnerChange is issue 14's acceptance 3: three replicas on one
// etcd, the service's PID weights computed by its owner from the
// utilization reports the other two replicas forward; the owner is
// killed (SIGKILL). The new owner restores the controller's state from
// the store: it never publishes a reset to equal weights, and holds the
// restored weights ("waiting", or "skipped_missing" while too few reports
// are fresh) until fresh reports arrive.
func TestPIDOwnerChange(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, pidService+".yaml"), []byte("strategy: zone-aware+pid\nreport_interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newReplicaClusterWith(t, 3, "--xds-debounce", "20ms", "--lrs-interval", "1s", "--weights-interval", "1s",
		"--lease-ttl", "1h", "--mesh-stale-cycles", "6", "--service-config-dir", dir)
	hc := &http.Client{Timeout: 5 * time.Second}
	reg := c.servers[0].client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &pidFixture{dir: dir}
	var leases []string
	for i, speed := range pidSpeeds {
		b := startPIDBackend(t, fmt.Sprintf("b%d", i), speed)
		resp, err := reg.Register(ctx, &pb.RegisterRequest{Service: pidService, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}})
		if err != nil {
			t.Fatalf("register %s: %v", b.id, err)
		}
		f.backends, leases = append(f.backends, b), append(leases, resp.GetLeaseId())
	}
	owner := -1
	for deadline := time.Now().Add(30 * time.Second); owner < 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no owner of the service named within 30s")
		}
		if p := meshWeightsOf(t, hc, c.servers[0], pidService); p != nil && p.Origin.Source == "mesh" {
			owner = replicaIndex(c, p.Origin.Owner)
		}
	}
	var others []int
	for i := range c.servers {
		if i != owner {
			others = append(others, i)
		}
	}
	// Reports go to the two replicas that do not own the service, the
	// client to the first of them.
	rctx, rcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { rcancel(); wg.Wait() })
	for i, b := range f.backends {
		r := &utilization.Reporter{Target: c.servers[others[i%2]].grpcAddr, Service: pidService, EndpointID: b.id, LeaseID: leases[i], Interval: 500 * time.Millisecond, Source: b.util}
		wg.Go(func() { r.Run(rctx) })
	}
	f.s = c.servers[others[0]]
	rollout := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(rollout, []byte("rules:\n  - name: everyone\n    match: {}\n    percent: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := clientlib.Dial(context.Background(), pidService,
		clientlib.WithService("pid-caller"), clientlib.WithZone("zone-a"), clientlib.WithRegion("r1"),
		clientlib.WithControlPlane(f.s.grpcAddr), clientlib.WithDNSServer(f.s.flag("--dns-addr")),
		clientlib.WithRolloutFile(rollout), clientlib.WithXDSTimeout(10*time.Second), clientlib.WithPerConnBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.conn = conn
	stop := f.load()
	defer stop()
	published := watchPlansOf(t, c.etcd.Endpoint, pidService)

	// Converged on the owner's mesh-wide PID weights.
	if ratio := f.converge(t, time.Minute, fmt.Sprintf("before the kill (owner r%d, reports on r%d and r%d)", owner, others[0], others[1])); ratio > pidBound {
		t.Errorf("max/avg utilization before the kill = %.3f, want at most %.2f", ratio, pidBound)
	}
	old := fmt.Sprintf("r%d", owner)
	c.servers[owner].kill()

	// The records in etcd's order: the old owner's, then the new owner's
	// (the watch delivers them in revision order, so once a new owner's
	// record is here the old owner's last one is too). The new owner
	// runs for a few cycles after its first record.
	var last *publishedPlan
	var mine []publishedPlan
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		published.mu.Lock()
		last, mine = nil, mine[:0]
		for i, p := range published.plans {
			if p.Owner == old && len(mine) == 0 {
				last = &published.plans[i]
			} else if p.Owner != old {
				mine = append(mine, p)
			}
		}
		published.mu.Unlock()
		if len(mine) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d plan records from a new owner within 30s of killing %s, want 5", len(mine), old)
		}
	}
	if last == nil {
		t.Fatalf("no plan record of the old owner %s in etcd", old)
	}
	before := endpointWeights(last)
	t.Logf("the old owner's last record: weights %v", before)
	if len(before) != len(f.backends) {
		t.Fatalf("the old owner's last record has endpoint weights %v, want one per backend", before)
	}
	// The new owner restores the old one's weights: its first record
	// holds them (waiting, skipped_missing) or is one controller step
	// from them (computed: fresh reports were there already). No record
	// of its is a reset to equal weights, which the restored weights of
	// backends of different speeds are not.
	for i, p := range mine {
		outcome := ""
		if p.PID != nil {
			outcome = p.PID.Outcome
		}
		w := endpointWeights(&p)
		t.Logf("new owner %s record %d: outcome %s, weights %v", p.Owner, i, outcome, w)
		if i == 0 {
			if outcome != "waiting" && outcome != "skipped_missing" && outcome != "computed" {
				t.Errorf("new owner's first record: outcome %q, want waiting or skipped_missing (restored weights held) or computed", outcome)
			}
			for id, b := range before {
				if d := float64(w[id])/float64(b) - 1; d > 0.2 || d < -0.2 {
					t.Errorf("new owner's first record: %s weight %d, %+.0f%% from %d in the old owner's last: not restored", id, w[id], 100*d, b)
				}
			}
		}
		if equalish(w) && !equalish(before) {
			t.Errorf("new owner's record %d: weights %v, a reset to equal weights (the old owner's last: %v)", i, w, before)
		}
	}
	// Every live replica serves the same endpoint weights: the new
	// owner's published plan.
	// A new plan may land between the two reads (one a cycle): read
	// again a few times.
	var seen []map[string]uint32
	for try := 0; try < 5; try++ {
		seen = seen[:0]
		for _, i := range others {
			w := map[string]uint32{}
			if p := meshWeightsOf(t, hc, c.servers[i], pidService); p != nil && p.Origin.Source == "mesh" {
				for _, e := range p.Endpoints {
					w[e.ID] = e.Weight
				}
			}
			seen = append(seen, w)
		}
		if equalWeights(seen[0], seen[1]) && len(seen[0]) == len(f.backends) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !equalWeights(seen[0], seen[1]) || len(seen[0]) != len(f.backends) {
		t.Errorf("endpoint weights after the handover: r%d serves %v, r%d %v; want the same published weights", others[0], seen[0], others[1], seen[1])
	}
	if ratio := f.converge(t, time.Minute, "after the handover"); ratio > pidBound {
		t.Errorf("max/avg utilization after the handover = %.3f, want at most %.2f", ratio, pidBound)
	}
}

// endpointWeights is a plan record's endpoint weights by id.
func endpointWeights(p *publishedPlan) map[string]uint32 {
	w := map[string]uint32{}
	for id, e := range p.Endpoints {
		w[id] = e.Weight
	}
	return w
}

// equalish reports whether every weight is within 3% of the mean: what a
// reset would publish.
func equalish(w map[string]uint32) bool {
	var sum float64
	for _, v := range w {
		sum += float64(v)
	}
	mean := sum / float64(len(w))
	for _, v := range w {
		if d := float64(v)/mean - 1; d > 0.03 || d < -0.03 {
			return false
		}
	}
	return len(w) > 0
}

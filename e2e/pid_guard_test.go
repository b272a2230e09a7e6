package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/clientlib/utilization"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// The PID guard test (issue 30 item 2): the death spiral of Robinhood's
// operating lesson, with a real spillway, real grpc-go xDS clients and
// real backends reporting through clientlib/utilization. Five backends
// of one speed, each a single worker as in the PID tests (pid_test.go),
// serve one service whose strategy is pid; one grpc-go client sends an
// open-loop load. After a healthy phase one backend's I/O stalls: its
// handler does no CPU work and waits guardStall for an I/O that never
// completes, then fails the RPC (Unavailable). Its CPU drops to nothing
// and its in-flight count stays low (a few RPCs of its limit), so a
// controller on utilization alone would raise its weight; its reports
// now carry its error rate, and the guard must hold it down.
const (
	guardService  = "stall"
	guardBackends = 5
	guardStuck    = guardBackends - 1 // the last backend stalls
	guardRate     = 300               // RPCs per second
	guardDeadline = time.Second       // each RPC's
	guardStall    = 150 * time.Millisecond
	guardWindow   = 5 * time.Second // a p99 measurement: 1,500 RPCs
	// guardP99Bound is the bound: the service's p99 latency in
	// the stall within 1.5× the healthy phase's.
	guardP99Bound = 1.5
)

// startGuardBackend is a backend of the PID tests' kind (pid_test.go:
// one worker doing each request's CPU work, its busy time its "cgroup")
// that can stall: its utilization counts requests and errors over a
// short window, so that errors show in the first report after the stall
// (the default 10 s would take a few reports).
func startGuardBackend(t *testing.T, id string) *pidBackend {
	b := startPIDBackendWith(t, id, 1, 2*time.Second)
	b.stall = guardStall
	return b
}

// rpcSample is one RPC's end and latency.
type rpcSample struct {
	end     time.Time
	latency time.Duration
	failed  bool
}

// guardLoad sends guardRate RPCs per second through conn and records
// every one.
type guardLoad struct {
	mu      sync.Mutex
	samples []rpcSample
}

func (l *guardLoad) run(conn grpc.ClientConnInterface) (stop func()) {
	hc := healthpb.NewHealthClient(conn)
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
				due := min(int(guardRate*now.Sub(start).Seconds())-issued, guardRate/50)
				issued = int(guardRate * now.Sub(start).Seconds())
				for range due {
					rpcs.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), guardDeadline)
						t0 := time.Now()
						_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
						end := time.Now()
						cancel()
						l.mu.Lock()
						l.samples = append(l.samples, rpcSample{end: end, latency: end.Sub(t0), failed: err != nil})
						l.mu.Unlock()
					})
				}
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(quit); wg.Wait() }) }
}

// window returns the p99 latency, RPCs and failures of the RPCs that
// ended in [from, to).
func (l *guardLoad) window(from, to time.Time) (p99 time.Duration, n, failed int) {
	l.mu.Lock()
	var lat []time.Duration
	for _, s := range l.samples {
		if !s.end.Before(from) && s.end.Before(to) {
			lat = append(lat, s.latency)
			if s.failed {
				failed++
			}
		}
	}
	l.mu.Unlock()
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, len(lat)*99/100)], len(lat), failed
}

// measure waits d and returns the window's figures.
func (l *guardLoad) measure(d time.Duration) (p99 time.Duration, n, failed int) {
	from := time.Now()
	time.Sleep(d)
	return l.window(from, time.Now())
}

// weightSample is the endpoint weights the admin API served at one time,
// and the stuck backend's PID error term.
type weightSample struct {
	at       time.Time
	w        map[string]uint32
	stuckErr float64
}

// stuckAndMedian returns the stuck backend's weight and the median of
// the five.
func (s weightSample) stuckAndMedian(stuck string) (uint32, uint32, bool) {
	if len(s.w) != guardBackends {
		return 0, 0, false
	}
	var all []uint32
	for _, v := range s.w {
		all = append(all, v)
	}
	slices.Sort(all)
	return s.w[stuck], all[(len(all)-1)/2], true
}

// TestPIDGuard: five backends on a pid service, a healthy phase, then one
// backend's I/O stalls. From the first plan that counts its failures the
// stuck backend's PID weight never goes above the median weight, it is
// pulled down to at most 5% of the median, and the service's p99 latency
// (failed RPCs at their latency) comes back within 1.5x the healthy
// phase's.
func TestPIDGuard(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, guardService+".yaml"), []byte("strategy: pid\nreport_interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--xds-debounce", "20ms", "--lrs-interval", "1s", "--weights-interval", "1s",
		"--lease-ttl", "1h", "--service-config-dir", dir)
	s.start()
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rctx, rcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { rcancel(); wg.Wait() })
	var backends []*pidBackend
	for i := range guardBackends {
		b := startGuardBackend(t, fmt.Sprintf("g%d", i))
		resp, err := reg.Register(ctx, &pb.RegisterRequest{Service: guardService, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}})
		if err != nil {
			t.Fatalf("register %s: %v", b.id, err)
		}
		r := &utilization.Reporter{Target: s.grpcAddr, Service: guardService, EndpointID: b.id, LeaseID: resp.GetLeaseId(),
			Interval: 500 * time.Millisecond, Source: b.util}
		wg.Go(func() { r.Run(rctx) })
		backends = append(backends, b)
	}
	stuck := backends[guardStuck]
	rollout := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(rollout, []byte("rules:\n  - name: everyone\n    match: {}\n    percent: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := clientlib.Dial(context.Background(), guardService,
		clientlib.WithService("guard-caller"), clientlib.WithZone("zone-a"), clientlib.WithRegion("r1"),
		clientlib.WithControlPlane(s.grpcAddr), clientlib.WithDNSServer(s.flag("--dns-addr")),
		clientlib.WithRolloutFile(rollout), clientlib.WithXDSTimeout(10*time.Second), clientlib.WithPerConnBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for deadline := time.Now().Add(30 * time.Second); conn.Status().Channel != clientlib.XDS; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("client not on xDS after 30s: %+v", conn.Status())
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	load := &guardLoad{}
	stop := load.run(conn)
	defer stop()

	// Healthy: PID weights for all five, then the reference p99.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if p := meshWeightsOf(t, hc, s, guardService); p != nil && len(p.Endpoints) == guardBackends {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PID weights for the %d backends within 30s:\n%s", guardBackends, s.logs)
		}
	}
	time.Sleep(5 * time.Second) // reports flowing, weights settled
	// The reference is the quieter of two windows: a window in which
	// another process took the machine's cores would make any bound
	// against it meaningless.
	var healthyP99 time.Duration
	var n, failed int
	for i := range 2 {
		p99, wn, wf := load.measure(guardWindow)
		t.Logf("healthy: p99 %v over %d RPCs, %d failed; load average %s", p99, wn, wf, loadAvg())
		if i == 0 || p99 < healthyP99 {
			healthyP99, n, failed = p99, wn, wf
		}
	}
	if n < guardRate*int(guardWindow/time.Second)/2 {
		t.Fatalf("healthy: %d RPCs in %v, want about %d: the load did not run", n, guardWindow, guardRate*int(guardWindow/time.Second))
	}
	if failed > n/100 {
		t.Fatalf("healthy: %d of %d RPCs failed, want under 1%%", failed, n)
	}

	// Watch the weights every 100 ms from the stall on.
	var mu sync.Mutex
	var seen []weightSample
	wctx, wcancel := context.WithCancel(context.Background())
	var watch sync.WaitGroup
	watch.Go(func() {
		for wctx.Err() == nil {
			if ws := endpointWeightsOf(hc, s, guardService, stuck.id); ws.w != nil {
				mu.Lock()
				seen = append(seen, ws)
				mu.Unlock()
			}
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	stopWatch := func() { wcancel(); watch.Wait() }
	defer stopWatch()
	stallAt := time.Now()
	stuck.stalled.Store(true)
	t.Logf("%s stalls", stuck.id)

	// Pulled down: its weight at most 5% of the median, within 60 s.
	var last weightSample
	for deadline := stallAt.Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		mu.Lock()
		if len(seen) > 0 {
			last = seen[len(seen)-1]
		}
		mu.Unlock()
		if w, m, ok := last.stuckAndMedian(stuck.id); ok && w*20 <= m {
			t.Logf("%s at %d, median %d, %v after the stall", stuck.id, w, m, last.at.Sub(stallAt).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not pulled down to 5%% of the median within 60s of its stall: weights %v", stuck.id, last.w)
		}
	}

	// The service's p99 back within the bound (a busy machine may need a
	// few windows: judged by a deadline, not one window).
	var p99 time.Duration
	for deadline := time.Now().Add(2 * time.Minute); ; {
		p99, n, failed = load.measure(guardWindow)
		t.Logf("stalled: p99 %v over %d RPCs, %d failed (%.2f%%); healthy p99 %v, ratio %.2f; load average %s", p99, n, failed, 100*float64(failed)/float64(max(n, 1)), healthyP99, float64(p99)/float64(healthyP99), loadAvg())
		if float64(p99) <= guardP99Bound*float64(healthyP99) || time.Now().Add(guardWindow).After(deadline) {
			break
		}
	}
	stopWatch()
	stop()
	if float64(p99) > guardP99Bound*float64(healthyP99) {
		t.Errorf("p99 latency with %s stalled = %v, want within %.1fx the healthy %v", stuck.id, p99, guardP99Bound, healthyP99)
	}

	// The weights seen from the stall on. The server can act only once a
	// report shows the failures: from the first plan that counts them (the
	// stuck backend's effective utilization, CPU + error rate, is over
	// twice the setpoint, so its PID error term is -1) the stuck backend's
	// weight never goes above the median.
	mu.Lock()
	defer mu.Unlock()
	seenAt := -1
	var before float64 // its largest weight over the median before that
	for i, ws := range seen {
		w, m, ok := ws.stuckAndMedian(stuck.id)
		if !ok {
			continue
		}
		if seenAt < 0 && ws.stuckErr <= -0.99 {
			seenAt = i
			t.Logf("first plan that counts %s's failures: %v after the stall, weight %d against the median %d (before it, at most %.3f of the median)",
				stuck.id, ws.at.Sub(stallAt).Round(100*time.Millisecond), w, m, before)
		}
		if seenAt < 0 {
			before = max(before, float64(w)/float64(m))
			continue
		}
		if w > m {
			t.Errorf("%v after the stall: %s weight %d above the median %d (weights %v)", ws.at.Sub(stallAt).Round(100*time.Millisecond), stuck.id, w, m, ws.w)
		}
	}
	if seenAt < 0 {
		t.Fatalf("no plan counted %s's failures in %d plans seen after its stall", stuck.id, len(seen))
	}
	t.Logf("%d plans seen after the stall, %d from the first that counts the failures", len(seen), len(seen)-seenAt)
}

// endpointWeightsOf reads the service's endpoint weights and endpoint
// id's PID error term from the admin API (GET /v1/weights); w is nil when
// it cannot. It may run off the test's goroutine.
func endpointWeightsOf(hc *http.Client, s *server, service, id string) weightSample {
	ws := weightSample{at: time.Now()}
	resp, err := hc.Get("http://" + s.httpAddr + "/v1/weights?service=" + service)
	if err != nil {
		return ws
	}
	defer resp.Body.Close()
	var p struct {
		Endpoints []struct {
			ID     string
			Weight uint32
			Error  float64
		}
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&p) != nil {
		return ws
	}
	ws.w = make(map[string]uint32, len(p.Endpoints))
	for _, e := range p.Endpoints {
		ws.w[e.ID] = e.Weight
		if e.ID == id {
			ws.stuckErr = e.Error
		}
	}
	return ws
}

// loadAvg is the machine's load averages (/proc/loadavg), for the log.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

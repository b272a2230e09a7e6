package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/xds/xdstest"
)

// The resilience tests (issue 30) run the figures end to end: the
// spillway binary serves each service's resilience policy from its file
// in --service-config-dir, real grpc-go clients (xds:///) follow it, and
// real gRPC servers on 127.0.0.1 do what each case needs (fail, fail some
// of the time, answer slowly). One server serves every case, one service
// per policy; the cases run side by side.
//
// They judge outcomes over counted RPCs, not wall-clock windows: a wait
// for a condition has resilienceWait, generous so that a loaded machine
// passes, and every load is bounded in RPCs and by its context.
const (
	resilienceWait = 30 * time.Second
	// resilienceLoad bounds each case: its loads stop when it ends, and
	// the case fails saying that the machine was too slow to send them.
	resilienceLoad = 2 * time.Minute
	// resUserHeader is the metadata key the ring-hash service hashes.
	resUserHeader = "x-user"
	// resRPCTimeout bounds each RPC of the cases.
	resRPCTimeout = 10 * time.Second
)

// The services, one per policy. resRetryOff, resWRROff and resLROff
// have no config: they are the same backends' behaviour seen without a
// policy.
const (
	resOutlier  = "res-outlier"
	resRetry    = "res-retry"
	resRetryOff = "res-retry-off"
	resBreaker  = "res-breaker"
	resFault    = "res-fault"
	resRingHash = "res-ringhash"
	resWRR      = "res-client-wrr"
	resWRROff   = "res-client-wrr-off"
	resLR       = "res-least-request"
	resLROff    = "res-least-request-off"
)

// resilienceConfigs are the service config files of the cases.
var resilienceConfigs = map[string]string{
	// Sweeps every second; an endpoint with 20 RPCs in the sweep's
	// interval, more than 85% of them failed, is ejected for 60 s (longer
	// than the case). 20% of 6 endpoints lets one out at a time.
	resOutlier: `resilience:
  outlier_detection:
    interval: 1s
    base_ejection_time: 60s
    max_ejection_percent: 20
    failure_percentage: {request_volume: 20}
`,
	// The defaults: one retry on UNAVAILABLE after 25 ms (±20%).
	resRetry:   "resilience:\n  retry: {}\n",
	resBreaker: "resilience:\n  max_requests: 20\n",
	resFault: `resilience:
  fault:
    delay: {fixed: 100ms, percent: 20}
    abort: {grpc_status: unavailable, percent: 10}
`,
	resRingHash: "resilience:\n  lb:\n    ring_hash: {header: " + resUserHeader + "}\n",
	// The shortest blackout and update period the parser takes: reports
	// count 1 s after an endpoint's first, and the weights are recomputed
	// every 100 ms.
	resWRR: "resilience:\n  lb:\n    client_wrr: {blackout_period: 1s, weight_update_period: 100ms}\n",
	resLR:  "resilience:\n  lb:\n    least_request: {choice_count: 2}\n",
}

// TestResilience shows issue 30's figures with the spillway binary,
// grpc-go xDS clients and gRPC backends on loopback; each subtest's
// comment gives its figure. Zone-aware weights are off (--zone-aware=
// false): every backend is in one zone with an equal weight, which holds
// still while the cases measure. The cases share the server and nothing
// else (each has its own service, backends and client; grpc-go's circuit
// breaker counts per service), so they run in parallel.
func TestResilience(t *testing.T) {
	dir := t.TempDir()
	for svc, cfg := range resilienceConfigs {
		if err := os.WriteFile(filepath.Join(dir, svc+".yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := newServer(t, "--xds-debounce", "20ms", "--lease-ttl", "1h", "--zone-aware=false", "--service-config-dir", dir)
	s.start()
	rs := &resServer{addr: s.grpcAddr, reg: s.client()}

	t.Run("outlier_detection", func(t *testing.T) { t.Parallel(); resOutlierCase(t, rs) })
	t.Run("retry", func(t *testing.T) { t.Parallel(); resRetryCase(t, rs) })
	t.Run("circuit_breaker", func(t *testing.T) { t.Parallel(); resBreakerCase(t, rs) })
	t.Run("fault_injection", func(t *testing.T) { t.Parallel(); resFaultCase(t, rs) })
	t.Run("ring_hash", func(t *testing.T) { t.Parallel(); resRingHashCase(t, rs) })
	t.Run("client_wrr", func(t *testing.T) { t.Parallel(); resClientWRRCase(t, rs) })
	t.Run("least_request", func(t *testing.T) { t.Parallel(); resLeastRequestCase(t, rs) })
}

// resOutlierCase: of 6 backends, one starts failing every RPC. Its
// clients eject it: once they have, it gets less than 5% of its share of
// 3,000 RPCs (≥ 95% of its traffic moved to the others), and at least
// 99% of those RPCs succeed. The issue asks for the ejection within 10 s;
// the time from the first failure to the first 120 RPCs that all miss the
// failing backend is logged, and the wait for it is resilienceWait, so
// that a loaded machine still judges the outcome (with a 1 s sweep the
// ejection takes 1–2 s when the clients send enough RPCs).
func resOutlierCase(t *testing.T, rs *resServer) {
	ctx, cancel := context.WithTimeout(context.Background(), resilienceLoad)
	defer cancel()
	backends := startResBackends(t, "od", 6, resBehaviour{})
	bad := backends[0]
	hc := rs.serve(t, ctx, resOutlier, backends)
	resWarm(t, ctx, hc, backends, nil)

	// Healthy: every RPC passes, each backend serves about a sixth.
	const healthy = 600
	before := resServed(backends)
	r := resSend(ctx, hc, healthy, 6, nil)
	r.sent(t, "healthy phase")
	if r.failed() > 0 {
		t.Fatalf("healthy phase: %d of %d RPCs failed (first: %v), want 0", r.failed(), healthy, r.firstErr)
	}
	t.Logf("healthy: %d RPCs, the backend about to fail served %d", healthy, bad.served.Load()-before[0])

	// Failing: rounds of 120 RPCs until one round has none on bad.
	bad.failing.Store(true)
	start := time.Now()
	const round = 120
	var ejectedAfter time.Duration
	failedBefore, rounds := int64(0), 0
	for {
		if time.Since(start) > resilienceWait || ctx.Err() != nil {
			t.Fatalf("the failing backend still gets RPCs %v after it started failing (%d rounds of %d RPCs, %d failed)",
				resilienceWait, rounds, round, failedBefore)
		}
		at := time.Since(start)
		n := bad.served.Load()
		r = resSend(ctx, hc, round, 6, nil)
		rounds++
		time.Sleep(10 * time.Millisecond) // a steady load, not a flood: the cases run side by side
		failedBefore += r.failed()
		if bad.served.Load() == n {
			ejectedAfter = at
			break
		}
	}
	t.Logf("figure: ejected within %v of the first failure (%d rounds of %d RPCs; %d RPCs failed before; the issue asks within 10s)",
		ejectedAfter.Round(10*time.Millisecond), rounds, round, failedBefore)

	// Ejected: 3,000 RPCs.
	const n = 3000
	before = resServed(backends)
	r = resSend(ctx, hc, n, 6, nil)
	r.sent(t, "after ejection")
	onBad := bad.served.Load() - before[0]
	share := float64(n) / float64(len(backends)) // bad's share of n when healthy
	moved := 1 - float64(onBad)/share
	success := float64(n-int(r.failed())) / n
	t.Logf("figure: after ejection, %d RPCs: %.2f%% succeeded; the failing backend got %d (%.1f%% of its share of %.0f moved elsewhere)",
		n, 100*success, onBad, 100*moved, share)
	if moved < 0.95 {
		t.Errorf("the failing backend got %d of %d RPCs after its ejection: %.1f%% of its share moved, want at least 95%%", onBad, n, 100*moved)
	}
	if success < 0.99 {
		t.Errorf("after ejection %d of %d RPCs failed (first: %v): %.2f%% succeeded, want at least 99%%", r.failed(), n, r.firstErr, 100*success)
	}
}

// resRetryCase: two services with identical backends, 6 each, of which one
// answers UNAVAILABLE to 30% of its RPCs (about 5% of the service's);
// one service's config retries (retry: {}, one retry on UNAVAILABLE),
// the other has none. Over 10,000 RPCs to each, sent side by side: at
// least 99.5% succeed with the policy, and 95% ± 2 points without (the
// backends' failures, uncorrected; ± 2 points is 9 binomial standard
// deviations). With one retry an RPC fails when both its attempts land
// on the flaky backend and fail, (1/6 × 0.3)² = 0.25%: 25 expected of
// 10,000 against the 50 allowed (more than 50 by chance: about 3 runs in
// a million).
func resRetryCase(t *testing.T, rs *resServer) {
	ctx, cancel := context.WithTimeout(context.Background(), resilienceLoad)
	defer cancel()
	type side struct {
		service  string
		backends []*resBackend
		hc       healthpb.HealthClient
		r        resResult
	}
	sides := []*side{{service: resRetry}, {service: resRetryOff}}
	for i, sd := range sides {
		sd.backends = startResBackends(t, fmt.Sprintf("rt%d-", i), 6, resBehaviour{})
		sd.backends[0].failPermille.Store(300)
		sd.hc = rs.serve(t, ctx, sd.service, sd.backends)
	}
	for _, sd := range sides {
		resWarm(t, ctx, sd.hc, sd.backends, nil)
	}
	const n = 10000
	var wg sync.WaitGroup
	for _, sd := range sides {
		for _, b := range sd.backends {
			b.served.Store(0)
			b.failed.Store(0)
		}
		wg.Go(func() { sd.r = resSend(ctx, sd.hc, n, 4, nil) })
	}
	wg.Wait()
	for _, sd := range sides {
		sd.r.sent(t, sd.service)
	}
	rate := func(sd *side) float64 { return float64(n-int(sd.r.failed())) / n }
	for _, sd := range sides {
		bad := sd.backends[0]
		var total int64
		for _, b := range sd.backends {
			total += b.served.Load()
		}
		t.Logf("figure: %s: %d RPCs, %.2f%% succeeded (%d failed); the backends got %d attempts, the flaky one %d and failed %.1f%% of them",
			sd.service, n, 100*rate(sd), sd.r.failed(), total, bad.served.Load(), 100*float64(bad.failed.Load())/float64(max(1, bad.served.Load())))
	}
	if got := rate(sides[0]); got < 0.995 {
		t.Errorf("%s (retry: {}): %.2f%% of %d RPCs succeeded (first error: %v), want at least 99.5%%", resRetry, 100*got, n, sides[0].r.firstErr)
	}
	if got := rate(sides[1]); got < 0.93 || got > 0.97 {
		t.Errorf("%s (no policy): %.2f%% of %d RPCs succeeded, want 95%% ± 2 (the flaky backend's 30%% of a sixth)", resRetryOff, 100*got, n)
	}
	for _, sd := range sides {
		if c := sd.r.otherCodes(codes.Unavailable); c > 0 {
			t.Errorf("%s: %d RPCs failed with a code other than UNAVAILABLE (first: %v)", sd.service, c, sd.r.firstErr)
		}
	}
}

// resBreakerCase: max_requests 20, 4 slow backends, their RPCs in
// flight counted together (the highest count kept). First a burst of 60
// RPCs against backends that hold every RPC until released: exactly 20
// reach the backends and the other 40 fail with UNAVAILABLE ("max
// requests 20 exceeded") while those 20 are still held, i.e. at once,
// without waiting for a slot. Then 40 callers send 20 RPCs each to
// backends that take 50 ms: the backends never have more than 20 in
// flight, every RPC either succeeds or fails with the breaker's error,
// and the breaker's failures take a fraction of the backends' 50 ms
// (logged, not judged: on a loaded machine a goroutine can wait that
// long for a core).
func resBreakerCase(t *testing.T, rs *resServer) {
	ctx, cancel := context.WithTimeout(context.Background(), resilienceLoad)
	defer cancel()
	gauge := &resInflight{}
	// While hold is set, the backends hold each RPC until release is
	// closed; then each takes 50 ms.
	var hold atomic.Bool
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseAll()
	slow := func(ctx context.Context) {
		if hold.Load() {
			select {
			case <-release:
			case <-ctx.Done():
				return
			}
		}
		t := time.NewTimer(50 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	backends := startResBackends(t, "cb", 4, resBehaviour{gauge: gauge, slow: slow})
	hc := rs.serve(t, ctx, resBreaker, backends)
	// Warm with one RPC at a time (never near the limit), until every
	// backend has served one.
	resWarm(t, ctx, hc, backends, nil)
	if g := gauge.max.Load(); g > 1 {
		t.Fatalf("warm-up, one RPC at a time: %d in flight at the backends", g)
	}

	// The burst.
	const burst, limit = 60, 20
	gauge.max.Store(0)
	hold.Store(true)
	var wg sync.WaitGroup
	var ok, rejected, other atomic.Int64
	var rejectedLatency sync.Map // index -> time.Duration
	var firstOther atomic.Value
	for i := range burst {
		wg.Go(func() {
			rctx, rcancel := context.WithTimeout(ctx, resilienceWait)
			defer rcancel()
			start := time.Now()
			_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			switch {
			case err == nil:
				ok.Add(1)
			case resBreakerErr(err, limit):
				rejected.Add(1)
				rejectedLatency.Store(i, time.Since(start))
			default:
				other.Add(1)
				firstOther.CompareAndSwap(nil, err.Error())
			}
		})
	}
	deadline := time.Now().Add(resilienceWait)
	for gauge.cur.Load() < limit || rejected.Load()+other.Load() < burst-limit {
		if time.Now().After(deadline) {
			t.Fatalf("burst of %d: after %v, %d held at the backends and %d rejected (%d other errors: %v), want %d and %d",
				burst, resilienceWait, gauge.cur.Load(), rejected.Load(), other.Load(), firstOther.Load(), limit, burst-limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Every rejection came while the 20 were held: none has succeeded.
	heldWhileRejected := ok.Load()
	var slowest time.Duration
	rejectedLatency.Range(func(_, v any) bool { slowest = max(slowest, v.(time.Duration)); return true })
	time.Sleep(20 * time.Millisecond) // would a 21st reach a backend?
	peak := gauge.max.Load()
	releaseAll()
	wg.Wait()
	t.Logf("figure: burst of %d against held backends: %d in flight at the backends at the peak, %d failed fast with the breaker's UNAVAILABLE (the slowest after %v) while those were held, %d succeeded once released",
		burst, peak, rejected.Load(), slowest.Round(time.Microsecond), ok.Load())
	if peak != limit || heldWhileRejected != 0 || rejected.Load() != burst-limit || ok.Load() != limit || other.Load() != 0 {
		t.Errorf("burst of %d: peak in flight %d, %d succeeded before the release, %d rejected, %d succeeded, %d other errors (%v); want %d, 0, %d, %d, 0",
			burst, peak, heldWhileRejected, rejected.Load(), ok.Load(), other.Load(), firstOther.Load(), limit, burst-limit, limit)
	}

	// Sustained load against slow (50 ms) backends.
	const callers, each = 40, 20
	gauge.max.Store(0)
	var lat [2][]time.Duration // 0: succeeded, 1: rejected by the breaker
	var mu sync.Mutex
	other.Store(0)
	for range callers {
		wg.Go(func() {
			for range each {
				if ctx.Err() != nil {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, resRPCTimeout)
				start := time.Now()
				_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
				d := time.Since(start)
				rcancel()
				k := 0
				switch {
				case err == nil:
				case resBreakerErr(err, limit):
					k = 1
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, err.Error())
					continue
				}
				mu.Lock()
				lat[k] = append(lat[k], d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := len(lat[0]) + len(lat[1]) + int(other.Load())
	t.Logf("figure: %d callers × %d RPCs, backends taking 50ms: peak in flight %d; %d succeeded (median %v), %d failed fast with the breaker's UNAVAILABLE (median %v, p99 %v)",
		callers, each, gauge.max.Load(), len(lat[0]), resQuantile(lat[0], 0.5), len(lat[1]), resQuantile(lat[1], 0.5), resQuantile(lat[1], 0.99))
	if g := gauge.max.Load(); g > limit {
		t.Errorf("sustained load: %d RPCs in flight at the backends at once, want at most %d", g, limit)
	}
	if total != callers*each || other.Load() != 0 {
		t.Errorf("sustained load: %d RPCs ended, %d of them with an error other than the breaker's (first: %v); want %d, 0", total, other.Load(), firstOther.Load(), callers*each)
	}
	if len(lat[1]) == 0 {
		t.Errorf("sustained load: %d callers against a limit of %d, and no RPC failed with the breaker's error", callers, limit)
	}
}

// resBreakerErr reports whether err is grpc-go's circuit breaker failing an
// RPC at max_requests limit.
func resBreakerErr(err error, limit int) bool {
	st := status.Convert(err)
	return st.Code() == codes.Unavailable && strings.Contains(st.Message(), fmt.Sprintf("max requests %d exceeded", limit))
}

// resFaultCase: the fault aborts 10% of the RPCs with UNAVAILABLE
// and delays 20% by 100 ms, rolled apart. Over 4,000 RPCs (32 at a time)
// the aborted share is 10% ± 3 points and the delayed share 20% ± 3
// points (± 3 points is at least 4.7 binomial standard deviations); every
// RPC not aborted reaches a backend and succeeds, and no aborted one
// reaches a backend.
//
// A delay is read where grpc-go spends it, not from the RPC's latency
// (which a loaded machine stretches past 100 ms now and then): the fault
// waits before the RPC's first attempt begins, so an RPC that went out
// was delayed when its first attempt began 100 ms or more after the call
// (a client stats handler sees the attempt begin); an aborted RPC never
// goes out, and was delayed when it failed 100 ms or more after the call.
func resFaultCase(t *testing.T, rs *resServer) {
	ctx, cancel := context.WithTimeout(context.Background(), resilienceLoad)
	defer cancel()
	backends := startResBackends(t, "fi", 2, resBehaviour{})
	hc := rs.serve(t, ctx, resFault, backends, grpc.WithStatsHandler(resAttemptClock{}))
	resWarm(t, ctx, hc, backends, nil)
	const n, delay = 4000, 100 * time.Millisecond
	calls := make([]*resCallClock, n)
	before := resServed(backends)
	r := resSend(ctx, hc, n, 32, func(ctx context.Context, i int) context.Context {
		calls[i] = &resCallClock{start: time.Now()}
		return context.WithValue(ctx, resCallClockKey{}, calls[i])
	})
	r.sent(t, "fault injection")
	var aborted, delayed, otherErr, noAttempt int
	var undelayed, delays []time.Duration // to the first attempt, or to the abort
	for i, err := range r.errs {
		st := status.Convert(err)
		wait := time.Duration(calls[i].toAttempt.Load())
		switch {
		case err == nil:
		case st.Code() == codes.Unavailable && st.Message() == "RPC terminated due to fault injection":
			aborted++
			wait = r.latency[i]
		default:
			otherErr++
		}
		if wait == 0 {
			noAttempt++
			continue
		}
		if wait >= delay {
			delayed++
			delays = append(delays, wait)
		} else {
			undelayed = append(undelayed, wait)
		}
	}
	var reached int64
	for i, b := range backends {
		reached += b.served.Load() - before[i]
	}
	var slowRPCs int
	for _, l := range r.latency {
		if l >= delay {
			slowRPCs++
		}
	}
	abortPct, delayPct := 100*float64(aborted)/n, 100*float64(delayed)/n
	t.Logf("figure: %d RPCs: %.1f%% aborted (configured 10%%), %.1f%% delayed %v (configured 20%%): the shortest delay %v, the longest wait of the others %v (p99 %v); %.1f%% of the RPCs took %v or more in all; %d reached the backends",
		n, abortPct, delayPct, delay, resQuantile(delays, 0), resQuantile(undelayed, 1), resQuantile(undelayed, 0.99), 100*float64(slowRPCs)/n, delay, reached)
	if abortPct < 7 || abortPct > 13 {
		t.Errorf("%.1f%% of %d RPCs aborted by the fault, want 10%% ± 3", abortPct, n)
	}
	if delayPct < 17 || delayPct > 23 {
		t.Errorf("%.1f%% of %d RPCs delayed %v or more, want 20%% ± 3", delayPct, n, delay)
	}
	if otherErr > 0 || noAttempt > 0 || reached != int64(n-aborted) {
		t.Errorf("%d RPCs failed otherwise (first: %v), %d went out without an attempt seen; %d reached the backends, want %d (every RPC not aborted)",
			otherErr, r.firstErr, noAttempt, reached, n-aborted)
	}
}

// resCallClock is one RPC's: when it was called, and how long after that
// its first attempt began (0 until it has).
type resCallClock struct {
	start     time.Time
	toAttempt atomic.Int64
}

type resCallClockKey struct{}

// resAttemptClock is a client stats handler that records, in the resCallClock
// of an RPC's context, when its first attempt began.
type resAttemptClock struct{}

func (resAttemptClock) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (resAttemptClock) HandleRPC(ctx context.Context, s stats.RPCStats) {
	b, ok := s.(*stats.Begin)
	if c, has := ctx.Value(resCallClockKey{}).(*resCallClock); ok && has {
		c.toAttempt.CompareAndSwap(0, max(1, int64(b.BeginTime.Sub(c.start))))
	}
}
func (resAttemptClock) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (resAttemptClock) HandleConn(context.Context, stats.ConnStats)                       {}

// resRingHashBackends is the ring-hash case's N.
const resRingHashBackends = 6

// resRingHashCase: ring hash on x-user over N = 6 backends; 1,000 users send
// 4 RPCs each. At least 99% of each user's RPCs go to one backend. Then
// one backend is deregistered: once the clients have let it go, the same
// RPCs again go to one backend per user, none to the removed one, and at
// most 1/N + 5 points of the users moved to another backend (ideal
// consistent hashing moves the removed backend's users only, about 1/N;
// with 1,000 users its share has a binomial standard deviation of 1.2
// points).
//
// grpc-go's ring (as Envoy's) gives each of N equal endpoints
// ceil(min_ring_size / N) entries: with a ring of fixed size, one
// endpoint fewer gives every other one more entries, which take users
// from each other (about (N−2)/N² of them on top of the removed one's
// 1/N, some 26% in all at N = 6). spillway sizes the ring with the
// endpoint count, a fixed number of entries per endpoint (xds ringSizes),
// and the Cluster follows the endpoints, so only the removed backend's
// users move. The log line splits the users moved into those two parts.
func resRingHashCase(t *testing.T, rs *resServer) {
	ctx, cancel := context.WithTimeout(context.Background(), resilienceLoad)
	defer cancel()
	backends := startResBackends(t, "rh", resRingHashBackends, resBehaviour{})
	hc := rs.serve(t, ctx, resRingHash, backends)
	const users, per = 1000, 4
	user := func(i int) string { return fmt.Sprintf("user-%04d", i%users) }
	// Every backend owns users: the clients' ring has them all.
	resWarm(t, ctx, hc, backends, user)

	// owners sends per RPCs for each user and returns each user's
	// backend (index into backends), failing the test if one user's
	// RPCs went to more than one, or any failed.
	owners := func(phase string) []int {
		t.Helper()
		before := make([]map[string]int64, len(backends))
		for i, b := range backends {
			before[i] = b.users()
		}
		r := resSend(ctx, hc, users*per, 8, resWithUser(user))
		r.sent(t, phase)
		if r.failed() > 0 {
			t.Fatalf("%s: %d of %d RPCs failed (first: %v)", phase, r.failed(), users*per, r.firstErr)
		}
		after := make([]map[string]int64, len(backends))
		for i, b := range backends {
			after[i] = b.users()
		}
		owner := make([]int, users)
		split := 0
		var onOwner int64
		for u := range users {
			top, best := -1, int64(0)
			var sum int64
			for i := range backends {
				c := after[i][user(u)] - before[i][user(u)]
				sum += c
				if c > best {
					top, best = i, c
				}
			}
			owner[u] = top
			onOwner += best
			if float64(best) < 0.99*float64(sum) {
				split++
				if split <= 3 {
					t.Errorf("%s: %s's %d RPCs: %d on its busiest backend, want at least 99%%", phase, user(u), sum, best)
				}
			}
		}
		t.Logf("figure: %s: %d users × %d RPCs: %.2f%% on each user's backend; %d users split", phase, users, per, 100*float64(onOwner)/float64(users*per), split)
		return owner
	}
	first := owners("all backends")
	perBackend := make([]int, len(backends))
	for _, o := range first {
		perBackend[o]++
	}
	t.Logf("users per backend: %v", perBackend)

	// Remove one: the first (any would do, but not one picked by its
	// users, which would bias the share that must move).
	const gone = 0
	victim := backends[gone]
	if _, err := rs.reg.Deregister(ctx, &pb.DeregisterRequest{LeaseId: victim.lease}); err != nil {
		t.Fatalf("deregister %s: %v", victim.id, err)
	}
	// The clients let it go: its connection closes, and its users'
	// RPCs land elsewhere.
	deadline := time.Now().Add(resilienceWait)
	for {
		n := victim.served.Load()
		var probe []string
		for u, o := range first {
			if o == gone {
				probe = append(probe, user(u))
			}
		}
		r := resSend(ctx, hc, len(probe), 4, resWithUser(func(i int) string { return probe[i] }))
		if victim.conns.Load() == 0 && victim.served.Load() == n && r.failed() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after deregistering %s: %d client connections to it, its users' RPCs still reach it", resilienceWait, victim.id, victim.conns.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := victim.served.Load()
	second := owners("one backend removed")
	if got := victim.served.Load() - before; got > 0 {
		t.Errorf("the removed backend served %d RPCs after the clients let it go, want 0", got)
	}
	moved, fromGone := 0, 0
	for u := range users {
		if first[u] != second[u] {
			moved++
			if first[u] == gone {
				fromGone++
			}
		}
	}
	bound := 1/float64(resRingHashBackends) + 0.05
	t.Logf("figure: one of %d backends removed: %d of %d users moved (%.1f%%; bound 1/N + 5 points = %.1f%%): %d that were on it, %d between the others",
		resRingHashBackends, moved, users, 100*float64(moved)/users, 100*bound, fromGone, moved-fromGone)
	if float64(moved)/users > bound {
		t.Errorf("one of %d backends removed: %.1f%% of the users moved (%d were on it, %d moved between the others), want at most 1/N + 5 points = %.1f%%",
			resRingHashBackends, 100*float64(moved)/users, fromGone, moved-fromGone, 100*bound)
	}
}

// resClientWRRCase: client-side weighted round robin (gRFC A58) over 3
// backends whose every RPC's trailer reports the same request rate, 100
// qps, and an application utilization of 0.2, 0.2 and 0.8. grpc-go weighs
// an endpoint qps / utilization (no errors: no penalty), 500, 500 and 125,
// so the busy backend should get a quarter of what each light one gets
// (1/9 of the RPCs, 4/9 to each other). Once the weights count (the 1 s
// blackout; the case waits up to resilienceWait, in rounds of 300 RPCs,
// for a round with the busy backend below half of each light one), over
// 3,000 RPCs the busy backend gets less than half of what each light one
// gets: a quarter expected, half the bound a loaded machine meets. The
// same backends' behaviour under the default policy (resWRROff: no lb,
// spillway.wrr over equal endpoint weights), over 3,000 RPCs sent at the
// same time, gets a third to each backend, ± 3 points (its picks are
// deterministic: equal weights give equal counts).
func resClientWRRCase(t *testing.T, rs *resServer) {
	ctx, cancel := context.WithTimeout(context.Background(), resilienceLoad)
	defer cancel()
	const qps, light, busy = 100, 0.2, 0.8
	type side struct {
		service  string
		backends []*resBackend // light, light, busy
		hc       healthpb.HealthClient
		r        resResult
		got      []int64
	}
	sides := []*side{{service: resWRR}, {service: resWRROff}}
	for i, sd := range sides {
		sd.backends = append(startResBackends(t, fmt.Sprintf("wrr%d-light", i), 2, resBehaviour{load: &resLoad{qps, light}}),
			startResBackends(t, fmt.Sprintf("wrr%d-busy", i), 1, resBehaviour{load: &resLoad{qps, busy}})...)
		sd.hc = rs.serve(t, ctx, sd.service, sd.backends)
	}
	wrr := sides[0]
	// The first reports: the blackout starts with each endpoint's first.
	reported := time.Now()
	for _, sd := range sides {
		resWarm(t, ctx, sd.hc, sd.backends, nil)
	}

	// The weights take effect: rounds 20 ms apart, at most maxRounds
	// (some 11 s on an idle machine) and for at most resilienceWait.
	const round, maxRounds = 300, 300
	for rounds := 1; ; rounds++ {
		before := resServed(wrr.backends)
		resSend(ctx, wrr.hc, round, 4, nil).sent(t, "waiting for the weights")
		got := resDelta(wrr.backends, before)
		if float64(got[2]) < 0.5*float64(min(got[0], got[1])) {
			t.Logf("figure: the weights took effect %v after the first reports (blackout 1s, update every 100ms; %d rounds of %d RPCs, the last %v)",
				time.Since(reported).Round(10*time.Millisecond), rounds, round, got)
			break
		}
		if rounds == maxRounds || time.Since(reported) > resilienceWait {
			t.Fatalf("%v after the first reports (blackout 1s), %d rounds of %d RPCs: the last gave %v (light, light, busy), want the busy backend below half of each light one",
				time.Since(reported).Round(10*time.Millisecond), rounds, round, got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	const n = 3000
	var wg sync.WaitGroup
	for _, sd := range sides {
		wg.Go(func() {
			before := resServed(sd.backends)
			sd.r = resSend(ctx, sd.hc, n, 4, nil)
			sd.got = resDelta(sd.backends, before)
		})
	}
	wg.Wait()
	for _, sd := range sides {
		sd.r.sent(t, sd.service)
		if sd.r.failed() > 0 {
			t.Errorf("%s: %d of %d RPCs failed (first: %v), want 0", sd.service, sd.r.failed(), n, sd.r.firstErr)
		}
		t.Logf("figure: %s: %d RPCs: the light backends (utilization %.1f) got %d and %d (%.1f%%, %.1f%%), the busy one (%.1f) %d (%.1f%%): %.2f of the light ones' mean",
			sd.service, n, light, sd.got[0], sd.got[1], resPct(sd.got[0], n), resPct(sd.got[1], n), busy, sd.got[2], resPct(sd.got[2], n),
			float64(sd.got[2])/(float64(sd.got[0]+sd.got[1])/2))
	}
	if got := wrr.got; float64(got[2]) >= 0.5*float64(min(got[0], got[1])) {
		t.Errorf("%s: the busy backend got %d of %d RPCs against %d and %d for the light ones, want less than half of each (a quarter expected: weights 125 against 500)",
			resWRR, got[2], n, got[0], got[1])
	}
	for i, c := range sides[1].got {
		if pct := resPct(c, n); pct < 100.0/3-3 || pct > 100.0/3+3 {
			t.Errorf("%s (no policy): backend %s got %.1f%% of %d RPCs (%v), want a third ± 3 points", resWRROff, sides[1].backends[i].id, pct, n, sides[1].got)
		}
	}
}

// resLeastRequestCase: least request (gRFC A48, choice_count 2) over 4
// backends of which one takes 200 ms per RPC and the others 1 ms, with 16
// RPCs in flight: each RPC goes to whichever of 2 backends drawn at
// random (with replacement, as grpc-go draws) has fewer RPCs in flight,
// and the slow one, holding each RPC 200 times longer, mostly has more.
// Over 1,200 RPCs the slow backend gets less than half of its share under
// round robin: the same backends' behaviour under the default policy
// (resLROff: no lb, spillway.wrr over equal endpoint weights), 1,200 RPCs
// 16 at a time sent at the same time, which gives it a quarter, ± 3
// points (deterministic picks: equal counts). Its least-request share
// is expected at 1/16 = 6.25% (both draws on it) or more, rising with the
// ties, which a loaded machine makes more of by slowing the fast RPCs in
// the client: with 100 ms the slow backend reached 12.6% (the bound
// 12.5%) under -race beside two busy cores; with 200 ms, 6.1–6.5% there.
func resLeastRequestCase(t *testing.T, rs *resServer) {
	ctx, cancel := context.WithTimeout(context.Background(), resilienceLoad)
	defer cancel()
	const n, inFlight, slowFor, fastFor = 1200, 16, 200 * time.Millisecond, time.Millisecond
	sleep := func(d time.Duration) func(context.Context) {
		return func(ctx context.Context) {
			tm := time.NewTimer(d)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-ctx.Done():
			}
		}
	}
	type side struct {
		service  string
		backends []*resBackend // slow, fast, fast, fast
		hc       healthpb.HealthClient
		r        resResult
		got      []int64
	}
	sides := []*side{{service: resLR}, {service: resLROff}}
	for i, sd := range sides {
		sd.backends = append(startResBackends(t, fmt.Sprintf("lr%d-slow", i), 1, resBehaviour{slow: sleep(slowFor)}),
			startResBackends(t, fmt.Sprintf("lr%d-fast", i), 3, resBehaviour{slow: sleep(fastFor)})...)
		sd.hc = rs.serve(t, ctx, sd.service, sd.backends)
	}
	for _, sd := range sides {
		resWarm(t, ctx, sd.hc, sd.backends, nil)
	}
	var wg sync.WaitGroup
	for _, sd := range sides {
		wg.Go(func() {
			before := resServed(sd.backends)
			sd.r = resSend(ctx, sd.hc, n, inFlight, nil)
			sd.got = resDelta(sd.backends, before)
		})
	}
	wg.Wait()
	for _, sd := range sides {
		sd.r.sent(t, sd.service)
		if sd.r.failed() > 0 {
			t.Errorf("%s: %d of %d RPCs failed (first: %v), want 0", sd.service, sd.r.failed(), n, sd.r.firstErr)
		}
		t.Logf("figure: %s: %d RPCs, %d at a time: the slow backend (%v) got %d (%.1f%%), the fast ones (%v) %v; median latency %v, p99 %v",
			sd.service, n, inFlight, slowFor, sd.got[0], resPct(sd.got[0], n), fastFor, sd.got[1:], resQuantile(sd.r.latency, 0.5), resQuantile(sd.r.latency, 0.99))
	}
	lr, rr := resPct(sides[0].got[0], n), resPct(sides[1].got[0], n)
	if rr < 25-3 || rr > 25+3 {
		t.Errorf("%s (no policy): the slow backend got %.1f%% of %d RPCs (%v), want a quarter ± 3 points", resLROff, rr, n, sides[1].got)
	}
	if lr >= rr/2 {
		t.Errorf("%s: the slow backend got %.1f%% of %d RPCs (%v), want less than half of its %.1f%% under round robin", resLR, lr, n, sides[0].got, rr)
	}
}

// resDelta returns each backend's RPCs since before (resServed's).
func resDelta(backends []*resBackend, before []int64) []int64 {
	out := resServed(backends)
	for i := range out {
		out[i] -= before[i]
	}
	return out
}

// resPct is c as a percentage of n.
func resPct(c int64, n int) float64 { return 100 * float64(c) / float64(n) }

// resServer is the spillway server the cases share.
type resServer struct {
	addr string
	reg  pb.RegistryClient
}

// serve registers backends under service (zone-a of r1) and returns a
// health client on a grpc-go xDS channel to xds:///service (with opts),
// made after the registrations.
func (rs *resServer) serve(t *testing.T, ctx context.Context, service string, backends []*resBackend, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	for _, b := range backends {
		resp, err := rs.reg.Register(ctx, &pb.RegisterRequest{Service: service, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}})
		if err != nil {
			t.Fatalf("register %s in %s: %v", b.id, service, err)
		}
		b.lease = resp.GetLeaseId()
	}
	conn := xdstest.Dial(t, rs.addr, service, xdstest.Node{ID: "resilience-" + service, Cluster: "resilience-client", Region: "r1", Zone: "zone-a"}, opts...)
	return healthpb.NewHealthClient(conn)
}

// resBehaviour is what a backend does besides answering.
type resBehaviour struct {
	// gauge, or nil, counts the RPCs in the backends' handlers.
	gauge *resInflight
	// slow, or nil, is called before each answer.
	slow func(ctx context.Context)
	// load, or nil, is the ORCA load report every RPC's trailer carries
	// (grpc-go's orca per-call metrics).
	load *resLoad
}

// resLoad is a backend's ORCA load report: a request rate and an
// application utilization, fixed whatever the traffic, so that the
// weights grpc-go's weighted_round_robin derives from them hold still.
type resLoad struct{ qps, utilization float64 }

// resBackend is a gRPC server (health service) on 127.0.0.1 that counts
// its RPCs, by user header too, and its open client connections, and
// fails RPCs as the case sets.
type resBackend struct {
	id    string
	port  uint32
	lease string // set by resServer.serve
	beh   resBehaviour

	// failPermille is the chance, in thousandths, that an RPC is
	// answered UNAVAILABLE.
	failPermille atomic.Int64
	// failing makes it answer every RPC UNAVAILABLE.
	failing atomic.Bool

	served atomic.Int64 // RPCs that reached it
	failed atomic.Int64 // of which it answered UNAVAILABLE
	conns  atomic.Int64 // open client connections

	// mu guards byUser.
	mu     sync.Mutex
	byUser map[string]int64
}

// startResBackends starts n backends named prefix0.. with behaviour beh.
func startResBackends(t *testing.T, prefix string, n int, beh resBehaviour) []*resBackend {
	t.Helper()
	out := make([]*resBackend, n)
	for i := range out {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &resBackend{id: fmt.Sprintf("%s%d", prefix, i), port: uint32(lis.Addr().(*net.TCPAddr).Port), beh: beh, byUser: map[string]int64{}}
		opts := []grpc.ServerOption{grpc.StatsHandler(connCounter{&b.conns})}
		if beh.load != nil {
			// Before intercept: its interceptor puts the recorder in the
			// context intercept fills, and writes the trailer after.
			opts = append(opts, orca.CallMetricsServerOption(nil))
		}
		srv := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(b.intercept))...)
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		out[i] = b
	}
	return out
}

func (b *resBackend) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	b.served.Add(1)
	if v := metadata.ValueFromIncomingContext(ctx, resUserHeader); len(v) == 1 {
		b.mu.Lock()
		b.byUser[v[0]]++
		b.mu.Unlock()
	}
	if g := b.beh.gauge; g != nil {
		g.enter()
		defer g.cur.Add(-1)
	}
	if l := b.beh.load; l != nil {
		rec := orca.CallMetricsRecorderFromContext(ctx)
		rec.SetQPS(l.qps)
		rec.SetApplicationUtilization(l.utilization)
	}
	if b.beh.slow != nil {
		b.beh.slow(ctx)
	}
	if b.failing.Load() || rand.Int64N(1000) < b.failPermille.Load() {
		b.failed.Add(1)
		return nil, status.Error(codes.Unavailable, "backend failing on purpose")
	}
	return h(ctx, req)
}

// users returns a copy of the RPCs served by user header value.
func (b *resBackend) users() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int64, len(b.byUser))
	for k, v := range b.byUser {
		out[k] = v
	}
	return out
}

// resServed returns each backend's RPCs so far.
func resServed(backends []*resBackend) []int64 {
	out := make([]int64, len(backends))
	for i, b := range backends {
		out[i] = b.served.Load()
	}
	return out
}

// resInflight counts RPCs in progress and keeps the highest count.
type resInflight struct{ cur, max atomic.Int64 }

func (g *resInflight) enter() {
	n := g.cur.Add(1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			return
		}
	}
}

// resWarm sends RPCs one at a time (with the user header of user(i) when
// user is not nil) until every backend has served one, for at most
// resilienceWait; errors are ignored (some backends fail on purpose).
func resWarm(t *testing.T, ctx context.Context, hc healthpb.HealthClient, backends []*resBackend, user func(int) string) {
	t.Helper()
	start := resServed(backends)
	deadline := time.Now().Add(resilienceWait)
	for i := 0; ; i++ {
		missing := 0
		for j, b := range backends {
			if b.served.Load() == start[j] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("after %v and %d RPCs, %d of %d backends have served none", resilienceWait, i, missing, len(backends))
		}
		rctx, cancel := context.WithTimeout(ctx, resRPCTimeout)
		if user != nil {
			rctx = metadata.AppendToOutgoingContext(rctx, resUserHeader, user(i))
		}
		hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
	}
}

// resResult is what resSend saw: each RPC's error (nil when it succeeded) and
// latency, by index.
type resResult struct {
	errs     []error
	latency  []time.Duration
	firstErr error
	unsent   int // not sent: the case's context ended first
}

// sent fails the test when r's load did not finish: the machine was too
// slow for the case's time bound, which says nothing of the policy.
func (r resResult) sent(t *testing.T, what string) {
	t.Helper()
	if r.unsent > 0 {
		t.Fatalf("%s: %d of %d RPCs not sent within the case's %v (a machine far too slow): nothing to judge", what, r.unsent, len(r.errs), resilienceLoad)
	}
}

func (r resResult) failed() int64 {
	var n int64
	for _, err := range r.errs {
		if err != nil {
			n++
		}
	}
	return n
}

// otherCodes counts the RPCs that failed with a code other than c.
func (r resResult) otherCodes(c codes.Code) int {
	n := 0
	for _, err := range r.errs {
		if err != nil && status.Code(err) != c {
			n++
		}
	}
	return n
}

// resSend sends n health checks (wait-for-ready, each within resRPCTimeout)
// from workers goroutines, RPC i with the context prep(ctx, i) gives
// when prep is not nil. It stops early when ctx ends: the RPCs not sent
// are counted in unsent (and failed, with ctx's error).
func resSend(ctx context.Context, hc healthpb.HealthClient, n, workers int, prep func(context.Context, int) context.Context) resResult {
	r := resResult{errs: make([]error, n), latency: make([]time.Duration, n)}
	var next, unsent atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := ctx.Err(); err != nil {
					r.errs[i] = err
					unsent.Add(1)
					continue
				}
				rctx, cancel := context.WithTimeout(ctx, resRPCTimeout)
				if prep != nil {
					rctx = prep(rctx, i)
				}
				start := time.Now()
				_, r.errs[i] = hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
				r.latency[i] = time.Since(start)
				cancel()
			}
		})
	}
	wg.Wait()
	r.unsent = int(unsent.Load())
	for _, err := range r.errs {
		if err != nil {
			r.firstErr = err
			break
		}
	}
	return r
}

// resWithUser is a resSend prep sending user(i) as RPC i's user header.
func resWithUser(user func(int) string) func(context.Context, int) context.Context {
	return func(ctx context.Context, i int) context.Context {
		return metadata.AppendToOutgoingContext(ctx, resUserHeader, user(i))
	}
}

// resQuantile returns the q-quantile (0 the smallest, 1 the largest) of ds,
// 0 for none.
func resQuantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))].Round(time.Microsecond)
}

package xds_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/spillway/spillway/internal/testwait"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/security/authz"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/routing"
)

// routed is an xDS server serving route rules from a routing.Store, with
// one backend per service.
type routed struct {
	addr     string
	store    *registry.Store
	rules    *routing.Store
	reg      *prometheus.Registry
	backends map[string]*backend
}

func registryTargets(store *registry.Store) routing.Targets {
	return routing.TargetsFunc(func(service string) (bool, int) {
		svc, ok := store.Snapshot().Service(service)
		if !ok {
			return false, 0
		}
		n := 0
		for _, e := range svc.Serving() {
			if e.Health == registry.Healthy {
				n++
			}
		}
		return len(svc.Serving()) > 0, n
	})
}

func startRouted(t *testing.T, services ...string) *routed {
	t.Helper()
	r := &routed{store: registry.NewStore(), reg: prometheus.NewRegistry(), backends: map[string]*backend{}}
	r.store.MarkSynced()
	for _, svc := range services {
		b := startBackend(t, "zone-a")
		r.backends[svc] = b
		if _, err := r.store.Apply(registry.Upsert(svc, b.endpoint(svc+"-1"))); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	r.rules, err = routing.NewStore(routing.StoreConfig{Targets: registryTargets(r.store), Check: xds.CheckRules})
	if err != nil {
		t.Fatal(err)
	}
	r.reg.MustRegister(r.rules.Collector())
	x, err := xds.New(xds.Config{Store: r.store, Routes: r.rules, Debounce: 10 * time.Millisecond, LRSInterval: time.Second, Registerer: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(xds.Codec()))
	x.Register(srv)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	wg.Go(func() { x.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		srv.Stop()
		wg.Wait()
	})
	r.addr = lis.Addr().String()
	return r
}

func (r *routed) set(t *testing.T, service, yaml string) {
	t.Helper()
	if _, err := r.rules.Set(context.Background(), service, []byte(yaml)); err != nil {
		t.Fatalf("set rules of %s: %v", service, err)
	}
}

// counts returns every backend's call count.
func (r *routed) counts() map[string]int64 {
	out := map[string]int64{}
	for svc, b := range r.backends {
		out[svc] = b.calls.Load()
	}
	return out
}

// since returns the calls per backend after before.
func (r *routed) since(before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for svc, n := range r.counts() {
		if d := n - before[svc]; d != 0 {
			out[svc] = d
		}
	}
	return out
}

// gauge returns metric name{labels} from the registry, or -1 if absent.
func (r *routed) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

var synthetic = metadata.Pairs("x-traffic-class", "synthetic")

// call sends one RPC, tagged synthetic or not. Without WaitForReady an
// RPC the client cannot route fails instead of waiting.
func call(ctx context.Context, hc healthpb.HealthClient, tagged bool, opts ...grpc.CallOption) error {
	if tagged {
		ctx = metadata.NewOutgoingContext(ctx, synthetic)
	}
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

// until sends RPCs (tagged or not) one at a time until ok holds for the
// backends the last one reached, at most n of them and for at most 30 s.
// From the second on it pauses 1 ms before each: a change behind the
// route warm-up (1 s) takes time to show, not a number of RPCs, and a
// fast machine sends thousands in that second.
//
// Each RPC waits for readiness for at most untilAttempt, and a failed
// one is not counted and is sent again: an RPC that grpc-go routed to a cluster just before the
// route left it (a target gone) waits on that cluster, which grpc-go
// keeps while an RPC uses it, until its own deadline, whatever routes
// come after; the next RPC takes the new route.
func (r *routed) until(t *testing.T, hc healthpb.HealthClient, tagged bool, n int, ok func(map[string]int64) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lastErr error
	for sent := 0; sent < n && ctx.Err() == nil; {
		if sent > 0 || lastErr != nil {
			time.Sleep(time.Millisecond)
		}
		before := r.counts()
		actx, acancel := context.WithTimeout(ctx, untilAttempt)
		err := call(actx, hc, tagged, grpc.WaitForReady(true))
		acancel()
		if err != nil {
			lastErr = err // not an RPC of the n: try again
			continue
		}
		sent++
		if ok(r.since(before)) {
			return
		}
	}
	t.Fatalf("not reached within %d RPCs or 30 s (last failed RPC: %v)", n, lastErr)
}

// untilAttempt bounds one RPC of until.
const untilAttempt = 5 * time.Second

func (r *routed) send(t *testing.T, hc healthpb.HealthClient, tagged bool, n int) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := r.counts()
	for i := range n {
		if err := call(ctx, hc, tagged); err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}
	return r.since(before)
}

const headerRule = `
rules:
  - name: synthetic
    match:
      headers: [{name: x-traffic-class, exact: synthetic}]
    to: pay-synthetic
`

// TestRouteRulesGRPC is #15 acceptance 1 against a real grpc-go xDS
// client: a header rule takes every tagged RPC and no untagged one; a
// 90/10 split is measured within binomial bounds; a change of rule moves
// traffic in one RDS push with no failed RPC.
func TestRouteRulesGRPC(t *testing.T) {
	r := startRouted(t, "pay", "pay-synthetic", "pay-canary")
	r.set(t, "pay", headerRule)
	conn := dialXDS(t, r.addr, "pay", "zone-a", "client-1")
	hc := healthpb.NewHealthClient(conn)
	// Ready: both routes answered once (WaitForReady).
	r.until(t, hc, true, 1, func(map[string]int64) bool { return true })
	r.until(t, hc, false, 1, func(map[string]int64) bool { return true })

	t.Run("header", func(t *testing.T) {
		const n = 500
		if got := r.send(t, hc, true, n); got["pay-synthetic"] != n || len(got) != 1 {
			t.Errorf("tagged: calls per backend = %v, want all %d on pay-synthetic", got, n)
		}
		if got := r.send(t, hc, false, n); got["pay-synthetic"] != 0 || got["pay"] != n {
			t.Errorf("untagged: calls per backend = %v, want all %d on pay, 0 on pay-synthetic", got, n)
		}
	})

	t.Run("weighted", func(t *testing.T) {
		r.set(t, "pay", headerRule+`
  - name: canary
    match: {}
    split:
      - {to: pay, weight: 90}
      - {to: pay-canary, weight: 10}
`)
		r.until(t, hc, false, 20000, func(d map[string]int64) bool { return d["pay-canary"] > 0 })
		// 2,000 untagged RPCs, 10% to the canary: mean 200, σ =
		// sqrt(2000×0.1×0.9) ≈ 13.4; 4.5σ ≈ 60 → [140, 260].
		const n, p = 2000, 0.1
		sigma := math.Sqrt(n * p * (1 - p))
		lo, hi := int64(math.Ceil(n*p-4.5*sigma)), int64(math.Floor(n*p+4.5*sigma))
		got := r.send(t, hc, false, n)
		t.Logf("untagged: %v (canary bounds [%d, %d])", got, lo, hi)
		if c := got["pay-canary"]; c < lo || c > hi {
			t.Errorf("canary got %d of %d, want within [%d, %d] (4.5σ)", c, n, lo, hi)
		}
		if got["pay"]+got["pay-canary"] != n || got["pay-synthetic"] != 0 {
			t.Errorf("calls per backend = %v, want %d on pay and pay-canary, 0 on pay-synthetic", got, n)
		}
		if got := r.send(t, hc, true, 200); got["pay-synthetic"] != 200 {
			t.Errorf("tagged after adding the split: %v, want all 200 on pay-synthetic", got)
		}
	})

	// A change between clusters the client has (pay-canary is warmed
	// while its weight is 0) is one RDS push.
	t.Run("change_in_one_push_no_failure", func(t *testing.T) {
		r.set(t, "pay", headerRule+`
  - name: canary
    match: {}
    split:
      - {to: pay, weight: 100}
      - {to: pay-canary, weight: 0}
`)
		r.moveTagged(t, hc, strings.Replace(headerRule, "to: pay-synthetic", "to: pay-canary", 1)+`
  - name: canary
    match: {}
    split:
      - {to: pay, weight: 100}
      - {to: pay-canary, weight: 0}
`, "pay-synthetic", "pay-canary", 1)
	})
	// A change to a cluster the client does not have is two: the warm-up
	// route, then the move.
	t.Run("change_to_new_cluster_no_failure", func(t *testing.T) {
		r.set(t, "pay", headerRule)
		r.moveTagged(t, hc, strings.Replace(headerRule, "to: pay-synthetic", "to: pay-canary", 1), "pay-synthetic", "pay-canary", 2)
	})
}

// moveTagged waits until tagged RPCs all reach from, then sends tagged
// RPCs without WaitForReady continuously while it sets yaml, until they
// reach to; it fails the test if one RPC fails, if any reaches from after
// the move, or if the change took other than pushes RDS responses.
func (r *routed) moveTagged(t *testing.T, hc healthpb.HealthClient, yaml, from, to string, pushes float64) {
	t.Helper()
	r.until(t, hc, true, 20000, func(d map[string]int64) bool { return d[from] == 1 })
	if got := r.send(t, hc, true, 200); got[from] != 200 {
		t.Fatalf("before the change: %v, want all 200 on %s", got, from)
	}
	rdsBefore := r.metric(t, "spillway_xds_pushes_total", map[string]string{"type": "RDS"})
	var failed, sent atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for range 100_000 {
			select {
			case <-stop:
				return
			default:
			}
			sent.Add(1)
			if err := call(ctx, hc, true); err != nil {
				failed.Add(1)
				lastErr.Store(err)
			}
		}
	})
	start := r.counts()
	r.set(t, "pay", yaml)
	deadline := time.Now().Add(30 * time.Second)
	for r.since(start)[to] == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	at := r.counts()
	for r.since(at)[to] < 200 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // keep sending on the new route
	}
	close(stop)
	wg.Wait()
	after := r.since(at)
	t.Logf("%d tagged RPCs sent during the change, %d failed; after the move: %v", sent.Load(), failed.Load(), after)
	if failed.Load() != 0 {
		t.Errorf("%d of %d RPCs failed during the change (last: %v), want 0", failed.Load(), sent.Load(), lastErr.Load())
	}
	if after[to] == 0 || after[from] != 0 {
		t.Errorf("after the move: %v, want tagged RPCs on %s only", after, to)
	}
	// A push is counted just after its Send, which the client may see
	// first: the count is waited for, then must not be over.
	rdsPushes := func() float64 {
		return r.metric(t, "spillway_xds_pushes_total", map[string]string{"type": "RDS"}) - rdsBefore
	}
	testwait.For(t, 10*time.Second, "RDS pushes for the change counted", func() (bool, string) {
		d := rdsPushes()
		return d >= pushes, fmt.Sprintf("%v of %v", d, pushes)
	})
	if d := rdsPushes(); d != pushes {
		t.Errorf("RDS pushes for the change = %v, want %v", d, pushes)
	}
}

// allow lets every change through.
type allow struct{}

func (allow) Authorize(context.Context, authz.Action, string) error { return nil }

// TestRouteTargetGoneGRPC: a target deregistered after its rule was set
// leaves the rule stored but out of the route configuration: its RPCs
// take the default route and none fails; GET /v1/routes/S and the metric
// say it is broken. The target's return brings the rule back.
func TestRouteTargetGoneGRPC(t *testing.T) {
	r := startRouted(t, "pay", "pay-synthetic")
	r.set(t, "pay", headerRule)
	api := httptest.NewServer(r.rules.Handler(allow{}, nil))
	defer api.Close()
	conn := dialXDS(t, r.addr, "pay", "zone-a", "client-1")
	hc := healthpb.NewHealthClient(conn)
	r.until(t, hc, true, 1, func(d map[string]int64) bool { return d["pay-synthetic"] == 1 })
	if got := r.metric(t, "spillway_routes_broken", map[string]string{"service": "pay"}); got != 0 {
		t.Errorf("spillway_routes_broken{service=pay} = %v before, want 0", got)
	}

	if _, err := r.store.Apply(registry.Remove("pay-synthetic", "pay-synthetic-1", registry.SourceStatic)); err != nil {
		t.Fatal(err)
	}
	r.until(t, hc, true, 20000, func(d map[string]int64) bool { return d["pay"] == 1 })
	if got := r.send(t, hc, true, 200); got["pay"] != 200 {
		t.Errorf("tagged with the target gone: %v, want all 200 on pay (the default route)", got)
	}
	if got := r.metric(t, "spillway_routes_broken", map[string]string{"service": "pay"}); got != 1 {
		t.Errorf("spillway_routes_broken{service=pay} = %v, want 1", got)
	}
	resp, err := http.Get(api.URL + "/v1/routes/pay")
	if err != nil {
		t.Fatal(err)
	}
	var e routing.Entry
	err = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Broken) != 1 || e.Broken[0].Rule != "synthetic" || fmt.Sprint(e.Broken[0].Missing) != "[pay-synthetic]" || len(e.Rules) != 1 {
		t.Errorf("GET /v1/routes/pay: rules %d, broken %+v; want the rule kept, broken, missing pay-synthetic", len(e.Rules), e.Broken)
	}

	b := r.backends["pay-synthetic"]
	if _, err := r.store.Apply(registry.Upsert("pay-synthetic", b.endpoint("pay-synthetic-1"))); err != nil {
		t.Fatal(err)
	}
	r.until(t, hc, true, 20000, func(d map[string]int64) bool { return d["pay-synthetic"] == 1 })
	if got := r.send(t, hc, true, 100); got["pay-synthetic"] != 100 {
		t.Errorf("tagged with the target back: %v, want all 100 on pay-synthetic", got)
	}
	if got := r.metric(t, "spillway_routes_broken", map[string]string{"service": "pay"}); got != 0 {
		t.Errorf("spillway_routes_broken{service=pay} = %v after the return, want 0", got)
	}
}

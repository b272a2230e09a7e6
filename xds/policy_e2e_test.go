package xds_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	v3ringhashpb "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/svcconfig"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/xdstest"

	// The fault filter's config, inside the route configuration's Anys.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
)

// fakePolicies is a hand fake of xds.Policies: set changes a service's
// policy and closes the Changed channel.
type fakePolicies struct {
	// mu guards the fields below.
	mu      sync.Mutex
	pols    map[string]svcconfig.Resilience
	changed chan struct{}
}

var _ xds.Policies = (*fakePolicies)(nil)

func newFakePolicies() *fakePolicies {
	return &fakePolicies{pols: map[string]svcconfig.Resilience{}, changed: make(chan struct{})}
}

func (f *fakePolicies) Resilience(service string) (svcconfig.Resilience, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.pols[service]
	return r, ok
}

func (f *fakePolicies) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *fakePolicies) Services() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.pols {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// set gives service policy r; nil removes its policy.
func (f *fakePolicies) set(service string, r *svcconfig.Resilience) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r == nil {
		delete(f.pols, service)
	} else {
		f.pols[service] = *r
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// e2ePolicy has a part in each of the Listener, route and Cluster.
func e2ePolicy() *svcconfig.Resilience {
	d := func(v time.Duration) svcconfig.Duration { return svcconfig.Duration(v) }
	return &svcconfig.Resilience{
		OutlierDetection: &svcconfig.OutlierDetection{Interval: d(10 * time.Second), BaseEjectionTime: d(30 * time.Second), MaxEjectionTime: d(300 * time.Second), MaxEjectionPercent: 10,
			FailurePercentage: &svcconfig.FailurePercentageEjection{Threshold: 85, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 50}},
		MaxRequests: 100,
		Timeout:     d(5 * time.Second),
		Retry:       &svcconfig.Retry{On: []string{"unavailable"}, NumRetries: 1, BaseInterval: d(25 * time.Millisecond), MaxInterval: d(250 * time.Millisecond)},
		Fault:       &svcconfig.Fault{Abort: &svcconfig.FaultAbort{GRPCStatus: uint32(codes.ResourceExhausted), Percent: 100}, Header: "x-chaos"},
		LB:          &svcconfig.LB{RingHash: &svcconfig.RingHash{Header: "x-user", MinRingSize: 1024, MaxRingSize: 4096}},
	}
}

// TestPolicyChangePushed: a service's policy set while a stream holds its
// Listener, route and Cluster is pushed in all three, without a restart;
// another service's policy pushes nothing; removing the policy pushes
// back the resources of before, at their versions of before.
func TestPolicyChangePushed(t *testing.T) {
	pols := newFakePolicies()
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1, "api": 1}), xds.Config{Policies: pols})
	c := newSotwClient(t, srv.conn)
	types := []string{lds, rds, cds}
	before := map[string]*v3discoverypb.DiscoveryResponse{}
	for _, typ := range types {
		c.subscribe(typ, "web")
		before[typ] = c.recvType(typ)
		c.ack(before[typ])
	}

	pols.set("api", e2ePolicy()) // not subscribed: nothing comes
	c.barrier(eds)

	pols.set("web", e2ePolicy())
	got := map[string]proto.Message{}
	for _, typ := range types { // in ADS order
		resp := c.recvType(typ)
		if resp.GetVersionInfo() == before[typ].GetVersionInfo() {
			t.Errorf("%s version after the policy = %s, unchanged", shortURL(typ), resp.GetVersionInfo())
		}
		got[typ] = sotwResources(t, resp)["web"]
		c.ack(resp)
	}
	checkPolicySent(t, got)
	c.barrier(eds)

	pols.set("web", nil)
	for _, typ := range types {
		resp := c.recvType(typ)
		if resp.GetVersionInfo() != before[typ].GetVersionInfo() {
			t.Errorf("%s version without the policy = %s, want %s (before it)", shortURL(typ), resp.GetVersionInfo(), before[typ].GetVersionInfo())
		}
		if want, got := sotwResources(t, before[typ])["web"], sotwResources(t, resp)["web"]; !proto.Equal(got, want) {
			t.Errorf("%s without the policy differs from before it:\ngot  %v\nwant %v", shortURL(typ), got, want)
		}
		c.ack(resp)
	}
	c.barrier(eds)
}

// checkPolicySent checks that e2ePolicy is in the Listener, route and
// Cluster of got (by type).
func checkPolicySent(t *testing.T, got map[string]proto.Message) {
	t.Helper()
	cl := got[cds].(*v3clusterpb.Cluster)
	if cl.GetOutlierDetection().GetEnforcingFailurePercentage().GetValue() != 100 || cl.GetOutlierDetection().GetEnforcingSuccessRate() == nil {
		t.Errorf("outlier_detection = %v, want failure-percentage ejection and enforcing_success_rate 0", cl.GetOutlierDetection())
	}
	if th := cl.GetCircuitBreakers().GetThresholds(); len(th) != 1 || th[0].GetMaxRequests().GetValue() != 100 {
		t.Errorf("circuit_breakers = %v, want one threshold of max_requests 100", cl.GetCircuitBreakers())
	}
	rh := &v3ringhashpb.RingHash{}
	if err := cl.GetLoadBalancingPolicy().GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(rh); err != nil {
		t.Errorf("load_balancing_policy entry 1 is not a RingHash: %v", err)
	}
	rc := got[rds].(*v3routepb.RouteConfiguration)
	routes := rc.GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 2 || routes[0].GetTypedPerFilterConfig()["envoy.filters.http.fault"] == nil {
		t.Fatalf("routes = %v, want the fault-gated route, then the default", routes)
	}
	for _, r := range routes {
		a := r.GetRoute()
		if a.GetRetryPolicy().GetRetryOn() != "unavailable" || a.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax().AsDuration() != 5*time.Second ||
			a.GetHashPolicy()[0].GetHeader().GetHeaderName() != "x-user" {
			t.Errorf("route action = %v, want retry, max_stream_duration and the hash policy", a)
		}
	}
	hcm := &v3hcmpb.HttpConnectionManager{}
	if err := got[lds].(*v3listenerpb.Listener).GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
	}
	if want := []string{"envoy.filters.http.fault", "envoy.filters.http.router"}; !slices.Equal(names, want) {
		t.Errorf("http_filters = %v, want %v", names, want)
	}
}

// TestPolicyFaultReachesGRPC: a real grpc-go client follows its
// service's policy as it changes, without a restart: with a fault gated
// on x-chaos, its RPCs that carry the header fail with the fault's code
// and the others pass; with the policy removed, all pass again.
func TestPolicyFaultReachesGRPC(t *testing.T) {
	store := registry.NewStore()
	store.MarkSynced()
	b := startBackend(t, "zone-a")
	if _, err := store.Apply(registry.Upsert("web", b.endpoint("web-1"))); err != nil {
		t.Fatal(err)
	}
	pols := newFakePolicies()
	s := xdstest.Start(t, xds.Config{Store: store, Policies: pols})
	conn := dialXDS(t, s.Addr, "web", "zone-a", "client-1")
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chaos := metadata.AppendToOutgoingContext(ctx, "x-chaos", "1")
	check := func(ctx context.Context) codes.Code {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return status.Code(err)
	}
	until := func(what string, want codes.Code) {
		t.Helper()
		for check(chaos) != want {
			if ctx.Err() != nil {
				t.Fatalf("%s: RPCs with x-chaos never ended %v", what, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got := check(chaos); got != codes.OK {
		t.Fatalf("before a policy: RPC with x-chaos = %v, want OK", got)
	}

	pols.set("web", e2ePolicy())
	until("policy set", codes.ResourceExhausted)
	for range 20 {
		if got := check(ctx); got != codes.OK {
			t.Fatalf("with the fault: RPC without x-chaos = %v, want OK", got)
		}
		if got := check(chaos); got != codes.ResourceExhausted {
			t.Fatalf("with the fault: RPC with x-chaos = %v, want ResourceExhausted", got)
		}
	}

	pols.set("web", nil)
	until("policy removed", codes.OK)
}

// TestPolicyInvalidKeepsLast: a policy whose route a client would reject
// (the config's parser never gives one: this is a bug's path) is logged
// and counted, and the streams keep the last valid resources; a stream
// that comes then gets those too.
func TestPolicyInvalidKeepsLast(t *testing.T) {
	pols := newFakePolicies()
	pols.set("web", e2ePolicy())
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": 1}), xds.Config{Policies: pols})
	c := newSotwClient(t, srv.conn)
	valid := map[string]string{}
	for _, typ := range []string{lds, rds, cds} {
		c.subscribe(typ, "web")
		resp := c.recvType(typ)
		valid[typ] = resp.GetVersionInfo()
		c.ack(resp)
	}

	bad := e2ePolicy()
	bad.Retry.NumRetries = 9 // more than 4: refused
	pols.set("web", bad)
	srv.waitMetric(t, 1, "spillway_xds_invalid_resources_total", "type", "RDS")
	c.barrier(eds) // the Listener and Cluster did not change: nothing came

	fresh := newSotwClient(t, srv.conn)
	fresh.subscribe(rds, "web")
	if got := fresh.recvType(rds).GetVersionInfo(); got != valid[rds] {
		t.Errorf("RDS version for a new stream = %s, want the last valid %s", got, valid[rds])
	}
}

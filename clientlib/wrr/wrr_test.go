package wrr_test

import (
	"context"
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/spillway/spillway/clientlib/wrr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is a real gRPC server that counts the RPCs it serves.
type backend struct {
	addr  string
	calls atomic.Int64
	stop  func()
}

func startBackend(t *testing.T) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	b.stop = srv.Stop
	t.Cleanup(srv.Stop)
	return b
}

func endpoint(b *backend, w uint32) resolver.Endpoint {
	return weight.Set(resolver.Endpoint{Addresses: []resolver.Address{{Addr: b.addr}}}, weight.EndpointInfo{Weight: w})
}

// dial connects through a manual resolver, with spillway.wrr chosen by
// service config.
func dial(t *testing.T, eps ...resolver.Endpoint) (*grpc.ClientConn, *manual.Resolver) {
	t.Helper()
	r := manual.NewBuilderWithScheme("wrrtest")
	r.InitialState(resolver.State{Endpoints: eps})
	conn, err := grpc.NewClient(r.Scheme()+":///svc",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"`+wrr.Name+`": {}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, r
}

// call makes n RPCs, one at a time.
func call(t *testing.T, conn *grpc.ClientConn, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	for i := range n {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}
}

// warm makes RPCs until every backend has served one, so that every
// endpoint is READY in the picker, then zeroes the counters.
func warm(t *testing.T, conn *grpc.ClientConn, bs ...*backend) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		all := true
		for _, b := range bs {
			all = all && b.calls.Load() > 0
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not every backend served an RPC within 20s")
		}
		call(t, conn, 1)
	}
	for _, b := range bs {
		b.calls.Store(0)
	}
}

// checkShares fails unless backend i served want[i] of the n RPCs within
// 5% of that (relative).
func checkShares(t *testing.T, bs []*backend, want []float64, n int) {
	t.Helper()
	for i, b := range bs {
		got := float64(b.calls.Load()) / float64(n)
		t.Logf("backend %d: %d of %d RPCs (%.4f, want %.4f)", i, b.calls.Load(), n, got, want[i])
		if got < want[i]*0.95 || got > want[i]*1.05 {
			t.Errorf("backend %d share = %.4f, want %.4f ± 5%%", i, got, want[i])
		}
	}
}

func TestRegistered(t *testing.T) {
	if balancer.Get(wrr.Name) == nil {
		t.Fatalf("balancer %q is not registered", wrr.Name)
	}
	if got, want := wrr.TypeURL, "type.googleapis.com/spillway.wrr"; got != want {
		t.Errorf("TypeURL = %q, want %q", got, want)
	}
}

func TestParseConfig(t *testing.T) {
	p := balancer.Get(wrr.Name).(balancer.ConfigParser)
	for _, tt := range []struct {
		name, js string
		ok       bool
	}{
		{"empty_object", `{}`, true},
		{"null", `null`, true}, // grpc-go's JSON for a TypedStruct without value
		{"unknown_field_ignored", `{"slowStart": "30s"}`, true},
		{"array", `[]`, false},
		{"string", `"wrr"`, false},
		{"garbage", `{`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.ParseConfig(json.RawMessage(tt.js))
			if (err == nil) != tt.ok {
				t.Errorf("ParseConfig(%s) error = %v, want ok %v", tt.js, err, tt.ok)
			}
		})
	}
}

// TestWeightedShares: endpoint weights 1:2:4 give traffic 1:2:4.
func TestWeightedShares(t *testing.T) {
	bs := []*backend{startBackend(t), startBackend(t), startBackend(t)}
	conn, _ := dial(t, endpoint(bs[0], 1), endpoint(bs[1], 2), endpoint(bs[2], 4))
	warm(t, conn, bs...)
	const n = 7000
	call(t, conn, n)
	checkShares(t, bs, []float64{1.0 / 7, 2.0 / 7, 4.0 / 7}, n)
}

// TestWeightUpdate: new weights from the resolver take effect, and a
// missing weight counts as 1.
func TestWeightUpdate(t *testing.T) {
	bs := []*backend{startBackend(t), startBackend(t)}
	conn, r := dial(t, endpoint(bs[0], 1), endpoint(bs[1], 1))
	warm(t, conn, bs...)
	r.UpdateState(resolver.State{Endpoints: []resolver.Endpoint{
		{Addresses: []resolver.Address{{Addr: bs[0].addr}}}, // no weight: 1
		endpoint(bs[1], 3),
	}})
	// The update is applied asynchronously: wait until the heavier
	// endpoint clearly leads, then measure.
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, b := range bs {
			b.calls.Store(0)
		}
		call(t, conn, 40)
		if bs[1].calls.Load() >= 27 { // 30 ± the phase; equal weights give 20
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("weights 1:3 not applied after 10s: last 40 RPCs split %d/%d", bs[0].calls.Load(), bs[1].calls.Load())
		}
	}
	for _, b := range bs {
		b.calls.Store(0)
	}
	const n = 4000
	call(t, conn, n)
	checkShares(t, bs, []float64{0.25, 0.75}, n)
}

// TestOnlyReadyEndpoints: an endpoint that goes away stops getting picks;
// the others keep their relative weights and no RPC fails.
func TestOnlyReadyEndpoints(t *testing.T) {
	bs := []*backend{startBackend(t), startBackend(t), startBackend(t)}
	conn, _ := dial(t, endpoint(bs[0], 1), endpoint(bs[1], 2), endpoint(bs[2], 4))
	warm(t, conn, bs...)
	bs[2].stop()
	// RPCs racing the stop may fail; wait (bounded) until the picker has
	// dropped the stopped endpoint, i.e. RPCs succeed again.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	for {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("RPCs still failing 20s after an endpoint stopped")
		}
	}
	bs[0].calls.Store(0)
	bs[1].calls.Store(0)
	const n = 3000
	call(t, conn, n)
	checkShares(t, bs[:2], []float64{1.0 / 3, 2.0 / 3}, n)
}

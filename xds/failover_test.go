package xds_test

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/registry"
)

// stoppable is a backend that can be stopped and started again on the
// same address.
type stoppable struct {
	addr  netip.AddrPort
	calls atomic.Int64
	srv   *grpc.Server
}

func (b *stoppable) start(t *testing.T) {
	t.Helper()
	addr := "127.0.0.1:0"
	if b.addr.IsValid() {
		addr = b.addr.String()
	}
	var lis net.Listener
	var err error
	for range 50 { // the port of a stopped server may take a moment to free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	b.addr = netip.MustParseAddrPort(lis.Addr().String())
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(b.srv, health.NewServer())
	srv := b.srv
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
}

// TestGRPCRegionFailover: a real grpc-go client in region r1 sends to r1
// (priority 0) only; with every r1 backend stopped it fails over to r2
// (priority 1), and back to r1 once they serve again. Failed RPCs during
// the switch are counted and logged (grpc-go retries nothing by default:
// an RPC already on a connection that closes fails).
func TestGRPCRegionFailover(t *testing.T) {
	store := registry.NewStore()
	store.MarkSynced()
	r1 := []*stoppable{{}, {}}
	r2 := &stoppable{}
	add := func(id, region string, b *stoppable) {
		b.start(t)
		if _, err := store.Apply(registry.Upsert("web", &registry.Endpoint{
			ID: id, Address: b.addr.Addr(),
			Ports:    []registry.Port{{Name: "grpc", Number: b.addr.Port(), Protocol: registry.TCP}},
			Locality: registry.Locality{Region: region, Zone: region + "-a"},
			Health:   registry.Healthy, Weight: 100, Source: registry.SourceStatic,
		})); err != nil {
			t.Fatal(err)
		}
	}
	add("r1-0", "r1", r1[0])
	add("r1-1", "r1", r1[1])
	add("r2-0", "r2", r2)
	addr, _ := startXDS(t, store)
	conn := dialXDS(t, addr, "web", "r1-a", "client-1") // region r1
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(wait bool) error {
		c, done := context.WithTimeout(ctx, 2*time.Second)
		defer done()
		_, err := hc.Check(c, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(wait))
		return err
	}
	for i := range 100 {
		if err := call(true); err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}
	if n := r2.calls.Load(); n != 0 {
		t.Fatalf("r2 got %d of 100 calls while r1 was up, want 0 (r1 is priority 0)", n)
	}

	for _, b := range r1 {
		b.srv.Stop()
	}
	failed := 0
	before := r2.calls.Load()
	for range 200 {
		if err := call(false); err != nil {
			failed++
		}
	}
	t.Logf("r1 stopped: %d of 200 RPCs failed during the switch; r2 served %d", failed, r2.calls.Load()-before)
	if got := r2.calls.Load() - before; got < 150 {
		t.Errorf("r2 served %d of 200 RPCs after r1 stopped, want at least 150", got)
	}

	for _, b := range r1 {
		b.start(t)
	}
	// Back on r1: wait (bounded) until an RPC lands on r1 again, then all do.
	back := false
	for range 300 {
		before := r1[0].calls.Load() + r1[1].calls.Load()
		if err := call(true); err != nil {
			t.Fatalf("after restart: %v", err)
		}
		if r1[0].calls.Load()+r1[1].calls.Load() > before {
			back = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !back {
		t.Fatal("traffic did not return to r1 after its backends restarted")
	}
	before = r2.calls.Load()
	for i := range 100 {
		if err := call(true); err != nil {
			t.Fatalf("RPC %d after failback: %v", i, err)
		}
	}
	if n := r2.calls.Load() - before; n != 0 {
		t.Errorf("r2 got %d of 100 calls after r1 recovered, want 0", n)
	}
}

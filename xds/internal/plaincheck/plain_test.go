package plaincheck_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wrrName is clientlib/wrr's balancer name, spelled out: importing the
// package would register the balancer in this binary.
const wrrName = "spillway.wrr"

// backend is a real gRPC server that counts the RPCs it serves.
type backend struct {
	addr  netip.AddrPort
	calls atomic.Int64
}

func startBackend(t *testing.T) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{addr: netip.MustParseAddrPort(lis.Addr().String())}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

// startXDS runs spillway's xDS server on store, on loopback, with
// locality weights from weights (nil: healthy endpoint counts).
func startXDS(t *testing.T, store *registry.Store, weights xds.LocalityWeights) string {
	t.Helper()
	return xdstest.Start(t, xds.Config{Store: store, Weights: weights}).Addr // Debounce 10 ms, LRSInterval 1 s
}

// endpoint is backend b of service web in zone, with weight w.
func (b *backend) endpoint(id, zone string, w uint32) *registry.Endpoint {
	return &registry.Endpoint{
		ID: id, Address: b.addr.Addr(),
		Ports:    []registry.Port{{Name: "grpc", Number: b.addr.Port(), Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "r1", Zone: zone},
		Health:   registry.Healthy, Weight: w, Source: registry.SourceStatic,
	}
}

// dialPlain dials xds:///web from zone-a with grpc-go's xDS resolver.
func dialPlain(t *testing.T, server string) *grpc.ClientConn {
	t.Helper()
	return xdstest.Dial(t, server, "web", xdstest.Node{ID: "plain-client", Cluster: "checkout", Region: "r1", Zone: "zone-a"})
}

// measure warms conn up until every backend has served an RPC (so every
// endpoint is READY), then makes n RPCs, one at a time, and returns each
// backend's share of them. Every RPC must succeed.
func measure(t *testing.T, conn *grpc.ClientConn, bs []*backend, n int) []float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	call := func() {
		t.Helper()
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("RPC: %v", err)
		}
	}
	for slices.ContainsFunc(bs, func(b *backend) bool { return b.calls.Load() == 0 }) {
		call()
	}
	for _, b := range bs {
		b.calls.Store(0)
	}
	for range n {
		call()
	}
	shares := make([]float64, len(bs))
	for i, b := range bs {
		shares[i] = float64(b.calls.Load()) / float64(n)
	}
	return shares
}

// checkShares fails unless got[i] is within tol (relative) of want[i].
func checkShares(t *testing.T, got, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		t.Logf("backend %d: share %.4f, want %.4f", i, got[i], want[i])
		if got[i] < want[i]*(1-tol) || got[i] > want[i]*(1+tol) {
			t.Errorf("backend %d share = %.4f, want %.4f ± %.0f%% (relative)", i, got[i], want[i], tol*100)
		}
	}
}

func checkPlain(t *testing.T) {
	t.Helper()
	if balancer.Get(wrrName) != nil {
		t.Fatalf("%s is registered in this binary; the test needs a plain client", wrrName)
	}
}

// TestPlainClientRoundRobin is acceptance 4, second half: on the Cluster
// that names spillway.wrr, a grpc-go client without it falls back to
// round_robin: every RPC succeeds and backends weighted 1:2:4 in one zone
// get equal shares (each within 5% of 1/3, relative).
func TestPlainClientRoundRobin(t *testing.T) {
	checkPlain(t)
	store := registry.NewStore()
	store.MarkSynced()
	var bs []*backend
	for i, w := range []uint32{1, 2, 4} {
		b := startBackend(t)
		bs = append(bs, b)
		if _, err := store.Apply(registry.Upsert("web", b.endpoint(fmt.Sprintf("w%d", i), "zone-a", w))); err != nil {
			t.Fatal(err)
		}
	}
	conn := dialPlain(t, startXDS(t, store, nil))
	checkShares(t, measure(t, conn, bs, 3000), []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, 0.05)
}

// TestPlainClientKeepsLocalityWeights: the fallback is round_robin inside
// wrr_locality, not a bare round_robin, so a plain client still splits
// traffic between zones by locality weight (3:1 here; a bare round_robin
// would give 1:1). grpc-go picks localities at random: the bound is 10%
// relative, over 5σ for the smaller share at 8,000 RPCs.
func TestPlainClientKeepsLocalityWeights(t *testing.T) {
	checkPlain(t)
	store := registry.NewStore()
	store.MarkSynced()
	var bs []*backend
	for i, zone := range []string{"zone-a", "zone-b"} {
		b := startBackend(t)
		bs = append(bs, b)
		if _, err := store.Apply(registry.Upsert("web", b.endpoint(fmt.Sprintf("e%d", i), zone, 100))); err != nil {
			t.Fatal(err)
		}
	}
	weights := func(_ *registry.Service, _ string, locs []xds.Locality) []uint32 {
		out := make([]uint32, len(locs))
		for i, l := range locs {
			out[i] = map[string]uint32{"zone-a": 3, "zone-b": 1}[l.Zone]
		}
		return out
	}
	conn := dialPlain(t, startXDS(t, store, weights))
	checkShares(t, measure(t, conn, bs, 8000), []float64{0.75, 0.25}, 0.10)
}

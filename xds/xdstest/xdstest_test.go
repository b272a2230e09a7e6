package xdstest_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startBackend is a gRPC health server on loopback.
func startBackend(t *testing.T) netip.AddrPort {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return netip.MustParseAddrPort(lis.Addr().String())
}

// endpoint is backend b with port "other" first (unreachable) and b's
// port named port.
func endpoint(b netip.AddrPort, port string) *registry.Endpoint {
	return &registry.Endpoint{
		ID: "b0", Address: b.Addr(),
		Ports:    []registry.Port{{Name: "other", Number: 1, Protocol: registry.TCP}, {Name: port, Number: b.Port(), Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "r1", Zone: "zone-a"},
		Health:   registry.Healthy, Weight: 100, Source: registry.SourceStatic,
	}
}

// check makes one health RPC on conn, waiting for it to be ready.
func check(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("health check: %v", err)
	}
}

// TestStartDial: a real grpc-go xDS client dialed with Dial reaches a
// backend registered after the server started (Start runs the server, so
// the change is pushed), on the port named by the Config.
func TestStartDial(t *testing.T) {
	s := xdstest.Start(t, xds.Config{PortName: "xds"})
	conn := xdstest.Dial(t, s.Addr, "web", xdstest.Node{ID: "client-1", Cluster: "checkout", Region: "r1", Zone: "zone-a"})
	b := startBackend(t)
	if _, err := s.Store.Apply(registry.Upsert("web", endpoint(b, "xds"))); err != nil {
		t.Fatal(err)
	}
	check(t, conn)
	if got := s.XDS.ClientServices(); len(got) != 1 || got[0] != "checkout" {
		t.Errorf("ClientServices() = %v, want [checkout]", got)
	}
}

// TestWithoutRunWithServices: a server not Run still answers what its
// streams ask (here a registry filled before Start); services of
// WithServices share its port and are given the xds.Server.
func TestWithoutRunWithServices(t *testing.T) {
	store := registry.NewStore()
	store.MarkSynced()
	b := startBackend(t)
	if _, err := store.Apply(registry.Upsert("web", endpoint(b, "grpc"))); err != nil {
		t.Fatal(err)
	}
	var got *xds.Server
	s := xdstest.Start(t, xds.Config{Store: store}, xdstest.WithoutRun(), xdstest.WithServices(func(g grpc.ServiceRegistrar, x *xds.Server) {
		got = x
		healthpb.RegisterHealthServer(g, health.NewServer())
	}))
	if got != s.XDS || s.Store != store {
		t.Errorf("WithServices got xds.Server %p and Store is %p, want the server started, %p, and the store given, %p", got, s.Store, s.XDS, store)
	}
	check(t, xdstest.Dial(t, s.Addr, "web", xdstest.Node{ID: "client-1", Zone: "zone-a"}))
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check(t, conn) // the health service on the xDS server's port
}

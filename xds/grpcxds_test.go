package xds_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/xdstest"
)

// backend is a real gRPC server that counts the RPCs it serves.
type backend struct {
	addr  netip.AddrPort
	zone  string
	calls atomic.Int64
}

func startBackend(t *testing.T, zone string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{addr: netip.MustParseAddrPort(lis.Addr().String()), zone: zone}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

func (b *backend) endpoint(id string) *registry.Endpoint {
	return &registry.Endpoint{
		ID: id, Address: b.addr.Addr(),
		Ports:    []registry.Port{{Name: "grpc", Number: b.addr.Port(), Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "r1", Zone: b.zone},
		Health:   registry.Healthy, Weight: 100, Source: registry.SourceStatic,
	}
}

// startXDS runs the xDS server on loopback and returns its address.
func startXDS(t *testing.T, store *registry.Store) (string, *xds.Server) {
	t.Helper()
	s := xdstest.Start(t, xds.Config{Store: store}) // Debounce 10 ms, LRSInterval 1 s
	return s.Addr, s.XDS
}

// dialXDS dials xds:///service with the real grpc-go xDS resolver and a
// bootstrap placing the client in zone.
func dialXDS(t *testing.T, server, service, zone, node string) *grpc.ClientConn {
	t.Helper()
	return xdstest.Dial(t, server, service, xdstest.Node{ID: node, Cluster: "checkout", Region: "r1", Zone: zone})
}

// TestGRPCClientSmoke: the real grpc-go xDS client dials a service and
// reaches its endpoints in every zone, with the endpoints' ids as EDS
// hostnames (the default) and without them (Config.OmitHostnames).
func TestGRPCClientSmoke(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  xds.Config
	}{
		{"hostnames", xds.Config{}},
		{"no_hostnames", xds.Config{OmitHostnames: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := registry.NewStore()
			store.MarkSynced()
			var backends []*backend
			for i, z := range []string{"zone-a", "zone-b", "zone-c"} {
				b := startBackend(t, z)
				backends = append(backends, b)
				if _, err := store.Apply(registry.Upsert("web", b.endpoint(fmt.Sprintf("b%d", i)))); err != nil {
					t.Fatal(err)
				}
			}
			cfg := tc.cfg
			cfg.Store = store
			s := xdstest.Start(t, cfg) // Debounce 10 ms, LRSInterval 1 s
			conn := dialXDS(t, s.Addr, "web", "zone-a", "client-1")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			hc := healthpb.NewHealthClient(conn)
			for i := range 300 {
				if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
					t.Fatalf("RPC %d: %v", i, err)
				}
			}
			for _, b := range backends {
				t.Logf("%s: %d calls", b.zone, b.calls.Load())
				if b.calls.Load() == 0 {
					t.Errorf("backend in %s got no calls", b.zone)
				}
			}
		})
	}
}

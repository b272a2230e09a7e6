package utilization

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/registryapi"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore"
)

// startRegistry runs the real registry API (VM leases on memory storage,
// a utilization table) on 127.0.0.1.
func startRegistry(t *testing.T) (*load.UtilizationTable, registryv1.RegistryClient, string) {
	t.Helper()
	util, _, client, addr := startRegistryFull(t)
	return util, client, addr
}

func startRegistryStore(t *testing.T) (*load.UtilizationTable, *registry.Store, string) {
	t.Helper()
	util, store, _, addr := startRegistryFull(t)
	return util, store, addr
}

func startRegistryFull(t *testing.T) (*load.UtilizationTable, *registry.Store, registryv1.RegistryClient, string) {
	t.Helper()
	store := registry.NewStore()
	lm, err := lease.New(lease.Config{Store: store, Storage: systemstore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	util := load.NewUtilizationTable(store, nil)
	api, err := registryapi.New(registryapi.Config{Store: store, Leases: lm, Utilization: util})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterGRPC(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return util, store, registryv1.NewRegistryClient(conn), lis.Addr().String()
}

// TestReporterToRegistry: a real gRPC backend with the helper installed
// holds 8 of its limit of 16 RPCs in flight and registers as a VM; its
// Reporter with the lease streams to a real registry API and the table
// holds the numbers (a second Reporter without the lease is refused and
// stores nothing: the table has one entry, with the lease holder's
// numbers).
func TestReporterToRegistry(t *testing.T) {
	util, reg, addr := startRegistry(t)
	u := mustNew(t, Config{Limit: 16, Sampler: ProcessCPU()})
	h, conn := startBackend(t, u, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 8 {
		go func() { _, _ = newHealthClient(conn).Check(ctx, nil) }()
	}
	waitFor(t, "8 RPCs in flight", func() bool { return u.InFlight() == 8 })

	resp, err := reg.Register(ctx, &registryv1.RegisterRequest{Service: "search", Endpoint: &registryv1.Endpoint{
		Id: "search-1", Address: "127.0.0.1", Ports: []*registryv1.Port{{Name: "grpc", Number: 9000}}}})
	if err != nil {
		t.Fatal(err)
	}
	// A first Reporter with no lease is refused (VM endpoint) and retries;
	// the second, with the lease, is stored.
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	for _, leaseID := range []string{"", resp.LeaseId} {
		r := &Reporter{Target: addr, Service: "search", EndpointID: "search-1", LeaseID: leaseID, Interval: 100 * time.Millisecond, Source: u}
		go func() { done <- r.Run(rctx) }()
	}
	var got []load.EndpointUtilization
	waitFor(t, "the report in the table", func() bool {
		got = util.Utilizations("search", time.Now())
		return len(got) == 1
	})
	if e := got[0]; e.ID != "search-1" || e.InFlight != 8 || e.Limit != 16 || e.Utilization < 0.5 || e.Interval != 100*time.Millisecond || e.CPU < 0 || e.CPU > 1 {
		t.Errorf("table entry = %+v, want search-1 with 8 of 16 in flight, utilization >= 0.5, interval 100ms", e)
	}
	close(h.release)
	waitFor(t, "in-flight 0 reported", func() bool {
		got = util.Utilizations("search", time.Now())
		return len(got) == 1 && got[0].InFlight == 0
	})
	rcancel()
	for range 2 {
		if err := <-done; err != context.Canceled {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}
}

// TestReporterUnknownEndpointThenRegistered: reports for an endpoint the
// registry does not hold yet are refused (NotFound ends the stream); once
// the endpoint appears (here a Kubernetes one, which has no lease) the
// Reporter's reconnect delivers them.
func TestReporterUnknownEndpointThenRegistered(t *testing.T) {
	util, store, addr := startRegistryStore(t)
	u := CPUOnly(ProcessCPU())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	r := &Reporter{Target: addr, Service: "batch", EndpointID: "batch-1", Interval: 100 * time.Millisecond, Source: u}
	go func() { done <- r.Run(ctx) }()
	if _, err := store.Apply(registry.Upsert("batch", &registry.Endpoint{ID: "batch-1", Address: netip.MustParseAddr("10.0.0.1"),
		Ports: []registry.Port{{Name: "grpc", Number: 9001, Protocol: registry.TCP}}, Health: registry.Healthy, Source: registry.SourceKubernetes})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the report in the table", func() bool { return len(util.Utilizations("batch", time.Now())) == 1 })
	if e := util.Utilizations("batch", time.Now())[0]; e.Limit != 0 || e.InFlight != 0 || e.Utilization != e.CPU {
		t.Errorf("CPU-only entry = %+v, want limit 0 and utilization = cpu", e)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

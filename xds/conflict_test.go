package xds_test

// Issue 10, point 3: one endpoint per address and port, seen by real
// grpc-go clients, and resources that fail the client checks are never
// sent.

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

// TestAddressConflictRealClients: two grpc-go xDS clients make RPCs
// without pause while second sources register endpoints at address:ports
// that VM endpoints already have (a static entry, a draining pod, a
// healthy pod), and while the VM endpoint loses its health and the static
// entry takes over. No RPC fails, no client NACKs, the conflicts show in
// the registry's metrics, and the clients still take later changes (a new
// backend gets traffic), which a NACKed EDS would have stopped.
func TestAddressConflictRealClients(t *testing.T) {
	store := registry.NewStore()
	store.MarkSynced()
	col := registry.NewCollector(store)
	zones := []string{"zone-a", "zone-b", "zone-a"}
	var backends []*backend
	for i, z := range zones {
		b := startBackend(t, z)
		backends = append(backends, b)
		e := b.endpoint(fmt.Sprintf("vm-%d", i))
		e.Source = registry.SourceVM
		if _, err := store.Apply(registry.Upsert("web", e)); err != nil {
			t.Fatal(err)
		}
	}
	srv := startRawXDS(t, store, xds.Config{})
	if err := srv.reg.Register(col); err != nil {
		t.Fatal(err)
	}

	// Load: every client makes RPCs one after another until stop, at most
	// maxRPCs each and for at most two minutes.
	const maxRPCs = 20000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i, z := range []string{"zone-a", "zone-b"} {
		conn := dialXDS(t, srv.addr, "web", z, fmt.Sprintf("client-%d", i))
		hc := healthpb.NewHealthClient(conn)
		wg.Go(func() {
			for range maxRPCs {
				select {
				case <-stop:
					return
				default:
				}
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
				rcancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("client in %s: %v", z, err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	calls := func() int64 { return ok.Load() + failed.Load() }
	// progress waits until the clients made n more RPCs.
	progress := func(what string, n int64) {
		t.Helper()
		start := calls()
		waitFor(t, what, func() bool { return calls() >= start+n })
	}
	progress("first RPCs", 200)

	at := func(id string, b *backend, h registry.Health, src registry.Source) *registry.Endpoint {
		e := b.endpoint(id)
		e.Health, e.Source, e.Registered = h, src, time.Now()
		return e
	}
	steps := []struct {
		what      string
		ops       []registry.Op
		conflicts float64 // endpoints shadowed after the step
	}{
		{"a static entry at vm-0's address", []registry.Op{registry.Upsert("web", at("static-0", backends[0], registry.Healthy, registry.SourceStatic))}, 1},
		{"a draining pod at vm-1's address", []registry.Op{registry.Upsert("web", at("pod-old", backends[1], registry.Draining, registry.SourceKubernetes))}, 2},
		{"a healthy pod at vm-2's address, which wins", []registry.Op{registry.Upsert("web", at("pod-new", backends[2], registry.Healthy, registry.SourceKubernetes))}, 3},
		{"vm-0 unhealthy: static-0 takes over", []registry.Op{registry.Upsert("web", at("vm-0", backends[0], registry.Unhealthy, registry.SourceVM))}, 3},
	}
	for _, s := range steps {
		srv.apply(t, s.ops...)
		srv.waitMetric(t, s.conflicts, "spillway_registry_address_conflicts")
		if got := srv.metric(t, "spillway_registry_address_conflicts"); got != s.conflicts {
			t.Errorf("%s: spillway_registry_address_conflicts = %v, want %v", s.what, got, s.conflicts)
		}
		progress(s.what, 300)
	}
	// Each new conflict was counted once, by the pair of sources.
	for _, c := range []struct {
		served, shadowed string
		want             float64
	}{
		{"vm", "static", 1}, {"vm", "kubernetes", 1}, {"kubernetes", "vm", 1}, {"static", "vm", 1},
	} {
		if got := srv.metric(t, "spillway_registry_address_conflicts_total", "served_source", c.served, "shadowed_source", c.shadowed); got != c.want {
			t.Errorf("conflicts_total{served=%s,shadowed=%s} = %v, want %v", c.served, c.shadowed, got, c.want)
		}
	}

	// Later changes still reach the clients: a new backend gets traffic.
	late := startBackend(t, "zone-b")
	srv.apply(t, registry.Upsert("web", at("vm-late", late, registry.Healthy, registry.SourceVM)))
	waitFor(t, "the late backend gets RPCs", func() bool { return late.calls.Load() > 0 })
	progress("after the late backend", 300)

	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close
	t.Logf("%d RPCs succeeded, %d failed; backends served %d %d %d, late %d", ok.Load(), failed.Load(),
		backends[0].calls.Load(), backends[1].calls.Load(), backends[2].calls.Load(), late.calls.Load())
	if failed.Load() != 0 {
		t.Errorf("%d RPCs failed, want 0", failed.Load())
	}
	if n := srv.metric(t, "spillway_xds_nacks_total"); n != 0 {
		t.Errorf("clients NACKed %v responses, want 0", n)
	}
	// What EDS carries: each address once.
	c := newSotwClient(t, srv.conn)
	c.subscribe(eds, "web")
	cla := sotwResources(t, c.recvType(eds))["web"].(*v3endpointpb.ClusterLoadAssignment)
	seen := map[string]string{}
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			k := netip.AddrPortFrom(netip.MustParseAddr(sa.GetAddress()), uint16(sa.GetPortValue())).String()
			if o, dup := seen[k]; dup {
				t.Errorf("EDS lists %s twice: %s and %s", k, o, e.GetEndpoint().GetHostname())
			}
			seen[k] = e.GetEndpoint().GetHostname()
		}
	}
	want := map[string]string{
		backends[0].addr.String(): "static-0", backends[1].addr.String(): "vm-1",
		backends[2].addr.String(): "pod-new", late.addr.String(): "vm-late",
	}
	for k, id := range want {
		if seen[k] != id {
			t.Errorf("EDS serves %s as %q, want %q", k, seen[k], id)
		}
	}
}

// TestInvalidResourceNotSent: locality weights that sum over what grpc-go
// accepts (a Weights function gone wrong) fail the check: the EDS
// resource is not sent, the failure is counted, and the client keeps
// what it had.
func TestInvalidResourceNotSent(t *testing.T) {
	var huge atomic.Bool
	weights := func(_ *registry.Service, _ string, locs []xds.Locality) []uint32 {
		out := make([]uint32, len(locs))
		for i := range out {
			out[i] = 1
			if huge.Load() {
				out[i] = math.MaxUint32
			}
		}
		return out
	}
	store := registry.NewStore()
	store.MarkSynced()
	for i, z := range []string{"zone-a", "zone-b"} {
		e := rawEndpoint(i+1, 0)
		e.Locality.Zone = z
		if _, err := store.Apply(registry.Upsert("web", e)); err != nil {
			t.Fatal(err)
		}
	}
	srv := startRawXDS(t, store, xds.Config{Weights: weights})
	c := newSotwClient(t, srv.conn)
	c.subscribe(eds, "web")
	first := c.recvType(eds)
	if n := endpointCount(sotwResources(t, first)["web"]); n != 2 {
		t.Fatalf("first EDS has %d endpoints, want 2", n)
	}
	c.ack(first)

	huge.Store(true)
	e := rawEndpoint(3, 0)
	srv.apply(t, registry.Upsert("web", e))
	srv.waitMetric(t, 1, "spillway_xds_invalid_resources_total", "type", "EDS")
	// Nothing new is sent: the barrier's answer comes first.
	c.barrier(lds)
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// TestAddressConflictVMAndStatic (issue 10, point 3): two sources claim
// one address:port. VM agents register backends through the registry API;
// the static file lists one of their addresses too, and lists a backend
// that a VM agent then registers. Real grpc-go xDS clients in two zones
// make RPCs the whole time: none fails, none NACKs, the conflicts show in
// spillway_registry_address_conflicts, and DNS lists each address once.
func TestAddressConflictVMAndStatic(t *testing.T) {
	lookTool(t, "dig")
	file := filepath.Join(t.TempDir(), "services.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file+".tmp", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	a := startXDSBackend(t, "vm-a", "zone-a")
	b := startXDSBackend(t, "vm-b", "zone-b")
	c := startXDSBackend(t, "static-c", "zone-b")
	staticEntry := func(be *xdsBackend) string {
		return fmt.Sprintf("      - address: 127.0.0.1\n        ports: [\"grpc=%d\"]\n        zone: %s\n        region: r1\n", be.port, be.zone)
	}
	write("services:\n  - name: " + xdsService + "\n    endpoints:\n" + staticEntry(c))
	s := newServer(t, "--xds-debounce", "20ms", "--lease-ttl", "1h", "--zone-aware=false", "--static-file", file)
	s.start()
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	register := func(be *xdsBackend) {
		t.Helper()
		if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: xdsService, Endpoint: &pb.Endpoint{
			Id: be.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: be.port}},
			Locality: &pb.Locality{Region: "r1", Zone: be.zone},
		}}); err != nil {
			t.Fatalf("register %s: %v", be.id, err)
		}
	}
	register(a)
	register(b)

	// Load, bounded: at most maxRPCs per client, until stop.
	const maxRPCs = 20000
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for _, zone := range []string{"zone-a", "zone-b"} {
		hc := healthpb.NewHealthClient(dialXDSZone(t, s.grpcAddr, xdsService, zone))
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
					t.Errorf("client in %s: %v", zone, err)
					continue
				}
				ok.Add(1)
			}
		})
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	waitCalls := func(what string, n int64) {
		t.Helper()
		start := ok.Load() + failed.Load()
		for deadline := time.Now().Add(xdsWait); ok.Load()+failed.Load() < start+n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: fewer than %d RPCs in %v", what, n, xdsWait)
			}
		}
	}
	waitConflicts := func(what, want string) {
		t.Helper()
		for deadline := time.Now().Add(xdsWait); s.metric("spillway_registry_address_conflicts") != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: spillway_registry_address_conflicts = %q, want %s", what, s.metric("spillway_registry_address_conflicts"), want)
			}
		}
	}
	waitCalls("first RPCs", 200)

	// A VM agent registers at the static entry's address:port.
	register(&xdsBackend{id: "vm-c", zone: c.zone, port: c.port})
	waitConflicts("vm at the static entry's address", "1")
	waitCalls("after the first conflict", 300)

	// The static file now lists vm-a's address:port too.
	write("services:\n  - name: " + xdsService + "\n    endpoints:\n" + staticEntry(c) + staticEntry(a))
	waitConflicts("static entry at vm-a's address", "2")
	waitCalls("after the second conflict", 300)
	halt()

	t.Logf("%d RPCs succeeded, %d failed; served a=%d b=%d c=%d", ok.Load(), failed.Load(), a.total(), b.total(), c.total())
	if failed.Load() != 0 {
		t.Errorf("%d RPCs failed, want 0", failed.Load())
	}
	if a.total() == 0 || b.total() == 0 || c.total() == 0 {
		t.Errorf("a backend got no RPCs: a=%d b=%d c=%d", a.total(), b.total(), c.total())
	}
	for _, m := range []string{
		`spillway_registry_address_conflicts_total{served_source="vm",shadowed_source="static"}`,
	} {
		if got := s.metric(m); got != "2" {
			t.Errorf("%s = %q, want 2", m, got)
		}
	}
	if got := s.metric("spillway_xds_nacks_total"); got != "" && got != "0" {
		t.Errorf("spillway_xds_nacks_total = %s, want none", got)
	}
	if strings.Contains(s.logs.String(), "NACK") {
		t.Errorf("a client rejected a response:\n%s", s.logs)
	}
	if n := strings.Count(s.logs.String(), "endpoint not served"); n != 2 {
		t.Errorf("logged %d address conflicts, want 2:\n%s", n, s.logs)
	}
	// DNS agrees: one SRV record per address:port, the VM's.
	r := askDNS(t, "dig", s.flag("--dns-addr"), dnsQuery{name: "_grpc._tcp." + xdsService + ".spillway.internal.", qtype: "SRV", tcp: true})
	targets := map[string]bool{}
	for _, rr := range r.Answer {
		targets[strings.Fields(rr.String())[len(strings.Fields(rr.String()))-1]] = true
	}
	want := map[string]bool{}
	for _, id := range []string{"vm-a", "vm-b", "vm-c"} {
		want[id+"."+xdsService+".spillway.internal."] = true
	}
	if fmt.Sprint(targets) != fmt.Sprint(want) || len(r.Answer) != 3 {
		t.Errorf("SRV answer %v, want one record each for %v", r.Answer, want)
	}
}

package e2e

import (
	"context"
	"flag"
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
	"github.com/spillway/spillway/xds/xdstest"
)

// subsetFull runs TestSubsetting at the size (200 clients, 40
// endpoints, subsets of 8) instead of CI's (30, 12, 4):
//
//	go test -race -run TestSubsetting -v ./e2e/ -args -subset-full
var subsetFull = flag.Bool("subset-full", false, "run TestSubsetting with 200 grpc-go clients, 40 backends, subsets of 8")

// TestSubsetting (issue 29): real grpc-go xDS clients of one service whose
// config asks for deterministic subsets. Once the planner has given every
// stream its subset, each client is connected to exactly subset_size
// backends, every backend has the same number of client connections
// (max/avg <= 1.05), and equal clients sending round robin load the
// backends evenly (requests max/avg <= 1.10) with no failed RPC.
func TestSubsetting(t *testing.T) {
	m, n, size := 30, 12, 4
	if *subsetFull {
		m, n, size = 200, 40, 8
	}
	dir := subsetConfig(t, size)
	s := newServer(t, "--xds-debounce", "20ms", "--weights-interval", "1s", "--lease-ttl", "1h", "--service-config-dir", dir)
	s.start()
	subsetCheck(t, []*server{s}, []int{m}, n, size, 1.05)

	// What an operator sees: spillwayctl names the client's subset, and
	// the metrics give the size and the balance.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := s.ctl(ctx, "weights", subsetService, "--client", "subset-client-007")
	head := fmt.Sprintf("subsets: deterministic, %d endpoints each; %d client slots", size, m)
	if !strings.Contains(out, head) || !strings.Contains(out, "client subset-client-007 (zone-a, slot ") {
		t.Errorf("spillwayctl weights --client:\n%s\nwant the line %q and the client's subset", out, head)
	}
	line := out[strings.Index(out, "client subset-client-007"):]
	line, _, _ = strings.Cut(line, "\n")
	if got := len(strings.Fields(line[strings.Index(line, "):")+2:])); got != size {
		t.Errorf("the client's subset line %q lists %d endpoints, want %d", line, got, size)
	}
	if got := s.metric(`spillway_subset_size{service="` + subsetService + `"}`); got != fmt.Sprint(size) {
		t.Errorf("spillway_subset_size = %q, want %d", got, size)
	}
	if got := s.metric(`spillway_subset_clients_per_endpoint_max_over_avg{service="` + subsetService + `"}`); got != "1" {
		t.Errorf("spillway_subset_clients_per_endpoint_max_over_avg = %q, want 1 (%d clients x %d over %d)", got, m, size, n)
	}
}

// TestSubsettingMesh (issue 29): two replicas on etcd with mesh-wide
// weights; 4 clients on one, 5 on the other, 12 backends, subsets of 4.
// The service's owner gives subsets over every replica's clients, so the
// 36 connections fall 3 on every backend exactly; two replicas each
// balancing their own clients alone would put 4 on some.
func TestSubsettingMesh(t *testing.T) {
	const size = 4
	dir := subsetConfig(t, size)
	c := newReplicaClusterWith(t, 2, "--xds-debounce", "20ms", "--weights-interval", "1s", "--lrs-interval", "1s",
		"--lease-ttl", "1h", "--mesh-load=true", "--mesh-stale-cycles", "6", "--service-config-dir", dir)
	subsetCheck(t, c.servers, []int{4, 5}, 12, size, 1.0)
}

const subsetService = "subset-svc"

// subsetConfig writes a config directory giving subsetService
// deterministic subsets of size.
func subsetConfig(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("subset_mode: deterministic\nsubset_size: %d\n", size)
	if err := os.WriteFile(filepath.Join(dir, subsetService+".yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// subsetCheck registers n backends through servers[0], connects
// clients[i] grpc-go xDS clients to servers[i], waits until the backends
// hold one connection per (client, subset endpoint) with max/avg at most
// bound, then sends RPCs from every client: none may fail, and requests
// per backend max/avg must be at most 1.10.
func subsetCheck(t *testing.T, servers []*server, clients []int, n, size int, bound float64) {
	t.Helper()
	const service = subsetService
	reg := servers[0].client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var backends []*xdsBackend
	for i := range n {
		b := startXDSBackend(t, fmt.Sprintf("b%02d", i), "zone-a")
		if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: service, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}}); err != nil {
			t.Fatalf("register %s: %v", b.id, err)
		}
		backends = append(backends, b)
	}
	var conns []*grpc.ClientConn
	m := 0
	for si, k := range clients {
		for range k {
			c := xdstest.Dial(t, servers[si].grpcAddr, service, xdstest.Node{ID: fmt.Sprintf("subset-client-%03d", m), Cluster: "caller", Region: "r1", Zone: "zone-a"})
			c.Connect()
			conns = append(conns, c)
			m++
		}
	}
	// round_robin connects to every endpoint it is given: once each
	// client holds its subset, the backends hold m × size connections.
	want := int64(m * size)
	total := func() (int64, int64, int64) {
		var sum, hi, lo int64 = 0, 0, 1 << 62
		for _, b := range backends {
			c := b.conns.Load()
			sum += c
			hi, lo = max(hi, c), min(lo, c)
		}
		return sum, hi, lo
	}
	// Until the clients' channels pick, they may not connect: send one
	// RPC on each, then wait for the connections to settle on the subsets.
	rpcs := func(per int) (failed int64) {
		var wg sync.WaitGroup
		var fails atomic.Int64
		sem := make(chan struct{}, 16)
		for i, c := range conns {
			hc := healthpb.NewHealthClient(c)
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				for j := range per {
					rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
					rcancel()
					if err != nil {
						if fails.Add(1) <= 3 {
							t.Errorf("client %d, RPC %d of %d: %v", i, j+1, per, err)
						}
					}
				}
			})
		}
		wg.Wait()
		return fails.Load()
	}
	rpcs(1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		sum, hi, lo := total()
		if sum == want && float64(hi)/(float64(sum)/float64(n)) <= bound {
			t.Logf("%d clients x subsets of %d over %d backends: %d connections, %d to %d per backend (max/avg %.3f)",
				m, size, n, sum, lo, hi, float64(hi)/(float64(sum)/float64(n)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections to the backends: %d (per backend %d to %d) after 60s, want %d (each of %d clients on its %d), max/avg <= %.2f",
				sum, lo, hi, want, m, size, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}

	before := make([]int64, n)
	for i, b := range backends {
		before[i] = b.total()
	}
	per := 40
	if failed := rpcs(per); failed > 0 {
		t.Fatalf("%d of %d RPCs failed, want 0", failed, m*per)
	}
	var sum, hi int64
	lo := int64(1 << 62)
	for i, b := range backends {
		d := b.total() - before[i]
		sum += d
		hi, lo = max(hi, d), min(lo, d)
	}
	ratio := float64(hi) / (float64(sum) / float64(n))
	t.Logf("%d RPCs, 0 failed: per backend %d to %d, max/avg %.3f", sum, lo, hi, ratio)
	if sum != int64(m*per) {
		t.Errorf("backends served %d RPCs, want %d", sum, m*per)
	}
	if ratio > 1.10 {
		t.Errorf("requests per backend max/avg %.3f, want <= 1.10", ratio)
	}
}

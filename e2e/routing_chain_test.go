package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/clientlib/propagate"
)

// The call-chain test (#15 acceptance 2): services chain-a → chain-b →
// chain-c, each with a synthetic variant (chain-a-synthetic, ...) on
// backends of its own, and route rules on each sending x-traffic-class:
// synthetic to the variant. Every backend serves with propagate's server
// interceptors and calls the next service through a clientlib.Conn with
// WithPropagation, on the xDS channel, so only the tag at the edge and
// the route rules decide where each hop goes.
const (
	chainKey   = "x-traffic-class"
	chainClass = "synthetic"
	chainRPCs  = 50 // tagged, and as many untagged
)

var chainServices = []string{"chain-a", "chain-b", "chain-c"}

// chainBackend is one variant of one service: it records the class of
// every RPC it serves and answers with its name followed by what the next
// hop answered ("chain-a chain-b-synthetic ...").
type chainBackend struct {
	testgrpc.UnimplementedTestServiceServer
	name string
	lis  net.Listener
	next testgrpc.TestServiceClient // nil for the last service; set before Serve

	mu   sync.Mutex
	seen map[string]int // class seen ("" for none) -> RPCs
}

func (b *chainBackend) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	class := strings.Join(metadata.ValueFromIncomingContext(ctx, chainKey), ",")
	b.mu.Lock()
	b.seen[class]++
	b.mu.Unlock()
	path := b.name
	if b.next != nil {
		resp, err := b.next.UnaryCall(ctx, &testpb.SimpleRequest{})
		if err != nil {
			return nil, fmt.Errorf("%s calling the next service: %w", b.name, err)
		}
		path += " " + resp.GetUsername()
	}
	return &testpb.SimpleResponse{Username: path}, nil
}

func (b *chainBackend) counts() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for k, v := range b.seen {
		out[k] = v
	}
	return out
}

// TestRoutingChain: N tagged and N untagged RPCs into chain-a: every
// tagged one is served by chain-a-synthetic, chain-b-synthetic and
// chain-c-synthetic, every untagged one by chain-a, chain-b and chain-c,
// and no RPC fails.
func TestRoutingChain(t *testing.T) {
	dir := t.TempDir()
	backends := map[string]*chainBackend{}
	var static strings.Builder
	static.WriteString("services:\n")
	for _, svc := range chainServices {
		for _, name := range []string{svc, svc + "-synthetic"} {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			backends[name] = &chainBackend{name: name, lis: l, seen: map[string]int{}}
			fmt.Fprintf(&static, "  - name: %s\n    endpoints:\n      - address: 127.0.0.1\n        ports: [\"grpc=%d\"]\n        zone: zone-a\n", name, l.Addr().(*net.TCPAddr).Port)
		}
	}
	staticFile := filepath.Join(dir, "services.yaml")
	tokenFile := filepath.Join(dir, "admin-token")
	for p, body := range map[string]string{staticFile: static.String(), tokenFile: e2eToken + "\n"} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := newServer(t, "--static-file", staticFile, "--admin-token-file", tokenFile, "--xds-debounce", "20ms", "--zone-aware=false")
	s.start()

	// The rules, before any client dials: each service sends the tagged
	// RPCs to its synthetic variant, with the rule docs/routing.md shows
	// for chain-b.
	docRule := chainDocRule(t)
	for _, svc := range chainServices {
		rules := filepath.Join(dir, svc+"-routes.yaml")
		body := strings.ReplaceAll(docRule, "chain-b", svc)
		if err := os.WriteFile(rules, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := s.ctlEnv([]string{"SPILLWAY_ADMIN_TOKEN=" + e2eToken}, "route", "--http", s.httpAddr, "set", svc, rules); r.code != 0 {
			t.Fatalf("spillwayctl route set %s: exit %d: %s", svc, r.code, r.stderr)
		}
	}

	// Each variant of a and b calls the next service through its own
	// Conn, as that variant; the test client calls chain-a.
	dial := func(caller, target string) *clientlib.Conn {
		t.Helper()
		c, err := clientlib.Dial(context.Background(), target,
			clientlib.WithService(caller),
			clientlib.WithZone("zone-a"), clientlib.WithRegion("r1"),
			clientlib.WithControlPlane(s.grpcAddr),
			clientlib.WithDNSServer(s.flag("--dns-addr")),
			clientlib.WithRolloutURL(""),
			clientlib.WithRolloutFile(chainRollout(t, dir)),
			clientlib.WithPanicPollInterval(500*time.Millisecond),
			clientlib.WithXDSTimeout(10*time.Second),
			clientlib.WithPropagation(chainKey),
			clientlib.WithPerConnBootstrap()) // several identities in one test process
		if err != nil {
			t.Fatalf("Dial %s as %s: %v", target, caller, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	conns := map[string]*clientlib.Conn{}
	for i, svc := range chainServices[:len(chainServices)-1] {
		next := chainServices[i+1]
		for _, name := range []string{svc, svc + "-synthetic"} {
			c := dial(name, next)
			conns[name+" -> "+next] = c
			backends[name].next = testgrpc.NewTestServiceClient(c)
		}
	}
	edge := dial("chain-edge", chainServices[0])
	conns["chain-edge -> chain-a"] = edge

	p, err := propagate.New(propagate.Config{Keys: []string{chainKey}})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		srv := grpc.NewServer(p.ServerOptions()...)
		testgrpc.RegisterTestServiceServer(srv, b)
		var wg sync.WaitGroup
		wg.Go(func() { srv.Serve(b.lis) })
		t.Cleanup(func() {
			srv.Stop()
			wg.Wait()
		})
	}
	mcWait(t, conns, 20*time.Second, "every Conn on xDS", func(_ string, st clientlib.Status) bool { return st.Channel == clientlib.XDS })

	client := testgrpc.NewTestServiceClient(edge)
	want := map[bool]string{
		true:  "chain-a-synthetic chain-b-synthetic chain-c-synthetic",
		false: "chain-a chain-b chain-c",
	}
	paths := map[bool]map[string]int{true: {}, false: {}}
	failed := 0
	for i := range 2 * chainRPCs {
		tagged := i%2 == 0
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if tagged {
			ctx = metadata.AppendToOutgoingContext(ctx, chainKey, chainClass)
		}
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		cancel()
		if err != nil {
			failed++
			t.Errorf("RPC %d (tagged %v): %v", i, tagged, err)
			continue
		}
		paths[tagged][resp.GetUsername()]++
	}
	for tagged, got := range paths {
		if diff := cmp.Diff(map[string]int{want[tagged]: chainRPCs}, got); diff != "" {
			t.Errorf("tagged=%v: the paths RPCs took (-want +got):\n%s", tagged, diff)
		}
	}
	// From the backends' side: each synthetic variant served exactly the
	// tagged RPCs, each production variant exactly the untagged ones.
	for name, b := range backends {
		want := map[string]int{"": chainRPCs}
		if strings.HasSuffix(name, "-synthetic") {
			want = map[string]int{chainClass: chainRPCs}
		}
		if diff := cmp.Diff(want, b.counts()); diff != "" {
			t.Errorf("%s: RPCs by class seen (-want +got):\n%s", name, diff)
		}
	}
	t.Logf("%d tagged and %d untagged RPCs through 3 hops: paths %v; %d failed", chainRPCs, chainRPCs, paths, failed)
}

// chainRollout writes a rollout config that puts every caller on xDS.
func chainRollout(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "rollout.yaml")
	if err := os.WriteFile(p, []byte("rules:\n  - name: everyone\n    match: {}\n    percent: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// chainDocRule returns the YAML rule of docs/routing.md's section
// "Carrying a traffic class through the call chain".
func chainDocRule(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Carrying a traffic class through the call chain")
	if !ok {
		t.Fatal(`docs/routing.md has no "## Carrying a traffic class through the call chain" section`)
	}
	_, after, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal("the call chain section of docs/routing.md has no yaml block")
	}
	block, _, _ := strings.Cut(after, "```")
	if !strings.Contains(block, chainKey) || !strings.Contains(block, "to: chain-b-synthetic") {
		t.Fatalf("the call chain rule of docs/routing.md does not send %s to chain-b-synthetic:\n%s", chainKey, block)
	}
	return block
}

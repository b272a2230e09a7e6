package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// TestRouteRulesE2E runs #15 through the binaries: spillwayctl route
// validate refuses bad rules naming the field and changes nothing
// (acceptance 5); route set sends every tagged RPC of a real grpc-go
// client to the synthetic variant and no untagged one (acceptance 1);
// the synthetic variant deregistered, its RPCs take the default route
// and route get and the metric say the rule is broken; after kill -9 the
// rules are still there.
func TestRouteRulesE2E(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rules := write("rules.yaml", `rules:
  - name: synthetic
    match:
      headers: [{name: x-traffic-class, exact: synthetic}]
    to: pay-synthetic
`)
	unknown := write("unknown.yaml", "rules:\n  - name: synthetic\n    too: pay-synthetic\n")
	missing := write("missing.yaml", "rules:\n  - split:\n      - {to: pay, weight: 9}\n      - {to: pay-nowhere, weight: 1}\n")
	zero := write("zero.yaml", "rules:\n  - split:\n      - {to: pay, weight: 0}\n")
	withToken := []string{"SPILLWAY_ADMIN_TOKEN=" + e2eToken}

	s := newServer(t, "--admin-token-file", tokenFile, "--xds-debounce", "20ms", "--lease-ttl", "1h", "--zone-aware=false")
	s.start()
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	backends := map[string]*xdsBackend{}
	leases := map[string]string{}
	for _, svc := range []string{"pay", "pay-synthetic"} {
		b := startXDSBackend(t, svc+"-1", "zone-a")
		resp, err := reg.Register(ctx, &pb.RegisterRequest{Service: svc, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}})
		if err != nil {
			t.Fatalf("register %s: %v", svc, err)
		}
		backends[svc], leases[svc] = b, resp.LeaseId
	}
	ctl := func(args ...string) ctlResult {
		return s.ctlEnv(withToken, append([]string{"route", "--http", s.httpAddr}, args...)...)
	}
	if r := ctl("set", "pay", rules); r.code != 0 {
		t.Fatalf("route set: exit %d: %s", r.code, r.stderr)
	}
	version := func() int64 {
		var e struct {
			Version int64 `json:"version"`
			Broken  []struct {
				Rule    string   `json:"rule"`
				Missing []string `json:"missing"`
			} `json:"broken"`
		}
		if err := json.Unmarshal([]byte(s.httpGet("/v1/routes/pay")), &e); err != nil {
			t.Fatal(err)
		}
		return e.Version
	}
	v0 := version()
	for _, tc := range []struct{ name, file, want string }{
		{"unknown_field", unknown, "body:3: rules[0].too: unknown field"},
		{"missing_target", missing, "rules[0].split[1].to: pay-nowhere: no such target service (HTTP 409)"},
		{"zero_weights", zero, "rules[0].split: the weights sum to 0"},
	} {
		for _, sub := range []string{"validate", "set"} {
			r := ctl(sub, "pay", tc.file)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%s: route %s = exit %d, stderr %q; want exit 1 with %q", tc.name, sub, r.code, r.stderr, tc.want)
			}
		}
		if v := version(); v != v0 {
			t.Errorf("%s: the rules' revision is %d after the refusals, want %d", tc.name, v, v0)
		}
		if got := ctl("get", "-o", "yaml", "pay"); !strings.Contains(got.stdout, "to: pay-synthetic") {
			t.Errorf("%s: route get after the refusals = %q, want the old rules", tc.name, got.stdout)
		}
	}

	conn := dialXDSZone(t, s.grpcAddr, "pay", "zone-a")
	hc := healthpb.NewHealthClient(conn)
	tagged := metadata.NewOutgoingContext(ctx, metadata.Pairs("x-traffic-class", "synthetic"))
	send := func(ctx context.Context, n int) map[string]int64 {
		t.Helper()
		before := map[string]int64{}
		for svc, b := range backends {
			before[svc] = b.total()
		}
		for i := range n {
			if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("RPC %d: %v", i, err)
			}
		}
		out := map[string]int64{}
		for svc, b := range backends {
			out[svc] = b.total() - before[svc]
		}
		return out
	}
	const n = 300
	if got := send(tagged, n); got["pay-synthetic"] != n || got["pay"] != 0 {
		t.Errorf("tagged: %v, want all %d on pay-synthetic", got, n)
	}
	if got := send(ctx, n); got["pay-synthetic"] != 0 || got["pay"] != n {
		t.Errorf("untagged: %v, want all %d on pay, none on pay-synthetic", got, n)
	}
	// The dry run names the clients the rules reach: the grpc-go client
	// (node.cluster e2e-client) is subscribed to pay.
	if got := ctl("validate", "pay", rules, "--header", "x-traffic-class: synthetic"); got.code != 0 ||
		!strings.Contains(got.stdout, "client e2e-client: 1 streams subscribed to pay") ||
		!strings.Contains(got.stdout, "rule synthetic → pay-synthetic") {
		t.Errorf("route validate = exit %d, %q; want the subscribed client and the synthetic rule for the sample", got.code, got.stdout)
	}
	if got := s.metric(`spillway_routes_broken{service="pay"}`); got != "0" {
		t.Errorf("spillway_routes_broken{service=pay} = %q, want 0", got)
	}

	if _, err := reg.Deregister(ctx, &pb.DeregisterRequest{LeaseId: leases["pay-synthetic"]}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(xdsWait)
	for send(tagged, 1)["pay"] == 0 && time.Now().Before(deadline) {
	}
	if got := send(tagged, 100); got["pay"] != 100 {
		t.Errorf("tagged with pay-synthetic gone: %v, want all 100 on pay (the default route)", got)
	}
	if got := ctl("get", "pay"); !strings.Contains(got.stdout, "broken: pay-synthetic not registered") {
		t.Errorf("route get with the target gone = %q, want the rule shown broken", got.stdout)
	}
	if got := s.metric(`spillway_routes_broken{service="pay"}`); got != "1" {
		t.Errorf("spillway_routes_broken{service=pay} = %q, want 1", got)
	}

	s.kill()
	s.start()
	if got := ctl("get", "-o", "yaml", "pay"); got.code != 0 || got.stdout != readFile(t, rules) {
		t.Errorf("route get after kill -9 = %q (exit %d), want the rules as set", got.stdout, got.code)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

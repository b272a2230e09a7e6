package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// The region tests run one service, geo, with two backends in region r1
// and two in r2, registered through the registry API with an hour-long
// lease (so that only the backends' own failure changes what grpc-go
// sees), a real grpc-go xDS client in r1 (bootstrap node.locality.region
// r1), and dig from 127.0.0.2, which dns.zones maps to zone r1-a of
// region r1.
const (
	geoService = "geo"
	geoSRV     = "_grpc._tcp.geo.spillway.internal."
	geoQuerier = "127.0.0.2" // dns.zones: r1-a, region r1
	geoSRVTTL  = 5 * time.Second
)

// regionBackend is a real gRPC server (health service only) that counts
// the RPCs it serves and can be stopped and started again on its port.
type regionBackend struct {
	id, region string
	port       uint32
	calls      atomic.Int64
	srv        *grpc.Server
}

func (b *regionBackend) start(t *testing.T) {
	t.Helper()
	addr := "127.0.0.1:0"
	if b.port != 0 {
		addr = fmt.Sprintf("127.0.0.1:%d", b.port)
	}
	var lis net.Listener
	var err error
	for range 100 { // a stopped server's port may take a moment to free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("backend %s: %v", b.id, err)
	}
	b.port = uint32(lis.Addr().(*net.TCPAddr).Port)
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(b.srv, health.NewServer())
	srv := b.srv
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
}

// geoFixture is a spillway server (with an admin token and dns.zones
// mapping geoQuerier to region r1), geo's four backends, a raw EDS watch
// as a client in r1 and a real grpc-go xDS client in r1.
type geoFixture struct {
	s        *server
	token    string // path of the admin token file
	backends []*regionBackend
	eds      *edsWatch
	conn     *grpc.ClientConn
}

func newGeoFixture(t *testing.T) *geoFixture {
	t.Helper()
	lookTool(t, "dig")
	dir := t.TempDir()
	f := &geoFixture{token: filepath.Join(dir, "admin-token")}
	config := filepath.Join(dir, "spillway.yaml")
	for file, b := range map[string]string{
		f.token: e2eToken + "\n",
		config: fmt.Sprintf("dns:\n  ttl:\n    srv: %s\n  zones:\n    - {prefix: %s/32, zone: r1-a, region: r1}\n",
			geoSRVTTL, geoQuerier),
	} {
		if err := os.WriteFile(file, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.s = newServer(t, "--config", config, "--admin-token-file", f.token,
		"--xds-debounce", "20ms", "--lease-ttl", "1h", "--zone-aware=false")
	f.s.start()
	reg := f.s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, region := range []string{"r1", "r2"} {
		for i := range 2 {
			b := &regionBackend{id: fmt.Sprintf("%s-%d", region, i), region: region}
			b.start(t)
			if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: geoService, Endpoint: &pb.Endpoint{
				Id: b.id, Address: "127.0.0.1",
				Ports:    []*pb.Port{{Name: "grpc", Number: b.port}},
				Locality: &pb.Locality{Region: region, Zone: region + "-a"},
			}}); err != nil {
				t.Fatalf("register %s: %v", b.id, err)
			}
			f.backends = append(f.backends, b)
		}
	}
	f.eds = watchEDS(t, f.s.grpcAddr, geoService, "r1-a") // node.locality.region r1
	cla := f.eds.until(t, "r1 at priority 0, r2 at priority 1", func(cla *v3endpointpb.ClusterLoadAssignment) bool {
		return regionPriorities(cla) == "r1=0 r2=1"
	})
	t.Logf("EDS for a client in r1: %s", regionPriorities(cla))
	f.conn = dialXDSZone(t, f.s.grpcAddr, geoService, "r1-a")
	return f
}

// regionPriorities summarizes cla as "region=priority …" by region name
// (a region whose localities disagree shows each priority).
func regionPriorities(cla *v3endpointpb.ClusterLoadAssignment) string {
	seen := map[string]bool{}
	var out []string
	for _, l := range cla.GetEndpoints() {
		s := fmt.Sprintf("%s=%d", l.GetLocality().GetRegion(), l.GetPriority())
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// served is what the backends of each region have served so far.
func (f *geoFixture) served() map[string]int64 {
	out := map[string]int64{}
	for _, b := range f.backends {
		out[b.region] += b.calls.Load()
	}
	return out
}

// call makes one health check on the xDS client; wait is WaitForReady.
func (f *geoFixture) call(ctx context.Context, wait bool) error {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(f.conn).Check(c, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(wait))
	return err
}

// rpcs makes n RPCs (WaitForReady) that must all succeed and returns what
// each region served during them.
func (f *geoFixture) rpcs(t *testing.T, n int) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := f.served()
	for i := range n {
		if err := f.call(ctx, true); err != nil {
			t.Fatalf("RPC %d of %d: %v", i+1, n, err)
		}
	}
	after := f.served()
	for r := range after {
		after[r] -= before[r]
	}
	return after
}

// untilServedBy makes RPCs (WaitForReady, at most 600, 50 ms apart) until
// one lands on region and returns how long that took.
func (f *geoFixture) untilServedBy(t *testing.T, region string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	for range 600 {
		before := f.served()[region]
		if err := f.call(ctx, true); err != nil {
			t.Fatalf("RPC while waiting for %s: %v", region, err)
		}
		if f.served()[region] > before {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no RPC reached %s within 600 tries; served so far %v", region, f.served())
	return 0
}

// srvPriorities digs geo's SRV from source and summarizes the answer as
// "region=priority …" (the region is the target's first label up to its
// first '-', e.g. r1-0.…). An answer that is not NOERROR with four
// records fails the test.
func (f *geoFixture) srvPriorities(t *testing.T, source string) string {
	t.Helper()
	r, _ := digZone(t, f.s.flag("--dns-addr"), geoSRV, "SRV", "-b", source)
	if r.Rcode != "NOERROR" || len(r.Answer) != 4 {
		t.Fatalf("dig -b %s SRV %s: %s with %d records, want NOERROR with 4:\n%s", source, geoSRV, r.Rcode, len(r.Answer), r.raw)
	}
	seen := map[string]bool{}
	var out []string
	for _, rr := range r.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			t.Fatalf("dig SRV %s: answer %v is not SRV", geoSRV, rr)
		}
		region, _, _ := strings.Cut(srv.Target, "-")
		s := fmt.Sprintf("%s=%d", region, srv.Priority)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestRegionFailover (#15 acceptance 3): a real grpc-go client in r1
// sends only to r1 (priority 0); with every r1 backend stopped its RPCs go
// to r2 (priority 1), and once they serve again back to r1. The RPCs that
// fail during the switch are counted and logged: grpc-go retries nothing
// by default, and an RPC already sent on a connection that closes, or
// picked while priority 0 is in TRANSIENT_FAILURE and priority 1 is not
// yet READY, fails. dig from a querier of r1 sees r1's targets at SRV
// priority 0 and r2's at 1; from a querier of no known region, every
// target at 0.
func TestRegionFailover(t *testing.T) {
	f := newGeoFixture(t)
	if got := f.srvPriorities(t, geoQuerier); got != "r1=0 r2=1" {
		t.Errorf("dig -b %s (region r1): SRV priorities %s, want r1=0 r2=1", geoQuerier, got)
	}
	if got := f.srvPriorities(t, "127.0.0.1"); got != "r1=0 r2=0" {
		t.Errorf("dig -b 127.0.0.1 (no region): SRV priorities %s, want r1=0 r2=0", got)
	}

	if got := f.rpcs(t, 100); got["r1"] != 100 || got["r2"] != 0 {
		t.Fatalf("with r1 up: served %v of 100 RPCs, want all on r1", got)
	}

	for _, b := range f.backends {
		if b.region == "r1" {
			b.srv.Stop()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 200
	failed := 0
	var firstErr error
	before := f.served()
	for range n {
		// Not WaitForReady: an RPC that cannot be placed fails rather than
		// waiting, so every failure of the switch is counted.
		if err := f.call(ctx, false); err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	onR2 := f.served()["r2"] - before["r2"]
	t.Logf("every r1 backend stopped: %d of %d RPCs failed during the switch (first: %v), r2 served %d", failed, n, firstErr, onR2)
	if onR2+int64(failed) != n {
		t.Errorf("r2 served %d and %d failed of %d RPCs after r1 stopped; want every RPC that succeeded on r2", onR2, failed, n)
	}
	if onR2 < n*3/4 {
		t.Errorf("r2 served %d of %d RPCs after r1 stopped, want at least %d", onR2, n, n*3/4)
	}
	if got := f.rpcs(t, 100); got["r2"] != 100 {
		t.Errorf("after the switch: served %v of 100 RPCs, want all on r2", got)
	}

	for _, b := range f.backends {
		if b.region == "r1" {
			b.start(t)
		}
	}
	took := f.untilServedBy(t, "r1")
	t.Logf("r1 restarted: first RPC on r1 after %v", took.Round(time.Millisecond))
	if got := f.rpcs(t, 100); got["r1"] != 100 || got["r2"] != 0 {
		t.Errorf("after r1 recovered: served %v of 100 RPCs, want all on r1", got)
	}
}

// next ACKs and returns the next ClusterLoadAssignment pushed on w,
// failing the test after d.
func (w *edsWatch) next(t *testing.T, d time.Duration) *v3endpointpb.ClusterLoadAssignment {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case resp := <-w.resps:
			if err := w.stream.Send(&v3discoverypb.DiscoveryRequest{
				TypeUrl: edsTypeURL, ResourceNames: w.names, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
			}); err != nil {
				t.Fatalf("ADS ACK: %v", err)
			}
			for _, r := range resp.GetResources() {
				cla := &v3endpointpb.ClusterLoadAssignment{}
				if err := r.UnmarshalTo(cla); err != nil {
					t.Fatalf("ADS response: %v", err)
				}
				return cla
			}
		case err := <-w.errc:
			t.Fatalf("ADS stream: %v", err)
		case <-timeout:
			t.Fatalf("no EDS push within %v", d)
		}
	}
}

// TestRegionRedirect (#15 acceptance 4): `spillwayctl config set geo`
// with a redirect of r1 to r2 expiring a few seconds later moves the r1
// clients to r2 in the first EDS push after the set (r2 at priority 0,
// r1 last), the real grpc-go client's RPCs to r2 with none failing, and
// dig from the r1 querier to r2 at SRV priority 0 as soon as xDS has it
// (DNS answers are built at query time: a caching resolver sees it within
// one TTL). When the redirect expires, with no edit, the next push and
// the next dig are back to r1 first, and so are the RPCs.
func TestRegionRedirect(t *testing.T) {
	f := newGeoFixture(t)
	if got := f.rpcs(t, 100); got["r1"] != 100 {
		t.Fatalf("before the redirect: served %v of 100 RPCs, want all on r1", got)
	}
	if got := f.srvPriorities(t, geoQuerier); got != "r1=0 r2=1" {
		t.Fatalf("before the redirect: dig from r1 SRV priorities %s, want r1=0 r2=1", got)
	}

	// RPCs all along, not WaitForReady, counting failures: the redirect
	// must not fail any.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var failed, total atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := 0; i < 20000 && loadCtx.Err() == nil; i++ {
			if err := f.call(loadCtx, false); err != nil && loadCtx.Err() == nil {
				failed.Add(1)
			}
			total.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() { stopLoad(); <-loadDone }()

	const lifetime = 15 * time.Second
	until := time.Now().Add(lifetime).Truncate(time.Second)
	file := filepath.Join(t.TempDir(), "geo.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("redirects:\n  - {from: r1, to: r2, until: %s}\n", until.UTC().Format(time.RFC3339))), 0o600); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	if r := f.s.ctlEnv(nil, "config", "set", geoService, file, "--http", f.s.httpAddr, "--token", e2eToken); r.code != 0 {
		t.Fatalf("spillwayctl config set: exit %d, stderr %s", r.code, r.stderr)
	}
	cla := f.eds.next(t, 30*time.Second)
	pushed := time.Since(set)
	if got := regionPriorities(cla); got != "r1=1 r2=0" {
		t.Fatalf("first EDS push after the redirect: %s, want r1=1 r2=0 (r2 first, r1 last)", got)
	}
	// The push left after the rule was in the region table, which DNS
	// reads at query time: the next dig has it.
	if got := f.srvPriorities(t, geoQuerier); got != "r1=1 r2=0" {
		t.Errorf("dig from r1 after the redirect's push: SRV priorities %s, want r1=1 r2=0", got)
	}
	if got := f.srvPriorities(t, "127.0.0.1"); got != "r1=0 r2=0" {
		t.Errorf("dig from no region during the redirect: SRV priorities %s, want r1=0 r2=0 (a redirect only moves r1's clients)", got)
	}
	took := f.untilServedBy(t, "r2")
	t.Logf("redirect r1→r2: EDS pushed %v after config set, traffic on r2 %v after the push", pushed.Round(time.Millisecond), took.Round(time.Millisecond))
	if time.Now().Before(until.Add(-2 * time.Second)) {
		// The load loop runs too: count that r1 gets none, r2 at least these.
		if got := f.rpcs(t, 50); got["r1"] != 0 || got["r2"] < 50 {
			t.Errorf("during the redirect: served %v during 50 RPCs (and the load loop's), want none on r1", got)
		}
	}

	// Expiry: no edit; the next push puts r1 first again.
	cla = f.eds.next(t, time.Until(until)+30*time.Second)
	expired := time.Since(until)
	if got := regionPriorities(cla); got != "r1=0 r2=1" {
		t.Fatalf("first EDS push after the redirect's expiry: %s, want r1=0 r2=1", got)
	}
	if got := f.srvPriorities(t, geoQuerier); got != "r1=0 r2=1" {
		t.Errorf("dig from r1 after the redirect expired: SRV priorities %s, want r1=0 r2=1", got)
	}
	took = f.untilServedBy(t, "r1")
	t.Logf("redirect expired: EDS pushed %v after until, traffic on r1 %v after the push", expired.Round(time.Millisecond), took.Round(time.Millisecond))
	if got := f.rpcs(t, 100); got["r2"] != 0 || got["r1"] < 100 {
		t.Errorf("after the redirect expired: served %v during 100 RPCs (and the load loop's), want none on r2", got)
	}
	stopLoad()
	<-loadDone
	t.Logf("RPCs made all along (not WaitForReady): %d, failed %d", total.Load(), failed.Load())
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d RPCs failed across the redirect and its expiry, want 0", n, total.Load())
	}
}

// TestRegionRulesExplained: with zone-aware weights on (so the service has
// weights to explain), the redirects set with `spillwayctl config set`
// show in `spillwayctl weights` and GET /v1/weights: active, and per
// client region the order and whether each applied (r2's redirect to r3,
// a region without endpoints, does not).
func TestRegionRulesExplained(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(token, []byte(e2eToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--admin-token-file", token, "--lease-ttl", "1h")
	s.start()
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, region := range []string{"r1", "r2"} {
		b := &regionBackend{id: region + "-0", region: region}
		b.start(t)
		if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: geoService, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: region, Zone: region + "-a"},
		}}); err != nil {
			t.Fatalf("register %s: %v", b.id, err)
		}
	}
	file := filepath.Join(dir, "geo.yaml")
	if err := os.WriteFile(file, []byte("redirects:\n  - {from: r1, to: r2}\n  - {from: r2, to: r3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Accepted, with a warning for the redirect that cannot apply.
	r := s.ctlEnv(nil, "config", "set", geoService, file, "--http", s.httpAddr, "--token", e2eToken)
	if wantWarn := "warning: redirects[1].to: r3 has no healthy endpoint of geo now"; r.code != 0 || !strings.Contains(r.stderr, wantWarn) {
		t.Errorf("spillwayctl config set: exit %d, stderr %q; want exit 0 with %q", r.code, r.stderr, wantWarn)
	}
	want := []string{
		"regions with healthy endpoints: r1, r2",
		"redirect r1 → r2 (active)",
		"redirect r2 → r3 (active)",
		"redirect to r2 applied",
		"redirect to r3 not applied: no healthy endpoint there",
	}
	// The first weights cycle may still be to come: poll, bounded.
	var out string
	for i := 0; ; i++ {
		r := s.ctlEnv(nil, "weights", geoService)
		out = r.stdout
		if r.code == 0 && strings.Contains(out, "CLIENT REGION") {
			break
		}
		if i == 300 {
			t.Fatalf("spillwayctl weights %s: no regions section after 300 tries; exit %d, stdout:\n%s\nstderr: %s", geoService, r.code, out, r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("spillwayctl weights %s lacks %q:\n%s", geoService, w, out)
		}
	}
	// protojson varies its whitespace on purpose: compact it before
	// looking for fragments.
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(s.httpGet("/v1/weights?service="+geoService))); err != nil {
		t.Fatalf("GET /v1/weights?service=%s: %v", geoService, err)
	}
	body := compact.String()
	for _, w := range []string{`"client_region":"r1"`, `"order":["r2","r1"]`, `"redirect":"applied"`, `"redirect":"no_endpoints"`, `"redirect_to":"r3"`} {
		if !strings.Contains(body, w) {
			t.Errorf("GET /v1/weights?service=%s lacks %s:\n%s", geoService, w, body)
		}
	}
}

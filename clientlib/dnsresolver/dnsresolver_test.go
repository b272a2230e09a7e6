package dnsresolver_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/spillway/spillway/clientlib/dnsresolver"
	"github.com/spillway/spillway/registry"
	spillresolver "github.com/spillway/spillway/resolver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serveDNS serves h on one loopback port, UDP and TCP; stop is idempotent.
func serveDNS(t *testing.T, h dns.Handler) (addr string, stop func()) {
	t.Helper()
	var (
		pc  net.PacketConn
		l   net.Listener
		err error
	)
	for range 20 {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: l, Handler: h}
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	udp.NotifyStartedFunc = func() { started <- struct{}{} }
	tcp.NotifyStartedFunc = func() { started <- struct{}{} }
	wg.Go(func() { udp.ActivateAndServe() })
	wg.Go(func() { tcp.ActivateAndServe() })
	<-started
	<-started
	var once sync.Once
	stop = func() {
		once.Do(func() {
			udp.Shutdown()
			tcp.Shutdown()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return pc.LocalAddr().String(), stop
}

// spillwayDNS serves a fresh store through spillway's resolver, with SRV
// TTLs of 1 s.
func spillwayDNS(t *testing.T) (*registry.Store, string, func()) {
	t.Helper()
	store := registry.NewStore()
	store.MarkSynced()
	srv, err := spillresolver.New(spillresolver.Config{Store: store, Domain: "spillway.internal", TTL: spillresolver.TTLs{SRV: time.Second, A: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serveDNS(t, srv)
	return store, addr, stop
}

func endpoint(id string, ap netip.AddrPort, weight uint32) *registry.Endpoint {
	return &registry.Endpoint{
		ID: id, Address: ap.Addr(),
		Ports:    []registry.Port{{Name: "grpc", Number: ap.Port(), Protocol: registry.TCP}},
		Locality: registry.Locality{Zone: "zone-a"},
		Health:   registry.Healthy, Weight: weight, Source: registry.SourceStatic,
	}
}

func apply(t *testing.T, store *registry.Store, ops ...registry.Op) {
	t.Helper()
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
}

// recorder is a resolver.ClientConn that keeps what the resolver says.
type recorder struct {
	resolver.ClientConn // unimplemented methods panic

	mu      sync.Mutex
	states  []resolver.State
	errs    []error
	updated chan struct{}
}

func newRecorder() *recorder { return &recorder{updated: make(chan struct{}, 100)} }

func (r *recorder) UpdateState(s resolver.State) error {
	r.mu.Lock()
	r.states = append(r.states, s)
	r.mu.Unlock()
	r.updated <- struct{}{}
	return nil
}

func (r *recorder) ReportError(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.updated <- struct{}{}
}

func (r *recorder) ParseServiceConfig(string) *serviceconfig.ParseResult { return nil }

func (r *recorder) snapshot() ([]resolver.State, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states), slices.Clone(r.errs)
}

func (r *recorder) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.updated:
	case <-time.After(10 * time.Second):
		t.Fatal("no update from the resolver in 10s")
	}
}

func build(t *testing.T, cfg dnsresolver.Config, service string, cc resolver.ClientConn) resolver.Resolver {
	t.Helper()
	b, err := dnsresolver.NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Build(resolver.Target{URL: *mustURL(t, "spillway-dns:///"+service)}, cc, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

type addrWeight struct {
	Addr   string
	Weight uint32
}

func endpoints(s resolver.State) []addrWeight {
	var out []addrWeight
	for _, ep := range s.Endpoints {
		w := weight.FromEndpoint(ep).Weight
		for _, a := range ep.Addresses {
			out = append(out, addrWeight{a.Addr, w})
		}
	}
	return out
}

// TestResolveSRVWithGlue: endpoints come from the SRV records and their
// glue, with the SRV weights attached.
func TestResolveSRVWithGlue(t *testing.T) {
	store, addr, _ := spillwayDNS(t)
	apply(t, store,
		registry.Upsert("payments", endpoint("a", netip.MustParseAddrPort("10.0.0.1:8080"), 100)),
		registry.Upsert("payments", endpoint("b", netip.MustParseAddrPort("10.0.0.2:8081"), 200)),
		registry.Upsert("payments", endpoint("c", netip.MustParseAddrPort("[2001:db8::3]:8082"), 400)),
	)
	rec := newRecorder()
	build(t, dnsresolver.Config{Server: addr}, "payments", rec)
	rec.wait(t)
	states, errs := rec.snapshot()
	if len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	got := endpoints(states[0])
	want := []addrWeight{{"10.0.0.1:8080", 16384}, {"10.0.0.2:8081", 32768}, {"[2001:db8::3]:8082", 65535}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

// TestResolveWithoutGlue: a server that sends no glue gets an A/AAAA
// lookup of each SRV target.
func TestResolveWithoutGlue(t *testing.T) {
	var queries atomic.Int64
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case q.Qtype == dns.TypeSRV && q.Name == "_grpc._tcp.payments.example.org.":
			m.Answer = append(m.Answer,
				mustRR(t, "_grpc._tcp.payments.example.org. 30 IN SRV 0 5 9000 h1.example.org."),
				mustRR(t, "_grpc._tcp.payments.example.org. 30 IN SRV 0 7 9001 H2.example.org."))
		case q.Qtype == dns.TypeA && q.Name == "h1.example.org.":
			m.Answer = append(m.Answer, mustRR(t, "h1.example.org. 30 IN A 192.0.2.1"))
		case q.Qtype == dns.TypeAAAA && q.Name == "h2.example.org.":
			m.Answer = append(m.Answer, mustRR(t, "h2.example.org. 30 IN AAAA 2001:db8::2"))
		}
		w.WriteMsg(m)
	})
	addr, _ := serveDNS(t, h)
	rec := newRecorder()
	build(t, dnsresolver.Config{Server: addr, Domain: "example.org"}, "payments", rec)
	rec.wait(t)
	states, _ := rec.snapshot()
	want := []addrWeight{{"192.0.2.1:9000", 5}, {"[2001:db8::2]:9001", 7}}
	if diff := cmp.Diff(want, endpoints(states[0])); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

// TestTruncatedAnswerOverTCP: an answer too big for UDP is fetched again
// over TCP, whole.
func TestTruncatedAnswerOverTCP(t *testing.T) {
	store, addr, _ := spillwayDNS(t)
	var ops []registry.Op
	for i := range 200 {
		ops = append(ops, registry.Upsert("big", endpoint(fmt.Sprintf("e%d", i), netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i%250 + 1)}), 8080), 100)))
	}
	apply(t, store, ops...)
	rec := newRecorder()
	build(t, dnsresolver.Config{Server: addr}, "big", rec)
	rec.wait(t)
	states, errs := rec.snapshot()
	if len(errs) != 0 || len(states[0].Endpoints) != 200 {
		t.Errorf("%d endpoints (errors %v), want 200", len(states[0].Endpoints), errs)
	}
}

// TestReresolveAtTTL: a new endpoint is seen one TTL (1 s) later.
func TestReresolveAtTTL(t *testing.T) {
	store, addr, _ := spillwayDNS(t)
	apply(t, store, registry.Upsert("payments", endpoint("a", netip.MustParseAddrPort("10.0.0.1:8080"), 100)))
	rec := newRecorder()
	build(t, dnsresolver.Config{Server: addr}, "payments", rec)
	rec.wait(t)
	added := time.Now()
	apply(t, store, registry.Upsert("payments", endpoint("b", netip.MustParseAddrPort("10.0.0.2:8080"), 100)))
	for {
		rec.wait(t)
		states, _ := rec.snapshot()
		if len(states[len(states)-1].Endpoints) == 2 {
			break
		}
	}
	if d := time.Since(added); d > 2500*time.Millisecond {
		t.Errorf("new endpoint seen after %v, want about the 1 s TTL", d)
	}
}

// TestKeepsLastAddressesOnFailure: when the DNS server goes away, the
// channel keeps its addresses and RPCs keep working; before any good
// answer, the error is reported.
func TestKeepsLastAddressesOnFailure(t *testing.T) {
	store, addr, stop := spillwayDNS(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	defer func() {
		srv.Stop()
		wg.Wait()
	}()
	apply(t, store, registry.Upsert("payments", endpoint("a", netip.MustParseAddrPort(lis.Addr().String()), 100)))

	b, err := dnsresolver.NewBuilder(dnsresolver.Config{Server: addr})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("spillway-dns:///payments", grpc.WithResolvers(b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	build(t, dnsresolver.Config{Server: addr}, "payments", rec)
	rec.wait(t)

	stop()
	// Three TTLs without DNS: RPCs still work, the recorder hears nothing.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("RPC with DNS down: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	states, errs := rec.snapshot()
	if len(states) != 1 || len(errs) != 0 {
		t.Errorf("after the server stopped: %d states, errors %v; want the first state only", len(states), errs)
	}

	// A resolver that never had an answer reports the error.
	rec2 := newRecorder()
	build(t, dnsresolver.Config{Server: addr, Timeout: 200 * time.Millisecond}, "payments", rec2)
	rec2.wait(t)
	if _, errs := rec2.snapshot(); len(errs) == 0 {
		t.Error("no error reported before the first answer")
	}
}

// TestEmptyAnswerKeepsAddresses: a service whose endpoints all go away
// (NXDOMAIN) keeps its last addresses rather than none.
func TestEmptyAnswerKeepsAddresses(t *testing.T) {
	store, addr, _ := spillwayDNS(t)
	apply(t, store, registry.Upsert("payments", endpoint("a", netip.MustParseAddrPort("10.0.0.1:8080"), 100)))
	rec := newRecorder()
	build(t, dnsresolver.Config{Server: addr}, "payments", rec)
	rec.wait(t)
	apply(t, store, registry.Remove("payments", "a", registry.SourceStatic))
	time.Sleep(2500 * time.Millisecond)
	states, errs := rec.snapshot()
	if len(states) != 1 || len(errs) != 0 {
		t.Errorf("%d states, errors %v; want the first state only", len(states), errs)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  dnsresolver.Config
		want string
	}{
		{"bad_domain", dnsresolver.Config{Domain: "a..b"}, "Domain"},
		{"bad_port_name", dnsresolver.Config{PortName: "_grpc"}, "PortName"},
		{"max_below_min", dnsresolver.Config{MinTTL: time.Minute, MaxTTL: time.Second}, "MaxTTL"},
		{"bad_server", dnsresolver.Config{Server: "nohostport"}, "Server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dnsresolver.NewBuilder(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func mustRR(t *testing.T, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/xds/xdstest"
)

// The xDS tests run one service with backends in three zones, deliberately
// uneven (1, 2, 3 backends) so that any weighting gives a non-trivial split,
// and one real grpc-go xDS client in each zone.
const (
	xdsService    = "echo"
	clientZoneKey = "x-client-zone" // metadata naming the caller's zone, for the backends' counters
	edsTypeURL    = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	xdsWait       = 10 * time.Second // bound of every wait for a push
)

var (
	xdsZones        = []string{"zone-a", "zone-b", "zone-c"}
	xdsBackendCount = map[string]int{"zone-a": 1, "zone-b": 2, "zone-c": 3}
)

// splitSigmas is the tolerance of a locality share, in binomial standard
// deviations. grpc-go picks a locality at random in proportion to its
// weight (weighted_target's random WRR), independently per RPC, so the
// count a locality gets out of n RPCs is Binomial(n, p = w/sum) and its
// share has a standard deviation of sqrt(p(1-p)/n). Five sigmas (a chance
// failure of 5.7e-7 per check, ~1e-5 over the 18 checks of
// TestXDSLocalitySplit) give no flakes, yet with n = 3,000 are at most
// ±4.6 points (p = 1/2) and ±3.4 points (p = 1/6): equal locality weights
// (33% instead of 17% or 50%) or a drifted weight are caught. An absolute
// 3% would be 3.3 sigmas at p = 1/2 (a chance failure in ~1,000 checks)
// but 4.4 at p = 1/6: not uniformly safe.
const splitSigmas = 5

// lrsTolerance is the acceptance bound of the LRS check: a reported count
// within 5% of what the backends counted. grpc-go counts every finished
// RPC, so the two should be equal once every report has arrived.
const lrsTolerance = 0.05

// xdsBackend is a real gRPC server (health service only) that counts the
// RPCs it serves by caller zone, and its open client connections.
type xdsBackend struct {
	id, zone string
	port     uint32
	lease    string

	conns atomic.Int64 // open client connections

	// mu guards calls.
	mu    sync.Mutex
	calls map[string]int64 // by client zone
}

func startXDSBackend(t *testing.T, id, zone string) *xdsBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &xdsBackend{id: id, zone: zone, port: uint32(lis.Addr().(*net.TCPAddr).Port), calls: map[string]int64{}}
	srv := grpc.NewServer(grpc.UnaryInterceptor(b.count), grpc.StatsHandler(connCounter{&b.conns}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

func (b *xdsBackend) count(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	zone := "unknown"
	if v := metadata.ValueFromIncomingContext(ctx, clientZoneKey); len(v) == 1 {
		zone = v[0]
	}
	b.mu.Lock()
	b.calls[zone]++
	b.mu.Unlock()
	return h(ctx, req)
}

func (b *xdsBackend) served() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int64, len(b.calls))
	for k, v := range b.calls {
		out[k] = v
	}
	return out
}

func (b *xdsBackend) total() int64 {
	var n int64
	for _, v := range b.served() {
		n += v
	}
	return n
}

// connCounter counts a server's open transports.
type connCounter struct{ n *atomic.Int64 }

func (c connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.n.Add(1)
	case *stats.ConnEnd:
		c.n.Add(-1)
	}
}

// xdsFixture is a spillway server with the backends registered through
// its registry API, a raw ADS watch of EDS per client zone, and a real
// grpc-go xDS channel per client zone.
type xdsFixture struct {
	s        *server
	reg      pb.RegistryClient
	backends []*xdsBackend
	ads      map[string]*edsWatch         // by client zone
	conns    map[string]*grpc.ClientConn  // by client zone
	weights  map[string]map[string]uint32 // client zone -> upstream zone -> pushed weight
}

func newXDSFixture(t *testing.T) *xdsFixture {
	t.Helper()
	// Zone-aware weights off: these tests check that what is pushed is what
	// grpc-go does, and the weights must hold still while they measure.
	// The zone-aware planner has its own e2e test (zoneaware_test.go).
	s := newServer(t, "--xds-debounce", "20ms", "--lrs-interval", "1s", "--lease-ttl", "1h", "--zone-aware=false")
	s.start()
	f := &xdsFixture{s: s, reg: s.client(), ads: map[string]*edsWatch{}, conns: map[string]*grpc.ClientConn{}, weights: map[string]map[string]uint32{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, zone := range xdsZones {
		for i := range xdsBackendCount[zone] {
			b := startXDSBackend(t, fmt.Sprintf("%s-%d", zone, i), zone)
			resp, err := f.reg.Register(ctx, &pb.RegisterRequest{Service: xdsService, Endpoint: &pb.Endpoint{
				Id: b.id, Address: "127.0.0.1",
				Ports:    []*pb.Port{{Name: "grpc", Number: b.port}},
				Locality: &pb.Locality{Region: "r1", Zone: zone},
			}})
			if err != nil {
				t.Fatalf("register %s: %v", b.id, err)
			}
			b.lease = resp.LeaseId
			f.backends = append(f.backends, b)
		}
	}
	for _, zone := range xdsZones {
		w := watchEDS(t, s.grpcAddr, xdsService, zone)
		f.ads[zone] = w
		cla := w.until(t, "all 6 backends", func(cla *v3endpointpb.ClusterLoadAssignment) bool {
			return len(claPorts(cla)) == len(f.backends)
		})
		f.weights[zone] = localityWeights(cla)
		t.Logf("pushed locality weights for clients in %s: %v", zone, f.weights[zone])
	}
	for _, zone := range xdsZones {
		f.conns[zone] = dialXDSZone(t, s.grpcAddr, xdsService, zone)
	}
	// Until a locality is connected, grpc-go leaves it out of its picks:
	// connect every client to every backend (round_robin connects to all)
	// and warm up, so that the measured traffic sees all localities.
	f.traffic(t, 1)
	deadline := time.Now().Add(xdsWait)
	for _, b := range f.backends {
		for b.conns.Load() < int64(len(xdsZones)) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if c := b.conns.Load(); c < int64(len(xdsZones)) {
			t.Fatalf("backend %s: %d client connections %v after the first RPCs, want one from each of the %d client zones", b.id, c, xdsWait, len(xdsZones))
		}
	}
	f.traffic(t, 100)
	return f
}

// traffic makes n health checks from each client zone (zones in parallel,
// one RPC at a time within a zone) and fails the test if any fails. It
// returns what the backends counted during it: client zone -> backend
// zone -> RPCs.
func (f *xdsFixture) traffic(t *testing.T, n int) map[string]map[string]int64 {
	t.Helper()
	before := f.byZone()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, zone := range xdsZones {
		hc := healthpb.NewHealthClient(f.conns[zone])
		wg.Go(func() {
			ctx := metadata.AppendToOutgoingContext(ctx, clientZoneKey, zone)
			for i := range n {
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
				rcancel()
				if err != nil {
					t.Errorf("client in %s: RPC %d of %d: %v", zone, i+1, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	after := f.byZone()
	for cz, m := range after {
		for bz := range m {
			m[bz] -= before[cz][bz]
		}
	}
	return after
}

// byZone sums the backends' counters: client zone -> backend zone -> RPCs.
func (f *xdsFixture) byZone() map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, cz := range xdsZones {
		out[cz] = map[string]int64{}
	}
	for _, b := range f.backends {
		for cz, n := range b.served() {
			if out[cz] == nil {
				out[cz] = map[string]int64{}
			}
			out[cz][b.zone] += n
		}
	}
	return out
}

// checkSplit asserts that each client zone's RPCs went to the upstream
// zones in proportion to the weights pushed to that zone.
func checkSplit(t *testing.T, phase string, n int, got map[string]map[string]int64, weights map[string]map[string]uint32) {
	t.Helper()
	if m := got["unknown"]; len(m) > 0 {
		t.Errorf("%s: backends served RPCs without a client zone: %v", phase, m)
	}
	for _, cz := range xdsZones {
		var sum float64
		for _, w := range weights[cz] {
			sum += float64(w)
		}
		var served int64
		for _, c := range got[cz] {
			served += c
		}
		if served != int64(n) {
			t.Errorf("%s: client in %s made %d RPCs, backends served %d", phase, cz, n, served)
		}
		var line []string
		for _, uz := range xdsZones {
			p := float64(weights[cz][uz]) / sum
			share := float64(got[cz][uz]) / float64(n)
			tol := splitSigmas * math.Sqrt(p*(1-p)/float64(n))
			line = append(line, fmt.Sprintf("%s %.1f%% (want %.1f%% ± %.1f)", uz, 100*share, 100*p, 100*tol))
			if math.Abs(share-p) > tol {
				t.Errorf("%s: client in %s sent %d of %d RPCs (%.2f%%) to %s, want %.2f%% ± %.2f (weight %d of %v, %d sigmas)",
					phase, cz, got[cz][uz], n, 100*share, uz, 100*p, 100*tol, weights[cz][uz], weights[cz], splitSigmas)
			}
		}
		t.Logf("%s: client in %s: %s", phase, cz, strings.Join(line, ", "))
	}
}

// TestXDSLocalitySplit is acceptance 1 of xDS: backends in three zones
// registered through the registry API; a real grpc-go client in each zone
// dials xds:///echo; every RPC succeeds; each client's split over the
// upstream zones follows the locality weights pushed to its zone (read
// from the server over a raw ADS stream, not assumed); a deregistered
// backend gets no RPC once the push without it has been applied.
func TestXDSLocalitySplit(t *testing.T) {
	const n = 3000 // RPCs per client zone per phase
	f := newXDSFixture(t)

	got := f.traffic(t, n)
	checkSplit(t, "registered", n, got, f.weights)
	for _, b := range f.backends {
		if b.total() == 0 {
			t.Errorf("backend %s served no RPC", b.id)
		}
	}

	// Deregister one of zone-c's three backends.
	var gone *xdsBackend
	for _, b := range f.backends {
		if b.zone == "zone-c" {
			gone = b
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.reg.Deregister(ctx, &pb.DeregisterRequest{LeaseId: gone.lease}); err != nil {
		t.Fatalf("deregister %s: %v", gone.id, err)
	}
	// The next push, as every client zone gets it.
	weights := map[string]map[string]uint32{}
	for _, cz := range xdsZones {
		cla := f.ads[cz].until(t, "EDS without "+gone.id, func(cla *v3endpointpb.ClusterLoadAssignment) bool {
			return !slices.Contains(claPorts(cla), gone.port)
		})
		if got, want := len(claPorts(cla)), len(f.backends)-1; got != want {
			t.Errorf("EDS for %s after deregistering %s: %d endpoints, want %d", cz, gone.id, got, want)
		}
		weights[cz] = localityWeights(cla)
		t.Logf("pushed locality weights for clients in %s after the deregistration: %v", cz, weights[cz])
	}
	// The grpc-go clients applied it when they have closed their
	// connections to the removed backend; from then on it must get nothing.
	deadline := time.Now().Add(xdsWait)
	for gone.conns.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := gone.conns.Load(); c > 0 {
		t.Fatalf("%v after the push without %s, grpc-go clients still hold %d connections to it", xdsWait, gone.id, c)
	}
	servedBefore := gone.served()

	got = f.traffic(t, n)
	if after := gone.served(); !maps.Equal(after, servedBefore) {
		t.Errorf("deregistered backend %s served RPCs after the push without it: by client zone %v, before %v", gone.id, after, servedBefore)
	}
	checkSplit(t, "after deregistration", n, got, weights)
}

// TestXDSLoadReports is acceptance 2 of xDS: the LRS reports of the real
// grpc-go clients reach the server, and per (client zone, upstream zone)
// the successful requests they report match what the backends counted
// within 5%, both in the load table (GET /v1/load) and in the Prometheus
// counter spillway_lrs_requests_total fed by the same reports.
func TestXDSLoadReports(t *testing.T) {
	const (
		n      = 3000 // RPCs per client zone per round
		rounds = 2    // the second checks that later reports add to, not redo, the first
	)
	f := newXDSFixture(t)

	sources := []struct {
		name string
		read func() map[[2]string]lrsTotals
	}{
		{"GET /v1/load", func() map[[2]string]lrsTotals { return loadTable(t, f.s, xdsService) }},
		{"spillway_lrs_requests_total", func() map[[2]string]lrsTotals { return lrsMetric(t, f.s) }},
	}
	var counted map[string]map[string]int64 // client zone -> upstream zone -> served, warm-up included
	reported := make([]map[[2]string]lrsTotals, len(sources))
	for round := 1; round <= rounds; round++ {
		f.traffic(t, n)
		counted = f.byZone()
		// Wait until every source covers what the backends counted:
		// reports come every --lrs-interval (1s), so 15s is ample.
		covered := func() bool {
			ok := true
			for i, src := range sources {
				reported[i] = src.read()
				for _, cz := range xdsZones {
					for _, uz := range xdsZones {
						ok = ok && reported[i][[2]string{cz, uz}].succeeded >= float64(counted[cz][uz])
					}
				}
			}
			return ok
		}
		start := time.Now()
		for deadline := start.Add(15 * time.Second); !covered() && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("round %d: LRS reports covered the traffic %v after it ended", round, time.Since(start).Round(10*time.Millisecond))
	}

	for _, cz := range xdsZones {
		for _, uz := range xdsZones {
			want := float64(counted[cz][uz])
			if want == 0 {
				t.Errorf("%s -> %s: no traffic; every (client, upstream) zone pair should carry some", cz, uz)
			}
			line := fmt.Sprintf("%s -> %s: backends counted %.0f", cz, uz, want)
			for i, src := range sources {
				got := reported[i][[2]string{cz, uz}]
				line += fmt.Sprintf(", %s %.0f succeeded", src.name, got.succeeded)
				if math.Abs(got.succeeded-want) > lrsTolerance*want {
					t.Errorf("%s: %s -> %s: %.0f succeeded, backends counted %.0f (more than %.0f%% apart)", src.name, cz, uz, got.succeeded, want, 100*lrsTolerance)
				}
				if got.errored != 0 {
					t.Errorf("%s: %s -> %s: %.0f errored, want 0 (every RPC succeeded)", src.name, cz, uz, got.errored)
				}
			}
			t.Log(line)
		}
	}
	for i, src := range sources {
		for k, v := range reported[i] {
			if _, ok := xdsBackendCount[k[0]]; (!ok || xdsBackendCount[k[1]] == 0) && (v.succeeded > 0 || v.errored > 0) {
				t.Errorf("%s: %s -> %s: %+v, but no client there or no backend there", src.name, k[0], k[1], v)
			}
		}
	}
}

// lrsTotals is what the server recorded of one (client zone, upstream
// zone) flow since it started.
type lrsTotals struct{ succeeded, errored float64 }

// loadTable reads the server's load table for service over its JSON admin
// API: (client zone, upstream zone) -> totals of the test's clients.
func loadTable(t *testing.T, s *server, service string) map[[2]string]lrsTotals {
	t.Helper()
	resp, err := http.Get("http://" + s.httpAddr + "/v1/load?service=" + service)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/load?service=%s: %s: %s", service, resp.Status, body)
	}
	var table struct {
		Rows []struct {
			ClientZone     string `json:"client_zone"`
			ClientService  string `json:"client_service"`
			Locality       struct{ Zone string }
			TotalSucceeded json.Number `json:"total_succeeded"` // uint64: a string in protojson
			TotalErrored   json.Number `json:"total_errored"`
		}
	}
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatalf("GET /v1/load?service=%s: %v\n%s", service, err, body)
	}
	out := map[[2]string]lrsTotals{}
	for _, r := range table.Rows {
		if r.ClientService != "e2e-client" {
			t.Errorf("GET /v1/load: row of client service %q, want only the test's e2e-client: %+v", r.ClientService, r)
			continue
		}
		succeeded, err1 := r.TotalSucceeded.Float64()
		errored, err2 := r.TotalErrored.Float64()
		if err1 != nil || err2 != nil {
			t.Fatalf("GET /v1/load: bad totals in %+v", r)
		}
		k := [2]string{r.ClientZone, r.Locality.Zone}
		tot := out[k]
		tot.succeeded += succeeded
		tot.errored += errored
		out[k] = tot
	}
	return out
}

// lrsMetric reads spillway_lrs_requests_total from the server's /metrics:
// (client zone, upstream zone) -> totals.
func lrsMetric(t *testing.T, s *server) map[[2]string]lrsTotals {
	t.Helper()
	out := map[[2]string]lrsTotals{}
	for _, smp := range metricSeries(t, s, "spillway_lrs_requests_total") {
		k := [2]string{smp.labels["client_zone"], smp.labels["upstream_zone"]}
		tot := out[k]
		switch smp.labels["result"] {
		case "succeeded":
			tot.succeeded += smp.value
		case "errored":
			tot.errored += smp.value
		}
		out[k] = tot
	}
	return out
}

// dialXDSZone dials xds:///service with the real grpc-go xDS resolver and
// a bootstrap of its own placing the client in zone, so that clients of
// several zones live in one process.
func dialXDSZone(t *testing.T, server, service, zone string) *grpc.ClientConn {
	t.Helper()
	return xdstest.Dial(t, server, service, xdstest.Node{ID: "e2e-client-" + zone, Cluster: "e2e-client", Region: "r1", Zone: zone})
}

// edsWatch is a raw state-of-the-world ADS stream subscribed to one
// service's ClusterLoadAssignment, as a client in one zone.
type edsWatch struct {
	stream v3discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	names  []string
	resps  chan *v3discoverypb.DiscoveryResponse
	errc   chan error
}

func watchEDS(t *testing.T, server, service, zone string) *edsWatch {
	t.Helper()
	return watchEDSWith(t, server, service, zone, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// watchEDSWith is watchEDS dialling with opts (e.g. TLS credentials).
func watchEDSWith(t *testing.T, server, service, zone string, opts ...grpc.DialOption) *edsWatch {
	t.Helper()
	conn, err := grpc.NewClient(server, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		conn.Close()
	})
	stream, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := &edsWatch{stream: stream, names: []string{service}, resps: make(chan *v3discoverypb.DiscoveryResponse), errc: make(chan error, 1)}
	if err := stream.Send(&v3discoverypb.DiscoveryRequest{
		Node:          &v3corepb.Node{Id: "e2e-watch-" + zone, Cluster: "e2e-watch", Locality: &v3corepb.Locality{Region: "r1", Zone: zone}},
		TypeUrl:       edsTypeURL,
		ResourceNames: w.names,
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				w.errc <- err
				return
			}
			select {
			case w.resps <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

// until ACKs responses until one holds a ClusterLoadAssignment for which
// ok is true, and returns it; it fails the test after xdsWait.
func (w *edsWatch) until(t *testing.T, what string, ok func(*v3endpointpb.ClusterLoadAssignment) bool) *v3endpointpb.ClusterLoadAssignment {
	t.Helper()
	timeout := time.After(xdsWait)
	var last *v3endpointpb.ClusterLoadAssignment
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
				last = cla
				if ok(cla) {
					return cla
				}
			}
		case err := <-w.errc:
			t.Fatalf("ADS stream, waiting for %s: %v", what, err)
		case <-timeout:
			t.Fatalf("no EDS push with %s within %v; last: %v", what, xdsWait, last)
		}
	}
}

// claPorts lists the ports of the endpoints of cla (they all listen on
// 127.0.0.1).
func claPorts(cla *v3endpointpb.ClusterLoadAssignment) []uint32 {
	var out []uint32
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
		}
	}
	return out
}

// localityWeights returns the load_balancing_weight of each locality of
// cla by zone.
func localityWeights(cla *v3endpointpb.ClusterLoadAssignment) map[string]uint32 {
	out := map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		out[l.GetLocality().GetZone()] += l.GetLoadBalancingWeight().GetValue()
	}
	return out
}

type metricSample struct {
	labels map[string]string
	value  float64
}

// metricSeries returns every sample of the metric name (with labels) in
// the server's Prometheus text exposition.
func metricSeries(t *testing.T, s *server, name string) []metricSample {
	t.Helper()
	resp, err := s.httpClient().Get(s.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []metricSample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		smp, err := parseSample(rest)
		if err != nil {
			t.Fatalf("/metrics: %s%s: %v", name, rest, err)
		}
		out = append(out, smp)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// parseSample parses `{k="v",...} value [timestamp]` or ` value`.
func parseSample(s string) (metricSample, error) {
	smp := metricSample{labels: map[string]string{}}
	if strings.HasPrefix(s, "{") {
		s = s[1:]
		for {
			s = strings.TrimLeft(s, " ,")
			if strings.HasPrefix(s, "}") {
				s = s[1:]
				break
			}
			k, rest, ok := strings.Cut(s, "=")
			if !ok || !strings.HasPrefix(rest, `"`) {
				return smp, fmt.Errorf("bad label at %q", s)
			}
			// The value is a Go-style quoted string: find its closing quote.
			end := 1
			for ; end < len(rest) && rest[end] != '"'; end++ {
				if rest[end] == '\\' {
					end++
				}
			}
			if end >= len(rest) {
				return smp, fmt.Errorf("unterminated label value at %q", rest)
			}
			v, err := strconv.Unquote(rest[:end+1])
			if err != nil {
				return smp, fmt.Errorf("label %s: %w", k, err)
			}
			smp.labels[k] = v
			s = rest[end+1:]
		}
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return smp, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return smp, err
	}
	smp.value = v
	return smp, nil
}

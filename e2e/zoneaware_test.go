package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// The zone-aware tests (acceptance 6 of zone-aware weights) run the
// service zaService on backends in three zones with uneven capacity (1, 2
// and 3 backends in zone-a, zone-b and zone-c, as the xDS tests) and an
// open-loop load from one real grpc-go xDS client per zone with uneven
// demand (zone-a sends twice what each other zone sends): demand 50/25/25%
// against capacity 17/33/50%, so zone-a must spill and the plan is far
// from host counts (with capacity as host counts it keeps 66% of the RPCs
// in their client's zone; host-count weights keep 29%).
//
// Every backend serves at most zaConcurrency RPCs at once and rejects the
// next with ResourceExhausted at once; each RPC takes zaServiceTime.
// Throttling a zone multiplies its service time by zaThrottle, so that its
// in-flight requests grow and it rejects: overload shows as latency
// (in-progress requests in the load reports) and errors.
//
// Sizing. At zaRates a backend gets ~67 rps when the load follows
// capacity (the plan and host counts both put it about there): 0.33
// Erlang on 4 slots, so with Poisson-like arrivals it rejects ~0.04% of
// its RPCs (Erlang B), too few to move the error factor. Throttled to
// 100 ms, zone-b can serve 80 rps (20% of the load) and its host-count
// share is 133 rps: 6.7 Erlang per backend on 4 slots, it rejects ~50%
// (Erlang B; 230-270 rejections in the 4 s window measured with the
// dynamic model off). With it on, zone-b's in-flight requests per
// endpoint jump to several times the other zones', its health falls to
// ~0.1-0.2 at the first weights cycle that sees it and its load to 4-10%;
// the health rises back by at most 1/60 per second (the recovery ramp),
// so its errors stay near zero through the window. A milder overload
// (240 rps in all: zone-b's host-count share just at its throttled
// capacity) gave a slower, smaller move (its clients' weights took ~4 s
// to leave zone-b), so the load is not smaller: 400 rps, about 0.6 of a
// core under -race all told (clients, backends and the spillway process).
// The comparisons need the machine to sustain it: a run whose clients
// could not send 70% of their schedule in a window fails and says so,
// rather than compare starved runs (a starved open-loop client skips,
// then bursts).
const (
	zaService     = "zonal"
	zaConcurrency = 4                      // in-flight RPCs per backend; beyond, ResourceExhausted
	zaServiceTime = 5 * time.Millisecond   // per RPC, normally
	zaThrottle    = 20                     // service time multiplier of a throttled zone (100 ms)
	zaRPCTimeout  = 2 * time.Second        // client deadline per RPC
	zaTick        = 100 * time.Millisecond // sampling period of counters and weights
	zaCycle       = time.Second            // --lrs-interval and --weights-interval: one report cycle

	// zaPoints is the acceptance bound of the plan match: measured shares
	// within 5 points of the plan's.
	zaPoints = 0.05
	// zaSustain is the least share of their schedule the clients must
	// send in a measured window for the measure to count.
	zaSustain = 0.7
	// zaErrorCut is the acceptance bound of the throttle: the throttled
	// zone's errors with zone-aware weights at most 10% of those without.
	zaErrorCut = 0.10
)

// zaRates is the open-loop demand of the client in each zone, in RPCs per
// second.
var zaRates = map[string]float64{"zone-a": 200, "zone-b": 100, "zone-c": 100}

// zaTotalRate is the demand of all clients, in RPCs per second.
func zaTotalRate() float64 {
	var sum float64
	for _, r := range zaRates {
		sum += r
	}
	return sum
}

// zaZone returns the index of zone in xdsZones, or len(xdsZones) for any
// other (a caller that did not say).
func zaZone(zone string) int {
	for i, z := range xdsZones {
		if z == zone {
			return i
		}
	}
	return len(xdsZones)
}

// zaBackend is a real gRPC server (health service) with a concurrency
// limit and a service time that can change at run time. It counts the RPCs
// it served and rejected by caller zone.
type zaBackend struct {
	id, zone string
	port     uint32
	conns    atomic.Int64  // open client connections
	delay    atomic.Int64  // service time, ns
	slots    chan struct{} // admitted: in service or waiting
	workers  chan struct{} // in service

	served, rejected [4]atomic.Int64 // by client zone (zaZone)
}

func startZABackend(t *testing.T, id, zone string) *zaBackend {
	return startZABackendSized(t, id, zone, zaConcurrency, 0)
}

// startZABackendSized is startZABackend with workers RPCs in service at
// once and up to queue more waiting for a worker; beyond, it rejects.
func startZABackendSized(t *testing.T, id, zone string, workers, queue int) *zaBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &zaBackend{id: id, zone: zone, port: uint32(lis.Addr().(*net.TCPAddr).Port), slots: make(chan struct{}, workers+queue), workers: make(chan struct{}, workers)}
	b.delay.Store(int64(zaServiceTime))
	srv := grpc.NewServer(grpc.UnaryInterceptor(b.serve), grpc.StatsHandler(connCounter{&b.conns}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return b
}

func (b *zaBackend) serve(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	cz := len(xdsZones)
	if v := metadata.ValueFromIncomingContext(ctx, clientZoneKey); len(v) == 1 {
		cz = zaZone(v[0])
	}
	select {
	case b.slots <- struct{}{}:
	default:
		b.rejected[cz].Add(1)
		return nil, status.Errorf(codes.ResourceExhausted, "backend %s: %d RPCs in flight", b.id, cap(b.slots))
	}
	defer func() { <-b.slots }()
	select {
	case b.workers <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-b.workers }()
	timer := time.NewTimer(time.Duration(b.delay.Load()))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	b.served[cz].Add(1)
	return h(ctx, req)
}

// zaCounts is what the backends counted, by [client zone][upstream zone];
// the last client zone row is callers that did not say.
type zaCounts struct {
	served, rejected [4][3]int64
}

func (c zaCounts) sub(o zaCounts) zaCounts {
	for i := range c.served {
		for j := range c.served[i] {
			c.served[i][j] -= o.served[i][j]
			c.rejected[i][j] -= o.rejected[i][j]
		}
	}
	return c
}

// arrived is the RPCs that reached a backend, served or rejected.
func (c zaCounts) arrived(cz, uz int) int64 { return c.served[cz][uz] + c.rejected[cz][uz] }

// zaWatch is a raw state-of-the-world ADS stream subscribed to one
// service's ClusterLoadAssignment as a client in one zone. Its goroutine
// ACKs every response and keeps the latest locality weights and the
// history of changes, so the test knows which weights a grpc-go client in
// that zone was given at any moment.
type zaWatch struct {
	zone string

	// mu guards the fields below.
	mu      sync.Mutex
	cur     map[string]uint32 // upstream zone -> weight
	ports   int
	history []zaPush
	err     error
}

type zaPush struct {
	at      time.Time
	weights map[string]uint32
}

func startZAWatch(t *testing.T, server, service, zone string) *zaWatch {
	t.Helper()
	conn, err := grpc.NewClient(server, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		conn.Close()
		t.Fatal(err)
	}
	w := &zaWatch{zone: zone}
	names := []string{service}
	err = stream.Send(&v3discoverypb.DiscoveryRequest{
		Node:          &v3corepb.Node{Id: "e2e-za-watch-" + zone, Cluster: "e2e-watch", Locality: &v3corepb.Locality{Region: "r1", Zone: zone}},
		TypeUrl:       edsTypeURL,
		ResourceNames: names,
	})
	if err != nil {
		cancel()
		conn.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err == nil {
				err = stream.Send(&v3discoverypb.DiscoveryRequest{
					TypeUrl: edsTypeURL, ResourceNames: names, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
				})
			}
			if err != nil {
				if ctx.Err() == nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
				}
				return
			}
			now := time.Now()
			for _, r := range resp.GetResources() {
				cla := &v3endpointpb.ClusterLoadAssignment{}
				if err := r.UnmarshalTo(cla); err != nil {
					w.mu.Lock()
					w.err = fmt.Errorf("EDS response: %w", err)
					w.mu.Unlock()
					return
				}
				lw := localityWeights(cla)
				w.mu.Lock()
				w.cur, w.ports = lw, len(claPorts(cla))
				w.history = append(w.history, zaPush{at: now, weights: lw})
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	return w
}

// state returns the latest weights, the number of endpoints pushed and the
// stream's error.
func (w *zaWatch) state() (map[string]uint32, int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur, w.ports, w.err
}

// pushes returns the pushes received at or after since.
func (w *zaWatch) pushes(since time.Time) []zaPush {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []zaPush
	for _, p := range w.history {
		if !p.at.Before(since) {
			out = append(out, p)
		}
	}
	return out
}

// shareOf is the share of weights that goes to zone.
func shareOf(weights map[string]uint32, zone string) float64 {
	var sum float64
	for _, w := range weights {
		sum += float64(w)
	}
	if sum == 0 {
		return 0
	}
	return float64(weights[zone]) / sum
}

// zaPlan is the server's computed plan for the service at one moment.
type zaPlan struct {
	fallback string             // service-wide fallback key; "none" is from load reports
	sameZone float64            // estimated same-zone share of the zoned demand
	load     map[string]float64 // estimated share of the zoned demand per upstream zone; nil from metrics
	// From GET /v1/weights only: the weights of each client zone's route,
	// each route's explanation, and the capacity model of the zones.
	weights map[string]map[string]uint32
	explain []string
	zones   string
}

// zaFixture is a spillway server, the backends registered through its
// registry API, a raw EDS watch and a grpc-go xDS channel per client zone,
// and the load the channels carry.
type zaFixture struct {
	s *server
	// backendCount and rates are the topology: backends per zone and the
	// open-loop demand of each zone's client (RPCs per second).
	backendCount map[string]int
	rates        map[string]float64
	backends     []*zaBackend
	watches      []*zaWatch         // by client zone index
	conns        []*grpc.ClientConn // by client zone index
	// weightsAPI: GET /v1/weights serves the plan; else it is read from
	// the metrics.
	weightsAPI bool
	http       *http.Client

	ok, rejected, failed, dropped, skipped [3]atomic.Int64 // client side, by client zone

	// mu guards errs.
	mu   sync.Mutex
	errs []string // first unexpected RPC errors
}

func newZAFixture(t *testing.T, zoneAware bool) *zaFixture {
	t.Helper()
	return newZAFixtureWith(t, zoneAware, xdsBackendCount, zaRates)
}

// newZAFixtureWith is newZAFixture with counts[zone] backends in each
// zone and rates[zone] RPCs per second from each zone's client. The
// backends register together, so the service is new: every endpoint
// starts in slow start.
func newZAFixtureWith(t *testing.T, zoneAware bool, counts map[string]int, rates map[string]float64) *zaFixture {
	t.Helper()
	return newZAFixtureSized(t, zoneAware, counts, rates, zaConcurrency, 0)
}

// newZAFixtureSized is newZAFixtureWith with backends of workers and
// queue (startZABackendSized).
func newZAFixtureSized(t *testing.T, zoneAware bool, counts map[string]int, rates map[string]float64, workers, queue int) *zaFixture {
	t.Helper()
	s := newServer(t,
		"--xds-debounce", "20ms", "--lrs-interval", zaCycle.String(), "--weights-interval", zaCycle.String(),
		"--lease-ttl", "1h", fmt.Sprintf("--zone-aware=%t", zoneAware))
	s.start()
	f := &zaFixture{s: s, backendCount: counts, rates: rates, http: &http.Client{Timeout: 5 * time.Second}}
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, zone := range xdsZones {
		for i := range counts[zone] {
			b := startZABackendSized(t, fmt.Sprintf("%s-%d", zone, i), zone, workers, queue)
			if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: zaService, Endpoint: &pb.Endpoint{
				Id: b.id, Address: "127.0.0.1",
				Ports:    []*pb.Port{{Name: "grpc", Number: b.port}},
				Locality: &pb.Locality{Region: "r1", Zone: zone},
			}}); err != nil {
				t.Fatalf("register %s: %v", b.id, err)
			}
			f.backends = append(f.backends, b)
		}
	}
	for _, zone := range xdsZones {
		f.watches = append(f.watches, startZAWatch(t, s.grpcAddr, zaService, zone))
	}
	f.waitFor(t, xdsWait, "EDS with all backends in every zone's watch", func() bool {
		for _, w := range f.watches {
			_, n, err := w.state()
			if err != nil {
				t.Fatalf("EDS watch of %s: %v", w.zone, err)
			}
			if n != len(f.backends) {
				return false
			}
		}
		return true
	})
	for _, zone := range xdsZones {
		f.conns = append(f.conns, dialXDSZone(t, s.grpcAddr, zaService, zone))
	}
	// round_robin connects every client to every backend of every
	// locality; a locality is picked only once connected. One RPC per
	// client gets the channels out of idle; then wait for the connections.
	for i, zone := range xdsZones {
		rctx, rcancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, clientZoneKey, zone), xdsWait)
		_, err := healthpb.NewHealthClient(f.conns[i]).Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		rcancel()
		if err != nil {
			t.Fatalf("first RPC of the client in %s: %v", zone, err)
		}
	}
	f.waitFor(t, xdsWait, "every client connected to every backend", func() bool {
		for _, b := range f.backends {
			if b.conns.Load() < int64(len(xdsZones)) {
				return false
			}
		}
		return true
	})
	return f
}

// waitFor polls cond every 20 ms and fails the test if it is not true
// within d.
func (f *zaFixture) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counts sums the backends' counters.
func (f *zaFixture) counts() zaCounts {
	var c zaCounts
	for _, b := range f.backends {
		uz := zaZone(b.zone)
		for cz := range b.served {
			c.served[cz][uz] += b.served[cz].Load()
			c.rejected[cz][uz] += b.rejected[cz].Load()
		}
	}
	return c
}

// throttle multiplies the service time of zone's backends by factor.
func (f *zaFixture) throttle(zone string, factor int) {
	for _, b := range f.backends {
		if b.zone == zone {
			b.delay.Store(int64(zaServiceTime) * int64(factor))
		}
	}
}

// startLoad runs every client's open-loop load (zaRates) until the
// returned stop is called or d has passed. stop waits for the RPCs in
// flight.
func (f *zaFixture) startLoad(d time.Duration) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for i, zone := range xdsZones {
		rate := f.rates[zone]
		hc := healthpb.NewHealthClient(f.conns[i])
		wg.Go(func() {
			ctx := metadata.AppendToOutgoingContext(context.Background(), clientZoneKey, zone)
			var rpcs sync.WaitGroup
			defer rpcs.Wait()
			// At most 2 s of RPCs outstanding: more means the harness,
			// not a backend, is the bottleneck (counted as dropped).
			inflight := make(chan struct{}, int(2*rate))
			maxBurst := max(1, int(rate*0.02)) // a starved generator skips rather than bursts
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			start := time.Now()
			end := start.Add(d)
			issued := 0
			for {
				select {
				case <-quit:
					return
				case now := <-tick.C:
					if now.After(end) {
						return
					}
					due := int(rate*now.Sub(start).Seconds()) - issued
					if due > maxBurst {
						f.skipped[i].Add(int64(due - maxBurst))
						issued += due - maxBurst
						due = maxBurst
					}
					for range due {
						issued++
						select {
						case inflight <- struct{}{}:
						default:
							f.dropped[i].Add(1)
							continue
						}
						rpcs.Go(func() {
							defer func() { <-inflight }()
							rctx, cancel := context.WithTimeout(ctx, zaRPCTimeout)
							_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{})
							cancel()
							switch status.Code(err) {
							case codes.OK:
								f.ok[i].Add(1)
							case codes.ResourceExhausted:
								f.rejected[i].Add(1)
							default:
								f.failed[i].Add(1)
								f.mu.Lock()
								if len(f.errs) < 5 {
									f.errs = append(f.errs, fmt.Sprintf("client in %s: %v", zone, err))
								}
								f.mu.Unlock()
							}
						})
					}
				}
			}
		})
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}

// logClients logs what the clients saw, and the first unexpected errors.
func (f *zaFixture) logClients(t *testing.T) {
	t.Helper()
	for i, zone := range xdsZones {
		t.Logf("client in %s: %d ok, %d rejected, %d other errors, %d dropped, %d skipped",
			zone, f.ok[i].Load(), f.rejected[i].Load(), f.failed[i].Load(), f.dropped[i].Load(), f.skipped[i].Load())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.errs {
		t.Log(e)
	}
}

// checkClients fails the test on client errors other than the backends'
// rejections, or on RPCs the generator could not issue.
func (f *zaFixture) checkClients(t *testing.T) {
	t.Helper()
	for i, zone := range xdsZones {
		if n := f.failed[i].Load(); n > 0 {
			t.Errorf("client in %s: %d RPCs failed other than ResourceExhausted, want 0", zone, n)
		}
		if n := f.dropped[i].Load(); n > 0 {
			t.Errorf("client in %s: %d RPCs not issued because %d were outstanding, want 0", zone, n, int(2*f.rates[zone]))
		}
	}
}

// plan reads the server's current plan: from GET /v1/weights when the
// server has it, else from the metrics. It returns nil while there is
// none.
func (f *zaFixture) plan(t *testing.T) *zaPlan {
	t.Helper()
	if f.weightsAPI {
		return f.planAPI(t)
	}
	return f.planMetrics(t)
}

func (f *zaFixture) planAPI(t *testing.T) *zaPlan {
	t.Helper()
	resp, err := f.http.Get("http://" + f.s.httpAddr + "/v1/weights?service=" + zaService)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/weights?service=%s: %s: %s", zaService, resp.Status, body)
	}
	var w struct {
		Fallback struct{ Key string }
		SameZone float64 `json:"same_zone"`
		Zones    []struct {
			Zone          string
			Load          float64
			Trusted       float64
			InFlight      float64 `json:"in_flight_per_endpoint"`
			ErrorRatio    float64 `json:"error_ratio"`
			QueueFactor   float64 `json:"queue_factor"`
			ErrorFactor   float64 `json:"error_factor"`
			Health        float64
			CapacityShare float64 `json:"capacity_share"`
		}
		Routes []struct {
			ClientZone string `json:"client_zone"`
			Weights    []struct {
				Zone   string
				Weight uint32
			}
			Explain string
		}
	}
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatalf("GET /v1/weights?service=%s: %v\n%s", zaService, err, body)
	}
	p := &zaPlan{fallback: w.Fallback.Key, sameZone: w.SameZone, load: map[string]float64{}, weights: map[string]map[string]uint32{}}
	var zones []string
	for _, z := range w.Zones {
		p.load[z.Zone] = z.Load
		zones = append(zones, fmt.Sprintf("%s: trust %.2f, in flight %.2f/endpoint, errors %.1f%%, queue ×%.2f, errors ×%.2f, health %.2f, capacity %s, load %s",
			z.Zone, z.Trusted, z.InFlight, 100*z.ErrorRatio, z.QueueFactor, z.ErrorFactor, z.Health, pts(z.CapacityShare), pts(z.Load)))
	}
	p.zones = strings.Join(zones, "; ")
	for _, r := range w.Routes {
		p.weights[r.ClientZone] = map[string]uint32{}
		for _, zw := range r.Weights {
			p.weights[r.ClientZone][zw.Zone] = zw.Weight
		}
		p.explain = append(p.explain, r.Explain)
	}
	return p
}

func (f *zaFixture) planMetrics(t *testing.T) *zaPlan {
	t.Helper()
	p := &zaPlan{sameZone: math.NaN()}
	for _, smp := range metricSeries(t, f.s, "spillway_zoneaware_services") {
		if smp.value > 0 {
			p.fallback = smp.labels["state"]
		}
	}
	for _, smp := range metricSeries(t, f.s, "spillway_zoneaware_same_zone_ratio") {
		if smp.labels["service"] == zaService {
			p.sameZone = smp.value
		}
	}
	if p.fallback == "" {
		return nil
	}
	return p
}

// waitPlan waits until the plan is computed from load reports (fallback
// "none"), for at most d, and returns it. It finds out on the way whether
// the server serves GET /v1/weights.
func (f *zaFixture) waitPlan(t *testing.T, d time.Duration) *zaPlan {
	t.Helper()
	var p *zaPlan
	f.waitFor(t, d, "zone-aware plan from load reports (fallback none)", func() bool {
		p = f.planMetrics(t)
		return p != nil && p.fallback == "none"
	})
	f.weightsAPI = true
	if ap := f.planAPI(t); ap != nil {
		t.Logf("plan from GET /v1/weights")
		return ap
	}
	f.weightsAPI = false
	t.Logf("GET /v1/weights has no plan for %s: plan from spillway_zoneaware_same_zone_ratio and the pushed EDS weights", zaService)
	return p
}

// zaSlice is what happened during one sampling period: the backends'
// counts, the weights each client zone was given at its start, and the
// plan then (nil when not read).
type zaSlice struct {
	at      time.Time
	d       zaCounts
	weights []map[string]uint32 // by client zone index
	plan    *zaPlan
}

// record samples every zaTick from now until end and returns the slices.
func (f *zaFixture) record(t *testing.T, end time.Time, withPlan bool) []zaSlice {
	t.Helper()
	sample := func() zaSlice {
		s := zaSlice{at: time.Now(), d: f.counts()}
		for _, w := range f.watches {
			cur, _, err := w.state()
			if err != nil {
				t.Fatalf("EDS watch of %s: %v", w.zone, err)
			}
			s.weights = append(s.weights, cur)
		}
		if withPlan {
			s.plan = f.plan(t)
		}
		return s
	}
	var out []zaSlice
	prev := sample()
	for time.Now().Before(end) {
		time.Sleep(min(zaTick, time.Until(end)))
		next := sample()
		prev.d = next.d.sub(prev.d)
		out = append(out, prev)
		prev = next
	}
	return out
}

// zaMeasure sums slices: what the backends counted, and what the weights
// pushed and the plan expected of the same RPCs.
type zaMeasure struct {
	arrived  [3][3]float64 // client zone -> upstream zone, served or rejected
	rejected [3]float64    // by upstream zone
	unknown  int64         // RPCs without a client zone
	// expected of arrived by the pushed weights (each slice's RPCs of a
	// client zone split by the weights it was given at the slice's start)
	pushed [3][3]float64
	// the plan's same-zone share and load per upstream zone, averaged over
	// slices weighted by their RPCs; planN is the RPCs of slices with a plan
	planSame, planN float64
	planLoad        [3]float64
	planLoadOK      bool
}

func measure(slices []zaSlice) zaMeasure {
	var m zaMeasure
	m.planLoadOK = true
	for _, s := range slices {
		var n float64
		for cz := range xdsZones {
			var from float64
			for uz := range xdsZones {
				a := float64(s.d.arrived(cz, uz))
				m.arrived[cz][uz] += a
				from += a
				if s.d.rejected[cz][uz] > 0 {
					m.rejected[uz] += float64(s.d.rejected[cz][uz])
				}
			}
			for uz, zone := range xdsZones {
				m.pushed[cz][uz] += from * shareOf(s.weights[cz], zone)
			}
			n += from
		}
		for uz := range xdsZones {
			m.unknown += s.d.arrived(len(xdsZones), uz)
		}
		if s.plan != nil {
			m.planSame += n * s.plan.sameZone
			m.planN += n
			if s.plan.load == nil {
				m.planLoadOK = false
			}
			for uz, zone := range xdsZones {
				m.planLoad[uz] += n * s.plan.load[zone]
			}
		}
	}
	if m.planN > 0 {
		m.planSame /= m.planN
		for uz := range m.planLoad {
			m.planLoad[uz] /= m.planN
		}
	}
	return m
}

func (m *zaMeasure) total() float64 {
	var n float64
	for cz := range m.arrived {
		for uz := range m.arrived[cz] {
			n += m.arrived[cz][uz]
		}
	}
	return n
}

// sameZone is the measured share of RPCs that arrived in their client's
// zone, and what the pushed weights expected.
func (m *zaMeasure) sameZone() (got, pushed float64) {
	for z := range xdsZones {
		got += m.arrived[z][z]
		pushed += m.pushed[z][z]
	}
	return got / m.total(), pushed / m.total()
}

// load is the measured share of the RPCs that arrived in upstream zone
// uz, and what the pushed weights expected.
func (m *zaMeasure) load(uz int) (got, pushed float64) {
	for cz := range xdsZones {
		got += m.arrived[cz][uz]
		pushed += m.pushed[cz][uz]
	}
	return got / m.total(), pushed / m.total()
}

func pts(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// TestZoneAwarePlanMatch is the first half of acceptance 6 of zone-aware
// weights: with real grpc-go clients in three zones, uneven demand and
// uneven capacity, once the plan is computed from load reports the
// measured same-zone share and per-zone load match the plan within 5
// points, and each client zone's split matches the weights pushed to it.
//
// The plan moves during the window (the capacity model reacts to every
// cycle's reports), so the expected shares are averaged over 100 ms slices,
// each weighted by the RPCs it carried. The 5 points are about 5 binomial
// standard deviations for the ~2,000 RPCs of the window (each RPC picks a
// locality at random by weight: ~0.8 points for the same-zone share, up
// to ~1.1 for a zone's load).
func TestZoneAwarePlanMatch(t *testing.T) {
	const window = 5 * time.Second
	f := newZAFixture(t, true)
	stop := f.startLoad(30 * time.Second)
	defer stop()

	start := time.Now()
	f.waitPlan(t, 15*time.Second)
	t.Logf("plan from load reports %v after the load started", time.Since(start).Round(10*time.Millisecond))
	// Two more reports from every client (counted, not timed), so that
	// every client's reports of the full load are in the demand.
	f.waitReports(t, 2, "two report cycles after the first plan")
	p := f.plan(t)
	if p == nil || p.fallback != "none" {
		t.Fatalf("plan before the window: %+v, want fallback none", p)
	}
	for _, e := range p.explain {
		t.Logf("plan: %s", e)
	}
	winStart := time.Now()
	rec := f.record(t, winStart.Add(window), true)
	stop()
	f.logClients(t)

	m := measure(rec)
	if want := zaTotalRate() * window.Seconds(); m.total() < zaSustain*want {
		t.Fatalf("%.0f RPCs in the window, want about %.0f: the machine did not sustain the load, whose demand the plan follows", m.total(), want)
	}
	f.checkClients(t)
	if m.unknown > 0 {
		t.Errorf("%d RPCs reached a backend without a client zone", m.unknown)
	}
	if m.planN == 0 {
		t.Fatal("no plan during the window")
	}
	for _, s := range rec {
		if s.plan == nil || s.plan.fallback != "none" {
			t.Errorf("plan at %v into the window: %+v, want fallback none throughout", s.at.Sub(winStart).Round(time.Millisecond), s.plan)
			break
		}
	}
	// The weights pushed to each zone's clients are the plan's: how long
	// a push takes after a change of plan is a figure (logged: the
	// longest run of samples apart), not what is judged; that the
	// clients end up with the plan is. The server's plan and the pushed
	// weights are read until they agree (the plan still moves a cycle
	// after the load stopped).
	if f.weightsAPI {
		for cz, zone := range xdsZones {
			run, longest := 0, 0
			for _, s := range rec {
				if equalWeights(s.weights[cz], s.plan.weights[zone]) {
					run = 0
					continue
				}
				run++
				longest = max(longest, run)
			}
			t.Logf("weights pushed to %s: at most %v apart from the plan in the window (samples every %v)", zone, time.Duration(longest)*zaTick, zaTick)
		}
		f.waitFor(t, 15*time.Second, "the weights pushed to every client zone are the server's plan", func() bool {
			p := f.planAPI(t)
			if p == nil {
				return false
			}
			for cz, zone := range xdsZones {
				if cur, _, _ := f.watches[cz].state(); !equalWeights(cur, p.weights[zone]) {
					return false
				}
			}
			return true
		})
	}
	t.Logf("%.0f RPCs in %v; %.0f rejected", m.total(), window, m.rejected[0]+m.rejected[1]+m.rejected[2])
	last := ""
	for _, s := range rec {
		if s.plan != nil && s.plan.zones != last {
			last = s.plan.zones
			t.Logf("plan at %v: %s", s.at.Sub(winStart).Round(100*time.Millisecond), last)
		}
	}
	for cz, w := range f.watches {
		var line []string
		for _, p := range w.pushes(winStart) {
			line = append(line, fmt.Sprintf("%v %v", p.at.Sub(winStart).Round(time.Millisecond), p.weights))
		}
		t.Logf("pushes to %s during the window: %d %v", xdsZones[cz], len(line), line)
	}

	got, pushed := m.sameZone()
	t.Logf("same zone: measured %s, plan %s, pushed weights %s", pts(got), pts(m.planSame), pts(pushed))
	if math.IsNaN(m.planSame) || math.Abs(got-m.planSame) > zaPoints {
		t.Errorf("same-zone share = %s, plan %s: more than %.0f points apart", pts(got), pts(m.planSame), 100*zaPoints)
	}
	if math.Abs(got-pushed) > zaPoints {
		t.Errorf("same-zone share = %s, pushed weights give %s: more than %.0f points apart", pts(got), pts(pushed), 100*zaPoints)
	}
	for uz, zone := range xdsZones {
		got, pushed := m.load(uz)
		want := pushed
		if m.planLoadOK {
			want = m.planLoad[uz]
		}
		t.Logf("load on %s: measured %s, plan %s, pushed weights %s", zone, pts(got), pts(want), pts(pushed))
		if math.Abs(got-want) > zaPoints {
			t.Errorf("load share of %s = %s, plan %s: more than %.0f points apart", zone, pts(got), pts(want), 100*zaPoints)
		}
		if math.Abs(got-pushed) > zaPoints {
			t.Errorf("load share of %s = %s, pushed weights give %s: more than %.0f points apart", zone, pts(got), pts(pushed), 100*zaPoints)
		}
	}
	for cz, czone := range xdsZones {
		var from float64
		for uz := range xdsZones {
			from += m.arrived[cz][uz]
		}
		var line []string
		for uz, uzone := range xdsZones {
			got, want := m.arrived[cz][uz]/from, m.pushed[cz][uz]/from
			// Each RPC picks a locality at random by weight: binomial
			// noise, as in checkSplit (TestXDSLocalitySplit).
			tol := max(zaPoints, splitSigmas*math.Sqrt(want*(1-want)/from))
			line = append(line, fmt.Sprintf("%s %s (pushed %s ± %.1f)", uzone, pts(got), pts(want), 100*tol))
			if math.Abs(got-want) > tol {
				t.Errorf("client in %s sent %s of its RPCs to %s, pushed weights give %s: more than %.1f points apart", czone, pts(got), uzone, pts(want), 100*tol)
			}
		}
		t.Logf("client in %s (%.0f RPCs): %s", czone, from, strings.Join(line, ", "))
	}
	// The plan must differ from host counts, or the test shows nothing:
	// host counts would keep 1/6, 2/6 and 3/6 of each zone's RPCs local
	// (29%). Zone-b and zone-c have spare capacity and keep their own
	// clients' RPCs local whatever zone-a's capacity is found to be, so
	// the plan keeps at least ~50% local: 10 points of margin are a sanity
	// check, not an acceptance bound.
	var hostCounts float64
	for cz, zone := range xdsZones {
		var from float64
		for uz := range xdsZones {
			from += m.arrived[cz][uz]
		}
		hostCounts += from * float64(xdsBackendCount[zone]) / float64(len(f.backends))
	}
	hostCounts /= m.total()
	t.Logf("same zone under host-count weights would be %s", pts(hostCounts))
	if got < hostCounts+0.1 {
		t.Errorf("same-zone share = %s, want at least 10 points above host counts (%s)", pts(got), pts(hostCounts))
	}
}

func equalWeights(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// zaThrottleRun is what one run of the throttle scenario measured.
type zaThrottleRun struct {
	pre, post   zaMeasure
	preShare    float64 // the throttled zone's share of the RPCs in the window before the throttle
	postShare   float64 // and in the window after it
	postErrors  float64 // its rejections in the window after it
	otherErrors float64 // the other zones' rejections in that window
	// Its share of the demand (zaRates) under the weights pushed before
	// the throttle, and under healthy-endpoint counts.
	prePushed, hostShare float64
	// The first push after the throttle that moved traffic away (see
	// movedAway), when, and the share of the demand it left.
	moved     bool
	firstMove time.Duration
	movedTo   float64
	// reportsAtMove is how many LRS reports per client the server had
	// received after the throttle when that push came; postAfter is when
	// the post window began, after two reports per client.
	reportsAtMove float64
	postAfter     time.Duration
}

// reportMark is the server's count of per-cluster LRS reports at a time.
type reportMark struct {
	at time.Time
	n  float64
}

// lrsReports reads spillway_lrs_cluster_reports_total, or -1 when the
// server does not answer (from a goroutine, where the test cannot stop).
func (f *zaFixture) lrsReports() float64 {
	resp, err := f.http.Get("http://" + f.s.httpAddr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "spillway_lrs_cluster_reports_total "); ok {
			if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// waitReports waits until the server has received perClient more LRS
// reports from every client (one stream each) than when it is called:
// report cycles counted, not timed, so that a busy machine's late
// reports still make whole cycles. The bound is on a hang only.
func (f *zaFixture) waitReports(t *testing.T, perClient int, what string) {
	t.Helper()
	clients := float64(len(f.conns))
	base := f.lrsReports()
	if base < 0 {
		t.Fatal("spillway_lrs_cluster_reports_total not readable from /metrics")
	}
	want := float64(perClient) * clients
	bound := 30*time.Second + time.Duration(perClient)*5*zaCycle
	for deadline := time.Now().Add(bound); f.lrsReports()-base < want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %.0f LRS reports in %v, want %d per client (%.0f)", what, f.lrsReports()-base, bound, perClient, want)
		}
	}
}

// sampleReports samples lrsReports every 20 ms until stop is called, and
// returns the marks then.
func (f *zaFixture) sampleReports() (stop func() []reportMark) {
	quit, done := make(chan struct{}), make(chan []reportMark, 1)
	go func() {
		var marks []reportMark
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := f.lrsReports(); n >= 0 {
				marks = append(marks, reportMark{time.Now(), n})
			}
			select {
			case <-quit:
				done <- marks
				return
			case <-tick.C:
			}
		}
	}()
	return func() []reportMark { close(quit); return <-done }
}

// reportsBy is the count of the last mark at or before at, less base.
func reportsBy(marks []reportMark, at time.Time, base float64) float64 {
	n := 0.0
	for _, m := range marks {
		if m.at.After(at) {
			break
		}
		n = m.n - base
	}
	return n
}

// movedAway reports whether a share of the demand s, under pushed weights,
// has moved away from the throttled zone: below half of its share under
// host counts, and (should the capacity model have given it less than
// that already before the throttle) at least 2 points below what it had
// then.
func (r *zaThrottleRun) movedAway(s float64) bool {
	return s < r.hostShare/2 && s < r.prePushed-0.02
}

// demandShare is the share of the demand (zaRates) that the weights given
// to each client zone (by zone index) send to zone.
func demandShare(weights []map[string]uint32, zone string) float64 {
	var to float64
	for cz, czone := range xdsZones {
		to += zaRates[czone] * shareOf(weights[cz], zone)
	}
	return to / zaTotalRate()
}

// runThrottle runs the throttle scenario once. The load runs from the
// start; at throttleAt, zone-b's service time is multiplied by zaThrottle;
// the pre window is the 3 s before, the post window starts once every
// client has sent two LRS reports after the throttle (two report cycles,
// counted, so that a busy machine's late reports do not put a part of
// the reaction into the window). Both runs follow the same schedule.
func runThrottle(t *testing.T, zoneAware bool) zaThrottleRun {
	const (
		throttled  = "zone-b"
		throttleAt = 8 * time.Second // after the load starts
		preWindow  = 3 * time.Second
		postWindow = 4 * time.Second
	)
	clients := float64(len(xdsZones)) // one LRS stream each, one cluster
	tz := zaZone(throttled)
	f := newZAFixture(t, zoneAware)
	start := time.Now()
	// The load outlasts the post window by far: the schedule below waits
	// for reports, and a stop at the end of the window ends it.
	stop := f.startLoad(throttleAt + 60*time.Second)
	defer stop()

	if zoneAware {
		f.waitPlan(t, throttleAt-preWindow)
		t.Logf("plan from load reports %v after the load started", time.Since(start).Round(10*time.Millisecond))
	}
	time.Sleep(time.Until(start.Add(throttleAt - preWindow)))
	r := zaThrottleRun{hostShare: float64(xdsBackendCount[throttled]) / float64(len(f.backends))}
	r.pre = measure(f.record(t, start.Add(throttleAt), false))
	base := f.lrsReports()
	if base < 0 {
		t.Fatal("spillway_lrs_cluster_reports_total not readable from /metrics")
	}
	stopMarks := f.sampleReports()
	f.throttle(throttled, zaThrottle)
	at := time.Now()
	// The weights every client zone had when the throttle began.
	preWeights := make([]map[string]uint32, len(f.watches))
	for cz, w := range f.watches {
		preWeights[cz], _, _ = w.state()
	}
	for deadline := at.Add(30 * time.Second); f.lrsReports()-base < 2*clients; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("zone-aware=%t: %.0f LRS reports in 30s after the throttle, want two per client (%.0f)", zoneAware, f.lrsReports()-base, 2*clients)
		}
	}
	postFrom := time.Now()
	r.postAfter = postFrom.Sub(at)
	r.post = measure(f.record(t, postFrom.Add(postWindow), false))
	stop()
	marks := stopMarks()
	f.logClients(t)

	r.preShare, _ = r.pre.load(tz)
	r.postShare, _ = r.post.load(tz)
	r.postErrors = r.post.rejected[tz]
	r.otherErrors = r.post.rejected[0] + r.post.rejected[1] + r.post.rejected[2] - r.postErrors
	t.Logf("zone-aware=%t: %s: share %s before the throttle (%.0f RPCs), %s in the window %v to %v after it, from two reports per client on (%.0f RPCs); %.0f rejections there (%.0f in the other zones)",
		zoneAware, throttled, pts(r.preShare), r.pre.total(), pts(r.postShare), r.postAfter.Round(time.Millisecond), (r.postAfter + postWindow).Round(time.Millisecond), r.post.total(), r.postErrors, r.otherErrors)

	// When did the pushed weights move the traffic away? Replay the
	// pushes every client zone got after the throttle, in order.
	type push struct {
		cz int
		zaPush
	}
	var pushes []push
	for cz, w := range f.watches {
		for _, p := range w.pushes(at) {
			pushes = append(pushes, push{cz, p})
		}
	}
	slices.SortFunc(pushes, func(a, b push) int { return a.at.Compare(b.at) })
	r.prePushed = demandShare(preWeights, throttled)
	t.Logf("zone-aware=%t: pushed weights at the throttle: %v; %s's share of the demand %s", zoneAware, preWeights, throttled, pts(r.prePushed))
	cur := slices.Clone(preWeights)
	for i, p := range pushes {
		cur[p.cz] = p.weights
		s := demandShare(cur, throttled)
		if i < 10 {
			t.Logf("zone-aware=%t: push to %s %v after the throttle: %v; %s's share of the demand %s", zoneAware, xdsZones[p.cz], p.at.Sub(at).Round(time.Millisecond), p.weights, throttled, pts(s))
		}
		if !r.moved && r.movedAway(s) {
			r.moved, r.firstMove, r.movedTo = true, p.at.Sub(at), s
			r.reportsAtMove = reportsBy(marks, p.at, base) / clients
		}
	}
	if zoneAware {
		if p := f.plan(t); p != nil {
			for _, e := range p.explain {
				t.Logf("plan at the end: %s", e)
			}
			t.Logf("plan at the end: %s", p.zones)
		}
	}

	// The comparison of the two runs needs the same load in both: the
	// open-loop clients skip what a starved machine cannot send.
	for _, w := range []struct {
		name string
		m    zaMeasure
		d    time.Duration
	}{{"before", r.pre, preWindow}, {"after", r.post, postWindow}} {
		if want := zaTotalRate() * w.d.Seconds(); w.m.total() < zaSustain*want {
			t.Fatalf("zone-aware=%t: %.0f RPCs in the window %s the throttle, want about %.0f: the machine did not sustain the load, the runs would not be comparable",
				zoneAware, w.m.total(), w.name, want)
		}
	}
	f.checkClients(t)
	return r
}

// TestZoneAwareThrottle is the second half of acceptance 6 of zone-aware
// weights: the same load and the same throttling of zone-b at the same
// moment, once with zone-aware weights and once without (healthy-count
// weights: the dynamic model off). With them, the weights pushed within
// two report cycles of the throttle move zone-b's traffic away, the
// share it gets in a window starting two report cycles after the throttle
// is below half of what it gets without them, and its errors in that
// window are at least 90% fewer than without (and those of all zones
// together at least 75% fewer).
//
// "Moved away" is measured against zone-b's share without the dynamic
// model (a third: 2 of 6 backends), not against its share just before
// the throttle: the capacity model makes the latter wander (19% to 46%
// over runs of this very scenario) on a healthy service, and the level
// the throttled zone settles at (5-10% measured) is set by the throttle,
// not by where it started.
func TestZoneAwareThrottle(t *testing.T) {
	var on, off zaThrottleRun
	t.Run("zone-aware=on", func(t *testing.T) { on = runThrottle(t, true) })
	if t.Failed() {
		return
	}
	t.Run("zone-aware=off", func(t *testing.T) { off = runThrottle(t, false) })
	if t.Failed() {
		return
	}
	// Errors per RPC sent in the window, so that a run that sent a few
	// percent less is not credited for it.
	onRatio, offRatio := on.postErrors/on.post.total(), off.postErrors/off.post.total()
	cut := 1 - onRatio/offRatio
	t.Logf("zone-b's errors in the window: %.0f of %.0f RPCs with zone-aware weights, %.0f of %.0f without: cut %.1f%%; its share %s with, %s without",
		on.postErrors, on.post.total(), off.postErrors, off.post.total(), 100*cut, pts(on.postShare), pts(off.postShare))
	if off.postErrors < 50 {
		t.Fatalf("without zone-aware weights the throttled zone rejected %.0f RPCs in the window, want at least 50 for the comparison to mean anything", off.postErrors)
	}
	if off.moved {
		t.Errorf("without zone-aware weights the pushed weights moved zone-b's traffic away (%v after the throttle, to %s of the demand): want host counts throughout", off.firstMove, pts(off.movedTo))
	}
	// "Within two report cycles" is counted in the reports the server
	// received after the throttle, not timed: the first one covers part
	// of the throttle, the second a whole interval of it, and the weights
	// cycle after it may run after a third report has come in. So the
	// move must come before any client's fourth.
	switch {
	case !on.moved:
		t.Errorf("with zone-aware weights no push after the throttle moved zone-b's traffic away (below %s of the demand)", pts(min(on.hostShare/2, on.prePushed-0.02)))
	case on.reportsAtMove > 3:
		t.Errorf("with zone-aware weights the push that moved zone-b's traffic away came %v after the throttle, after %.2f LRS reports per client, want within two report cycles (at most 3 reports each)",
			on.firstMove.Round(time.Millisecond), on.reportsAtMove)
	default:
		t.Logf("with zone-aware weights the push that moved zone-b's traffic away (to %s of the demand, from %s) came %v after the throttle, after %.2f LRS reports per client",
			pts(on.movedTo), pts(on.prePushed), on.firstMove.Round(time.Millisecond), on.reportsAtMove)
	}
	if on.postShare >= off.postShare/2 || on.postShare >= on.preShare {
		t.Errorf("zone-b's share of the RPCs from two report cycles after the throttle = %s with zone-aware weights (%s before the throttle), %s without: want below half of the latter, and below the former",
			pts(on.postShare), pts(on.preShare), pts(off.postShare))
	}
	if cut < 1-zaErrorCut {
		t.Errorf("zone-b's errors in the window = %.0f of %.0f RPCs with zone-aware weights, %.0f of %.0f without: cut %.1f%%, want at least %.0f%%",
			on.postErrors, on.post.total(), off.postErrors, off.post.total(), 100*cut, 100*(1-zaErrorCut))
	}
	// The traffic moved must not merely have moved the errors: with the
	// dynamic model the errors of all zones together must still be cut by
	// three quarters. Not 90%: the capacity model can pile the moved
	// traffic on one zone (zone-c carried 91% of the load in one run,
	// zone-a's health having fallen to 0.21 on in-flight noise alone), and
	// a busy machine turns that into a few rejections there (49 in 1,511
	// RPCs in that run, against 280 of 1,451 in zone-b without the model).
	onAll, offAll := on.postErrors+on.otherErrors, off.postErrors+off.otherErrors
	if allCut := 1 - (onAll/on.post.total())/(offAll/off.post.total()); allCut < 0.75 {
		t.Errorf("errors of all zones in the window = %.0f of %.0f RPCs with zone-aware weights (%.0f outside zone-b), %.0f of %.0f without: cut %.1f%%, want at least 75%%",
			onAll, on.post.total(), on.otherErrors, offAll, off.post.total(), 100*allCut)
	}
}

// zaWindowLoad is the share of the RPCs of slices[i:j] that arrived in
// each upstream zone, and their number.
func zaWindowLoad(slices []zaSlice) (share [3]float64, n float64) {
	for _, s := range slices {
		for cz := range len(xdsZones) + 1 {
			for uz := range xdsZones {
				a := float64(s.d.arrived(cz, uz))
				share[uz] += a
				n += a
			}
		}
	}
	if n > 0 {
		for uz := range share {
			share[uz] /= n
		}
	}
	return share, n
}

// TestZoneAwareNewService is issue 10, point 1, with real grpc-go clients:
// a service whose backends all register together (every endpoint new, in
// slow start) and whose heaviest client zone has few of them. From the
// first weights cycle computed from load reports on, no zone gets more
// than its capacity share (its share of the backends, all alike) + 5
// points in any 2-second window: under the pushed weights, and as the
// backends counted it, beyond the binomial noise of the window's RPCs;
// and from three report cycles later (three LRS reports per client,
// counted) the measured same-zone share is within 2 points of the
// optimum Σ min(D, C). Before the fix the heaviest zone earned
// trust first and pulled the load to itself (46% on a quarter of the
// backends for ~30 s).
func TestZoneAwareNewService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts map[string]int
		rates  map[string]float64
	}{
		{"3-3-2/zone-c-sends-60pct", map[string]int{"zone-a": 3, "zone-b": 3, "zone-c": 2}, map[string]float64{"zone-a": 80, "zone-b": 80, "zone-c": 240}},
		{"1-2-3/zone-a-sends-50pct", xdsBackendCount, zaRates},
	} {
		t.Run(tc.name, func(t *testing.T) { runNewService(t, tc.counts, tc.rates) })
	}
}

func runNewService(t *testing.T, counts map[string]int, rates map[string]float64) {
	const (
		window  = 2 * time.Second
		settle  = 3 * zaCycle
		measure = 10 * time.Second
	)
	f := newZAFixtureWith(t, true, counts, rates)
	// The load starts once every client has the weights the server
	// computes from client counts (its plan before any load report), as
	// when a new service's clients connect before they send. (Before the
	// LRS table let a report replace its stream's earlier samples, a
	// locality a client stopped reporting counted for three more
	// intervals, and the host-count spill of the first seconds counted as
	// demand twice: zone-b's client 106 rps for its 80.)
	f.waitClientCountWeights(t)
	clients := float64(len(xdsZones)) // one LRS stream each, one cluster
	base := f.lrsReports()
	if base < 0 {
		t.Fatal("spillway_lrs_cluster_reports_total not readable from /metrics")
	}
	stopMarks := f.sampleReports()
	stop := f.startLoad(60 * time.Second)
	defer stop()
	start := time.Now()
	f.waitPlan(t, 15*time.Second)
	first := time.Now()
	t.Logf("first plan from load reports %v after the load started", first.Sub(start).Round(10*time.Millisecond))
	// A client's first report of the load covers time before the load
	// began (its interval started earlier) and understates its demand: a
	// cycle computed before a second report of each client can rest on
	// such reports (one run: zone-a's client at a fraction of its 200
	// rps, so its zone kept 99% local for a cycle). The first cycle
	// computed from load reports of the load alone runs after the second
	// report of every client, so by a third (a report interval later; the
	// weights cycle has the same period) it has run; it counts once its
	// weights reach every client zone. Counted and waited for, not timed:
	// a busy machine makes reports and pushes late.
	if f.lrsReports()-base < 3*clients {
		for deadline := time.Now().Add(30 * time.Second); f.lrsReports()-base < 3*clients; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%.0f LRS reports in 30s after the load started, want three per client", f.lrsReports()-base)
			}
		}
	}
	f.waitFor(t, 15*time.Second, "the weights of the plan from load reports pushed to every client zone", func() bool {
		p := f.planAPI(t)
		if p == nil || p.fallback != "none" {
			return false
		}
		for cz, zone := range xdsZones {
			if cur, _, _ := f.watches[cz].state(); !equalWeights(cur, p.weights[zone]) {
				return false
			}
		}
		return true
	})
	first = time.Now()
	rec := f.record(t, first.Add(settle+measure), true)
	stop()
	marks := stopMarks()
	f.logClients(t)
	// The same-zone share is judged from three report cycles after the
	// first plan: three more reports per client.
	atFirst := reportsBy(marks, first, 0)
	settleAt := first.Add(settle + measure)
	for _, m := range marks {
		if m.at.After(first) && m.n-atFirst >= 3*clients {
			settleAt = m.at
			break
		}
	}
	if left := first.Add(settle + measure).Sub(settleAt); left < measure/2 {
		t.Fatalf("three LRS reports per client took %v after the first plan, leaving %v of the %v recorded to judge: the machine did not sustain the load", settleAt.Sub(first).Round(time.Millisecond), left.Round(time.Millisecond), settle+measure)
	}
	t.Logf("three report cycles after the first plan: %v (three reports per client)", settleAt.Sub(first).Round(time.Millisecond))
	if p := f.plan(t); p != nil {
		for _, e := range p.explain {
			t.Logf("plan at the end: %s", e)
		}
		t.Logf("plan at the end: %s", p.zones)
	}

	var capShare [3]float64
	var backends, rate float64
	for _, zone := range xdsZones {
		backends += float64(counts[zone])
		rate += rates[zone]
	}
	for uz, zone := range xdsZones {
		capShare[uz] = float64(counts[zone]) / backends
	}
	all, n := zaWindowLoad(rec)
	if want := rate * (settle + measure).Seconds(); n < zaSustain*want {
		t.Fatalf("%.0f RPCs recorded, want about %.0f: the machine did not sustain the load", n, want)
	}
	f.checkClients(t)
	t.Logf("load over the run %s on capacity %s", fmtShares(all), fmtShares(capShare))
	// What happened, second by second, and the weights pushed: a failure
	// is read from these.
	for i := 0; i < len(rec); i += int(time.Second / zaTick) {
		share, n := zaWindowLoad(rec[i:min(len(rec), i+int(time.Second/zaTick))])
		t.Logf("%v after the first plan: %.0f RPCs, load %s; weights %v", rec[i].at.Sub(first).Round(100*time.Millisecond), n, fmtShares(share), rec[i].weights)
	}
	last := ""
	for _, s := range rec {
		if s.plan != nil && s.plan.zones != last {
			last = s.plan.zones
			t.Logf("plan at %v: %s; %s", s.at.Sub(first).Round(100*time.Millisecond), last, strings.Join(s.plan.explain, " | "))
		}
	}
	for cz, w := range f.watches {
		var line []string
		for _, p := range w.pushes(start) {
			line = append(line, fmt.Sprintf("%v %v", p.at.Sub(first).Round(time.Millisecond), p.weights))
		}
		t.Logf("pushes to %s from the load's start: %v", xdsZones[cz], line)
	}

	// Every 2-second window, sliding by one sample. What the pushed
	// weights send a zone must stay within zaPoints of its capacity
	// share; what the backends counted may exceed that by the binomial
	// noise of the window's RPCs (each picks a locality at random by
	// weight): zaSigmas standard deviations of the expected share.
	const zaSigmas = 4
	per := int(window / zaTick)
	worst, worstAt, worstZone := math.Inf(-1), time.Duration(0), 0
	worstPushed, worstPushedAt, worstPushedZone := math.Inf(-1), time.Duration(0), 0
	for i := 0; i+per <= len(rec); i++ {
		share, n := zaWindowLoad(rec[i : i+per])
		expect := zaWindowPushed(rec[i : i+per])
		for uz := range xdsZones {
			if ex := expect[uz] - capShare[uz]; ex > worstPushed {
				worstPushed, worstPushedAt, worstPushedZone = ex, rec[i].at.Sub(first), uz
			}
			noise := zaSigmas * math.Sqrt(expect[uz]*(1-expect[uz])/max(n, 1))
			if ex := share[uz] - capShare[uz] - noise; ex > worst {
				worst, worstAt, worstZone = ex, rec[i].at.Sub(first), uz
			}
		}
	}
	t.Logf("largest excess of a zone's share over its capacity share in a %v window: under the pushed weights %+.1f points (%s, window at %v); measured, beyond %d binomial sigmas, %+.1f points (%s, window at %v)",
		window, 100*worstPushed, xdsZones[worstPushedZone], worstPushedAt.Round(100*time.Millisecond), zaSigmas, 100*worst, xdsZones[worstZone], worstAt.Round(100*time.Millisecond))
	if worstPushed > zaPoints {
		t.Errorf("the pushed weights sent %s %+.1f points over its capacity share %s in the %v window %v after the first plan from load reports, want at most %.0f",
			xdsZones[worstPushedZone], 100*worstPushed, pts(capShare[worstPushedZone]), window, worstPushedAt.Round(100*time.Millisecond), 100*zaPoints)
	}
	if worst > zaPoints {
		t.Errorf("%s carried %+.1f points over its capacity share %s plus %d binomial sigmas in the %v window %v after the first plan from load reports, want at most %.0f",
			xdsZones[worstZone], 100*worst, pts(capShare[worstZone]), zaSigmas, window, worstAt.Round(100*time.Millisecond), 100*zaPoints)
	}

	// Same-zone after three cycles, against the optimum of the measured
	// demand and the backends' capacity, for the server as configured:
	// each client zone keeps its probe share (--probe-share, default 1%)
	// on the other zones, so a zone can keep at most 99% of its own
	// clients' RPCs local.
	var from [3]float64
	var local, sum float64
	for _, s := range rec {
		if s.at.Before(settleAt) {
			continue
		}
		for cz := range xdsZones {
			for uz := range xdsZones {
				a := float64(s.d.arrived(cz, uz))
				from[cz] += a
				sum += a
				if cz == uz {
					local += a
				}
			}
		}
	}
	const probeShare = 0.01 // the server's default
	var opt float64
	for z := range xdsZones {
		opt += min(from[z]/sum*(1-probeShare), capShare[z])
	}
	got := local / sum
	t.Logf("same zone from %v after the first plan: %s of %.0f RPCs, optimum %s", settleAt.Sub(first).Round(time.Millisecond), pts(got), sum, pts(opt))
	if math.Abs(got-opt) > 0.02 {
		t.Errorf("same-zone share = %s, optimum %s: more than 2 points apart", pts(got), pts(opt))
	}
}

// zaWindowPushed is the share of the RPCs of slices from zoned clients
// that the weights pushed to each client zone at each slice's start send
// to each upstream zone.
func zaWindowPushed(slices []zaSlice) (share [3]float64) {
	var n float64
	for _, s := range slices {
		for cz := range xdsZones {
			var from float64
			for uz := range xdsZones {
				from += float64(s.d.arrived(cz, uz))
			}
			for uz, zone := range xdsZones {
				share[uz] += from * shareOf(s.weights[cz], zone)
			}
			n += from
		}
	}
	if n > 0 {
		for uz := range share {
			share[uz] /= n
		}
	}
	return share
}

func fmtShares(s [3]float64) string {
	var parts []string
	for uz, zone := range xdsZones {
		parts = append(parts, zone+" "+pts(s[uz]))
	}
	return strings.Join(parts, ", ")
}

// waitClientCountWeights waits until every client zone's watch has the
// weights the server computes from client counts (see runNewService).
func (f *zaFixture) waitClientCountWeights(t *testing.T) {
	t.Helper()
	f.waitFor(t, 15*time.Second, "weights from client counts pushed to every client zone", func() bool {
		if p := f.planMetrics(t); p == nil || p.fallback != "client_counts" {
			return false
		}
		ap := f.planAPI(t)
		if ap == nil {
			return false
		}
		for cz, w := range f.watches {
			cur, _, _ := w.state()
			if !equalWeights(cur, ap.weights[xdsZones[cz]]) {
				return false
			}
		}
		return true
	})
}

// TestZoneAwareDegradedZone is issue 10, point 2, with real grpc-go
// clients: zone-b's backends slow down to a tenth of their capacity while
// the load runs; once the weights have settled, zone-b is sent no more
// than it can serve and under 0.1% of all RPCs fail; when it recovers,
// its share comes back without overshooting.
//
// Sizing. The backends here have 2 workers and a queue of 32: a real
// server queues before it rejects. With the fail-fast 4-slot backends of
// the other tests a zone rejects from well below its capacity (Erlang
// loss: 18% at 70% utilisation), so "under capacity" could not mean "no
// errors" for any weights. 2 workers at 5 ms serve 400 rps per backend;
// throttled ×10 (50 ms) 40, so zone-b's 2 backends serve 80 rps where the
// plan sends it ~133 (a third of 400).
func TestZoneAwareDegradedZone(t *testing.T) {
	const (
		throttled    = "zone-b"
		factor       = 10
		workers      = 2
		queue        = 32
		settleCycles = 8               // report cycles after the throttle (counted)
		window       = 6 * time.Second // settled window, and the recovery window
	)
	tz := zaZone(throttled)
	capRPS := float64(xdsBackendCount[throttled]*workers) / (time.Duration(factor) * zaServiceTime).Seconds()
	f := newZAFixtureSized(t, true, xdsBackendCount, zaRates, workers, queue)
	f.waitClientCountWeights(t)
	stop := f.startLoad(45 * time.Second)
	defer stop()
	f.waitPlan(t, 15*time.Second)
	f.waitReports(t, 3, "three report cycles after the first plan")
	healthy := measure(f.record(t, time.Now().Add(3*time.Second), false))
	healthyShare, _ := healthy.load(tz)

	f.throttle(throttled, factor)
	at := time.Now()
	f.waitReports(t, settleCycles, "the weights settle after the throttle")
	settledAfter := time.Since(at)
	settled := f.record(t, time.Now().Add(window), false)
	f.throttle(throttled, 1)
	rec := time.Now()
	recovery := f.record(t, rec.Add(window), false)
	stop()
	f.logClients(t)
	if p := f.plan(t); p != nil {
		for _, e := range p.explain {
			t.Logf("plan at the end: %s", e)
		}
		t.Logf("plan at the end: %s", p.zones)
	}
	for _, part := range []struct {
		name string
		rec  []zaSlice
	}{{"settled", settled}, {"recovery", recovery}} {
		for i := 0; i < len(part.rec); i += int(time.Second / zaTick) {
			share, n := zaWindowLoad(part.rec[i:min(len(part.rec), i+int(time.Second/zaTick))])
			t.Logf("%s, %v: %.0f RPCs, load %s; weights %v", part.name, part.rec[i].at.Sub(at).Round(100*time.Millisecond), n, fmtShares(share), part.rec[i].weights)
		}
	}

	m := measure(settled)
	if want := zaTotalRate() * window.Seconds(); m.total() < zaSustain*want {
		t.Fatalf("%.0f RPCs in the settled window, want about %.0f: the machine did not sustain the load", m.total(), want)
	}
	f.checkClients(t)
	var got float64
	for cz := range xdsZones {
		got += m.arrived[cz][tz]
	}
	gotRPS := got / window.Seconds()
	failed := m.rejected[0] + m.rejected[1] + m.rejected[2]
	t.Logf("%s before the throttle: %s of the load; settled from %v after it (%d report cycles): %.1f rps for a capacity of %.0f rps; %.0f of %.0f RPCs failed (%.3f%%)",
		throttled, pts(healthyShare), settledAfter.Round(time.Millisecond), settleCycles, gotRPS, capRPS, failed, m.total(), 100*failed/m.total())
	if gotRPS > capRPS {
		t.Errorf("%s was sent %.1f rps in the settled window, over its capacity %.0f rps", throttled, gotRPS, capRPS)
	}
	if failed/m.total() >= 0.001 {
		t.Errorf("%.0f of %.0f RPCs failed in the settled window (%.3f%%), want under 0.1%%", failed, m.total(), 100*failed/m.total())
	}

	// Recovery: zone-b's share climbs back over the recovery ramp; in no
	// 2-second window is it above its healthy share plus 5 points, and
	// nothing fails.
	r := measure(recovery)
	per := int(2 * time.Second / zaTick)
	worst := math.Inf(-1)
	for i := 0; i+per <= len(recovery); i++ {
		share, _ := zaWindowLoad(recovery[i : i+per])
		worst = max(worst, share[tz])
	}
	rFailed := r.rejected[0] + r.rejected[1] + r.rejected[2]
	t.Logf("recovery: %s's largest share in a 2s window %s (healthy %s); %.0f of %.0f RPCs failed", throttled, pts(worst), pts(healthyShare), rFailed, r.total())
	if worst > healthyShare+zaPoints {
		t.Errorf("%s carried %s of the load in a 2s window after it recovered, healthy %s: overshoot over %.0f points", throttled, pts(worst), pts(healthyShare), 100*zaPoints)
	}
	if rFailed/r.total() >= 0.001 {
		t.Errorf("%.0f of %.0f RPCs failed after the recovery, want under 0.1%%", rFailed, r.total())
	}
}

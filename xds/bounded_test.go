package xds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3lrsgrpc "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	v3lrspb "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/zoneaware"
)

// TestBoundedClientInput opens thousands of real ADS and LRS streams whose
// node zones, node clusters, node ids, reported cluster names and
// reported localities are random, and checks that what the server keeps
// stays bounded: metric series per metric, load-table entries, zone-aware
// routes and EDS variants per service; and that once the streams are gone
// and the idle period has passed, the slots, series and entries are freed
// and the heap is back near where it started.
func TestBoundedClientInput(t *testing.T) {
	const maxZones = 16
	adsStreams, lrsStreams := 3000, 1000
	if testing.Short() {
		adsStreams, lrsStreams = 600, 200
	}
	realZones := []string{"a", "b", "c"}
	services := []string{"web", "api", "db"}

	store := registry.NewStore()
	var ops []registry.Op
	for _, svc := range services {
		for zi, z := range realZones {
			for i := range 4 {
				ops = append(ops, registry.Upsert(svc, &registry.Endpoint{
					ID:       fmt.Sprintf("%s-%d", z, i),
					Address:  netip.AddrFrom4([4]byte{10, byte(zi), 0, byte(i + 1)}),
					Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
					Locality: registry.Locality{Region: "r1", Zone: z}, Health: registry.Healthy,
					Source: registry.SourceStatic, Registered: time.Now().Add(-time.Hour),
				}))
			}
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()
	reg := prometheus.NewRegistry()
	s, p := newZoneAware(t, Config{Store: store, Registerer: reg, MaxZones: maxZones, LRSInterval: time.Second}, zoneaware.Config{})
	// The server is not Run: the test drives the planner and the sweep
	// itself, with the clock it chooses. Streams answer requests without it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(Codec()))
	s.Register(srv)
	var srvWG sync.WaitGroup
	srvWG.Go(func() { srv.Serve(lis) })
	defer func() {
		srv.Stop()
		srvWG.Wait()
	}()

	before := measureBounded(t, s, reg)
	t.Logf("before: heap %.1f MiB, series %v, load table %+v", mib(before.heap), before.series, before.table)

	// Clients: a few connections, thousands of streams on them.
	var conns []*grpc.ClientConn
	for range 4 {
		c, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	streamCtx, closeStreams := context.WithCancel(ctx)
	defer closeStreams()

	rng := rand.New(rand.NewPCG(1, 2))
	var rngMu sync.Mutex
	randName := func(prefix string) string {
		rngMu.Lock()
		defer rngMu.Unlock()
		return fmt.Sprintf("%s-%08x", prefix, rng.Uint32())
	}
	// zone: every tenth stream is in a real zone, the others make one up
	// (a few of them not even a DNS label).
	zone := func(i int) string {
		switch {
		case i%10 == 0:
			return realZones[(i/10)%len(realZones)]
		case i%50 == 1:
			return "Not_A_Label-" + randName("z")
		}
		return randName("z")
	}
	node := func(i int) *v3corepb.Node {
		return &v3corepb.Node{
			Id:       randName("node"),
			Cluster:  randName("client"),
			Locality: &v3corepb.Locality{Region: "r1", Zone: zone(i)},
		}
	}

	// Open the streams with a bounded pool of workers; each stream is
	// answered once so the server surely holds it.
	var (
		mu      sync.Mutex
		cleanup []func()
		errs    []error
	)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				conn := conns[i%len(conns)]
				var done func()
				var err error
				if i < adsStreams {
					done, err = openADS(streamCtx, conn, node(i), services[i%len(services)])
				} else {
					done, err = openLRS(streamCtx, conn, node(i), services[i%len(services)], randName("cluster"), randName("zz"))
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("stream %d: %w", i, err))
				} else {
					cleanup = append(cleanup, done)
				}
				mu.Unlock()
			}
		})
	}
	for i := range adsStreams + lrsStreams {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d streams failed, first: %v", len(errs), errs[0])
	}
	// The planner sees every stream's client zone.
	p.Cycle(time.Now())

	during := measureBounded(t, s, reg)
	t.Logf("open: %d ADS + %d LRS streams, heap %.1f MiB (+%.1f KiB per stream, client side included), series %v, load table %+v, zone slots %d",
		adsStreams, lrsStreams, mib(during.heap), float64(during.heap-before.heap)/1024/float64(adsStreams+lrsStreams), during.series, during.table, s.zones.len())

	// Bounds while everything is open.
	fixed := 3 // "none", "invalid", "other"
	zoneLabels := maxZones + fixed
	bounds := map[string]int{
		"spillway_xds_streams":               zoneLabels,                      // protocol sotw × zone label
		"spillway_lrs_requests_total":        zoneLabels * len(realZones) * 2, // client zone × upstream zone × result
		"spillway_lrs_dropped_total":         3,                               // reasons
		"spillway_xds_nacks_total":           (len(services) + 2) * 4,         // types × (service, "*", "unknown")
		"spillway_zoneaware_same_zone_ratio": len(services),                   // per service in the store
	}
	for name, max := range bounds {
		if got := during.series[name]; got > max {
			t.Errorf("open: %s has %d series, want at most %d", name, got, max)
		}
	}
	if got := s.zones.len(); got != maxZones {
		t.Errorf("open: %d zone slots taken, want the cap %d", got, maxZones)
	}
	if got := during.series["spillway_xds_streams"]; got < maxZones {
		t.Errorf("open: spillway_xds_streams has %d series, want at least the %d slotted zones", got, maxZones)
	}
	if got, want := s.metricSum(t, reg, "spillway_xds_streams"), float64(adsStreams); got != want {
		t.Errorf("open: spillway_xds_streams sums to %v, want %v", got, want)
	}
	// Each LRS stream reports one known locality of a known service (kept),
	// one made-up locality and one cluster that is no service (dropped).
	if got, want := during.table.Samples, lrsStreams; got != want {
		t.Errorf("open: %d load samples, want %d (one per LRS stream)", got, want)
	}
	if got, want := during.table.Services, len(services); got > want {
		t.Errorf("open: localities cached for %d services, want at most %d", got, want)
	}
	if got, want := s.metricSum(t, reg, "spillway_lrs_dropped_total", "reason", load.DropUnknownCluster), float64(lrsStreams); got != want {
		t.Errorf("open: unknown-cluster drops = %v, want %v", got, want)
	}
	if got, want := s.metricSum(t, reg, "spillway_lrs_dropped_total", "reason", load.DropUnknownLocality), float64(lrsStreams); got != want {
		t.Errorf("open: unknown-locality drops = %v, want %v", got, want)
	}
	clientZones := map[string]bool{}
	for _, l := range s.loads.Loads("", time.Now()) {
		clientZones[l.ClientZone] = true
	}
	if got, want := len(clientZones), maxZones+len(realZones)+fixed; got > want {
		t.Errorf("open: load table has %d client zones, want at most %d", got, want)
	}
	// Zone-aware routes and EDS variants per service: the real zones, the
	// slotted ones, the zoneless route; a zone without a slot gets the
	// zoneless route's EDS.
	snap := store.Snapshot()
	for _, svc := range services {
		plan := p.Plan(svc)
		if plan == nil {
			t.Fatalf("no plan for %s", svc)
		}
		res := plan.Result
		if got, want := len(res.Routes), len(realZones)+maxZones+1; got > want {
			t.Errorf("open: %s has %d zone-aware routes, want at most %d", svc, got, want)
		}
		e := s.cache.entry(svc)
		e.mu.Lock()
		variants := len(e.eds)
		e.mu.Unlock()
		if want := len(realZones) + maxZones + 1; variants > want {
			t.Errorf("open: %s has %d EDS variants, want at most %d", svc, variants, want)
		}
		t.Logf("open: %s: %d routes, %d EDS variants", svc, len(res.Routes), variants)
		zoneless, _ := s.lookup(3, svc, "", snap)
		stranger, _ := s.lookup(3, svc, "never-seen-zone", snap)
		if zoneless != stranger {
			t.Errorf("open: %s: a zone without a slot did not get the zoneless EDS", svc)
		}
	}

	// Close every stream and client connection.
	closeStreams()
	for _, done := range cleanup {
		done()
	}
	cleanup = nil // the client streams, for the heap figures
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	waitBounded(t, "streams to end", func() bool {
		s.hub.mu.Lock()
		n := len(s.hub.nodes)
		s.hub.mu.Unlock()
		return n == 0 && s.loads.Size().Streams == 0
	})
	closed := measureBounded(t, s, reg)
	t.Logf("closed: heap %.1f MiB, series %v, load table %+v, zone slots %d", mib(closed.heap), closed.series, closed.table, s.zones.len())
	if closed.table.Samples != 0 {
		t.Errorf("closed: %d load samples, want 0 (samples go with their stream)", closed.table.Samples)
	}

	// After the idle period the slots, their series and the totals go.
	later := time.Now().Add(labelIdle + time.Minute)
	s.sweep(later)
	p.Cycle(later)
	after := measureBounded(t, s, reg)
	t.Logf("after sweep: heap %.1f MiB (%+.1f MiB from before), series %v, load table %+v, zone slots %d",
		mib(after.heap), mib(after.heap-before.heap), after.series, after.table, s.zones.len())
	if got := s.zones.len(); got != 0 {
		t.Errorf("after sweep: %d zone slots taken, want 0", got)
	}
	if got := after.table; got.Streams != 0 || got.Samples != 0 || got.Totals != 0 {
		t.Errorf("after sweep: load table %+v, want no streams, samples or totals", got)
	}
	for name, max := range map[string]int{
		"spillway_xds_streams":        fixed,
		"spillway_lrs_requests_total": fixed * len(realZones) * 2,
	} {
		if got := after.series[name]; got > max {
			t.Errorf("after sweep: %s has %d series, want at most %d (the fixed labels)", name, got, max)
		}
	}
	for _, svc := range services {
		if got := len(p.Plan(svc).Result.Routes); got > len(realZones)+1 {
			t.Errorf("after sweep: %s has %d routes, want at most %d", svc, got, len(realZones)+1)
		}
	}
	// A rolling fleet is not locked out: a new zone gets a name again.
	if got := s.zones.acquire("fresh-zone", later); got != "fresh-zone" {
		t.Errorf("after sweep: a new zone got label %q, want its own name", got)
	}
	s.zones.release("fresh-zone", later)
	// Nothing per stream is kept: the heap is back near where it started.
	// What remains is fixed-size caches (protobuf descriptors, EDS) and
	// the runtime's own: it never frees the descriptors of dead goroutines
	// (runtime.malg, about 1 KiB per stream at the peak, two goroutines
	// per stream with the clients in this process) and maps keep their
	// peak buckets.
	slack := int64(2<<20 + 2<<10*(adsStreams+lrsStreams))
	if grew := int64(after.heap) - int64(before.heap); grew > slack {
		t.Errorf("after sweep: heap grew %.1f MiB over before, want at most %.1f MiB", mib(uint64(grew)), mib(uint64(slack)))
	}
}

// boundedFigures is one measurement of what the server keeps.
type boundedFigures struct {
	heap   uint64
	series map[string]int
	table  load.TableSize
}

func measureBounded(t *testing.T, s *Server, reg *prometheus.Registry) boundedFigures {
	t.Helper()
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	return boundedFigures{heap: ms.HeapAlloc, series: series, table: s.loads.Size()}
}

// metricSum sums the samples of counter or gauge name whose labels include
// the given name/value pairs.
func (s *Server) metricSum(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				if !found {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func mib(b uint64) float64 { return float64(int64(b)) / (1 << 20) }

// waitBounded polls cond until it holds, failing the test after a minute.
func waitBounded(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openADS opens a state-of-the-world stream as node, subscribes to svc's
// endpoints and waits for the answer. done waits for the stream to end
// after its context is cancelled.
func openADS(ctx context.Context, conn *grpc.ClientConn, node *v3corepb.Node, svc string) (done func(), err error) {
	st, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&v3discoverypb.DiscoveryRequest{Node: node, TypeUrl: EndpointType, ResourceNames: []string{svc}}); err != nil {
		return nil, err
	}
	resp, err := st.Recv()
	if err != nil {
		return nil, err
	}
	if len(resp.GetResources()) != 1 {
		return nil, fmt.Errorf("EDS %s: %d resources, want 1", svc, len(resp.GetResources()))
	}
	return func() {
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}, nil
}

// openLRS opens a load reporting stream as node and sends one report: svc
// to a real locality, svc to a made-up locality in zone bogus, and a
// cluster that is no service. It waits for the server's answer, sent once
// the report is recorded.
func openLRS(ctx context.Context, conn *grpc.ClientConn, node *v3corepb.Node, svc, cluster, bogus string) (done func(), err error) {
	st, err := v3lrsgrpc.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		return nil, err
	}
	stats := func(zone string) *v3endpointpb.UpstreamLocalityStats {
		return &v3endpointpb.UpstreamLocalityStats{
			Locality:                &v3corepb.Locality{Region: "r1", Zone: zone},
			TotalIssuedRequests:     10,
			TotalSuccessfulRequests: 9,
			TotalErrorRequests:      1,
		}
	}
	req := &v3lrspb.LoadStatsRequest{Node: node, ClusterStats: []*v3endpointpb.ClusterStats{
		{ClusterName: svc, LoadReportInterval: durationpb.New(time.Minute), UpstreamLocalityStats: []*v3endpointpb.UpstreamLocalityStats{stats("a"), stats(bogus)}},
		{ClusterName: cluster, LoadReportInterval: durationpb.New(time.Minute), UpstreamLocalityStats: []*v3endpointpb.UpstreamLocalityStats{stats("a")}},
	}}
	if err := st.Send(req); err != nil {
		return nil, err
	}
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return func() {
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}, nil
}

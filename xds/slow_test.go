package xds_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

// slowEvent is one response received by a normal stream.
type slowEvent struct {
	stream  int
	version string
	marker  uint32 // weight of endpoint ep-1; decoded on stream 0 only
	size    int    // encoded size; stream 0 only
}

// heapInuse is the live heap after garbage collection (twice, so that
// sync.Pool victims go too).
func heapInuse() (inuse, alloc uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.HeapAlloc
}

// Streams that never read (more of them than the server has fan-out
// workers) do not delay pushes to the others, and the server holds at most
// one pending change set for each, never a queue of responses: their Sends
// block on HTTP/2 flow control while the others go on.
func TestSlowConsumerDoesNotDelayOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("pushes ~200 MB through loopback")
	}
	const (
		normal    = 50
		changes   = 30
		endpoints = 3000
		promptly  = 10 * time.Second
	)
	srv := startRawXDS(t, rawStore(t, map[string]int{"web": endpoints}), xds.Config{})
	client := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(srv.conn)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})

	// Normal streams read, decode (stream 0) and ACK every response.
	events := make(chan slowEvent, 1024)
	errs := make(chan error, normal)
	for i := range normal {
		stream, err := client.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&v3discoverypb.DiscoveryRequest{Node: rawNode(), TypeUrl: eds, ResourceNames: []string{"web"}}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for {
				resp, err := stream.Recv()
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				ev := slowEvent{stream: i, version: resp.GetVersionInfo()}
				if i == 0 {
					ev.size = proto.Size(resp)
					ev.marker = markerWeight(resp)
				}
				if err := stream.Send(&v3discoverypb.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"web"},
					VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				select {
				case events <- ev:
				case <-ctx.Done():
					return
				}
			}
		})
	}

	latest := make([]string, normal)
	var ref slowEvent // stream 0's last response
	received := 0
	// await consumes events until every normal stream holds the version
	// stream 0 decoded as carrying marker, and returns when that was.
	await := func(what string, marker uint32) {
		t.Helper()
		timer := time.NewTimer(promptly)
		defer timer.Stop()
		for {
			if ref.marker == marker && !slices.ContainsFunc(latest, func(v string) bool { return v != ref.version }) {
				return
			}
			select {
			case ev := <-events:
				received++
				latest[ev.stream] = ev.version
				if ev.stream == 0 {
					ref = ev
				}
			case err := <-errs:
				t.Fatalf("%s: a normal stream failed: %v", what, err)
			case <-timer.C:
				behind := 0
				for _, v := range latest {
					if v != ref.version {
						behind++
					}
				}
				t.Fatalf("%s: after %v, stream 0 has marker %d (want %d) and %d of %d streams lack its version", what, promptly, ref.marker, marker, behind, normal)
			}
		}
	}
	await("initial", registry.DefaultWeight)
	marker := uint32(registry.DefaultWeight)
	// change makes one endpoint change and waits for every normal stream
	// to hold it.
	change := func(what string) time.Duration {
		t.Helper()
		marker++
		start := time.Now()
		srv.apply(t, registry.Upsert("web", rawEndpoint(1, marker)))
		await(what, marker)
		return time.Since(start)
	}
	// Latency without a stuck stream, for comparison.
	var baseline []time.Duration
	for i := range 5 {
		baseline = append(baseline, change(fmt.Sprintf("baseline change %d", i+1)))
	}
	slices.Sort(baseline)

	// The stuck streams: each on its own connection with a fixed 64 KB
	// window, so the server's writes to it block after about one response.
	// There are more of them than the server has fan-out workers
	// (max(4, 2*GOMAXPROCS)), so a worker blocked in Send must not hold up
	// the queue.
	stuckN := max(4, 2*runtime.GOMAXPROCS(0)) + 2
	stuckCtx, stuckCancel := context.WithCancel(context.Background())
	t.Cleanup(stuckCancel)
	for range stuckN {
		stuckConn := rawDial(t, srv.addr, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		stuck, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(stuckConn).StreamAggregatedResources(stuckCtx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stuck.Send(&v3discoverypb.DiscoveryRequest{Node: rawNode(), TypeUrl: eds, ResourceNames: []string{"web"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Never Recv on them again. Their first responses are on their way:
	pushes := func() float64 { return srv.metric(t, "spillway_xds_pushes_total", "type", "EDS") }
	srv.waitMetric(t, float64(normal+stuckN), "spillway_xds_pushes_total", "type", "EDS")

	before, beforeAlloc := heapInuse()
	var mid, midAlloc uint64
	var latencies []time.Duration
	for i := 1; i <= changes; i++ {
		latencies = append(latencies, change(fmt.Sprintf("change %d", i)))
		if i == changes/2 {
			mid, midAlloc = heapInuse()
		}
	}
	after, afterAlloc := heapInuse()

	// Every EDS push the server completed went to a normal stream, except
	// the few that fit the stuck streams' windows.
	stuckPushes := int(pushes()) - received
	if got := srv.metric(t, "spillway_xds_streams", "protocol", "sotw"); got != float64(normal+stuckN) {
		t.Errorf("sotw streams = %v, want %d (the stuck ones still connected)", got, normal+stuckN)
	}
	slices.Sort(latencies)
	growth := int64(after) - int64(before)
	bound := int64(changes * ref.size / 2)
	t.Logf("response %d bytes; %d normal streams got every one of %d changes: latency p50 %v, max %v (without the stuck stream: p50 %v, max %v)",
		ref.size, normal, changes, latencies[len(latencies)/2], latencies[len(latencies)-1], baseline[len(baseline)/2], baseline[len(baseline)-1])
	t.Logf("%d stuck streams: %d Sends of %d responses each completed; heap in use %d -> %d -> %d bytes (growth %d, bound %d = changes*size/2); live heap %d -> %d -> %d bytes",
		stuckN, stuckPushes, changes+1, before, mid, after, growth, bound, beforeAlloc, midAlloc, afterAlloc)
	if stuckPushes > 4*stuckN {
		t.Errorf("the %d stuck streams completed %d sends, want at most %d: they did not block, so the test proves nothing", stuckN, stuckPushes, 4*stuckN)
	}
	if growth > bound {
		t.Errorf("heap in use grew by %d bytes over %d changes, want < %d: responses are queued for the stuck stream", growth, changes, bound)
	}
	if live := int64(afterAlloc) - int64(beforeAlloc); live > bound {
		t.Errorf("live heap grew by %d bytes over %d changes, want < %d: responses are queued for the stuck stream", live, changes, bound)
	}
	// Once the stuck stream's windows are full, the live heap stays flat.
	if live := int64(afterAlloc) - int64(midAlloc); live > int64(2*ref.size) {
		t.Errorf("live heap grew by %d bytes over the last %d changes, want < %d (two responses)", live, changes-changes/2, 2*ref.size)
	}
}

// markerWeight is the weight of endpoint ep-1 in an EDS response.
func markerWeight(resp *v3discoverypb.DiscoveryResponse) uint32 {
	for _, a := range resp.GetResources() {
		cla := &v3endpointpb.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			return 0
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				if e.GetEndpoint().GetHostname() == "ep-1" {
					return e.GetLoadBalancingWeight().GetValue()
				}
			}
		}
	}
	return 0
}

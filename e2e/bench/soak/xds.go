package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
)

// Bounds of one ADS stream's loops.
const (
	maxReopens   = 10000   // re-opens of one stream in a run
	maxResponses = 1000000 // responses read on one stream
)

// xdsFleet is --xds-streams raw state-of-the-world ADS streams. Stream i
// belongs to replica i%N (its home), watches the Cluster and the
// ClusterLoadAssignment of service i%services as a client in zone
// (i/N)%3, and ACKs every response. A stream that ends is opened again on
// its home replica after a backoff (250 ms doubling to 2 s, reset once a
// stream lived 30 s), like a grpc-go client that dials one server.
type xdsFleet struct {
	// Read-only after openXDS.
	c     config
	reps  []*replica
	conns [][]*grpc.ClientConn // per replica

	wg       sync.WaitGroup
	synced   atomic.Int64  // streams that had their first response
	syncedCh chan struct{} // closed when synced reaches the stream count
	eds, cds atomic.Int64  // responses by type
}

// openXDS dials --xds-per-conn streams a connection and starts every
// stream; waitSynced waits for their first responses.
func openXDS(ctx context.Context, c config, reps []*replica) (*xdsFleet, error) {
	f := &xdsFleet{c: c, reps: reps, conns: make([][]*grpc.ClientConn, len(reps)), syncedCh: make(chan struct{})}
	if c.xdsStreams == 0 {
		close(f.syncedCh)
		return f, nil
	}
	n := len(reps)
	for h, r := range reps {
		streams := c.xdsStreams/n + btoi(h < c.xdsStreams%n)
		for range (streams + c.xdsPerConn - 1) / c.xdsPerConn {
			cc, err := grpc.NewClient(r.grpcAddr, dialOpts...)
			if err != nil {
				f.close()
				return nil, fmt.Errorf("xds: dial %s %s: %w", r.name, r.grpcAddr, err)
			}
			f.conns[h] = append(f.conns[h], cc)
		}
	}
	for i := range c.xdsStreams {
		h := i % n
		cc := f.conns[h][(i/n)/c.xdsPerConn]
		f.wg.Go(func() { f.run(ctx, i, h, cc) })
	}
	return f, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// run keeps stream i open on replica h until ctx ends.
func (f *xdsFleet) run(ctx context.Context, i, h int, cc *grpc.ClientConn) {
	st := f.reps[h].stats
	client := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(cc)
	first := true
	wait := 250 * time.Millisecond
	for range maxReopens {
		opened := time.Now()
		f.stream(ctx, i, client, st, &first)
		if ctx.Err() != nil {
			return
		}
		st.xdsFailed.Add(1)
		if time.Since(opened) > 30*time.Second {
			wait = 250 * time.Millisecond
		}
		// Jitter, so that the streams of a killed replica do not all
		// come back in one instant.
		if !sleep(ctx, wait/2+rand.N(wait/2+1)) {
			return
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// stream opens one ADS stream, subscribes and reads until it ends; the
// first response of the fleet's first stream i marks i synced.
func (f *xdsFleet) stream(ctx context.Context, i int, client v3discoverygrpc.AggregatedDiscoveryServiceClient, st *repStats, first *bool) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ads, err := client.StreamAggregatedResources(sctx)
	if err != nil {
		return
	}
	svc := serviceName(i % f.c.services)
	node := &v3corepb.Node{
		Id:       fmt.Sprintf("soak-%d", i),
		Cluster:  "soak",
		Locality: &v3corepb.Locality{Region: "r1", Zone: fmt.Sprintf("zone-%c", 'a'+(i/len(f.reps))%3)},
	}
	for j, typeURL := range []string{resource.ClusterType, resource.EndpointType} {
		req := &v3discoverypb.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: []string{svc}}
		if j == 0 {
			req.Node = node
		}
		if ads.Send(req) != nil {
			return
		}
	}
	open := false
	defer func() {
		if open {
			st.xdsOpen.Add(-1)
		}
	}()
	for range maxResponses {
		resp, err := ads.Recv()
		if err != nil {
			return
		}
		if !open {
			open = true
			st.xdsOpen.Add(1)
			st.xdsOpened.Add(1)
			if *first {
				*first = false
				if f.synced.Add(1) == int64(f.c.xdsStreams) {
					close(f.syncedCh)
				}
			}
		}
		st.xdsResponses.Add(1)
		switch resp.GetTypeUrl() {
		case resource.EndpointType:
			f.eds.Add(1)
		case resource.ClusterType:
			f.cds.Add(1)
		}
		ack := &v3discoverypb.DiscoveryRequest{
			TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: []string{svc},
		}
		if ads.Send(ack) != nil {
			return
		}
	}
}

// waitSynced waits until every stream had its first response.
func (f *xdsFleet) waitSynced(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("xds: %d of %d streams had a response after %v", f.synced.Load(), f.c.xdsStreams, timeout)
	}
}

// close closes the connections (which ends the streams) and waits, at
// most 30 s, for the stream goroutines; run them on a cancelled ctx.
func (f *xdsFleet) close() {
	for _, cs := range f.conns {
		for _, cc := range cs {
			cc.Close()
		}
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

package main

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// unaryInFlight counts the unary gRPC calls being served, so that a drain
// can wait for them and no longer: the long-lived streams (xDS, LRS,
// heartbeat and load-exchange streams) never end by themselves.
type unaryInFlight struct{ n atomic.Int64 }

func (u *unaryInFlight) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		u.n.Add(1)
		defer u.n.Add(-1)
		return h(ctx, req)
	}
}

// drainPoll is how often a drain looks whether the unary calls finished.
const drainPoll = 5 * time.Millisecond

// drain ends the gRPC and HTTP servers the way a rolling restart wants,
// within grace:
//
//  1. gRPC GOAWAY (GracefulStop): clients open no new calls or streams
//     here and connect elsewhere; the listeners close, so /readyz fails
//     and a load balancer takes this replica out;
//  2. the unary calls in flight finish (bounded by grace);
//  3. the long-lived streams are ended (Stop), so their clients
//     reconnect to another replica now rather than when grace runs out:
//     an xDS client keeps its last resources meanwhile, an agent fails
//     over with its lease;
//  4. HTTP requests in flight finish (bounded by grace).
//
// The components (ownership, expiry, the store's sync) stop after it,
// so the shards are handed over once nothing here serves any more.
func (s *server) drain(grace time.Duration, g *grpc.Server, h *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	httpDone := make(chan struct{})
	go func() {
		if err := h.Shutdown(ctx); err != nil {
			h.Close()
		}
		close(httpDone)
	}()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	<-tick.C // a call accepted just before the GOAWAY reaches the counter
wait:
	for s.unary.n.Load() > 0 {
		select {
		case <-stopped:
			break wait
		case <-ctx.Done():
			break wait
		case <-tick.C:
		}
	}
	g.Stop()
	<-stopped
	<-httpDone
}

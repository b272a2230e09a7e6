package demo

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// checkMethod is the one RPC the demo's clients send and its backends
// serve: grpc.health.v1.Health/Check, a real proto every grpc-go ships.
const checkMethod = "/grpc.health.v1.Health/Check"

// backend is one synthetic gRPC server: it serves Check after a service
// time, at most limit at once; one more is refused with
// RESOURCE_EXHAUSTED, as an overloaded server sheds load. Its capacity is
// about limit/serviceTime requests per second.
type backend struct {
	healthpb.UnimplementedHealthServer

	// Read-only after newBackend.
	service, zone, id string
	port              int
	lis               net.Listener
	srv               *grpc.Server
	baseLimit         int64
	baseDelay         time.Duration

	limit    atomic.Int64 // current concurrency limit
	delay    atomic.Int64 // current service time, ns
	inflight atomic.Int64
	served   atomic.Uint64
	rejected atomic.Uint64
}

// newBackend listens on a free loopback port; serve starts it.
func newBackend(service, zone, id string, limit int, delay time.Duration) (*backend, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("backend %s: listen: %w", id, err)
	}
	b := &backend{service: service, zone: zone, id: id, lis: lis, port: lis.Addr().(*net.TCPAddr).Port,
		baseLimit: int64(limit), baseDelay: delay, srv: grpc.NewServer()}
	b.limit.Store(int64(limit))
	b.delay.Store(int64(delay))
	healthpb.RegisterHealthServer(b.srv, b)
	return b, nil
}

// serve blocks until stop.
func (b *backend) serve() { _ = b.srv.Serve(b.lis) }

func (b *backend) stop() { b.srv.Stop() }

// throttle divides the backend's capacity by about factor²: the limit
// shrinks by factor and the service time grows by it, so queues and
// refusals show in the clients' load reports. factor 1 restores it.
func (b *backend) throttle(factor float64) {
	if factor <= 0 || factor > 1 {
		factor = 1
	}
	b.limit.Store(max(1, int64(float64(b.baseLimit)*factor)))
	b.delay.Store(int64(float64(b.baseDelay) / factor))
}

func (b *backend) throttled() bool { return b.limit.Load() != b.baseLimit }

// Check implements healthpb.HealthServer.
func (b *backend) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if b.inflight.Add(1) > b.limit.Load() {
		b.inflight.Add(-1)
		b.rejected.Add(1)
		return nil, status.Errorf(codes.ResourceExhausted, "demo backend %s: over capacity (%d in flight)", b.id, b.limit.Load())
	}
	defer b.inflight.Add(-1)
	t := time.NewTimer(time.Duration(b.delay.Load()))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	b.served.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

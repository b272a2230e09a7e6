package registryapi

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/spillway/spillway/registry"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore"
)

// BenchmarkHeartbeat measures heartbeats per second through the real gRPC
// API on loopback, client and server in one process (so both share the 2
// cores). "unary" is one RPC per heartbeat; "stream" is what agents use:
// each client goroutine owns a HeartbeatStream and waits for each answer.
func BenchmarkHeartbeat(b *testing.B) {
	for _, mode := range []string{"unary", "stream"} {
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%dxGOMAXPROCS", mode, par), func(b *testing.B) {
				// Heartbeats never touch storage; memory storage keeps the
				// 1,000 registrations of the setup fast.
				h := newHarnessWith(b, systemstore.NewMemory())
				ctx := context.Background()
				const leases = 1000
				ids := make([]string, leases)
				for i := range ids {
					r := goodRequest()
					r.Endpoint.Address = fmt.Sprintf("10.9.%d.%d", i/250, i%250+1)
					l, err := h.client.Register(ctx, r)
					if err != nil {
						b.Fatal(err)
					}
					ids[i] = l.LeaseId
				}
				var next atomic.Uint64
				b.SetParallelism(par)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(p *testing.PB) {
					var stream pb.Registry_HeartbeatStreamClient
					if mode == "stream" {
						var err error
						if stream, err = h.client.HeartbeatStream(ctx); err != nil {
							b.Error(err)
							return
						}
						defer stream.CloseSend()
					}
					req := &pb.HeartbeatRequest{}
					for p.Next() {
						req.LeaseId = ids[next.Add(1)%leases]
						if stream == nil {
							if _, err := h.client.Heartbeat(ctx, req); err != nil {
								b.Error(err)
								return
							}
							continue
						}
						if err := stream.Send(req); err != nil {
							b.Error(err)
							return
						}
						resp, err := stream.Recv()
						if err != nil || !resp.Found {
							b.Errorf("stream heartbeat: %v %v", resp, err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "heartbeats/s")
			})
		}
	}
}

// BenchmarkUtilization measures utilization reports ingested per second
// through the real gRPC API on loopback (client and server in one process,
// sharing the cores): 10,000 endpoints of 10 services, each client
// goroutine owning one ReportUtilization stream. A stream's reports are
// counted ingested when the server's final ack says it stored them all.
func BenchmarkUtilization(b *testing.B) {
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("endpoints=10000/streams=%dxGOMAXPROCS", streams), func(b *testing.B) {
			h := newHarnessWith(b, systemstore.NewMemory())
			const services, perService = 10, 1000
			for s := range services {
				ops := make([]registry.Op, perService)
				for i := range ops {
					ops[i] = registry.Upsert(fmt.Sprintf("svc-%d", s), staticEndpoint(fmt.Sprintf("e-%d", i)))
				}
				if _, err := h.store.Apply(ops...); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			var next, acked atomic.Uint64
			b.SetParallelism(streams)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				stream, err := h.client.ReportUtilization(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				r := &pb.UtilizationReport{Cpu: 0.5, InFlight: 3, Limit: 64, IntervalMs: 1000}
				for p.Next() {
					n := next.Add(1)
					r.Service = fmt.Sprintf("svc-%d", n%services)
					r.EndpointId = fmt.Sprintf("e-%d", (n/services)%perService)
					r.Cpu = float64(n%100) / 100
					if err := stream.Send(r); err != nil {
						b.Error(err)
						return
					}
				}
				ack, err := stream.CloseAndRecv()
				if err != nil {
					b.Error(err)
					return
				}
				acked.Add(ack.Accepted)
			})
			b.StopTimer()
			if got := acked.Load(); got != uint64(b.N) {
				b.Fatalf("acked %d reports, sent %d", got, b.N)
			}
			if n := h.util.Len(); n != min(b.N, services*perService) {
				b.Fatalf("table holds %d endpoints, want %d", n, min(b.N, services*perService))
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
		})
	}
}

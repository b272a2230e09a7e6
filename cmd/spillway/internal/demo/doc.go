// Package demo is the synthetic part of `spillway demo`: gRPC backends in
// three zones with different capacities, registered by VM agents
// (clientlib/heartbeat), and real grpc-go xDS clients (clientlib with a
// bootstrap per Conn) of several services sending rate-limited load, so
// that the server's load reports, zone-aware weights and graph fill up.
//
// # Usage
//
//	f, err := demo.New(demo.Config{GRPCAddr: g, HTTPAddr: h, DNSAddr: d, Domain: "spillway.internal.",
//		Token: token, Dir: dir, Scenario: sc})
//	go f.Run(ctx)                      // until ctx ends; the server must outlive it
//	f.Event(ctx, demo.Event{Name: demo.EventThrottleZone, Zone: "zone-b"})
//
// # Concurrency
//
// Event and State are safe for concurrent use while Run runs. Run returns
// once every goroutine it started has returned and every backend stopped.
package demo

// Package utilization is the server-side helper a grpc-go backend installs
// so spillway can weight its endpoints by how busy they are (issue 14):
// it counts in-flight RPCs against a limit, samples CPU (the cgroup's, the
// process's or the host's), serves the numbers as ORCA for grpc-go's
// weighted_round_robin, and streams them to spillway's registry API.
//
// # Usage
//
//	u, err := utilization.New(utilization.Config{Limit: 64, Sampler: utilization.CgroupCPU()})
//	srv := grpc.NewServer(u.ServerOptions()...)
//	u.RegisterORCA(srv) // optional: ORCA out-of-band service
//	r := &utilization.Reporter{Target: "127.0.0.1:18000", Service: "payments",
//		EndpointID: "payments-1", Interval: time.Second, Source: u}
//	go r.Run(ctx)
//
// A Report is {CPU (0..1 of the quota), InFlight, Limit, Utilization =
// max(CPU, InFlight/Limit), capped at 1}. Limit 0 (CPUOnly, spillwayctl
// agent) means in-flight is not counted and Utilization is CPU.
//
// CPU is the used share of the quota between two samples, re-sampled at
// most every Config.SampleEvery (1 s) however often Report is called.
// CgroupCPU reads cgroup v2 cpu.stat usage_usec and the quota in cpu.max
// (GOMAXPROCS cores when it is "max"), and falls back to ProcessCPU
// (getrusage, the counters /proc/self/stat shows) without cgroup v2.
// HostCPU reads /proc/stat (busy = all but idle and iowait).
//
// ServerOptions installs unary and stream interceptors that count every
// RPC while its handler runs (the ORCA out-of-band stream excepted; other
// long-lived streams count), and ORCA per-call metrics. ORCA carries
// cpu_utilization = CPU and application_utilization = Utilization.
//
// The Reporter sends one report per Interval on a ReportUtilization
// stream. A report that is due while the stream is down is dropped, never
// queued. The server ends the stream on a refused report (InvalidArgument
// for a bad field, NotFound for an endpoint it does not hold or a lease
// that does not hold it); Run reconnects with capped exponential backoff
// and jitter (0.5 s to 30 s), so a backend that starts reporting before
// its registration is visible catches up.
//
// # Concurrency
//
// A Utilization is safe for concurrent use; its interceptors cost two
// atomic adds per RPC. Run runs until its context ends; run one per
// endpoint.
package utilization

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
// max(CPU, InFlight/Limit), capped at 1, RPS, EPS, Latency}. Limit 0
// (CPUOnly, spillwayctl agent) means in-flight is not counted and
// Utilization is CPU; CPUOnly counts no RPCs either (RPS, EPS, Latency 0).
//
// RPS is the RPCs completed per second and EPS those that failed, over
// the last Config.RateWindow (10 s): an RPC fails when it ends with one of
// Config.ErrorCodes, by default the codes that say the server failed it
// (Unknown, DeadlineExceeded, ResourceExhausted, Internal, Unavailable,
// DataLoss), not those that say the request was wrong or that the client
// gave up (Canceled). Latency is the mean time a unary RPC spent in the
// handler (and the interceptors inside these) over the same window. They
// are what lets spillway's PID controller tell an endpoint that is idle
// from one that fails fast (weights/pid: the error penalty and guard).
//
// CPU is the used share of the quota between two samples, re-sampled at
// most every Config.SampleEvery (1 s) however often Report is called.
// CgroupCPU reads cgroup v2 cpu.stat usage_usec and the quota in cpu.max
// (GOMAXPROCS cores when it is "max"), and falls back to ProcessCPU
// (getrusage, the counters /proc/self/stat shows) without cgroup v2.
// HostCPU reads /proc/stat (busy = all but idle and iowait).
//
// ServerOptions installs unary and stream interceptors that count every
// RPC while its handler runs and when it ends (the ORCA out-of-band stream
// excepted; other long-lived streams count), and ORCA per-call metrics:
// every RPC's trailer, a failed one's too, carries endpoint-load-metrics-bin
// with cpu_utilization = CPU, application_utilization = Utilization,
// rps_fractional = RPS and eps = EPS (grpc-go's weighted_round_robin
// weighs an endpoint by rps / (utilization + eps/rps × penalty), gRFC
// A58). grpc-go writes that trailer only for an RPC whose handler asked
// for its recorder (orca.CallMetricsRecorderFromContext), so ServerOptions
// ends with an interceptor that asks for it on every RPC; interceptors
// chained after ServerOptions run inside it and may add their own
// per-call values to the recorder. The out-of-band service
// (RegisterORCA) sends the same numbers.
//
// The Reporter sends one report per Interval on a ReportUtilization
// stream, with rps, eps and latency_ms (clamped to the server's bounds,
// omitted when 0); a server older than those fields ignores them. A report that is due while the stream is down is dropped, never
// queued. The server ends the stream on a refused report (InvalidArgument
// for a bad field, NotFound for an endpoint it does not hold or a lease
// that does not hold it); Run reconnects with capped exponential backoff
// and jitter (0.5 s to 30 s), so a backend that starts reporting before
// its registration is visible catches up.
//
// # Concurrency
//
// A Utilization is safe for concurrent use; its interceptors cost a few
// atomic adds per RPC, and the per-call trailer one Report (a lock, and a
// sample at most every SampleEvery) and its encoding. Run runs until its context ends; run one per
// endpoint.
package utilization

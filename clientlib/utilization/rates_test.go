package utilization

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
)

// unary runs one RPC through u's unary interceptor with a handler that
// returns err.
func unary(u *Utilization, err error) {
	u.UnaryInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(context.Context, any) (any, error) { return nil, err })
}

type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context { return context.Background() }

// TestRPCCounting: completed RPCs and those that failed with a server
// error, per second over the window; the codes that count as errors.
func TestRPCCounting(t *testing.T) {
	ctxErr := status.FromContextError(context.DeadlineExceeded).Err()
	tests := []struct {
		name     string
		codes    []codes.Code
		errs     []error
		rps, eps float64
	}{
		{"ok", nil, []error{nil, nil, nil, nil}, 2, 0},
		{"server_errors", nil, []error{nil, status.Error(codes.Unavailable, "x"), status.Error(codes.Internal, "x"),
			status.Error(codes.ResourceExhausted, "x"), ctxErr, errors.New("not a status"), status.Error(codes.DataLoss, "x"), nil}, 4, 3},
		{"request_errors", nil, []error{status.Error(codes.InvalidArgument, "x"), status.Error(codes.NotFound, "x"),
			status.Error(codes.PermissionDenied, "x"), status.Error(codes.Canceled, "x")}, 2, 0},
		{"own_codes", []codes.Code{codes.NotFound, codes.OK}, []error{status.Error(codes.NotFound, "x"), status.Error(codes.Unavailable, "x"), nil, nil}, 2, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			u := mustNew(t, Config{Sampler: newFake(1), ErrorCodes: tt.codes, now: clk.now})
			for _, err := range tt.errs {
				unary(u, err)
			}
			clk.add(2 * time.Second)
			if r := u.Report(); r.RPS != tt.rps || r.EPS != tt.eps {
				t.Errorf("Report RPS %v EPS %v, want %v and %v", r.RPS, r.EPS, tt.rps, tt.eps)
			}
		})
	}
}

// TestRateWindow: rates are measured over RateWindow, re-sampled every
// SampleEvery (within it the last figures stand), streams count in RPS
// and EPS but not in the latency, and a quiet window reads 0.
func TestRateWindow(t *testing.T) {
	clk := newFakeClock()
	u := mustNew(t, Config{Sampler: newFake(1), SampleEvery: time.Second, RateWindow: 4 * time.Second, now: clk.now})
	if r := u.Report(); r.RPS != 0 || r.EPS != 0 || r.Latency != 0 {
		t.Fatalf("before any RPC: %+v, want rates 0", r)
	}
	// 10 RPCs a second for 4 s, one failing a second.
	for range 4 {
		for i := range 10 {
			var err error
			if i == 0 {
				err = status.Error(codes.Unavailable, "down")
			}
			unary(u, err)
		}
		clk.add(time.Second)
		u.Report()
	}
	if r := u.Report(); r.RPS != 10 || r.EPS != 1 {
		t.Errorf("steady: RPS %v EPS %v, want 10 and 1", r.RPS, r.EPS)
	}
	// Within SampleEvery the figures stand.
	for range 50 {
		unary(u, nil)
	}
	clk.add(500 * time.Millisecond)
	if r := u.Report(); r.RPS != 10 {
		t.Errorf("within SampleEvery: RPS %v, want the last 10", r.RPS)
	}
	// A stream that fails counts in RPS and EPS.
	u.StreamInterceptor(nil, fakeStream{}, &grpc.StreamServerInfo{FullMethod: "/x/S"}, func(any, grpc.ServerStream) error {
		return status.Error(codes.Unavailable, "x")
	})
	// The ORCA out-of-band stream does not count.
	u.StreamInterceptor(nil, fakeStream{}, &grpc.StreamServerInfo{FullMethod: orcaStream}, func(any, grpc.ServerStream) error { return nil })
	clk.add(500 * time.Millisecond)
	// Over the last 4 s: 30 + 50 unary and 1 stream, 3 + 1 failed.
	if r := u.Report(); r.RPS != 81.0/4 || r.EPS != 1 {
		t.Errorf("window: RPS %v EPS %v, want %v and 1", r.RPS, r.EPS, 81.0/4)
	}
	// Quiet for a whole window: 0.
	for range 5 {
		clk.add(time.Second)
		u.Report()
	}
	if r := u.Report(); r.RPS != 0 || r.EPS != 0 || r.Latency != 0 {
		t.Errorf("after a quiet window: %+v, want rates 0", r)
	}
	if n := len(u.counts); n > 6 {
		t.Errorf("%d samples held for a window of 4 samples, want at most 6", n)
	}
}

// TestLatency: the mean time unary RPCs spent in the handler over the
// window (a lower bound only: the handler sleeps at least this long).
func TestLatency(t *testing.T) {
	clk := newFakeClock()
	u := mustNew(t, Config{Sampler: newFake(1), now: clk.now})
	for range 3 {
		u.UnaryInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
			time.Sleep(20 * time.Millisecond)
			return nil, nil
		})
	}
	clk.add(time.Second)
	if r := u.Report(); r.Latency < 20*time.Millisecond || r.RPS != 3 {
		t.Errorf("Report latency %v RPS %v, want at least 20ms and 3", r.Latency, r.RPS)
	}
}

func TestRateWindowConfig(t *testing.T) {
	for _, c := range []Config{{RateWindow: -time.Second}, {SampleEvery: 2 * time.Second, RateWindow: time.Second}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) = nil error, want one", c)
		}
	}
	u := mustNew(t, Config{Sampler: newFake(1), SampleEvery: time.Minute})
	if u.window != time.Minute {
		t.Errorf("window with SampleEvery 1m = %v, want 1m", u.window)
	}
}

// orcaTrailer decodes the per-call ORCA trailer.
func orcaTrailer(t *testing.T, md metadata.MD) *v3orcapb.OrcaLoadReport {
	t.Helper()
	v := md.Get("endpoint-load-metrics-bin")
	if len(v) != 1 {
		t.Fatalf("trailer %v has %d endpoint-load-metrics-bin values, want 1", md, len(v))
	}
	var rep v3orcapb.OrcaLoadReport
	if err := proto.Unmarshal([]byte(v[0]), &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// TestPerCallORCA: every RPC through a real server, failed ones too,
// carries the per-call ORCA trailer with cpu, application utilization,
// rps_fractional and eps (grpc-go writes it only for an RPC whose
// handler asked for its recorder: ServerOptions' inner interceptor does).
func TestPerCallORCA(t *testing.T) {
	clk, cpu := newFakeClock(), newFake(1)
	u := mustNew(t, Config{Limit: 4, Sampler: cpu, now: clk.now})
	h, conn := startBackend(t, u, false)
	close(h.release)
	hc := newHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 20 {
		if _, err := hc.c.Check(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(2 * time.Second)
	cpu.add(time.Second) // 50%
	var md metadata.MD
	if _, err := hc.c.Check(ctx, nil, grpc.Trailer(&md)); err != nil {
		t.Fatal(err)
	}
	rep := orcaTrailer(t, md)
	if !approx(rep.CpuUtilization, 0.5) || !approx(rep.ApplicationUtilization, 0.5) || !approx(rep.RpsFractional, 10) || rep.Eps != 0 {
		t.Errorf("trailer %v, want cpu 0.5, application 0.5, rps 10 (20 RPCs in 2 s), eps 0", rep)
	}
}

// TestPerCallORCAError: an RPC whose handler fails carries the trailer,
// and its error shows in eps once sampled.
func TestPerCallORCAError(t *testing.T) {
	clk := newFakeClock()
	u := mustNew(t, Config{Sampler: newFake(1), now: clk.now})
	fail := grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Unavailable, "disk stuck")
	})
	conn := startBackendWith(t, append(u.ServerOptions(), fail))
	hc := newHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 4 {
		hc.c.Check(ctx, nil)
	}
	clk.add(time.Second)
	var md metadata.MD
	_, err := hc.c.Check(ctx, nil, grpc.Trailer(&md))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Check = %v, want Unavailable", err)
	}
	if rep := orcaTrailer(t, md); !approx(rep.RpsFractional, 4) || !approx(rep.Eps, 4) {
		t.Errorf("trailer %v, want rps 4 and eps 4", rep)
	}
}

// TestCPUOnlyNoRates: a CPU-only helper counts no RPCs: its ORCA leaves
// rps and eps unset and its reports carry none.
func TestCPUOnlyNoRates(t *testing.T) {
	u := CPUOnly(newFake(1))
	if m := u.ServerMetrics(); m.QPS != -1 || m.EPS != -1 {
		t.Errorf("CPUOnly ORCA QPS %v EPS %v, want -1 (unset)", m.QPS, m.EPS)
	}
	if r := u.Report(); r.RPS != 0 || r.EPS != 0 || r.Latency != 0 {
		t.Errorf("CPUOnly report %+v, want no rates", r)
	}
}

// staticSource is a Source with a fixed report.
type staticSource Report

func (s staticSource) Report() Report { return Report(s) }

// TestReporterSendsRates: the Reporter sends rps, eps and latency to the
// registry, clamped to the server's bounds; a report without traffic
// sends none (0), which the table stores as not reported.
func TestReporterSendsRates(t *testing.T) {
	if maxRPS != load.MaxRPS || maxLatencyMs != load.MaxLatencyMs {
		t.Fatalf("the reporter's bounds %v, %v differ from the server's %v, %v", maxRPS, maxLatencyMs, load.MaxRPS, load.MaxLatencyMs)
	}
	tests := []struct {
		name              string
		src               staticSource
		rps, eps, latency float64
	}{
		{"rates", staticSource{CPU: 0.2, Limit: 8, RPS: 120, EPS: 30, Latency: 12500 * time.Microsecond}, 120, 30, 12.5},
		{"none", staticSource{CPU: 0.2, Limit: 8}, 0, 0, 0},
		{"clamped", staticSource{CPU: 0.2, Limit: 8, RPS: 2e7, EPS: 3e7, Latency: 2 * time.Hour}, 1e7, 1e7, 3.6e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			util, store, addr := startRegistryStore(t)
			if _, err := store.Apply(staticUpsert("batch", "batch-1")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			r := &Reporter{Target: addr, Service: "batch", EndpointID: "batch-1", Interval: 100 * time.Millisecond, Source: tt.src}
			go func() { done <- r.Run(ctx) }()
			var got []load.EndpointUtilization
			waitFor(t, "the report in the table", func() bool {
				got = util.Utilizations("batch", time.Now())
				return len(got) == 1
			})
			cancel()
			<-done
			if e := got[0]; e.RPS != tt.rps || e.EPS != tt.eps || e.LatencyMs != tt.latency {
				t.Errorf("table entry %+v, want rps %v eps %v latency %v ms", e, tt.rps, tt.eps, tt.latency)
			}
		})
	}
}

// startBackendWith is a real gRPC server with opts and a health service
// that answers at once.
func startBackendWith(t *testing.T, opts []grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	h := &holdServer{release: make(chan struct{})}
	close(h.release)
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// staticUpsert is a Kubernetes endpoint (no lease) of service.
func staticUpsert(service, id string) registry.Op {
	return registry.Upsert(service, &registry.Endpoint{ID: id, Address: netip.MustParseAddr("10.0.0.1"),
		Ports: []registry.Port{{Name: "grpc", Number: 9001, Protocol: registry.TCP}}, Health: registry.Healthy, Source: registry.SourceKubernetes})
}

// TestRatesWithFailingSampler: a CPU sampler that keeps failing does not
// make every Report take a rate sample (the trailer calls Report on every
// RPC): the samples stay bounded by the window.
func TestRatesWithFailingSampler(t *testing.T) {
	clk, cpu := newFakeClock(), newFake(1)
	u := mustNew(t, Config{Sampler: cpu, SampleEvery: time.Second, RateWindow: 4 * time.Second, now: clk.now})
	cpu.mu.Lock()
	cpu.err = errors.New("cgroup gone")
	cpu.mu.Unlock()
	for range 20 {
		clk.add(time.Second)
		u.Report() // the second's sample
		for range 100 {
			unary(u, nil)
			u.Report()
		}
	}
	clk.add(time.Second)
	if n := len(u.counts); n > 6 {
		t.Errorf("%d rate samples held with a failing CPU sampler, want at most 6", n)
	}
	if r := u.Report(); r.RPS != 100 {
		t.Errorf("RPS %v with a failing CPU sampler, want 100", r.RPS)
	}
}

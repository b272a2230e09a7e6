package utilization

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	v3orcaservicepb "github.com/cncf/xds/go/xds/service/orca/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock and fakeCPU drive the CPU arithmetic by hand.
type fakeCPU struct {
	mu    sync.Mutex
	used  time.Duration
	cores float64
	err   error
}

func (f *fakeCPU) Sample() (time.Duration, float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used, f.cores, f.err
}

func (f *fakeCPU) add(d time.Duration) { f.mu.Lock(); f.used += d; f.mu.Unlock() }

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Unix(1000, 0)} }
func newFake(cores float64) *fakeCPU     { return &fakeCPU{cores: cores} }
func approx(a, b float64) bool           { return a-b < 1e-9 && b-a < 1e-9 }
func mustNew(t *testing.T, c Config) *Utilization {
	t.Helper()
	u, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestNewValidates(t *testing.T) {
	for _, c := range []Config{{Limit: -1}, {SampleEvery: -time.Second}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) = nil error, want one", c)
		}
	}
	u := mustNew(t, Config{Sampler: newFake(1)})
	if r := u.Report(); r.Limit != DefaultLimit {
		t.Errorf("Limit = %d, want DefaultLimit %d", r.Limit, DefaultLimit)
	}
}

// TestReportArithmetic: cpu is the used share of the quota between two
// samples; utilization is max(cpu, in_flight/limit), capped at 1.
func TestReportArithmetic(t *testing.T) {
	clk, cpu := newFakeClock(), newFake(2)
	u := mustNew(t, Config{Limit: 4, Sampler: cpu, SampleEvery: time.Second, now: clk.now})
	clk.add(time.Second)
	cpu.add(500 * time.Millisecond) // 0.5 s of 2 cores over 1 s = 25%
	if r := u.Report(); !approx(r.CPU, 0.25) || !approx(r.Utilization, 0.25) || r.InFlight != 0 || r.Limit != 4 {
		t.Errorf("Report = %+v, want cpu 0.25, utilization 0.25", r)
	}
	// Within SampleEvery the last figure stands.
	clk.add(100 * time.Millisecond)
	cpu.add(time.Second)
	if r := u.Report(); !approx(r.CPU, 0.25) {
		t.Errorf("Report within SampleEvery: cpu = %v, want 0.25", r.CPU)
	}
	// Three in flight of 4: 75% > cpu.
	u.inFlight.Add(3)
	if r := u.Report(); !approx(r.Utilization, 0.75) {
		t.Errorf("utilization = %v, want 0.75 (in-flight)", r.Utilization)
	}
	u.inFlight.Add(5)
	if r := u.Report(); r.Utilization != 1 {
		t.Errorf("utilization = %v, want capped at 1", r.Utilization)
	}
	u.inFlight.Add(-8)
	// A failing sampler keeps the last figure.
	clk.add(time.Second)
	cpu.mu.Lock()
	cpu.err = errors.New("boom")
	cpu.mu.Unlock()
	if r := u.Report(); !approx(r.CPU, 0.25) {
		t.Errorf("after a sampler error cpu = %v, want the last 0.25", r.CPU)
	}
	// CPUOnly: no in-flight.
	c := CPUOnly(newFake(1))
	if r := c.Report(); r.Limit != 0 || r.Utilization != r.CPU {
		t.Errorf("CPUOnly Report = %+v, want limit 0 and utilization = cpu", r)
	}
}

// holdServer is a real gRPC server with the helper installed whose health
// Watch streams and a blocking unary method hold RPCs in flight.
type holdServer struct {
	healthpb.UnimplementedHealthServer
	release chan struct{}
}

func (h *holdServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *holdServer) Watch(_ *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	select {
	case <-h.release:
	case <-s.Context().Done():
	}
	return nil
}

func startBackend(t *testing.T, u *Utilization, orcaToo bool) (*holdServer, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(u.ServerOptions()...)
	h := &holdServer{release: make(chan struct{})}
	healthpb.RegisterHealthServer(srv, h)
	if orcaToo {
		if err := u.RegisterORCA(srv); err != nil {
			t.Fatal(err)
		}
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return h, conn
}

// waitFor polls cond until it holds or 10 s pass (a wait, not a timing
// assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestInFlightConcurrent: 40 unary RPCs and 10 streams held at once count
// 50; all released count 0.
func TestInFlightConcurrent(t *testing.T) {
	u := mustNew(t, Config{Limit: 100, Sampler: newFake(1)})
	h, conn := startBackend(t, u, false)
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 40 {
		wg.Go(func() {
			if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				errs <- err
			}
		})
	}
	for range 10 {
		wg.Go(func() {
			s, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				errs <- err
				return
			}
			s.Recv() // io.EOF once released
		})
	}
	waitFor(t, "50 RPCs in flight", func() bool { return u.InFlight() == 50 })
	if r := u.Report(); r.InFlight != 50 || !approx(r.Utilization, 0.5) {
		t.Errorf("Report = %+v, want 50 in flight, utilization 0.5", r)
	}
	close(h.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("RPC: %v", err)
	}
	// The interceptor returns before gRPC writes the response, so every
	// answered RPC is already uncounted.
	if n := u.InFlight(); n != 0 {
		t.Errorf("InFlight = %d after every RPC returned, want 0", n)
	}
}

// TestORCAOutOfBand: an ORCA OOB client (OpenRcaService.StreamCoreMetrics,
// what grpc-go's weighted_round_robin opens) receives cpu_utilization and
// application_utilization.
func TestORCAOutOfBand(t *testing.T) {
	clk, cpu := newFakeClock(), newFake(1)
	u := mustNew(t, Config{Limit: 4, Sampler: cpu, SampleEvery: time.Hour, now: clk.now})
	clk.add(time.Hour)
	cpu.add(36 * time.Minute) // 60%
	if r := u.Report(); !approx(r.CPU, 0.6) {
		t.Fatalf("cpu = %v, want 0.6", r.CPU)
	}
	h, conn := startBackend(t, u, true)
	defer close(h.release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	for range 3 {
		go hc.Check(ctx, &healthpb.HealthCheckRequest{})
	}
	waitFor(t, "3 RPCs in flight", func() bool { return u.InFlight() == 3 })
	s, err := v3orcaservicegrpc.NewOpenRcaServiceClient(conn).StreamCoreMetrics(ctx, &v3orcaservicepb.OrcaLoadReportRequest{ReportInterval: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !approx(rep.CpuUtilization, 0.6) || !approx(rep.ApplicationUtilization, 0.75) {
		t.Errorf("ORCA report cpu %v app %v, want 0.6 and 0.75 (3 of 4 in flight)", rep.CpuUtilization, rep.ApplicationUtilization)
	}
}

func TestCgroupCPUAt(t *testing.T) {
	tests := []struct {
		name, stat, max string
		used            time.Duration
		cores           float64
	}{
		{"quota-2-cores", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n", "200000 100000\n", 1500 * time.Millisecond, 2},
		{"quota-half-core", "usage_usec 7\n", "50000 100000\n", 7 * time.Microsecond, 0.5},
		{"no-quota", "usage_usec 42\nnr_periods 0\n", "max 100000\n", 42 * time.Microsecond, -1},
		{"no-cpu-max-file", "usage_usec 42\n", "", 42 * time.Microsecond, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(tc.stat), 0o644)
			if tc.max != "" {
				os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(tc.max), 0o644)
			}
			used, cores, err := CgroupCPUAt(dir).Sample()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.cores
			if want < 0 {
				want = float64(gomaxprocs())
			}
			if used != tc.used || cores != want {
				t.Errorf("Sample = %v, %v cores; want %v, %v", used, cores, tc.used, want)
			}
		})
	}
	// No cgroup v2 at all: this process's CPU.
	if _, cores, err := CgroupCPUAt(t.TempDir()).Sample(); err != nil || cores != float64(gomaxprocs()) {
		t.Errorf("without cgroup files: %v cores, %v; want GOMAXPROCS and no error", cores, err)
	}
	// Broken files are errors, not zero.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte("user_usec 1\n"), 0o644)
	if _, _, err := CgroupCPUAt(dir).Sample(); err == nil {
		t.Error("cpu.stat without usage_usec: no error")
	}
}

func TestParseCPUMax(t *testing.T) {
	tests := []struct {
		in    string
		cores float64
		ok    bool
		err   bool
	}{
		{"max 100000", 0, false, false},
		{"100000 100000\n", 1, true, false},
		{"250000 100000", 2.5, true, false},
		{"", 0, false, true},
		{"max", 0, false, true},
		{"max 0", 0, false, true},
		{"0 100000", 0, false, true},
		{"-5 100000", 0, false, true},
		{"abc 100000", 0, false, true},
		{"1 2 3", 0, false, true},
	}
	for _, tc := range tests {
		cores, ok, err := parseCPUMax([]byte(tc.in))
		if cores != tc.cores || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("parseCPUMax(%q) = %v, %v, %v; want %v, %v, error %v", tc.in, cores, ok, err, tc.cores, tc.ok, tc.err)
		}
	}
}

func TestParseCPUStat(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"usage_usec 10\n", 10 * time.Microsecond, false},
		{"user_usec 3\nusage_usec 10\n", 10 * time.Microsecond, false},
		{"usage_usec x\n", 0, true},
		{"usage_usec -1\n", 0, true},
		{"usage_usec 99999999999999999999\n", 0, true},
		{"", 0, true},
	}
	for _, tc := range tests {
		got, err := parseCPUStat([]byte(tc.in))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("parseCPUStat(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

const procStat = `cpu  100 5 50 1000 20 1 2 3 0 0
cpu0 50 2 25 500 10 0 1 1 0 0
cpu1 50 3 25 500 10 1 1 2 0 0
intr 12345
ctxt 999
`

func TestParseProcStat(t *testing.T) {
	busy, cpus, err := parseProcStat([]byte(procStat))
	if err != nil || busy != 100+5+50+1+2+3 || cpus != 2 {
		t.Errorf("parseProcStat = %d busy, %d cpus, %v; want 161, 2", busy, cpus, err)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2\n", "cpu 1 2 x 4 5\n"} {
		if _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
	path := filepath.Join(t.TempDir(), "stat")
	os.WriteFile(path, []byte(procStat), 0o644)
	used, cores, err := HostCPUAt(path).Sample()
	if err != nil || used != 1610*time.Millisecond || cores != 2 {
		t.Errorf("HostCPUAt = %v, %v, %v; want 1.61s, 2 cores", used, cores, err)
	}
	if _, _, err := HostCPU().Sample(); err != nil {
		t.Errorf("HostCPU on this machine: %v", err)
	}
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("usage_usec 1500000\nuser_usec 1\n"), []byte("200000 100000\n"))
	f.Add([]byte("usage_usec 0"), []byte("max 100000"))
	f.Add([]byte(procStat), []byte(""))
	f.Fuzz(func(t *testing.T, stat, max []byte) {
		if used, err := parseCPUStat(stat); err == nil && used < 0 {
			t.Errorf("parseCPUStat(%q) = %v, negative", stat, used)
		}
		if cores, ok, err := parseCPUMax(max); err == nil && ok && !(cores > 0) {
			t.Errorf("parseCPUMax(%q) = %v cores, want > 0", max, cores)
		}
		parseProcStat(stat)
	})
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

func newHealthClient(c grpc.ClientConnInterface) healthClient {
	return healthClient{healthpb.NewHealthClient(c)}
}

type healthClient struct{ c healthpb.HealthClient }

func (h healthClient) Check(ctx context.Context, _ any) (*healthpb.HealthCheckResponse, error) {
	return h.c.Check(ctx, &healthpb.HealthCheckRequest{})
}

package utilization

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/orca"
)

// DefaultLimit is the in-flight RPCs that count as 100% when Config.Limit
// is zero.
const DefaultLimit = 64

// DefaultSampleEvery is how often CPU is re-sampled when
// Config.SampleEvery is zero.
const DefaultSampleEvery = time.Second

// Config configures a Utilization.
type Config struct {
	// Limit is the number of in-flight RPCs counted as 100% utilization;
	// zero means DefaultLimit, negative is an error.
	Limit int
	// Sampler reads CPU; nil means CgroupCPU().
	Sampler Sampler
	// SampleEvery is the shortest time between two CPU samples: Report
	// within it returns the last CPU figure. Zero means DefaultSampleEvery.
	SampleEvery time.Duration
	// Logger receives sampler errors; nil discards them.
	Logger *slog.Logger

	now func() time.Time // test seam; nil means time.Now
}

// Report is one reading.
type Report struct {
	// CPU is the share of the CPU quota used since the previous sample,
	// 0..1 (clamped).
	CPU float64
	// InFlight is the RPCs being served now; Limit the count that is 100%.
	// Limit 0 means in-flight is not counted (CPUOnly).
	InFlight, Limit int
	// Utilization is max(CPU, InFlight/Limit), capped at 1.
	Utilization float64
}

// Utilization counts in-flight RPCs and samples CPU. It is safe for
// concurrent use.
type Utilization struct {
	// Read-only after New.
	limit   int
	sampler Sampler
	every   time.Duration
	log     *slog.Logger
	now     func() time.Time

	inFlight atomic.Int64

	// mu guards the last sample.
	mu       sync.Mutex
	lastAt   time.Time
	lastUsed time.Duration
	cpu      float64
}

// New validates cfg and returns a Utilization.
func New(cfg Config) (*Utilization, error) {
	if cfg.Limit < 0 {
		return nil, fmt.Errorf("utilization config: Limit: %d is negative", cfg.Limit)
	}
	if cfg.SampleEvery < 0 {
		return nil, fmt.Errorf("utilization config: SampleEvery: %v is negative", cfg.SampleEvery)
	}
	if cfg.Limit == 0 {
		cfg.Limit = DefaultLimit
	}
	return newUtilization(cfg), nil
}

func newUtilization(cfg Config) *Utilization {
	if cfg.Sampler == nil {
		cfg.Sampler = CgroupCPU()
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	u := &Utilization{limit: cfg.Limit, sampler: cfg.Sampler, every: cfg.SampleEvery, log: cfg.Logger, now: cfg.now}
	u.sample(u.now()) // the baseline of the first delta
	return u
}

// CPUOnly returns a Utilization that does not count in-flight RPCs (its
// reports have Limit 0 and Utilization = CPU): for a host agent.
func CPUOnly(s Sampler) *Utilization { return newUtilization(Config{Sampler: s}) }

// ServerOptions are the options to pass to grpc.NewServer: unary and
// stream interceptors that count in-flight RPCs, and ORCA per-call
// metrics (cpu_utilization and application_utilization in each RPC's
// trailer) for clients that ask for them.
func (u *Utilization) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(u.UnaryInterceptor),
		grpc.ChainStreamInterceptor(u.StreamInterceptor),
		orca.CallMetricsServerOption(u),
	}
}

// UnaryInterceptor counts the RPC as in flight while handler runs.
func (u *Utilization) UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
	return handler(ctx, req)
}

// orcaStream is the ORCA out-of-band stream, which lasts as long as the
// client's connection and is no work: it is not counted.
const orcaStream = "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics"

// StreamInterceptor counts the stream as in flight while handler runs
// (except the ORCA out-of-band stream).
func (u *Utilization) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info != nil && info.FullMethod == orcaStream {
		return handler(srv, ss)
	}
	u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
	return handler(srv, ss)
}

// RegisterORCA serves the out-of-band ORCA service (OpenRcaService) on s
// with the same numbers, so grpc-go's weighted_round_robin sees them.
// grpc-go reports at most every 30 s unless the client asks for longer.
func (u *Utilization) RegisterORCA(s grpc.ServiceRegistrar) error {
	return orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: u})
}

// InFlight is the number of RPCs being served now.
func (u *Utilization) InFlight() int { return int(u.inFlight.Load()) }

// Report returns the current reading, sampling CPU if the last sample is
// older than SampleEvery.
func (u *Utilization) Report() Report {
	cpu := u.sample(u.now())
	r := Report{CPU: cpu, InFlight: u.InFlight(), Limit: u.limit, Utilization: cpu}
	if r.Limit > 0 {
		r.Utilization = max(r.Utilization, float64(r.InFlight)/float64(r.Limit))
	}
	r.Utilization = min(r.Utilization, 1)
	return r
}

// sample returns the CPU share, re-sampling when the last sample is at
// least every old.
func (u *Utilization) sample(now time.Time) float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.lastAt.IsZero() && now.Sub(u.lastAt) < u.every {
		return u.cpu
	}
	used, cores, err := u.sampler.Sample()
	if err != nil {
		u.log.Warn("cpu sample failed", "err", err)
		return u.cpu
	}
	if !u.lastAt.IsZero() && cores > 0 {
		wall := now.Sub(u.lastAt)
		u.cpu = min(max(float64(used-u.lastUsed)/(float64(wall)*cores), 0), 1)
	}
	u.lastAt, u.lastUsed = now, used
	return u.cpu
}

// ServerMetrics implements orca.ServerMetricsProvider: cpu_utilization is
// CPU and application_utilization is Utilization.
func (u *Utilization) ServerMetrics() *orca.ServerMetrics {
	r := u.Report()
	return &orca.ServerMetrics{
		CPUUtilization: r.CPU,
		AppUtilization: r.Utilization,
		MemUtilization: -1,
		QPS:            -1,
		EPS:            -1,
		Utilization:    map[string]float64{},
		RequestCost:    map[string]float64{},
		NamedMetrics:   map[string]float64{},
	}
}

var _ orca.ServerMetricsProvider = (*Utilization)(nil)

var errNoTarget = errors.New("utilization reporter config: one of Conn and Target is required")

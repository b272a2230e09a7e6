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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
)

// DefaultLimit is the in-flight RPCs that count as 100% when Config.Limit
// is zero.
const DefaultLimit = 64

// DefaultSampleEvery is how often CPU is re-sampled when
// Config.SampleEvery is zero.
const DefaultSampleEvery = time.Second

// DefaultRateWindow is the window of the request rate, error rate and
// latency when Config.RateWindow is zero.
const DefaultRateWindow = 10 * time.Second

// DefaultErrorCodes are the status codes counted as errors when
// Config.ErrorCodes is nil: those that say the server failed the request
// (or could not serve it in time), not those that say the request was
// wrong (InvalidArgument, NotFound, PermissionDenied, ...) or that the
// client gave up (Canceled).
var DefaultErrorCodes = []codes.Code{codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
	codes.Internal, codes.Unavailable, codes.DataLoss}

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
	// RateWindow is the window over which Report's RPS, EPS and Latency
	// are measured (sampled every SampleEvery, so the window is rounded
	// up to a whole number of samples). Zero means DefaultRateWindow, or
	// SampleEvery when that is longer; else at least SampleEvery.
	RateWindow time.Duration
	// ErrorCodes are the status codes an RPC that ends with them counts
	// as an error (an error that is not a status counts as Unknown). Nil
	// means DefaultErrorCodes; OK is never an error.
	ErrorCodes []codes.Code

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
	// RPS is the RPCs completed per second and EPS those of them that
	// failed (ended with one of Config.ErrorCodes), over the last
	// RateWindow; Latency is the mean time a unary RPC spent in the
	// handler over that window (streams are counted in RPS and EPS, not
	// in Latency). All 0 before the first sample after New, without
	// traffic, and for CPUOnly.
	RPS, EPS float64
	Latency  time.Duration
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

	window  time.Duration
	isError [17]bool // by codes.Code; codes above 16 are not errors

	inFlight atomic.Int64
	// Completed RPCs, failed ones, and the unary ones' count and total
	// time in the handler, since New.
	requests, errors, unary, unaryNanos atomic.Int64

	// mu guards the last sample.
	mu       sync.Mutex
	lastAt   time.Time
	lastUsed time.Duration
	cpu      float64
	// counts: the counters at the last samples, oldest first, at most
	// window/every + 1 of them; rates: what the last sample, at ratesAt,
	// measured.
	counts  []counts
	rates   rates
	ratesAt time.Time
}

// counts are the RPC counters at one sample.
type counts struct {
	at                                  time.Time
	requests, errors, unary, unaryNanos int64
}

// rates are Report's RPS, EPS and Latency.
type rates struct {
	rps, eps float64
	latency  time.Duration
}

// New validates cfg and returns a Utilization.
func New(cfg Config) (*Utilization, error) {
	if cfg.Limit < 0 {
		return nil, fmt.Errorf("utilization config: Limit: %d is negative", cfg.Limit)
	}
	if cfg.SampleEvery < 0 {
		return nil, fmt.Errorf("utilization config: SampleEvery: %v is negative", cfg.SampleEvery)
	}
	if cfg.RateWindow < 0 {
		return nil, fmt.Errorf("utilization config: RateWindow: %v is negative", cfg.RateWindow)
	}
	if cfg.RateWindow > 0 && cfg.RateWindow < max(cfg.SampleEvery, 1) {
		return nil, fmt.Errorf("utilization config: RateWindow: %v is shorter than SampleEvery (%v)", cfg.RateWindow, cfg.SampleEvery)
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
	if cfg.RateWindow == 0 {
		cfg.RateWindow = max(DefaultRateWindow, cfg.SampleEvery)
	}
	if cfg.ErrorCodes == nil {
		cfg.ErrorCodes = DefaultErrorCodes
	}
	u := &Utilization{limit: cfg.Limit, sampler: cfg.Sampler, every: cfg.SampleEvery, log: cfg.Logger, now: cfg.now,
		window: cfg.RateWindow}
	for _, c := range cfg.ErrorCodes {
		if c != codes.OK && int(c) < len(u.isError) {
			u.isError[c] = true
		}
	}
	u.sample(u.now()) // the baseline of the first delta
	return u
}

// CPUOnly returns a Utilization that does not count in-flight RPCs (its
// reports have Limit 0 and Utilization = CPU): for a host agent.
func CPUOnly(s Sampler) *Utilization { return newUtilization(Config{Sampler: s}) }

// ServerOptions are the options to pass to grpc.NewServer: unary and
// stream interceptors that count in-flight, completed and failed RPCs,
// and ORCA per-call metrics: every RPC's trailer (endpoint-load-metrics-bin)
// carries cpu_utilization, application_utilization, rps_fractional and eps
// for clients that read them (grpc-go's weighted_round_robin). Interceptors
// a caller chains after these options run inside them.
func (u *Utilization) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(u.UnaryInterceptor),
		grpc.ChainStreamInterceptor(u.StreamInterceptor),
		orca.CallMetricsServerOption(u),
		// Inside orca's: grpc-go writes the trailer only for an RPC
		// whose handler asked for its recorder.
		grpc.ChainUnaryInterceptor(orcaTrailerUnary),
		grpc.ChainStreamInterceptor(orcaTrailerStream),
	}
}

// orcaTrailerUnary asks for the RPC's ORCA recorder, so that
// orca.CallMetricsServerOption sends the per-call trailer.
func orcaTrailerUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	orca.CallMetricsRecorderFromContext(ctx)
	return handler(ctx, req)
}

// orcaTrailerStream is orcaTrailerUnary for streams (not the ORCA
// out-of-band stream).
func orcaTrailerStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info == nil || info.FullMethod != orcaStream {
		orca.CallMetricsRecorderFromContext(ss.Context())
	}
	return handler(srv, ss)
}

// UnaryInterceptor counts the RPC as in flight while handler runs, then
// as completed (and failed, by its status), with its time in handler.
func (u *Utilization) UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
	start := time.Now()
	resp, err := handler(ctx, req)
	u.unaryNanos.Add(int64(time.Since(start)))
	u.unary.Add(1)
	u.done(err)
	return resp, err
}

// done counts a completed RPC that ended with err.
func (u *Utilization) done(err error) {
	u.requests.Add(1)
	if err == nil {
		return
	}
	if c := status.Code(err); int(c) < len(u.isError) && u.isError[c] {
		u.errors.Add(1)
	}
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
	err := handler(srv, ss)
	u.done(err)
	return err
}

// RegisterORCA serves the out-of-band ORCA service (OpenRcaService) on s
// with the same numbers, so grpc-go's weighted_round_robin sees them.
// grpc-go reports at most every 30 s unless the client asks for longer.
func (u *Utilization) RegisterORCA(s grpc.ServiceRegistrar) error {
	return orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: u})
}

// InFlight is the number of RPCs being served now.
func (u *Utilization) InFlight() int { return int(u.inFlight.Load()) }

// Report returns the current reading, sampling CPU and the RPC counters
// if the last sample is older than SampleEvery.
func (u *Utilization) Report() Report {
	cpu, rt := u.sample(u.now())
	r := Report{CPU: cpu, InFlight: u.InFlight(), Limit: u.limit, Utilization: cpu, RPS: rt.rps, EPS: rt.eps, Latency: rt.latency}
	if r.Limit > 0 {
		r.Utilization = max(r.Utilization, float64(r.InFlight)/float64(r.Limit))
	}
	r.Utilization = min(r.Utilization, 1)
	return r
}

// sample returns the CPU share and the RPC rates, re-sampling when the
// last sample is at least every old.
func (u *Utilization) sample(now time.Time) (float64, rates) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.lastAt.IsZero() && now.Sub(u.lastAt) < u.every {
		return u.cpu, u.rates
	}
	if u.ratesAt.IsZero() || now.Sub(u.ratesAt) >= u.every {
		// Not with lastAt: a failing CPU sampler leaves that behind.
		u.sampleRates(now)
		u.ratesAt = now
	}
	used, cores, err := u.sampler.Sample()
	if err != nil {
		u.log.Warn("cpu sample failed", "err", err)
		return u.cpu, u.rates
	}
	if !u.lastAt.IsZero() && cores > 0 {
		wall := now.Sub(u.lastAt)
		u.cpu = min(max(float64(used-u.lastUsed)/(float64(wall)*cores), 0), 1)
	}
	u.lastAt, u.lastUsed = now, used
	return u.cpu, u.rates
}

// sampleRates records the RPC counters at now and measures the rates
// against the oldest sample within the window. Called with mu held.
func (u *Utilization) sampleRates(now time.Time) {
	c := counts{at: now, requests: u.requests.Load(), errors: u.errors.Load(), unary: u.unary.Load(), unaryNanos: u.unaryNanos.Load()}
	// Drop the samples the window has passed, keeping one at or before
	// its start.
	for len(u.counts) > 1 && now.Sub(u.counts[1].at) >= u.window {
		u.counts = u.counts[1:]
	}
	if len(u.counts) > 0 {
		old := u.counts[0]
		if secs := now.Sub(old.at).Seconds(); secs > 0 {
			u.rates = rates{rps: float64(c.requests-old.requests) / secs, eps: float64(c.errors-old.errors) / secs}
			if n := c.unary - old.unary; n > 0 {
				u.rates.latency = time.Duration((c.unaryNanos - old.unaryNanos) / n)
			}
		}
	}
	if len(u.counts) == cap(u.counts) {
		u.counts = append(u.counts[:0:0], u.counts...) // move to a fresh array rather than grow at the front
	}
	u.counts = append(u.counts, c)
}

// ServerMetrics implements orca.ServerMetricsProvider: cpu_utilization is
// CPU, application_utilization is Utilization, rps_fractional is RPS and
// eps is EPS (both unset for CPUOnly, which counts no RPCs).
func (u *Utilization) ServerMetrics() *orca.ServerMetrics {
	r := u.Report()
	qps, eps := r.RPS, r.EPS
	if u.limit == 0 {
		qps, eps = -1, -1
	}
	return &orca.ServerMetrics{
		CPUUtilization: r.CPU,
		AppUtilization: r.Utilization,
		MemUtilization: -1,
		QPS:            qps,
		EPS:            eps,
		Utilization:    map[string]float64{},
		RequestCost:    map[string]float64{},
		NamedMetrics:   map[string]float64{},
	}
}

var _ orca.ServerMetricsProvider = (*Utilization)(nil)

var errNoTarget = errors.New("utilization reporter config: one of Conn and Target is required")

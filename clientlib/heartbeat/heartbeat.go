package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// DeregisterTimeout bounds the Deregister call Run makes after its context
// ends.
const DeregisterTimeout = 5 * time.Second

const (
	// maxTTL is the longest TTL the wire (uint32 seconds) can carry.
	maxTTL = math.MaxUint32 * time.Second
	// fallbackTTL stands in for a granted TTL the server reported as 0 s
	// (a sub-second default): the shortest TTL the wire can express.
	fallbackTTL = time.Second

	defaultRPCTimeout  = 10 * time.Second
	defaultBackoffBase = 100 * time.Millisecond
	defaultBackoffMax  = 15 * time.Second
)

// Config configures an Agent.
type Config struct {
	// Conn is the connection to the spillway registry (its gRPC port,
	// 127.0.0.1:18000 by default); non-nil. The Agent does not close it.
	Conn grpc.ClientConnInterface
	// Service is the service to register under, e.g. "payments"; required.
	// The server validates and normalises it.
	Service string
	// Endpoint is the endpoint to register; non-nil. New keeps a copy, so
	// the caller may reuse it. The server fills the output-only fields and
	// validates the rest (an invalid endpoint makes Run fail with
	// InvalidArgument).
	Endpoint *registryv1.Endpoint
	// TTL is the lease TTL to ask for, rounded up to whole seconds; zero
	// means the server default (30 s unless configured otherwise).
	TTL time.Duration
	// Interval is the time between heartbeats; zero means a third of the
	// TTL the server granted. When both are set, it must be shorter than
	// TTL; an Interval that is not shorter than the TTL the server grants
	// by default is replaced by a third of it. At most half the TTL is
	// best: the server counts a lease with under half its TTL left as at
	// risk.
	Interval time.Duration
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// Agent keeps one endpoint registered while Run runs. Create it with New.
type Agent struct {
	// Read-only after New.
	client     registryv1.RegistryClient
	service    string
	endpoint   *registryv1.Endpoint // private copy, never modified
	ttlSeconds uint32
	interval   time.Duration // as configured; zero means from the grant
	log        *slog.Logger
	registered chan struct{}
	started    atomic.Bool

	// Test seams, set before Run.
	backoffBase, backoffMax time.Duration
	rpcTimeout              time.Duration
	streamEnded             func(error) // called when a heartbeat stream breaks

	// Owned by Run's goroutine.
	curInterval   time.Duration // heartbeat period for the current lease
	registeredYet bool

	// mu guards leaseID, which LeaseID reads from any goroutine.
	mu      sync.Mutex
	leaseID string
}

// New validates cfg and returns an Agent. Errors name the bad field.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Conn == nil:
		return nil, errors.New("heartbeat config: Conn is nil")
	case cfg.Service == "":
		return nil, errors.New("heartbeat config: Service is empty")
	case cfg.Endpoint == nil:
		return nil, errors.New("heartbeat config: Endpoint is nil")
	case cfg.TTL < 0:
		return nil, fmt.Errorf("heartbeat config: TTL %v is negative", cfg.TTL)
	case cfg.TTL > maxTTL:
		return nil, fmt.Errorf("heartbeat config: TTL %v is longer than %v", cfg.TTL, maxTTL)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("heartbeat config: Interval %v is negative", cfg.Interval)
	case cfg.TTL > 0 && cfg.Interval >= cfg.TTL:
		return nil, fmt.Errorf("heartbeat config: Interval %v is not shorter than TTL %v: the lease would expire between heartbeats", cfg.Interval, cfg.TTL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{
		client:      registryv1.NewRegistryClient(cfg.Conn),
		service:     cfg.Service,
		endpoint:    proto.CloneOf(cfg.Endpoint),
		ttlSeconds:  uint32((cfg.TTL + time.Second - 1) / time.Second),
		interval:    cfg.Interval,
		log:         log.With("component", "heartbeat", "service", cfg.Service),
		registered:  make(chan struct{}),
		backoffBase: defaultBackoffBase,
		backoffMax:  defaultBackoffMax,
		rpcTimeout:  defaultRPCTimeout,
	}, nil
}

// LeaseID returns the id of the lease the agent holds, or "" before the
// first registration, while it registers again after losing its lease, and
// after Run has deregistered. It is safe to call from any goroutine.
func (a *Agent) LeaseID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leaseID
}

func (a *Agent) setLeaseID(id string) {
	a.mu.Lock()
	a.leaseID = id
	a.mu.Unlock()
}

// Registered returns a channel that is closed once the first registration
// succeeds. It stays closed; a later loss of the lease does not reopen it.
func (a *Agent) Registered() <-chan struct{} { return a.registered }

// Run registers the endpoint, heartbeats until ctx ends, then deregisters it
// and returns nil. It returns an error only when the server rejects a
// registration for good (see the package documentation); transient failures
// are retried with backoff for as long as ctx lasts. Run may be called once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("heartbeat: Run called more than once")
	}
	if err := a.register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer a.deregister(ctx)

	attempt := 0
	for {
		healthy, err := a.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if a.streamEnded != nil {
			a.streamEnded(err)
		}
		if healthy {
			attempt = 0
		}
		d := a.backoff(attempt)
		attempt++
		a.log.Warn("heartbeat stream broken, reconnecting", "lease", a.LeaseID(), "retry_in", d, "err", err)
		if !sleep(ctx, d) {
			return nil
		}
	}
}

// fatalError carries a registration error that ends Run.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// permanent reports whether retrying a Register that failed with err cannot
// help: the request itself is refused.
func permanent(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition, codes.OutOfRange,
		codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return false
}

// register registers the endpoint, retrying transient failures with backoff.
// It returns nil once registered, ctx.Err() if ctx ends first, or the
// permanent error.
func (a *Agent) register(ctx context.Context) error {
	req := &registryv1.RegisterRequest{Service: a.service, Endpoint: a.endpoint, TtlSeconds: a.ttlSeconds}
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, a.rpcTimeout)
		resp, err := a.client.Register(actx, req)
		cancel()
		if err == nil {
			a.granted(resp)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			a.log.Error("registration refused", "err", err)
			return fmt.Errorf("heartbeat: register %s: %w", a.service, err)
		}
		d := a.backoff(attempt)
		a.log.Warn("register failed, retrying", "attempt", attempt+1, "retry_in", d, "err", err)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// granted records a successful registration.
func (a *Agent) granted(resp *registryv1.RegisterResponse) {
	ttl := time.Duration(resp.GetTtlSeconds()) * time.Second
	if ttl == 0 {
		ttl = fallbackTTL
	}
	switch {
	case a.interval == 0:
		a.curInterval = ttl / 3
	case a.interval >= ttl:
		// Only possible with the server's default TTL: New rejects it
		// otherwise. Heartbeating that slowly would lose every lease.
		a.curInterval = ttl / 3
		a.log.Warn("Interval is not shorter than the granted TTL, using TTL/3", "interval", a.interval, "ttl", ttl, "using", a.curInterval)
	default:
		a.curInterval = a.interval
		if a.interval > ttl/2 {
			// The server counts a lease with under half its TTL left as at
			// risk; many of them pause expiry fleet-wide.
			a.log.Warn("Interval is over half the TTL: the lease is often at risk of expiry", "interval", a.interval, "ttl", ttl)
		}
	}
	a.setLeaseID(resp.GetLeaseId())
	a.log.Info("registered", "lease", resp.GetLeaseId(), "endpoint", resp.GetEndpointId(), "ttl", ttl, "interval", a.curInterval)
	if !a.registeredYet {
		a.registeredYet = true
		close(a.registered)
	}
}

type recvResult struct {
	resp *registryv1.HeartbeatResponse
	err  error
}

// stream heartbeats over one HeartbeatStream until the stream breaks or ctx
// ends. healthy reports whether the server answered at least once. A
// *fatalError means a registration was refused.
func (a *Agent) stream(ctx context.Context) (healthy bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := a.client.HeartbeatStream(sctx)
	if err != nil {
		return false, fmt.Errorf("open heartbeat stream: %w", err)
	}

	// One goroutine receives; this one owns Send and the state.
	recvC := make(chan recvResult)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			resp, err := st.Recv()
			select {
			case recvC <- recvResult{resp, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-recvDone
	}()

	// recvErr returns the stream's real error after Send failed with io.EOF.
	recvErr := func(sendErr error) error {
		if sendErr != io.EOF {
			return fmt.Errorf("send heartbeat: %w", sendErr)
		}
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case r := <-recvC:
				if r.err != nil {
					return fmt.Errorf("receive heartbeat: %w", r.err)
				}
			}
		}
	}

	lid := a.LeaseID()
	// Heartbeat at once: after a reconnect this is what tells us whether
	// the (restarted) server still knows the lease.
	if err := st.Send(&registryv1.HeartbeatRequest{LeaseId: lid}); err != nil {
		return false, recvErr(err)
	}
	pending := true
	ticker := time.NewTicker(a.curInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return healthy, ctx.Err()
		case r := <-recvC:
			if r.err != nil {
				return healthy, fmt.Errorf("receive heartbeat: %w", r.err)
			}
			pending = false
			if !healthy {
				healthy = true
				a.log.Debug("heartbeat stream up", "lease", lid)
			}
			if r.resp.GetLeaseId() != lid || r.resp.GetFound() {
				continue
			}
			a.log.Warn("lease unknown to the server, registering again", "lease", lid)
			a.setLeaseID("")
			if err := a.register(ctx); err != nil {
				if ctx.Err() != nil {
					return healthy, err
				}
				return healthy, &fatalError{err}
			}
			lid = a.LeaseID()
			ticker.Reset(a.curInterval)
		case <-ticker.C:
			if pending {
				return healthy, fmt.Errorf("no heartbeat response within %v", a.curInterval)
			}
			if err := st.Send(&registryv1.HeartbeatRequest{LeaseId: lid}); err != nil {
				return healthy, recvErr(err)
			}
			pending = true
		}
	}
}

// deregister ends the lease with a fresh context: ctx has ended, but the
// endpoint should leave the registry now rather than one TTL later.
func (a *Agent) deregister(ctx context.Context) {
	id := a.LeaseID()
	if id == "" {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DeregisterTimeout)
	defer cancel()
	_, err := a.client.Deregister(dctx, &registryv1.DeregisterRequest{LeaseId: id})
	switch {
	case err == nil:
		a.log.Info("deregistered", "lease", id)
	case status.Code(err) == codes.NotFound:
		a.log.Info("lease already gone at deregistration", "lease", id)
	default:
		a.log.Warn("deregister failed, the endpoint stays until its lease expires", "lease", id, "err", err)
	}
	a.setLeaseID("")
}

// backoff returns the wait before retry attempt (0-based): exponential from
// backoffBase, capped at backoffMax, with equal jitter so that a fleet
// restarting together does not retry in lockstep.
func (a *Agent) backoff(attempt int) time.Duration {
	d := a.backoffMax
	if attempt < 32 {
		if b := a.backoffBase << attempt; b > 0 && b < d {
			d = b
		}
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

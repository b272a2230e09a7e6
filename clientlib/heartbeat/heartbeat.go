package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
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

// Config configures an Agent. Set exactly one of Conn and Servers.
type Config struct {
	// Conn is one connection to the spillway registry (its gRPC port,
	// 127.0.0.1:18000 by default), or nil when Servers is set. The Agent
	// does not close it. On a failure the Agent reconnects over the same
	// connection; use Servers to move between replicas.
	Conn grpc.ClientConnInterface
	// Servers are the registry replicas, or nil when Conn is set
	// (ParseServers reads a comma-separated list). Each entry is one of:
	//
	//   - host:port. A host that is a DNS name stands for every address
	//     it resolves to (with net.DefaultResolver, again at every
	//     failover); an IP address stands for itself.
	//   - dns:///host:port (or dns:host:port): the same as host:port.
	//     dns://DNS-SERVER/host:port asks DNS-SERVER (ip or name, port 53
	//     unless given, e.g. dns://10.0.0.53:5353/spillway.prod:18000)
	//     instead of the system's resolver, as grpc-go's dns resolver
	//     does. The port is required: grpc-go's default 443 is not assumed.
	//   - passthrough:///host:port: one address, not expanded: the name is
	//     resolved by the dialer at each connection, never by the Agent.
	//   - unix:PATH, unix:///ABSOLUTE-PATH or unix-abstract:NAME: one
	//     Unix socket (an entry such as unix:18000 is host unix, port
	//     18000, as it always was; write unix:./18000 for a socket).
	//
	// Other schemes are refused: xds:/// (it names a service, not the
	// registry), ipv4: and ipv6: (grpc-go has no resolver for them: list
	// the addresses as entries). The Agent turns the entries into one list
	// of addresses, dials each itself, uses one at a time and moves to the
	// next when it stops answering; see the package documentation.
	Servers []string
	// DialOptions are used to dial each of Servers; nil means plaintext
	// (insecure credentials). clientcreds.Config.DialOptions gives
	// TLS/mTLS and a bearer token (spillwayctl agent --tls-ca, --tls-cert,
	// --tls-key, --token-file). Ignored with Conn.
	DialOptions []grpc.DialOption
	// Service is the service to register under, e.g. "payments"; required.
	// The server validates and normalises it.
	Service string
	// Endpoint is the endpoint to register; non-nil. New keeps a copy, so
	// the caller may reuse it. The server fills the output-only fields and
	// validates the rest (an invalid endpoint makes Run fail with
	// InvalidArgument). An empty Id is filled with the id the server
	// assigns at the first registration and kept for every later one.
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
	conn       grpc.ClientConnInterface // Config.Conn, or nil
	servers    []server                 // Config.Servers parsed, or nil
	dialOpts   []grpc.DialOption
	service    string
	ttlSeconds uint32
	interval   time.Duration // as configured; zero means from the grant
	log        *slog.Logger
	registered chan struct{}
	started    atomic.Bool

	// Test seams, set before Run.
	backoffBase, backoffMax time.Duration
	rpcTimeout              time.Duration
	streamEnded             func(error) // called when a heartbeat stream breaks
	// lookupHost resolves host with dnsServer; "" is the system's resolver.
	lookupHost func(ctx context.Context, dnsServer, host string) ([]string, error)
	dial       func(addr string, opts []grpc.DialOption) (registryv1.RegistryClient, io.Closer, error)

	// Owned by Run's goroutine.
	endpoint      *registryv1.Endpoint // private copy; Id pinned by the first grant
	curInterval   time.Duration        // heartbeat period for the current lease
	registeredYet bool
	resolved      map[string][]string // Servers entry -> its last resolved addresses
	authority     map[string]string   // a resolved ip:port -> the name:port it came from
	addrs         []string            // the servers' addresses, as last resolved
	active        *replica            // the server in use, or nil
	cursor        string              // the address tried last
	fails         int                 // failed attempts since the last answer

	// mu guards the fields below, which Status reads from any goroutine.
	mu         sync.Mutex
	leaseID    string
	activeAddr string
	addrsSeen  []string
	failovers  uint64
}

// New validates cfg and returns an Agent. Errors name the bad field.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Conn == nil && len(cfg.Servers) == 0:
		return nil, errors.New("heartbeat config: Conn is nil and Servers is empty: set one")
	case cfg.Conn != nil && len(cfg.Servers) > 0:
		return nil, errors.New("heartbeat config: Conn and Servers are both set: set one")
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
	servers := make([]server, 0, len(cfg.Servers))
	for i, s := range cfg.Servers {
		srv, err := parseServer(s)
		if err != nil {
			return nil, fmt.Errorf("heartbeat config: Servers[%d] %q: %w", i, s, err)
		}
		if slices.Contains(cfg.Servers[:i], s) {
			return nil, fmt.Errorf("heartbeat config: Servers[%d] %q: listed twice", i, s)
		}
		servers = append(servers, srv)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{
		conn:        cfg.Conn,
		servers:     servers,
		dialOpts:    slices.Clone(cfg.DialOptions),
		service:     cfg.Service,
		endpoint:    proto.CloneOf(cfg.Endpoint),
		ttlSeconds:  uint32((cfg.TTL + time.Second - 1) / time.Second),
		interval:    cfg.Interval,
		log:         log.With("component", "heartbeat", "service", cfg.Service),
		registered:  make(chan struct{}),
		backoffBase: defaultBackoffBase,
		backoffMax:  defaultBackoffMax,
		rpcTimeout:  defaultRPCTimeout,
		lookupHost:  lookupHost,
		dial:        dialGRPC,
		resolved:    map[string][]string{},
		authority:   map[string]string{},
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

// Status is what an Agent is doing, as of the call.
type Status struct {
	// Active is the address of the server in use: an ip:port from
	// Config.Servers, the gRPC target of a passthrough, unix or
	// unix-abstract entry, or Config.Conn's target. "" before Run picks
	// one.
	Active string
	// Servers are the addresses the agent moves between, as last resolved.
	Servers []string
	// Failovers counts the moves from one server to another.
	Failovers uint64
	// LeaseID is LeaseID().
	LeaseID string
}

// Status returns the active server, the failover count and the lease. It
// is safe to call from any goroutine at any time.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Status{Active: a.activeAddr, Servers: slices.Clone(a.addrsSeen), Failovers: a.failovers, LeaseID: a.leaseID}
}

func (a *Agent) setActive(addr string, moved bool) {
	a.mu.Lock()
	from := a.activeAddr
	a.activeAddr = addr
	if moved {
		a.failovers++
	}
	n := a.failovers
	a.mu.Unlock()
	if moved {
		a.log.Info("moved to another server", "from", from, "to", addr, "failovers", n, "lease", a.LeaseID())
	}
}

// activeAddress returns the active server's address, or "".
func (a *Agent) activeAddress() string {
	if a.active == nil {
		return ""
	}
	return a.active.addr
}

func (a *Agent) setServers(addrs []string) {
	a.mu.Lock()
	a.addrsSeen = slices.Clone(addrs)
	a.mu.Unlock()
}

// Registered returns a channel that is closed once the first registration
// succeeds. It stays closed; a later loss of the lease does not reopen it.
func (a *Agent) Registered() <-chan struct{} { return a.registered }

// errReopen ends a stream after a registration, which may have moved the
// agent to another server: Run opens a new stream at once.
var errReopen = errors.New("registered again, reopening the stream")

// errNoServers: no server address is known (every name failed to resolve).
var errNoServers = errors.New("no server address: every name failed to resolve")

// errNoAnswer: the server did not answer within the attempt timeout.
var errNoAnswer = errors.New("no answer")

// Run registers the endpoint, heartbeats until ctx ends, then deregisters it
// and returns nil. It returns an error only when the server rejects a
// registration for good (see the package documentation); transient failures
// are retried with backoff, on the next server, for as long as ctx lasts.
// Run may be called once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("heartbeat: Run called more than once")
	}
	defer func() { a.active.close() }() // the replica active at return

	a.addrs = a.resolve(ctx)
	a.setServers(a.addrs)
	if len(a.addrs) > 0 {
		addr := a.addrs[rand.N(len(a.addrs))] // spread a fleet over the replicas
		a.cursor = addr
		if err := a.pick(addr); err != nil {
			a.log.Warn("dial server", "server", addr, "err", err)
		}
	}
	if err := a.register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer a.deregister(ctx)

	for {
		healthy, err := a.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if errors.Is(err, errReopen) {
			continue
		}
		if refused(err) {
			// The caller may not heartbeat this lease (the policy, or a
			// lease that belongs to another identity): retrying cannot
			// help, and the lease expires within its TTL either way.
			a.log.Error("heartbeats refused; stopping", "server", a.active.addr, "lease", a.LeaseID(), "err", err)
			return err
		}
		if a.streamEnded != nil {
			a.streamEnded(err)
		}
		if healthy {
			a.fails = 0
		}
		a.log.Warn("heartbeat stream broken", "server", a.active.addr, "lease", a.LeaseID(), "err", err)
		if !a.failover(ctx) {
			return nil
		}
	}
}

// attemptTimeout bounds one attempt on one server: a Register, or opening
// a heartbeat stream and getting an answer, or one heartbeat's answer.
// While a lease is held it is at most half the heartbeat interval, so that
// a server that hangs cannot eat the TTL: with the waits of failover (also
// capped at half the interval), a heartbeat is tried at least once per
// interval whatever the servers do.
func (a *Agent) attemptTimeout() time.Duration {
	if a.curInterval > 0 {
		return min(a.rpcTimeout, a.curInterval/2)
	}
	return a.rpcTimeout
}

// failover moves to the next server after a failed attempt on the active
// one. It re-resolves the servers, then waits: a short random stagger
// (up to backoffBase) while some server of the list is untried, a
// backoff once every server failed in a row. It returns false if ctx
// ends first.
func (a *Agent) failover(ctx context.Context) bool {
	for {
		a.fails++
		if addrs := a.resolve(ctx); len(addrs) > 0 {
			a.addrs = addrs
			a.setServers(addrs)
		}
		n := max(len(a.addrs), 1)
		d := rand.N(a.backoffBase + 1)
		if a.fails%n == 0 {
			d = a.backoff(a.fails/n - 1)
		}
		if !sleep(ctx, d) {
			return false
		}
		if len(a.addrs) == 0 {
			a.log.Warn("no server to try", "retry_in", d, "err", errNoServers)
			continue
		}
		to := next(a.addrs, a.cursor)
		a.cursor = to
		if err := a.pick(to); err != nil {
			a.log.Warn("dial server", "server", to, "err", err)
			continue
		}
		return true
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

// refused reports whether a heartbeat stream ended because the server
// refuses this caller's heartbeats for good.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// register registers the endpoint, retrying transient failures on the next
// server with backoff. It returns nil once registered, ctx.Err() if ctx
// ends first, or the permanent error.
func (a *Agent) register(ctx context.Context) error {
	req := &registryv1.RegisterRequest{Service: a.service, Endpoint: a.endpoint, TtlSeconds: a.ttlSeconds}
	for attempt := 0; ; attempt++ {
		err := errNoServers
		if a.active != nil {
			actx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
			var resp *registryv1.RegisterResponse
			resp, err = a.active.client.Register(actx, req)
			cancel()
			if err == nil {
				a.fails = 0
				a.granted(resp)
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			a.log.Error("registration refused", "server", a.active.addr, "err", err)
			return fmt.Errorf("heartbeat: register %s: %w", a.service, err)
		}
		server := ""
		if a.active != nil {
			server = a.active.addr
		}
		a.log.Warn("register failed, retrying", "attempt", attempt+1, "server", server, "err", err)
		if !a.failover(ctx) {
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
	if a.endpoint.GetId() == "" {
		// Keep the server's id: a registration after a lost lease or on
		// another replica must not change the endpoint's identity.
		a.endpoint.Id = resp.GetEndpointId()
	}
	a.setLeaseID(resp.GetLeaseId())
	a.log.Info("registered", "server", a.activeAddress(), "lease", resp.GetLeaseId(), "endpoint", resp.GetEndpointId(), "ttl", ttl, "interval", a.curInterval)
	if !a.registeredYet {
		a.registeredYet = true
		close(a.registered)
	}
}

type recvResult struct {
	resp *registryv1.HeartbeatResponse
	err  error
}

// stream heartbeats over one HeartbeatStream to the active server until
// the stream breaks, the server does not answer within attemptTimeout, or
// ctx ends. healthy reports whether the server answered at least once. A
// *fatalError means a registration was refused; errReopen that the agent
// registered again and wants a new stream.
func (a *Agent) stream(ctx context.Context) (healthy bool, err error) {
	r := a.active
	if r == nil {
		return false, errNoServers
	}
	timeout := a.attemptTimeout()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watchdog runs from the open to the first answer and from each
	// send to its answer: a server that accepts the connection but never
	// answers (hung, or a black hole on the way) costs at most timeout.
	var timedOut atomic.Bool
	watchdog := time.AfterFunc(timeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer watchdog.Stop()
	wrap := func(what string, err error) error {
		if timedOut.Load() && ctx.Err() == nil {
			return fmt.Errorf("%s: %s did not answer within %v: %w", what, r.addr, timeout, errNoAnswer)
		}
		return fmt.Errorf("%s: %w", what, err)
	}

	st, err := r.client.HeartbeatStream(sctx)
	if err != nil {
		return false, wrap("open heartbeat stream", err)
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
			return wrap("send heartbeat", sendErr)
		}
		for {
			select {
			case <-sctx.Done():
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return wrap("receive heartbeat", sctx.Err())
			case r := <-recvC:
				if r.err != nil {
					return wrap("receive heartbeat", r.err)
				}
			}
		}
	}

	lid := a.LeaseID()
	// Heartbeat at once: after a reconnect or a move to another server this
	// is what tells us whether the server knows the lease.
	if err := st.Send(&registryv1.HeartbeatRequest{LeaseId: lid}); err != nil {
		return false, recvErr(err)
	}
	pending := true
	ticker := time.NewTicker(a.curInterval)
	defer ticker.Stop()
	for {
		select {
		case <-sctx.Done():
			// ctx ended, or the watchdog fired; the receiver may have
			// returned without handing over its error.
			if ctx.Err() != nil {
				return healthy, ctx.Err()
			}
			return healthy, wrap("receive heartbeat", sctx.Err())
		case res := <-recvC:
			if res.err != nil {
				return healthy, wrap("receive heartbeat", res.err)
			}
			watchdog.Stop()
			pending = false
			if !healthy {
				healthy = true
				a.fails = 0
				a.log.Debug("heartbeat stream up", "server", r.addr, "lease", lid)
			}
			if res.resp.GetLeaseId() != lid || res.resp.GetFound() {
				continue
			}
			a.log.Warn("lease unknown to the server, registering again", "server", r.addr, "lease", lid, "endpoint", a.endpoint.GetId())
			a.setLeaseID("")
			if err := a.register(ctx); err != nil {
				if ctx.Err() != nil {
					return healthy, err
				}
				return healthy, &fatalError{err}
			}
			return healthy, errReopen
		case <-ticker.C:
			if pending {
				continue // the watchdog ends the stream if no answer comes
			}
			watchdog.Reset(timeout)
			if err := st.Send(&registryv1.HeartbeatRequest{LeaseId: lid}); err != nil {
				return healthy, recvErr(err)
			}
			pending = true
		}
	}
}

// deregister ends the lease with a fresh context: ctx has ended, but the
// endpoint should leave the registry now rather than one TTL later. A
// server that cannot be reached is followed by the next one, all within
// DeregisterTimeout.
func (a *Agent) deregister(ctx context.Context) {
	id := a.LeaseID()
	if id == "" || a.active == nil {
		return
	}
	defer a.setLeaseID("")
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DeregisterTimeout)
	defer cancel()
	n := max(len(a.addrs), 1)
	for tried := 1; ; tried++ {
		actx, acancel := context.WithTimeout(dctx, DeregisterTimeout/time.Duration(n))
		_, err := a.active.client.Deregister(actx, &registryv1.DeregisterRequest{LeaseId: id})
		acancel()
		switch {
		case err == nil:
			a.log.Info("deregistered", "server", a.active.addr, "lease", id)
			return
		case status.Code(err) == codes.NotFound:
			a.log.Info("lease already gone at deregistration", "server", a.active.addr, "lease", id)
			return
		case tried >= n || dctx.Err() != nil:
			a.log.Warn("deregister failed, the endpoint stays until its lease expires", "server", a.active.addr, "lease", id, "err", err)
			return
		}
		a.log.Warn("deregister failed, trying the next server", "server", a.active.addr, "lease", id, "err", err)
		to := next(a.addrs, a.active.addr)
		if err := a.pick(to); err != nil {
			a.log.Warn("deregister failed, the endpoint stays until its lease expires", "server", to, "lease", id, "err", err)
			return
		}
	}
}

// backoff returns the wait before retry attempt (0-based): exponential from
// backoffBase, capped at backoffMax, with equal jitter so that a fleet
// restarting together does not retry in lockstep. While a lease is held the
// cap is also half the heartbeat interval: the lease must be heartbeated
// as soon as any server is back.
func (a *Agent) backoff(attempt int) time.Duration {
	d := a.backoffMax
	if a.curInterval > 0 {
		d = min(d, a.curInterval/2)
	}
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

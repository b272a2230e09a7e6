package heartbeat

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// fakeRegistry is a registry of several replicas sharing one lease table,
// in memory and channel-based so that it runs inside a synctest bubble. A
// replica is up, hung (takes requests, never answers) or down (refuses).
type fakeRegistry struct {
	mu       sync.Mutex
	state    map[string]string        // addr -> "up", "hung" or "down"
	broken   map[string]chan struct{} // addr -> closed when it goes down
	leases   map[string]bool
	renewals []time.Time // every heartbeat a replica answered
	attempts []time.Time // every stream opened or heartbeat sent, answered or not
	nextID   int
}

func newFakeRegistry(addrs ...string) *fakeRegistry {
	f := &fakeRegistry{state: map[string]string{}, broken: map[string]chan struct{}{}, leases: map[string]bool{}}
	for _, a := range addrs {
		f.state[a] = "up"
		f.broken[a] = make(chan struct{})
	}
	return f
}

func (f *fakeRegistry) set(addr, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if state == "down" && f.state[addr] != "down" {
		close(f.broken[addr])
	}
	if state != "down" && f.state[addr] == "down" {
		f.broken[addr] = make(chan struct{})
	}
	f.state[addr] = state
}

func (f *fakeRegistry) get(addr string) (string, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state[addr], f.broken[addr]
}

func (f *fakeRegistry) dial(addr string, _ []grpc.DialOption) (registryv1.RegistryClient, io.Closer, error) {
	return &fakeClient{f: f, addr: addr}, io.NopCloser(nil), nil
}

// fakeClient is one replica as the agent sees it. Only the methods the
// agent calls are implemented.
type fakeClient struct {
	registryv1.RegistryClient
	f    *fakeRegistry
	addr string
}

var errDown = status.Error(codes.Unavailable, "connection refused")

func (c *fakeClient) Register(ctx context.Context, req *registryv1.RegisterRequest, _ ...grpc.CallOption) (*registryv1.RegisterResponse, error) {
	st, _ := c.f.get(c.addr)
	switch st {
	case "down":
		return nil, errDown
	case "hung":
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.nextID++
	id := fmt.Sprintf("lease-%d", c.f.nextID)
	c.f.leases[id] = true
	ttl := req.GetTtlSeconds()
	if ttl == 0 {
		ttl = 30
	}
	return &registryv1.RegisterResponse{LeaseId: id, TtlSeconds: ttl, EndpointId: req.GetEndpoint().GetId()}, nil
}

func (c *fakeClient) Deregister(ctx context.Context, req *registryv1.DeregisterRequest, _ ...grpc.CallOption) (*registryv1.DeregisterResponse, error) {
	if st, _ := c.f.get(c.addr); st != "up" {
		return nil, errDown
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	delete(c.f.leases, req.GetLeaseId())
	return &registryv1.DeregisterResponse{}, nil
}

func (c *fakeClient) HeartbeatStream(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[registryv1.HeartbeatRequest, registryv1.HeartbeatResponse], error) {
	st, broken := c.f.get(c.addr)
	c.f.mu.Lock()
	c.f.attempts = append(c.f.attempts, time.Now())
	c.f.mu.Unlock()
	switch st {
	case "down":
		return nil, errDown
	case "hung":
		<-ctx.Done() // a black hole: the connection never completes
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &fakeStream{c: c, ctx: ctx, broken: broken, resp: make(chan *registryv1.HeartbeatResponse, 16)}, nil
}

type fakeStream struct {
	grpc.ClientStream
	c      *fakeClient
	ctx    context.Context
	broken chan struct{}
	resp   chan *registryv1.HeartbeatResponse
}

func (s *fakeStream) Send(req *registryv1.HeartbeatRequest) error {
	f := s.c.f
	st, _ := f.get(s.c.addr)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, time.Now())
	switch st {
	case "down":
		return io.EOF
	case "hung":
		return nil
	}
	found := f.leases[req.GetLeaseId()]
	if found {
		f.renewals = append(f.renewals, time.Now())
	}
	s.resp <- &registryv1.HeartbeatResponse{LeaseId: req.GetLeaseId(), Found: found}
	return nil
}

func (s *fakeStream) Recv() (*registryv1.HeartbeatResponse, error) {
	select {
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	case <-s.broken:
		return nil, errDown
	case r := <-s.resp:
		return r, nil
	}
}

// maxGap returns the longest time between consecutive times in ts, and
// from the last one to end.
func maxGap(ts []time.Time, start, end time.Time) time.Duration {
	var gap time.Duration
	last := start
	for _, t := range ts {
		if t.Before(start) {
			continue
		}
		gap = max(gap, t.Sub(last))
		last = t
	}
	return max(gap, end.Sub(last))
}

func (f *fakeRegistry) snapshot() (renewals, attempts []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.renewals...), append([]time.Time(nil), f.attempts...)
}

// syncAgent runs an agent on f's replicas inside the current bubble.
func syncAgent(t *testing.T, f *fakeRegistry, ttl time.Duration, addrs ...string) (*Agent, func()) {
	t.Helper()
	a, err := New(Config{Servers: addrs, Service: service, Endpoint: testEndpoint(), TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	a.dial = f.dial
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Registered()
	return a, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}
}

// TestHungServerCannotEatTheTTL: the active replica starts taking
// heartbeats without ever answering. The agent gives it half an interval,
// moves on and heartbeats the same lease on the other replica: the longest
// time between two answered heartbeats stays within interval + interval/2
// + the stagger, well under the TTL.
func TestHungServerCannotEatTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 30 * time.Second
		const interval = ttl / 3
		f := newFakeRegistry("10.0.0.1:1", "10.0.0.2:1")
		a, stop := syncAgent(t, f, ttl, "10.0.0.1:1", "10.0.0.2:1")
		defer stop()
		id := a.LeaseID()

		time.Sleep(25 * time.Second)
		hung := a.Status().Active
		f.set(hung, "hung")
		start := time.Now()
		time.Sleep(2 * time.Minute)
		synctest.Wait()

		renewals, _ := f.snapshot()
		gap := maxGap(renewals, start.Add(-interval), time.Now())
		t.Logf("longest time between answered heartbeats: %v (TTL %v)", gap, ttl)
		if bound := interval + interval/2 + defaultBackoffBase; gap > bound {
			t.Errorf("longest time between answered heartbeats %v, want at most %v", gap, bound)
		}
		st := a.Status()
		if st.Active == hung || st.Failovers != 1 || st.LeaseID != id {
			t.Errorf("Status() = %+v, want Active not %s, Failovers 1, LeaseID %s", st, hung, id)
		}
	})
}

// TestAllServersHungKeepsTrying: every replica hangs. The agent keeps
// trying, at least once per interval (attempts are bounded to half an
// interval, and so are the waits between them), and heartbeats the same
// lease within one round of attempts of a replica answering again.
func TestAllServersHungKeepsTrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 30 * time.Second
		const interval = ttl / 3
		addrs := []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"}
		f := newFakeRegistry(addrs...)
		a, stop := syncAgent(t, f, ttl, addrs...)
		defer stop()
		id := a.LeaseID()

		for _, addr := range addrs {
			f.set(addr, "hung")
		}
		start := time.Now()
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		_, attempts := f.snapshot()
		if gap := maxGap(attempts, start, time.Now()); gap > interval {
			t.Errorf("longest time between heartbeat attempts with every server hung %v, want at most the interval %v", gap, interval)
		}

		f.set(addrs[1], "up")
		back := time.Now()
		// It reaches that server within one round: the rest of an attempt
		// begun on it while hung, a hung attempt on each of the others
		// (interval/2 each), one capped wait and two staggers.
		round := time.Duration(len(addrs)+1)*interval/2 + 2*defaultBackoffBase
		time.Sleep(round)
		synctest.Wait()
		renewals, _ := f.snapshot()
		if len(renewals) == 0 || renewals[len(renewals)-1].Before(back) {
			t.Fatalf("no answered heartbeat within %v (a round of attempts) of a server coming back", round)
		}
		if st := a.Status(); st.Active != addrs[1] || st.LeaseID != id {
			t.Errorf("Status() = %+v, want Active %s, LeaseID %s", st, addrs[1], id)
		}
	})
}

// TestAllServersDownBackoffCapped: every replica refuses connections for
// ten minutes. The wait between rounds grows but stays under half the
// interval while the lease is held, so the agent is back within an
// interval of a server's return.
func TestAllServersDownBackoffCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 30 * time.Second
		const interval = ttl / 3
		addrs := []string{"10.0.0.1:1", "10.0.0.2:1"}
		f := newFakeRegistry(addrs...)
		a, stop := syncAgent(t, f, ttl, addrs...)
		defer stop()
		id := a.LeaseID()
		for _, addr := range addrs {
			f.set(addr, "down")
		}
		start := time.Now()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		_, attempts := f.snapshot()
		if gap := maxGap(attempts, start, time.Now()); gap > interval/2+defaultBackoffBase {
			t.Errorf("longest time between attempts with every server down %v, want at most %v", gap, interval/2+defaultBackoffBase)
		}
		// Bounded: backoff, not a busy loop (10 min at >= interval/4 per round).
		if n := len(attempts); n > 2*int(10*time.Minute/(interval/4)) {
			t.Errorf("%d attempts in 10 minutes, want a backoff between rounds", n)
		}
		f.set(addrs[0], "up")
		time.Sleep(interval)
		synctest.Wait()
		if st := a.Status(); st.Active != addrs[0] || st.LeaseID != id {
			t.Errorf("Status() = %+v, want Active %s, LeaseID %s", st, addrs[0], id)
		}
	})
}

package heartbeat

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/registrytest"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/security/authz"
)

const service = "payments"

func testEndpoint() *registryv1.Endpoint {
	return &registryv1.Endpoint{
		Id:       "vm-1",
		Address:  "10.0.0.7",
		Ports:    []*registryv1.Port{{Name: "grpc", Number: 8080}},
		Locality: &registryv1.Locality{Region: "eu-west1", Zone: "eu-west1-b"},
		Metadata: map[string]string{"version": "1.2.3"},
	}
}

// runningAgent is an Agent whose Run runs on its own goroutine.
type runningAgent struct {
	*Agent
	cancel context.CancelFunc
	errC   chan error
}

// startAgent runs an Agent with a fast retry backoff; tweak, if non-nil,
// adjusts it before Run.
func startAgent(t *testing.T, cfg Config, tweak func(*Agent)) *runningAgent {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.backoffBase, a.backoffMax = 10*time.Millisecond, 200*time.Millisecond
	if tweak != nil {
		tweak(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{Agent: a, cancel: cancel, errC: make(chan error, 1)}
	go func() { r.errC <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and returns its result.
func (r *runningAgent) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

// wait returns Run's result, failing the test if Run does not return soon.
func (r *runningAgent) wait(t *testing.T) error {
	t.Helper()
	select {
	case err, ok := <-r.errC:
		if ok {
			close(r.errC)
		}
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s")
		return nil
	}
}

func (r *runningAgent) waitRegistered(t *testing.T) string {
	t.Helper()
	select {
	case <-r.Registered():
	case <-time.After(10 * time.Second):
		t.Fatal("not registered within 10s")
	}
	return r.LeaseID()
}

func TestAgentRegisters(t *testing.T) {
	s := registrytest.Start(t)
	a := startAgent(t, Config{Conn: dial(t, s.Addr), Service: service, Endpoint: testEndpoint(), TTL: 2 * time.Second}, nil)
	id := a.waitRegistered(t)
	if id == "" {
		t.Fatal("LeaseID() = \"\" after registration")
	}

	got, ok := s.Endpoint(service, "vm-1")
	if !ok {
		t.Fatalf("endpoint %s/vm-1 not in the store after registration", service)
	}
	want := &registry.Endpoint{
		ID:       "vm-1",
		Address:  netip.MustParseAddr("10.0.0.7"),
		Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "eu-west1", Zone: "eu-west1-b"},
		Health:   registry.Healthy,
		Weight:   registry.DefaultWeight,
		Metadata: map[string]string{"version": "1.2.3"},
		Source:   registry.SourceVM,
	}
	// cmp uses Endpoint.Equal, which compares Registered: zero the times.
	got = got.Clone()
	got.Registered, got.LastSeen = time.Time{}, time.Time{}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored endpoint (-want +got):\n%s", diff)
	}
	if _, leaseID, _ := s.Leases.LastSeen(service, "vm-1"); leaseID != id {
		t.Errorf("server lease = %q, want agent's LeaseID() %q", leaseID, id)
	}
}

func TestAgentKeepsLeaseAlive(t *testing.T) {
	const ttl = time.Second
	s := registrytest.Start(t)
	a := startAgent(t, Config{Conn: dial(t, s.Addr), Service: service, Endpoint: testEndpoint(), TTL: ttl}, nil)
	id := a.waitRegistered(t)

	// Watch for several TTLs: the endpoint must stay, on the same lease.
	start := time.Now()
	for time.Since(start) < 4*ttl {
		if _, ok := s.Endpoint(service, "vm-1"); !ok {
			t.Fatalf("endpoint gone after %v, TTL %v", time.Since(start), ttl)
		}
		if got := a.LeaseID(); got != id {
			t.Fatalf("LeaseID() = %q after %v, want %q (the lease was lost)", got, time.Since(start), id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	seen, leaseID, ok := s.Leases.LastSeen(service, "vm-1")
	if !ok || leaseID != id {
		t.Fatalf("server lease = %q, %v, want %q", leaseID, ok, id)
	}
	if since := time.Since(seen); since >= ttl {
		t.Errorf("last heartbeat %v ago, want under the TTL %v (interval TTL/3)", since, ttl)
	}
}

func TestAgentDeregistersOnCancel(t *testing.T) {
	s := registrytest.Start(t)
	a := startAgent(t, Config{Conn: dial(t, s.Addr), Service: service, Endpoint: testEndpoint(), TTL: 30 * time.Second}, nil)
	a.waitRegistered(t)

	if err := a.stop(t); err != nil {
		t.Fatalf("Run = %v after cancel, want nil", err)
	}
	// Deregistration happens before Run returns: no waiting for the TTL.
	if _, ok := s.Endpoint(service, "vm-1"); ok {
		t.Error("endpoint still in the store after Run returned")
	}
	if n := s.Leases.Len(); n != 0 {
		t.Errorf("lm.Len() = %d after Run returned, want 0", n)
	}
	if id := a.LeaseID(); id != "" {
		t.Errorf("LeaseID() = %q after Run returned, want \"\"", id)
	}
}

func TestAgentReregistersAfterLeaseLoss(t *testing.T) {
	s := registrytest.Start(t)
	a := startAgent(t, Config{Conn: dial(t, s.Addr), Service: service, Endpoint: testEndpoint(), TTL: time.Second}, nil)
	old := a.waitRegistered(t)
	// Let a heartbeat arrive first, so that the loss is found by a regular
	// heartbeat rather than by the one sent when the stream opens.
	registered, _, _ := s.Leases.LastSeen(service, "vm-1")
	registrytest.WaitFor(t, 5*time.Second, "a heartbeat", func() bool {
		seen, _, _ := s.Leases.LastSeen(service, "vm-1")
		return seen.After(registered)
	})

	if _, err := s.Leases.Deregister(context.Background(), old); err != nil {
		t.Fatalf("lm.Deregister: %v", err)
	}
	if _, ok := s.Endpoint(service, "vm-1"); ok {
		t.Fatal("endpoint still in the store after lm.Deregister")
	}
	registrytest.WaitFor(t, 5*time.Second, "the agent to register again", func() bool {
		id := a.LeaseID()
		_, leaseID, ok := s.Leases.LastSeen(service, "vm-1")
		_, inStore := s.Endpoint(service, "vm-1")
		return id != "" && id != old && ok && leaseID == id && inStore
	})
}

func TestAgentKeepsLeaseAcrossServerRestart(t *testing.T) {
	s := registrytest.Start(t)
	broken := make(chan error, 10)
	a := startAgent(t, Config{Conn: dial(t, s.Addr), Service: service, Endpoint: testEndpoint(), TTL: 3 * time.Second},
		func(a *Agent) {
			a.streamEnded = func(err error) {
				select {
				case broken <- err:
				default:
				}
			}
		})
	id := a.waitRegistered(t)

	s.Stop()
	select {
	case err := <-broken:
		t.Logf("stream broke: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not notice the server stop within 5s")
	}
	s.Restart(t)
	restarted := time.Now()

	registrytest.WaitFor(t, 5*time.Second, "heartbeats on the restarted server", func() bool {
		seen, _, ok := s.Leases.LastSeen(service, "vm-1")
		return ok && seen.After(restarted)
	})
	if got := a.LeaseID(); got != id {
		t.Errorf("LeaseID() = %q after restart, want %q (same lease)", got, id)
	}
	if _, leaseID, _ := s.Leases.LastSeen(service, "vm-1"); leaseID != id {
		t.Errorf("server lease = %q after restart, want %q", leaseID, id)
	}
}

func TestAgentRetriesRegistrationUntilServerUp(t *testing.T) {
	// Reserve an address, then free it so that nothing listens there yet.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	a := startAgent(t, Config{Conn: dial(t, addr), Service: service, Endpoint: testEndpoint(), Logger: logger}, nil)
	registrytest.WaitFor(t, 5*time.Second, "a failed registration attempt", func() bool {
		return strings.Contains(logs.String(), "register failed, retrying")
	})
	select {
	case <-a.Registered():
		t.Fatal("Registered() closed with no server")
	default:
	}

	var lis2 net.Listener
	registrytest.WaitFor(t, 5*time.Second, "listening on "+addr, func() bool {
		lis2, err = net.Listen("tcp", addr)
		return err == nil
	})
	s := registrytest.StartOn(t, lis2)
	a.waitRegistered(t)
	if _, ok := s.Endpoint(service, "vm-1"); !ok {
		t.Error("endpoint not in the store after registration")
	}
}

func TestRunReturnsPermanentErrors(t *testing.T) {
	tests := []struct {
		name     string
		endpoint func(*registryv1.Endpoint)
		ttl      time.Duration
		setup    func(*testing.T, *registrytest.Server)
		code     codes.Code
		contains string
	}{
		{
			name:     "bad_address",
			endpoint: func(e *registryv1.Endpoint) { e.Address = "10.0.0.300" },
			code:     codes.InvalidArgument,
			contains: "endpoint.address",
		},
		{
			name:     "bad_port_name",
			endpoint: func(e *registryv1.Endpoint) { e.Ports[0].Name = "g_rpc" },
			code:     codes.InvalidArgument,
			contains: "endpoint.ports[0].name",
		},
		{
			name:     "ttl_too_long",
			ttl:      2 * time.Hour,
			code:     codes.InvalidArgument,
			contains: "ttl_seconds",
		},
		{
			name: "id_owned_by_static_source",
			setup: func(t *testing.T, s *registrytest.Server) {
				_, err := s.Store.Apply(registry.Upsert(service, &registry.Endpoint{
					ID:      "vm-1",
					Address: netip.MustParseAddr("10.0.0.8"),
					Ports:   []registry.Port{{Name: "grpc", Number: 8080}},
					Source:  registry.SourceStatic,
				}))
				if err != nil {
					t.Fatal(err)
				}
			},
			code:     codes.AlreadyExists,
			contains: "static",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := registrytest.Start(t)
			if tt.setup != nil {
				tt.setup(t, s)
			}
			ep := testEndpoint()
			if tt.endpoint != nil {
				tt.endpoint(ep)
			}
			a := startAgent(t, Config{Conn: dial(t, s.Addr), Service: service, Endpoint: ep, TTL: tt.ttl}, nil)
			err := a.wait(t)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("status.Code(Run()) = %v (%v), want %v", got, err, tt.code)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("Run() = %q, want it to contain %q", err, tt.contains)
			}
			select {
			case <-a.Registered():
				t.Error("Registered() closed after a refused registration")
			default:
			}
			if id := a.LeaseID(); id != "" {
				t.Errorf("LeaseID() = %q, want \"\"", id)
			}
		})
	}
}

// TestRunReturnsWhenHeartbeatsRefused: once registered, the server's
// policy stops letting the agent heartbeat (a denial ends the heartbeat
// stream with PermissionDenied). Run returns that error instead of
// retrying, and the other calls were not refused before.
func TestRunReturnsWhenHeartbeatsRefused(t *testing.T) {
	s := registrytest.Start(t)
	a := startAgent(t, Config{Conn: dial(t, s.Addr), Service: service, Endpoint: testEndpoint(), Interval: 50 * time.Millisecond}, nil)
	lid := a.waitRegistered(t)
	var heartbeats atomic.Int64
	s.Deny(func(act authz.Action, resource string) error {
		if act != authz.Heartbeat {
			return nil
		}
		heartbeats.Add(1)
		return fmt.Errorf("permission denied: vm-1 may not heartbeat %s", resource)
	})
	err := a.wait(t)
	if got := status.Code(err); got != codes.PermissionDenied {
		t.Fatalf("status.Code(Run()) = %v (%v), want PermissionDenied", got, err)
	}
	if !strings.Contains(err.Error(), "may not heartbeat payments") {
		t.Errorf("Run() = %q, want the server's reason", err)
	}
	if n := heartbeats.Load(); n != 1 {
		t.Errorf("heartbeats the server refused = %d, want 1 (no retry)", n)
	}
	if _, ok := s.Endpoint(service, "vm-1"); ok {
		t.Errorf("endpoint still registered after Run returned (lease %s): the deregistration was allowed", lid)
	}
}

func TestNew(t *testing.T) {
	conn := dial(t, "127.0.0.1:1")
	ok := Config{Conn: conn, Service: service, Endpoint: testEndpoint()}
	tests := []struct {
		name   string
		modify func(*Config)
		field  string // "" means valid
	}{
		{"valid", func(*Config) {}, ""},
		{"valid_ttl_and_interval", func(c *Config) { c.TTL, c.Interval = 10*time.Second, 3*time.Second }, ""},
		{"valid_interval_only", func(c *Config) { c.Interval = time.Minute }, ""},
		{"nil_conn", func(c *Config) { c.Conn = nil }, "Conn"},
		{"empty_service", func(c *Config) { c.Service = "" }, "Service"},
		{"nil_endpoint", func(c *Config) { c.Endpoint = nil }, "Endpoint"},
		{"negative_ttl", func(c *Config) { c.TTL = -time.Second }, "TTL"},
		{"huge_ttl", func(c *Config) { c.TTL = maxTTL + time.Second }, "TTL"},
		{"negative_interval", func(c *Config) { c.Interval = -time.Second }, "Interval"},
		{"interval_not_below_ttl", func(c *Config) { c.TTL, c.Interval = 5*time.Second, 5*time.Second }, "Interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.modify(&cfg)
			_, err := New(cfg)
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("New() = %v, want nil", err)
			case tt.field != "" && err == nil:
				t.Fatalf("New() = nil, want an error naming %s", tt.field)
			case tt.field != "" && !strings.Contains(err.Error(), tt.field):
				t.Fatalf("New() = %q, want it to name %s", err, tt.field)
			}
		})
	}
}

func TestNewCopiesEndpointAndRoundsTTL(t *testing.T) {
	ep := testEndpoint()
	a, err := New(Config{Conn: dial(t, "127.0.0.1:1"), Service: service, Endpoint: ep, TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ep.Address = "10.9.9.9"
	if got := a.endpoint.GetAddress(); got != "10.0.0.7" {
		t.Errorf("agent endpoint address = %q after the caller changed its copy, want 10.0.0.7", got)
	}
	if a.ttlSeconds != 2 {
		t.Errorf("ttlSeconds = %d for TTL 1.5s, want 2 (rounded up)", a.ttlSeconds)
	}
}

func TestRunTwice(t *testing.T) {
	a, err := New(Config{Conn: dial(t, "127.0.0.1:1"), Service: service, Endpoint: testEndpoint()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run(canceled ctx) = %v, want nil", err)
	}
	if err := a.Run(ctx); err == nil {
		t.Fatal("second Run = nil, want an error")
	}
}

func TestBackoff(t *testing.T) {
	a := &Agent{backoffBase: 100 * time.Millisecond, backoffMax: time.Second}
	tests := []struct {
		attempt int
		ceiling time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{4, time.Second},
		{40, time.Second},
		{1000, time.Second},
	}
	for _, tt := range tests {
		for range 100 {
			d := a.backoff(tt.attempt)
			if d < tt.ceiling/2 || d > tt.ceiling {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", tt.attempt, d, tt.ceiling/2, tt.ceiling)
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestIntervalFromGrant(t *testing.T) {
	tests := []struct {
		name       string
		interval   time.Duration
		ttlSeconds uint32
		want       time.Duration
	}{
		{"default_third_of_ttl", 0, 30, 10 * time.Second},
		{"configured", 5 * time.Second, 30, 5 * time.Second},
		{"configured_too_long_for_default_ttl", time.Minute, 30, 10 * time.Second},
		{"server_reports_zero_ttl", 0, 0, fallbackTTL / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Config{Conn: dial(t, "127.0.0.1:1"), Service: service, Endpoint: testEndpoint(), Interval: tt.interval})
			if err != nil {
				t.Fatal(err)
			}
			a.granted(&registryv1.RegisterResponse{LeaseId: "l1", TtlSeconds: tt.ttlSeconds})
			if a.curInterval != tt.want {
				t.Errorf("interval = %v, want %v", a.curInterval, tt.want)
			}
			if got := a.LeaseID(); got != "l1" {
				t.Errorf("LeaseID() = %q, want l1", got)
			}
			select {
			case <-a.Registered():
			default:
				t.Error("Registered() not closed after a grant")
			}
		})
	}
}

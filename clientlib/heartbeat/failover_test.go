package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/spillway/spillway/registry/registrytest"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

func TestNewServers(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"list", Config{Servers: []string{"a:1", "b:2"}}, ""},
		{"neither", Config{}, "Conn is nil and Servers is empty"},
		{"both", Config{Conn: dial(t, "127.0.0.1:1"), Servers: []string{"a:1"}}, "Conn and Servers are both set"},
		{"bad_entry", Config{Servers: []string{"a:1", "b"}}, `Servers[1] "b"`},
		{"duplicate", Config{Servers: []string{"a:1", "a:1"}}, `Servers[1] "a:1": listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Service, cfg.Endpoint = service, testEndpoint()
			_, err := New(cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	answers := map[string][]string{
		"reg.test":  {"10.0.0.1", "10.0.0.2"},
		"one.test":  {"10.0.0.2"}, // also in reg.test: listed once
		"six.test":  {"fd00::1"},
		"gone.test": nil,
	}
	fail := false
	a, err := New(Config{Servers: []string{"reg.test:18000", "127.0.0.1:7", "one.test:18000", "six.test:18000", "gone.test:18000"},
		Service: service, Endpoint: testEndpoint()})
	if err != nil {
		t.Fatal(err)
	}
	a.lookupHost = func(_ context.Context, _, host string) ([]string, error) {
		if fail {
			return nil, errors.New("lookup failed")
		}
		return answers[host], nil
	}
	want := []string{"10.0.0.1:18000", "10.0.0.2:18000", "127.0.0.1:7", "[fd00::1]:18000"}
	if diff := cmp.Diff(want, a.resolve(context.Background())); diff != "" {
		t.Errorf("resolve() (-want +got):\n%s", diff)
	}
	// A failed lookup keeps a name's last addresses.
	fail = true
	if diff := cmp.Diff(want, a.resolve(context.Background())); diff != "" {
		t.Errorf("resolve() with lookups failing (-want +got):\n%s", diff)
	}
	// A new answer replaces them.
	fail = false
	answers["reg.test"] = []string{"10.0.0.3"}
	want = []string{"10.0.0.3:18000", "127.0.0.1:7", "10.0.0.2:18000", "[fd00::1]:18000"}
	if diff := cmp.Diff(want, a.resolve(context.Background())); diff != "" {
		t.Errorf("resolve() after a DNS change (-want +got):\n%s", diff)
	}
}

func TestNext(t *testing.T) {
	addrs := []string{"a:1", "b:1", "c:1"}
	tests := []struct{ cur, want string }{
		{"a:1", "b:1"},
		{"b:1", "c:1"},
		{"c:1", "a:1"},
		{"gone:1", "a:1"}, // left the list: start at the top
		{"", "a:1"},
	}
	for _, tt := range tests {
		if got := next(addrs, tt.cur); got != tt.want {
			t.Errorf("next(%v, %q) = %q, want %q", addrs, tt.cur, got, tt.want)
		}
	}
}

// replicas starts n registry servers sharing one store and lease manager.
func replicas(t *testing.T, n int) []*registrytest.Server {
	s := []*registrytest.Server{registrytest.Start(t)}
	for range n - 1 {
		s = append(s, s[0].Replica(t))
	}
	return s
}

func addrsOf(servers []*registrytest.Server) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.Addr)
	}
	return out
}

func byAddr(t *testing.T, servers []*registrytest.Server, addr string) *registrytest.Server {
	t.Helper()
	for _, s := range servers {
		if s.Addr == addr {
			return s
		}
	}
	t.Fatalf("active server %q is none of %v", addr, addrsOf(servers))
	return nil
}

// leaseWatch samples, until done holds, that the endpoint stays in the
// store on lease id, and returns the longest time seen between two
// heartbeats on the server.
func leaseWatch(t *testing.T, s *registrytest.Server, id string, what string, done func() bool) time.Duration {
	t.Helper()
	var gap time.Duration
	var last time.Time
	registrytest.WaitFor(t, 10*time.Second, what, func() bool {
		if _, ok := s.Endpoint(service, "vm-1"); !ok {
			t.Fatalf("endpoint expired while waiting for %s", what)
		}
		seen, leaseID, ok := s.Leases.LastSeen(service, "vm-1")
		if !ok || leaseID != id {
			t.Fatalf("server lease = %q, %v while waiting for %s, want %q", leaseID, ok, what, id)
		}
		if seen.After(last) {
			last = seen
		}
		gap = max(gap, time.Since(last))
		return done()
	})
	return gap
}

// TestFailoverKeepsLease: three replicas share a store; the agent's server
// is stopped twice. Each time the agent moves to another replica and
// heartbeats the same lease there: no registration, no expiry, never more
// than a TTL between heartbeats.
func TestFailoverKeepsLease(t *testing.T) {
	const ttl = 3 * time.Second
	servers := replicas(t, 3)
	a := startAgent(t, Config{Servers: addrsOf(servers), Service: service, Endpoint: testEndpoint(), TTL: ttl}, nil)
	id := a.waitRegistered(t)
	registered, _ := servers[0].Endpoint(service, "vm-1")
	if got := a.Status().Servers; !slices.Equal(got, addrsOf(servers)) {
		t.Errorf("Status().Servers = %v, want %v", got, addrsOf(servers))
	}

	var maxGap time.Duration
	for round := 1; round <= 2; round++ {
		old := a.Status().Active
		byAddr(t, servers, old).Stop()
		stopped := time.Now()
		gap := leaseWatch(t, servers[0], id, "a heartbeat on another replica", func() bool {
			seen, _, _ := servers[0].Leases.LastSeen(service, "vm-1")
			st := a.Status()
			return st.Active != old && st.Failovers >= uint64(round) && seen.After(stopped)
		})
		maxGap = max(maxGap, gap)
		t.Logf("round %d: moved from %s to %s; longest gap between heartbeats %v", round, old, a.Status().Active, gap)
	}
	// Some heartbeats on the last replica, still on the same lease.
	moved := time.Now()
	maxGap = max(maxGap, leaseWatch(t, servers[0], id, "two intervals on the last replica", func() bool {
		return time.Since(moved) > 2*ttl/3
	}))
	if maxGap >= ttl {
		t.Errorf("longest gap between heartbeats %v, want under the TTL %v", maxGap, ttl)
	}
	st := a.Status()
	if st.LeaseID != id || a.LeaseID() != id {
		t.Errorf("lease after two failovers = %q, want %q", st.LeaseID, id)
	}
	// A move may land on the replica stopped in round 1 before the live one.
	if st.Failovers < 2 {
		t.Errorf("Status().Failovers = %d, want at least 2", st.Failovers)
	}
	now, _ := servers[0].Endpoint(service, "vm-1")
	if !now.Registered.Equal(registered.Registered) {
		t.Errorf("endpoint registered at %v, was %v: registered again", now.Registered, registered.Registered)
	}
}

// TestFailoverReregistersSameIdentity: two independent servers (no shared
// store). The second does not know the lease, so the agent registers there
// with the same endpoint id (the one the first server assigned) and
// metadata.
func TestFailoverReregistersSameIdentity(t *testing.T) {
	s1, s2 := registrytest.Start(t), registrytest.Start(t)
	servers := []*registrytest.Server{s1, s2}
	ep := testEndpoint()
	ep.Id = "" // the server assigns one
	logs := &syncBuffer{}
	a := startAgent(t, Config{Servers: addrsOf(servers), Service: service, Endpoint: ep, TTL: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, nil)
	old := a.waitRegistered(t)
	first := byAddr(t, servers, a.Status().Active)
	other := s1
	if first == s1 {
		other = s2
	}
	snap, _ := first.Store.Snapshot().Service(service)
	eps := snap.Endpoints
	if len(eps) != 1 {
		t.Fatalf("first server has %d endpoints, want 1", len(eps))
	}
	want := eps[0].Clone()

	first.Stop()
	registrytest.WaitFor(t, 10*time.Second, "registration on the other server", func() bool {
		_, ok := other.Endpoint(service, want.ID)
		return ok && a.LeaseID() != "" && a.LeaseID() != old
	})
	got, _ := other.Endpoint(service, want.ID)
	if got.ID != want.ID || !cmp.Equal(got.Metadata, want.Metadata) || got.Address != want.Address {
		t.Errorf("endpoint on the other server = %s %v %v, want %s %v %v", got.ID, got.Address, got.Metadata, want.ID, want.Address, want.Metadata)
	}
	if st := a.Status(); st.Active != other.Addr || st.Failovers != 1 {
		t.Errorf("Status() = %+v, want Active %s, Failovers 1", st, other.Addr)
	}
	if !strings.Contains(logs.String(), "lease unknown to the server, registering again") {
		t.Errorf("logs lack the re-registration:\n%s", logs)
	}
}

// TestAllServersDownThenOneBack: both replicas stop; the agent keeps
// trying them in turn; when one comes back within the TTL it heartbeats
// the same lease there.
func TestAllServersDownThenOneBack(t *testing.T) {
	const ttl = 3 * time.Second
	servers := replicas(t, 2)
	a := startAgent(t, Config{Servers: addrsOf(servers), Service: service, Endpoint: testEndpoint(), TTL: ttl}, nil)
	id := a.waitRegistered(t)
	first := a.Status().Active
	for _, s := range servers {
		s.Stop()
	}
	// Down "for a while": the agent tried every server more than once.
	leaseWatch(t, servers[0], id, "failed attempts on both servers", func() bool {
		return a.Status().Failovers >= 4
	})
	back := byAddr(t, servers, first)
	back.Restart(t)
	restarted := time.Now()
	leaseWatch(t, servers[0], id, "heartbeats on the restarted server", func() bool {
		seen, _, _ := back.Leases.LastSeen(service, "vm-1")
		return seen.After(restarted) && a.Status().Active == back.Addr
	})
	if got := a.LeaseID(); got != id {
		t.Errorf("LeaseID() = %q, want %q", got, id)
	}
}

// TestAllServersDownPastTTL: both replicas stop for longer than the TTL
// and the lease expires meanwhile; when one comes back the agent registers
// again with the same endpoint id.
func TestAllServersDownPastTTL(t *testing.T) {
	servers := replicas(t, 2)
	a := startAgent(t, Config{Servers: addrsOf(servers), Service: service, Endpoint: testEndpoint(), TTL: time.Second}, nil)
	old := a.waitRegistered(t)
	for _, s := range servers {
		s.Stop()
	}
	registrytest.WaitFor(t, 10*time.Second, "the lease to expire", func() bool {
		_, ok := servers[0].Endpoint(service, "vm-1")
		return !ok
	})
	servers[1].Restart(t)
	registrytest.WaitFor(t, 10*time.Second, "registration on the restarted server", func() bool {
		_, leaseID, ok := servers[0].Leases.LastSeen(service, "vm-1")
		return ok && leaseID != old && leaseID == a.LeaseID()
	})
	if st := a.Status(); st.Active != servers[1].Addr {
		t.Errorf("Status().Active = %s, want %s", st.Active, servers[1].Addr)
	}
}

// TestFailoverDNSName: one name resolving to several addresses; at a
// failover the name is resolved again and a new address is used. A
// dns:/// entry behaves as the bare name does; dns://DNS-SERVER/ asks that
// server.
func TestFailoverDNSName(t *testing.T) {
	for _, tt := range []struct{ name, entry, dnsServer string }{
		{"host_port", "registry.test:18000", ""},
		{"dns_target", "dns:///registry.test:18000", ""},
		{"dns_server", "dns://127.0.0.1:5353/registry.test:18000", "127.0.0.1:5353"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			servers := replicas(t, 3)
			// Names resolve to 10.0.0.x; the dial seam maps them to the
			// loopback servers, so traffic stays on 127.0.0.1.
			fake := map[string]string{"10.0.0.1:18000": servers[0].Addr, "10.0.0.2:18000": servers[1].Addr, "10.0.0.3:18000": servers[2].Addr}
			answer := make(chan []string, 1)
			answer <- []string{"10.0.0.1", "10.0.0.2"}
			a := startAgent(t, Config{Servers: []string{tt.entry}, Service: service, Endpoint: testEndpoint(), TTL: 3 * time.Second},
				func(a *Agent) {
					a.lookupHost = func(_ context.Context, dnsServer, host string) ([]string, error) {
						if host != "registry.test" || dnsServer != tt.dnsServer {
							return nil, fmt.Errorf("lookup %s at %q: no such host", host, dnsServer)
						}
						ips := <-answer
						answer <- ips
						return ips, nil
					}
					a.dial = func(addr string, opts []grpc.DialOption) (registryv1.RegistryClient, io.Closer, error) {
						return dialGRPC(fake[addr], opts)
					}
				})
			id := a.waitRegistered(t)
			if got := a.Status().Servers; !slices.Equal(got, []string{"10.0.0.1:18000", "10.0.0.2:18000"}) {
				t.Errorf("Status().Servers = %v, want both addresses of registry.test", got)
			}
			// The DNS answer changes to the third replica only; the active
			// one dies.
			<-answer
			answer <- []string{"10.0.0.3"}
			old := a.Status().Active
			servers[slices.Index([]string{"10.0.0.1:18000", "10.0.0.2:18000"}, old)].Stop()
			leaseWatch(t, servers[0], id, "the move to the re-resolved address", func() bool {
				return a.Status().Active == "10.0.0.3:18000"
			})
			if got := a.Status().Servers; !slices.Equal(got, []string{"10.0.0.3:18000"}) {
				t.Errorf("Status().Servers = %v after re-resolution, want [10.0.0.3:18000]", got)
			}
		})
	}
}

func TestCollector(t *testing.T) {
	a, err := New(Config{Servers: []string{"10.0.0.1:1"}, Service: service, Endpoint: testEndpoint()})
	if err != nil {
		t.Fatal(err)
	}
	a.setActive("10.0.0.1:1", false)
	a.setActive("10.0.0.2:1", true)
	a.setLeaseID("l1")
	want := `
# HELP spillway_agent_active_server 1 for the registry server the heartbeat agent uses.
# TYPE spillway_agent_active_server gauge
spillway_agent_active_server{server="10.0.0.2:1",service="payments"} 1
# HELP spillway_agent_failovers_total Moves of the heartbeat agent from one registry server to another.
# TYPE spillway_agent_failovers_total counter
spillway_agent_failovers_total{service="payments"} 1
# HELP spillway_agent_registered 1 while the heartbeat agent holds a lease, else 0.
# TYPE spillway_agent_registered gauge
spillway_agent_registered{service="payments"} 1
`
	if err := testutil.CollectAndCompare(a.Collector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

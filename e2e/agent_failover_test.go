package e2e

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/registry/registrytest"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// agentProc is a `spillwayctl agent` subprocess.
type agentProc struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

func startAgentProc(t *testing.T, servers string, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin.spillwayctl, append([]string{"agent", "--server", servers}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	})
	return p
}

// stop sends SIGTERM and waits for exit 0.
func (p *agentProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("agent did not exit within 15s of SIGTERM:\n%s", p.logs)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("agent exit code %d after SIGTERM:\n%s", code, p.logs)
	}
}

// TestAgentFailsOverKeepingLease: the real spillwayctl agent with
// --server listing three registry replicas that share one store and lease
// manager (in-process; TestAgentFailsOverBetweenReplicas does it with
// spillway processes sharing etcd). Each
// replica is stopped in turn and started again; the agent moves each time
// its replica dies, heartbeats the same lease on the next one, and the
// endpoint never expires.
func TestAgentFailsOverKeepingLease(t *testing.T) {
	const ttl = 3 * time.Second
	r := []*registrytest.Server{registrytest.Start(t)}
	r = append(r, r[0].Replica(t), r[0].Replica(t))
	list := r[0].Addr + "," + r[1].Addr + "," + r[2].Addr
	p := startAgentProc(t, list, "--service", "payments", "--address", "10.0.0.7", "--port", "grpc=8080",
		"--zone", "z1", "--id", "vm-1", "--meta", "version=1.2.3", "--ttl", ttl.String())
	// The store has the endpoint a moment before the agent logs the
	// answer that names its replica; wait for both.
	registrytest.WaitFor(t, 20*time.Second, "the agent's endpoint and its log of the registration", func() bool {
		_, ok := r[0].Endpoint("payments", "vm-1")
		return ok && strings.Contains(p.logs.String(), "msg=registered ")
	})
	_, lease, _ := r[0].Leases.LastSeen("payments", "vm-1")
	first, _ := r[0].Endpoint("payments", "vm-1")

	var gap time.Duration
	for range r {
		// Stop the replica the agent heartbeats now (it picks its first
		// at random), so that every stop is a failover.
		s := activeReplica(t, r, p.logs.String())
		s.Stop()
		stopped := time.Now()
		registrytest.WaitFor(t, 20*time.Second, "a heartbeat after stopping "+s.Addr, func() bool {
			_, ok := r[0].Endpoint("payments", "vm-1")
			seen, id, _ := r[0].Leases.LastSeen("payments", "vm-1")
			if !ok || id != lease {
				t.Fatalf("lease lost after stopping %s: endpoint present %v, lease %q, want %q\nagent logs:\n%s", s.Addr, ok, id, lease, p.logs)
			}
			gap = max(gap, time.Since(seen))
			return seen.After(stopped)
		})
		s.Restart(t)
	}
	t.Logf("longest time without a heartbeat across three replica stops: %v (TTL %v)", gap, ttl)
	if gap >= ttl {
		t.Errorf("longest time without a heartbeat %v, want under the TTL %v", gap, ttl)
	}
	now, _ := r[0].Endpoint("payments", "vm-1")
	if !now.Registered.Equal(first.Registered) {
		t.Errorf("endpoint registered again (at %v, first at %v)", now.Registered, first.Registered)
	}
	logs := p.logs.String()
	if n := strings.Count(logs, `msg="moved to another server"`); n < len(r) {
		t.Errorf("agent logged %d moves, want at least %d (each stop was of its replica):\n%s", n, len(r), logs)
	}
	if strings.Contains(logs, "registering again") {
		t.Errorf("agent registered again; replicas share the lease:\n%s", logs)
	}
	p.stop(t)
	if _, ok := r[0].Endpoint("payments", "vm-1"); ok {
		t.Error("endpoint still registered after the agent's SIGTERM")
	}
}

// TestAgentFailsOverBetweenSpillways: two real spillway processes, which
// do not share a store (each on its own bbolt). When the one the agent uses is killed, the other
// does not know the lease: the agent registers there with the same
// endpoint id and metadata.
func TestAgentFailsOverBetweenSpillways(t *testing.T) {
	s1, s2 := newServer(t), newServer(t)
	s1.start()
	s2.start()
	c1, c2 := s1.client(), s2.client()
	p := startAgentProc(t, s1.grpcAddr+","+s2.grpcAddr, "--service", "payments", "--address", "10.0.0.7",
		"--port", "grpc=8080", "--zone", "z1", "--meta", "version=1.2.3", "--ttl", "10s")
	var active, other *server
	var otherClient = c2
	registrytest.WaitFor(t, 20*time.Second, "the agent's endpoint on one server", func() bool {
		switch {
		case len(agentEndpointIDs(t, c1, "payments")) == 1:
			active, other = s1, s2
		case len(agentEndpointIDs(t, c2, "payments")) == 1:
			active, other, otherClient = s2, s1, c1
		}
		return active != nil
	})
	activeClient := c1
	if active == s2 {
		activeClient = c2
	}
	ids := agentEndpointIDs(t, activeClient, "payments")
	active.kill()
	registrytest.WaitFor(t, 20*time.Second, "the endpoint on "+other.grpcAddr, func() bool {
		got := agentEndpointIDs(t, otherClient, "payments")
		return len(got) == 1
	})
	for id := range ids {
		if got := agentEndpointIDs(t, otherClient, "payments"); !got[id] {
			t.Errorf("endpoint ids on the second server = %v, want %s (the id the first assigned)\nagent logs:\n%s", got, id, p.logs)
		}
	}
	resp, err := otherClient.ListEndpoints(context.Background(), &pb.ListEndpointsRequest{Service: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	if md := resp.GetEndpoints()[0].GetMetadata(); md["version"] != "1.2.3" {
		t.Errorf("metadata on the second server = %v, want version=1.2.3", md)
	}
	logs := p.logs.String()
	for _, want := range []string{`msg="moved to another server"`, "lease unknown to the server, registering again"} {
		if !strings.Contains(logs, want) {
			t.Errorf("agent logs lack %q:\n%s", want, logs)
		}
	}
	p.stop(t)
	if got := agentEndpointIDs(t, otherClient, "payments"); len(got) != 0 {
		t.Errorf("endpoints %v on the second server after the agent's SIGTERM, want none", got)
	}
}

// agentEndpointIDs is endpointIDs with an unknown service as no endpoints.
func agentEndpointIDs(t *testing.T, c pb.RegistryClient, service string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: service})
	if status.Code(err) == codes.NotFound {
		return map[string]bool{}
	}
	if err != nil {
		t.Fatalf("ListEndpoints(%s): %v", service, err)
	}
	out := map[string]bool{}
	for _, e := range resp.Endpoints {
		out[e.Id] = true
	}
	return out
}

// activeReplica is the replica the agent's logs say it uses now: the
// target of its last move, else the server it registered on.
func activeReplica(t *testing.T, r []*registrytest.Server, logs string) *registrytest.Server {
	t.Helper()
	addr := ""
	for _, line := range strings.Split(logs, "\n") {
		for _, key := range []string{" to=", "msg=registered "} {
			i := strings.Index(line, key)
			if i < 0 {
				continue
			}
			field := " to="
			if key != " to=" {
				field = " server="
			}
			if j := strings.Index(line[i:], field); j >= 0 {
				rest := line[i+j+len(field):]
				if k := strings.IndexByte(rest, ' '); k >= 0 {
					rest = rest[:k]
				}
				addr = rest
			}
		}
	}
	for _, s := range r {
		if s.Addr == addr {
			return s
		}
	}
	t.Fatalf("the agent's logs name no replica as active (last %q):\n%s", addr, logs)
	return nil
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/registrytest"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// agentEndpoint returns the registration and last-seen times of the
// endpoint id of service as replica s lists it; ok false if it is not
// listed. (Listings carry no lease id: the agent's logs name its lease.)
func agentEndpoint(t *testing.T, s *server, service, id string) (registered time.Time, seen time.Time, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rclient(s).ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: service})
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	for _, e := range resp.Endpoints {
		if e.Id == id {
			return e.Registered.AsTime(), e.LastSeen.AsTime(), true
		}
	}
	return time.Time{}, time.Time{}, false
}

// activeServer is the spillway the agent's logs say it uses now.
func activeServer(t *testing.T, ss []*server, logs string) *server {
	t.Helper()
	addr := ""
	for _, line := range strings.Split(logs, "\n") {
		for key, field := range map[string]string{" to=": " to=", "msg=registered ": " server="} {
			i := strings.Index(line, key)
			if i < 0 {
				continue
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
	for _, s := range ss {
		if s.grpcAddr == addr {
			return s
		}
	}
	t.Fatalf("the agent's logs name no replica as active (last %q):\n%s", addr, logs)
	return nil
}

// TestAgentFailsOverBetweenReplicas: the real `spillwayctl agent` with
// --server listing three spillway processes that share etcd. The replica
// it uses is killed with SIGKILL: it moves to another, heartbeats the same
// lease there (no new registration: the replicas share it), and the
// endpoint stays on every survivor with its lease and registration time.
// Restarted, the killed replica serves it with that lease too; the agent's
// SIGTERM deregisters it from all three.
func TestAgentFailsOverBetweenReplicas(t *testing.T) {
	c := newReplicaCluster(t, 3)
	list := c.servers[0].grpcAddr + "," + c.servers[1].grpcAddr + "," + c.servers[2].grpcAddr
	p := startAgentProc(t, list, "--service", "payments", "--address", "10.0.0.7", "--port", "grpc=8080",
		"--zone", "z1", "--id", "vm-1", "--ttl", "6s")
	var registered time.Time
	registrytest.WaitFor(t, 30*time.Second, "the agent's endpoint on every replica", func() bool {
		for _, s := range c.servers {
			reg, _, ok := agentEndpoint(t, s, "payments", "vm-1")
			if !ok {
				return false
			}
			registered = reg
		}
		return true
	})
	victim := activeServer(t, c.servers, p.logs.String())
	victim.kill()
	killed := time.Now()
	var survivors []*server
	for _, s := range c.servers {
		if s != victim {
			survivors = append(survivors, s)
		}
	}
	registrytest.WaitFor(t, 30*time.Second, "a heartbeat on a survivor after the kill", func() bool {
		for _, s := range survivors {
			if _, seen, ok := agentEndpoint(t, s, "payments", "vm-1"); ok && seen.After(killed) {
				return true
			}
		}
		return false
	})
	t.Logf("the agent heartbeats on a survivor %v after its replica was killed", time.Since(killed).Round(time.Millisecond))
	// Two more TTLs: the endpoint must not expire anywhere.
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		for _, s := range survivors {
			reg, _, ok := agentEndpoint(t, s, "payments", "vm-1")
			if !ok || !reg.Equal(registered) {
				t.Fatalf("%s: endpoint listed %v, registered %v; want registered %v\nagent logs:\n%s",
					s.flag("--replica-id"), ok, reg, registered, p.logs)
			}
		}
	}
	logs := p.logs.String()
	if !strings.Contains(logs, `msg="moved to another server"`) {
		t.Errorf("agent logs no move:\n%s", logs)
	}
	if strings.Contains(logs, "registering again") || strings.Count(logs, "msg=registered ") != 1 {
		t.Errorf("agent registered again; the replicas share the lease:\n%s", logs)
	}

	victim.startNoWait()
	victim.waitReady()
	clients.Store(victim, victim.client()) // the cached one may back off from the dead time
	if reg, _, ok := agentEndpoint(t, victim, "payments", "vm-1"); !ok || !reg.Equal(registered) {
		t.Errorf("restarted %s: endpoint listed %v registered %v, want registered %v (the same lease)", victim.flag("--replica-id"), ok, reg, registered)
	}

	p.stop(t)
	registrytest.WaitFor(t, 30*time.Second, "the endpoint gone from every replica after the agent's SIGTERM", func() bool {
		for _, s := range c.servers {
			if _, _, ok := agentEndpoint(t, s, "payments", "vm-1"); ok {
				return false
			}
		}
		return true
	})
}

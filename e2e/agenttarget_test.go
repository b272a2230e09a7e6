package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fmt"

	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/internal/testwait"
	"github.com/spillway/spillway/registry/registrytest"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

// TestAgentServerTargets: the real `spillwayctl agent` given --server as
// gRPC targets registers its endpoint: dns:///localhost:PORT (resolved by
// the agent, as a bare host:port is), dns://DNS-SERVER/registry.test:PORT
// (resolved by a DNS server of the test on 127.0.0.1, which must be
// asked) and passthrough:///localhost:PORT against a spillway process, and
// unix:///PATH against a registry on a Unix socket. Each deregisters on
// SIGTERM. A scheme the agent cannot use fails at once, naming the entry.
func TestAgentServerTargets(t *testing.T) {
	s := newServer(t)
	s.start()
	_, port, err := net.SplitHostPort(s.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	dnsAddr, queries := startTestDNS(t, "registry.test.", net.IPv4(127, 0, 0, 1))

	targets := map[string]string{ // endpoint id -> --server
		"vm-dns":         "dns:///localhost:" + port,
		"vm-dns-server":  "dns://" + dnsAddr + "/registry.test:" + port,
		"vm-passthrough": "passthrough:///localhost:" + port,
	}
	agents := map[string]*agentProc{}
	for id, target := range targets {
		agents[id] = startAgentProc(t, target, "--service", "targets", "--address", "10.0.0.7", "--port", "grpc=8080",
			"--zone", "z1", "--id", id, "--ttl", "5s")
	}
	t.Cleanup(func() {
		if t.Failed() {
			for id, p := range agents {
				t.Logf("agent %s (--server %s):\n%s", id, targets[id], p.logs)
			}
		}
	})
	reg := s.client()
	// The address each agent registers on: what it resolved the name to,
	// or the passthrough target, dialed as it is.
	want := func(id string) string {
		if id == "vm-passthrough" {
			return targets[id]
		}
		return s.grpcAddr
	}
	// The store has the endpoint a moment before the agent logs the
	// answer; wait for both.
	registrytest.WaitFor(t, 20*time.Second, "the three agents' endpoints and their logs of the registration", func() bool {
		ids := targetIDs(t, reg)
		for id, p := range agents {
			if !ids[id] || !registeredOn(p.logs.String(), want(id)) {
				return false
			}
		}
		return true
	})
	if queries.Load() == 0 {
		t.Errorf("the agent with %s registered without asking that DNS server", targets["vm-dns-server"])
	}
	for _, p := range agents {
		p.stop(t)
	}
	if ids := targetIDs(t, reg); len(ids) != 0 {
		t.Errorf("endpoints after SIGTERM = %v, want none: the agents deregister", ids)
	}

	t.Run("unix", func(t *testing.T) {
		// A short path: a socket's path is at most 107 bytes.
		dir, err := os.MkdirTemp("", "sw-agent")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		sock := filepath.Join(dir, "grpc.sock")
		lis, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		r := registrytest.StartOn(t, lis)
		p := startAgentProc(t, "unix://"+sock, "--service", "targets", "--address", "10.0.0.7", "--port", "grpc=8080",
			"--zone", "z1", "--id", "vm-unix", "--ttl", "5s")
		registrytest.WaitFor(t, 20*time.Second, "the agent's endpoint on the Unix socket and its log of the registration", func() bool {
			_, ok := r.Endpoint("targets", "vm-unix")
			return ok && registeredOn(p.logs.String(), "unix://"+sock)
		})
		p.stop(t)
		if _, ok := r.Endpoint("targets", "vm-unix"); ok {
			t.Error("endpoint vm-unix still registered after SIGTERM")
		}
	})

	t.Run("refused_scheme", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin.spillwayctl, "agent", "--server", s.grpcAddr+",xds:///payments",
			"--service", "targets", "--address", "10.0.0.7", "--port", "grpc=8080", "--zone", "z1", "--id", "vm-xds")
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != 2 {
			t.Errorf("agent --server ...,xds:///payments = exit %d (%v), want 2 (usage):\n%s", code, err, out)
		}
		want := `servers[1] "xds:///payments": scheme xds is not supported here: use dns:///host:port or host:port`
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
		if ids := targetIDs(t, reg); ids["vm-xds"] {
			t.Error("the refused agent registered vm-xds")
		}
	})
}

// targetIDs lists the endpoint ids of the service "targets"; none while
// the registry does not know it.
func targetIDs(t *testing.T, c pb.RegistryClient) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: "targets"})
	if status.Code(err) == codes.NotFound {
		return map[string]bool{}
	}
	if err != nil {
		t.Fatalf("ListEndpoints(targets): %v", err)
	}
	ids := map[string]bool{}
	for _, e := range resp.GetEndpoints() {
		ids[e.GetId()] = true
	}
	return ids
}

// registeredOn reports whether the agent's logs have a registration on
// server (Status().Active: an ip:port or a target dialed as it is).
func registeredOn(logs, server string) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "msg=registered ") && strings.Contains(line+" ", " server="+server+" ") {
			return true
		}
	}
	return false
}

// startTestDNS serves name (an FQDN) as A ip on a UDP port of 127.0.0.1
// until the test ends; any other question gets NXDOMAIN, AAAA an empty
// answer. It returns the address and the count of queries answered.
func startTestDNS(t *testing.T, name string, ip net.IP) (string, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var queries atomic.Int64
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		switch q := r.Question[0]; {
		case !strings.EqualFold(q.Name, name):
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: ip})
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
	return pc.LocalAddr().String(), &queries
}

// TestAgentTLSByName: an agent given a name (localhost:PORT) over TLS
// checks the server's certificate against that name. The certificate
// here names only "localhost", no IP address; the agent resolves the
// name itself and used to dial the IP under the IP, so the check failed
// and it never registered.
func TestAgentTLSByName(t *testing.T) {
	e := newE2ETLS(t)
	named := e.ca.Issue(t, tlstest.Leaf{DNS: []string{"localhost"}}).WriteFiles(t, e.dir, "named", e.ca)
	s := newServer(t, "--tls-cert", named.Cert, "--tls-key", named.Key, "--client-ca", e.server.CA)
	s.tls = e
	s.startNoWait()
	_, port, _ := net.SplitHostPort(s.grpcAddr)
	byName := "localhost:" + port
	creds, err := e.creds().TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(byName, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg := pb.NewRegistryClient(conn)

	p := &agentProc{logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin.spillwayctl, "--tls-ca", e.client.CA, "--tls-cert", e.client.Cert, "--tls-key", e.client.Key,
		"agent", "--server", byName, "--service", "tlsname", "--address", "10.0.0.7", "--port", "grpc=8080", "--zone", "z1", "--id", "vm-name", "--ttl", "3s")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	testwait.For(t, 30*time.Second, "the agent's endpoint registered over TLS by name", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := reg.ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: "tlsname"})
		if err != nil {
			return false, fmt.Sprintf("%v; agent logs:\n%s", err, p.logs)
		}
		return len(resp.Endpoints) == 1, fmt.Sprintf("%d endpoints; agent logs:\n%s", len(resp.Endpoints), p.logs)
	})
	p.stop(t)
}

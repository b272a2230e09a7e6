package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway/spillway/registry/registrytest"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

type result struct {
	code           int
	stdout, stderr string
}

// ctl runs the CLI in-process against addr.
func ctl(t *testing.T, addr string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"--server", addr, "--timeout", "5s"}, args...), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// mustCtl runs the CLI and fails the test unless it exits 0.
func mustCtl(t *testing.T, addr string, args ...string) string {
	t.Helper()
	r := ctl(t, addr, args...)
	if r.code != 0 {
		t.Fatalf("spillwayctl %s: exit %d, stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// table splits tabular output into rows of fields.
func table(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

var leaseIDRe = regexp.MustCompile(`^[0-9a-f]{16}\n$`)

func TestCLIRegisterListDeregister(t *testing.T) {
	s := registrytest.Start(t)
	full := mustCtl(t, s.Addr, "register", "--service", "payments", "--address", "10.0.0.7",
		"--port", "grpc=8080", "--port", "metrics=9090/tcp", "--zone", "eu-west1-b", "--region", "eu-west1",
		"--sub-zone", "rack-3", "--id", "vm-1", "--weight", "50", "--ttl", "60s", "--meta", "version=1.2.3", "--meta", "team=sre")
	if !leaseIDRe.MatchString(full) {
		t.Fatalf("register stdout = %q, want only a lease id and a newline", full)
	}
	lease := strings.TrimSpace(full)
	// A minimal registration: the empty fields must still show in JSON.
	minimal := strings.TrimSpace(mustCtl(t, s.Addr, "register", "--service", "payments", "--address", "10.0.0.8",
		"--port", "grpc=8080", "--zone", "eu-west1-c", "--health", "draining"))
	if !leaseIDRe.MatchString(minimal + "\n") {
		t.Fatalf("register stdout = %q, want a lease id", minimal)
	}

	t.Run("endpoints_json", func(t *testing.T) {
		out := mustCtl(t, s.Addr, "endpoints", "payments", "-o", "json")
		var got registryv1.ListEndpointsResponse
		if err := protojson.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("endpoints -o json is not a ListEndpointsResponse: %v\n%s", err, out)
		}
		for _, ep := range got.Endpoints {
			for name, ts := range map[string]*timestamppb.Timestamp{"registered": ep.Registered, "last_seen": ep.LastSeen} {
				if since := time.Since(ts.AsTime()); since < 0 || since > time.Minute {
					t.Errorf("endpoint %s: %s = %v, want within the last minute", ep.Id, name, ts.AsTime())
				}
			}
		}
		want := &registryv1.ListEndpointsResponse{
			Service: "payments",
			Endpoints: []*registryv1.Endpoint{
				{
					Id:      "10-0-0-8-8080",
					Address: "10.0.0.8",
					Ports:   []*registryv1.Port{{Name: "grpc", Number: 8080, Protocol: "tcp"}},
					Locality: &registryv1.Locality{
						Zone: "eu-west1-c",
					},
					Health:  "draining",
					Weight:  100,
					Source:  "vm",
					LeaseId: "", // listings carry no lease id: only register's answer has it
				},
				{
					Id:      "vm-1",
					Address: "10.0.0.7",
					Ports: []*registryv1.Port{
						{Name: "grpc", Number: 8080, Protocol: "tcp"},
						{Name: "metrics", Number: 9090, Protocol: "tcp"},
					},
					Locality: &registryv1.Locality{Region: "eu-west1", Zone: "eu-west1-b", SubZone: "rack-3"},
					Health:   "healthy",
					Weight:   50,
					Metadata: map[string]string{"version": "1.2.3", "team": "sre"},
					Source:   "vm",
					LeaseId:  "",
				},
			},
		}
		if diff := cmp.Diff(want, &got, protocmp.Transform(),
			protocmp.IgnoreFields(&registryv1.Endpoint{}, "registered", "last_seen"),
			protocmp.IgnoreFields(&registryv1.ListEndpointsResponse{}, "version")); diff != "" {
			t.Errorf("endpoints -o json (-want +got):\n%s", diff)
		}

		// Every field is present, empty ones included, with proto names.
		var raw struct {
			Endpoints []map[string]json.RawMessage `json:"endpoints"`
		}
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatal(err)
		}
		wantKeys := []string{"address", "health", "id", "last_seen", "lease_id", "locality", "metadata", "ports", "registered", "source", "weight"}
		for _, ep := range raw.Endpoints {
			if diff := cmp.Diff(wantKeys, slices.Sorted(maps.Keys(ep))); diff != "" {
				t.Errorf("JSON keys of endpoint %s (-want +got):\n%s", ep["id"], diff)
			}
			var loc map[string]string
			if err := json.Unmarshal(ep["locality"], &loc); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"region", "sub_zone", "zone"}, slices.Sorted(maps.Keys(loc))); diff != "" {
				t.Errorf("JSON keys of endpoint %s's locality (-want +got):\n%s", ep["id"], diff)
			}
		}
	})

	t.Run("endpoints_table", func(t *testing.T) {
		rows := table(mustCtl(t, s.Addr, "endpoints", "payments"))
		want := [][]string{
			{"ID", "ADDRESS", "PORTS", "ZONE", "REGION", "HEALTH", "WEIGHT", "SOURCE", "LAST-SEEN"},
			{"10-0-0-8-8080", "10.0.0.8", "grpc=8080/tcp", "eu-west1-c", "-", "draining", "100", "vm"},
			{"vm-1", "10.0.0.7", "grpc=8080/tcp,metrics=9090/tcp", "eu-west1-b", "eu-west1", "healthy", "50", "vm"},
		}
		// LAST-SEEN is an age ("0s ago"): check its shape, compare the rest.
		for i, r := range rows[1:] {
			if n := len(r); n < 2 || r[n-1] != "ago" {
				t.Fatalf("row %d = %q, want it to end with an age", i+1, r)
			}
			rows[i+1] = r[:len(r)-2]
		}
		if diff := cmp.Diff(want, rows); diff != "" {
			t.Errorf("endpoints table (-want +got):\n%s", diff)
		}
	})

	t.Run("services", func(t *testing.T) {
		want := [][]string{{"NAME", "ENDPOINTS", "HEALTHY"}, {"payments", "2", "1"}}
		if diff := cmp.Diff(want, table(mustCtl(t, s.Addr, "services"))); diff != "" {
			t.Errorf("services table (-want +got):\n%s", diff)
		}
		var got registryv1.ListServicesResponse
		if err := protojson.Unmarshal([]byte(mustCtl(t, s.Addr, "services", "-o", "json")), &got); err != nil {
			t.Fatal(err)
		}
		wantJSON := []*registryv1.ServiceSummary{{Name: "payments", Endpoints: 2, Healthy: 1}}
		if diff := cmp.Diff(wantJSON, got.Services, protocmp.Transform()); diff != "" {
			t.Errorf("services -o json (-want +got):\n%s", diff)
		}
	})

	t.Run("heartbeat", func(t *testing.T) {
		if out := mustCtl(t, s.Addr, "heartbeat", lease); !strings.Contains(out, "renewed, ttl 60s") {
			t.Errorf("heartbeat stdout = %q, want it to report ttl 60s", out)
		}
	})

	t.Run("deregister", func(t *testing.T) {
		mustCtl(t, s.Addr, "deregister", lease)
		if _, ok := s.Endpoint("payments", "vm-1"); ok {
			t.Error("vm-1 still in the store after deregister")
		}
		rows := table(mustCtl(t, s.Addr, "endpoints", "payments"))
		if len(rows) != 2 || rows[1][0] != "10-0-0-8-8080" {
			t.Errorf("endpoints after deregister = %q, want only 10-0-0-8-8080", rows)
		}
		r := ctl(t, s.Addr, "heartbeat", lease)
		if r.code != 1 || !strings.Contains(r.stderr, "lease not found") || !strings.Contains(r.stderr, "NotFound") {
			t.Errorf("heartbeat of a deregistered lease: exit %d, stderr %q; want 1 and NotFound", r.code, r.stderr)
		}
		r = ctl(t, s.Addr, "deregister", lease)
		if r.code != 1 {
			t.Errorf("second deregister: exit %d, stderr %q; want 1", r.code, r.stderr)
		}
	})
}

func TestCLIErrors(t *testing.T) {
	s := registrytest.Start(t)
	reg := func(extra ...string) []string {
		args := []string{"register", "--service", "payments", "--address", "10.0.0.7", "--zone", "z1"}
		return append(args, extra...)
	}
	tests := []struct {
		name     string
		server   string // "" means the test server
		args     []string
		code     int
		contains []string
	}{
		{"port_zero", "", reg("--port", "grpc=0"), 2, []string{"--port", "out of range"}},
		{"port_too_big", "", reg("--port", "grpc=70000"), 2, []string{"--port", "out of range"}},
		{"port_without_name", "", reg("--port", "8080"), 2, []string{"--port", "NAME=PORT"}},
		{"port_bad_proto", "", reg("--port", "grpc=80/sctp"), 2, []string{"--port", "sctp"}},
		{"port_missing", "", reg(), 2, []string{"--port is required"}},
		{"meta_without_equals", "", reg("--port", "grpc=80", "--meta", "v1"), 2, []string{"--meta"}},
		{"weight_zero", "", reg("--port", "grpc=80", "--weight", "0"), 2, []string{"--weight"}},
		{"ttl_not_duration", "", reg("--port", "grpc=80", "--ttl", "soon"), 2, []string{"--ttl"}},
		{"unknown_flag", "", reg("--port", "grpc=80", "--colour", "red"), 2, []string{"--colour"}},
		{"bad_address", "", []string{"register", "--service", "payments", "--address", "10.0.0.300", "--port", "grpc=80", "--zone", "z1"}, 1, []string{"endpoint.address", "InvalidArgument"}},
		{"bad_port_name", "", reg("--port", "g_rpc=80"), 1, []string{"endpoint.ports[0].name"}},
		{"bad_health", "", reg("--port", "grpc=80", "--health", "sick"), 1, []string{"endpoint.health"}},
		{"ttl_too_long", "", reg("--port", "grpc=80", "--ttl", "2h"), 1, []string{"ttl_seconds"}},
		{"bad_service", "", []string{"register", "--service", "Pay_ments", "--address", "10.0.0.7", "--port", "grpc=80", "--zone", "z1"}, 1, []string{"service"}},
		{"unknown_service", "", []string{"endpoints", "nosuch"}, 1, []string{"not found", "NotFound"}},
		{"bad_output", "", []string{"services", "-o", "yaml"}, 2, []string{"-o", "yaml"}},
		{"endpoints_without_service", "", []string{"endpoints"}, 2, []string{"SERVICE"}},
		{"heartbeat_extra_arg", "", []string{"heartbeat", "a", "b"}, 2, []string{"LEASE_ID"}},
		{"unknown_command", "", []string{"frobnicate"}, 2, []string{`unknown command "frobnicate"`}},
		{"no_command", "", nil, 2, []string{"Usage:"}},
		{"global_flag_after_command", "", []string{"services", "--server", "x"}, 2, []string{"--server", "before the command"}},
		{"zero_timeout", "", []string{"--timeout", "0s", "services"}, 2, []string{"--timeout"}},
		{"agent_interval_not_below_ttl", "", []string{"agent", "--service", "s", "--address", "10.0.0.7", "--port", "grpc=80", "--zone", "z", "--ttl", "3s", "--interval", "3s"}, 2, []string{"--interval"}},
		{"server_down", "127.0.0.1:1", []string{"services"}, 1, []string{"Unavailable", "--server 127.0.0.1:1"}},
		{"agent_bad_server_list", "", []string{"agent", "--server", "127.0.0.1:1,b", "--service", "s", "--address", "10.0.0.7", "--port", "grpc=80", "--zone", "z"}, 2, []string{"--server", `servers[1] "b"`}},
		{"agent_bad_global_server_list", "a:1,a:1", []string{"agent", "--service", "s", "--address", "10.0.0.7", "--port", "grpc=80", "--zone", "z"}, 2, []string{"--server", "listed twice"}},
		{"server_list_not_for_services", "a:1,b:1", []string{"services"}, 2, []string{"--server", "for agent only"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := s.Addr
			if tt.server != "" {
				addr = tt.server
			}
			r := ctl(t, addr, tt.args...)
			if r.code != tt.code {
				t.Errorf("exit = %d, want %d; stderr:\n%s", r.code, tt.code, r.stderr)
			}
			for _, c := range tt.contains {
				if !strings.Contains(r.stderr, c) {
					t.Errorf("stderr = %q, want it to contain %q", r.stderr, c)
				}
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing on failure", r.stdout)
			}
		})
	}
	if n := s.Leases.Len(); n != 0 {
		t.Errorf("%d leases after rejected registrations, want 0", n)
	}
}

func TestCLIHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"register", "-h"}, {"endpoints", "--help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Errorf("run(%q) = %d, want 0; stderr %q", args, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "Usage: spillwayctl") {
			t.Errorf("run(%q) stdout = %q, want usage", args, stdout.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer the agent's logger and the test can share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestCLIAgent(t *testing.T) {
	s := registrytest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	codeC := make(chan int, 1)
	go func() {
		codeC <- run(ctx, []string{"--server", s.Addr, "agent", "--service", "payments", "--address", "10.0.0.7",
			"--port", "grpc=8080", "--zone", "z1", "--id", "vm-1", "--ttl", "1s"}, &stdout, &stderr)
	}()
	registrytest.WaitFor(t, 10*time.Second, "the agent's endpoint in the store", func() bool {
		_, ok := s.Endpoint("payments", "vm-1")
		return ok
	})
	_, leaseID, _ := s.Leases.LastSeen("payments", "vm-1")
	// The agent keeps its lease past several 1 s TTLs: the endpoint stays,
	// on the same lease, with fresh heartbeats.
	registrytest.WaitFor(t, 10*time.Second, "the endpoint to outlive 3 TTLs", func() bool {
		ep, ok := s.Endpoint("payments", "vm-1")
		seen, id, _ := s.Leases.LastSeen("payments", "vm-1")
		if !ok || id != leaseID || time.Since(seen) > time.Second {
			t.Fatalf("lease lost: endpoint present %v, lease %q (want %q), last seen %v ago", ok, id, leaseID, time.Since(seen))
		}
		return time.Since(ep.Registered) > 3*time.Second
	})

	cancel() // what SIGINT does through main's signal.NotifyContext
	select {
	case code := <-codeC:
		if code != 0 {
			t.Fatalf("agent exit = %d, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit within 10s of cancel")
	}
	if _, ok := s.Endpoint("payments", "vm-1"); ok {
		t.Error("endpoint still in the store after the agent exited")
	}
	for _, want := range []string{"msg=registered", "msg=deregistered", "lease=" + leaseID} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("agent logs lack %q:\n%s", want, stderr.String())
		}
	}
	if stdout.String() != "" {
		t.Errorf("agent stdout = %q, want nothing", stdout.String())
	}
}

// TestCLIAgentFailover: `agent --server a,b` on two replicas that share a
// store. Each replica is stopped in turn (one of them is the agent's): the
// agent heartbeats the same lease on the other and the endpoint stays.
func TestCLIAgentFailover(t *testing.T) {
	s1 := registrytest.Start(t)
	s2 := s1.Replica(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	codeC := make(chan int, 1)
	go func() {
		codeC <- run(ctx, []string{"agent", "--server", s1.Addr + "," + s2.Addr, "--service", "payments", "--address", "10.0.0.7",
			"--port", "grpc=8080", "--zone", "z1", "--id", "vm-1", "--ttl", "3s"}, &stdout, &stderr)
	}()
	registrytest.WaitFor(t, 10*time.Second, "the agent's endpoint in the store", func() bool {
		_, ok := s1.Endpoint("payments", "vm-1")
		return ok
	})
	_, leaseID, _ := s1.Leases.LastSeen("payments", "vm-1")
	for _, stop := range []*registrytest.Server{s1, s2} {
		stop.Stop()
		stopped := time.Now()
		registrytest.WaitFor(t, 10*time.Second, "a heartbeat after stopping "+stop.Addr, func() bool {
			_, ok := s1.Endpoint("payments", "vm-1")
			seen, id, _ := s1.Leases.LastSeen("payments", "vm-1")
			if !ok || id != leaseID {
				t.Fatalf("lease lost: endpoint present %v, lease %q (want %q)", ok, id, leaseID)
			}
			return seen.After(stopped)
		})
		stop.Restart(t)
	}
	cancel()
	select {
	case code := <-codeC:
		if code != 0 {
			t.Fatalf("agent exit = %d, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit within 10s of cancel")
	}
	if _, ok := s1.Endpoint("payments", "vm-1"); ok {
		t.Error("endpoint still in the store after the agent exited")
	}
	for _, want := range []string{"msg=\"moved to another server\"", "failovers=1", "lease=" + leaseID} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("agent logs lack %q:\n%s", want, stderr.String())
		}
	}
}

func TestEndpointTable(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	eps := []*registryv1.Endpoint{
		{
			Id: "vm-1", Address: "2001:db8::1", Health: "healthy", Weight: 100, Source: "vm",
			Ports:    []*registryv1.Port{{Name: "grpc", Number: 8080, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}},
			Locality: &registryv1.Locality{Zone: "z1", Region: "r1"},
			LastSeen: timestamppb.New(now.Add(-90 * time.Second)),
		},
		{
			Id: "pod-1", Address: "10.1.0.1", Health: "unhealthy", Weight: 1, Source: "kubernetes",
			Ports:    []*registryv1.Port{{Name: "http", Number: 80, Protocol: "tcp"}},
			LastSeen: timestamppb.New(time.Time{}),
		},
	}
	var buf bytes.Buffer
	if err := endpointTable(&buf, eps, now); err != nil {
		t.Fatal(err)
	}
	want := `ID     ADDRESS      PORTS                     ZONE  REGION  HEALTH     WEIGHT  SOURCE      LAST-SEEN
vm-1   2001:db8::1  grpc=8080/tcp,dns=53/udp  z1    r1      healthy    100     vm          1m30s ago
pod-1  10.1.0.1     http=80/tcp               -     -       unhealthy  1       kubernetes  -
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("endpointTable (-want +got):\n%s", diff)
	}
}

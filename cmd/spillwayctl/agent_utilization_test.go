package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/registrytest"
)

// TestCLIAgentReportUtilization: with --report-utilization the agent
// reports host CPU under its lease; the registry's table holds it with
// in-flight unknown (limit 0, utilization = cpu) at the chosen interval.
func TestCLIAgentReportUtilization(t *testing.T) {
	s := registrytest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	codeC := make(chan int, 1)
	go func() {
		codeC <- run(ctx, []string{"--server", s.Addr, "agent", "--service", "payments", "--address", "10.0.0.7",
			"--port", "grpc=8080", "--zone", "z1", "--id", "vm-1", "--report-utilization", "--utilization-interval", "200ms"}, &stdout, &stderr)
	}()
	registrytest.WaitFor(t, 10*time.Second, "the agent's utilization in the table", func() bool {
		return len(s.Utilization.Utilizations("payments", time.Now())) == 1
	})
	e := s.Utilization.Utilizations("payments", time.Now())[0]
	if e.ID != "vm-1" || e.Limit != 0 || e.InFlight != 0 || e.Utilization != e.CPU || e.CPU < 0 || e.CPU > 1 || e.Interval != 200*time.Millisecond {
		t.Errorf("table entry = %+v, want vm-1, host cpu in 0..1, limit 0, utilization = cpu, interval 200ms", e)
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
}

func TestCLIAgentReportUtilizationUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"needs-id", []string{"agent", "--service", "s", "--address", "10.0.0.7", "--port", "grpc=80", "--zone", "z", "--report-utilization"}, "--id"},
		{"interval-too-short", []string{"agent", "--service", "s", "--address", "10.0.0.7", "--port", "grpc=80", "--zone", "z", "--id", "a", "--report-utilization", "--utilization-interval", "10ms"}, "--utilization-interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr lockedBuffer
			code := run(context.Background(), append([]string{"--server", "127.0.0.1:1"}, tc.args...), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 naming %s", code, stderr.String(), tc.want)
			}
		})
	}
}

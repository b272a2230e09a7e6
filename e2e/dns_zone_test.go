package e2e

import (
	"bytes"
	"context"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zoneServices: zone-a has one heavy endpoint, zone-b three, zone-c one.
// By endpoint weights zone-a gets 1000/1400 of the traffic; the zone-aware
// plan, with no xDS client and no load report yet, fails open to capacity
// (healthy endpoints, all equally new): 1/5, 3/5, 1/5.
const zoneServices = `services:
  - name: zsvc
    endpoints:
      - {id: a1, address: 10.0.0.1, ports: ["grpc=8080"], zone: zone-a, weight: 1000}
      - {id: b1, address: 10.0.0.2, ports: ["grpc=8080"], zone: zone-b, weight: 100}
      - {id: b2, address: 10.0.0.3, ports: ["grpc=8080"], zone: zone-b, weight: 100}
      - {id: b3, address: 10.0.0.4, ports: ["grpc=8080"], zone: zone-b, weight: 100}
      - {id: c1, address: 10.0.0.5, ports: ["grpc=8080"], zone: zone-c, weight: 100}
`

const zoneConfig = `dns:
  zones:
    - {prefix: 10.20.0.0/16, zone: zone-b}
    - {prefix: 127.0.0.2/32, zone: zone-c}
`

// TestDNSZoneWeights: with dns.zones in the config file, dig from a
// querier of a known zone (by source address, or by +subnet) sees SRV
// weights that follow the zone-aware split; from no known zone, the
// endpoint weights; and the client subnet echoed with its scope.
func TestDNSZoneWeights(t *testing.T) {
	lookTool(t, "dig")
	dir := t.TempDir()
	services, config := filepath.Join(dir, "services.yaml"), filepath.Join(dir, "spillway.yaml")
	for f, b := range map[string]string{services: zoneServices, config: zoneConfig} {
		if err := os.WriteFile(f, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := newServer(t, "--static-file", services, "--config", config)
	s.start()
	addr := s.flag("--dns-addr")

	endpointShares := map[string]float64{"zone-a": 1000.0 / 1400, "zone-b": 300.0 / 1400, "zone-c": 100.0 / 1400}
	planShares := map[string]float64{"zone-a": 0.2, "zone-b": 0.6, "zone-c": 0.2}
	tests := []struct {
		name   string
		args   []string // dig options: +subnet, -b, +tcp
		shares map[string]float64
		subnet string // CLIENT-SUBNET dig prints for the reply, "" none
	}{
		{"source_unknown", nil, endpointShares, ""},
		{"source_zone_c", []string{"-b", "127.0.0.2"}, planShares, ""},
		{"ecs_zone_b", []string{"+subnet=10.20.1.0/24"}, planShares, "10.20.1.0/24/16"},
		{"ecs_zone_b_tcp", []string{"+subnet=10.20.1.0/24", "+tcp"}, planShares, "10.20.1.0/24/16"},
		{"ecs_unknown", []string{"+subnet=192.0.2.0/24"}, endpointShares, "192.0.2.0/24/24"},
	}
	// The planner's first cycle runs as xDS starts; until then every
	// querier gets the endpoint weights.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, _ := digZone(t, addr, "_grpc._tcp.zsvc.spillway.internal.", "SRV", "-b", "127.0.0.2")
		if sharesNear(zoneSharesOf(t, r), planShares, 0.01) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no zone-aware SRV weights within 10s; last reply:\n%s\nlogs:\n%s", r.raw, s.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, subnet := digZone(t, addr, "_grpc._tcp.zsvc.spillway.internal.", "SRV", tt.args...)
			if r.Rcode != "NOERROR" || len(r.Answer) != 5 {
				t.Fatalf("%s with %d SRV records, want NOERROR with 5:\n%s", r.Rcode, len(r.Answer), r.raw)
			}
			if got := zoneSharesOf(t, r); !sharesNear(got, tt.shares, 0.01) {
				t.Errorf("zone shares of the SRV weights %v, want %v:\n%s", got, tt.shares, r.raw)
			}
			if subnet != tt.subnet {
				t.Errorf("CLIENT-SUBNET %q, want %q:\n%s", subnet, tt.subnet, r.raw)
			}
		})
	}
	t.Run("a_ecs_scope_0", func(t *testing.T) {
		r, subnet := digZone(t, addr, "zsvc.spillway.internal.", "A", "+subnet=10.20.1.0/24")
		if r.Rcode != "NOERROR" || len(r.Answer) != 5 || subnet != "10.20.1.0/24/0" {
			t.Errorf("%s, %d A records, CLIENT-SUBNET %q; want NOERROR, 5, 10.20.1.0/24/0:\n%s", r.Rcode, len(r.Answer), subnet, r.raw)
		}
	})
	if m := s.metric(`spillway_dns_zone_answers_total{by="ecs"}`); m == "" || m == "0" {
		t.Errorf(`spillway_dns_zone_answers_total{by="ecs"} = %q, want > 0`, m)
	}
}

// TestDNSZonesBadConfig: a bad dns.zones entry stops the start with an
// error naming it.
func TestDNSZonesBadConfig(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"host_bits", "dns:\n  zones:\n    - {prefix: 10.20.1.0/16, zone: zone-b}\n", "dns.zones[0].prefix: 10.20.1.0/16 has host bits set, want 10.20.0.0/16"},
		{"not_prefix", "dns:\n  zones:\n    - {prefix: 10.20.0.0/16, zone: zone-b}\n    - {prefix: 10.30.0.0, zone: zone-c}\n", "dns.zones[1].prefix"},
		{"zone_not_label", "dns:\n  zones:\n    - {prefix: 10.20.0.0/16, zone: Zone_B}\n", "dns.zones[0].zone"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "spillway.yaml")
			if err := os.WriteFile(config, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			s := newServer(t, "--config", config)
			s.startNoWait()
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("spillway still running with a bad dns.zones:\n%s", s.logs)
			}
			if code := s.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(s.logs.String(), tt.want) {
				t.Errorf("exit code %d, output:\n%s\nwant a failure naming %q", code, s.logs, tt.want)
			}
		})
	}
}

var digSubnetRE = regexp.MustCompile(`(?m)^; CLIENT-SUBNET: (\S+)$`)

// digZone runs dig for name and qtype with extra options and returns the
// parsed reply and the CLIENT-SUBNET it printed ("" when none).
func digZone(t *testing.T, addr, name, qtype string, opts ...string) (*dnsReply, string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"@" + host, "-p", port}, digArgs...)
	args = append(args, "+time=2", "+tries=1", "+norec", "+ignore", "+bufsize=1232")
	args = append(args, opts...)
	args = append(args, name, qtype)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, lookTool(t, "dig"), args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dig %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	r, err := parseDig(stdout.String())
	if err != nil {
		t.Fatalf("dig %s: parse output: %v\nstdout:\n%s", strings.Join(args, " "), err, stdout.String())
	}
	subnet := ""
	if m := digSubnetRE.FindStringSubmatch(stdout.String()); m != nil {
		subnet = m[1]
	}
	return r, subnet
}

// zoneSharesOf sums the SRV weights of zsvc's answer per zone (the zone is
// the first letter of the target's id), as shares of the total. A weight of
// 0 or a priority other than 0 fails the test.
func zoneSharesOf(t *testing.T, r *dnsReply) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	var total float64
	for _, rr := range r.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			continue
		}
		if srv.Weight == 0 || srv.Priority != 0 {
			t.Errorf("SRV %v: want priority 0 and weight of at least 1", srv)
		}
		out["zone-"+srv.Target[:1]] += float64(srv.Weight)
		total += float64(srv.Weight)
	}
	for z := range out {
		out[z] /= total
	}
	return out
}

// sharesNear reports whether got and want hold the same keys with values
// within tol of each other.
func sharesNear(got, want map[string]float64, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > tol {
			return false
		}
	}
	return true
}

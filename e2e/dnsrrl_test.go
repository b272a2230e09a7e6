package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// dnsperfResult is what dnsperf's statistics say of one run.
type dnsperfResult struct {
	sent, completed, lost int
	out                   string
}

var dnsperfStat = regexp.MustCompile(`(?m)^\s*Queries (sent|completed|lost):\s+(\d+)`)

// runDNSperf replays n queries of line ("name type") from the local
// address from at qps to addr, once, and returns dnsperf's counts and the
// wall time the run took. -q lets enough queries be outstanding that
// dropped ones (lost after -t) never slow the sending below qps.
func runDNSperf(ctx context.Context, t *testing.T, addr, from, line string, n, qps int) (dnsperfResult, time.Duration) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "queries.txt")
	if err := os.WriteFile(file, bytes.Repeat([]byte(line+"\n"), n), 0o600); err != nil {
		t.Error(err)
		return dnsperfResult{}, 0
	}
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.CommandContext(ctx, "dnsperf", "-s", host, "-p", port, "-a", from, "-d", file,
		"-n", "1", "-Q", strconv.Itoa(qps), "-q", strconv.Itoa(n), "-t", "2")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	r := dnsperfResult{out: string(out)}
	if err != nil {
		t.Errorf("dnsperf from %s: %v\n%s", from, err, out)
		return r, took
	}
	for _, m := range dnsperfStat.FindAllStringSubmatch(r.out, -1) {
		v, _ := strconv.Atoi(m[2])
		switch m[1] {
		case "sent":
			r.sent = v
		case "completed":
			r.completed = v
		case "lost":
			r.lost = v
		}
	}
	if r.sent != n {
		t.Errorf("dnsperf from %s sent %d queries, want %d:\n%s", from, r.sent, n, out)
	}
	return r, took
}

// TestDNSRRL is acceptance 5 of issue 16: dnsperf from one source above
// the limit gets about the configured rate answered, the rest dropped or
// slipped (TC) in turn, while a second source in another /24 is answered
// in full. Bounds are counts over a fixed number of queries, derived from
// the token bucket; the one time in them is the run's measured length,
// used as the most the limiter can have refilled.
func TestDNSRRL(t *testing.T) {
	if _, err := exec.LookPath("dnsperf"); err != nil {
		t.Fatalf("dnsperf not found in PATH: install the Debian package dnsperf (scripts/test-deps.sh does): %v", err)
	}
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(`services:
  - name: web
    endpoints:
      - {id: w1, address: 10.0.0.1, ports: ["grpc=8080"], zone: zone-a}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	const (
		rate, burst = 100, 100
		// The flood: 3,000 queries at 1,000/s (3 s) from 127.0.1.1.
		floodN, floodQPS = 3000, 1000
		// The bystander: 150 at 50/s (3 s), under the rate, from 127.0.2.1.
		calmN, calmQPS = 150, 50
	)
	s := newServer(t, "--static-file", file,
		"--dns-rrl-rate", strconv.Itoa(rate), "--dns-rrl-burst", strconv.Itoa(burst), "--dns-rrl-slip", "2")
	s.start()
	addr := s.flag("--dns-addr")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg          sync.WaitGroup
		flood, calm dnsperfResult
		floodTook   time.Duration
	)
	wg.Go(func() {
		flood, floodTook = runDNSperf(ctx, t, addr, "127.0.1.1", "web.spillway.internal. A", floodN, floodQPS)
	})
	wg.Go(func() {
		calm, _ = runDNSperf(ctx, t, addr, "127.0.2.1", "_grpc._tcp.web.spillway.internal. SRV", calmN, calmQPS)
	})
	wg.Wait()
	if t.Failed() {
		return
	}

	metric := func(name string) int {
		t.Helper()
		v, err := strconv.ParseFloat(s.metric(name), 64)
		if err != nil {
			t.Fatalf("metric %s: %v", name, err)
		}
		return int(v)
	}
	// Dropped and slipped responses are not in spillway_dns_queries_total,
	// so its A count is the flood's full answers and its SRV count the
	// bystander's.
	answered := metric(`spillway_dns_queries_total{qtype="A",rcode="NOERROR"}`)
	calmAnswered := metric(`spillway_dns_queries_total{qtype="SRV",rcode="NOERROR"}`)
	dropped := metric("spillway_dns_rrl_dropped_total")
	slipped := metric("spillway_dns_rrl_slipped_total")
	t.Logf("flood from 127.0.1.1: %d queries in %v: %d answered, %d slipped, %d dropped; dnsperf: %d completed, %d lost",
		floodN, floodTook.Round(time.Millisecond), answered, slipped, dropped, flood.completed, flood.lost)
	t.Logf("bystander from 127.0.2.1: %d queries: %d answered; dnsperf: %d completed, %d lost", calmN, calmAnswered, calm.completed, calm.lost)

	// Every flood query reached the server (loopback) and got one verdict.
	if got := answered + slipped + dropped; got != floodN {
		t.Errorf("answered %d + slipped %d + dropped %d = %d, want the %d queries sent", answered, slipped, dropped, got, floodN)
	}
	// The token bucket answers at most the burst plus the rate over the
	// time the run took, and (the queries being spread by -Q over at least
	// floodN/floodQPS seconds) at least the burst plus the rate over half
	// that: the half is the slack for a server falling behind and then
	// reading a backlog at once.
	nominal := float64(floodN) / floodQPS
	most := burst + int(rate*floodTook.Seconds()) + 1
	least := burst + int(rate*nominal/2)
	if answered < least || answered > most {
		t.Errorf("flood answered %d, want %d..%d (burst %d + rate %d/s over %.1f s nominal, %v measured)", answered, least, most, burst, rate, nominal, floodTook)
	}
	// Slip 2: of the refused responses, every second is slipped.
	if refused := slipped + dropped; slipped != refused/2 {
		t.Errorf("slipped %d of %d refused responses, want %d (slip 2)", slipped, refused, refused/2)
	}
	// dnsperf saw the same: a response for each answer and slip, nothing
	// for each drop.
	if flood.completed != answered+slipped || flood.lost != dropped {
		t.Errorf("dnsperf flood: %d completed, %d lost; want %d (answered + slipped) and %d (dropped)\n%s", flood.completed, flood.lost, answered+slipped, dropped, flood.out)
	}
	// The bystander in another /24: every query answered in full, none
	// slipped (a slip is not counted as an SRV answer) or dropped.
	if calm.completed != calmN || calm.lost != 0 || calmAnswered != calmN {
		t.Errorf("bystander: dnsperf %d completed, %d lost, %d SRV answers; want all %d answered\n%s", calm.completed, calm.lost, calmAnswered, calmN, calm.out)
	}
	if got := metric("spillway_dns_rrl_table_entries"); got != 2 {
		t.Errorf("spillway_dns_rrl_table_entries = %d, want 2 (127.0.1.0/24, 127.0.2.0/24)", got)
	}
}

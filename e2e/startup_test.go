package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestDNSServfailUntilSynced is the DNS restart test: while the server
// loads its sources, queries get SERVFAIL, never NXDOMAIN; once loaded, the
// real answers. The static file is a named pipe, so the load blocks until
// the test writes it: the not-yet-synced window is held open for as long as
// the test needs, with no timing guess.
func TestDNSServfailUntilSynced(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "services.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--static-file", fifo)
	dnsAddr := s.flag("--dns-addr")
	s.startNoWait()

	c := &dns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
	ask := func(name string) (int, bool) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := c.Exchange(m, dnsAddr)
		if err != nil {
			return 0, false
		}
		return r.Rcode, true
	}
	// Wait (bounded) until DNS answers at all; every answer must be SERVFAIL.
	servfails := 0
	for deadline := time.Now().Add(30 * time.Second); servfails < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("no SERVFAIL answers while loading (got %d):\n%s", servfails, s.logs)
		}
		for _, name := range []string{"ledger.spillway.internal.", "nope.spillway.internal."} {
			rc, ok := ask(name)
			if !ok {
				continue
			}
			if rc != dns.RcodeServerFailure {
				t.Fatalf("%s while loading: %s, want SERVFAIL", name, dns.RcodeToString[rc])
			}
			servfails++
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Let the load finish.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("services:\n  - name: ledger\n    endpoints:\n      - address: 10.5.0.1\n        ports: [\"grpc=7000\"]\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.waitReady()
	if rc, ok := ask("ledger.spillway.internal."); !ok || rc != dns.RcodeSuccess {
		t.Errorf("after load: ledger %s (answered %v), want NOERROR", dns.RcodeToString[rc], ok)
	}
	if rc, ok := ask("nope.spillway.internal."); !ok || rc != dns.RcodeNameError {
		t.Errorf("after load: nope %s (answered %v), want NXDOMAIN", dns.RcodeToString[rc], ok)
	}
	t.Logf("%d SERVFAIL answers while loading", servfails)
}

package resolver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver/rrl"
)

// newAbuseServer is newTestServer with cfg's RRL and TCP settings and a
// registry of its own.
func newAbuseServer(t testing.TB, cfg Config) (*Server, *prometheus.Registry) {
	t.Helper()
	store := registry.NewStore()
	store.MarkSynced()
	mustApply(t, store, upsert("web", endpointSpec{id: "w1", addr: "10.0.0.1"}))
	reg := prometheus.NewRegistry()
	cfg.Store, cfg.Domain, cfg.Registerer = store, "spillway.internal", reg
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// outcome is what one query got: "answer" (a full reply), "slip" (TC, no
// records) or "drop" (nothing).
func outcome(t *testing.T, s *Server, q *dns.Msg, from net.Addr) string {
	t.Helper()
	_, tcp := from.(*net.TCPAddr)
	w := &recorder{tcp: tcp, remote: from}
	s.ServeDNS(w, q)
	if len(w.out) == 0 {
		return "drop"
	}
	m := new(dns.Msg)
	if err := m.Unpack(w.out); err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	if m.Id != q.Id || !m.Response {
		t.Fatalf("reply id %d response %v, want id %d response", m.Id, m.Response, q.Id)
	}
	if m.Truncated {
		if len(m.Answer)+len(m.Ns) != 0 || len(m.Extra) > 1 {
			t.Fatalf("slipped reply has records: %v", m)
		}
		if len(m.Question) != 1 || m.Question[0] != q.Question[0] {
			t.Fatalf("slipped reply question %v, want %v", m.Question, q.Question)
		}
		if (m.IsEdns0() != nil) != (q.IsEdns0() != nil) {
			t.Fatalf("slipped reply OPT %v, query OPT %v", m.IsEdns0(), q.IsEdns0())
		}
		if m.Rcode != dns.RcodeSuccess {
			t.Fatalf("slipped reply rcode %s", dns.RcodeToString[m.Rcode])
		}
		if len(w.out) > len(mustPack(t, q)) {
			t.Fatalf("slipped reply is %d bytes, more than the %d-byte query", len(w.out), len(mustPack(t, q)))
		}
		if replyCookie(t, m) != "" {
			t.Fatalf("slipped reply carries a COOKIE: %v", m)
		}
		return "slip"
	}
	if len(m.Answer) == 0 && m.Rcode == dns.RcodeSuccess {
		t.Fatalf("answer without records: %v", m)
	}
	return "answer"
}

func mustPack(t *testing.T, m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRRL: a UDP source past its rate gets its burst, then every second
// refused response slipped (TC) and the others dropped; another /24 is
// answered in full, TCP from the limited source too, and the allowance
// refills with time. The clock is synctest's, so it moves only on Sleep.
func TestRRL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := newAbuseServer(t, Config{RRL: rrl.Config{Rate: 5, Burst: 5, Slip: 2}})
		a := newQuery("web.spillway.internal.", dns.TypeA)
		edns := newQuery("web.spillway.internal.", dns.TypeA)
		edns.SetEdns0(1232, false)
		nx := newQuery("nope.spillway.internal.", dns.TypeA)
		limited := querier("192.0.2.7", false)
		tally := func(q *dns.Msg, from net.Addr, n int) map[string]int {
			got := map[string]int{}
			for range n {
				got[outcome(t, s, q, from)]++
			}
			return got
		}
		check := func(what string, got map[string]int, want map[string]int) {
			t.Helper()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %v, want %v", what, got, want)
			}
		}
		// 20 queries at one instant: the burst of 5, then 15 refused, of
		// which every second (7) slips.
		check("limited source", tally(a, limited, 20), map[string]int{"answer": 5, "slip": 7, "drop": 8})
		// Negative answers and EDNS queries share the prefix's allowance.
		check("limited source, NXDOMAIN", tally(nx, limited, 2), map[string]int{"slip": 1, "drop": 1})
		check("limited source, EDNS", tally(edns, limited, 2), map[string]int{"slip": 1, "drop": 1})
		check("same /24", tally(a, querier("192.0.2.200", false), 2), map[string]int{"slip": 1, "drop": 1})
		check("other /24", tally(a, querier("192.0.3.7", false), 5), map[string]int{"answer": 5})
		check("limited source over TCP", tally(a, querier("192.0.2.7", true), 30), map[string]int{"answer": 30})
		if got, want := metricValue(t, reg, "spillway_dns_rrl_dropped_total"), 11.0; got != want {
			t.Errorf("spillway_dns_rrl_dropped_total = %v, want %v", got, want)
		}
		if got, want := metricValue(t, reg, "spillway_dns_rrl_slipped_total"), 10.0; got != want {
			t.Errorf("spillway_dns_rrl_slipped_total = %v, want %v", got, want)
		}
		if got, want := metricValue(t, reg, "spillway_dns_rrl_table_entries"), 2.0; got != want {
			t.Errorf("spillway_dns_rrl_table_entries = %v, want %v", got, want)
		}
		// Dropped and slipped responses are not answered queries.
		if got, want := testutil.ToFloat64(s.metrics.byLabel[qtypeIndex(dns.TypeA)][rcodeIndex(dns.RcodeSuccess)]), 5.0+5+30; got != want {
			t.Errorf("A NOERROR queries = %v, want %v", got, want)
		}
		// 400 ms later: two more responses' worth (one per 200 ms).
		time.Sleep(400 * time.Millisecond)
		check("limited source after 400ms", tally(a, limited, 4), map[string]int{"answer": 2, "slip": 1, "drop": 1})
		// A full burst again, no more; the slip count runs on (the
		// prefix's 24th refused response: slipped).
		time.Sleep(time.Hour)
		check("limited source after an hour", tally(a, limited, 6), map[string]int{"answer": 5, "slip": 1})
	})
}

// TestRRLSlipEdges: slip 0 drops everything past the rate, slip 1 slips
// everything, and off (rate 0) answers all.
func TestRRLSlipEdges(t *testing.T) {
	cases := []struct {
		name string
		cfg  rrl.Config
		want map[string]int
	}{
		{"off", rrl.Config{}, map[string]int{"answer": 10}},
		{"slip_0", rrl.Config{Rate: 2, Slip: 0}, map[string]int{"answer": 2, "drop": 8}},
		{"slip_1", rrl.Config{Rate: 2, Slip: 1}, map[string]int{"answer": 2, "slip": 8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, _ := newAbuseServer(t, Config{RRL: c.cfg})
				got := map[string]int{}
				for range 10 {
					got[outcome(t, s, newQuery("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), querier("2001:db8::1", false))]++
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Errorf("got %v, want %v", got, c.want)
				}
			})
		})
	}
}

// TestSlipOddQueries: a slipped reply to a query whose name cannot be
// echoed, or with no question, is still a parseable TC reply.
func TestSlipOddQueries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newAbuseServer(t, Config{RRL: rrl.Config{Rate: 1, Slip: 1}})
		from := querier("198.51.100.1", false)
		outcome(t, s, newQuery("web.spillway.internal.", dns.TypeA), from) // the burst
		odd := newQuery(`we\.b.spillway.internal.`, dns.TypeA)
		none := newQuery("web.spillway.internal.", dns.TypeA)
		none.Question = nil
		for _, q := range []*dns.Msg{odd, none} {
			w := &recorder{remote: from}
			s.ServeDNS(w, q)
			m := new(dns.Msg)
			if err := m.Unpack(w.out); err != nil {
				t.Fatalf("slipped reply to %v does not parse: %v", q.Question, err)
			}
			if !m.Truncated || m.Id != q.Id || len(m.Question) != 0 || len(m.Answer) != 0 {
				t.Errorf("slipped reply to %v: %v, want TC, no question, no records", q.Question, m)
			}
		}
	})
}

// TestANYMinimal: ANY stays minimal (RFC 8482), one record, so it is no
// amplifier.
func TestANYMinimal(t *testing.T) {
	s, _ := newAbuseServer(t, Config{})
	for _, name := range []string{"web.spillway.internal.", "spillway.internal.", "_xds.spillway.internal."} {
		m, _ := query(t, s, newQuery(name, dns.TypeANY), false)
		if len(m.Answer) > 1 || len(m.Extra) > 0 {
			t.Errorf("ANY %s: %d answers, %d extra, want at most 1 and 0", name, len(m.Answer), len(m.Extra))
		}
	}
}

// serveTCP runs s on a TCP listener on 127.0.0.1 until the test ends.
func serveTCP(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, nil, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String()
}

func dialDNS(t *testing.T, addr string) *dns.Conn {
	t.Helper()
	c, err := dns.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A guard against a hung test, not a timed assertion.
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// exchange sends q on c and returns the reply, or the read error.
func exchange(c *dns.Conn, q *dns.Msg) (*dns.Msg, error) {
	if err := c.WriteMsg(q); err != nil {
		return nil, err
	}
	return c.ReadMsg()
}

// isClosed reports whether err says the server closed the connection
// (not a timeout).
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// TestTCPMaxConns: a connection past TCPMaxConns open ones is closed
// without an answer and counted; once one closes, a new one is served.
func TestTCPMaxConns(t *testing.T) {
	s, reg := newAbuseServer(t, Config{TCPMaxConns: 2})
	addr := serveTCP(t, s)
	q := newQuery("web.spillway.internal.", dns.TypeA)
	var open []*dns.Conn
	for i := range 2 {
		c := dialDNS(t, addr)
		if _, err := exchange(c, q); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
	}
	third := dialDNS(t, addr)
	if m, err := exchange(third, q); err == nil || !isClosed(err) {
		t.Fatalf("third connection: reply %v, err %v; want it closed", m, err)
	}
	if got := metricValue(t, reg, "spillway_dns_tcp_refused_total"); got != 1 {
		t.Errorf("spillway_dns_tcp_refused_total = %v, want 1", got)
	}
	// The server sees the close when it reads: the slot frees once the
	// connection's goroutine notices, so retry a bounded number of times.
	open[0].Close()
	for i := 0; ; i++ {
		c := dialDNS(t, addr)
		if _, err := exchange(c, q); err == nil {
			break
		}
		if i == 100 {
			t.Fatal("no connection served after one of two closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The second connection was served all along.
	if _, err := exchange(open[1], q); err != nil {
		t.Errorf("second connection: %v", err)
	}
}

// TestTCPMaxQueries: a connection is closed after TCPMaxQueries queries.
func TestTCPMaxQueries(t *testing.T) {
	s, _ := newAbuseServer(t, Config{TCPMaxQueries: 3})
	addr := serveTCP(t, s)
	c := dialDNS(t, addr)
	q := newQuery("web.spillway.internal.", dns.TypeA)
	for i := range 3 {
		if _, err := exchange(c, q); err != nil {
			t.Fatalf("query %d: %v", i+1, err)
		}
	}
	if m, err := exchange(c, q); err == nil || !isClosed(err) {
		t.Fatalf("query 4: reply %v, err %v; want the connection closed", m, err)
	}
}

func TestAbuseConfig(t *testing.T) {
	cases := []struct {
		cfg     Config
		wantErr string
	}{
		{Config{TCPMaxConns: -2}, "TCPMaxConns -2"},
		{Config{TCPMaxQueries: -2}, "TCPMaxQueries -2"},
		{Config{TCPIdleTimeout: -time.Second}, "TCPIdleTimeout -1s"},
		{Config{RRL: rrl.Config{Rate: -1}}, "RRL: rrl config: Rate -1"},
		{Config{RRL: rrl.Config{Rate: 1, IPv4PrefixLen: 40}}, "IPv4PrefixLen 40"},
		{Config{RRL: rrl.Config{Rate: 1, Exempt: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}}}, "RRL: rrl config: Exempt[0] 10.0.0.1/8 has host bits set"},
	}
	for _, c := range cases {
		t.Run(c.wantErr, func(t *testing.T) {
			c.cfg.Store, c.cfg.Domain = registry.NewStore(), "spillway.internal"
			_, err := New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("err = %v, want one naming %q", err, c.wantErr)
			}
		})
	}
	// The zero Config: no rate limiting (the library's default; the
	// command's --dns-rrl-rate is 1000), cookies on.
	s, _ := newAbuseServer(t, Config{})
	if s.cfg.TCPMaxConns != DefaultTCPMaxConns || s.cfg.TCPMaxQueries != DefaultTCPMaxQueries || s.cfg.TCPIdleTimeout != DefaultTCPIdleTimeout || s.rrl != nil || s.secret == nil {
		t.Errorf("defaults: %d conns, %d queries, idle %v, rrl %v, cookie secret %v", s.cfg.TCPMaxConns, s.cfg.TCPMaxQueries, s.cfg.TCPIdleTimeout, s.rrl, s.secret)
	}
}

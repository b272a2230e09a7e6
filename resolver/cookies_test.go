package resolver

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver/internal/cookie"
	"github.com/spillway/spillway/resolver/rrl"
)

// clientCookie is the client cookie of the test queries.
const clientCookie = "0123456789abcdef"

// withCookie adds a COOKIE option with data (hex) to q, and an OPT record
// if q has none.
func withCookie(q *dns.Msg, data string) *dns.Msg {
	if q.IsEdns0() == nil {
		q.SetEdns0(1232, false)
	}
	o := q.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: data})
	return q
}

// replyCookie returns the data (hex) of m's COOKIE option, "" when it has
// none; more than one fails the test.
func replyCookie(t testing.TB, m *dns.Msg) string {
	t.Helper()
	opt := m.IsEdns0()
	if opt == nil {
		return ""
	}
	var out []string
	for _, o := range opt.Option {
		if c, ok := o.(*dns.EDNS0_COOKIE); ok {
			out = append(out, c.Cookie)
		}
	}
	if len(out) > 1 {
		t.Fatalf("reply has %d COOKIE options: %v", len(out), out)
	}
	return strings.Join(out, "")
}

// learned is the COOKIE data of a query whose client learned the server
// cookie s made for ip at at: the client cookie and that server cookie.
func learned(s *Server, ip string, at time.Time) string {
	c, _ := cookie.ParseHex(clientCookie)
	f := s.secret.Fresh(&c, netip.MustParseAddr(ip), uint32(at.Unix()))
	return hex.EncodeToString(f[:])
}

// checkReplyCookie fails unless data is our client cookie and a server
// cookie of s that is valid for ip now; what names the case.
func checkReplyCookie(t testing.TB, what string, s *Server, data, ip string) {
	t.Helper()
	c, err := cookie.ParseHex(data)
	if err != nil || len(data) != 2*cookie.Len || !strings.HasPrefix(data, clientCookie) {
		t.Errorf("%s: reply COOKIE %q: want client cookie %s and a 16-byte server cookie (%v)", what, data, clientCookie, err)
		return
	}
	if got := s.secret.Check(&c, netip.MustParseAddr(ip), uint32(time.Now().Unix())); got != cookie.Valid {
		t.Errorf("%s: reply COOKIE %s for %s: %v, want a valid server cookie", what, data, ip, got)
	}
}

func cookieCount(s *Server, result int) float64 { return testutil.ToFloat64(s.metrics.cookies[result]) }

// TestCookieReplies: every reply to a query with a well-formed COOKIE
// option carries the client cookie and a fresh server cookie valid for
// the querier, whatever the rcode or the path that built it (pre-built
// answers, negative answers, truncation, the packed dns.Msg of the
// unusual cases, with an ECS option alongside); the query's server cookie
// is counted valid, invalid or client_only; none of these change the
// answer. The clock is synctest's, so the cookies' times are exact.
func TestCookieReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, s := newTestServer(t)
		mustApply(t, store, upsert("web", endpointSpec{id: "w1", addr: "10.0.0.1"}))
		bigService(t, store, "big", 100)
		_, other := newTestServer(t) // another secret
		plans := &fakeWeights{}
		zstore, zoned := newZoneServer(t, plans)
		mustApply(t, zstore, upsert("web", endpointSpec{id: "w1", addr: "10.0.0.1", zone: "z1"}))
		now := time.Now()
		const ip = "192.0.2.7"
		q := func(name string, qtype uint16) *dns.Msg { return newQuery(name, qtype) }
		cases := []struct {
			name   string
			s      *Server
			q      *dns.Msg
			data   string // the query's COOKIE
			tcp    bool
			rcode  int
			result int
		}{
			{"client_only", s, q("web.spillway.internal.", dns.TypeA), clientCookie, false, dns.RcodeSuccess, cookieClientOnly},
			{"valid", s, q("web.spillway.internal.", dns.TypeA), learned(s, ip, now), false, dns.RcodeSuccess, cookieValid},
			{"valid_tcp", s, q("web.spillway.internal.", dns.TypeA), learned(s, ip, now), true, dns.RcodeSuccess, cookieValid},
			{"wrong_ip", s, q("web.spillway.internal.", dns.TypeA), learned(s, "192.0.2.8", now), false, dns.RcodeSuccess, cookieInvalid},
			{"wrong_secret", s, q("web.spillway.internal.", dns.TypeA), learned(other, ip, now), false, dns.RcodeSuccess, cookieInvalid},
			{"hour_old", s, q("web.spillway.internal.", dns.TypeA), learned(s, ip, now.Add(-time.Hour)), false, dns.RcodeSuccess, cookieValid},
			{"too_old", s, q("web.spillway.internal.", dns.TypeA), learned(s, ip, now.Add(-time.Hour-time.Second)), false, dns.RcodeSuccess, cookieInvalid},
			{"five_minutes_ahead", s, q("web.spillway.internal.", dns.TypeA), learned(s, ip, now.Add(5*time.Minute)), false, dns.RcodeSuccess, cookieValid},
			{"future", s, q("web.spillway.internal.", dns.TypeA), learned(s, ip, now.Add(5*time.Minute+time.Second)), false, dns.RcodeSuccess, cookieInvalid},
			{"other_servers_format", s, q("web.spillway.internal.", dns.TypeA), clientCookie + "0123456789abcdef0123", false, dns.RcodeSuccess, cookieInvalid},
			{"srv", s, q("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), clientCookie, false, dns.RcodeSuccess, cookieClientOnly},
			{"nxdomain", s, q("nope.spillway.internal.", dns.TypeA), clientCookie, false, dns.RcodeNameError, cookieClientOnly},
			{"nodata", s, q("web.spillway.internal.", dns.TypeTXT), learned(s, ip, now), false, dns.RcodeSuccess, cookieValid},
			{"refused", s, q("example.com.", dns.TypeA), clientCookie, false, dns.RcodeRefused, cookieClientOnly},
			{"refused_escaped_name", s, q(`we\.b.example.com.`, dns.TypeA), clientCookie, false, dns.RcodeRefused, cookieClientOnly},
			{"truncated", s, q("big.spillway.internal.", dns.TypeA), clientCookie, false, dns.RcodeSuccess, cookieClientOnly},
			{"zones_with_ecs", zoned, withECS(q("web.spillway.internal.", dns.TypeA), "10.1.0.0/24"), learned(zoned, ip, now), false, dns.RcodeSuccess, cookieValid},
		}
		// The unusual cases, answered from a packed dns.Msg.
		notimp := q("web.spillway.internal.", dns.TypeA)
		notimp.Opcode = dns.OpcodeUpdate
		twoQ := q("web.spillway.internal.", dns.TypeA)
		twoQ.Question = append(twoQ.Question, twoQ.Question[0])
		badvers := q("web.spillway.internal.", dns.TypeA)
		badvers.SetEdns0(1232, false)
		badvers.IsEdns0().SetVersion(1)
		cases = append(cases, []struct {
			name   string
			s      *Server
			q      *dns.Msg
			data   string
			tcp    bool
			rcode  int
			result int
		}{
			{"notimp", s, notimp, clientCookie, false, dns.RcodeNotImplemented, cookieClientOnly},
			{"formerr_two_questions", s, twoQ, learned(s, ip, now), false, dns.RcodeFormatError, cookieValid},
			{"badvers", s, badvers, clientCookie, false, dns.RcodeBadVers, cookieClientOnly},
		}...)
		// (No t.Run inside a synctest bubble: errors name the case.)
		for _, c := range cases {
			before := cookieCount(c.s, c.result)
			plain, _ := queryFrom(t, c.s, c.q.Copy(), c.tcp, querier(ip, c.tcp))
			m, _ := queryFrom(t, c.s, withCookie(c.q.Copy(), c.data), c.tcp, querier(ip, c.tcp))
			if m.Rcode != c.rcode {
				t.Errorf("%s: rcode %s, want %s", c.name, dns.RcodeToString[m.Rcode], dns.RcodeToString[c.rcode])
			}
			checkReplyCookie(t, c.name, c.s, replyCookie(t, m), ip)
			if got := cookieCount(c.s, c.result) - before; got != 1 {
				t.Errorf("%s: spillway_dns_cookies_total{result=%q} went up by %v, want 1", c.name, cookieLabels[c.result], got)
			}
			// The cookie changes nothing else of the reply.
			if fmt.Sprint(rrStrings(m.Answer), rrStrings(m.Ns), rrStrings(m.Extra), m.Truncated) != fmt.Sprint(rrStrings(plain.Answer), rrStrings(plain.Ns), rrStrings(plain.Extra), plain.Truncated) {
				t.Errorf("%s: reply with a cookie:\n%v\nwithout:\n%v", c.name, m, plain)
			}
			if c.name == "zones_with_ecs" {
				if o := m.IsEdns0(); o == nil || len(o.Option) != 2 {
					t.Errorf("%s: OPT %v, want the ECS and the COOKIE option", c.name, o)
				}
			}
		}
		// Fresh means fresh: a second later, another server cookie.
		m1, _ := queryFrom(t, s, withCookie(q("web.spillway.internal.", dns.TypeA), clientCookie), false, querier(ip, false))
		time.Sleep(time.Second)
		m2, _ := queryFrom(t, s, withCookie(q("web.spillway.internal.", dns.TypeA), replyCookie(t, m1)), false, querier(ip, false))
		if a, b := replyCookie(t, m1), replyCookie(t, m2); a == b {
			t.Errorf("the same server cookie %s a second later", a)
		}
	})
}

// TestCookieMalformed: a COOKIE option of 0..41 bytes is answered when
// it is 8 (client cookie) or 16..40 bytes (with a server cookie), and
// gets FORMERR with an OPT record and no COOKIE otherwise (RFC 7873
// 5.2.2), over UDP and TCP.
func TestCookieMalformed(t *testing.T) {
	s, _ := newAbuseServer(t, Config{})
	long := clientCookie + strings.Repeat("ab", 40)
	for n := 0; n <= 41; n++ {
		data := long[:2*n]
		for _, tcp := range []bool{false, true} {
			before := cookieCount(s, cookieMalformed)
			m, _ := queryFrom(t, s, withCookie(newQuery("web.spillway.internal.", dns.TypeA), data), tcp, querier("192.0.2.7", tcp))
			ok := n == 8 || (n >= 16 && n <= 40)
			switch {
			case ok && (m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1):
				t.Errorf("%d bytes, tcp %v: %s with %d answers, want NOERROR and the answer", n, tcp, dns.RcodeToString[m.Rcode], len(m.Answer))
			case ok:
				checkReplyCookie(t, fmt.Sprintf("%d bytes, tcp %v", n, tcp), s, replyCookie(t, m), "192.0.2.7")
			case m.Rcode != dns.RcodeFormatError || m.IsEdns0() == nil || replyCookie(t, m) != "" || len(m.Answer) != 0:
				t.Errorf("%d bytes, tcp %v: %s, OPT %v, want FORMERR with an OPT record and no COOKIE", n, tcp, dns.RcodeToString[m.Rcode], m.IsEdns0())
			}
			if got, want := cookieCount(s, cookieMalformed)-before, map[bool]float64{true: 0, false: 1}[ok]; got != want {
				t.Errorf("%d bytes: malformed count went up by %v, want %v", n, got, want)
			}
		}
	}
}

// TestCookiesOff: with Cookies.Off a COOKIE option is ignored: no COOKIE
// in the reply, no FORMERR for a malformed one, no metric.
func TestCookiesOff(t *testing.T) {
	s, _ := newAbuseServer(t, Config{Cookies: Cookies{Off: true}})
	if s.secret != nil {
		t.Fatal("Cookies.Off: the server has a secret")
	}
	for _, data := range []string{clientCookie, clientCookie + strings.Repeat("00", 16), "abcd"} {
		m, _ := query(t, s, withCookie(newQuery("web.spillway.internal.", dns.TypeA), data), false)
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || replyCookie(t, m) != "" {
			t.Errorf("cookie %s: %v, want the answer without a COOKIE", data, m)
		}
	}
	for i := range cookieLabels {
		if n := cookieCount(s, i); n != 0 {
			t.Errorf("spillway_dns_cookies_total{result=%q} = %v, want 0", cookieLabels[i], n)
		}
	}
}

// TestCookieSecret: servers given one Cookies.Secret (replicas behind one
// address) accept each other's cookies; a server of another secret does
// not; the zero Secret draws a random one.
func TestCookieSecret(t *testing.T) {
	mk := func(secret [16]byte) *Server {
		s, _ := newAbuseServer(t, Config{Cookies: Cookies{Secret: secret}})
		return s
	}
	shared := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	a, b, c := mk(shared), mk(shared), mk([16]byte{})
	if *c.secret == (cookie.Secret{}) || *c.secret == *mk([16]byte{}).secret {
		t.Errorf("zero Secret: got %x, want random bytes", *c.secret)
	}
	m, _ := queryFrom(t, a, withCookie(newQuery("web.spillway.internal.", dns.TypeA), clientCookie), false, querier("192.0.2.7", false))
	data := replyCookie(t, m)
	for _, x := range []struct {
		name string
		s    *Server
		want int
	}{{"same_secret", b, cookieValid}, {"other_secret", c, cookieInvalid}} {
		before := cookieCount(x.s, x.want)
		queryFrom(t, x.s, withCookie(newQuery("web.spillway.internal.", dns.TypeA), data), false, querier("192.0.2.7", false))
		if cookieCount(x.s, x.want)-before != 1 {
			t.Errorf("%s: a's cookie not counted %s", x.name, cookieLabels[x.want])
		}
	}
}

// TestCookieBypassesRRL: a UDP source past its rate is still answered in
// full when its query carries a valid server cookie, and those queries
// use none of its allowance; without one, with a client cookie only, or
// with an invalid one, the same source is limited (and its slipped
// replies carry no COOKIE and are no larger than the query).
func TestCookieBypassesRRL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := newAbuseServer(t, Config{RRL: rrl.Config{Rate: 2, Burst: 2, Slip: 1}})
		const ip = "192.0.2.7"
		from := querier(ip, false)
		a := func(data string) *dns.Msg {
			q := newQuery("web.spillway.internal.", dns.TypeA)
			if data != "" {
				withCookie(q, data)
			}
			return q
		}
		tally := func(q *dns.Msg, n int) map[string]int {
			got := map[string]int{}
			for range n {
				got[outcome(t, s, q, from)]++
			}
			return got
		}
		check := func(what string, got, want map[string]int) {
			t.Helper()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %v, want %v", what, got, want)
			}
		}
		valid := learned(s, ip, time.Now())
		check("valid cookie", tally(a(valid), 50), map[string]int{"answer": 50})
		check("no cookie, after 50 with one", tally(a(""), 5), map[string]int{"answer": 2, "slip": 3})
		check("client cookie only", tally(a(clientCookie), 3), map[string]int{"slip": 3})
		check("invalid cookie", tally(a(learned(s, "192.0.2.8", time.Now())), 3), map[string]int{"slip": 3})
		check("stale cookie", tally(a(learned(s, ip, time.Now().Add(-2*time.Hour))), 3), map[string]int{"slip": 3})
		check("valid cookie again", tally(a(valid), 5), map[string]int{"answer": 5})
		// Another address of the prefix cannot use ip's cookie.
		for range 3 {
			if got := outcome(t, s, a(valid), querier("192.0.2.200", false)); got != "slip" {
				t.Errorf("ip's cookie from 192.0.2.200: %s, want slip", got)
			}
		}
		if got, want := testutil.ToFloat64(s.metrics.rrlExempt[exemptCookie]), 55.0; got != want {
			t.Errorf("spillway_dns_rrl_exempt_total{reason=cookie} = %v, want %v", got, want)
		}
		if got, want := metricValue(t, reg, "spillway_dns_rrl_slipped_total"), 15.0; got != want {
			t.Errorf("spillway_dns_rrl_slipped_total = %v, want %v", got, want)
		}
		// TCP is not limited, and a valid cookie over TCP is no exemption
		// of RRL's (there is nothing to exempt).
		for range 10 {
			if got := outcome(t, s, a(valid), querier(ip, true)); got != "answer" {
				t.Errorf("TCP: %s, want answer", got)
			}
		}
		if got := testutil.ToFloat64(s.metrics.rrlExempt[exemptCookie]); got != 55 {
			t.Errorf("exempt by cookie after TCP queries = %v, want still 55", got)
		}
	})
}

// TestRRLExemptPrefix: sources in RRL.Exempt are answered in full and
// counted as exempt by prefix; others of the same server are limited.
func TestRRLExemptPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reg := newAbuseServer(t, Config{RRL: rrl.Config{Rate: 1, Slip: 1, Exempt: []netip.Prefix{
			netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:1::/48"),
		}}})
		got := map[string]int{}
		for _, ip := range []string{"192.0.2.7", "192.0.2.200", "2001:db8:1:2::3"} {
			for range 20 {
				got[outcome(t, s, newQuery("web.spillway.internal.", dns.TypeA), querier(ip, false))]++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(map[string]int{"answer": 60}) {
			t.Errorf("exempt sources: %v, want 60 answers", got)
		}
		got = map[string]int{}
		for range 5 {
			got[outcome(t, s, newQuery("web.spillway.internal.", dns.TypeA), querier("198.51.100.1", false))]++
		}
		if fmt.Sprint(got) != fmt.Sprint(map[string]int{"answer": 1, "slip": 4}) {
			t.Errorf("other source: %v, want 1 answer, 4 slips", got)
		}
		if got := testutil.ToFloat64(s.metrics.rrlExempt[exemptPrefix]); got != 60 {
			t.Errorf("spillway_dns_rrl_exempt_total{reason=prefix} = %v, want 60", got)
		}
		if got := metricValue(t, reg, "spillway_dns_rrl_table_entries"); got != 1 {
			t.Errorf("spillway_dns_rrl_table_entries = %v, want 1 (exempt sources are not tracked)", got)
		}
	})
}

// TestSlipNoLargerThanQuery: every slipped reply, to queries with and
// without EDNS, client subnet or cookies, of every name kind, is at most
// the size of the query.
func TestSlipNoLargerThanQuery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := registry.NewStore()
		store.MarkSynced()
		s, err := New(Config{Store: store, Domain: "spillway.internal", Zones: testZones, RRL: rrl.Config{Rate: 1, Slip: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, store, upsert("web", endpointSpec{id: "w1", addr: "10.0.0.1"}))
		from := querier("198.51.100.1", false)
		outcome(t, s, newQuery("web.spillway.internal.", dns.TypeA), from) // the burst
		for _, name := range []string{"web.spillway.internal.", "_grpc._tcp.web.spillway.internal.", "nope.spillway.internal.", "example.com.", "a.b.c.d.e.f.g.spillway.internal."} {
			for _, edit := range []func(*dns.Msg){
				func(*dns.Msg) {},
				func(m *dns.Msg) { m.SetEdns0(1232, true) },
				func(m *dns.Msg) { withCookie(m, clientCookie) },
				func(m *dns.Msg) { withCookie(m, learned(s, "192.0.2.9", time.Now())) },
				func(m *dns.Msg) { withCookie(withECS(m, "10.1.0.0/24"), clientCookie) },
				func(m *dns.Msg) { withECS(m, "0") },
			} {
				q := newQuery(name, dns.TypeA)
				edit(q)
				w := &recorder{remote: from}
				s.ServeDNS(w, q)
				m := new(dns.Msg)
				if err := m.Unpack(w.out); err != nil || !m.Truncated {
					t.Fatalf("%s: reply %v (%v), want a slipped TC reply", name, m, err)
				}
				if n, qn := len(w.out), len(mustPack(t, q)); n > qn {
					t.Errorf("%s (%d-byte query): slipped reply of %d bytes", name, qn, n)
				}
				if replyCookie(t, m) != "" {
					t.Errorf("%s: slipped reply carries a COOKIE", name)
				}
			}
		}
	})
}

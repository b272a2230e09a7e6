package resolver

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver/internal/cookie"
)

// FuzzServeDNS feeds arbitrary bytes to the request path: what miekg/dns
// parses goes to ServeDNS over UDP and TCP, of a server without zones and
// of one with zones and zone weights, from a querier in a zone; the reply
// must parse, echo the id and question, and stay within the transport's
// size limit. A query's COOKIE option gets FORMERR without a COOKIE when
// it is malformed, else a COOKIE back with its client cookie and a server
// cookie valid for the querier; a query without one gets none.
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
		edns  uint16
	}{
		{"_grpc._tcp.web.spillway.internal.", dns.TypeSRV, 0},
		{"_grpc._tcp.big.spillway.internal.", dns.TypeSRV, 1232},
		{"web.spillway.internal.", dns.TypeA, 4096},
		{"WEB.spillway.internal.", dns.TypeAAAA, 512},
		{"_xds.spillway.internal.", dns.TypeTXT, 0},
		{"spillway.internal.", dns.TypeNS, 0},
		{"spillway.internal.", dns.TypeSOA, 1232},
		{"nope.spillway.internal.", dns.TypeA, 0},
		{"a.web.spillway.internal.", dns.TypeANY, 0},
		{"example.com.", dns.TypeA, 0},
	} {
		m := newQuery(q.name, q.qtype)
		if q.edns > 0 {
			m.SetEdns0(q.edns, true)
		}
		if q.qtype == dns.TypeSRV && q.edns > 0 {
			withECS(m, "2001:db8:a:100::/56")
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// The DNS edges: FORMERR and NOTIMP with an OPT record, and an SRV
	// answer whose glue does not all fit.
	for _, edit := range []func(m *dns.Msg){
		func(m *dns.Msg) { m.Question = nil },
		func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) },
		func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate },
		func(m *dns.Msg) {
			m.Extra = append(m.Extra, &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 512}})
		},
		func(m *dns.Msg) { m.Question[0].Name = "_grpc._tcp.glue.spillway.internal." },
	} {
		m := newQuery("web.spillway.internal.", dns.TypeSRV)
		m.SetEdns0(1232, true)
		edit(m)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	store, plain := newTestServer(f)
	plans := &fakeWeights{}
	zstore, zoned := newZoneServer(f, plans)
	// Cookies: a client cookie alone, server cookies valid for each
	// server's querier (127.0.0.1 and 10.1.0.1), an invalid one, and
	// malformed lengths, on answers of every size.
	for _, q := range []struct {
		name  string
		qtype uint16
		data  string
	}{
		{"web.spillway.internal.", dns.TypeA, clientCookie},
		{"_grpc._tcp.web.spillway.internal.", dns.TypeSRV, learned(plain, "127.0.0.1", time.Now())},
		{"_grpc._tcp.big.spillway.internal.", dns.TypeSRV, learned(zoned, "10.1.0.1", time.Now())},
		{"_grpc._tcp.glue.spillway.internal.", dns.TypeSRV, learned(plain, "127.0.0.1", time.Now())},
		{"big.spillway.internal.", dns.TypeA, clientCookie + "0123456789abcdef0123456789abcdef"},
		{"nope.spillway.internal.", dns.TypeA, clientCookie[:14]},
		{"web.spillway.internal.", dns.TypeAAAA, clientCookie + "01"},
		{"web.spillway.internal.", dns.TypeA, clientCookie + strings.Repeat("ff", 33)},
	} {
		m := withCookie(newQuery(q.name, q.qtype), q.data)
		if q.qtype == dns.TypeSRV {
			withECS(m, "10.1.0.0/24")
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	plans.set("web", "", zw("z1", 1), zw("z2", 3))
	plans.set("big", "zone-a", zw("zone-a", 5), zw("zone-b", 3), zw("zone-c", 1))
	for _, st := range []*registry.Store{store, zstore} {
		mustApply(f, st,
			upsert("web", endpointSpec{id: "a", addr: "10.0.0.1", zone: "z1"}),
			upsert("web", endpointSpec{id: "b", addr: "2001:db8::2", zone: "z2"}))
		bigService(f, st, "big", 2000)
		for i := range 24 {
			mustApply(f, st, upsert("glue", endpointSpec{id: fmt.Sprintf("e%02d", i), addr: fmt.Sprintf("10.4.0.%d", i+1), zone: "z1"}))
		}
	}

	f.Fuzz(func(t *testing.T, in []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(in); err != nil {
			return // miekg/dns answers FORMERR itself before any handler
		}
		// The query's COOKIE, as the server reads it: the first one of
		// the OPT record IsEdns0 finds.
		var reqCookie string
		hasCookie := false
		if opt := req.IsEdns0(); opt != nil {
			for _, o := range opt.Option {
				if c, ok := o.(*dns.EDNS0_COOKIE); ok {
					reqCookie, hasCookie = c.Cookie, true
					break
				}
			}
		}
		for i := range 4 {
			tcp, s, w, ip := i%2 == 1, plain, &recorder{}, "127.0.0.1"
			if i >= 2 {
				s, w.remote, ip = zoned, querier("10.1.0.1", tcp), "10.1.0.1"
			}
			w.tcp = tcp
			s.ServeDNS(w, req)
			if req.Response {
				if len(w.out) != 0 {
					t.Fatal("answered a response")
				}
				continue
			}
			if len(w.out) == 0 {
				t.Fatalf("no reply to %v", req)
			}
			limit := 65535
			if !tcp {
				limit = 512
				if opt := req.IsEdns0(); opt != nil {
					limit = min(max(int(opt.UDPSize()), 512), DefaultUDPSizeCap)
				}
			}
			if len(w.out) > limit {
				t.Fatalf("tcp=%v reply of %d bytes, over %d", tcp, len(w.out), limit)
			}
			m := new(dns.Msg)
			if err := m.Unpack(w.out); err != nil {
				t.Fatalf("tcp=%v reply does not parse: %v\nrequest: %v", tcp, err, req)
			}
			if m.Id != req.Id || !m.Response {
				t.Fatalf("reply id %d response %v, want id %d and QR", m.Id, m.Response, req.Id)
			}
			if (req.IsEdns0() != nil) != (m.IsEdns0() != nil) {
				t.Fatalf("tcp=%v rcode %s: query OPT %v, reply OPT %v; want one exactly when the query had one", tcp, dns.RcodeToString[m.Rcode], req.IsEdns0() != nil, m.IsEdns0() != nil)
			}
			got := replyCookie(t, m)
			switch n := len(reqCookie) / 2; {
			case !hasCookie:
				if got != "" {
					t.Fatalf("reply COOKIE %s to a query without one", got)
				}
			case n != 8 && (n < 16 || n > 40):
				if m.Rcode != dns.RcodeFormatError || got != "" {
					t.Fatalf("%d-byte COOKIE: rcode %s, reply COOKIE %q; want FORMERR and none", n, dns.RcodeToString[m.Rcode], got)
				}
			default:
				c, err := cookie.ParseHex(got)
				if err != nil || len(got) != 2*cookie.Len || got[:16] != reqCookie[:16] {
					t.Fatalf("reply COOKIE %q to %s: want its client cookie and a 16-byte server cookie", got, reqCookie)
				}
				if r := s.secret.Check(&c, netip.MustParseAddr(ip), uint32(time.Now().Unix())); r != cookie.Valid {
					t.Fatalf("reply COOKIE %s: %v for %s, want valid", got, r, ip)
				}
			}
			if len(req.Question) == 1 && m.Rcode != dns.RcodeFormatError && m.Rcode != dns.RcodeNotImplemented {
				if len(m.Question) != 1 || m.Question[0] != req.Question[0] {
					t.Fatalf("question %v echoed as %v", req.Question, m.Question)
				}
			}
		}
	})
}

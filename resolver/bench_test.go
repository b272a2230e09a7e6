package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver/rrl"
)

// BenchmarkServeDNS is the answer path from a parsed request to the bytes
// written, per kind of query. Its allocation budget is 0–2 per query; the
// cases without a known querier zone allocate nothing. The cookie cases
// carry a COOKIE option: a client cookie alone, or a valid server cookie
// too (validated, then a fresh one made: two SipHashes).
func BenchmarkServeDNS(b *testing.B) {
	fill := func(store *registry.Store) {
		for i := range 20 {
			mustApply(b, store, upsert("svc", endpointSpec{id: fmt.Sprintf("e%02d", i), addr: fmt.Sprintf("10.0.0.%d", i+1), zone: fmt.Sprintf("z%d", i%3)}))
		}
		for i := range 3 {
			mustApply(b, store, upsert("small", endpointSpec{id: fmt.Sprintf("e%02d", i), addr: fmt.Sprintf("10.1.0.%d", i+1), zone: "z1"}))
		}
		bigService(b, store, "big", 10000)
	}
	store, plain := newTestServer(b)
	fill(store)
	// A server that knows zones, with a split for every service.
	plans := &fakeWeights{}
	for _, svc := range []string{"svc", "small", "big"} {
		for _, z := range []string{"", "zone-a", "zone-b", "zone-c"} {
			plans.set(svc, z, zw("z0", 500), zw("z1", 300), zw("z2", 200), zw("zone-a", 600), zw("zone-b", 300), zw("zone-c", 100))
		}
	}
	zstore, zoned := newZoneServer(b, plans)
	fill(zstore)

	cases := []struct {
		name  string
		s     *Server
		qname string
		qtype uint16
		tcp   bool
		from  string // querier address; "" 127.0.0.1
		ecs   string // client subnet sent; "" none
		ck    string // COOKIE sent: "" none, "client" a client cookie, "valid" a valid server cookie too
	}{
		{"SRV_3_endpoints", plain, "_grpc._tcp.small.spillway.internal.", dns.TypeSRV, false, "", "", ""},
		{"SRV_20_endpoints_tcp", plain, "_grpc._tcp.svc.spillway.internal.", dns.TypeSRV, true, "", "", ""},
		{"A_20_endpoints", plain, "svc.spillway.internal.", dns.TypeA, false, "", "", ""},
		{"A_20_endpoints_cookie_client_only", plain, "svc.spillway.internal.", dns.TypeA, false, "", "", "client"},
		{"A_20_endpoints_cookie_valid", plain, "svc.spillway.internal.", dns.TypeA, false, "", "", "valid"},
		{"SRV_3_endpoints_cookie_valid", plain, "_grpc._tcp.small.spillway.internal.", dns.TypeSRV, false, "", "", "valid"},
		{"A_mixed_case", plain, "SvC.spillway.internal.", dns.TypeA, false, "", "", ""},
		{"NXDOMAIN", plain, "nope.spillway.internal.", dns.TypeA, false, "", "", ""},
		{"TXT_panic_flag", plain, "_xds.spillway.internal.", dns.TypeTXT, false, "", "", ""},
		{"SRV_10000_truncated_udp", plain, "_grpc._tcp.big.spillway.internal.", dns.TypeSRV, false, "", "", ""},
		{"SRV_10000_subset_tcp", plain, "_grpc._tcp.big.spillway.internal.", dns.TypeSRV, true, "", "", ""},
		// With Config.Zones and Config.Weights.
		{"zones/SRV_20_zone_unknown", zoned, "_grpc._tcp.svc.spillway.internal.", dns.TypeSRV, true, "192.0.2.1", "", ""},
		{"zones/SRV_3_zone_by_source", zoned, "_grpc._tcp.small.spillway.internal.", dns.TypeSRV, false, "10.1.0.1", "", ""},
		{"zones/SRV_20_zone_by_source_tcp", zoned, "_grpc._tcp.svc.spillway.internal.", dns.TypeSRV, true, "10.1.0.1", "", ""},
		{"zones/SRV_20_zone_by_ecs_tcp", zoned, "_grpc._tcp.svc.spillway.internal.", dns.TypeSRV, true, "192.0.2.1", "10.2.3.0/24", ""},
		{"zones/SRV_10000_subset_tcp_zone_by_source", zoned, "_grpc._tcp.big.spillway.internal.", dns.TypeSRV, true, "10.1.0.1", "", ""},
		{"zones/A_20_endpoints_ecs", zoned, "svc.spillway.internal.", dns.TypeA, false, "192.0.2.1", "10.2.3.0/24", ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q := newQuery(c.qname, c.qtype)
			q.SetEdns0(1232, false)
			if c.ecs != "" {
				withECS(q, c.ecs)
			}
			var from net.Addr
			ip := "127.0.0.1"
			if c.from != "" {
				from, ip = querier(c.from, c.tcp), c.from
			}
			switch c.ck {
			case "client":
				withCookie(q, clientCookie)
			case "valid":
				withCookie(q, learned(c.s, ip, time.Now()))
			}
			w := &recorder{tcp: c.tcp, remote: from, out: make([]byte, 0, 65536)}
			c.s.ServeDNS(w, q) // build the answers once
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				c.s.ServeDNS(w, q)
			}
		})
	}
}

// BenchmarkServeDNSRRL is BenchmarkServeDNS's UDP A query with response
// rate limiting off and on (a rate no querier reaches, so every query is
// answered and pays the limiter's lookup), from one source prefix and
// from 10,000 of them; the cost of a refused query (dropped, or slipped
// as a TC reply); and of the queries a limited source still gets
// answered: with a valid server cookie, or from an exempt prefix.
func BenchmarkServeDNSRRL(b *testing.B) {
	exempt := []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("10.0.0.0/8")}
	cases := []struct {
		name     string
		rrl      rrl.Config
		prefixes int
		cookie   bool // the query carries a valid server cookie
	}{
		{"off", rrl.Config{}, 1, false},
		{"on_1_prefix", rrl.Config{Rate: 1_000_000_000}, 1, false},
		{"on_10000_prefixes", rrl.Config{Rate: 1_000_000_000}, 10000, false},
		{"refused_drop", rrl.Config{Rate: 1, Slip: 0}, 1, false},
		{"refused_slip", rrl.Config{Rate: 1, Slip: 1}, 1, false},
		{"limited_valid_cookie", rrl.Config{Rate: 1, Slip: 1}, 1, true},
		{"limited_exempt_prefix", rrl.Config{Rate: 1, Slip: 1, Exempt: exempt}, 1, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			store := registry.NewStore()
			store.MarkSynced()
			for i := range 20 {
				mustApply(b, store, upsert("svc", endpointSpec{id: fmt.Sprintf("e%02d", i), addr: fmt.Sprintf("10.0.0.%d", i+1)}))
			}
			s, err := New(Config{Store: store, Domain: "spillway.internal", RRL: c.rrl})
			if err != nil {
				b.Fatal(err)
			}
			q := newQuery("svc.spillway.internal.", dns.TypeA)
			q.SetEdns0(1232, false)
			if c.cookie {
				withCookie(q, learned(s, "10.0.0.1", time.Now()))
			}
			ws := make([]*recorder, c.prefixes)
			for i := range ws {
				ws[i] = &recorder{remote: &net.UDPAddr{IP: net.IPv4(10, byte(i>>8), byte(i), 1), Port: 40000}, out: make([]byte, 0, 65536)}
				s.ServeDNS(ws[i], q)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				s.ServeDNS(ws[i%len(ws)], q)
				i++
			}
		})
	}
}

// BenchmarkFirstQueries is the first A query of each of n services after
// a start, per service: finding the service's cache slot, building its
// answers and writing the reply. Before the slots moved to a sync.Map,
// each new name copied the map of the names before it, so warming n
// services cost O(n²) (50,000 services: minutes).
func BenchmarkFirstQueries(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			store := registry.NewStore()
			store.MarkSynced()
			ops := make([]registry.Op, 0, n)
			qs := make([]*dns.Msg, n)
			for i := range n {
				name := fmt.Sprintf("svc-%05d", i)
				ops = append(ops, upsert(name, endpointSpec{id: "e1", addr: fmt.Sprintf("10.%d.%d.1", i>>8, i&255)}))
				qs[i] = newQuery(name+".spillway.internal.", dns.TypeA)
			}
			mustApply(b, store, ops...)
			w := &recorder{out: make([]byte, 0, 512)}
			b.ReportAllocs()
			for b.Loop() {
				s, err := New(Config{Store: store, Domain: "spillway.internal"})
				if err != nil {
					b.Fatal(err)
				}
				for _, q := range qs {
					s.ServeDNS(w, q)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/service")
		})
	}
}

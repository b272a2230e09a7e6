package resolver

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkServeDNS is the answer path from a parsed request to the bytes
// written, per kind of query. Its allocation budget is 0–2 per query.
func BenchmarkServeDNS(b *testing.B) {
	store, s := newTestServer(b)
	for i := range 20 {
		mustApply(b, store, upsert("svc", endpointSpec{id: fmt.Sprintf("e%02d", i), addr: fmt.Sprintf("10.0.0.%d", i+1), zone: fmt.Sprintf("z%d", i%3)}))
	}
	for i := range 3 {
		mustApply(b, store, upsert("small", endpointSpec{id: fmt.Sprintf("e%02d", i), addr: fmt.Sprintf("10.1.0.%d", i+1), zone: "z1"}))
	}
	bigService(b, store, "big", 10000)
	cases := []struct {
		name  string
		qname string
		qtype uint16
		tcp   bool
	}{
		{"SRV_3_endpoints", "_grpc._tcp.small.spillway.internal.", dns.TypeSRV, false},
		{"SRV_20_endpoints_tcp", "_grpc._tcp.svc.spillway.internal.", dns.TypeSRV, true},
		{"A_20_endpoints", "svc.spillway.internal.", dns.TypeA, false},
		{"A_mixed_case", "SvC.spillway.internal.", dns.TypeA, false},
		{"NXDOMAIN", "nope.spillway.internal.", dns.TypeA, false},
		{"TXT_panic_flag", "_xds.spillway.internal.", dns.TypeTXT, false},
		{"SRV_10000_truncated_udp", "_grpc._tcp.big.spillway.internal.", dns.TypeSRV, false},
		{"SRV_10000_subset_tcp", "_grpc._tcp.big.spillway.internal.", dns.TypeSRV, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q := newQuery(c.qname, c.qtype)
			q.SetEdns0(1232, false)
			w := &recorder{tcp: c.tcp, out: make([]byte, 0, 65536)}
			s.ServeDNS(w, q) // build the answers once
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				s.ServeDNS(w, q)
			}
		})
	}
}

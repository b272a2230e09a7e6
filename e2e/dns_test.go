package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// dnsCase is one query and the reply it must get, CoreDNS style: records
// as zone-file strings. Every case also checks what holds for all replies:
// the question is echoed as sent, the reply carries an OPT record saying
// udp 1232 exactly when the query had one, and a truncated reply has no
// records at all.
type dnsCase struct {
	name    string
	qname   string
	qtype   string
	tcp     bool
	bufsize int  // EDNS0 UDP size sent: 0 means 1232, noEDNS sends no OPT
	kdig    bool // also run with kdig

	rcode             string
	flags             string // exact header flags; queries are sent with +norec
	answer, ns, extra []string
}

const (
	apexSOA = "spillway.internal. 60 IN SOA ns.spillway.internal. hostmaster.spillway.internal. 0 3600 600 86400 5"
	// negSOA is the SOA of negative answers: TTL and minimum are the
	// negative TTL (RFC 2308).
	negSOA = "spillway.internal. 5 IN SOA ns.spillway.internal. hostmaster.spillway.internal. 0 3600 600 86400 5"
)

// dnsAnswersFile is the static part of the services TestDNSAnswers serves;
// the test registers more endpoints of mysvc over gRPC.
const dnsAnswersFile = `services:
  - name: mysvc
    endpoints:
      - {id: a1, address: 10.0.0.1, ports: ["grpc=8080", "metrics=9090"], zone: zone-a, weight: 100}
      - {id: a2, address: 10.0.0.2, ports: ["grpc=8080"], zone: zone-b, weight: 50}
      - {id: d1, address: 10.0.0.3, ports: ["grpc=8080", "metrics=9090"], zone: zone-a, health: draining}
      - {id: u1, address: 10.0.0.4, ports: ["grpc=8080"], zone: zone-b, health: unhealthy}
  - name: empty
`

// bigEndpoints is the size of service "big": its A answer is over 512
// bytes and under 1232, its SRV answer with glue over 1232 and under 4096
// (the test checks both over TCP before relying on them).
const bigEndpoints = 40

func bigFile() string {
	var b strings.Builder
	b.WriteString("  - name: big\n    endpoints:\n")
	for i := 1; i <= bigEndpoints; i++ {
		fmt.Fprintf(&b, "      - {id: b%d, address: 10.2.0.%d, ports: [\"grpc=9000\"], zone: zone-%c}\n", i, i, 'a'+i%3)
	}
	return b.String()
}

func bigA(owner string) []string {
	var out []string
	for i := 1; i <= bigEndpoints; i++ {
		out = append(out, fmt.Sprintf("%s 5 IN A 10.2.0.%d", owner, i))
	}
	return out
}

func bigSRV() (answer, extra []string) {
	for i := 1; i <= bigEndpoints; i++ {
		answer = append(answer, fmt.Sprintf("_grpc._tcp.big.spillway.internal. 5 IN SRV 0 65535 9000 b%d.big.spillway.internal.", i))
		extra = append(extra, fmt.Sprintf("b%d.big.spillway.internal. 5 IN A 10.2.0.%d", i, i))
	}
	return answer, extra
}

// TestDNSAnswers (DNS acceptance 1) drives the real dig, and kdig for a
// representative subset, against a spillway serving a static file plus VM
// registrations, and checks every kind of answer of resolver/doc.go:
// SRV with glue, A, AAAA, endpoint names, the panic flag TXT, NXDOMAIN,
// NODATA, REFUSED, ANY, the apex, TCP, EDNS sizes and truncation, case
// echo, AA, and that unhealthy and draining endpoints are never served.
func TestDNSAnswers(t *testing.T) {
	for tool := range dnsTools {
		lookTool(t, tool)
	}
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(dnsAnswersFile+bigFile()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--static-file", file)
	s.start()
	addr := s.flag("--dns-addr")

	// VM endpoints of the same service, through the registry API: one
	// healthy IPv6, one unhealthy IPv6, one draining IPv4.
	c := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range []*pb.Endpoint{
		{Id: "v6", Address: "2001:db8::6", Health: "healthy"},
		{Id: "v6u", Address: "2001:db8::7", Health: "unhealthy"},
		{Id: "vd", Address: "10.0.0.5", Health: "draining"},
	} {
		e.Ports = []*pb.Port{{Name: "grpc", Number: 8080}}
		e.Locality = &pb.Locality{Region: "r1", Zone: "zone-c"}
		if _, err := c.Register(ctx, &pb.RegisterRequest{Service: "mysvc", Endpoint: e, TtlSeconds: 600}); err != nil {
			t.Fatalf("register %s: %v", e.Id, err)
		}
	}

	mysvcSRV := []string{
		"_grpc._tcp.mysvc.spillway.internal. 5 IN SRV 0 65535 8080 a1.mysvc.spillway.internal.",
		// weight 50 of a largest 100: 65535/2, rounded
		"_grpc._tcp.mysvc.spillway.internal. 5 IN SRV 0 32768 8080 a2.mysvc.spillway.internal.",
		"_grpc._tcp.mysvc.spillway.internal. 5 IN SRV 0 65535 8080 v6.mysvc.spillway.internal.",
	}
	mysvcGlue := []string{
		"a1.mysvc.spillway.internal. 5 IN A 10.0.0.1",
		"a2.mysvc.spillway.internal. 5 IN A 10.0.0.2",
		"v6.mysvc.spillway.internal. 5 IN AAAA 2001:db8::6",
	}
	bigSRVAnswer, bigSRVExtra := bigSRV()
	const echo = "_GrPc._TcP.MySvC.SpIlLwAy.InTeRnAl."

	cases := []dnsCase{
		{name: "srv-with-glue", qname: "_grpc._tcp.mysvc.spillway.internal.", qtype: "SRV", kdig: true,
			rcode: "NOERROR", flags: "qr aa", answer: mysvcSRV, extra: mysvcGlue},
		{name: "srv-other-port", qname: "_metrics._tcp.mysvc.spillway.internal.", qtype: "SRV",
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"_metrics._tcp.mysvc.spillway.internal. 5 IN SRV 0 65535 9090 a1.mysvc.spillway.internal."},
			extra:  []string{"a1.mysvc.spillway.internal. 5 IN A 10.0.0.1"}},
		{name: "a", qname: "mysvc.spillway.internal.", qtype: "A", kdig: true,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"mysvc.spillway.internal. 5 IN A 10.0.0.1", "mysvc.spillway.internal. 5 IN A 10.0.0.2"}},
		{name: "aaaa", qname: "mysvc.spillway.internal.", qtype: "AAAA", kdig: true,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"mysvc.spillway.internal. 5 IN AAAA 2001:db8::6"}},
		{name: "endpoint-a", qname: "a1.mysvc.spillway.internal.", qtype: "A", kdig: true,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"a1.mysvc.spillway.internal. 5 IN A 10.0.0.1"}},
		{name: "endpoint-aaaa", qname: "v6.mysvc.spillway.internal.", qtype: "AAAA",
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"v6.mysvc.spillway.internal. 5 IN AAAA 2001:db8::6"}},
		// An endpoint's own name resolves whatever its health, so a
		// client holding a draining target can still reach it.
		{name: "endpoint-draining-a", qname: "d1.mysvc.spillway.internal.", qtype: "A",
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"d1.mysvc.spillway.internal. 5 IN A 10.0.0.3"}},
		{name: "endpoint-a-of-ipv6", qname: "v6.mysvc.spillway.internal.", qtype: "A",
			rcode: "NOERROR", flags: "qr aa", ns: []string{negSOA}},
		{name: "txt-panic-flag", qname: "_xds.spillway.internal.", qtype: "TXT", kdig: true,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{`_xds.spillway.internal. 5 IN TXT "xds=on"`}},
		{name: "nxdomain", qname: "nope.spillway.internal.", qtype: "A", kdig: true,
			rcode: "NXDOMAIN", flags: "qr aa", ns: []string{negSOA}},
		{name: "nxdomain-srv", qname: "_grpc._tcp.nope.spillway.internal.", qtype: "SRV",
			rcode: "NXDOMAIN", flags: "qr aa", ns: []string{negSOA}},
		{name: "nxdomain-endpoint", qname: "zz.mysvc.spillway.internal.", qtype: "A",
			rcode: "NXDOMAIN", flags: "qr aa", ns: []string{negSOA}},
		{name: "nodata-txt", qname: "mysvc.spillway.internal.", qtype: "TXT", kdig: true,
			rcode: "NOERROR", flags: "qr aa", ns: []string{negSOA}},
		{name: "nodata-aaaa-v4-only", qname: "big.spillway.internal.", qtype: "AAAA",
			rcode: "NOERROR", flags: "qr aa", ns: []string{negSOA}},
		{name: "nodata-srv-no-endpoints", qname: "_grpc._tcp.empty.spillway.internal.", qtype: "SRV",
			rcode: "NOERROR", flags: "qr aa", ns: []string{negSOA}},
		{name: "nodata-empty-non-terminal", qname: "_tcp.mysvc.spillway.internal.", qtype: "SRV",
			rcode: "NOERROR", flags: "qr aa", ns: []string{negSOA}},
		// Not our zone: refused, and not authoritative for it.
		{name: "refused", qname: "example.com.", qtype: "A", kdig: true,
			rcode: "REFUSED", flags: "qr"},
		{name: "any", qname: "mysvc.spillway.internal.", qtype: "ANY", kdig: true,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{`mysvc.spillway.internal. 5 IN HINFO "RFC8482" ""`}},
		{name: "any-srv", qname: "_grpc._tcp.mysvc.spillway.internal.", qtype: "ANY",
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{`_grpc._tcp.mysvc.spillway.internal. 5 IN HINFO "RFC8482" ""`}},
		{name: "apex-soa", qname: "spillway.internal.", qtype: "SOA", kdig: true,
			rcode: "NOERROR", flags: "qr aa", answer: []string{apexSOA}},
		{name: "apex-ns", qname: "spillway.internal.", qtype: "NS", kdig: true,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"spillway.internal. 60 IN NS ns.spillway.internal."},
			extra:  []string{"ns.spillway.internal. 60 IN A 127.0.0.1"}},
		{name: "srv-tcp", qname: "_grpc._tcp.mysvc.spillway.internal.", qtype: "SRV", tcp: true, kdig: true,
			rcode: "NOERROR", flags: "qr aa", answer: mysvcSRV, extra: mysvcGlue},
		{name: "srv-tcp-noedns", qname: "_grpc._tcp.mysvc.spillway.internal.", qtype: "SRV", tcp: true, bufsize: noEDNS,
			rcode: "NOERROR", flags: "qr aa", answer: mysvcSRV, extra: mysvcGlue},
		{name: "case-echo-srv", qname: echo, qtype: "SRV", kdig: true,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{
				echo + " 5 IN SRV 0 65535 8080 a1.mysvc.spillway.internal.",
				echo + " 5 IN SRV 0 32768 8080 a2.mysvc.spillway.internal.",
				echo + " 5 IN SRV 0 65535 8080 v6.mysvc.spillway.internal.",
			},
			extra: mysvcGlue},
		{name: "case-echo-a", qname: "MySvC.SpIlLwAy.InTeRnAl.", qtype: "A",
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"MySvC.SpIlLwAy.InTeRnAl. 5 IN A 10.0.0.1", "MySvC.SpIlLwAy.InTeRnAl. 5 IN A 10.0.0.2"}},

		// EDNS sizes. big's A answer is over 512 and under 1232 bytes;
		// its SRV answer is over 1232.
		{name: "a-over-512-noedns", qname: "big.spillway.internal.", qtype: "A", bufsize: noEDNS, kdig: true,
			rcode: "NOERROR", flags: "qr aa tc"},
		{name: "a-over-512-bufsize-512", qname: "big.spillway.internal.", qtype: "A", bufsize: 512,
			rcode: "NOERROR", flags: "qr aa tc"},
		// RFC 6891 6.2.5: a size below 512 is treated as 512.
		{name: "a-over-512-bufsize-100", qname: "big.spillway.internal.", qtype: "A", bufsize: 100,
			rcode: "NOERROR", flags: "qr aa tc"},
		{name: "a-under-512-bufsize-100", qname: "mysvc.spillway.internal.", qtype: "A", bufsize: 100,
			rcode: "NOERROR", flags: "qr aa",
			answer: []string{"mysvc.spillway.internal. 5 IN A 10.0.0.1", "mysvc.spillway.internal. 5 IN A 10.0.0.2"}},
		{name: "a-over-512-bufsize-1232", qname: "big.spillway.internal.", qtype: "A", bufsize: 1232, kdig: true,
			rcode: "NOERROR", flags: "qr aa", answer: bigA("big.spillway.internal.")},
		{name: "a-over-512-bufsize-4096", qname: "big.spillway.internal.", qtype: "A", bufsize: 4096,
			rcode: "NOERROR", flags: "qr aa", answer: bigA("big.spillway.internal.")},
		{name: "srv-over-1232-bufsize-1232", qname: "_grpc._tcp.big.spillway.internal.", qtype: "SRV", bufsize: 1232,
			rcode: "NOERROR", flags: "qr aa tc"},
		// 4096 is capped at the server's 1232: still truncated.
		{name: "srv-over-1232-bufsize-4096", qname: "_grpc._tcp.big.spillway.internal.", qtype: "SRV", bufsize: 4096, kdig: true,
			rcode: "NOERROR", flags: "qr aa tc"},
		{name: "srv-over-1232-noedns", qname: "_grpc._tcp.big.spillway.internal.", qtype: "SRV", bufsize: noEDNS,
			rcode: "NOERROR", flags: "qr aa tc"},
		{name: "srv-over-1232-tcp", qname: "_grpc._tcp.big.spillway.internal.", qtype: "SRV", tcp: true, kdig: true,
			rcode: "NOERROR", flags: "qr aa", answer: bigSRVAnswer, extra: bigSRVExtra},
		{name: "srv-over-1232-tcp-noedns", qname: "_grpc._tcp.big.spillway.internal.", qtype: "SRV", tcp: true, bufsize: noEDNS,
			rcode: "NOERROR", flags: "qr aa", answer: bigSRVAnswer, extra: bigSRVExtra},
		{name: "a-over-512-tcp-noedns", qname: "big.spillway.internal.", qtype: "A", tcp: true, bufsize: noEDNS,
			rcode: "NOERROR", flags: "qr aa", answer: bigA("big.spillway.internal.")},
	}

	// The EDNS cases rest on big's answer sizes; measure them.
	t.Run("premise-sizes", func(t *testing.T) {
		a := askDNS(t, "dig", addr, dnsQuery{name: "big.spillway.internal.", qtype: "A", tcp: true, bufsize: noEDNS})
		if a.Size <= 512 || a.Size > 1232-11 {
			t.Errorf("big A answer without OPT is %d bytes, want 513..1221 so that it is over 512 and fits 1232 with an OPT record", a.Size)
		}
		srv := askDNS(t, "dig", addr, dnsQuery{name: "_grpc._tcp.big.spillway.internal.", qtype: "SRV", tcp: true, bufsize: noEDNS})
		if srv.Size <= 1232 || srv.Size >= 4096 {
			t.Errorf("big SRV answer is %d bytes, want 1233..4095", srv.Size)
		}
	})

	for _, tool := range []string{"dig", "kdig"} {
		t.Run(tool, func(t *testing.T) {
			for _, tc := range cases {
				if tool == "kdig" && !tc.kdig {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					q := dnsQuery{name: tc.qname, qtype: tc.qtype, tcp: tc.tcp, bufsize: tc.bufsize}
					checkDNSReply(t, q, askDNS(t, tool, addr, q), tc)
				})
			}
		})
	}
}

// checkDNSReply compares r, the reply to q, with tc and with what holds for
// every reply.
func checkDNSReply(t *testing.T, q dnsQuery, r *dnsReply, tc dnsCase) {
	t.Helper()
	bad := false
	errorf := func(format string, args ...any) {
		t.Helper()
		bad = true
		t.Errorf("%s: "+format, append([]any{q}, args...)...)
	}
	if r.Rcode != tc.rcode {
		errorf("rcode = %s, want %s", r.Rcode, tc.rcode)
	}
	if r.Opcode != "" && r.Opcode != "QUERY" {
		errorf("opcode = %s, want QUERY", r.Opcode)
	}
	if r.Flags != tc.flags {
		errorf("flags = %q, want %q", r.Flags, tc.flags)
	}
	wantQ := []dnsQuestion{{tc.qname, "IN", tc.qtype}}
	gotQ := r.Question
	if r.qnameFolded && len(gotQ) == 1 && strings.EqualFold(gotQ[0].Name, tc.qname) {
		gotQ = []dnsQuestion{{tc.qname, gotQ[0].Class, gotQ[0].Type}}
	}
	if !cmp.Equal(gotQ, wantQ) {
		errorf("question = %v, want %v (echoed as sent)", r.Question, wantQ)
	}
	if r.Proto != "" && (r.Proto == "TCP") != tc.tcp {
		errorf("answered over %s, want tcp=%v", r.Proto, tc.tcp)
	}
	switch {
	case q.bufsize == noEDNS && r.EDNS != nil:
		errorf("reply has an OPT record (udp %d), but the query had none", r.EDNS.UDP)
	case q.bufsize != noEDNS && r.EDNS == nil:
		errorf("reply has no OPT record, but the query had one")
	case r.EDNS != nil && (r.EDNS.UDP != 1232 || r.EDNS.Version != 0):
		errorf("reply OPT = version %d udp %d, want version 0 udp 1232 (the server's cap)", r.EDNS.Version, r.EDNS.UDP)
	}
	if r.tc() && len(r.Answer)+len(r.Authority)+len(r.Additional) > 0 {
		errorf("truncated reply holds %d/%d/%d records, want none (never a partial record set)", len(r.Answer), len(r.Authority), len(r.Additional))
	}
	for _, sec := range []struct {
		name      string
		got, want []string
	}{
		{"answer", rrStrings(r.Answer), zoneRRs(t, tc.answer)},
		{"authority", rrStrings(r.Authority), zoneRRs(t, tc.ns)},
		{"additional", rrStrings(r.Additional), zoneRRs(t, tc.extra)},
	} {
		if diff := cmp.Diff(sec.want, sec.got); diff != "" {
			errorf("%s section (-want +got):\n%s", sec.name, diff)
		}
	}
	if bad {
		t.Logf("tool output:\n%s", r.raw)
	}
}

// hugeEndpoints is the size of the service of TestDNSLargeService, spread
// 50/30/20 % over three zones.
const hugeEndpoints = 10_000

func hugeZone(i int) string {
	switch {
	case i < hugeEndpoints/2:
		return "zone-a"
	case i < hugeEndpoints*8/10:
		return "zone-b"
	default:
		return "zone-c"
	}
}

func hugeAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)}) }

// TestDNSLargeService (DNS acceptance 2): a 10,000-endpoint service over 3
// zones. Over UDP the SRV and A answers are truncated with no records. Over
// TCP each answer is a valid message under 65,536 bytes that dig parses,
// takes from every zone in proportion to its endpoints, and successive
// queries together cover every endpoint.
func TestDNSLargeService(t *testing.T) {
	for tool := range dnsTools {
		lookTool(t, tool)
	}
	var b strings.Builder
	b.WriteString("services:\n  - name: huge\n    endpoints:\n")
	zoneOf := map[string]string{}   // SRV target -> zone
	addrOf := map[string]string{}   // SRV target -> address
	addrZone := map[string]string{} // address -> zone
	for i := range hugeEndpoints {
		id, a := fmt.Sprintf("h%05d", i), hugeAddr(i).String()
		fmt.Fprintf(&b, "      - {id: %s, address: %s, ports: [\"grpc=8080\"], zone: %s}\n", id, a, hugeZone(i))
		target := id + ".huge.spillway.internal."
		zoneOf[target], addrOf[target], addrZone[a] = hugeZone(i), a, hugeZone(i)
	}
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--static-file", file)
	s.start()
	addr := s.flag("--dns-addr")
	share := map[string]float64{"zone-a": 0.5, "zone-b": 0.3, "zone-c": 0.2}

	const srvName = "_grpc._tcp.huge.spillway.internal."
	t.Run("udp-truncated", func(t *testing.T) {
		for _, q := range []dnsQuery{
			{name: srvName, qtype: "SRV", bufsize: 1232},
			{name: srvName, qtype: "SRV", bufsize: 4096},
			{name: srvName, qtype: "SRV", bufsize: noEDNS},
			{name: "huge.spillway.internal.", qtype: "A", bufsize: 1232},
		} {
			checkDNSReply(t, q, askDNS(t, "dig", addr, q), dnsCase{qname: q.name, qtype: q.qtype, rcode: "NOERROR", flags: "qr aa tc"})
		}
		q := dnsQuery{name: srvName, qtype: "SRV", bufsize: 4096}
		checkDNSReply(t, q, askDNS(t, "kdig", addr, q), dnsCase{qname: q.name, qtype: q.qtype, rcode: "NOERROR", flags: "qr aa tc"})
	})

	// checkTCP checks one TCP reply's header, size and sections.
	checkTCP := func(t *testing.T, q dnsQuery, r *dnsReply) {
		t.Helper()
		if r.Rcode != "NOERROR" || r.Flags != "qr aa" {
			t.Fatalf("%s: rcode %s flags %q, want NOERROR \"qr aa\"\n%.2000s", q, r.Rcode, r.Flags, r.raw)
		}
		if r.Size <= 0 || r.Size >= 65536 {
			t.Fatalf("%s: dig received %d bytes, want a message under 65,536", q, r.Size)
		}
		if len(r.Answer) == 0 {
			t.Fatalf("%s: empty answer", q)
		}
		if len(r.Authority) != 0 {
			t.Errorf("%s: %d authority records, want none", q, len(r.Authority))
		}
	}
	// checkZones checks that one answer takes from every zone in
	// proportion to its endpoints.
	checkZones := func(t *testing.T, q dnsQuery, counts map[string]int) {
		t.Helper()
		n := 0
		for _, c := range counts {
			n += c
		}
		for z, sh := range share {
			// Largest-remainder apportionment: within one record of the
			// zone's exact share.
			if want := sh * float64(n); counts[z] == 0 || float64(counts[z]) < want-1 || float64(counts[z]) > want+1 {
				t.Errorf("%s: %d of %d records from %s, want %.1f±1 (its %.0f%% share)", q, counts[z], n, z, want, sh*100)
			}
		}
	}

	t.Run("tcp-srv-covers-every-endpoint", func(t *testing.T) {
		q := dnsQuery{name: srvName, qtype: "SRV", tcp: true}
		seen := map[string]bool{}
		queries := 0
		for ; queries < 50 && len(seen) < hugeEndpoints; queries++ {
			r := askDNS(t, "dig", addr, q)
			checkTCP(t, q, r)
			counts := map[string]int{}
			targets := map[string]bool{}
			for _, rr := range r.Answer {
				srv, ok := rr.(*dns.SRV)
				if !ok || srv.Hdr.Name != srvName || srv.Port != 8080 || srv.Priority != 0 {
					t.Fatalf("%s: answer record %s, want SRV 0 <w> 8080 of %s", q, rr, srvName)
				}
				z, ok := zoneOf[srv.Target]
				if !ok {
					t.Fatalf("%s: SRV target %s is not an endpoint of huge", q, srv.Target)
				}
				if targets[srv.Target] {
					t.Fatalf("%s: SRV target %s twice in one answer", q, srv.Target)
				}
				targets[srv.Target] = true
				counts[z]++
				seen[srv.Target] = true
			}
			// Glue: exactly the targets' addresses.
			glue := map[string]bool{}
			for _, rr := range r.Additional {
				a, ok := rr.(*dns.A)
				if !ok || !targets[a.Hdr.Name] || a.A.String() != addrOf[a.Hdr.Name] || glue[a.Hdr.Name] {
					t.Fatalf("%s: additional record %s is not the one A of an SRV target", q, rr)
				}
				glue[a.Hdr.Name] = true
			}
			if len(glue) != len(targets) {
				t.Errorf("%s: %d glue records for %d SRV targets", q, len(glue), len(targets))
			}
			checkZones(t, q, counts)
			if queries == 0 {
				t.Logf("one TCP SRV answer: %d records + %d glue, %d bytes", len(r.Answer), len(r.Additional), r.Size)
			}
		}
		if len(seen) < hugeEndpoints {
			t.Errorf("after %d TCP SRV queries, %d of %d endpoints seen, want all", queries, len(seen), hugeEndpoints)
		} else {
			t.Logf("%d TCP SRV queries covered all %d endpoints", queries, hugeEndpoints)
		}
	})

	t.Run("tcp-a-covers-every-endpoint", func(t *testing.T) {
		q := dnsQuery{name: "huge.spillway.internal.", qtype: "A", tcp: true}
		seen := map[string]bool{}
		queries := 0
		for ; queries < 50 && len(seen) < hugeEndpoints; queries++ {
			r := askDNS(t, "dig", addr, q)
			checkTCP(t, q, r)
			if len(r.Additional) != 0 {
				t.Errorf("%s: %d additional records, want none", q, len(r.Additional))
			}
			counts := map[string]int{}
			inAnswer := map[string]bool{}
			for _, rr := range r.Answer {
				a, ok := rr.(*dns.A)
				if !ok || a.Hdr.Name != q.name {
					t.Fatalf("%s: answer record %s, want A of %s", q, rr, q.name)
				}
				ip := a.A.String()
				z, ok := addrZone[ip]
				if !ok || inAnswer[ip] {
					t.Fatalf("%s: address %s is not an endpoint of huge, or twice in one answer", q, ip)
				}
				inAnswer[ip] = true
				counts[z]++
				seen[ip] = true
			}
			checkZones(t, q, counts)
			if queries == 0 {
				t.Logf("one TCP A answer: %d records, %d bytes", len(r.Answer), r.Size)
			}
		}
		if len(seen) < hugeEndpoints {
			t.Errorf("after %d TCP A queries, %d of %d endpoints seen, want all", queries, len(seen), hugeEndpoints)
		}
	})

	// kdig parses the big TCP answer too.
	t.Run("kdig-tcp-srv", func(t *testing.T) {
		q := dnsQuery{name: srvName, qtype: "SRV", tcp: true}
		r := askDNS(t, "kdig", addr, q)
		checkTCP(t, q, r)
		if len(r.Additional) != len(r.Answer) {
			t.Errorf("%s: %d glue records for %d SRV records", q, len(r.Additional), len(r.Answer))
		}
	})
}

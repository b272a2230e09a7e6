package resolver

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
)

const soa = "spillway.internal. 5 IN SOA ns.spillway.internal. hostmaster.spillway.internal. %d 3600 600 86400 5"

// TestAnswers: DNS behaviour as data, one case per line of the contract in
// doc.go.
func TestAnswers(t *testing.T) {
	store, s := newTestServer(t)
	mustApply(t, store,
		upsert("web", endpointSpec{id: "a", addr: "10.0.0.1", zone: "z1", weight: 100}),
		upsert("web", endpointSpec{id: "b", addr: "10.0.0.2", zone: "z2", weight: 50}),
		upsert("web", endpointSpec{id: "c", addr: "2001:db8::3", zone: "z3", weight: 100}),
		upsert("web", endpointSpec{id: "d", addr: "10.0.0.4", zone: "z1", health: registry.Draining}),
		upsert("web", endpointSpec{id: "e", addr: "10.0.0.5", zone: "z1", health: registry.Unhealthy}),
		upsert("web", endpointSpec{id: "f", addr: "10.0.0.6", zone: "z2", ports: []registry.Port{{Name: "dns", Number: 53, Protocol: registry.UDP}}}),
		upsert("api.prod", endpointSpec{id: "x", addr: "10.1.0.1", zone: "z1"}),
		registry.Declare("empty"),
	)
	v := store.Snapshot().Version()
	neg := fmt.Sprintf(soa, v)
	tests := []struct {
		name   string
		qname  string
		qtype  uint16
		rcode  int
		answer []string
		ns     []string
		extra  []string
	}{
		{name: "srv_with_glue", qname: "_grpc._tcp.web.spillway.internal.", qtype: dns.TypeSRV, answer: zone(
			"_grpc._tcp.web.spillway.internal. 5 IN SRV 0 65535 8080 a.web.spillway.internal.",
			"_grpc._tcp.web.spillway.internal. 5 IN SRV 0 32768 8080 b.web.spillway.internal.",
			"_grpc._tcp.web.spillway.internal. 5 IN SRV 0 65535 8080 c.web.spillway.internal.",
		), extra: zone(
			"a.web.spillway.internal. 5 IN A 10.0.0.1",
			"b.web.spillway.internal. 5 IN A 10.0.0.2",
			"c.web.spillway.internal. 5 IN AAAA 2001:db8::3",
		)},
		{name: "srv_udp_port", qname: "_dns._udp.web.spillway.internal.", qtype: dns.TypeSRV, answer: zone(
			"_dns._udp.web.spillway.internal. 5 IN SRV 0 65535 53 f.web.spillway.internal.",
		), extra: zone("f.web.spillway.internal. 5 IN A 10.0.0.6")},
		{name: "srv_port_not_there", qname: "_http._tcp.web.spillway.internal.", qtype: dns.TypeSRV, ns: zone(neg)},
		{name: "srv_wrong_proto_label", qname: "_grpc._sctp.web.spillway.internal.", qtype: dns.TypeSRV, rcode: dns.RcodeNameError, ns: zone(neg)},
		{name: "srv_unknown_service", qname: "_grpc._tcp.nope.spillway.internal.", qtype: dns.TypeSRV, rcode: dns.RcodeNameError, ns: zone(neg)},
		{name: "srv_known_empty_service", qname: "_grpc._tcp.empty.spillway.internal.", qtype: dns.TypeSRV, ns: zone(neg)},
		{name: "srv_name_a_query", qname: "_grpc._tcp.web.spillway.internal.", qtype: dns.TypeA, ns: zone(neg)},
		{name: "ent_tcp", qname: "_tcp.web.spillway.internal.", qtype: dns.TypeSRV, ns: zone(neg)},
		{name: "a_healthy_only", qname: "web.spillway.internal.", qtype: dns.TypeA, answer: zone(
			"web.spillway.internal. 5 IN A 10.0.0.1",
			"web.spillway.internal. 5 IN A 10.0.0.2",
			"web.spillway.internal. 5 IN A 10.0.0.6",
		)},
		{name: "aaaa", qname: "web.spillway.internal.", qtype: dns.TypeAAAA, answer: zone("web.spillway.internal. 5 IN AAAA 2001:db8::3")},
		{name: "nodata_txt_on_service", qname: "web.spillway.internal.", qtype: dns.TypeTXT, ns: zone(neg)},
		{name: "nodata_known_empty", qname: "empty.spillway.internal.", qtype: dns.TypeA, ns: zone(neg)},
		{name: "endpoint_host", qname: "b.web.spillway.internal.", qtype: dns.TypeA, answer: zone("b.web.spillway.internal. 5 IN A 10.0.0.2")},
		{name: "endpoint_host_draining_resolves", qname: "d.web.spillway.internal.", qtype: dns.TypeA, answer: zone("d.web.spillway.internal. 5 IN A 10.0.0.4")},
		{name: "endpoint_host_other_family", qname: "c.web.spillway.internal.", qtype: dns.TypeA, ns: zone(neg)},
		{name: "dotted_service", qname: "api.prod.spillway.internal.", qtype: dns.TypeA, answer: zone("api.prod.spillway.internal. 5 IN A 10.1.0.1")},
		{name: "ent_namespace", qname: "prod.spillway.internal.", qtype: dns.TypeA, ns: zone(neg)},
		{name: "nxdomain", qname: "nope.spillway.internal.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: zone(neg)},
		{name: "nxdomain_deep", qname: "a.b.c.nope.spillway.internal.", qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: zone(neg)},
		{name: "txt_panic_flag_default", qname: "_xds.spillway.internal.", qtype: dns.TypeTXT, answer: zone(`_xds.spillway.internal. 5 IN TXT "xds=on"`)},
		{name: "panic_flag_a_is_nodata", qname: "_xds.spillway.internal.", qtype: dns.TypeA, ns: zone(neg)},
		{name: "apex_soa", qname: "spillway.internal.", qtype: dns.TypeSOA, answer: zone(fmt.Sprintf("spillway.internal. 60 IN SOA ns.spillway.internal. hostmaster.spillway.internal. %d 3600 600 86400 5", v))},
		{name: "apex_ns", qname: "spillway.internal.", qtype: dns.TypeNS, answer: zone("spillway.internal. 60 IN NS ns.spillway.internal."),
			extra: zone("ns.spillway.internal. 60 IN A 127.0.0.1")},
		{name: "apex_a_nodata", qname: "spillway.internal.", qtype: dns.TypeA, ns: zone(neg)},
		{name: "ns_host", qname: "ns.spillway.internal.", qtype: dns.TypeA, answer: zone("ns.spillway.internal. 5 IN A 127.0.0.1")},
		{name: "any_minimal", qname: "web.spillway.internal.", qtype: dns.TypeANY, answer: zone(`web.spillway.internal. 5 IN HINFO "RFC8482" ""`)},
		{name: "refused_outside", qname: "example.com.", qtype: dns.TypeA, rcode: dns.RcodeRefused},
		{name: "refused_suffix_not_label", qname: "xspillway.internal.", qtype: dns.TypeA, rcode: dns.RcodeRefused},
		{name: "escaped_name_in_zone", qname: `we\000b.spillway.internal.`, qtype: dns.TypeA, rcode: dns.RcodeNameError, ns: zone(neg)},
		{name: "escaped_name_outside", qname: `ex\.ample.com.`, qtype: dns.TypeA, rcode: dns.RcodeRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, tcp := range []bool{false, true} {
				q := newQuery(tt.qname, tt.qtype)
				q.SetEdns0(4096, false)
				m, _ := query(t, s, q, tcp)
				if m.Rcode != tt.rcode {
					t.Errorf("tcp=%v rcode = %s, want %s", tcp, dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.rcode])
				}
				if want := tt.rcode != dns.RcodeRefused; m.Authoritative != want {
					t.Errorf("tcp=%v AA = %v, want %v", tcp, m.Authoritative, want)
				}
				if m.Truncated {
					t.Errorf("tcp=%v TC set", tcp)
				}
				if diff := cmp.Diff(tt.answer, rrStrings(m.Answer)); diff != "" {
					t.Errorf("tcp=%v answer (-want +got):\n%s", tcp, diff)
				}
				if diff := cmp.Diff(tt.ns, rrStrings(m.Ns)); diff != "" {
					t.Errorf("tcp=%v authority (-want +got):\n%s", tcp, diff)
				}
				if diff := cmp.Diff(tt.extra, rrStrings(m.Extra)); diff != "" {
					t.Errorf("tcp=%v additional (-want +got):\n%s", tcp, diff)
				}
				if opt := m.IsEdns0(); opt == nil || opt.UDPSize() != DefaultUDPSizeCap {
					t.Errorf("tcp=%v OPT = %v, want one with udp size %d", tcp, opt, DefaultUDPSizeCap)
				}
			}
		})
	}
}

// TestProtocol covers what is about the message, not the name.
func TestProtocol(t *testing.T) {
	store, s := newTestServer(t)
	for i := range 30 {
		mustApply(t, store, upsert("big", endpointSpec{id: fmt.Sprintf("endpoint-%02d", i), addr: fmt.Sprintf("10.2.0.%d", i+1), zone: "z1"}))
	}
	mustApply(t, store, upsert("web", endpointSpec{id: "a", addr: "10.0.0.1", zone: "z1"}))

	t.Run("case_echoed", func(t *testing.T) {
		m, _ := query(t, s, newQuery("_GrPc._TcP.WeB.SpIlLwAy.InTeRnAl.", dns.TypeSRV), false)
		if m.Question[0].Name != "_GrPc._TcP.WeB.SpIlLwAy.InTeRnAl." || m.Answer[0].Header().Name != "_GrPc._TcP.WeB.SpIlLwAy.InTeRnAl." {
			t.Errorf("question %q, owner %q: want the query's case", m.Question[0].Name, m.Answer[0].Header().Name)
		}
	})
	t.Run("rd_echoed_ra_clear", func(t *testing.T) {
		q := newQuery("web.spillway.internal.", dns.TypeA)
		q.RecursionDesired = true
		m, _ := query(t, s, q, false)
		if !m.RecursionDesired || m.RecursionAvailable || !m.Response {
			t.Errorf("RD %v RA %v QR %v, want RD echoed, RA clear, QR set", m.RecursionDesired, m.RecursionAvailable, m.Response)
		}
	})
	sizes := []struct {
		name    string
		edns    int // 0: no EDNS
		tcp     bool
		wantTC  bool
		wantOPT int
	}{
		{"no_edns_512", 0, false, true, 0},
		{"edns_512", 512, false, true, DefaultUDPSizeCap},
		{"edns_1232", 1232, false, true, DefaultUDPSizeCap},
		{"edns_4096_capped", 4096, false, true, DefaultUDPSizeCap},
		{"tcp", 0, true, false, 0},
	}
	for _, tt := range sizes {
		t.Run("big_"+tt.name, func(t *testing.T) {
			q := newQuery("_grpc._tcp.big.spillway.internal.", dns.TypeSRV)
			if tt.edns > 0 {
				q.SetEdns0(uint16(tt.edns), false)
			}
			m, n := query(t, s, q, tt.tcp)
			if m.Truncated != tt.wantTC {
				t.Errorf("TC = %v, want %v (size %d)", m.Truncated, tt.wantTC, n)
			}
			if tt.wantTC && (len(m.Answer) != 0 || len(m.Ns) != 0 || len(rrStrings(m.Extra)) != 0) {
				t.Errorf("truncated reply carries records: %d answer, %d authority, %d additional", len(m.Answer), len(m.Ns), len(m.Extra))
			}
			if !tt.wantTC && len(m.Answer) != 30 {
				t.Errorf("answer has %d SRV, want 30", len(m.Answer))
			}
			opt := m.IsEdns0()
			switch {
			case tt.wantOPT == 0 && opt != nil:
				t.Errorf("OPT in reply to a query without EDNS")
			case tt.wantOPT != 0 && (opt == nil || int(opt.UDPSize()) != tt.wantOPT):
				t.Errorf("OPT = %v, want udp size %d", opt, tt.wantOPT)
			}
		})
	}
	t.Run("small_fits_512", func(t *testing.T) {
		m, n := query(t, s, newQuery("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), false)
		if m.Truncated || len(m.Answer) != 1 || n > 512 {
			t.Errorf("TC %v, %d answers, %d bytes; want a whole answer under 512", m.Truncated, len(m.Answer), n)
		}
	})
	t.Run("edns_version_1_badvers", func(t *testing.T) {
		q := newQuery("web.spillway.internal.", dns.TypeA)
		q.SetEdns0(1232, true)
		q.IsEdns0().SetVersion(1)
		m, _ := query(t, s, q, false)
		if m.Rcode != dns.RcodeBadVers || m.IsEdns0() == nil || !m.IsEdns0().Do() {
			t.Errorf("rcode %s, OPT %v; want BADVERS with OPT, DO echoed", dns.RcodeToString[m.Rcode], m.IsEdns0())
		}
	})
	t.Run("class_chaos_refused", func(t *testing.T) {
		q := newQuery("web.spillway.internal.", dns.TypeTXT)
		q.Question[0].Qclass = dns.ClassCHAOS
		if m, _ := query(t, s, q, false); m.Rcode != dns.RcodeRefused {
			t.Errorf("rcode %s, want REFUSED", dns.RcodeToString[m.Rcode])
		}
	})
	t.Run("two_questions_formerr", func(t *testing.T) {
		q := newQuery("web.spillway.internal.", dns.TypeA)
		q.Question = append(q.Question, q.Question[0])
		if m, _ := query(t, s, q, false); m.Rcode != dns.RcodeFormatError {
			t.Errorf("rcode %s, want FORMERR", dns.RcodeToString[m.Rcode])
		}
	})
	t.Run("opcode_update_notimp", func(t *testing.T) {
		q := newQuery("web.spillway.internal.", dns.TypeA)
		q.Opcode = dns.OpcodeUpdate
		if m, _ := query(t, s, q, false); m.Rcode != dns.RcodeNotImplemented {
			t.Errorf("rcode %s, want NOTIMP", dns.RcodeToString[m.Rcode])
		}
	})
	t.Run("srv_weights_scaled", func(t *testing.T) {
		mustApply(t, store,
			upsert("w", endpointSpec{id: "one", addr: "10.3.0.1", zone: "z", weight: 1}),
			upsert("w", endpointSpec{id: "four", addr: "10.3.0.2", zone: "z", weight: 4}))
		m, _ := query(t, s, newQuery("_grpc._tcp.w.spillway.internal.", dns.TypeSRV), true)
		got := map[string]uint16{}
		for _, rr := range m.Answer {
			srv := rr.(*dns.SRV)
			got[srv.Target] = srv.Weight
			if srv.Priority != 0 {
				t.Errorf("priority %d, want 0", srv.Priority)
			}
		}
		if got["one.w.spillway.internal."] != 16384 || got["four.w.spillway.internal."] != 65535 {
			t.Errorf("SRV weights %v, want 1:4 as 16384:65535", got)
		}
	})
}

// TestServfailBeforeSync: until the store is synced, names in the zone get
// SERVFAIL, never NXDOMAIN; after it, the normal answers.
func TestServfailBeforeSync(t *testing.T) {
	store := registry.NewStore()
	s, err := New(Config{Store: store, Domain: "spillway.internal."})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web.spillway.internal.", "nope.spillway.internal.", "_grpc._tcp.web.spillway.internal."} {
		if m, _ := query(t, s, newQuery(name, dns.TypeA), false); m.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s before sync: %s, want SERVFAIL", name, dns.RcodeToString[m.Rcode])
		}
	}
	if m, _ := query(t, s, newQuery("example.com.", dns.TypeA), false); m.Rcode != dns.RcodeRefused {
		t.Errorf("outside the zone before sync: %s, want REFUSED", dns.RcodeToString[m.Rcode])
	}
	mustApply(t, store, upsert("web", endpointSpec{id: "a", addr: "10.0.0.1"}))
	store.MarkSynced()
	if m, _ := query(t, s, newQuery("web.spillway.internal.", dns.TypeA), false); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("after sync: %s with %d answers, want NOERROR with 1", dns.RcodeToString[m.Rcode], len(m.Answer))
	}
	if m, _ := query(t, s, newQuery("nope.spillway.internal.", dns.TypeA), false); m.Rcode != dns.RcodeNameError {
		t.Errorf("unknown after sync: %s, want NXDOMAIN", dns.RcodeToString[m.Rcode])
	}
}

// TestReadYourWrites: once Apply returns, the next query reflects the write
// (no sleeps: the answer cache is checked against the live snapshot).
func TestReadYourWrites(t *testing.T) {
	store, s := newTestServer(t)
	for i := range 200 {
		id := fmt.Sprintf("e%d", i)
		mustApply(t, store, upsert("web", endpointSpec{id: id, addr: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), zone: "z"}))
		m, _ := query(t, s, newQuery("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), true)
		if len(m.Answer) != i+1 {
			t.Fatalf("after upsert %d: %d SRV records, want %d", i, len(m.Answer), i+1)
		}
		if i%3 == 0 {
			mustApply(t, store, registry.Upsert("web", &registry.Endpoint{ID: id, Address: netip.MustParseAddr(fmt.Sprintf("10.0.%d.%d", i/200, i%200+1)),
				Ports: []registry.Port{{Name: "grpc", Number: 8080}}, Health: registry.Draining, Source: registry.SourceStatic}))
			m, _ := query(t, s, newQuery("web.spillway.internal.", dns.TypeA), true)
			for _, rr := range m.Answer {
				if rr.(*dns.A).A.String() == fmt.Sprintf("10.0.%d.%d", i/200, i%200+1) {
					t.Fatalf("draining endpoint %s still answered right after the write", id)
				}
			}
			mustApply(t, store, upsert("web", endpointSpec{id: id, addr: fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), zone: "z"}))
		}
	}
	for _, v := range []string{"off", "on", "off"} {
		mustApply(t, store, registry.SetFlag(registry.FlagXDS, v))
		m, _ := query(t, s, newQuery("_xds.spillway.internal.", dns.TypeTXT), false)
		if got := m.Answer[0].(*dns.TXT).Txt[0]; got != "xds="+v {
			t.Fatalf("TXT right after setting the flag to %s: %q", v, got)
		}
	}
	mustApply(t, store, upsert("new", endpointSpec{id: "n", addr: "10.9.9.9"}))
	if m, _ := query(t, s, newQuery("new.spillway.internal.", dns.TypeA), false); m.Rcode != dns.RcodeSuccess {
		t.Errorf("new service right after its first write: %s", dns.RcodeToString[m.Rcode])
	}
}

func TestConfigValidate(t *testing.T) {
	store := registry.NewStore()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no_store", Config{Domain: "a."}, "Store"},
		{"no_domain", Config{Store: store}, "Domain"},
		{"bad_domain", Config{Store: store, Domain: "bad_domain.internal"}, "Domain"},
		{"udp_cap_small", Config{Store: store, Domain: "a.", UDPSizeCap: 100}, "UDPSizeCap"},
		{"ttl_fraction", Config{Store: store, Domain: "a.", TTL: TTLs{SRV: 1500 * 1e6}}, "TTL.SRV"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestCacheSlotOnePerName: goroutines asking for the slots of the same
// names at once all get one slot per name.
func TestCacheSlotOnePerName(t *testing.T) {
	for _, zones := range []int{0, 3} {
		t.Run(fmt.Sprintf("zones=%d", zones), func(t *testing.T) {
			c := &cache{zones: zones}
			const names, workers = 200, 8
			got := make([][]*slot, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range names {
						got[w] = append(got[w], c.slot(fmt.Sprintf("svc-%d", (i+w*7)%names)))
					}
				})
			}
			wg.Wait()
			for w := range workers {
				for i, sl := range got[w] {
					want := c.slot(fmt.Sprintf("svc-%d", (i+w*7)%names))
					if sl != want {
						t.Fatalf("worker %d, name %d: slot %p, want %p", w, i, sl, want)
					}
					if len(sl.zoned) != zones {
						t.Fatalf("slot has %d zone variants, want %d", len(sl.zoned), zones)
					}
				}
			}
		})
	}
}

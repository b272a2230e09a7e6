package resolver

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/registry"
)

// TestGlueDropped: over UDP, an SRV answer whose records fit but whose
// glue does not is sent whole, with as much glue as fits and no TC (RFC
// 2181 9). An answer whose SRV records themselves do not fit is still TC
// with no records.
func TestGlueDropped(t *testing.T) {
	store, s := newTestServer(t)
	// 24 endpoints: 24 SRV records (45 bytes each) fit in 1232 bytes, 24
	// SRV + 24 A records (61 bytes each) do not.
	addrOf := map[string]string{}
	for i := range 24 {
		id, addr := fmt.Sprintf("e%02d", i), fmt.Sprintf("10.4.0.%d", i+1)
		mustApply(t, store, upsert("g", endpointSpec{id: id, addr: addr, zone: "z1"}))
		addrOf[id+".g.spillway.internal."] = addr
	}
	const qname = "_grpc._tcp.g.spillway.internal."
	full, fullSize := query(t, s, newQuery(qname, dns.TypeSRV), true)
	if len(full.Answer) != 24 || len(full.Extra) != 24 || fullSize <= DefaultUDPSizeCap {
		t.Fatalf("premise: over TCP %d SRV + %d glue in %d bytes, want 24 + 24 in more than %d", len(full.Answer), len(full.Extra), fullSize, DefaultUDPSizeCap)
	}

	tests := []struct {
		name   string
		edns   int // 0: no OPT
		limit  int
		wantTC bool
	}{
		{"edns_1232", 1232, 1232, false},
		{"edns_4096_capped", 4096, 1232, false},
		{"edns_1150", 1150, 1150, false},
		{"edns_1100_no_glue_fits", 1100, 1100, false},
		{"no_edns_512_srv_do_not_fit", 0, 512, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(s.metrics.glueCut)
			q := newQuery(qname, dns.TypeSRV)
			if tt.edns > 0 {
				q.SetEdns0(uint16(tt.edns), false)
			}
			m, n := query(t, s, q, false)
			if m.Truncated != tt.wantTC {
				t.Fatalf("TC = %v, want %v (%d bytes)", m.Truncated, tt.wantTC, n)
			}
			if n > tt.limit {
				t.Errorf("reply is %d bytes, over the %d limit", n, tt.limit)
			}
			if tt.wantTC {
				if len(m.Answer)+len(m.Ns)+len(rrStrings(m.Extra)) != 0 {
					t.Errorf("TC reply carries records")
				}
				return
			}
			if len(m.Answer) != 24 {
				t.Errorf("%d SRV records, want all 24", len(m.Answer))
			}
			glue := rrStrings(m.Extra)
			if len(glue) >= 24 || (tt.edns >= 1232 && len(glue) == 0) {
				t.Errorf("%d glue records, want fewer than 24 (and some at 1232)", len(glue))
			}
			// As much as fits: one more A record (16 bytes) would not.
			if n+16 <= tt.limit {
				t.Errorf("reply is %d bytes with %d glue records: another would fit in %d", n, len(glue), tt.limit)
			}
			seen := map[string]bool{}
			for _, rr := range m.Extra {
				if rr.Header().Rrtype == dns.TypeOPT {
					continue
				}
				a, ok := rr.(*dns.A)
				if !ok || addrOf[a.Hdr.Name] != a.A.String() || seen[a.Hdr.Name] {
					t.Errorf("glue record %s is not the one A of an SRV target", rr)
					continue
				}
				seen[a.Hdr.Name] = true
			}
			if opt := m.IsEdns0(); opt == nil {
				t.Errorf("no OPT record in the reply")
			}
			if got := testutil.ToFloat64(s.metrics.glueCut) - before; got != 1 {
				t.Errorf("glue-dropped counter grew by %v, want 1", got)
			}
		})
	}
	t.Run("tcp_keeps_all_glue", func(t *testing.T) {
		if len(full.Extra) != 24 || full.Truncated {
			t.Errorf("TCP: %d glue, TC %v; want all 24, no TC", len(full.Extra), full.Truncated)
		}
	})
}

// TestOPTOnEveryReply: every reply to a query with an OPT record carries
// one, whatever the rcode; a reply to a query without one carries none.
func TestOPTOnEveryReply(t *testing.T) {
	_, s := newTestServer(t)
	_, zs := newZoneServer(t, nil)
	unsynced, err := New(Config{Store: registry.NewStore(), Domain: "spillway.internal."})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(edit func(q *dns.Msg)) func() *dns.Msg {
		return func() *dns.Msg {
			q := newQuery("web.spillway.internal.", dns.TypeA)
			edit(q)
			return q
		}
	}
	tests := []struct {
		name  string
		s     *Server
		q     func() *dns.Msg
		rcode int
		noOPT bool // the case cannot be sent without OPT
	}{
		{"nxdomain", s, mk(func(*dns.Msg) {}), dns.RcodeNameError, false},
		{"formerr_two_questions", s, mk(func(q *dns.Msg) { q.Question = append(q.Question, q.Question[0]) }), dns.RcodeFormatError, false},
		{"formerr_no_question", s, mk(func(q *dns.Msg) { q.Question = nil }), dns.RcodeFormatError, false},
		{"formerr_two_answers", s, mk(func(q *dns.Msg) {
			rr, _ := dns.NewRR("web.spillway.internal. 5 IN A 10.0.0.1")
			q.Answer = []dns.RR{rr, rr}
		}), dns.RcodeFormatError, false},
		{"notimp_update", s, mk(func(q *dns.Msg) { q.Opcode = dns.OpcodeUpdate }), dns.RcodeNotImplemented, false},
		{"notimp_notify", s, mk(func(q *dns.Msg) { q.Opcode = dns.OpcodeNotify }), dns.RcodeNotImplemented, false},
		{"refused_outside", s, mk(func(q *dns.Msg) { q.Question[0].Name = "example.com." }), dns.RcodeRefused, false},
		{"refused_chaos", s, mk(func(q *dns.Msg) { q.Question[0].Qclass = dns.ClassCHAOS }), dns.RcodeRefused, false},
		{"nxdomain_escaped", s, mk(func(q *dns.Msg) { q.Question[0].Name = `we\000b.spillway.internal.` }), dns.RcodeNameError, false},
		{"servfail_before_sync", unsynced, mk(func(*dns.Msg) {}), dns.RcodeServerFailure, false},
		{"formerr_two_opts", s, mk(func(q *dns.Msg) {
			q.SetEdns0(1232, true)
			second := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: 1232}}
			second.SetDo()
			q.Extra = append(q.Extra, second)
		}), dns.RcodeFormatError, true},
		{"formerr_ecs_host_bits", zs, mk(func(q *dns.Msg) { q.SetEdns0(1232, true); withECS(q, "10.2.3.4/16") }), dns.RcodeFormatError, true},
		{"badvers", s, mk(func(q *dns.Msg) { q.SetEdns0(1232, true); q.IsEdns0().SetVersion(1) }), dns.RcodeBadVers, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, edns := range []bool{true, false} {
				if !edns && tt.noOPT {
					continue
				}
				for _, tcp := range []bool{false, true} {
					q := tt.q()
					if edns && q.IsEdns0() == nil {
						q.SetEdns0(1232, true)
					}
					m, _ := query(t, tt.s, q, tcp)
					if m.Rcode != tt.rcode {
						t.Errorf("edns=%v tcp=%v: rcode %s, want %s", edns, tcp, dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.rcode])
					}
					opt := m.IsEdns0()
					switch {
					case edns && opt == nil:
						t.Errorf("edns=%v tcp=%v: %s reply without OPT", edns, tcp, dns.RcodeToString[m.Rcode])
					case edns && (opt.UDPSize() != DefaultUDPSizeCap || opt.Version() != 0 || !opt.Do()):
						t.Errorf("edns=%v tcp=%v: OPT %v, want version 0, udp %d, DO echoed", edns, tcp, opt, DefaultUDPSizeCap)
					case !edns && opt != nil:
						t.Errorf("edns=%v tcp=%v: OPT in reply to a query without one", edns, tcp)
					}
					if edns && tt.rcode == dns.RcodeFormatError {
						for _, o := range opt.Option {
							if o.Option() == dns.EDNS0SUBNET {
								t.Errorf("FORMERR echoes the client subnet %v", o)
							}
						}
					}
					n := 0
					for _, rr := range m.Extra {
						if rr.Header().Rrtype == dns.TypeOPT {
							n++
						}
					}
					if n > 1 {
						t.Errorf("edns=%v tcp=%v: %d OPT records in the reply", edns, tcp, n)
					}
				}
			}
		})
	}
}

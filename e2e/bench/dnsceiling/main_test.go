package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/static"
)

// recorder is a dns.ResponseWriter that keeps the message written.
type recorder struct {
	remote net.Addr
	msg    *dns.Msg
}

func (r *recorder) LocalAddr() net.Addr         { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (r *recorder) RemoteAddr() net.Addr        { return r.remote }
func (r *recorder) WriteMsg(m *dns.Msg) error   { r.msg = m; return nil }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) Close() error                { return nil }
func (r *recorder) TsigStatus() error           { return nil }
func (r *recorder) TsigTimersOnly(bool)         {}
func (r *recorder) Hijack()                     {}
func (r *recorder) Network() string             { return r.remote.Network() }

// testZone builds the ceiling's zone from services svc-N with N healthy
// endpoints each, for every N in sizes.
func testZone(t *testing.T, sizes ...int) *zone {
	t.Helper()
	var b strings.Builder
	b.WriteString("services:\n")
	for _, n := range sizes {
		fmt.Fprintf(&b, "  - name: svc-%d\n    endpoints:\n", n)
		for j := range n {
			fmt.Fprintf(&b, "      - {address: 10.%d.%d.%d, ports: [\"grpc=8080/tcp\"], region: r1, zone: r1-a, health: healthy, weight: 100}\n", n, j/250, j%250+1)
		}
	}
	path := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	store := registry.NewStore()
	src, err := static.New(static.Config{Path: path, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	return build(store.Snapshot(), "spillway.internal.")
}

// TestServeCompressesOnlyWhenNeeded checks the reply the ceiling writes
// for SRV queries of growing answers: uncompressed while it fits, as a
// plain miekg/dns server sends it; compressed when only that makes it fit;
// glue left out without TC when only the glue does not fit (as spillway
// does); TC and no records when the answer does not fit.
func TestServeCompressesOnlyWhenNeeded(t *testing.T) {
	z := testZone(t, 2, 12, 17, 30)
	udp := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}
	tcp := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}
	tests := []struct {
		name         string
		service      int
		remote       net.Addr
		wantCompress bool
		wantTC       bool
		wantAnswer   int
		// wantGlue is the number of A records in the additional section;
		// -1 means some but not all.
		wantGlue int
	}{
		{"small_udp_uncompressed", 2, udp, false, false, 2, 2},
		{"medium_udp_compressed", 12, udp, true, false, 12, 12},
		{"glue_dropped_no_tc", 17, udp, true, false, 17, -1},
		{"too_big_udp_tc", 30, udp, true, true, 0, 0},
		{"too_big_for_udp_fits_tcp_uncompressed", 30, tcp, false, false, 30, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := new(dns.Msg)
			q.SetQuestion(fmt.Sprintf("_grpc._tcp.svc-%d.spillway.internal.", tt.service), dns.TypeSRV)
			q.SetEdns0(1232, false)
			w := &recorder{remote: tt.remote}
			z.serve(w, q)
			m := w.msg
			if m == nil {
				t.Fatal("no reply written")
			}
			glue := 0
			for _, rr := range m.Extra {
				if rr.Header().Rrtype == dns.TypeA {
					glue++
				}
			}
			if m.Compress != tt.wantCompress {
				t.Errorf("Compress = %v, want %v (reply of %d records)", m.Compress, tt.wantCompress, len(m.Answer)+len(m.Extra))
			}
			if m.Truncated != tt.wantTC {
				t.Errorf("TC = %v, want %v", m.Truncated, tt.wantTC)
			}
			if len(m.Answer) != tt.wantAnswer {
				t.Errorf("answer records = %d, want %d", len(m.Answer), tt.wantAnswer)
			}
			switch {
			case tt.wantGlue == -1 && (glue == 0 || glue >= tt.wantAnswer):
				t.Errorf("glue records = %d, want some but not all of %d", glue, tt.wantAnswer)
			case tt.wantGlue >= 0 && glue != tt.wantGlue:
				t.Errorf("glue records = %d, want %d", glue, tt.wantGlue)
			}
			if m.IsEdns0() == nil {
				t.Error("no OPT in the reply to an EDNS query")
			}
			if _, isUDP := tt.remote.(*net.UDPAddr); isUDP {
				if n := m.Len(); n > 1232 {
					t.Errorf("UDP reply of %d bytes, want at most 1232", n)
				}
			}
		})
	}
}

// TestWriteZone checks that the zone file parses back to the records the
// ceiling serves, with the SOA first and an NS.
func TestWriteZone(t *testing.T) {
	z := testZone(t, 3)
	path := filepath.Join(t.TempDir(), "zone.db")
	if err := z.writeZone(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zp := dns.NewZoneParser(f, "", path)
	counts := map[uint16]int{}
	first := uint16(0)
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if first == 0 {
			first = rr.Header().Rrtype
		}
		counts[rr.Header().Rrtype]++
	}
	if err := zp.Err(); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if first != dns.TypeSOA {
		t.Errorf("first record type %s, want SOA", dns.TypeToString[first])
	}
	// 3 SRV; A: 3 for the service name, 3 endpoint names, 1 for ns.
	want := map[uint16]int{dns.TypeSOA: 1, dns.TypeNS: 1, dns.TypeSRV: 3, dns.TypeA: 7}
	for typ, n := range want {
		if counts[typ] != n {
			t.Errorf("%s records = %d, want %d", dns.TypeToString[typ], counts[typ], n)
		}
	}
}

package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
)

// recorder is a dns.ResponseWriter that keeps what was written.
type recorder struct {
	tcp    bool
	remote net.Addr // the querier; nil means 127.0.0.1:53
	out    []byte
}

var (
	udpAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
	tcpAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
)

func (r *recorder) LocalAddr() net.Addr {
	if r.tcp {
		return tcpAddr
	}
	return udpAddr
}
func (r *recorder) RemoteAddr() net.Addr {
	if r.remote != nil {
		return r.remote
	}
	return udpAddr
}
func (r *recorder) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = r.Write(b)
	return err
}
func (r *recorder) Write(b []byte) (int, error) {
	r.out = append(r.out[:0], b...)
	return len(b), nil
}
func (r *recorder) Close() error        { return nil }
func (r *recorder) TsigStatus() error   { return nil }
func (r *recorder) TsigTimersOnly(bool) {}
func (r *recorder) Hijack()             {}

var _ dns.ResponseWriter = (*recorder)(nil)

// newTestServer returns a synced store and a server for spillway.internal.
func newTestServer(t testing.TB) (*registry.Store, *Server) {
	t.Helper()
	store := registry.NewStore()
	store.MarkSynced()
	s, err := New(Config{Store: store, Domain: "spillway.internal", NSAddr: netip.MustParseAddr("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	return store, s
}

type endpointSpec struct {
	id, addr, zone string
	health         registry.Health
	weight         uint32
	ports          []registry.Port
}

func mustApply(t testing.TB, store *registry.Store, ops ...registry.Op) {
	t.Helper()
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
}

func upsert(service string, e endpointSpec) registry.Op {
	ports := e.ports
	if ports == nil {
		ports = []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}}
	}
	return registry.Upsert(service, &registry.Endpoint{
		ID: e.id, Address: netip.MustParseAddr(e.addr), Ports: ports,
		Locality: registry.Locality{Zone: e.zone}, Health: e.health, Weight: e.weight, Source: registry.SourceStatic,
	})
}

// query runs one query through ServeDNS and returns the parsed reply and
// its wire size.
func query(t testing.TB, s *Server, q *dns.Msg, tcp bool) (*dns.Msg, int) {
	t.Helper()
	return queryFrom(t, s, q, tcp, nil)
}

// queryFrom is query from the querier address remote (nil: 127.0.0.1).
func queryFrom(t testing.TB, s *Server, q *dns.Msg, tcp bool, remote net.Addr) (*dns.Msg, int) {
	t.Helper()
	w := &recorder{tcp: tcp, remote: remote}
	s.ServeDNS(w, q)
	if len(w.out) == 0 {
		t.Fatalf("no reply to %v", q.Question)
	}
	m := new(dns.Msg)
	if err := m.Unpack(w.out); err != nil {
		t.Fatalf("reply to %v does not parse: %v", q.Question, err)
	}
	if m.Id != q.Id {
		t.Fatalf("reply id %d, want %d", m.Id, q.Id)
	}
	return m, len(w.out)
}

func newQuery(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 4242
	return m
}

// rrStrings renders RRs as zone-file lines, sorted, for comparison.
func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	slices.Sort(out)
	return out
}

func zone(lines ...string) []string {
	var out []string
	for _, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil {
			panic(fmt.Sprintf("bad test RR %q: %v", l, err))
		}
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	slices.Sort(out)
	return out
}

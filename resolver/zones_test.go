package resolver

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/registry"
)

// fakeWeights is a hand fake of Weights: splits per service and client
// zone; a zone without its own split gets the zoneless one (""), as
// zoneaware.Result.Route does.
type fakeWeights struct {
	mu    sync.Mutex
	plans map[string]map[string][]ZoneWeight
}

func (f *fakeWeights) set(service, clientZone string, split ...ZoneWeight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plans == nil {
		f.plans = map[string]map[string][]ZoneWeight{}
	}
	if f.plans[service] == nil {
		f.plans[service] = map[string][]ZoneWeight{}
	}
	f.plans[service][clientZone] = split
}

func (f *fakeWeights) ZoneWeights(dst []ZoneWeight, service, clientZone string) ([]ZoneWeight, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	routes, ok := f.plans[service]
	if !ok {
		return dst, false
	}
	split, ok := routes[clientZone]
	if !ok {
		split, ok = routes[""]
	}
	return append(dst, split...), ok
}

var _ Weights = (*fakeWeights)(nil)

var testZones = []ZoneSubnet{
	{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Zone: "zone-a"},
	{Prefix: netip.MustParsePrefix("10.1.5.0/24"), Zone: "zone-c"}, // inside zone-a's subnet
	{Prefix: netip.MustParsePrefix("10.2.0.0/16"), Zone: "zone-b"},
	{Prefix: netip.MustParsePrefix("2001:db8:a::/48"), Zone: "zone-a"},
}

// newZoneServer returns a synced store and a server that knows testZones
// and takes its splits from w.
func newZoneServer(t testing.TB, w Weights) (*registry.Store, *Server) {
	t.Helper()
	store := registry.NewStore()
	store.MarkSynced()
	s, err := New(Config{Store: store, Domain: "spillway.internal", Zones: testZones, Weights: w})
	if err != nil {
		t.Fatal(err)
	}
	return store, s
}

func zw(zone string, w uint32) ZoneWeight { return ZoneWeight{Zone: zone, Weight: w} }

// querier is a querier's address as the transport gives it.
func querier(ip string, tcp bool) net.Addr {
	if tcp {
		return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}
	}
	return &net.UDPAddr{IP: net.ParseIP(ip), Port: 40000}
}

// withECS adds an EDNS Client Subnet option for prefix to q ("0": family
// 0, source 0, as dig +subnet=0 sends).
func withECS(q *dns.Msg, prefix string) *dns.Msg {
	if q.IsEdns0() == nil {
		q.SetEdns0(1232, false)
	}
	e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET}
	if prefix == "0" {
		e.Address = net.IPv4zero
	} else {
		p := netip.MustParsePrefix(prefix)
		e.Family, e.SourceNetmask, e.Address = 1, uint8(p.Bits()), net.IP(p.Addr().AsSlice())
		if p.Addr().Is6() {
			e.Family = 2
		}
	}
	opt := q.IsEdns0()
	opt.Option = append(opt.Option, e)
	return q
}

// replySubnet returns the ECS option of a reply, or nil.
func replySubnet(m *dns.Msg) *dns.EDNS0_SUBNET {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_SUBNET); ok {
				return e
			}
		}
	}
	return nil
}

// srvByTarget returns the SRV weight of each target, failing on a
// priority other than 0 or a weight of 0.
func srvByTarget(t testing.TB, m *dns.Msg) map[string]uint16 {
	t.Helper()
	out := map[string]uint16{}
	for _, rr := range m.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			t.Fatalf("answer record %v is not SRV", rr)
		}
		if srv.Priority != 0 || srv.Weight == 0 {
			t.Errorf("SRV %v: want priority 0 and a weight of at least 1", srv)
		}
		out[srv.Target] = srv.Weight
	}
	return out
}

// zoneShares sums SRV weights per zone of their target, as shares of the
// total: what a client picking targets by weight sends to each zone.
func zoneShares(weights map[string]uint16, zoneOf func(target string) string) map[string]float64 {
	out := map[string]float64{}
	var total float64
	for target, w := range weights {
		out[zoneOf(target)] += float64(w)
		total += float64(w)
	}
	for z := range out {
		out[z] /= total
	}
	return out
}

// splitShares is each zone's share of a split.
func splitShares(split []ZoneWeight) map[string]float64 {
	out := map[string]float64{}
	var total float64
	for _, z := range split {
		total += float64(z.Weight)
	}
	for _, z := range split {
		out[z.Zone] = float64(z.Weight) / total
	}
	return out
}

// near reports whether got and want hold the same keys with values within
// tol.
func near(got, want map[string]float64, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || math.Abs(g-w) > tol {
			return false
		}
	}
	return true
}

// TestZoneWeights: a querier whose zone is known, by its source address or
// by its EDNS Client Subnet, gets SRV weights that follow its zone's split;
// one of no known zone gets the endpoint weights; the ECS echo carries the
// scope the answer holds for.
func TestZoneWeights(t *testing.T) {
	plans := &fakeWeights{}
	splits := map[string][]ZoneWeight{
		"":       {zw("zone-a", 400), zw("zone-b", 300), zw("zone-c", 300)},
		"zone-a": {zw("zone-a", 800), zw("zone-b", 150), zw("zone-c", 50)},
		"zone-b": {zw("zone-a", 100), zw("zone-b", 850), zw("zone-c", 50)},
		"zone-c": {zw("zone-a", 300), zw("zone-b", 100), zw("zone-c", 600)},
	}
	for z, split := range splits {
		plans.set("web", z, split...)
	}
	store, s := newZoneServer(t, plans)
	zoneOf := map[string]string{}
	for _, e := range []endpointSpec{
		{id: "a1", addr: "10.0.0.1", zone: "zone-a", weight: 100},
		{id: "a2", addr: "10.0.0.2", zone: "zone-a", weight: 300},
		{id: "b1", addr: "10.0.0.3", zone: "zone-b", weight: 100},
		{id: "c1", addr: "10.0.0.4", zone: "zone-c", weight: 100},
		{id: "c2", addr: "10.0.0.5", zone: "zone-c", weight: 100, health: registry.Unhealthy},
	} {
		mustApply(t, store, upsert("web", e))
		zoneOf[e.id+".web.spillway.internal."] = e.zone
	}
	mustApply(t, store,
		upsert("plain", endpointSpec{id: "p1", addr: "10.0.1.1", zone: "zone-a", weight: 100}),
		upsert("plain", endpointSpec{id: "p2", addr: "10.0.1.2", zone: "zone-b", weight: 300}))
	endpointWeights := map[string]map[string]uint16{
		"web": {
			"a1.web.spillway.internal.": 21845, "a2.web.spillway.internal.": 65535,
			"b1.web.spillway.internal.": 21845, "c1.web.spillway.internal.": 21845,
		},
		"plain": {"p1.plain.spillway.internal.": 21845, "p2.plain.spillway.internal.": 65535},
	}

	const noECS = -1
	tests := []struct {
		name    string
		service string
		from    string // querier address
		tcp     bool
		ecs     string // client subnet sent; "" none
		want    string // client zone whose split the weights follow; "" the endpoint weights
		scope   int    // ECS scope in the reply, or noECS for no option
	}{
		{name: "source_zone_a", from: "10.1.2.3", want: "zone-a", scope: noECS},
		{name: "source_zone_a_tcp", from: "10.1.2.3", tcp: true, want: "zone-a", scope: noECS},
		{name: "source_zone_b", from: "10.2.9.9", want: "zone-b", scope: noECS},
		{name: "source_nested_longest_wins", from: "10.1.5.7", want: "zone-c", scope: noECS},
		{name: "source_ipv6", from: "2001:db8:a::53", want: "zone-a", scope: noECS},
		{name: "source_ipv4_mapped", from: "::ffff:10.2.0.1", want: "zone-b", scope: noECS},
		{name: "source_unknown", from: "192.0.2.1", scope: noECS},
		{name: "source_unknown_tcp", from: "192.0.2.1", tcp: true, scope: noECS},
		{name: "ecs_wins_over_source", from: "10.1.2.3", ecs: "10.2.3.0/24", want: "zone-b", scope: 16},
		{name: "ecs_nested", from: "192.0.2.1", ecs: "10.1.5.0/24", want: "zone-c", scope: 24},
		{name: "ecs_parent_of_nested", from: "192.0.2.1", ecs: "10.1.7.0/24", want: "zone-a", scope: 24},
		{name: "ecs_whole_parent", from: "192.0.2.1", ecs: "10.1.0.0/16", want: "zone-a", scope: 16},
		{name: "ecs_host_prefix", from: "192.0.2.1", ecs: "10.2.3.4/32", want: "zone-b", scope: 16},
		{name: "ecs_too_short_for_a_zone", from: "192.0.2.1", ecs: "10.0.0.0/8", scope: 8},
		{name: "ecs_unknown_source_known", from: "10.2.0.9", ecs: "198.51.100.0/24", want: "zone-b", scope: 24},
		{name: "ecs_source_zero", from: "10.1.2.3", ecs: "0", want: "zone-a", scope: 0},
		{name: "ecs_ipv6", from: "192.0.2.1", ecs: "2001:db8:a:100::/56", want: "zone-a", scope: 48},
		{name: "ecs_tcp", from: "192.0.2.1", tcp: true, ecs: "10.2.3.0/24", want: "zone-b", scope: 16},
		{name: "no_plan_source_known", service: "plain", from: "10.1.2.3", scope: noECS},
		{name: "no_plan_ecs_scope_0", service: "plain", from: "192.0.2.1", ecs: "10.2.3.0/24", scope: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := tt.service
			if svc == "" {
				svc = "web"
			}
			q := newQuery("_grpc._tcp."+svc+".spillway.internal.", dns.TypeSRV)
			if tt.ecs != "" {
				withECS(q, tt.ecs)
			}
			m, _ := queryFrom(t, s, q, tt.tcp, querier(tt.from, tt.tcp))
			if m.Rcode != dns.RcodeSuccess || m.Truncated {
				t.Fatalf("rcode %s TC %v, want NOERROR", dns.RcodeToString[m.Rcode], m.Truncated)
			}
			got := srvByTarget(t, m)
			if tt.want == "" {
				if diff := cmp.Diff(endpointWeights[svc], got); diff != "" {
					t.Errorf("SRV weights, want the endpoint weights (-want +got):\n%s", diff)
				}
			} else {
				shares := zoneShares(got, func(target string) string { return zoneOf[target] })
				if want := splitShares(splits[tt.want]); !near(shares, want, 1e-4) {
					t.Errorf("zone shares %v, want %s's split %v (weights %v)", shares, tt.want, want, got)
				}
				a1, a2 := got["a1.web.spillway.internal."], got["a2.web.spillway.internal."]
				if r := float64(a2) / float64(a1); math.Abs(r-3) > 1e-3 {
					t.Errorf("inside zone-a a2/a1 = %d/%d = %.4f, want 3 (their endpoint weights)", a2, a1, r)
				}
			}
			e := replySubnet(m)
			switch {
			case tt.scope == noECS && e != nil:
				t.Errorf("reply carries ECS %v, the query had none", e)
			case tt.scope != noECS && e == nil:
				t.Errorf("reply carries no ECS, want the query's echoed with scope %d", tt.scope)
			case e != nil:
				sent := replySubnet(q)
				if e.Family != sent.Family || e.SourceNetmask != sent.SourceNetmask || !e.Address.Equal(sent.Address) || int(e.SourceScope) != tt.scope {
					t.Errorf("ECS echoed as %v (family %d), want %v with scope %d", e, e.Family, sent, tt.scope)
				}
			}
		})
	}
	if got := testutil.ToFloat64(s.metrics.zoned[zoneByECS]); got != 7 {
		t.Errorf("zone answers by ECS = %v, want 7", got)
	}
	if got := testutil.ToFloat64(s.metrics.zoned[zoneBySource]); got != 8 {
		t.Errorf("zone answers by source = %v, want 8", got)
	}
}

// TestZoneWeightsFollowChanges: a new split, a changed service, and a
// querier moving between zones are seen by the next query; A and AAAA
// answers do not depend on the zone.
func TestZoneWeightsFollowChanges(t *testing.T) {
	plans := &fakeWeights{}
	store, s := newZoneServer(t, plans)
	mustApply(t, store,
		upsert("web", endpointSpec{id: "a1", addr: "10.0.0.1", zone: "zone-a"}),
		upsert("web", endpointSpec{id: "b1", addr: "10.0.0.2", zone: "zone-b"}))
	ask := func() map[string]uint16 {
		t.Helper()
		m, _ := queryFrom(t, s, newQuery("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), false, querier("10.1.0.1", false))
		return srvByTarget(t, m)
	}
	const a1, b1, c1 = "a1.web.spillway.internal.", "b1.web.spillway.internal.", "c1.web.spillway.internal."
	steps := []struct {
		name   string
		change func()
		want   map[string]uint16
	}{
		{"no_plan", func() {}, map[string]uint16{a1: 65535, b1: 65535}},
		{"plan", func() { plans.set("web", "zone-a", zw("zone-a", 3), zw("zone-b", 1)) }, map[string]uint16{a1: 65535, b1: 21845}},
		{"plan_changed", func() { plans.set("web", "zone-a", zw("zone-a", 1), zw("zone-b", 1)) }, map[string]uint16{a1: 65535, b1: 65535}},
		{"plan_changed_back", func() { plans.set("web", "zone-a", zw("zone-a", 3), zw("zone-b", 1)) }, map[string]uint16{a1: 65535, b1: 21845}},
		{"endpoint_added", func() { mustApply(t, store, upsert("web", endpointSpec{id: "b2", addr: "10.0.0.3", zone: "zone-b"})) },
			map[string]uint16{a1: 65535, b1: 10923, "b2.web.spillway.internal.": 10923}},
		{"zone_without_split_weight", func() { mustApply(t, store, upsert("web", endpointSpec{id: "c1", addr: "10.0.0.4", zone: "zone-c"})) },
			map[string]uint16{a1: 65535, b1: 10923, "b2.web.spillway.internal.": 10923, c1: 1}},
	}
	for _, st := range steps {
		st.change()
		if diff := cmp.Diff(st.want, ask()); diff != "" {
			t.Errorf("%s: SRV weights (-want +got):\n%s", st.name, diff)
		}
	}
	m, _ := queryFrom(t, s, withECS(newQuery("web.spillway.internal.", dns.TypeA), "10.1.0.0/24"), false, nil)
	if len(m.Answer) != 4 {
		t.Errorf("A from zone-a: %d records, want 4", len(m.Answer))
	}
	if e := replySubnet(m); e == nil || e.SourceScope != 0 {
		t.Errorf("A answer ECS %v, want scope 0: it is the same for every zone", e)
	}
}

// TestClientSubnetEcho: every reply with an OPT record echoes the query's
// client subnet (RFC 7871 7.2.1), scope 0 unless the answer is tailored;
// a server without zones ignores the option; an address with bits past its
// source prefix length is FORMERR (RFC 7871 6).
func TestClientSubnetEcho(t *testing.T) {
	plans := &fakeWeights{}
	plans.set("web", "", zw("zone-a", 1))
	store, s := newZoneServer(t, plans)
	mustApply(t, store, upsert("web", endpointSpec{id: "a1", addr: "10.0.0.1", zone: "zone-a"}))
	_, plain := newTestServer(t)
	tests := []struct {
		name  string
		s     *Server
		q     *dns.Msg
		rcode int
		scope int // -1: no ECS in the reply
	}{
		{"a_scope_0", s, withECS(newQuery("web.spillway.internal.", dns.TypeA), "10.2.0.0/24"), dns.RcodeSuccess, 0},
		{"srv_tailored", s, withECS(newQuery("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), "10.2.0.0/24"), dns.RcodeSuccess, 16},
		{"nxdomain", s, withECS(newQuery("nope.spillway.internal.", dns.TypeA), "10.2.0.0/24"), dns.RcodeNameError, 0},
		{"nxdomain_slow_path", s, withECS(newQuery(`no\000pe.spillway.internal.`, dns.TypeA), "10.2.0.0/24"), dns.RcodeNameError, 0},
		{"refused", s, withECS(newQuery("example.com.", dns.TypeA), "10.2.0.0/24"), dns.RcodeRefused, 0},
		{"txt", s, withECS(newQuery("_xds.spillway.internal.", dns.TypeTXT), "2001:db8::/32"), dns.RcodeSuccess, 0},
		{"source_zero", s, withECS(newQuery("web.spillway.internal.", dns.TypeA), "0"), dns.RcodeSuccess, 0},
		{"no_zones_ignored", plain, withECS(newQuery("web.spillway.internal.", dns.TypeA), "10.2.0.0/24"), dns.RcodeNameError, -1},
		{"host_bits_formerr", s, rawECS(newQuery("web.spillway.internal.", dns.TypeA), 1, 16, []byte{10, 2, 1}), dns.RcodeFormatError, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, tcp := range []bool{false, true} {
				m, _ := query(t, tt.s, tt.q, tcp)
				if m.Rcode != tt.rcode {
					t.Errorf("tcp=%v rcode %s, want %s", tcp, dns.RcodeToString[m.Rcode], dns.RcodeToString[tt.rcode])
				}
				e := replySubnet(m)
				if tt.scope < 0 {
					if e != nil {
						t.Errorf("tcp=%v reply echoes ECS %v, want none", tcp, e)
					}
					continue
				}
				sent := replySubnet(tt.q)
				if e == nil || e.Family != sent.Family || e.SourceNetmask != sent.SourceNetmask || !e.Address.Equal(sent.Address) || int(e.SourceScope) != tt.scope {
					t.Errorf("tcp=%v ECS echoed as %v, want %v with scope %d", tcp, e, sent, tt.scope)
				}
			}
		})
	}
	t.Run("badvers", func(t *testing.T) {
		q := withECS(newQuery("web.spillway.internal.", dns.TypeA), "10.2.0.0/24")
		q.IsEdns0().SetVersion(1)
		m, _ := query(t, s, q, false)
		if e := replySubnet(m); m.Rcode != dns.RcodeBadVers || e == nil || e.SourceScope != 0 {
			t.Errorf("rcode %s ECS %v, want BADVERS echoing ECS scope 0", dns.RcodeToString[m.Rcode], e)
		}
	})
}

// rawECS adds an ECS option as raw bytes, the way a sloppy client could
// send it, parsed back as miekg/dns parses a packet.
func rawECS(q *dns.Msg, family uint16, source uint8, addr []byte) *dns.Msg {
	q.SetEdns0(1232, false)
	data := binary.BigEndian.AppendUint16(nil, family)
	data = append(data, source, 0)
	data = append(data, addr...)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: dns.EDNS0SUBNET, Data: data})
	b, err := q.Pack()
	if err != nil {
		panic(err)
	}
	out := new(dns.Msg)
	if err := out.Unpack(b); err != nil {
		panic(err)
	}
	return out
}

// TestZoneWeightsBigService: the 10,000-endpoint SRV answer is sent as
// rotating subsets over TCP; with zone weights each subset still fits,
// with the largest ECS option echoed, and its zones' weights follow the
// split, and the subsets still cover every endpoint.
func TestZoneWeightsBigService(t *testing.T) {
	plans := &fakeWeights{}
	split := []ZoneWeight{zw("zone-a", 700), zw("zone-b", 200), zw("zone-c", 100)}
	plans.set("big", "zone-a", split...)
	store, s := newZoneServer(t, plans)
	zoneOf := bigService(t, store, "big", 10000)
	want := splitShares(split)
	for _, tc := range []struct {
		name string
		ecs  string
	}{{"by_source", ""}, {"by_ecs_ipv6_128", "2001:db8:a::1/128"}} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuery("_grpc._tcp.big.spillway.internal.", dns.TypeSRV)
			if tc.ecs != "" {
				withECS(q, tc.ecs)
			}
			from := querier("10.1.0.1", true)
			if tc.ecs != "" {
				from = querier("192.0.2.1", true)
			}
			seen := map[string]bool{}
			for i := 0; i < 100 && len(seen) < 10000; i++ {
				m, n := queryFrom(t, s, q, true, from)
				if n > 65535 || m.Truncated || m.Rcode != dns.RcodeSuccess {
					t.Fatalf("query %d: %d bytes, TC %v, rcode %s", i, n, m.Truncated, dns.RcodeToString[m.Rcode])
				}
				got := srvByTarget(t, m)
				for target := range got {
					if zoneOf[target] == "" {
						t.Fatalf("unexpected target %s", target)
					}
					seen[target] = true
				}
				shares := zoneShares(got, func(target string) string { return zoneOf[target] })
				if !near(shares, want, 1e-3) {
					t.Fatalf("query %d: zone shares %v, want %v", i, shares, want)
				}
				if tc.ecs != "" {
					if e := replySubnet(m); e == nil || e.SourceScope != 48 {
						t.Fatalf("ECS echoed as %v, want scope 48", e)
					}
				}
			}
			if len(seen) != 10000 {
				t.Errorf("100 TCP queries covered %d of 10000 endpoints", len(seen))
			}
		})
	}
}

// TestSRVWeights: weights follow the split per zone and the endpoint
// weights inside a zone; the largest is 65535 and none is 0.
func TestSRVWeights(t *testing.T) {
	eps := func(specs ...string) []*registry.Endpoint { // "zone:weight"
		var out []*registry.Endpoint
		for i, sp := range specs {
			z, w, _ := strings.Cut(sp, ":")
			var n uint32
			fmt.Sscan(w, &n)
			out = append(out, &registry.Endpoint{ID: fmt.Sprint(i), Weight: n, Locality: registry.Locality{Zone: z}})
		}
		return out
	}
	many := func(n int, spec string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = spec
		}
		return out
	}
	tests := []struct {
		name  string
		eps   []*registry.Endpoint
		split []ZoneWeight
		want  []uint16 // nil: only check the bounds
	}{
		{"endpoint_weights", eps("a:1", "a:4"), nil, []uint16{16384, 65535}},
		{"split_evens_out_zone_sizes", eps("a:100", "b:100", "b:100"), []ZoneWeight{zw("a", 1), zw("b", 1)}, []uint16{65535, 32768, 32768}},
		{"split_and_endpoint_weights", eps("a:100", "a:300", "b:100"), []ZoneWeight{zw("a", 800), zw("b", 200)}, []uint16{21845, 65535, 21845}},
		{"zone_missing_from_split", eps("a:100", "c:100"), []ZoneWeight{zw("a", 1)}, []uint16{65535, 1}},
		{"zone_weight_0", eps("a:100", "b:100"), []ZoneWeight{zw("a", 1), zw("b", 0)}, []uint16{65535, 1}},
		{"no_zone_in_split", eps("a:1", "a:4"), []ZoneWeight{zw("x", 1)}, []uint16{16384, 65535}},
		{"tiny_share_never_0", eps(append([]string{"a:65535"}, many(5000, "b:1")...)...), []ZoneWeight{zw("a", 1000000), zw("b", 1)}, nil},
		{"no_zone_label", eps(":1", ":1", "b:1"), []ZoneWeight{zw("", 1), zw("b", 1)}, []uint16{32768, 32768, 65535}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := srvWeights(tt.eps, tt.split)
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("weights (-want +got):\n%s", diff)
				}
			}
			var top uint16
			for i, w := range got {
				if w == 0 {
					t.Errorf("endpoint %d has weight 0", i)
				}
				top = max(top, w)
			}
			if top != 65535 {
				t.Errorf("largest weight %d, want 65535", top)
			}
		})
	}
}

func TestZoneConfigValidate(t *testing.T) {
	store := registry.NewStore()
	p := netip.MustParsePrefix
	tests := []struct {
		name  string
		zones []ZoneSubnet
		want  string // "" for valid
	}{
		{"valid", testZones, ""},
		{"zero_prefix", []ZoneSubnet{{Zone: "zone-a"}}, "Zones[0].Prefix"},
		{"host_bits", []ZoneSubnet{{Prefix: p("10.1.2.3/16"), Zone: "zone-a"}}, "Zones[0].Prefix 10.1.2.3/16 has host bits set, want 10.1.0.0/16"},
		{"mapped", []ZoneSubnet{{Prefix: p("::ffff:10.0.0.0/104"), Zone: "zone-a"}}, "Zones[0].Prefix"},
		{"empty_zone", []ZoneSubnet{{Prefix: p("10.0.0.0/8"), Zone: ""}}, "Zones[0].Zone"},
		{"zone_not_label", []ZoneSubnet{{Prefix: p("10.0.0.0/8"), Zone: "zone-a"}, {Prefix: p("10.2.0.0/16"), Zone: "Zone_B"}}, "Zones[1].Zone"},
		{"duplicate", []ZoneSubnet{{Prefix: p("10.0.0.0/8"), Zone: "zone-a"}, {Prefix: p("10.0.0.0/8"), Zone: "zone-b"}}, "Zones[1].Prefix 10.0.0.0/8 is also Zones[0].Prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{Store: store, Domain: "a.", Zones: tt.zones})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("New = %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

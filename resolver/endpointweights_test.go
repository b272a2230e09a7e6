package resolver

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
)

// fakeEPWeights is fakeWeights with per-endpoint weights (EndpointWeights).
type fakeEPWeights struct {
	fakeWeights
	emu sync.Mutex
	gen uint64
	eps map[string]uint32 // of service web
}

func (f *fakeEPWeights) setEndpoints(eps map[string]uint32) {
	f.emu.Lock()
	defer f.emu.Unlock()
	f.gen++
	f.eps = eps
}

func (f *fakeEPWeights) EndpointGen(service string) uint64 {
	f.emu.Lock()
	defer f.emu.Unlock()
	if service != "web" || f.eps == nil {
		return 0
	}
	return f.gen
}

func (f *fakeEPWeights) EndpointWeight(service, id string) (uint32, bool) {
	f.emu.Lock()
	defer f.emu.Unlock()
	w, ok := f.eps[id]
	return w, ok && service == "web"
}

var _ EndpointWeights = (*fakeEPWeights)(nil)

// TestSRVWeightsWith: the SRV weight is the zone split × the endpoint's
// share of its zone by plan weight, scaled to 1..65535.
func TestSRVWeightsWith(t *testing.T) {
	eps := []*registry.Endpoint{
		{ID: "a1", Locality: registry.Locality{Zone: "a"}, Weight: 100},
		{ID: "a2", Locality: registry.Locality{Zone: "a"}, Weight: 100},
		{ID: "b1", Locality: registry.Locality{Zone: "b"}, Weight: 100},
		{ID: "b2", Locality: registry.Locality{Zone: "b"}, Weight: 100},
	}
	tests := []struct {
		name  string
		split []ZoneWeight
		pid   map[string]uint32
		want  []uint16
	}{
		// zone a 3/4, split 30000:10000 inside it; zone b 1/4, 5000:15000.
		{"split_x_pid", []ZoneWeight{zw("a", 3), zw("b", 1)},
			map[string]uint32{"a1": 30000, "a2": 10000, "b1": 5000, "b2": 15000},
			[]uint16{65535, 21845, 7282, 21845}},
		{"pid_no_split", nil, map[string]uint32{"a1": 30000, "a2": 10000, "b1": 5000, "b2": 15000},
			[]uint16{65535, 21845, 10923, 32768}},
		{"missing_endpoint_keeps_registry_weight", nil, map[string]uint32{"a1": 200, "a2": 100, "b1": 100},
			[]uint16{65535, 32768, 32768, 32768}},
		{"tiny_share_is_1", []ZoneWeight{zw("a", 1), zw("b", 1)},
			map[string]uint32{"a1": 1000000, "a2": 1, "b1": 1, "b2": 1},
			[]uint16{65535, 1, 32768, 32768}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := srvWeightsWith(eps, tt.split, func(e *registry.Endpoint) float64 {
				if w, ok := tt.pid[e.ID]; ok {
					return float64(w)
				}
				return float64(e.Weight)
			})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("weights (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSRVFollowsEndpointWeights: SRV answers, with and without a zone
// split, follow the endpoint weights and change when they do.
func TestSRVFollowsEndpointWeights(t *testing.T) {
	w := &fakeEPWeights{}
	store, s := newZoneServer(t, w)
	mustApply(t, store,
		upsert("web", endpointSpec{id: "a1", addr: "10.0.0.1", zone: "zone-a"}),
		upsert("web", endpointSpec{id: "a2", addr: "10.0.0.2", zone: "zone-a"}),
		upsert("web", endpointSpec{id: "b1", addr: "10.0.0.3", zone: "zone-b"}))
	const a1, a2, b1 = "a1.web.spillway.internal.", "a2.web.spillway.internal.", "b1.web.spillway.internal."
	ask := func(from string) map[string]uint16 {
		t.Helper()
		m, _ := queryFrom(t, s, newQuery("_grpc._tcp.web.spillway.internal.", dns.TypeSRV), false, querier(from, false))
		return srvByTarget(t, m)
	}
	steps := []struct {
		name   string
		change func()
		from   string
		want   map[string]uint16
	}{
		{"registry_weights", func() {}, "192.0.2.1", map[string]uint16{a1: 65535, a2: 65535, b1: 65535}},
		{"pid_unknown_zone", func() { w.setEndpoints(map[string]uint32{"a1": 20000, "a2": 10000, "b1": 10000}) }, "192.0.2.1",
			map[string]uint16{a1: 65535, a2: 32768, b1: 32768}},
		{"pid_changed", func() { w.setEndpoints(map[string]uint32{"a1": 10000, "a2": 10000, "b1": 5000}) }, "192.0.2.1",
			map[string]uint16{a1: 65535, a2: 65535, b1: 32768}},
		{"split_x_pid", func() {
			w.set("web", "zone-a", zw("zone-a", 1), zw("zone-b", 1))
			w.setEndpoints(map[string]uint32{"a1": 30000, "a2": 10000, "b1": 7})
		}, "10.1.0.1", map[string]uint16{a1: 49151, a2: 16384, b1: 65535}},
		{"split_x_pid_changed", func() { w.setEndpoints(map[string]uint32{"a1": 10000, "a2": 10000, "b1": 7}) }, "10.1.0.1",
			map[string]uint16{a1: 32768, a2: 32768, b1: 65535}},
	}
	for _, st := range steps {
		st.change()
		if diff := cmp.Diff(st.want, ask(st.from)); diff != "" {
			t.Errorf("%s: SRV weights (-want +got):\n%s", st.name, diff)
		}
	}
}

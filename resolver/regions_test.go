package resolver

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/regions"
)

type fakeRules struct {
	r   regions.Rules
	ver uint64
}

func (f *fakeRules) Rules(string) (regions.Rules, uint64) { return f.r, f.ver }

// srvPriorities is SRV target -> priority of a reply.
func srvPriorities(m *dns.Msg) map[string]uint16 {
	out := map[string]uint16{}
	for _, rr := range m.Answer {
		if srv, ok := rr.(*dns.SRV); ok {
			out[srv.Target] = srv.Priority
		}
	}
	return out
}

// TestSRVRegionPriority: SRV priority 0 for the querier's region's
// targets, higher for the other regions in preference order; queriers of
// no known region get all at 0; redirects and exclusions apply to the
// queriers concerned and to A records; a rules version change is seen at
// the next query.
func TestSRVRegionPriority(t *testing.T) {
	store := registry.NewStore()
	store.MarkSynced()
	rules := &fakeRules{}
	s, err := New(Config{Store: store, Domain: "spillway.internal", RegionRules: rules,
		RegionPreference: regions.Preference{"r1": {"r3", "r2"}},
		Zones: []ZoneSubnet{
			{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Zone: "zone-a", Region: "r1"},
			{Prefix: netip.MustParsePrefix("10.2.0.0/16"), Zone: "zone-b", Region: "r2"},
			{Prefix: netip.MustParsePrefix("10.9.0.0/16"), Zone: "zone-z"}, // region unknown
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []string{"r1", "r2", "r3"} {
		mustApply(t, store, registry.Upsert("pay", &registry.Endpoint{
			ID: r + "-0", Address: netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1)),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: registry.Locality{Region: r, Zone: "zone-" + r}, Health: registry.Healthy, Weight: 100, Source: registry.SourceStatic,
		}))
	}
	tgt := func(r string) string { return r + "-0.pay.spillway.internal." }
	steps := []struct {
		name    string
		rules   regions.Rules
		querier string
		want    map[string]uint16
	}{
		{name: "r1-preference", querier: "10.1.0.7", want: map[string]uint16{tgt("r1"): 0, tgt("r3"): 1, tgt("r2"): 2}},
		{name: "r2-by-name", querier: "10.2.0.7", want: map[string]uint16{tgt("r2"): 0, tgt("r1"): 1, tgt("r3"): 2}},
		{name: "zone-without-region", querier: "10.9.0.7", want: map[string]uint16{tgt("r1"): 0, tgt("r2"): 0, tgt("r3"): 0}},
		{name: "unmapped-querier", querier: "192.0.2.1", want: map[string]uint16{tgt("r1"): 0, tgt("r2"): 0, tgt("r3"): 0}},
		{name: "r1-redirected-to-r2", querier: "10.1.0.7", rules: regions.Rules{Redirects: []regions.Redirect{{From: "r1", To: "r2"}}},
			want: map[string]uint16{tgt("r2"): 0, tgt("r3"): 1, tgt("r1"): 2}},
		{name: "redirect-expired", querier: "10.1.0.7", rules: regions.Rules{Redirects: []regions.Redirect{{From: "r1", To: "r2", Until: time.Now().Add(-time.Second)}}},
			want: map[string]uint16{tgt("r1"): 0, tgt("r3"): 1, tgt("r2"): 2}},
		{name: "r3-excluded", querier: "10.1.0.7", rules: regions.Rules{Excludes: []regions.Exclude{{Region: "r3"}}},
			want: map[string]uint16{tgt("r1"): 0, tgt("r2"): 1}},
		{name: "r3-excluded-unknown-querier", querier: "192.0.2.1", rules: regions.Rules{Excludes: []regions.Exclude{{Region: "r3"}}},
			want: map[string]uint16{tgt("r1"): 0, tgt("r2"): 0}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			rules.r = st.rules
			rules.ver++
			m, _ := queryFrom(t, s, newQuery("_grpc._tcp.pay.spillway.internal.", dns.TypeSRV), false, querier(st.querier, false))
			if d := cmp.Diff(st.want, srvPriorities(m)); d != "" {
				t.Errorf("target -> priority (-want +got):\n%s", d)
			}
		})
	}
	rules.r, rules.ver = regions.Rules{Excludes: []regions.Exclude{{Region: "r3"}}}, rules.ver+1
	m, _ := queryFrom(t, s, newQuery("pay.spillway.internal.", dns.TypeA), false, querier("192.0.2.1", false))
	if len(m.Answer) != 2 {
		t.Errorf("A answer %v: want the 2 addresses of r1 and r2 (r3 excluded)", m.Answer)
	}
}

func TestZoneRegionConflict(t *testing.T) {
	_, err := New(Config{Store: registry.NewStore(), Domain: "spillway.internal", Zones: []ZoneSubnet{
		{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Zone: "zone-a", Region: "r1"},
		{Prefix: netip.MustParsePrefix("10.3.0.0/16"), Zone: "zone-a", Region: "r2"},
	}})
	if err == nil || !strings.Contains(err.Error(), "Zones[1].Region") {
		t.Fatalf("New = %v, want an error naming Zones[1].Region", err)
	}
}

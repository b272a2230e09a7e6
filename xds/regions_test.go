package xds

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/regions"
)

// twoRegionStore: web has two healthy endpoints in each of r1 (zones a, b)
// and r2 (zone c), and one in r3.
func twoRegionStore(t *testing.T) *registry.Store {
	t.Helper()
	store := registry.NewStore()
	var ops []registry.Op
	for i, l := range []registry.Locality{{Region: "r1", Zone: "a"}, {Region: "r1", Zone: "b"}, {Region: "r2", Zone: "c"}, {Region: "r3", Zone: "d"}} {
		ops = append(ops, registry.Upsert("web", &registry.Endpoint{
			ID: fmt.Sprintf("e%d", i), Address: netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1)),
			Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality: l, Health: registry.Healthy, Weight: 100, Source: registry.SourceStatic,
		}))
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	return store
}

// fakeRules is a RegionRules with a settable version.
type fakeRules struct {
	r   regions.Rules
	ver uint64
}

func (f *fakeRules) Rules(string) (regions.Rules, uint64) { return f.r, f.ver }

// prioritiesOf is zone -> priority of the EDS a client of region sees.
func prioritiesOf(t *testing.T, s *Server, store *registry.Store, region string) map[string]uint32 {
	t.Helper()
	r, ok := s.lookupFor(3, "web", nodeInfo{zone: "a", region: region}, nil, store.Snapshot())
	if !ok || r == nil {
		t.Fatalf("no valid EDS for region %q", region)
	}
	cla := &v3endpointpb.ClusterLoadAssignment{}
	if err := r.any.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if err := checkForGRPC(EndpointType, cla); err != nil {
		t.Fatalf("grpc-go would reject the EDS: %v", err)
	}
	out := map[string]uint32{}
	for _, l := range cla.GetEndpoints() {
		out[l.GetLocality().GetZone()] = l.GetPriority()
	}
	return out
}

// TestEDSRegionPriorities: a client's region gets priority 0, the others
// follow in preference order; a client of no region gets every locality at
// 0; redirects and exclusions change the order for the clients concerned,
// and a change of the rules' version rebuilds the cached variant.
func TestEDSRegionPriorities(t *testing.T) {
	store := twoRegionStore(t)
	rules := &fakeRules{}
	s, err := New(Config{Store: store, RegionPreference: regions.Preference{"r1": {"r3", "r2"}}, RegionRules: rules})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		rules  regions.Rules
		region string
		want   map[string]uint32
	}{
		{name: "no-region", want: map[string]uint32{"a": 0, "b": 0, "c": 0, "d": 0}},
		{name: "r1-preference", region: "r1", want: map[string]uint32{"a": 0, "b": 0, "d": 1, "c": 2}},
		{name: "r2-by-name", region: "r2", want: map[string]uint32{"c": 0, "a": 1, "b": 1, "d": 2}},
		{name: "unknown-region", region: "r9", want: map[string]uint32{"a": 0, "b": 0, "c": 0, "d": 0}},
		{name: "r1-redirected-to-r2", region: "r1", rules: regions.Rules{Redirects: []regions.Redirect{{From: "r1", To: "r2"}}},
			want: map[string]uint32{"c": 0, "d": 1, "a": 2, "b": 2}},
		{name: "r2-not-redirected", region: "r2", rules: regions.Rules{Redirects: []regions.Redirect{{From: "r1", To: "r2"}}},
			want: map[string]uint32{"c": 0, "a": 1, "b": 1, "d": 2}},
		{name: "redirect-expired", region: "r1", rules: regions.Rules{Redirects: []regions.Redirect{{From: "r1", To: "r2", Until: time.Now().Add(-time.Second)}}},
			want: map[string]uint32{"a": 0, "b": 0, "d": 1, "c": 2}},
		{name: "r1-excluded", region: "r1", rules: regions.Rules{Excludes: []regions.Exclude{{Region: "r1"}}},
			want: map[string]uint32{"d": 0, "c": 1}},
		{name: "r1-excluded-no-region", rules: regions.Rules{Excludes: []regions.Exclude{{Region: "r1"}}},
			want: map[string]uint32{"c": 0, "d": 0}},
		{name: "all-excluded-fails-open", region: "r2", rules: regions.Rules{Excludes: []regions.Exclude{{Region: "r1"}, {Region: "r2"}, {Region: "r3"}}},
			want: map[string]uint32{"c": 0, "a": 1, "b": 1, "d": 2}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			rules.r = st.rules
			rules.ver++
			if d := cmp.Diff(st.want, prioritiesOf(t, s, store, st.region)); d != "" {
				t.Errorf("zone -> priority (-want +got):\n%s", d)
			}
		})
	}
}

// TestEDSRegionVariantsBounded: clients claiming many regions share the
// variants of the priorities they get.
func TestEDSRegionVariantsBounded(t *testing.T) {
	store := twoRegionStore(t)
	s, err := New(Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		prioritiesOf(t, s, store, fmt.Sprintf("claimed-%d", i))
	}
	for _, r := range []string{"r1", "r2", "r3", ""} {
		prioritiesOf(t, s, store, r)
	}
	e := s.cache.entry("web")
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := len(e.eds); n != 4 {
		t.Errorf("%d EDS variants, want 4 (all-0, r1, r2, r3 first)", n)
	}
}

// TestEDSSingleRegionUnchanged: a service in one region keeps every
// locality at priority 0 whatever the client's region.
func TestEDSSingleRegionUnchanged(t *testing.T) {
	store := pidStore(t) // r1 only
	s, err := New(Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := s.lookupFor(3, "web", nodeInfo{zone: "a", region: "r2"}, nil, store.Snapshot())
	cla := &v3endpointpb.ClusterLoadAssignment{}
	if err := r.any.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	for _, l := range cla.GetEndpoints() {
		if l.GetPriority() != 0 {
			t.Errorf("locality %v at priority %d, want 0", l.GetLocality(), l.GetPriority())
		}
	}
}

package xds

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/registry"
)

func TestLabelSet(t *testing.T) {
	t0 := time.Unix(1000, 0)
	idle := time.Minute
	// Each step acquires (+), releases (-), touches (~) or sweeps (!) at
	// t0 plus an offset, and says what label it must get.
	type step struct {
		op    byte
		value string
		at    time.Duration
		want  string // label; for '!', how many slots freed
	}
	tests := []struct {
		name      string
		max       int
		steps     []step
		wantSlots []string
		wantFreed []string
	}{
		{name: "first_values_keep_their_name", max: 2, steps: []step{
			{'+', "a", 0, "a"}, {'+', "b", 0, "b"}, {'+', "c", 0, labelOther}, {'+', "a", 0, "a"},
		}, wantSlots: []string{"a", "b"}},
		{name: "fixed_labels_take_no_slot", max: 1, steps: []step{
			{'+', "", 0, labelNone}, {'+', "Bad_Zone", 0, labelInvalid}, {'+', strings.Repeat("x", 64), 0, labelInvalid},
			{'+', labelOther, 0, labelOther}, {'+', labelNone, 0, labelNone}, {'+', "a", 0, "a"},
		}, wantSlots: []string{"a"}},
		{name: "held_slot_is_never_freed", max: 1, steps: []step{
			{'+', "a", 0, "a"}, {'+', "b", time.Hour, labelOther}, {'!', "", time.Hour, "0"},
		}, wantSlots: []string{"a"}},
		{name: "released_slot_kept_while_recent", max: 1, steps: []step{
			{'+', "a", 0, "a"}, {'-', "a", 0, ""}, {'+', "b", idle - time.Second, labelOther},
		}, wantSlots: []string{"a"}},
		{name: "idle_slot_goes_to_a_new_value", max: 1, steps: []step{
			{'+', "a", 0, "a"}, {'-', "a", 0, ""}, {'+', "b", idle, "b"}, {'+', "a", idle, labelOther},
		}, wantSlots: []string{"b"}, wantFreed: []string{"a"}},
		{name: "evicts_the_longest_idle", max: 2, steps: []step{
			{'~', "a", 0, "a"}, {'~', "b", 10 * time.Second, "b"}, {'+', "c", 2 * idle, "c"},
		}, wantSlots: []string{"b", "c"}, wantFreed: []string{"a"}},
		{name: "touch_keeps_a_slot_alive", max: 1, steps: []step{
			{'~', "a", 0, "a"}, {'~', "a", idle - time.Second, "a"}, {'+', "b", idle + time.Second, labelOther},
		}, wantSlots: []string{"a"}},
		{name: "sweep_frees_idle_only", max: 3, steps: []step{
			{'~', "a", 0, "a"}, {'+', "b", 0, "b"}, {'~', "c", 2 * idle, "c"}, {'!', "", 2 * idle, "1"},
		}, wantSlots: []string{"b", "c"}, wantFreed: []string{"a"}},
		{name: "rolling_fleet_reuses_slots", max: 2, steps: []step{
			{'+', "a", 0, "a"}, {'+', "b", 0, "b"}, {'-', "a", time.Second, ""}, {'-', "b", time.Second, ""},
			{'!', "", 2 * idle, "2"}, {'+', "c", 2 * idle, "c"}, {'+', "d", 2 * idle, "d"}, {'+', "e", 2 * idle, labelOther},
		}, wantSlots: []string{"c", "d"}, wantFreed: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var freed []string
			b := newLabelSet(tt.max, idle, func(v string) { freed = append(freed, v) })
			for i, st := range tt.steps {
				now := t0.Add(st.at)
				var got string
				switch st.op {
				case '+':
					got = b.acquire(st.value, now)
				case '~':
					got = b.touch(st.value, now)
				case '-':
					b.release(st.value, now)
					continue
				case '!':
					got = string(rune('0' + b.sweep(now)))
				}
				if got != st.want {
					t.Errorf("step %d %c%q = %q, want %q", i, st.op, st.value, got, st.want)
				}
			}
			var slots []string
			for v := range b.slots {
				slots = append(slots, v)
			}
			slices.Sort(slots)
			slices.Sort(freed)
			if !slices.Equal(slots, tt.wantSlots) {
				t.Errorf("slots = %q, want %q", slots, tt.wantSlots)
			}
			if !slices.Equal(freed, tt.wantFreed) {
				t.Errorf("freed = %q, want %q", freed, tt.wantFreed)
			}
			if b.len() > tt.max {
				t.Errorf("len = %d, over the cap %d", b.len(), tt.max)
			}
		})
	}
}

func TestConfigMaxZones(t *testing.T) {
	store := registry.NewStore()
	for _, tt := range []struct {
		name    string
		max     int
		want    int
		wantErr string
	}{
		{name: "zero_means_64", max: 0, want: 64},
		{name: "set", max: 5, want: 5},
		{name: "negative", max: -1, wantErr: "MaxZones"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Store: store, MaxZones: tt.max})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New(MaxZones %d) = %v, want an error naming %s", tt.max, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.cfg.MaxZones != tt.want || s.zones.max != tt.want {
				t.Errorf("MaxZones = %d (set cap %d), want %d", s.cfg.MaxZones, s.zones.max, tt.want)
			}
		})
	}
}

// TestLoadTableBounds feeds the load table reports a client chooses
// freely and checks what it records and when it forgets.
func TestLoadTableBounds(t *testing.T) {
	store := registry.NewStore()
	if _, err := store.Apply(
		registry.Upsert("web", endpointIn("w1", "a")),
		registry.Upsert("web", endpointIn("w2", "b")),
	); err != nil {
		t.Fatal(err)
	}
	snap := store.Snapshot()
	t0 := time.Unix(1000, 0)
	report := func(cluster string, zones ...string) *v3endpointpb.ClusterStats {
		cs := &v3endpointpb.ClusterStats{ClusterName: cluster, LoadReportInterval: durationpb.New(10 * time.Second)}
		for _, z := range zones {
			cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &v3endpointpb.UpstreamLocalityStats{
				Locality: &v3corepb.Locality{Region: "r1", Zone: z}, TotalIssuedRequests: 100,
			})
		}
		return cs
	}
	tab := newLoadTable(5 * time.Minute)
	for _, tt := range []struct {
		name        string
		stream      uint64
		node        nodeInfo
		cs          *v3endpointpb.ClusterStats
		wantReason  string
		wantDropped int
		wantZone    string // client zone recorded, if any
	}{
		{name: "unknown_cluster", stream: 1, node: nodeInfo{zone: "a", label: "a"}, cs: report("no-such-service", "a"), wantReason: dropUnknownCluster},
		{name: "no_interval", stream: 1, node: nodeInfo{zone: "a", label: "a"}, cs: &v3endpointpb.ClusterStats{ClusterName: "web"}, wantReason: dropNoInterval},
		{name: "unknown_locality", stream: 1, node: nodeInfo{zone: "a", label: "a"}, cs: report("web", "a", "made-up"), wantReason: dropUnknownLocality, wantDropped: 1, wantZone: "a"},
		{name: "slotted_zone", stream: 2, node: nodeInfo{zone: "z9", label: "z9"}, cs: report("web", "b"), wantZone: "z9"},
		{name: "unslotted_zone_is_other", stream: 3, node: nodeInfo{zone: "z10", label: labelOther}, cs: report("web", "b"), wantZone: labelOther},
		{name: "unslotted_endpoint_zone_keeps_name", stream: 4, node: nodeInfo{zone: "b", label: labelOther}, cs: report("web", "b"), wantZone: "b"},
		{name: "invalid_zone", stream: 5, node: nodeInfo{zone: "B_", label: labelInvalid}, cs: report("web", "a"), wantZone: labelInvalid},
		{name: "no_zone", stream: 6, node: nodeInfo{label: labelNone}, cs: report("web", "a"), wantZone: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var zones []string
			reason, dropped := tab.record(tt.stream, tt.node, tt.cs, t0, snap, func(*v3endpointpb.UpstreamLocalityStats) {})
			if reason != tt.wantReason || dropped != tt.wantDropped {
				t.Errorf("record = %q, %d; want %q, %d", reason, dropped, tt.wantReason, tt.wantDropped)
			}
			for _, l := range tab.Loads("", t0) {
				zones = append(zones, l.ClientZone)
			}
			if tt.wantZone != "" || tt.name == "no_zone" {
				if !slices.Contains(zones, tt.wantZone) {
					t.Errorf("client zones = %q, want %q among them", zones, tt.wantZone)
				}
			}
		})
	}
	if got := tab.Size(); got.Streams != 6 || got.Samples != 6 || got.Services != 1 {
		t.Errorf("size = %+v, want 6 streams, 6 samples, 1 service", got)
	}
	// A stream that ends takes its samples; totals stay until idle.
	tab.forget(1)
	if got := tab.Size(); got.Streams != 5 || got.Samples != 5 || got.Totals != 6 {
		t.Errorf("after forget: size = %+v, want 5 streams, 5 samples, 6 totals", got)
	}
	// Stale samples go on prune (three intervals); totals after idle.
	tab.prune(t0.Add(31*time.Second), snap)
	if got := tab.Size(); got.Samples != 0 || got.Totals != 6 {
		t.Errorf("after 31s: size = %+v, want 0 samples, 6 totals", got)
	}
	tab.prune(t0.Add(5*time.Minute+time.Second), snap)
	if got := tab.Size(); got != (LoadTableSize{Services: 1}) {
		t.Errorf("after idle: size = %+v, want only the cached service", got)
	}
	// A service gone from the store loses its cached localities.
	tab.prune(t0.Add(10*time.Minute), registry.NewStore().Snapshot())
	if got := tab.Size(); got != (LoadTableSize{}) {
		t.Errorf("service gone: size = %+v, want empty", got)
	}
}

func endpointIn(id, zone string) *registry.Endpoint {
	return &registry.Endpoint{
		ID: id, Address: netip.MustParseAddr("10.0.0.1"),
		Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
		Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy, Source: registry.SourceStatic,
	}
}

// A report states a stream's whole load to a service: a locality left out
// of the next report (grpc-go omits those with nothing to report) no longer
// counts, while other streams' samples of it stay.
func TestLoadReportReplacesOmittedLocalities(t *testing.T) {
	store := registry.NewStore()
	if _, err := store.Apply(
		registry.Upsert("web", endpointIn("w1", "a")),
		registry.Upsert("web", endpointIn("w2", "b")),
	); err != nil {
		t.Fatal(err)
	}
	snap := store.Snapshot()
	report := func(issued map[string]uint64) *v3endpointpb.ClusterStats {
		cs := &v3endpointpb.ClusterStats{ClusterName: "web", LoadReportInterval: durationpb.New(10 * time.Second)}
		for _, z := range []string{"a", "b"} {
			if n, ok := issued[z]; ok {
				cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &v3endpointpb.UpstreamLocalityStats{
					Locality: &v3corepb.Locality{Region: "r1", Zone: z}, TotalIssuedRequests: n,
				})
			}
		}
		return cs
	}
	issuedTo := func(tab *LoadTable, now time.Time) map[string]float64 {
		out := map[string]float64{}
		for _, l := range tab.Loads("web", now) {
			out[l.Locality.Zone] += l.Issued
		}
		return out
	}
	tab := newLoadTable(5 * time.Minute)
	t0 := time.Unix(1000, 0)
	node := nodeInfo{zone: "a", label: "a", cluster: "checkout"}
	tab.record(1, node, report(map[string]uint64{"a": 100, "b": 50}), t0, snap, nil)
	tab.record(2, node, report(map[string]uint64{"b": 20}), t0, snap, nil)
	if got, want := issuedTo(tab, t0), map[string]float64{"a": 10, "b": 7}; !maps.Equal(got, want) {
		t.Fatalf("issued rps after the first reports = %v, want %v", got, want)
	}
	t1 := t0.Add(10 * time.Second)
	tab.record(1, node, report(map[string]uint64{"a": 120}), t1, snap, nil)
	if got, want := issuedTo(tab, t1), map[string]float64{"a": 12, "b": 2}; !maps.Equal(got, want) {
		t.Errorf("issued rps after stream 1 stopped sending to b = %v, want %v (b only from stream 2)", got, want)
	}
	tab.record(1, node, report(nil), t1.Add(10*time.Second), snap, nil)
	if got := issuedTo(tab, t1.Add(10*time.Second))["a"]; got != 0 {
		t.Errorf("issued rps to a after an empty report = %v, want 0", got)
	}
}

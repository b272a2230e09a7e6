package load

import (
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/registry"
)

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
	tab := NewTable(5 * time.Minute)
	for _, tt := range []struct {
		name        string
		stream      uint64
		node        Node
		cs          *v3endpointpb.ClusterStats
		wantReason  string
		wantDropped int
		wantZone    string // client zone recorded, if any
	}{
		{name: "unknown_cluster", stream: 1, node: Node{Zone: "a", Label: "a"}, cs: report("no-such-service", "a"), wantReason: DropUnknownCluster},
		{name: "no_interval", stream: 1, node: Node{Zone: "a", Label: "a"}, cs: &v3endpointpb.ClusterStats{ClusterName: "web"}, wantReason: DropNoInterval},
		{name: "unknown_locality", stream: 1, node: Node{Zone: "a", Label: "a"}, cs: report("web", "a", "made-up"), wantReason: DropUnknownLocality, wantDropped: 1, wantZone: "a"},
		{name: "slotted_zone", stream: 2, node: Node{Zone: "z9", Label: "z9"}, cs: report("web", "b"), wantZone: "z9"},
		{name: "unslotted_zone_is_other", stream: 3, node: Node{Zone: "z10", Label: ZoneOther}, cs: report("web", "b"), wantZone: ZoneOther},
		{name: "unslotted_endpoint_zone_keeps_name", stream: 4, node: Node{Zone: "b", Label: ZoneOther}, cs: report("web", "b"), wantZone: "b"},
		{name: "invalid_zone", stream: 5, node: Node{Zone: "B_", Label: ZoneInvalid}, cs: report("web", "a"), wantZone: ZoneInvalid},
		{name: "no_zone", stream: 6, node: Node{Label: "none"}, cs: report("web", "a"), wantZone: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var zones []string
			reason, dropped := tab.Record(tt.stream, tt.node, tt.cs, t0, snap, func(*v3endpointpb.UpstreamLocalityStats) {})
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
	tab.Forget(1)
	if got := tab.Size(); got.Streams != 5 || got.Samples != 5 || got.Totals != 6 {
		t.Errorf("after forget: size = %+v, want 5 streams, 5 samples, 6 totals", got)
	}
	// Stale samples go on prune (three intervals); totals after idle.
	tab.Prune(t0.Add(31*time.Second), snap)
	if got := tab.Size(); got.Samples != 0 || got.Totals != 6 {
		t.Errorf("after 31s: size = %+v, want 0 samples, 6 totals", got)
	}
	tab.Prune(t0.Add(5*time.Minute+time.Second), snap)
	if got := tab.Size(); got != (TableSize{Services: 1}) {
		t.Errorf("after idle: size = %+v, want only the cached service", got)
	}
	// A service gone from the store loses its cached localities.
	tab.Prune(t0.Add(10*time.Minute), registry.NewStore().Snapshot())
	if got := tab.Size(); got != (TableSize{}) {
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
	issuedTo := func(tab *Table, now time.Time) map[string]float64 {
		out := map[string]float64{}
		for _, l := range tab.Loads("web", now) {
			out[l.Locality.Zone] += l.Issued
		}
		return out
	}
	tab := NewTable(5 * time.Minute)
	t0 := time.Unix(1000, 0)
	node := Node{Zone: "a", Label: "a", Cluster: "checkout"}
	tab.Record(1, node, report(map[string]uint64{"a": 100, "b": 50}), t0, snap, nil)
	tab.Record(2, node, report(map[string]uint64{"b": 20}), t0, snap, nil)
	if got, want := issuedTo(tab, t0), map[string]float64{"a": 10, "b": 7}; !maps.Equal(got, want) {
		t.Fatalf("issued rps after the first reports = %v, want %v", got, want)
	}
	t1 := t0.Add(10 * time.Second)
	tab.Record(1, node, report(map[string]uint64{"a": 120}), t1, snap, nil)
	if got, want := issuedTo(tab, t1), map[string]float64{"a": 12, "b": 2}; !maps.Equal(got, want) {
		t.Errorf("issued rps after stream 1 stopped sending to b = %v, want %v (b only from stream 2)", got, want)
	}
	tab.Record(1, node, report(nil), t1.Add(10*time.Second), snap, nil)
	if got := issuedTo(tab, t1.Add(10*time.Second))["a"]; got != 0 {
		t.Errorf("issued rps to a after an empty report = %v, want 0", got)
	}
}

// Loads and AppendLoads sum each flow's fresh samples over the streams,
// carry its totals and sort by service, client service, client zone and
// locality, whatever order the reports came in; a reference sum over
// every report checks them.
func TestLoadsSumsAndSorts(t *testing.T) {
	store := registry.NewStore()
	zones := []string{"a", "b", "c"}
	var ops []registry.Op
	for _, svc := range []string{"web", "api", "db"} {
		for _, z := range zones {
			ops = append(ops, registry.Upsert(svc, endpointIn(svc+"-"+z, z)))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	snap := store.Snapshot()
	t0 := time.Unix(1000, 0)
	tab := NewTable(5 * time.Minute)
	type ref struct {
		issued   float64
		total    uint64
		reporter int
	}
	want := map[Key]*ref{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		svc := []string{"web", "api", "db"}[rng.IntN(3)]
		cz := zones[rng.IntN(3)]
		client := []string{"x", "y"}[rng.IntN(2)]
		// Each stream reports one service from one client zone, so its
		// latest report per flow is its only sample.
		stream := uint64(1 + i%40)
		cs := &v3endpointpb.ClusterStats{ClusterName: svc, LoadReportInterval: durationpb.New(10 * time.Second)}
		for _, z := range zones {
			cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &v3endpointpb.UpstreamLocalityStats{
				Locality: &v3corepb.Locality{Region: "r1", Zone: z}, TotalIssuedRequests: uint64(10 * (i + 1)),
			})
		}
		_, _ = tab.Record(stream+uint64(1000*(i/40)), Node{Zone: cz, Label: cz, Cluster: client}, cs, t0, snap, nil)
		for _, z := range zones {
			k := Key{ClientZone: cz, ClientService: client, Service: svc, Locality: registry.Locality{Region: "r1", Zone: z}}
			r := want[k]
			if r == nil {
				r = &ref{}
				want[k] = r
			}
			r.issued += float64(10*(i+1)) / 10
			r.total += uint64(10 * (i + 1))
			r.reporter++
		}
	}
	var wantLoads []Load
	for k, r := range want {
		wantLoads = append(wantLoads, Load{Key: k, Issued: r.issued, TotalIssued: r.total, Reporters: r.reporter, Updated: t0})
	}
	slices.SortFunc(wantLoads, func(a, b Load) int {
		key := func(k Key) string {
			return strings.Join([]string{k.Service, k.ClientService, k.ClientZone, k.Locality.Region, k.Locality.Zone, k.Locality.SubZone}, "\x00")
		}
		return strings.Compare(key(a.Key), key(b.Key))
	})
	approx := cmpopts.EquateApprox(0, 1e-9)
	if diff := cmp.Diff(wantLoads, tab.Loads("", t0), approx); diff != "" {
		t.Errorf("Loads(\"\") (-want +got):\n%s", diff)
	}
	prefix := []Load{{Key: Key{Service: "kept"}}}
	if diff := cmp.Diff(append(prefix, wantLoads...), tab.AppendLoads(slices.Clone(prefix), t0), approx); diff != "" {
		t.Errorf("AppendLoads (-want +got):\n%s", diff)
	}
	var wantAPI []Load
	for _, l := range wantLoads {
		if l.Service == "api" {
			wantAPI = append(wantAPI, l)
		}
	}
	if diff := cmp.Diff(wantAPI, tab.Loads("api", t0), approx); diff != "" {
		t.Errorf("Loads(\"api\") (-want +got):\n%s", diff)
	}
	if got := tab.Loads("none", t0); got == nil || len(got) != 0 {
		t.Errorf("Loads(\"none\") = %#v, want an empty slice", got)
	}
}

// Reporters that come and go and are never forgotten (a stream that
// ends without Forget, or one that stops reporting a service) leave
// stale samples; with nobody reading the table, Record's sweeps keep
// them within twice the fresh ones plus 1,024.
func TestRecordSweepsStaleSamples(t *testing.T) {
	store := registry.NewStore()
	if _, err := store.Apply(registry.Upsert("web", endpointIn("w1", "a"))); err != nil {
		t.Fatal(err)
	}
	snap := store.Snapshot()
	tab := NewTable(5 * time.Minute)
	t0 := time.Unix(1000, 0)
	const perSecond = 5 // fresh for 3 s: at most 4 seconds' worth fresh
	maxSamples := 0
	for i := range 20_000 {
		now := t0.Add(time.Duration(i/perSecond) * time.Second)
		cs := &v3endpointpb.ClusterStats{ClusterName: "web", LoadReportInterval: durationpb.New(time.Second),
			UpstreamLocalityStats: []*v3endpointpb.UpstreamLocalityStats{{Locality: &v3corepb.Locality{Region: "r1", Zone: "a"}, TotalIssuedRequests: 1}}}
		if reason, _ := tab.Record(tab.NewStream(), Node{Zone: "a", Label: "a"}, cs, now, snap, nil); reason != "" {
			t.Fatalf("record %d: %s", i, reason)
		}
		maxSamples = max(maxSamples, tab.Size().Samples)
	}
	if limit := 2*4*perSecond + minSweep; maxSamples > limit {
		t.Errorf("samples held reached %d, want at most %d", maxSamples, limit)
	}
	if maxSamples <= 4*perSecond {
		t.Errorf("samples held reached only %d: the test needs stale samples to sweep", maxSamples)
	}
}

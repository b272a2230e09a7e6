package load

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/registry"
)

// benchZones are the zones of issue 31's region.
var benchZones = []string{"zone-a", "zone-b", "zone-c"}

// benchTable is n services of 3 endpoints (one per zone) and the LRS
// reports of one cycle: one stream per service and client zone, each
// reporting to the 3 zones, as e2e/bench/scale's weights part records.
type benchTable struct {
	snap    *registry.Snapshot
	names   []string
	reports []*v3endpointpb.ClusterStats // per service and client zone
	streams []uint64
}

func newBenchTable(tb testing.TB, tab *Table, n int) *benchTable {
	tb.Helper()
	store := registry.NewStore()
	var ops []registry.Op
	bt := &benchTable{}
	for i := range n {
		svc := fmt.Sprintf("svc-%05d", i)
		bt.names = append(bt.names, svc)
		for z, zone := range benchZones {
			ops = append(ops, registry.Upsert(svc, &registry.Endpoint{
				ID: fmt.Sprintf("ep-%d-%d", i, z), Address: netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(z)}),
				Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
				Locality: registry.Locality{Region: "r1", Zone: zone}, Health: registry.Healthy, Source: registry.SourceStatic,
			}))
		}
		if len(ops) >= 3000 || i == n-1 {
			if _, err := store.Apply(ops...); err != nil {
				tb.Fatal(err)
			}
			ops = ops[:0]
		}
		for range benchZones {
			cs := &v3endpointpb.ClusterStats{ClusterName: svc, LoadReportInterval: durationpb.New(10 * time.Second)}
			for _, zone := range benchZones {
				cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &v3endpointpb.UpstreamLocalityStats{
					Locality:            &v3corepb.Locality{Region: "r1", Zone: zone},
					TotalIssuedRequests: 1000, TotalSuccessfulRequests: 990, TotalErrorRequests: 10, TotalRequestsInProgress: 3,
				})
			}
			bt.reports = append(bt.reports, cs)
			bt.streams = append(bt.streams, tab.NewStream())
		}
	}
	bt.snap = store.Snapshot()
	return bt
}

// record records one cycle's reports at now.
func (bt *benchTable) record(tab *Table, now time.Time) {
	for j, cs := range bt.reports {
		zone := benchZones[j%3]
		tab.Record(bt.streams[j], Node{Zone: zone, Label: zone, Cluster: "client"}, cs, now, bt.snap, nil)
	}
}

var benchSizes = []int{5_000, 25_000, 50_000}

// BenchmarkTableRecord is recording one cycle's LRS reports (3 per
// service, each to 3 zones) into a table that holds the previous cycles'
// at 5,000, 25,000 and 50,000 services. A table that looked at every
// sample now and then (to drop the stale) made this quadratic in the
// services; ns/report must stay flat as they grow.
//
//	go test -run '^$' -bench BenchmarkTableRecord -benchtime 3x ./load/
func BenchmarkTableRecord(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			tab := NewTable(5 * time.Minute)
			bt := newBenchTable(b, tab, n)
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			bt.record(tab, now) // the previous cycle's samples are there
			b.ReportAllocs()
			b.ResetTimer()
			cycles := 0
			for b.Loop() {
				now = now.Add(10 * time.Second)
				bt.record(tab, now)
				cycles++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(cycles*len(bt.reports)), "ns/report")
		})
	}
}

// BenchmarkTableLoads is reading every flow of a table holding one
// cycle's reports (9 flows per service) at 5,000, 25,000 and 50,000
// services: the read the weights planner makes every cycle (B/op over
// the services is what it allocates per service).
//
//	go test -run '^$' -bench BenchmarkTableLoads -benchtime 3x ./load/
func BenchmarkTableLoads(b *testing.B) {
	for _, n := range benchSizes {
		tab := NewTable(5 * time.Minute)
		bt := newBenchTable(b, tab, n)
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		bt.record(tab, now)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := tab.Loads("", now); len(got) != 9*n {
					b.Fatalf("%d flows, want %d", len(got), 9*n)
				}
			}
		})
	}
}

// BenchmarkTableAppendLoads is BenchmarkTableLoads into a buffer kept
// between reads, as the weights planner reads (weights.LoadAppender).
//
//	go test -run '^$' -bench BenchmarkTableAppendLoads -benchtime 3x ./load/
func BenchmarkTableAppendLoads(b *testing.B) {
	for _, n := range benchSizes {
		tab := NewTable(5 * time.Minute)
		bt := newBenchTable(b, tab, n)
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		bt.record(tab, now)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			buf := tab.AppendLoads(nil, now)
			b.ReportAllocs()
			for b.Loop() {
				if buf = tab.AppendLoads(buf[:0], now); len(buf) != 9*n {
					b.Fatalf("%d flows, want %d", len(buf), 9*n)
				}
			}
		})
	}
}

package exchange

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillway/spillway/load"
)

// BenchmarkMergedLoads is the owner planner's read of the merged load
// each cycle: every service's flows (3 client zones to 3 zones) from 3
// senders, at the owner's share (a third) of issue 31's region at 10%,
// 50% and 100% (5,000, 25,000 and 50,000 services). "loads" is
// Loads("", now), a new slice each call; "append" is AppendLoads into
// the buffer of the previous call, as weights' planner reads it.
//
//	go test -run '^$' -bench BenchmarkMergedLoads -benchmem ./replica/exchange/
func BenchmarkMergedLoads(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	zones := []string{"zone-a", "zone-b", "zone-c"}
	for _, total := range []int{5_000, 25_000, 50_000} {
		owned := total / 3
		m := NewMerged(MergedConfig{Now: func() time.Time { return now }})
		for r := range 3 {
			for lo := 0; lo < owned; lo += MaxServices {
				addBenchServices(b, m, r, now, zones, lo, min(lo+MaxServices, owned))
			}
		}
		b.Run(fmt.Sprintf("services=%d/loads", owned), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := m.Loads("", now); len(got) != 9*owned {
					b.Fatalf("flows = %d, want %d", len(got), 9*owned)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(owned), "ns/service")
		})
		b.Run(fmt.Sprintf("services=%d/append", owned), func(b *testing.B) {
			var buf []load.Load
			b.ReportAllocs()
			for b.Loop() {
				if buf = m.AppendLoads(buf[:0], now); len(buf) != 9*owned {
					b.Fatalf("flows = %d, want %d", len(buf), 9*owned)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(owned), "ns/service")
		})
	}
}

// addBenchServices adds sender r's summary of services lo..hi-1 (one
// message's worth at most).
func addBenchServices(b *testing.B, m *Merged, r int, now time.Time, zones []string, lo, hi int) {
	s := load.Summary{Replica: fmt.Sprintf("r%d", r+1), At: now, Interval: 10 * time.Second}
	for i := lo; i < hi; i++ {
		ss := load.ServiceSummary{Service: fmt.Sprintf("svc-%05d", i)}
		for _, cz := range zones {
			for _, z := range zones {
				ss.Flows = append(ss.Flows, flow(cz, z, 10, 1, now.Add(-time.Second)))
			}
		}
		s.Services = append(s.Services, ss)
	}
	if err := m.Add(s, now); err != nil {
		b.Fatal(err)
	}
}

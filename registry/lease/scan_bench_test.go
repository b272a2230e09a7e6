package lease

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

// regionManager is a Manager holding n leases of 20 endpoints per
// service, adopted as a replica's first sync adopts them, each
// heartbeated here once (so each has a local stamp).
func regionManager(b *testing.B, n int) *Manager {
	b.Helper()
	m, err := New(Config{Store: registry.NewStore(), Storage: systemstore.NewMemory()})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Adoption, n)
	ids := make([]string, n)
	for i := range batch {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		e := registry.Endpoint{ID: registry.DefaultEndpointID(a, 8080), Address: a, Ports: []registry.Port{{Name: "grpc", Number: 8080}}}
		ids[i] = fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
		batch[i] = Adoption{Rec: systemstore.Record{LeaseID: ids[i], Service: fmt.Sprintf("svc-%05d", i/20), TTL: 30 * time.Second, Endpoint: e}, Rev: int64(i + 1)}
	}
	if errs := m.AdoptBatch(batch); len(errs) != 0 {
		b.Fatal(errs[0])
	}
	for _, id := range ids {
		if _, err := m.Heartbeat(id); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

// BenchmarkExpireScan: one expiry round over n live leases, none due,
// as every tick of Run does it (the region holds 1,000,000 on a replica).
func BenchmarkExpireScan(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			m := regionManager(b, n)
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				m.expire(ctx, time.Now())
			}
			if m.Len() != n {
				b.Fatalf("%d leases left of %d", m.Len(), n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
		})
	}
}

// BenchmarkLocalStamps: one walk of every lease's local stamp, as each
// last-seen flush (every TTL/3) does.
func BenchmarkLocalStamps(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			m := regionManager(b, n)
			b.ResetTimer()
			for b.Loop() {
				got := 0
				m.LocalStamps(func(Stamp) { got++ })
				if got != n {
					b.Fatalf("%d stamps of %d", got, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
		})
	}
}

package registry

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
)

func bigStore(b *testing.B, endpoints int) *Store {
	s := NewStore()
	ops := make([]Op, 0, endpoints)
	for i := range endpoints {
		e := validEndpoint()
		e.ID = fmt.Sprintf("e%05d", i)
		e.Address = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		e.Locality.Zone = fmt.Sprintf("zone-%d", i%3)
		ops = append(ops, Upsert("big", e))
	}
	if _, err := s.Apply(ops...); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSnapshotRead reads a whole service from the current snapshot; the
// read path must not allocate.
func BenchmarkSnapshotRead(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s := bigStore(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					svc, ok := s.Snapshot().Service("big")
					if !ok || len(svc.Endpoints) != n {
						b.Fatal("wrong service")
					}
				}
			})
		})
	}
}

// BenchmarkWrite upserts one changed endpoint per write into a service of
// the given size, with 1,000 other services in the store.
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s := bigStore(b, n)
			for i := range 1000 {
				if _, err := s.Apply(Declare(fmt.Sprintf("other-%d", i))); err != nil {
					b.Fatal(err)
				}
			}
			var ctr atomic.Uint32
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				e := validEndpoint()
				e.ID = fmt.Sprintf("e%05d", ctr.Add(1)%uint32(n))
				for pb.Next() {
					e.Weight = e.Weight%1000 + 1
					if _, err := s.Apply(Upsert("big", e)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}

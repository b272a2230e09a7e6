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

// BenchmarkWriteManyServices is one registration (a new endpoint, then
// its removal: two writes) into a 20-endpoint service with as many other
// services in the store as a region holds per replica (issue 31: 50,000),
// the write a churn of registrations makes. A write copies the shard map
// its service is in (services/256 entries) and the service's endpoints.
func BenchmarkWriteManyServices(b *testing.B) {
	for _, services := range []int{1000, 50000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			s := NewStore()
			ops := make([]Op, 0, services*20)
			for i := range services {
				for j := range 20 {
					e := validEndpoint()
					e.ID = fmt.Sprintf("e%02d", j)
					e.Address = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(j)})
					ops = append(ops, Upsert(fmt.Sprintf("svc-%05d", i), e))
				}
			}
			if _, err := s.Apply(ops...); err != nil {
				b.Fatal(err)
			}
			e := validEndpoint()
			e.ID = "churn"
			e.Address = netip.MustParseAddr("11.0.0.1")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				svc := fmt.Sprintf("svc-%05d", i%services)
				i++
				if _, err := s.Apply(Upsert(svc, e)); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Apply(Remove(svc, "churn", e.Source)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyBatch is one batch that adds n services of 20 endpoints
// each, as a static file's load or a lease restore at startup does
// (issue 31's region: 50,000 services, 1,000,000 endpoints).
func BenchmarkApplyBatch(b *testing.B) {
	for _, services := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			ops := make([]Op, 0, services*20)
			for i := range services {
				for j := range 20 {
					e := validEndpoint()
					e.ID = fmt.Sprintf("e%02d", j)
					e.Address = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(j)})
					ops = append(ops, Upsert(fmt.Sprintf("svc-%05d", i), e))
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewStore().Apply(ops...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*services*20), "ns/endpoint")
		})
	}
}

package systemstore_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/spillway/spillway/registry"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func rec(i int) systemstore.Record {
	return systemstore.Record{
		LeaseID: fmt.Sprintf("lease-%d", i),
		Service: "web",
		TTL:     30 * time.Second,
		Endpoint: registry.Endpoint{
			ID:         fmt.Sprintf("e%03d", i),
			Address:    netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", i+1)),
			Ports:      []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality:   registry.Locality{Region: "r", Zone: "z", SubZone: "s"},
			Health:     registry.Draining,
			Weight:     7,
			Metadata:   map[string]string{"k": "v"},
			Source:     registry.SourceVM,
			Registered: time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC),
			LastSeen:   time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC),
		},
	}
}

var addrEq = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

type storage interface {
	Put(context.Context, systemstore.Record) error
	Delete(context.Context, string) error
	List(context.Context) ([]systemstore.Record, error)
	Close() error
}

// TestConformance runs one suite over every implementation.
func TestConformance(t *testing.T) {
	impls := map[string]func(t *testing.T) storage{
		"memory": func(*testing.T) storage { return systemstore.NewMemory() },
		"bolt": func(t *testing.T) storage {
			b, err := boltstore.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	for name, open := range impls {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			defer s.Close()
			var wg sync.WaitGroup
			for i := range 50 {
				wg.Go(func() {
					if err := s.Put(ctx, rec(i)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			r := rec(3)
			r.LeaseID = "replaced"
			if err := s.Put(ctx, r); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, systemstore.Key("web", "e004")); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, systemstore.Key("web", "missing")); err != nil {
				t.Errorf("Delete of a missing key: %v, want nil", err)
			}
			got, err := s.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 49 {
				t.Fatalf("List = %d records, want 49", len(got))
			}
			if diff := cmp.Diff(rec(0), got[0], addrEq); diff != "" {
				t.Errorf("record 0 round trip (-want +got):\n%s", diff)
			}
			if got[3].LeaseID != "replaced" {
				t.Errorf("record 3 lease = %q, want replaced", got[3].LeaseID)
			}
		})
	}
}

func TestBoltSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b, err := boltstore.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, rec(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := boltstore.OpenStore(dir); err == nil {
		t.Error("second boltstore.OpenStore on a held data dir succeeded, want an error")
	}
	b.Close()
	b2, err := boltstore.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	got, err := b2.List(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("after reopen: %d records, %v", len(got), err)
	}
	if diff := cmp.Diff(rec(1), got[0], addrEq); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func BenchmarkBoltPut(b *testing.B) {
	s, err := boltstore.OpenStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	n := 0
	b.SetParallelism(16) // registrations arrive concurrently; Batch shares fsyncs
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			n++
			r := rec(n)
			mu.Unlock()
			if err := s.Put(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}

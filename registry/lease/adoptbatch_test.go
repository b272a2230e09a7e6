package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

// TestAdoptBatchIsAdopt: AdoptBatch leaves the lease set and the
// registry as Adopt of each record in turn does, and refuses the same
// records: revisions order them, a newer lease replaces, the same lease
// at a newer revision rewrites the endpoint, invalid records and an
// endpoint another source holds are skipped without losing the rest of
// their chunk.
func TestAdoptBatchIsAdopt(t *testing.T) {
	weighted := func(lid string, i int, w uint32) systemstore.Record {
		r := record(lid, i, time.Minute)
		r.Endpoint.Weight = w
		return r
	}
	many := func(n int) []Adoption {
		out := make([]Adoption, n)
		for i := range out {
			out[i] = Adoption{Rec: record(fmt.Sprintf("l%05d", i), i, time.Minute), Rev: int64(i + 10)}
		}
		return out
	}
	static := &registry.Endpoint{ID: registry.DefaultEndpointID(vmEndpoint(3).Address, 8080), Address: vmEndpoint(3).Address, Ports: vmEndpoint(3).Ports, Source: registry.SourceStatic}
	tests := []struct {
		name    string
		held    []Adoption // adopted one by one first
		static  bool       // endpoint 3 of "vm" is the static source's
		batch   []Adoption
		wantErr int
	}{
		{name: "fresh", batch: many(10)},
		{name: "more_than_a_chunk", batch: many(2*adoptChunk + 7)},
		{name: "older_revision_skipped", held: []Adoption{{record("l2", 1, time.Minute), 7}}, batch: []Adoption{{record("l1", 1, time.Minute), 5}}},
		{name: "newer_lease_replaces", held: []Adoption{{record("l1", 1, time.Minute), 5}}, batch: []Adoption{{record("l2", 1, time.Minute), 7}}},
		{name: "same_lease_rewritten", held: []Adoption{{weighted("l1", 1, 10), 5}}, batch: []Adoption{{weighted("l1", 1, 20), 9}}},
		{name: "same_revision_again", held: []Adoption{{weighted("l1", 1, 10), 5}}, batch: []Adoption{{weighted("l1", 1, 20), 5}}},
		{name: "invalid_skipped", batch: append(many(5), Adoption{record("", 9, time.Minute), 99}, Adoption{record("l9", 8, 0), 100}), wantErr: 2},
		{name: "other_source_skipped", static: true, batch: many(8), wantErr: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			one, batch := newFixture(t, Config{}), newFixture(t, Config{})
			for _, f := range []*fixture{one, batch} {
				if tt.static {
					if _, err := f.store.Apply(registry.Upsert("vm", static.Clone())); err != nil {
						t.Fatal(err)
					}
				}
				for _, a := range tt.held {
					if err := f.m.Adopt(a.Rec, a.Rev, time.Time{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			oneErrs := 0
			for _, a := range tt.batch {
				if one.m.Adopt(a.Rec, a.Rev, time.Time{}) != nil {
					oneErrs++
				}
			}
			errs := batch.m.AdoptBatch(tt.batch)
			if len(errs) != tt.wantErr || oneErrs != tt.wantErr {
				t.Errorf("AdoptBatch refused %d (%v), Adopt one by one %d; want %d", len(errs), errs, oneErrs, tt.wantErr)
			}
			if diff := cmp.Diff(one.m.Keys(), batch.m.Keys()); diff != "" {
				t.Errorf("Keys (-one by one +batch):\n%s", diff)
			}
			if diff := cmp.Diff(leaseIDs(one.m), leaseIDs(batch.m)); diff != "" {
				t.Errorf("leases (-one by one +batch):\n%s", diff)
			}
			if diff := cmp.Diff(served(one.store), served(batch.store)); diff != "" {
				t.Errorf("served (-one by one +batch):\n%s", diff)
			}
			if batch.m.Len() != one.m.Len() {
				t.Errorf("Len = %d, want %d", batch.m.Len(), one.m.Len())
			}
		})
	}
}

// TestAdoptBatchGrace: a lease adopted in a batch has one TTL from now to
// be heartbeated, and a heartbeat renews it.
func TestAdoptBatchGrace(t *testing.T) {
	f := newFixture(t, Config{})
	before := time.Now()
	if errs := f.m.AdoptBatch([]Adoption{{record("l1", 1, time.Minute), 3}}); len(errs) != 0 {
		t.Fatal(errs)
	}
	f.m.mu.RLock()
	l := f.m.leases["l1"]
	f.m.mu.RUnlock()
	if l == nil {
		t.Fatal("lease l1 not held")
	}
	if d := time.Unix(0, l.deadline.Load()); d.Before(before.Add(time.Minute)) {
		t.Errorf("deadline %v, want at least one TTL after %v", d, before)
	}
	if ttl, err := f.m.Heartbeat("l1"); err != nil || ttl != time.Minute {
		t.Errorf("Heartbeat = %v, %v; want 1m, nil", ttl, err)
	}
}

// leaseIDs maps each held key to its lease id.
func leaseIDs(m *Manager) map[string]string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[string]string{}
	for k, l := range m.byKey {
		out[k] = l.id
		if m.leases[l.id] != l {
			out[k] += " (not in leases)"
		}
	}
	if len(m.leases) != len(m.byKey) {
		out["!len"] = fmt.Sprintf("%d leases, %d keys", len(m.leases), len(m.byKey))
	}
	if err := allMatchesLocked(m); err != nil {
		out["!all"] = err.Error()
	}
	return out
}

// allMatchesLocked says how Manager.all differs from Manager.leases, or
// nil when it holds each of them once, at its idx; the caller holds mu.
func allMatchesLocked(m *Manager) error {
	if len(m.all) != len(m.leases) {
		return fmt.Errorf("all has %d leases, leases %d", len(m.all), len(m.leases))
	}
	for i, l := range m.all {
		if l.idx != i {
			return fmt.Errorf("all[%d] is lease %s with idx %d", i, l.id, l.idx)
		}
		if m.leases[l.id] != l {
			return fmt.Errorf("all[%d] is lease %s, which leases does not hold", i, l.id)
		}
	}
	return nil
}

// served is every endpoint of every service the store serves, as text.
func served(s *registry.Store) map[string]string {
	snap := s.Snapshot()
	out := map[string]string{}
	for _, name := range snap.Services() {
		svc, _ := snap.Service(name)
		for _, e := range svc.Endpoints {
			out[name+"/"+e.ID] = fmt.Sprintf("%s %v w%d %s", e.Address, e.Ports, e.Weight, e.Source)
		}
	}
	return out
}

// BenchmarkAdopt: a replica's first sync of n registrations, one Adopt
// each against one AdoptBatch.
func BenchmarkAdopt(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		batch := make([]Adoption, n)
		for i := range batch {
			r := record(fmt.Sprintf("l%06d", i), i, time.Minute)
			r.Service = fmt.Sprintf("svc-%04d", i/20)
			batch[i] = Adoption{Rec: r, Rev: int64(i + 1)}
		}
		b.Run(fmt.Sprintf("one_by_one/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m, err := New(Config{Store: registry.NewStore(), Storage: systemstore.NewMemory()})
				if err != nil {
					b.Fatal(err)
				}
				for _, a := range batch {
					if err := m.Adopt(a.Rec, a.Rev, time.Time{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
		b.Run(fmt.Sprintf("batch/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m, err := New(Config{Store: registry.NewStore(), Storage: systemstore.NewMemory()})
				if err != nil {
					b.Fatal(err)
				}
				if errs := m.AdoptBatch(batch); len(errs) != 0 {
					b.Fatal(errs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}

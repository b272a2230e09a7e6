package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ep(id string, n byte, zone string) *Endpoint {
	e := validEndpoint()
	e.ID = id
	e.Address = netip.AddrFrom4([4]byte{10, 0, 0, n})
	e.Locality.Zone = zone
	return e
}

func ids(s *Service) []string {
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.ID)
	}
	return out
}

func TestStoreUnknownVersusEmpty(t *testing.T) {
	s := NewStore()
	if _, ok := s.Snapshot().Service("web"); ok {
		t.Fatal("Service(web) on an empty store: ok = true, want false")
	}
	mustApply(t, s, Upsert("web", ep("a", 1, "z1")))
	mustApply(t, s, Remove("web", "a", SourceVM))
	svc, ok := s.Snapshot().Service("web")
	if !ok {
		t.Fatal("Service(web) after removing its last endpoint: ok = false, want true (known, zero endpoints)")
	}
	if len(svc.Endpoints) != 0 {
		t.Errorf("endpoints = %v, want none", ids(svc))
	}
	mustApply(t, s, Declare("empty"))
	if svc, ok := s.Snapshot().Service("empty"); !ok || len(svc.Endpoints) != 0 {
		t.Errorf("Declare(empty): Service = %v, %v; want known with zero endpoints", svc, ok)
	}
	mustApply(t, s, Forget("empty"))
	if _, ok := s.Snapshot().Service("empty"); ok {
		t.Error("Forget(empty): service still known")
	}
}

func mustApply(t *testing.T, s *Store, ops ...Op) uint64 {
	t.Helper()
	v, err := s.Apply(ops...)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return v
}

func TestStoreApply(t *testing.T) {
	s := NewStore()
	v1 := mustApply(t, s, Upsert("web", ep("b", 2, "z1")), Upsert("web", ep("a", 1, "z1")), Upsert("db", ep("a", 3, "z2")))
	if v1 != 1 {
		t.Errorf("version after first batch = %d, want 1", v1)
	}
	snap := s.Snapshot()
	if got, want := snap.Services(), []string{"db", "web"}; !cmp.Equal(got, want) {
		t.Errorf("Services = %v, want %v", got, want)
	}
	web, _ := snap.Service("web")
	if got, want := ids(web), []string{"a", "b"}; !cmp.Equal(got, want) {
		t.Errorf("web endpoints = %v, want %v (sorted)", got, want)
	}
	if snap.EndpointCount() != 3 {
		t.Errorf("EndpointCount = %d, want 3", snap.EndpointCount())
	}

	// Equal content is not a change.
	if v := mustApply(t, s, Upsert("web", ep("a", 1, "z1"))); v != v1 {
		t.Errorf("re-upsert of equal endpoint: version %d, want unchanged %d", v, v1)
	}
	// LastSeen alone is not a change either.
	e := ep("a", 1, "z1")
	e.LastSeen = time.Now()
	if v := mustApply(t, s, Upsert("web", e)); v != v1 {
		t.Errorf("upsert differing only in LastSeen: version %d, want unchanged %d", v, v1)
	}

	// A failing batch changes nothing.
	other := ep("a", 1, "z1")
	other.Source = SourceKubernetes
	_, err := s.Apply(Upsert("web", ep("c", 4, "z1")), Upsert("web", other))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("upsert over another source's endpoint: err = %v, want ErrConflict", err)
	}
	if s.Snapshot() != snap {
		t.Error("failed batch published a new snapshot")
	}
	if _, err := s.Apply(Remove("web", "zz", SourceVM)); !errors.Is(err, ErrNotFound) {
		t.Errorf("remove missing: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Apply(Remove("web", "a", SourceStatic)); !errors.Is(err, ErrConflict) {
		t.Errorf("remove by wrong source: err = %v, want ErrConflict", err)
	}
	bad := ep("a", 1, "z1")
	bad.Weight = 0
	bad.Ports[0].Number = 0
	if _, err := s.Apply(Upsert("web", bad)); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid endpoint: err = %v, want ErrInvalid", err)
	}
	if _, err := s.Apply(Upsert("Bad_Name", ep("a", 1, "z1"))); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid service: err = %v, want ErrInvalid", err)
	}
	if s.Snapshot().Version() != v1 {
		t.Errorf("version after rejected writes = %d, want %d", s.Snapshot().Version(), v1)
	}

	// The old snapshot is untouched by later writes.
	mustApply(t, s, Remove("web", "a", SourceVM))
	if got := ids(web); !cmp.Equal(got, []string{"a", "b"}) {
		t.Errorf("old snapshot changed: %v", got)
	}
	if web2, _ := s.Snapshot().Service("web"); !cmp.Equal(ids(web2), []string{"b"}) {
		t.Errorf("new snapshot web = %v, want [b]", ids(web2))
	}
	// The store keeps its own copy of what it was given.
	in := ep("k", 9, "z9")
	mustApply(t, s, Upsert("copy", in))
	in.Ports[0].Number = 1
	in.Metadata["version"] = "changed"
	got, _ := s.Snapshot().Service("copy")
	if got.Endpoints[0].Ports[0].Number != 8080 || got.Endpoints[0].Metadata["version"] != "v1" {
		t.Error("store shares memory with the caller's endpoint")
	}
}

func TestSubscription(t *testing.T) {
	s := NewStore()
	mustApply(t, s, Upsert("web", ep("a", 1, "z1")))
	all := s.Subscribe("")
	defer all.Close()
	one := s.Subscribe("db")
	defer one.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, names, err := all.Next(ctx)
	if err != nil || !cmp.Equal(names, []string{"web"}) {
		t.Fatalf("initial Next = %v, %v; want [web]", names, err)
	}
	_, names, err = one.Next(ctx)
	if err != nil || !cmp.Equal(names, []string{"db"}) {
		t.Fatalf("initial Next(db) = %v, %v; want [db]", names, err)
	}
	mustApply(t, s, Upsert("web", ep("b", 2, "z1")))
	mustApply(t, s, Upsert("db", ep("a", 3, "z1")))
	snap, names, err := all.Next(ctx)
	if err != nil || !cmp.Equal(names, []string{"db", "web"}) {
		t.Fatalf("Next after two writes = %v, %v; want [db web] coalesced", names, err)
	}
	if snap.Version() != 3 {
		t.Errorf("snapshot version = %d, want 3", snap.Version())
	}
	_, names, err = one.Next(ctx)
	if err != nil || !cmp.Equal(names, []string{"db"}) {
		t.Fatalf("Next(db) = %v, %v; want [db] only", names, err)
	}
	if one.Pending() != 0 {
		t.Errorf("Pending = %d after reading, want 0", one.Pending())
	}
	one.Close()
	mustApply(t, s, Upsert("db", ep("b", 4, "z1")))
	if one.Pending() != 0 {
		t.Errorf("closed subscription collected %d changes", one.Pending())
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	all.Changed()
	if _, _, err := all.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next on cancelled ctx = %v, want context.Canceled", err)
	}
}

// TestConcurrentWritersReaders: 32 writers and 32 readers, and a subscriber
// that is deliberately slow. Run with -race. The slow subscriber must end on
// exactly the final state and never hold more than one entry per service.
func TestConcurrentWritersReaders(t *testing.T) {
	const (
		writers  = 32
		readers  = 32
		services = 16
		perWrite = 400 // writes per writer: bounded in count...
	)
	deadline := time.Now().Add(3 * time.Second) // ...and in time
	s := NewStore()
	sub := s.Subscribe("")
	defer sub.Close()

	var maxPending int
	var mirror = map[string][]string{}
	stop := make(chan struct{})
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		for {
			select {
			case <-sub.C():
			case <-stop:
				// Drain what is left, then stop.
			}
			if p := sub.Pending(); p > maxPending {
				maxPending = p
			}
			names := sub.Changed()
			snap := s.Snapshot()
			for _, n := range names {
				svc, ok := snap.Service(n)
				if !ok {
					delete(mirror, n)
					continue
				}
				mirror[n] = ids(svc)
			}
			select {
			case <-stop:
				if sub.Pending() == 0 {
					return
				}
			default:
				time.Sleep(5 * time.Millisecond) // the deliberate slowness
			}
		}
	}()

	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < perWrite && time.Now().Before(deadline); i++ {
				svc := fmt.Sprintf("svc-%d", (w+i)%services)
				id := fmt.Sprintf("w%d-e%d", w, i%8)
				var err error
				if i%3 == 2 {
					_, err = s.Apply(Remove(svc, id, SourceVM))
					if errors.Is(err, ErrNotFound) {
						err = nil
					}
				} else {
					_, err = s.Apply(Upsert(svc, ep(id, byte(w), fmt.Sprintf("z%d", i%3))))
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	var readErrs sync.Map
	for r := range readers {
		wg.Go(func() {
			var last uint64
			for i := 0; i < perWrite*4 && time.Now().Before(deadline); i++ {
				snap := s.Snapshot()
				if snap.Version() < last {
					readErrs.Store(r, fmt.Sprintf("version went back from %d to %d", last, snap.Version()))
					return
				}
				last = snap.Version()
				n := 0
				for _, name := range snap.Services() {
					svc, _ := snap.Service(name)
					n += len(svc.Endpoints)
					for j := 1; j < len(svc.Endpoints); j++ {
						if svc.Endpoints[j-1].ID >= svc.Endpoints[j].ID {
							readErrs.Store(r, "endpoints not sorted")
							return
						}
					}
				}
				if n != snap.EndpointCount() {
					readErrs.Store(r, fmt.Sprintf("snapshot %d: counted %d endpoints, EndpointCount %d", snap.Version(), n, snap.EndpointCount()))
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-slowDone
	readErrs.Range(func(k, v any) bool {
		t.Errorf("reader %v: %v", k, v)
		return true
	})

	final := s.Snapshot()
	want := map[string][]string{}
	for _, n := range final.Services() {
		svc, _ := final.Service(n)
		want[n] = ids(svc)
	}
	if diff := cmp.Diff(want, mirror); diff != "" {
		t.Errorf("slow subscriber's final state differs from the store (-store +subscriber):\n%s", diff)
	}
	if maxPending > services {
		t.Errorf("slow subscriber queued %d entries, want at most one per service (%d)", maxPending, services)
	}
	t.Logf("store version %d, %d writes, slow subscriber max pending %d", final.Version(), s.Writes(), maxPending)
}

func TestFlagsAndNamesVersion(t *testing.T) {
	s := NewStore()
	if _, ok := s.Snapshot().Flag(FlagXDS); ok {
		t.Error("xds flag set on a new store")
	}
	sub := s.Subscribe("")
	defer sub.Close()
	sub.Changed()
	mustApply(t, s, SetFlag(FlagXDS, "off"))
	if v, _ := s.Snapshot().Flag(FlagXDS); v != "off" {
		t.Errorf("xds flag = %q, want off", v)
	}
	if got := sub.Changed(); !cmp.Equal(got, []string{FlagsChanged}) {
		t.Errorf("subscription saw %v, want [%s]", got, FlagsChanged)
	}
	v := s.Snapshot().Version()
	if got := mustApply(t, s, SetFlag(FlagXDS, "off")); got != v {
		t.Error("setting a flag to its value bumped the version")
	}
	if _, err := s.Apply(SetFlag(FlagXDS, "maybe")); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad flag value: %v, want ErrInvalid", err)
	}
	if _, err := s.Apply(SetFlag("color", "red")); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown flag: %v, want ErrInvalid", err)
	}

	n0 := s.Snapshot().NamesVersion()
	mustApply(t, s, Upsert("web", ep("a", 1, "z1")))
	n1 := s.Snapshot().NamesVersion()
	if n1 == n0 {
		t.Error("adding a service did not change NamesVersion")
	}
	mustApply(t, s, Upsert("web", ep("b", 2, "z1")))
	if s.Snapshot().NamesVersion() != n1 {
		t.Error("adding an endpoint changed NamesVersion")
	}
	mustApply(t, s, Remove("web", "a", SourceVM), Remove("web", "b", SourceVM), Forget("web"))
	if s.Snapshot().NamesVersion() == n1 {
		t.Error("forgetting a service did not change NamesVersion")
	}
	if v, _ := s.Snapshot().Flag(FlagXDS); v != "off" {
		t.Error("flag lost by later writes")
	}
}

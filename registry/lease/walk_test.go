package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
)

// TestWalksSeeEveryLease: whatever mix of registrations,
// deregistrations, adoptions (new leases, replacements, rewrites), drops
// and expiries changes the lease set, the walks of every lease (expiry's
// and LocalStamps') see each live lease exactly once and nothing else.
func TestWalksSeeEveryLease(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			f := newFixture(t, Config{GuardShare: 1})
			rng := rand.New(rand.NewPCG(seed, 0))
			ctx := context.Background()
			rev := int64(1)
			for step := range 3000 {
				i := rng.IntN(200) // endpoint i of service "vm"
				var what string
				switch op := rng.IntN(6); op {
				case 0, 1:
					what = "register"
					if _, err := f.m.Register(ctx, "vm", vmEndpoint(i), time.Minute); err != nil {
						t.Fatalf("step %d: register %d: %v", step, i, err)
					}
				case 2:
					what = "deregister"
					if id, ok := liveLease(f.m, i); ok {
						if _, err := f.m.Deregister(ctx, id); err != nil {
							t.Fatalf("step %d: deregister %s: %v", step, id, err)
						}
					}
				case 3:
					what = "adopt"
					rev++
					// A lease id names one endpoint's lease (they are
					// random): a new one, or sometimes the one it holds.
					lid := fmt.Sprintf("a%d-%d", i, rng.IntN(1000))
					if id, ok := liveLease(f.m, i); ok && rng.IntN(2) == 0 {
						lid = id
					}
					if err := f.m.Adopt(record(lid, i, time.Minute), rev, time.Time{}); err != nil {
						t.Fatalf("step %d: adopt %s: %v", step, lid, err)
					}
				case 4:
					what = "drop"
					rev++
					r := record("", i, 0)
					if err := f.m.Drop(r.Key(), rev); err != nil {
						t.Fatalf("step %d: drop %d: %v", step, i, err)
					}
				case 5:
					what = "expire"
					// Half a minute later a lease not renewed since is
					// due: expire those of a few endpoints.
					for range 3 {
						if id, ok := liveLease(f.m, rng.IntN(200)); ok {
							f.m.mu.RLock()
							l := f.m.leases[id]
							f.m.mu.RUnlock()
							l.deadline.Store(time.Now().Add(-time.Second).UnixNano())
						}
					}
					f.m.expire(ctx, time.Now())
				}
				f.m.mu.RLock()
				err := allMatchesLocked(f.m)
				want := make([]string, 0, len(f.m.leases))
				for id, l := range f.m.leases {
					if l.localSeen.Load() != 0 { // heartbeated or registered here
						want = append(want, id)
					}
				}
				f.m.mu.RUnlock()
				if err != nil {
					t.Fatalf("step %d, after %s: %v", step, what, err)
				}
				var got []string
				f.m.LocalStamps(func(s Stamp) { got = append(got, s.LeaseID) })
				sort.Strings(got)
				sort.Strings(want)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("step %d, after %s: LocalStamps walks %d leases %v, the set holds %d stamped here %v", step, what, len(got), got, len(want), want)
				}
			}
			if f.m.Len() == 0 {
				t.Fatal("no lease left at the end: the mix exercised nothing")
			}
		})
	}
}

// liveLease is the lease that holds endpoint i of service "vm" on m.
func liveLease(m *Manager, i int) (string, bool) {
	e := vmEndpoint(i)
	_, id, ok := m.LastSeen("vm", registry.DefaultEndpointID(e.Address, 8080))
	return id, ok
}

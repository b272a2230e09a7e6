package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/spillway/spillway/registry"
)

// TestClientCountsKeptInStep: whatever streams come, go, change what
// they want or move zone, ClientCounts equals a count of every stream of
// every service by its zone, made from the hub's maps; and a map it
// handed out earlier does not change.
func TestClientCountsKeptInStep(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s, err := New(Config{Store: registry.NewStore()})
			if err != nil {
				t.Fatal(err)
			}
			h := &s.hub
			rng := rand.New(rand.NewPCG(seed, 0))
			zones := []string{"", "zone-a", "zone-b", "zone-c"}
			var ws []*watcher
			var held map[string]map[string]int // an earlier answer
			var heldCopy map[string]map[string]int
			for step := range 4000 {
				switch op := rng.IntN(10); {
				case op < 2 || len(ws) == 0: // a new stream
					w := &watcher{wake: func(bool) {}}
					ws = append(ws, w)
					h.setNames(w, randomNames(rng), rng.IntN(8) == 0, nodeInfo{zone: zones[rng.IntN(len(zones))]})
				case op < 6: // a stream asks again, mostly for the same
					w := ws[rng.IntN(len(ws))]
					h.mu.Lock()
					names, node := maps.Clone(w.names), h.nodes[w]
					h.mu.Unlock()
					if rng.IntN(3) == 0 {
						names = randomNames(rng)
					}
					if rng.IntN(10) == 0 {
						node.zone = zones[rng.IntN(len(zones))]
					}
					h.setNames(w, names, false, node)
				case op < 8: // a stream ends
					i := rng.IntN(len(ws))
					h.remove(ws[i])
					ws = append(ws[:i], ws[i+1:]...)
				default: // the planner reads the counts
					if held != nil && !equalCounts(held, heldCopy) {
						t.Fatalf("step %d: a map ClientCounts returned earlier changed: %v, was %v", step, held, heldCopy)
					}
					held = s.ClientCounts()
					heldCopy = maps.Clone(held)
					for n, m := range held {
						heldCopy[n] = maps.Clone(m)
					}
				}
				if got, want := s.ClientCounts(), recount(h); !equalCounts(got, want) {
					t.Fatalf("step %d: ClientCounts %v, the streams count %v", step, got, want)
				}
			}
			for _, w := range ws {
				h.remove(w)
			}
			if got := s.ClientCounts(); len(got) != 0 {
				t.Fatalf("every stream ended, ClientCounts still %v", got)
			}
		})
	}
}

// randomNames is up to 3 of 12 services.
func randomNames(rng *rand.Rand) map[string]struct{} {
	out := map[string]struct{}{}
	for range rng.IntN(4) {
		out[fmt.Sprintf("svc-%d", rng.IntN(12))] = struct{}{}
	}
	return out
}

// recount counts every stream of every service by its zone, as
// ClientCounts did before it kept counts.
func recount(h *hub) map[string]map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]map[string]int{}
	for name, ws := range h.by {
		m := map[string]int{}
		for w := range ws {
			m[h.nodes[w].zone]++
		}
		out[name] = m
	}
	return out
}

func equalCounts(a, b map[string]map[string]int) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int) bool { return maps.Equal(x, y) })
}

// BenchmarkClientCounts: the planner's read of every service's streams
// per zone each cycle, at the region's 50,000 streams over 50,000
// services, against counting them afresh as before (recount: the same
// loop ClientCounts ran).
func BenchmarkClientCounts(b *testing.B) {
	s, err := New(Config{Store: registry.NewStore()})
	if err != nil {
		b.Fatal(err)
	}
	zones := []string{"zone-a", "zone-b", "zone-c"}
	for i := range 50_000 {
		w := &watcher{wake: func(bool) {}}
		// Skewed as the region: every tenth stream on one of 100 big
		// services, the rest one each.
		name := fmt.Sprintf("svc-%05d", i)
		if i%10 == 0 {
			name = fmt.Sprintf("svc-%05d", i%1000)
		}
		s.hub.setNames(w, map[string]struct{}{name: {}}, false, nodeInfo{zone: zones[i%3]})
	}
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(s.ClientCounts()) == 0 {
				b.Fatal("no counts")
			}
		}
	})
	b.Run("recount", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(recount(&s.hub)) == 0 {
				b.Fatal("no counts")
			}
		}
	})
}

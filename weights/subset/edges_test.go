package subset

import (
	"math"
	"testing"
)

// shares returns, for every endpoint of locality l, the slot shares the
// slots of zone z give it: each slot holding it adds its weight over the
// slot's weights in l, times the slot's endpoint count in l (1 for an
// endpoint of unit weight). It also checks that every slot's weights in
// l add up to its count there.
func shares(t *testing.T, a *Assignment, in Input, z, l string) (map[string]float64, int) {
	t.Helper()
	inL := map[string]bool{}
	out := map[string]float64{}
	most := 0
	for _, id := range in.Localities[l] {
		inL[id] = true
		out[id] = 0
	}
	for g, n := range a.Groups() {
		if g.Zone != z {
			continue
		}
		for i := range n {
			sub, ws := a.Subset(g, i), a.Weights(g, i)
			if ws != nil && len(ws) != len(sub) {
				t.Fatalf("slot %v/%d: %d weights for %d endpoints", g, i, len(ws), len(sub))
			}
			var sum float64
			k := 0
			for j, id := range sub {
				if !inL[id] {
					continue
				}
				w := 1.0
				if ws != nil {
					w = ws[j]
				}
				if w <= 0 || w > 2 {
					t.Fatalf("slot %v/%d: weight %v of %s out of (0, 2]", g, i, w, id)
				}
				sum += w
				k++
				out[id] += w
			}
			most = max(most, k)
			if math.Abs(sum-float64(k)) > 1e-9 {
				t.Fatalf("slot %v/%d: weights in %s add up to %v, want %d", g, i, l, sum, k)
			}
		}
	}
	return out, most
}

func spread(m map[string]float64) float64 {
	var sum, hi float64
	for _, v := range m {
		sum += v
		hi = max(hi, v)
	}
	return hi / (sum / float64(len(m)))
}

// TestEdgesEvenShares (issue 29 item 3): when M·k is not a multiple of N
// the counts differ by one (max/avg above 1), and the fractional weights
// at the edges give every endpoint the same share of the traffic
// (max/avg 1 to 1e-9) while each slot sends its locality what it did.
// With one endpoint per locality in a slot nothing can move: the counts
// stand. Where the holdings are sparse (few slots per endpoint), a group
// of endpoints below the target may share its slots only among itself,
// and nothing can reach it: the weights then even out what they can and
// never make the spread worse. Dense pairs (4 or more endpoints a slot,
// each held by 4 or more slots) come out even.
func TestEdgesEvenShares(t *testing.T) {
	threeZones := func(m, n, s int) Input {
		return Input{
			Size: s, Mode: Deterministic, Seed: "svc",
			Slots:      map[Group]int{{"r0", "a"}: m, {"r1", "a"}: m / 2, {"r0", "b"}: m, {"r0", "c"}: m / 3},
			Localities: map[string][]string{"a": ids("a", n), "b": ids("b", n+1), "c": ids("c", n/2+1)},
		}
	}
	for _, tc := range []struct {
		name string
		in   Input
		even bool // the counts alone are even
	}{
		{"M7-N10-s3", oneZone(Deterministic, 7, 10, 3), false},
		{"M13-N5-s2", oneZone(Deterministic, 13, 5, 2), false},
		{"M1001-N100-s10", oneZone(Deterministic, 1001, 100, 10), false},
		{"M1000-N100-s10", oneZone(Deterministic, 1000, 100, 10), true},
		{"M200-N40-s8", oneZone(Deterministic, 200, 40, 8), true},
		{"three-zones", threeZones(31, 17, 9), false},
		{"three-zones-dense", threeZones(301, 29, 12), false},
		{"sparse-M10-N17-s3", oneZone(Deterministic, 10, 17, 3), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mustAssign(t, nil, tc.in)
			weighted := false
			for g, n := range a.Groups() {
				for i := range n {
					weighted = weighted || a.Weights(g, i) != nil
				}
			}
			if weighted == tc.even {
				t.Errorf("weights present = %v, want %v", weighted, !tc.even)
			}
			for z := range zonesOf(tc.in) {
				for l := range tc.in.Localities {
					got, k := shares(t, a, tc.in, z, l)
					var total float64
					for _, v := range got {
						total += v
					}
					if total == 0 {
						continue // the zone holds no endpoint of l
					}
					counts := map[string]float64{}
					for id := range got {
						counts[id] = 0
					}
					for g, n := range a.Groups() {
						if g.Zone != z {
							continue
						}
						for i := range n {
							for _, id := range a.Subset(g, i) {
								if _, ok := counts[id]; ok {
									counts[id]++
								}
							}
						}
					}
					least := math.Inf(1)
					for _, c := range counts {
						least = min(least, c)
					}
					switch s, c := spread(got), spread(counts); {
					case k == 1 && s != c:
						// Nothing to move between: the counts stand.
						t.Errorf("zone %s, locality %s, one endpoint a slot: shares max/avg %.6f, want the counts' %.6f", z, l, s, c)
					case k >= 4 && least >= 4 && s > 1+1e-9:
						t.Errorf("zone %s, locality %s: shares max/avg %.6f, want 1 (counts alone %.4f)", z, l, s, c)
					case s > c+1e-9:
						// Few holders: endpoints below the target may
						// share their slots only with each other (slots 0
						// and 8 holding the same two), and no weight can
						// reach them. The weights still never make the
						// spread worse.
						t.Errorf("zone %s, locality %s, some endpoints held once: shares max/avg %.6f, above the counts' %.6f", z, l, s, c)
					}
					t.Logf("zone %s, locality %s: counts max/avg %.4f, weighted shares %.6f", z, l, spread(counts), spread(got))
				}
			}
			again := mustAssign(t, nil, tc.in)
			if !again.Equal(a) {
				t.Error("the same input gave other weights")
			}
		})
	}
	t.Run("one-per-slot", func(t *testing.T) {
		in := oneZone(Deterministic, 7, 3, 1)
		a := mustAssign(t, nil, in)
		for i := range 7 {
			if w := a.Weights(Group{Zone: "a"}, i); w != nil {
				t.Errorf("slot %d weights %v, want none (one endpoint a slot)", i, w)
			}
		}
	})
}

func zonesOf(in Input) map[string]bool {
	out := map[string]bool{}
	for g := range in.Slots {
		out[g.Zone] = true
	}
	return out
}

// TestEdgesFollowIncremental: after a client joins, the weights are
// those of the new holdings (shares even again), as from scratch.
func TestEdgesFollowIncremental(t *testing.T) {
	in := oneZone(Deterministic, 30, 12, 5)
	a := mustAssign(t, nil, in)
	for _, m := range []int{31, 33, 36, 29} {
		in.Slots[Group{Zone: "a"}] = m
		a = mustAssign(t, a, in)
		if got, _ := shares(t, a, in, "a", "a"); spread(got) > 1+1e-9 {
			s := spread(got)
			t.Errorf("%d slots: shares max/avg %.6f, want 1", m, s)
		}
	}
}

package subset

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// ids returns n endpoint ids with prefix.
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// oneZone is M clients in one zone on one replica, N endpoints in one
// locality.
func oneZone(mode Mode, m, n, s int) Input {
	return Input{
		Size: s, Mode: mode, Seed: "svc",
		Slots:      map[Group]int{{Zone: "a"}: m},
		Localities: map[string][]string{"a": ids("ep", n)},
	}
}

// maxAvg is the max/avg of the slots holding each of the endpoints
// (every endpoint of eps, held or not).
func maxAvg(a *Assignment, eps []string) float64 {
	c := a.Counts()
	var sum, hi float64
	for _, id := range eps {
		v := float64(c[id])
		sum += v
		hi = max(hi, v)
	}
	return hi / (sum / float64(len(eps)))
}

// changed counts the (slot, endpoint) pairs in one assignment and not in
// the other.
func changed(a, b *Assignment) int {
	n := 0
	groups := a.Groups()
	for g, c := range b.Groups() {
		groups[g] = max(groups[g], c)
	}
	for g, c := range groups {
		for i := range c {
			x, y := a.Subset(g, i), b.Subset(g, i)
			for _, id := range x {
				if !slices.Contains(y, id) {
					n++
				}
			}
			for _, id := range y {
				if !slices.Contains(x, id) {
					n++
				}
			}
		}
	}
	return n
}

func mustAssign(t *testing.T, prev *Assignment, in Input) *Assignment {
	t.Helper()
	a, err := Assign(prev, in)
	if err != nil {
		t.Fatal(err)
	}
	for g, c := range in.Slots {
		for i := range c {
			sub := a.Subset(g, i)
			if len(sub) != min(in.Size, len(in.Localities["a"])) && len(in.Localities) == 1 {
				t.Fatalf("slot %v/%d holds %d endpoints, want %d", g, i, len(sub), in.Size)
			}
			if !slices.IsSorted(sub) || len(slices.Compact(slices.Clone(sub))) != len(sub) {
				t.Fatalf("slot %v/%d = %v: not sorted, or repeats", g, i, sub)
			}
		}
	}
	return a
}

// TestBalance is the first figure: M = 1,000 clients, N = 100
// endpoints, s = 10: deterministic subsets give every endpoint the same
// number of clients (max/avg <= 1.05); random ones, in the same run, about
// 1.25 (binomial).
func TestBalance(t *testing.T) {
	for _, tc := range []struct {
		m, n, s int
		det     float64 // the bound for deterministic
	}{
		{1000, 100, 10, 1.05},
		{200, 40, 8, 1.05},
		{999, 100, 10, 1.05},
		{37, 100, 10, 1.3}, // fewer pairs than 3 per endpoint: one slot is a big step
		{10, 3, 5, 1},      // more than the locality: every slot holds all
	} {
		in := oneZone(Deterministic, tc.m, tc.n, tc.s)
		det := mustAssign(t, nil, in)
		in.Mode = Random
		rnd := mustAssign(t, nil, in)
		eps := in.Localities["a"]
		d, r := maxAvg(det, eps), maxAvg(rnd, eps)
		t.Logf("M=%d N=%d s=%d: connections per endpoint max/avg: deterministic %.3f, random %.3f", tc.m, tc.n, tc.s, d, r)
		if d > tc.det {
			t.Errorf("M=%d N=%d s=%d: deterministic max/avg %.3f, want <= %.2f", tc.m, tc.n, tc.s, d, tc.det)
		}
		c := det.Counts()
		lo, hi := math.MaxInt, 0
		for _, id := range eps {
			lo, hi = min(lo, c[id]), max(hi, c[id])
		}
		if hi-lo > 1 {
			t.Errorf("M=%d N=%d s=%d: deterministic counts from %d to %d, want a spread of at most 1", tc.m, tc.n, tc.s, lo, hi)
		}
		if tc.m == 1000 && r < 1.12 {
			t.Errorf("random subsets max/avg %.3f at M=1000: want the binomial spread (about 1.25); is Random random?", r)
		}
	}
}

// TestChurn is the churn figures at N = 100, s = 10, M = 1,000:
// one endpoint added or removed changes at most 3 % of the (client,
// endpoint) pairs, one client joining or leaving at most 1 %; and the
// result stays balanced.
func TestChurn(t *testing.T) {
	const m, n, s = 1000, 100, 10
	base := oneZone(Deterministic, m, n, s)
	a := mustAssign(t, nil, base)
	pairs := float64(a.Pairs())
	for _, tc := range []struct {
		name  string
		in    func() Input
		bound float64
	}{
		{"endpoint added", func() Input {
			in := oneZone(Deterministic, m, n, s)
			in.Localities["a"] = append(in.Localities["a"], "ep-new")
			return in
		}, 0.03},
		{"endpoint removed", func() Input {
			in := oneZone(Deterministic, m, n, s)
			in.Localities["a"] = slices.Delete(in.Localities["a"], 42, 43)
			return in
		}, 0.03},
		{"client joined", func() Input { return oneZone(Deterministic, m+1, n, s) }, 0.01},
		{"client left", func() Input { return oneZone(Deterministic, m-1, n, s) }, 0.01},
	} {
		in := tc.in()
		b := mustAssign(t, a, in)
		share := float64(changed(a, b)) / pairs
		t.Logf("%s: %d of %.0f pairs changed (%.2f%%); max/avg %.3f", tc.name, changed(a, b), pairs, 100*share, maxAvg(b, in.Localities["a"]))
		if share > tc.bound {
			t.Errorf("%s: %.2f%% of the pairs changed, want <= %.0f%%", tc.name, 100*share, 100*tc.bound)
		}
		if r := maxAvg(b, in.Localities["a"]); r > 1.05 {
			t.Errorf("%s: max/avg %.3f after the change, want <= 1.05", tc.name, r)
		}
		if again := mustAssign(t, b, in); !again.Equal(b) {
			t.Errorf("%s: assigning the same input again moved %d pairs, want 0", tc.name, changed(b, again))
		}
	}
}

// TestDeterministic: the same inputs give the same subsets, whatever the
// map order, so every replica computes what the owner would.
func TestDeterministic(t *testing.T) {
	in := Input{
		Size: 6, Mode: Deterministic, Seed: "svc",
		Slots:      map[Group]int{{"r0", "a"}: 30, {"r1", "a"}: 20, {"r0", "b"}: 25},
		Localities: map[string][]string{"a": ids("a", 12), "b": ids("b", 9)},
	}
	first := mustAssign(t, nil, in)
	for range 20 {
		if got := mustAssign(t, nil, in); !got.Equal(first) {
			t.Fatalf("the same input gave other subsets (%d pairs differ)", changed(first, got))
		}
	}
	other := in
	other.Seed = "another-svc"
	if mustAssign(t, nil, other).Equal(first) {
		t.Errorf("two services got the same subsets: the seed does not spread them")
	}
}

// TestZoneShares: a slot holds endpoints of every locality its zone's
// route sends traffic to, in proportion (at least one for a probe
// share), and each (zone, locality) pair is balanced over the slots of
// that zone on every replica.
func TestZoneShares(t *testing.T) {
	shares := map[string]map[string]float64{
		"a": {"a": 0.98, "b": 0.01, "c": 0.01},
		"b": {"a": 0.5, "b": 0.5},
	}
	in := Input{
		Size: 10, Mode: Deterministic, Seed: "svc",
		Slots:      map[Group]int{{"r0", "a"}: 300, {"r1", "a"}: 100, {"r0", "b"}: 200, {"r1", "c"}: 50},
		Localities: map[string][]string{"a": ids("a", 40), "b": ids("b", 20), "c": ids("c", 20)},
		Shares:     func(z string) map[string]float64 { return shares[z] },
	}
	a := mustAssign(t, nil, in)
	want := map[string]map[string]int{
		"a": {"a": 10, "b": 1, "c": 1},
		"b": {"a": 5, "b": 5},
		"c": {"a": 5, "b": 3, "c": 3}, // no route: by endpoint count 40/20/20 of 10
	}
	for g, n := range in.Slots {
		for i := range n {
			got := map[string]int{}
			for _, id := range a.Subset(g, i) {
				got[id[:1]]++
			}
			for l, w := range want[g.Zone] {
				if got[l] != w {
					t.Fatalf("slot %v/%d holds %v by locality, want %v", g, i, got, want[g.Zone])
				}
			}
		}
	}
	// Balance of each (zone, locality) pair across the two replicas.
	for _, z := range []string{"a", "b"} {
		for l, eps := range in.Localities {
			c := map[string]int{}
			for g, n := range in.Slots {
				if g.Zone != z {
					continue
				}
				for i := range n {
					for _, id := range a.Subset(g, i) {
						c[id]++
					}
				}
			}
			lo, hi := math.MaxInt, 0
			for _, id := range eps {
				lo, hi = min(lo, c[id]), max(hi, c[id])
			}
			if want[z][l] > 0 && hi-lo > 1 {
				t.Errorf("zone %s over locality %s: slots per endpoint from %d to %d, want a spread of at most 1", z, l, lo, hi)
			}
		}
	}
}

// TestSlotGone: when a group shrinks, the slots that stay keep their
// subsets, except the few trades that rebalance.
func TestSlotGone(t *testing.T) {
	in := oneZone(Deterministic, 100, 20, 4)
	a := mustAssign(t, nil, in)
	in.Slots = map[Group]int{{Zone: "a"}: 99}
	b := mustAssign(t, a, in)
	same := 0
	for i := range 99 {
		if slices.Equal(a.Subset(Group{Zone: "a"}, i), b.Subset(Group{Zone: "a"}, i)) {
			same++
		}
	}
	if same < 95 {
		t.Errorf("%d of 99 slots kept their subset when one slot left, want at least 95", same)
	}
	if b.Subset(Group{Zone: "a"}, 99) != nil {
		t.Errorf("the gone slot still has a subset")
	}
}

func TestBadInput(t *testing.T) {
	good := oneZone(Deterministic, 3, 5, 2)
	for _, tc := range []struct {
		name  string
		edit  func(*Input)
		field string
	}{
		{"size 0", func(in *Input) { in.Size = 0 }, "subset_size"},
		{"size too big", func(in *Input) { in.Size = MaxSize + 1 }, "subset_size"},
		{"mode off", func(in *Input) { in.Mode = Off }, "subset_mode"},
		{"mode unknown", func(in *Input) { in.Mode = "ring" }, "subset_mode"},
		{"negative slots", func(in *Input) { in.Slots[Group{Zone: "b"}] = -1 }, "slots"},
		{"too many slots", func(in *Input) { in.Slots[Group{Zone: "b"}] = MaxSlots + 1 }, "slots"},
	} {
		in := good
		in.Slots = map[Group]int{{Zone: "a"}: 3}
		tc.edit(&in)
		_, err := Assign(nil, in)
		if !errors.Is(err, ErrInvalid) || !containsStr(err.Error(), tc.field) {
			t.Errorf("%s: err %v, want ErrInvalid naming %s", tc.name, err, tc.field)
		}
	}
	if _, err := ParseMode("ring"); err == nil {
		t.Errorf("ParseMode(ring) = nil error")
	}
}

func containsStr(s, sub string) bool {
	return strings.Contains(s, sub)
}

// TestKey: the key sees every input Assign reads (slot counts, endpoints,
// the share a route gives a locality, size, mode, seed) and nothing else
// (map order).
func TestKey(t *testing.T) {
	base := func() Input {
		return Input{
			Size: 4, Mode: Deterministic, Seed: "svc",
			Slots:      map[Group]int{{"r0", "a"}: 5, {"r1", "b"}: 3},
			Localities: map[string][]string{"a": {"a2", "a1"}, "b": {"b1"}},
			Shares:     func(z string) map[string]float64 { return map[string]float64{"a": 3, "b": 1} },
		}
	}
	in := base()
	k := in.Key()
	same := base()
	same.Localities["a"] = []string{"a1", "a2"}
	if same.Key() != k {
		t.Errorf("the order of a locality's ids changed the key")
	}
	for name, edit := range map[string]func(*Input){
		"slots":    func(in *Input) { in.Slots[Group{"r0", "a"}] = 6 },
		"group":    func(in *Input) { in.Slots[Group{"r2", "a"}] = 1 },
		"endpoint": func(in *Input) { in.Localities["b"] = append(in.Localities["b"], "b2") },
		"share": func(in *Input) {
			in.Shares = func(string) map[string]float64 { return map[string]float64{"a": 1, "b": 1} }
		},
		"size": func(in *Input) { in.Size = 5 },
		"mode": func(in *Input) { in.Mode = Random },
		"seed": func(in *Input) { in.Seed = "other" },
	} {
		in := base()
		edit(&in)
		if in.Key() == k {
			t.Errorf("%s changed but the key did not", name)
		}
	}
}

package subset

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
)

// Mode is how subsets are chosen.
type Mode string

// Modes. Off, the default, sends every client every endpoint.
const (
	Off           Mode = "off"
	Deterministic Mode = "deterministic"
	Random        Mode = "random"
)

// ParseMode returns the mode named s ("" is Off).
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", Off:
		return Off, nil
	case Deterministic, Random:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%q is not a subset mode: want off, deterministic or random", s)
}

// Bounds on what Assign takes: a subset of more than MaxSize endpoints
// is no subset, and MaxSlots bounds the slots of one service (every
// stream of a service on every replica).
const (
	MaxSize  = 1000
	MaxSlots = 1 << 20
)

// Group is the clients of one client zone (the zone label the xDS server
// gives the stream) on one replica; "" for one replica alone.
type Group struct {
	Replica string `json:"replica"`
	Zone    string `json:"zone"`
}

// Input is what Assign needs of one service.
type Input struct {
	// Size is the subset size asked, 1..MaxSize.
	Size int
	// Mode is Deterministic or Random.
	Mode Mode
	// Slots is how many clients each group holds.
	Slots map[Group]int
	// Localities are the endpoint ids by locality (the upstream zone the
	// zone plan routes to), each id in one locality.
	Localities map[string][]string
	// Shares returns the share of a client zone's traffic that goes to
	// each locality (the zone plan's route); nil, or a zone it returns
	// nothing for, sends to every locality in proportion to its endpoints.
	Shares func(zone string) map[string]float64
	// Seed breaks ties (the service name), so that the same inputs give
	// the same subsets on every replica.
	Seed string
}

// Assignment is every slot's subset.
type Assignment struct {
	// Size and Mode it was made for.
	Size int
	Mode Mode
	// slots[g][i] is slot i of group g: its endpoint ids, sorted.
	slots map[Group][][]string
	// weights[g][i], when not nil, is slot i's endpoint weights, in the
	// order of slots[g][i]: the fractional edges that even out what the
	// endpoints of a locality get (edges). Nil (or a nil slot) is 1 each.
	weights map[Group][][]float64
}

// Weights returns slot's endpoint weights, in the order of Subset's ids,
// or nil when they are all 1: what each endpoint of the slot gets of the
// slot's traffic to its locality, relative to the others there. Every
// slot's weights in a locality add up to its endpoint count there.
func (a *Assignment) Weights(g Group, slot int) []float64 {
	if a == nil {
		return nil
	}
	w := a.weights[g]
	if slot < 0 || slot >= len(w) {
		return nil
	}
	return w[slot]
}

// Subset returns slot's endpoint ids, sorted, or nil when the assignment
// has no such slot (a client newer than the plan).
func (a *Assignment) Subset(g Group, slot int) []string {
	if a == nil {
		return nil
	}
	s := a.slots[g]
	if slot < 0 || slot >= len(s) {
		return nil
	}
	return s[slot]
}

// Slots returns the slot count of group g.
func (a *Assignment) Slots(g Group) int {
	if a == nil {
		return 0
	}
	return len(a.slots[g])
}

// Groups returns the slot count of every group.
func (a *Assignment) Groups() map[Group]int {
	out := map[Group]int{}
	if a != nil {
		for g, s := range a.slots {
			out[g] = len(s)
		}
	}
	return out
}

// Pairs returns the number of (slot, endpoint) pairs.
func (a *Assignment) Pairs() int {
	n := 0
	if a != nil {
		for _, s := range a.slots {
			for _, sub := range s {
				n += len(sub)
			}
		}
	}
	return n
}

// Counts returns how many slots hold each endpoint.
func (a *Assignment) Counts() map[string]int {
	out := map[string]int{}
	if a != nil {
		for _, s := range a.slots {
			for _, sub := range s {
				for _, id := range sub {
					out[id]++
				}
			}
		}
	}
	return out
}

// Equal reports whether a and b give every slot the same subset.
func (a *Assignment) Equal(b *Assignment) bool {
	if a == nil || b == nil || a == b {
		return a == b
	}
	if a.Size != b.Size || a.Mode != b.Mode || len(a.slots) != len(b.slots) {
		return false
	}
	for g, s := range a.slots {
		t, ok := b.slots[g]
		if !ok || len(s) != len(t) {
			return false
		}
		for i := range s {
			if !slices.Equal(s[i], t[i]) || !slices.Equal(a.Weights(g, i), b.Weights(g, i)) {
				return false
			}
		}
	}
	return true
}

// ErrInvalid is wrapped by Assign's and Decode's errors.
var ErrInvalid = errors.New("invalid subset input")

func (in *Input) validate() error {
	switch {
	case in.Size < 1 || in.Size > MaxSize:
		return fmt.Errorf("subset_size: %d, want 1 to %d: %w", in.Size, MaxSize, ErrInvalid)
	case in.Mode != Deterministic && in.Mode != Random:
		return fmt.Errorf("subset_mode: %q, want deterministic or random: %w", in.Mode, ErrInvalid)
	}
	total := 0
	for g, n := range in.Slots {
		if n < 0 {
			return fmt.Errorf("slots of %v: %d is negative: %w", g, n, ErrInvalid)
		}
		total += n
		if total > MaxSlots {
			return fmt.Errorf("slots: more than %d: %w", MaxSlots, ErrInvalid)
		}
	}
	return nil
}

// slotRef names one slot.
type slotRef struct {
	g Group
	i int
}

// Assign returns the subsets of in, moving as few pairs of prev (nil for
// none) as balance needs; see the package doc. An endpoint of prev that
// is not in in.Localities any more leaves every subset.
func Assign(prev *Assignment, in Input) (*Assignment, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	if prev != nil && (prev.Mode != in.Mode || prev.Size != in.Size) {
		prev = nil // another shape: start over
	}
	out := &Assignment{Size: in.Size, Mode: in.Mode, slots: make(map[Group][][]string, len(in.Slots))}
	locOf := map[string]string{}
	locs := make([]string, 0, len(in.Localities))
	for l, ids := range in.Localities {
		if len(ids) == 0 {
			continue
		}
		locs = append(locs, l)
		for _, id := range ids {
			locOf[id] = l
		}
	}
	slices.Sort(locs)
	// The slots of each client zone, across replicas, in a fixed order.
	byZone := map[string][]slotRef{}
	groups := sortedGroups(in.Slots, func(n int) bool { return n > 0 })
	for _, g := range groups {
		subs := make([][]string, in.Slots[g])
		out.slots[g] = subs
		for i := range subs {
			byZone[g.Zone] = append(byZone[g.Zone], slotRef{g, i})
		}
	}
	zones := make([]string, 0, len(byZone))
	for z := range byZone {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	// edge[r] is slot r's fractional weights, by endpoint id.
	edge := map[slotRef]map[string]float64{}
	for _, z := range zones {
		refs := byZone[z]
		for _, l := range locs {
			k := perLocality(in, z, l, locs)
			if k == 0 {
				continue
			}
			eps := slices.Clone(in.Localities[l])
			slices.Sort(eps)
			p := &pair{seed: in.Seed, zone: z, eps: eps, k: min(k, len(eps)), refs: refs}
			var got [][]string
			if in.Mode == Random {
				got = p.random()
			} else {
				got = p.balance(prev, locOf, l)
				p.edges(got, edge)
			}
			for j, r := range refs {
				out.slots[r.g][r.i] = append(out.slots[r.g][r.i], got[j]...)
			}
		}
	}
	for _, subs := range out.slots {
		for i := range subs {
			slices.Sort(subs[i])
		}
	}
	for r, w := range edge {
		if out.weights == nil {
			out.weights = map[Group][][]float64{}
		}
		ws := out.weights[r.g]
		if ws == nil {
			ws = make([][]float64, len(out.slots[r.g]))
			out.weights[r.g] = ws
		}
		sub := out.slots[r.g][r.i]
		ws[r.i] = make([]float64, len(sub))
		for j, id := range sub {
			ws[r.i][j] = 1
			if v, ok := w[id]; ok {
				ws[r.i][j] = v
			}
		}
	}
	return out, nil
}

// Bounds of edges: the least and most weight it leaves an endpoint in a
// slot (a decoded weight is checked against them too).
const (
	minEdge = 0.01
	maxEdge = 2.0
)

// edges evens out what the endpoints of the pair get when the slots'
// holdings cannot be spread evenly: with M slots of k endpoints over N
// endpoints, balance leaves counts of floor(M·k/N) and one more, so an
// endpoint held once more than another gets a share more of the
// traffic. Each endpoint should get T = M·k/N slot shares (a slot gives
// each endpoint it holds its weight, out of k). Weight moves between two
// endpoints of one slot, so each slot's weights in the locality still add
// up to k and its traffic to the locality is unchanged: from an endpoint
// above T to one below it in a slot holding both, and otherwise along a
// chain of slots (a to b in one slot, b to c in another: b keeps what it
// had), found breadth first. It stops when every endpoint has T, or after
// a bounded number of chains (the rest keeps its counts' imbalance, at
// most one slot share). Slots and endpoints are taken in order, so the
// same holdings give the same weights on every replica. With k = 1 a
// slot has nothing to move between. The weights go into edge, by slot.
func (p *pair) edges(got [][]string, edge map[slotRef]map[string]float64) {
	if p.k < 2 || len(p.eps) == 0 {
		return
	}
	idx := make(map[string]int, len(p.eps))
	for i, id := range p.eps {
		idx[id] = i
	}
	excess := make([]float64, len(p.eps))
	total := 0
	for _, sub := range got {
		for _, id := range sub {
			excess[idx[id]]++
		}
		total += len(sub)
	}
	target := float64(total) / float64(len(p.eps))
	const tiny = 1e-9
	uneven := false
	for e := range excess {
		excess[e] -= target
		if math.Abs(excess[e]) > tiny {
			uneven = true
		}
	}
	if !uneven {
		return // M·k is a multiple of N: the counts are even
	}
	// members[j] is slot j's endpoints in index order; w[j] their weights.
	members := make([][]int, len(got))
	w := make([][]float64, len(got))
	holders := make([][]int, len(p.eps)) // slots holding each endpoint, in order
	for j, sub := range got {
		m := make([]int, len(sub))
		for i, id := range sub {
			m[i] = idx[id]
		}
		slices.Sort(m)
		members[j] = m
		w[j] = make([]float64, len(m))
		for i, e := range m {
			w[j][i] = 1
			holders[e] = append(holders[e], j)
		}
	}
	pos := func(j, e int) int { i, _ := slices.BinarySearch(members[j], e); return i }
	// A chain: parent[b] = (a, j) moves weight from a to b in slot j.
	type hop struct{ from, slot int }
	parent := make([]hop, len(p.eps))
	seen := make([]bool, len(p.eps))
	var queue []int
	budget := 4*len(p.eps) + 16
	for o := 0; o < len(p.eps) && budget > 0; o++ {
		for excess[o] > tiny && budget > 0 {
			budget--
			clear(seen)
			queue = append(queue[:0], o)
			seen[o] = true
			u := -1
			for q := 0; q < len(queue) && u < 0; q++ {
				a := queue[q]
				for _, j := range holders[a] {
					if w[j][pos(j, a)] <= minEdge+tiny {
						continue
					}
					for i, b := range members[j] {
						if seen[b] || w[j][i] >= maxEdge-tiny {
							continue
						}
						seen[b] = true
						parent[b] = hop{a, j}
						if excess[b] < -tiny {
							u = b
							break
						}
						queue = append(queue, b)
					}
					if u >= 0 {
						break
					}
				}
			}
			if u < 0 {
				break // nothing o can reach needs weight
			}
			d := min(excess[o], -excess[u])
			for b := u; b != o; b = parent[b].from {
				h := parent[b]
				d = min(d, w[h.slot][pos(h.slot, h.from)]-minEdge, maxEdge-w[h.slot][pos(h.slot, b)])
			}
			if d <= tiny {
				break
			}
			for b := u; b != o; b = parent[b].from {
				h := parent[b]
				w[h.slot][pos(h.slot, h.from)] -= d
				w[h.slot][pos(h.slot, b)] += d
			}
			excess[o] -= d
			excess[u] += d
		}
	}
	for j, m := range members {
		for i, e := range m {
			if v := w[j][i]; v != 1 {
				out := edge[p.refs[j]] // the slot's other localities' too
				if out == nil {
					out = map[string]float64{}
					edge[p.refs[j]] = out
				}
				out[p.eps[e]] = v
			}
		}
	}
}

// perLocality is how many endpoints of locality l a slot of client zone
// z holds: Size × the zone's share to l, rounded, at least 1 for a share
// above zero.
func perLocality(in Input, z, l string, locs []string) int {
	var shares map[string]float64
	if in.Shares != nil {
		shares = in.Shares(z)
	}
	var share float64
	if len(shares) > 0 {
		var sum float64
		for _, loc := range locs {
			if v := shares[loc]; v > 0 && !math.IsInf(v, 0) {
				sum += v
			}
		}
		if v := shares[l]; sum > 0 && v > 0 && !math.IsInf(v, 0) {
			share = v / sum
		}
	} else {
		total := 0
		for _, loc := range locs {
			total += len(in.Localities[loc])
		}
		share = float64(len(in.Localities[l])) / float64(total)
	}
	if share <= 0 {
		return 0
	}
	return max(1, int(math.Round(float64(in.Size)*share)))
}

// pair is the subsetting of one client zone's slots over one locality's
// endpoints.
type pair struct {
	seed, zone string
	eps        []string // sorted
	k          int      // endpoints per slot
	refs       []slotRef
}

// FNV-1a, 64 bits, by hand: a slot's prefix is hashed once and each
// endpoint id continues from it.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

// prefix is the hash state of slot r before the endpoint id: the seed,
// the group and the slot number, each followed by a zero byte.
func (p *pair) prefix(r slotRef) uint64 {
	h := fnvByte(fnvString(fnvOffset, p.seed), 0)
	h = fnvByte(fnvString(h, r.g.Replica), 0)
	h = fnvByte(fnvString(h, r.g.Zone), 0)
	var buf [20]byte
	for _, c := range strconv.AppendInt(buf[:0], int64(r.i), 10) {
		h = fnvByte(h, c)
	}
	return fnvByte(h, 0)
}

// rank is the tie-break of endpoint e for the slot whose prefix is pre.
func (p *pair) rank(pre uint64, e int) uint64 { return mix(fnvString(pre, p.eps[e])) }

// mix is a 64-bit finalizer (splitmix64's), so that nearby inputs rank
// independently.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// cand is an endpoint with what orders it for one slot: its count (when
// it matters), then its rank, then its index.
type cand struct {
	count int
	rank  uint64
	e     int
}

func (a cand) less(b cand) bool {
	if a.count != b.count {
		return a.count < b.count
	}
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.e < b.e
}

// smallest keeps the n least candidates offered, in order: an insertion
// into a short sorted list, so that offering all N costs about N
// comparisons when n is small.
type smallest struct {
	n   int
	out []cand
}

func (s *smallest) offer(c cand) {
	if len(s.out) == s.n {
		if !c.less(s.out[len(s.out)-1]) {
			return
		}
		s.out = s.out[:len(s.out)-1]
	}
	i := len(s.out)
	s.out = append(s.out, c)
	for i > 0 && c.less(s.out[i-1]) {
		s.out[i] = s.out[i-1]
		i--
	}
	s.out[i] = c
}

// random gives each slot the k endpoints that rank first for it.
func (p *pair) random() [][]string {
	out := make([][]string, len(p.refs))
	sel := smallest{n: p.k, out: make([]cand, 0, p.k)}
	for j, ref := range p.refs {
		pre := p.prefix(ref)
		sel.out = sel.out[:0]
		for e := range p.eps {
			sel.offer(cand{rank: p.rank(pre, e), e: e})
		}
		sub := make([]string, len(sel.out))
		for i, c := range sel.out {
			sub[i] = p.eps[c.e]
		}
		out[j] = sub
	}
	return out
}

// balance keeps what prev gave each slot in locality l where it still
// holds, then trims, fills and trades until every slot holds k endpoints
// and the endpoints' counts differ by at most one.
func (p *pair) balance(prev *Assignment, locOf map[string]string, l string) [][]string {
	idx := make(map[string]int, len(p.eps))
	for i, id := range p.eps {
		idx[id] = i
	}
	count := make([]int, len(p.eps))
	held := make([]map[int]struct{}, len(p.refs))
	holders := make([]map[int]struct{}, len(p.eps)) // the slots holding each endpoint
	for e := range holders {
		holders[e] = map[int]struct{}{}
	}
	for j, r := range p.refs {
		held[j] = make(map[int]struct{}, p.k)
		for _, id := range prev.Subset(r.g, r.i) {
			if locOf[id] != l {
				continue
			}
			if e, ok := idx[id]; ok {
				held[j][e] = struct{}{}
				holders[e][j] = struct{}{}
				count[e]++
			}
		}
	}
	pres := make([]uint64, len(p.refs))
	for j, r := range p.refs {
		pres[j] = p.prefix(r)
	}
	// Trim: a slot over k (the share shrank) gives up its most-held,
	// ties by rank.
	for j := range p.refs {
		for len(held[j]) > p.k {
			best := cand{e: -1}
			for e := range held[j] {
				c := cand{count: -count[e], rank: p.rank(pres[j], e), e: e}
				if best.e < 0 || c.less(best) {
					best = c
				}
			}
			delete(held[j], best.e)
			delete(holders[best.e], j)
			count[best.e]--
		}
	}
	// Fill: a slot under k (new, or an endpoint gone) takes the
	// least-held it does not hold, ties by rank: the r least by (count,
	// rank) at the start of its turn, since what it takes it cannot take
	// again.
	sel := smallest{out: make([]cand, 0, p.k)}
	for j := range p.refs {
		need := p.k - len(held[j])
		if need <= 0 {
			continue
		}
		sel.n, sel.out = need, sel.out[:0]
		for e := range p.eps {
			if _, ok := held[j][e]; ok {
				continue
			}
			sel.offer(cand{count: count[e], rank: p.rank(pres[j], e), e: e})
		}
		for _, c := range sel.out {
			held[j][c.e] = struct{}{}
			holders[c.e][j] = struct{}{}
			count[c.e]++
		}
	}
	// Trade: while the most-held endpoint is held by two more slots than
	// the least-held, the slot holding the first and not the second that
	// ranks the second first swaps them. Each trade brings the spread's
	// ends closer; the total excess bounds the trades.
	limit := len(p.refs)*p.k + len(p.eps)
	for range limit {
		hi, lo := 0, 0
		for e := range count {
			if count[e] > count[hi] {
				hi = e
			}
			if count[e] < count[lo] {
				lo = e
			}
		}
		if count[hi]-count[lo] <= 1 {
			break
		}
		best, bestRank := -1, uint64(0)
		for j := range holders[hi] {
			if _, ok := held[j][lo]; ok {
				continue
			}
			if rk := p.rank(pres[j], lo); best < 0 || rk < bestRank || (rk == bestRank && j < best) {
				best, bestRank = j, rk
			}
		}
		if best < 0 {
			break // cannot happen while count[hi] > count[lo]
		}
		delete(held[best], hi)
		delete(holders[hi], best)
		held[best][lo] = struct{}{}
		holders[lo][best] = struct{}{}
		count[hi]--
		count[lo]++
	}
	out := make([][]string, len(p.refs))
	for j := range p.refs {
		sub := make([]string, 0, len(held[j]))
		for e := range held[j] {
			sub = append(sub, p.eps[e])
		}
		out[j] = sub
	}
	return out
}

// sortedGroups returns m's groups that keep (nil: all) takes, by zone
// then replica.
func sortedGroups[V any](m map[Group]V, keep func(V) bool) []Group {
	groups := make([]Group, 0, len(m))
	for g, v := range m {
		if keep == nil || keep(v) {
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b Group) int {
		if a.Zone != b.Zone {
			return cmpStr(a.Zone, b.Zone)
		}
		return cmpStr(a.Replica, b.Replica)
	})
	return groups
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Bounds of a decoded assignment, beyond MaxSize and MaxSlots: the
// groups of one service and the distinct endpoints its subsets name.
const (
	MaxGroups    = 1 << 16
	MaxEndpoints = 1 << 20
)

// wire is an Assignment's JSON: the endpoint ids once, sorted, and each
// slot's subset as indexes into them.
type wire struct {
	Size      int         `json:"size"`
	Mode      Mode        `json:"mode"`
	Endpoints []string    `json:"endpoints"`
	Groups    []wireGroup `json:"groups"`
}

type wireGroup struct {
	Replica string  `json:"replica,omitempty"`
	Zone    string  `json:"zone"`
	Slots   [][]int `json:"slots"`
	// Weights[i], when present and not empty, is slot i's weights in the
	// order of Slots[i] (Assignment.Weights); absent from what releases
	// before it wrote, and ignored by them.
	Weights [][]float64 `json:"weights,omitempty"`
}

// MarshalJSON encodes a in a compact form: every endpoint id once.
func (a *Assignment) MarshalJSON() ([]byte, error) {
	w := wire{Size: a.Size, Mode: a.Mode}
	idx := map[string]int{}
	for _, s := range a.slots {
		for _, sub := range s {
			for _, id := range sub {
				idx[id] = 0
			}
		}
	}
	w.Endpoints = make([]string, 0, len(idx))
	for id := range idx {
		w.Endpoints = append(w.Endpoints, id)
	}
	slices.Sort(w.Endpoints)
	for i, id := range w.Endpoints {
		idx[id] = i
	}
	groups := sortedGroups(a.slots, nil)
	for _, g := range groups {
		wg := wireGroup{Replica: g.Replica, Zone: g.Zone, Slots: make([][]int, len(a.slots[g]))}
		for i, sub := range a.slots[g] {
			ix := make([]int, len(sub))
			for j, id := range sub {
				ix[j] = idx[id]
			}
			wg.Slots[i] = ix
			if w := a.Weights(g, i); w != nil {
				if wg.Weights == nil {
					wg.Weights = make([][]float64, len(a.slots[g]))
				}
				wg.Weights[i] = w
			}
		}
		w.Groups = append(w.Groups, wg)
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON wrote, within the bounds above;
// an error names the field and wraps ErrInvalid.
func (a *Assignment) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("subsets: %v: %w", err, ErrInvalid)
	}
	switch {
	case w.Size < 1 || w.Size > MaxSize:
		return fmt.Errorf("subsets.size: %d, want 1 to %d: %w", w.Size, MaxSize, ErrInvalid)
	case w.Mode != Deterministic && w.Mode != Random:
		return fmt.Errorf("subsets.mode: %q, want deterministic or random: %w", w.Mode, ErrInvalid)
	case len(w.Endpoints) > MaxEndpoints:
		return fmt.Errorf("subsets.endpoints: %d, over the limit of %d: %w", len(w.Endpoints), MaxEndpoints, ErrInvalid)
	case len(w.Groups) > MaxGroups:
		return fmt.Errorf("subsets.groups: %d, over the limit of %d: %w", len(w.Groups), MaxGroups, ErrInvalid)
	}
	out := Assignment{Size: w.Size, Mode: w.Mode, slots: make(map[Group][][]string, len(w.Groups))}
	total := 0
	for gi, wg := range w.Groups {
		g := Group{Replica: wg.Replica, Zone: wg.Zone}
		if _, dup := out.slots[g]; dup {
			return fmt.Errorf("subsets.groups[%d]: replica %q zone %q given twice: %w", gi, g.Replica, g.Zone, ErrInvalid)
		}
		total += len(wg.Slots)
		if total > MaxSlots {
			return fmt.Errorf("subsets.groups[%d].slots: more than %d in all: %w", gi, MaxSlots, ErrInvalid)
		}
		if wg.Weights != nil && len(wg.Weights) != len(wg.Slots) {
			return fmt.Errorf("subsets.groups[%d].weights: %d slots, want one per slot (%d): %w", gi, len(wg.Weights), len(wg.Slots), ErrInvalid)
		}
		subs := make([][]string, len(wg.Slots))
		for si, ix := range wg.Slots {
			if len(ix) > MaxSize*4 {
				return fmt.Errorf("subsets.groups[%d].slots[%d]: %d endpoints, over the limit of %d: %w", gi, si, len(ix), MaxSize*4, ErrInvalid)
			}
			sub := make([]string, len(ix))
			for j, e := range ix {
				if e < 0 || e >= len(w.Endpoints) {
					return fmt.Errorf("subsets.groups[%d].slots[%d][%d]: %d is not an index of endpoints: %w", gi, si, j, e, ErrInvalid)
				}
				sub[j] = w.Endpoints[e]
			}
			if si < len(wg.Weights) && len(wg.Weights[si]) > 0 {
				ws, err := decodeWeights(sub, wg.Weights[si])
				if err != nil {
					return fmt.Errorf("subsets.groups[%d].weights[%d]: %v: %w", gi, si, err, ErrInvalid)
				}
				if out.weights == nil {
					out.weights = map[Group][][]float64{}
				}
				if out.weights[g] == nil {
					out.weights[g] = make([][]float64, len(wg.Slots))
				}
				out.weights[g][si] = ws
			}
			slices.Sort(sub)
			subs[si] = slices.Compact(sub)
		}
		out.slots[g] = subs
	}
	*a = out
	return nil
}

// decodeWeights checks a slot's wire weights against its ids (in wire
// order) and returns them in the order of the sorted ids: one each, in
// (0, maxEdge], no id twice.
func decodeWeights(ids []string, ws []float64) ([]float64, error) {
	if len(ws) != len(ids) {
		return nil, fmt.Errorf("%d weights for %d endpoints", len(ws), len(ids))
	}
	order := make([]int, len(ids))
	for i, v := range ws {
		if !(v > 0 && v <= maxEdge) {
			return nil, fmt.Errorf("weight %v of %q is out of range (0, %v]", v, ids[i], maxEdge)
		}
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmpStr(ids[a], ids[b]) })
	out := make([]float64, len(ids))
	for j, i := range order {
		if j > 0 && ids[order[j-1]] == ids[i] {
			return nil, fmt.Errorf("%q given twice", ids[i])
		}
		out[j] = ws[i]
	}
	return out, nil
}

// Fingerprint is a hash of every slot's subset: equal assignments have
// equal fingerprints (0 for nil).
func (a *Assignment) Fingerprint() uint64 {
	if a == nil {
		return 0
	}
	groups := sortedGroups(a.slots, nil)
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", a.Size, a.Mode)
	for _, g := range groups {
		fmt.Fprintf(h, "|%q/%q", g.Replica, g.Zone)
		for i, sub := range a.slots[g] {
			h.Write([]byte{'#'})
			for _, id := range sub {
				h.Write([]byte(id))
				h.Write([]byte{0})
			}
			for _, v := range a.Weights(g, i) {
				fmt.Fprintf(h, "%x;", math.Float64bits(v))
			}
		}
	}
	return h.Sum64() | 1
}

// Key is a hash of what Assign reads of in: for the same key, Assign from
// the assignment it returned last time returns it again, so a caller may
// keep it instead (an idle service costs no assignment per cycle).
func (in *Input) Key() uint64 {
	h := fnvString(fnvOffset, in.Seed)
	h = fnvString(fnvByte(h, 0), string(in.Mode))
	h = fnvString(fnvByte(h, 0), strconv.Itoa(in.Size))
	groups := sortedGroups(in.Slots, func(n int) bool { return n > 0 })
	zones := map[string]bool{}
	for _, g := range groups {
		h = fnvString(fnvByte(h, 1), g.Replica)
		h = fnvString(fnvByte(h, 0), g.Zone)
		h = fnvString(fnvByte(h, 0), strconv.Itoa(in.Slots[g]))
		zones[g.Zone] = true
	}
	locs := make([]string, 0, len(in.Localities))
	for l, ids := range in.Localities {
		if len(ids) > 0 {
			locs = append(locs, l)
		}
	}
	slices.Sort(locs)
	for _, l := range locs {
		h = fnvString(fnvByte(h, 2), l)
		ids := in.Localities[l]
		if !slices.IsSorted(ids) { // the planner's are, from the registry
			ids = slices.Clone(ids)
			slices.Sort(ids)
		}
		for _, id := range ids {
			h = fnvString(fnvByte(h, 0), id)
		}
	}
	zs := make([]string, 0, len(zones))
	for z := range zones {
		zs = append(zs, z)
	}
	slices.Sort(zs)
	for _, z := range zs {
		h = fnvString(fnvByte(h, 3), z)
		for _, l := range locs {
			h = fnvString(fnvByte(h, 0), strconv.Itoa(perLocality(*in, z, l, locs)))
		}
	}
	return h
}

package wrr

import "math/bits"

// edfScale is the resolution of an entry's starting phase: deadlines are
// kept as integers in units of 1/(edfScale*weight).
const edfScale = 1 << 16

// edfRebaseAt is the deadline numerator past which next shifts every
// deadline back by the same whole number of periods, long before uint64
// overflows (after about 2^46 picks of one entry).
const edfRebaseAt = 1 << 62

// edf is an earliest-deadline-first scheduler over fixed weights. Entry i
// is due every 1/w_i units of virtual time; next returns the entry with the
// earliest deadline (ties go to the lower index) and moves its deadline one
// period on. Over any run of picks, entry i gets its share w_i/W of them to
// within 2 + 2·n·w_i/W picks (n entries, W the sum of weights); without a
// phase, a run of m·W picks from the start gives each entry exactly m·w_i.
//
// Deadlines are exact rationals, num/(edfScale·w), compared by 128-bit
// cross-multiplication, so arbitrarily long runs and weights up to 2^32-1
// never lose precision the way float deadlines do.
//
// An edf is not safe for concurrent use.
type edf struct {
	ents []edfEntry
	heap []int // indices into ents; a min-heap by (deadline, index)
}

type edfEntry struct {
	num uint64 // deadline numerator, in units of 1/(edfScale·w)
	w   uint64 // weight, >= 1
}

// newEDF builds a scheduler over weights, a weight of 0 counting as 1.
// phase, if non-nil, gives each entry's first deadline an offset in
// [0, 1) period (phase() mod edfScale, in 1/edfScale steps), so that
// schedulers built at the same moment do not all start on the same entry;
// nil starts every entry one full period in.
func newEDF(weights []uint32, phase func() uint32) *edf {
	e := &edf{ents: make([]edfEntry, len(weights)), heap: make([]int, len(weights))}
	for i, w := range weights {
		e.ents[i] = edfEntry{num: edfScale, w: uint64(max(w, 1))}
		if phase != nil {
			e.ents[i].num -= uint64(phase() % edfScale)
		}
		e.heap[i] = i
	}
	for i := len(e.heap)/2 - 1; i >= 0; i-- {
		e.down(i)
	}
	return e
}

// next returns the index of the entry due first and schedules its next
// deadline. It must not be called on an empty scheduler.
func (e *edf) next() int {
	i := e.heap[0]
	ent := &e.ents[i]
	ent.num += edfScale
	if ent.num >= edfRebaseAt {
		e.rebase()
	}
	e.down(0)
	return i
}

// rebase moves every deadline back by the same whole number of periods of
// virtual time, m = floor(earliest deadline), which keeps their order.
func (e *edf) rebase() {
	m := ^uint64(0)
	for _, ent := range e.ents {
		m = min(m, ent.num/(edfScale*ent.w))
	}
	for i := range e.ents {
		e.ents[i].num -= m * edfScale * e.ents[i].w
	}
}

// less orders heap slots a and b by deadline num/w, then by entry index.
func (e *edf) less(a, b int) bool {
	ia, ib := e.heap[a], e.heap[b]
	x, y := e.ents[ia], e.ents[ib]
	// x.num/x.w < y.num/y.w  <=>  x.num·y.w < y.num·x.w
	xh, xl := bits.Mul64(x.num, y.w)
	yh, yl := bits.Mul64(y.num, x.w)
	if xh != yh {
		return xh < yh
	}
	if xl != yl {
		return xl < yl
	}
	return ia < ib
}

func (e *edf) down(i int) {
	n := len(e.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && e.less(r, l) {
			c = r
		}
		if !e.less(c, i) {
			return
		}
		e.heap[i], e.heap[c] = e.heap[c], e.heap[i]
		i = c
	}
}

package xds

import (
	"sync"
	"time"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
)

// Label values that stand for more than one client-chosen value.
const (
	labelOther   = load.ZoneOther   // a valid value that found no free slot
	labelNone    = "none"           // the empty value
	labelInvalid = load.ZoneInvalid // not a DNS label
)

// labelSet bounds the values of a client-chosen string (a zone from
// node.locality) that become metric labels or map keys: the first max
// distinct valid values keep their own name, later ones share labelOther
// until a slot frees. A value holds its slot while some holder (a stream)
// has acquired it and for idle after its last use; sweep frees the slots
// of values idle longer, and a new value that finds the set full takes the
// slot of the value idle longest if that one is past idle. The empty value
// and invalid ones never take a slot (labelNone, labelInvalid), nor do the
// three literals themselves. Safe for concurrent use.
type labelSet struct {
	// Read-only after newLabelSet.
	max  int
	idle time.Duration
	// free is called, with mu held, when a value loses its slot: it
	// deletes what was kept under the value (metric series). It must not
	// call back into the set.
	free func(value string)

	// mu guards slots.
	mu    sync.Mutex
	slots map[string]*slot
}

type slot struct {
	refs int
	last time.Time // last acquire, release or touch
}

func newLabelSet(max int, idle time.Duration, free func(string)) *labelSet {
	if free == nil {
		free = func(string) {}
	}
	return &labelSet{max: max, idle: idle, free: free, slots: make(map[string]*slot, max)}
}

// label returns the label of v without taking a slot or a reference.
func (b *labelSet) label(v string) string {
	if l, ok := fixedLabel(v); ok {
		return l
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slots[v] != nil {
		return v
	}
	return labelOther
}

// has reports whether v holds a slot: it keeps its own name.
func (b *labelSet) has(v string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.slots[v] != nil
}

// acquire returns v's label and, when v holds a slot, takes a reference on
// it until release(label). A holder releases exactly the label it got.
func (b *labelSet) acquire(v string, now time.Time) string {
	return b.use(v, now, 1)
}

// touch is acquire without a reference: v keeps its slot for idle.
func (b *labelSet) touch(v string, now time.Time) string {
	return b.use(v, now, 0)
}

func (b *labelSet) use(v string, now time.Time, refs int) string {
	if l, ok := fixedLabel(v); ok {
		return l
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.slots[v]
	if s == nil {
		if len(b.slots) >= b.max && !b.evictOne(now) {
			return labelOther
		}
		s = &slot{}
		b.slots[v] = s
	}
	s.refs += refs
	s.last = now
	return v
}

// release drops a reference taken by acquire on label.
func (b *labelSet) release(label string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.slots[label]; s != nil && s.refs > 0 {
		s.refs--
		s.last = now
	}
}

// evictOne frees the slot idle longest, if it is past idle. Called with mu
// held on a full set; O(max).
func (b *labelSet) evictOne(now time.Time) bool {
	var victim string
	var oldest time.Time
	for v, s := range b.slots {
		if s.refs == 0 && now.Sub(s.last) >= b.idle && (victim == "" || s.last.Before(oldest)) {
			victim, oldest = v, s.last
		}
	}
	if victim == "" {
		return false
	}
	delete(b.slots, victim)
	b.free(victim)
	return true
}

// sweep frees every slot without references idle for at least idle, and
// returns how many it freed.
func (b *labelSet) sweep(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for v, s := range b.slots {
		if s.refs == 0 && now.Sub(s.last) >= b.idle {
			delete(b.slots, v)
			b.free(v)
			n++
		}
	}
	return n
}

// len is the number of values holding a slot.
func (b *labelSet) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.slots)
}

// fixedLabel maps the values that never take a slot.
func fixedLabel(v string) (string, bool) {
	switch {
	case v == "":
		return labelNone, true
	case v == labelOther, v == labelNone, v == labelInvalid:
		return v, true
	case registry.ValidateLabel("zone", v) != nil:
		return labelInvalid, true
	}
	return "", false
}

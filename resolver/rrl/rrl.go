package rrl

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"net/netip"
	"sync"
	"time"
)

// Verdict is what to do with one response.
type Verdict uint8

const (
	// Answer: send the response.
	Answer Verdict = iota
	// Drop: send nothing.
	Drop
	// Slip: send a truncated response (TC set, no records) in its place.
	Slip
	// Exempt: send the response; the source is in Config.Exempt, which
	// uses no allowance.
	Exempt
)

func (v Verdict) String() string {
	switch v {
	case Answer:
		return "answer"
	case Drop:
		return "drop"
	case Slip:
		return "slip"
	case Exempt:
		return "exempt"
	}
	return "verdict(?)"
}

// Limiter keeps one allowance per source prefix. It is safe for
// concurrent use.
type Limiter struct {
	// Read-only after New.
	cfg       Config
	epoch     time.Time
	interval  int64 // ns one response costs
	tolerance int64 // ns a prefix may run ahead of now: (Burst-1) × interval
	slip      uint32
	mask4     uint32
	mask6     [2]uint64
	seed      maphash.Seed
	shardMask uint64
	perShard  int

	shards []shard
}

// key is a masked source prefix.
type key struct {
	hi, lo uint64
	v4     bool
}

// entry is one prefix's allowance, and its place in its shard's
// least-recently-used list.
type entry struct {
	k key
	// tat is the generic cell rate algorithm's theoretical arrival time,
	// ns since the Limiter's epoch: the prefix's allowance is spent up to
	// tat; it may answer while tat - now <= tolerance.
	tat        int64
	drops      uint32 // responses refused, for the slip count
	prev, next int32  // towards the most / least recently used; -1 at the ends
}

type shard struct {
	// mu guards the fields below it.
	mu         sync.Mutex
	idx        map[key]int32
	ents       []entry
	head, tail int32 // most and least recently used entry; -1 when empty
	_          [64]byte
}

// New validates cfg and returns a Limiter whose clock starts at now.
func New(cfg Config, now time.Time) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		cfg:      cfg,
		epoch:    now,
		interval: int64(cfg.interval()),
		slip:     uint32(cfg.Slip),
		mask4:    ^uint32(0) << (32 - cfg.IPv4PrefixLen),
		seed:     maphash.MakeSeed(),
	}
	l.tolerance = int64(cfg.Burst-1) * l.interval
	for i := range 2 {
		// Bits of IPv6PrefixLen that fall in word i.
		n := min(max(cfg.IPv6PrefixLen-64*i, 0), 64)
		if n > 0 {
			l.mask6[i] = ^uint64(0) << (64 - n)
		}
	}
	// Shards of at least 1,024 entries, at most 64 of them: a small table
	// keeps one exact least-recently-used order.
	n := 1
	if cfg.TableSize >= 2048 {
		n = min(1<<(bits.Len(uint(cfg.TableSize/1024))-1), 64)
	}
	l.shardMask = uint64(n - 1)
	l.perShard = cfg.TableSize / n
	l.shards = make([]shard, n)
	for i := range l.shards {
		l.shards[i] = shard{idx: make(map[key]int32), head: -1, tail: -1}
	}
	return l, nil
}

// Config returns the configuration in use, defaults filled.
func (l *Limiter) Config() Config { return l.cfg }

// Allow takes one response's worth of src's prefix's allowance at now and
// says whether to send it. An invalid src is always answered, a src in
// Config.Exempt always Exempt.
func (l *Limiter) Allow(src netip.Addr, now time.Time) Verdict {
	if !src.IsValid() {
		return Answer
	}
	src = src.Unmap()
	for _, p := range l.cfg.Exempt {
		if p.Contains(src) {
			return Exempt
		}
	}
	k := l.key(src)
	t := int64(now.Sub(l.epoch))
	sh := &l.shards[maphash.Comparable(l.seed, k)&l.shardMask]
	sh.mu.Lock()
	i, ok := sh.idx[k]
	if ok {
		sh.touch(i)
	} else {
		i = sh.insert(k, t, l.perShard)
	}
	e := &sh.ents[i]
	if tat := max(e.tat, t); tat-t <= l.tolerance {
		e.tat = tat + l.interval
		sh.mu.Unlock()
		return Answer
	}
	e.drops++
	n := e.drops
	sh.mu.Unlock()
	if l.slip > 0 && n%l.slip == 0 {
		return Slip
	}
	return Drop
}

// Len returns how many prefixes are tracked.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.idx)
		sh.mu.Unlock()
	}
	return n
}

func (l *Limiter) key(a netip.Addr) key {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return key{lo: uint64(binary.BigEndian.Uint32(b[:]) & l.mask4), v4: true}
	}
	b := a.As16()
	return key{hi: binary.BigEndian.Uint64(b[:8]) & l.mask6[0], lo: binary.BigEndian.Uint64(b[8:]) & l.mask6[1]}
}

// insert adds k with a full allowance as the most recently used entry,
// reusing the least recently used one's slot when the shard holds limit.
// sh.mu is held.
func (sh *shard) insert(k key, now int64, limit int) int32 {
	var i int32
	if len(sh.ents) < limit {
		i = int32(len(sh.ents))
		sh.ents = append(sh.ents, entry{})
	} else {
		i = sh.tail
		sh.unlink(i)
		delete(sh.idx, sh.ents[i].k)
	}
	sh.ents[i] = entry{k: k, tat: now, prev: -1, next: -1}
	sh.idx[k] = i
	sh.pushFront(i)
	return i
}

// touch makes entry i the most recently used. sh.mu is held.
func (sh *shard) touch(i int32) {
	if sh.head == i {
		return
	}
	sh.unlink(i)
	sh.pushFront(i)
}

func (sh *shard) unlink(i int32) {
	e := &sh.ents[i]
	if e.prev >= 0 {
		sh.ents[e.prev].next = e.next
	} else {
		sh.head = e.next
	}
	if e.next >= 0 {
		sh.ents[e.next].prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (sh *shard) pushFront(i int32) {
	e := &sh.ents[i]
	e.prev, e.next = -1, sh.head
	if sh.head >= 0 {
		sh.ents[sh.head].prev = i
	}
	sh.head = i
	if sh.tail < 0 {
		sh.tail = i
	}
}

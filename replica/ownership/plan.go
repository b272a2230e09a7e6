package ownership

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
)

// weight is the rendezvous (highest random weight) score of member id for
// shard s: fnv-1a 64 of both, mixed (splitmix64's finalizer) so that
// similar ids spread.
func weight(s int, id string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(s))
	h.Write(b[:])
	h.Write([]byte(id))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// assignment is who ranks first and second for every shard.
type assignment struct {
	first, second []string // by shard; "" when there is no such member
}

// assign ranks ids for each of n shards by rendezvous hashing with
// bounded load: shards are taken in order, and each goes to the
// highest-weighted member that has fewer than ceil(n/len(ids)) shards so
// far; second is the highest-weighted other member. Every replica that
// sees the same live members computes the same assignment; a member
// joining or leaving moves few shards.
func assign(ids []string, n int) assignment {
	a := assignment{first: make([]string, n), second: make([]string, n)}
	if len(ids) == 0 {
		return a
	}
	limit := (n + len(ids) - 1) / len(ids)
	load := make(map[string]int, len(ids))
	type ranked struct {
		id string
		w  uint64
	}
	order := make([]ranked, len(ids))
	for s := range n {
		for i, id := range ids {
			order[i] = ranked{id, weight(s, id)}
		}
		slices.SortFunc(order, func(x, y ranked) int {
			if c := cmp.Compare(y.w, x.w); c != 0 {
				return c
			}
			return cmp.Compare(x.id, y.id)
		})
		for _, r := range order {
			if load[r.id] < limit {
				a.first[s] = r.id
				load[r.id]++
				break
			}
		}
		for _, r := range order {
			if r.id != a.first[s] {
				a.second[s] = r.id
				break
			}
		}
	}
	return a
}

// campaign is one shard's running campaign or hold.
type campaign struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// coordinate owns the campaigns: every TTL/10, and when members or
// records change, it computes the assignment over the live members and
// starts or stops each shard's campaign. It returns when ctx ends, after
// every campaign has ended (its shard given up).
func (o *Owners) coordinate(ctx context.Context) {
	n := o.cfg.Shards
	ttl := o.cfg.TTL
	running := make([]*campaign, n)
	retryAt := make([]time.Time, n)
	unheldSince := make([]time.Time, n)
	guarding := make([]string, n) // ranked members when a campaign started as the guard
	exited := make(chan int, n)
	tick := time.NewTicker(ttl / 10)
	defer tick.Stop()
	defer func() {
		for _, c := range running {
			if c != nil {
				c.cancel()
				<-c.done
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-o.trigger:
		case s := <-exited:
			running[s] = nil
			retryAt[s] = o.cfg.Now().Add(ttl / 10)
		}
		now := o.cfg.Now()
		live, ranked := o.liveMembers(now)
		if now.Before(o.settled) {
			continue
		}
		o.viewSettled.Store(true)
		isLive := make(map[string]bool, len(live))
		for _, m := range live {
			isLive[m.ID] = true
		}
		a := assign(ranked, n)
		view := strings.Join(ranked, ",")
		silent := o.silent() // campaign when the store answers
		for s := range n {
			if o.owned[s].Load() || o.recordHeld(s, isLive) {
				unheldSince[s] = time.Time{}
			} else if unheldSince[s].IsZero() {
				unheldSince[s] = now
			}
			orphan := !unheldSince[s].IsZero() && now.Sub(unheldSince[s]) >= 2*ttl
			first := a.first[s] == o.cfg.ID
			guard := orphan && a.second[s] == o.cfg.ID
			if running[s] == nil {
				guarding[s] = ""
			}
			// A shard taken as the guard is kept while the ranked
			// members stay the same: the first-ranked did not take it
			// in 2×TTL, and giving it back would only leave it
			// unowned for another 2×TTL.
			keep := guarding[s] != "" && guarding[s] == view
			want := first || guard || keep
			switch {
			case want && running[s] == nil && !now.Before(retryAt[s]) && !silent:
				if !first {
					guarding[s] = view
					o.log.Info("campaigning for a shard without a holder", "shard", s, "unheld_for", now.Sub(unheldSince[s]), "first_ranked", a.first[s])
				}
				cctx, cancel := context.WithCancel(ctx)
				c := &campaign{cancel: cancel, done: make(chan struct{})}
				running[s] = c
				go func() {
					defer close(c.done)
					defer func() { exited <- s }()
					o.holdShard(cctx, s)
				}()
			case !want && running[s] != nil:
				running[s].cancel()
			}
		}
	}
}

// recordHeld reports whether shard s's record names a live holder other
// than this replica.
func (o *Owners) recordHeld(s int, live map[string]bool) bool {
	r := o.records[s].Load()
	return r != nil && !r.Released && r.Owner != o.cfg.ID && live[r.Owner]
}

// holdShard campaigns for shard s; elected, it writes the ownership
// record and owns the shard until the hold is lost or ctx ends, when it
// gives the shard up (marking the record released when it still holds
// it) and resigns.
func (o *Owners) holdShard(ctx context.Context, s int) {
	name := ElectionPrefix + ShardKey(s)
	lost, resign, err := o.electors[s].Campaign(ctx, o.cfg.ID)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Warn("campaign failed", "election", name, "err", err)
		}
		return
	}
	defer resign()
	if ctx.Err() != nil {
		return
	}
	rec, err := o.claim(ctx, s)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Warn("write ownership record; resigning", "shard", s, "err", err)
		}
		return
	}
	o.take(s, rec)
	check := time.NewTicker(o.cfg.TTL / 10)
	defer check.Stop()
	reason := "election hold lost"
hold:
	for {
		select {
		case <-lost:
			break hold
		case <-ctx.Done():
			break hold
		case <-check.C:
			if o.silent() {
				reason = "store silent for 2/3 of the TTL"
				break hold
			}
		}
	}
	clean := ctx.Err() != nil // etcd closes lost with ctx too
	if clean {
		reason = "resigned"
	}
	o.giveUp(s, rec, reason)
	if clean {
		o.markReleased(ctx, s, rec)
	}
}

// claim writes the ownership record of a newly won shard s, with an
// epoch one above the stored one and the one this replica knows.
func (o *Owners) claim(ctx context.Context, s int) (*Record, error) {
	key := OwnershipPrefix + ShardKey(s)
	var prev int64
	if cur := o.records[s].Load(); cur != nil {
		prev = cur.Epoch
	}
	v, _, err := o.cfg.KV.Get(ctx, key)
	switch {
	case err == nil:
		if _, r, err := decodeRecord(key, v, o.cfg.Shards); err == nil {
			prev = max(prev, r.Epoch)
		}
	case !errors.Is(err, systemstore.ErrNotFound):
		return nil, err
	}
	rec := &Record{Owner: o.cfg.ID, GRPCAddr: o.cfg.GRPCAddr, Epoch: prev + 1, Since: o.cfg.Now()}
	if err := o.putRecord(ctx, key, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

func (o *Owners) putRecord(ctx context.Context, key string, rec *Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	at := o.cfg.Now()
	if _, err = o.cfg.KV.Put(ctx, key, b); err == nil {
		o.wrote(at)
	}
	return err
}

// markReleased marks shard s's record released if it is still rec, so
// that the others campaign at once; bounded by TTL, after ctx ended.
func (o *Owners) markReleased(ctx context.Context, s int, rec *Record) {
	key := OwnershipPrefix + ShardKey(s)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.TTL)
	defer cancel()
	v, _, err := o.cfg.KV.Get(rctx, key)
	if err != nil {
		o.log.Warn("mark ownership record released", "shard", s, "err", err)
		return
	}
	if _, cur, err := decodeRecord(key, v, o.cfg.Shards); err != nil || cur.Owner != rec.Owner || cur.Epoch != rec.Epoch {
		return // another owner wrote it since
	}
	rel := *rec
	rel.Released = true
	if err := o.putRecord(rctx, key, &rel); err != nil {
		o.log.Warn("mark ownership record released", "shard", s, "err", err)
	}
}

// take makes shard s owned by this replica under rec.
func (o *Owners) take(s int, rec *Record) {
	o.storeRecord(s, rec)
	if o.onTransition != nil {
		o.onTransition(s, true, rec.Epoch)
	}
	o.epochs[s].Store(rec.Epoch)
	o.owned[s].Store(true)
	o.nOwned.Add(1)
	o.metrics.changes.WithLabelValues("acquired").Inc()
	o.log.Info("shard taken", "shard", s, "epoch", rec.Epoch)
	o.notify()
}

// giveUp ends this replica's ownership of shard s, for reason.
func (o *Owners) giveUp(s int, rec *Record, reason string) {
	o.owned[s].Store(false)
	if o.onTransition != nil {
		o.onTransition(s, false, rec.Epoch)
	}
	o.nOwned.Add(-1)
	o.metrics.changes.WithLabelValues("released").Inc()
	if reason == "resigned" {
		o.log.Info("shard given up", "shard", s, "epoch", rec.Epoch, "reason", reason)
	} else {
		o.log.Warn("shard given up", "shard", s, "epoch", rec.Epoch, "reason", reason)
	}
	o.notify()
}

package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
)

// Store keys.
const (
	MembersPrefix   = "members/"         // members/<id>: Member records, one per live replica
	OwnershipPrefix = "ownership/shard/" // ownership/shard/NN: Record of the shard's owner
	ElectionPrefix  = "election/shard/"  // election/shard/NN: the shard's election
	ShardsKey       = "mesh/shards"      // the shard count every replica must use
)

// ErrShardCount is wrapped by Run's error when the store records another
// shard count than Config.Shards.
var ErrShardCount = errors.New("shard count differs from the store's")

// Member is one replica taking part.
type Member struct {
	ID       string    `json:"id"`
	GRPCAddr string    `json:"grpc_addr"`
	Started  time.Time `json:"started"`
	// Identity is the identity of the certificate this replica presents
	// when it dials other replicas (authn.FromTLS's name), "" without
	// TLS. Load summaries over a verified certificate are taken for this
	// member only from that identity. Added after a770d6c; that
	// release's readers ignore it (encoding/json drops unknown fields).
	Identity string `json:"identity,omitempty"`
	// MaxVersion is the highest cluster version this replica's binary
	// supports (package replica/clusterversion); 0, as in the records of
	// a770d6c, which has no such field, reads as that package's
	// Baseline. a770d6c's readers ignore it.
	MaxVersion int `json:"max_version,omitempty"`
}

// StoredMember is a member record as the store holds it.
type StoredMember struct {
	Member
	// Expires is the writer's clock plus TTL at its last heartbeat.
	Expires time.Time
}

// memberRecord is the value of members/<id>.
type memberRecord struct {
	Member
	// Expires is the writer's clock plus TTL, for people reading the
	// store; liveness is judged by each reader's own clock.
	Expires time.Time `json:"expires"`
}

// Record is the value of ownership/shard/NN: who holds the shard's
// election since when. Epoch grows with every new hold of the shard.
type Record struct {
	Owner    string    `json:"owner"`
	GRPCAddr string    `json:"grpc_addr"`
	Epoch    int64     `json:"epoch"`
	Since    time.Time `json:"since"`
	// Released is set by an owner that gave the shard up cleanly; the
	// next owner overwrites the record.
	Released bool `json:"released,omitempty"`
}

// ShardKey returns the two-digit name of shard n ("07").
func ShardKey(n int) string { return fmt.Sprintf("%02d", n) }

// ShardOf returns the shard of service among n: fnv-1a 32 of the name
// mod n.
func ShardOf(service string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(service))
	return int(h.Sum32() % uint32(n))
}

// decodeMember parses a members/<id> value.
func decodeMember(key string, b []byte) (Member, error) {
	m, err := decodeMemberRecord(key, b)
	return m.Member, err
}

func decodeMemberRecord(key string, b []byte) (memberRecord, error) {
	var m memberRecord
	if err := json.Unmarshal(b, &m); err != nil {
		return memberRecord{}, fmt.Errorf("member %s: %w", key, err)
	}
	id := strings.TrimPrefix(key, MembersPrefix)
	if m.ID != id {
		return memberRecord{}, fmt.Errorf("member %s: id: %q differs from the key", key, m.ID)
	}
	return m, nil
}

// decodeRecord parses an ownership/shard/NN value of a store with n
// shards and returns the shard and the record.
func decodeRecord(key string, b []byte, n int) (int, *Record, error) {
	s, err := strconv.Atoi(strings.TrimPrefix(key, OwnershipPrefix))
	if err != nil || s < 0 || s >= n || key != OwnershipPrefix+ShardKey(s) {
		return 0, nil, fmt.Errorf("ownership record %s: shard: want 00 to %s", key, ShardKey(n-1))
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, nil, fmt.Errorf("ownership record %s: %w", key, err)
	}
	switch {
	case r.Owner == "":
		return 0, nil, fmt.Errorf("ownership record %s: owner: is empty", key)
	case r.Epoch <= 0:
		return 0, nil, fmt.Errorf("ownership record %s: epoch: %d, want positive", key, r.Epoch)
	}
	return s, &r, nil
}

// seenMember is a member record and when this replica last saw it change.
type seenMember struct {
	m   Member
	rev int64
	at  time.Time // zero: listed, not yet seen change (age unknown)
	// since is when it joined as this replica saw it: zero when it was
	// there before this replica's settle period ended.
	since time.Time
}

// Owners decides, with the other replicas on the store, which replica
// owns each shard of services, and answers who owns what.
type Owners struct {
	// Read-only after New.
	cfg      Config
	log      *slog.Logger
	self     Member
	electors []systemstore.Elector // nil: single replica
	metrics  *metrics
	changes  chan struct{} // 1-slot: Changes
	trigger  chan struct{} // 1-slot: the coordinator re-plans
	// onTransition, when set by tests, is called as this replica takes
	// (after winning the election) or gives up (before resigning) a shard.
	onTransition func(shard int, owned bool, epoch int64)

	owned   []atomic.Bool
	epochs  []atomic.Int64 // of this replica's hold, per shard; set before owned
	nOwned  atomic.Int64
	records []atomic.Pointer[Record]
	members atomic.Pointer[[]Member] // live, sorted by ID

	lastWrite atomic.Int64 // unix nanos when the last successful write started

	// settled is when this replica has watched members long enough to
	// campaign; set by Run before its goroutines start.
	settled time.Time
	// viewSettled is set by the coordinator once it has computed the
	// live members after settled: Members lists every live one since.
	viewSettled atomic.Bool

	// mu guards seen.
	mu   sync.Mutex
	seen map[string]seenMember
}

// New validates cfg and returns Owners; Run takes part. With cfg.Elect
// nil the replica owns every shard from New on.
func New(cfg Config) (*Owners, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := &Owners{
		cfg: cfg, log: cfg.Logger,
		self:    Member{ID: cfg.ID, GRPCAddr: cfg.GRPCAddr, Started: cfg.Now(), Identity: cfg.Identity, MaxVersion: cfg.MaxVersion},
		changes: make(chan struct{}, 1),
		trigger: make(chan struct{}, 1),
		owned:   make([]atomic.Bool, cfg.Shards),
		epochs:  make([]atomic.Int64, cfg.Shards),
		records: make([]atomic.Pointer[Record], cfg.Shards),
		seen:    map[string]seenMember{},
	}
	o.members.Store(&[]Member{o.self})
	if cfg.Elect == nil {
		for s := range cfg.Shards {
			o.epochs[s].Store(1)
			o.owned[s].Store(true)
			o.records[s].Store(&Record{Owner: cfg.ID, GRPCAddr: cfg.GRPCAddr, Epoch: 1, Since: o.self.Started})
		}
		o.nOwned.Store(int64(cfg.Shards))
	} else {
		o.electors = make([]systemstore.Elector, cfg.Shards)
		for s := range cfg.Shards {
			el, err := cfg.Elect(ElectionPrefix + ShardKey(s))
			if err != nil {
				return nil, fmt.Errorf("ownership config: Elect(%s): %w", ElectionPrefix+ShardKey(s), err)
			}
			o.electors[s] = el
		}
	}
	o.metrics = newMetrics(o)
	if cfg.Registerer != nil {
		if err := o.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("ownership metrics: %w", err)
		}
	}
	return o, nil
}

// Shard returns the shard of service.
func (o *Owners) Shard(service string) int { return ShardOf(service, o.cfg.Shards) }

// Shards returns the shard count.
func (o *Owners) Shards() int { return o.cfg.Shards }

// Owns reports whether this replica holds the election of service's shard.
func (o *Owners) Owns(service string) bool { return o.owned[o.Shard(service)].Load() }

// OwnsShard reports whether this replica holds the election of shard s.
func (o *Owners) OwnsShard(s int) bool { return s >= 0 && s < len(o.owned) && o.owned[s].Load() }

// Owner returns the owner of service's shard and its epoch as the
// ownership records say; ok is false when no owner is recorded or the
// last one released the shard. The owner may have died since it wrote
// the record (Members tells the live ones); Started is filled in when the
// owner is a live member.
func (o *Owners) Owner(service string) (m Member, epoch int64, ok bool) {
	r := o.records[o.Shard(service)].Load()
	if r == nil || r.Released {
		return Member{}, 0, false
	}
	m = Member{ID: r.Owner, GRPCAddr: r.GRPCAddr}
	for _, lm := range *o.members.Load() {
		if lm.ID == r.Owner {
			m.Started = lm.Started
		}
	}
	return m, r.Epoch, true
}

// Records returns every shard's ownership record as this replica knows
// it, indexed by shard: the zero Record (Owner "") where none is known.
// The owner may have died since it wrote it, or Released it.
func (o *Owners) Records() []Record {
	out := make([]Record, len(o.records))
	for s := range o.records {
		if r := o.records[s].Load(); r != nil {
			out[s] = *r
		}
	}
	return out
}

// Members returns the live members as this replica sees them, itself
// included, sorted by ID. The caller must not modify the slice.
func (o *Owners) Members() []Member { return *o.members.Load() }

// Settled reports whether Members lists every live member: Run has
// watched the member records for TTL/2 (every live member heartbeats
// every TTL/3) and computed the live members since. Before, Members may
// lack members that are live. With Elect nil it is always true.
func (o *Owners) Settled() bool { return o.electors == nil || o.viewSettled.Load() }

// StoredMembers reads every member record in kv, the ones that do not
// decode left out (as Owners leaves them out of Members), sorted by ID.
// It is the store's view, not this replica's: a record stays until its
// replica deletes it or it is reaped, Expires past or not.
func StoredMembers(ctx context.Context, kv systemstore.KV) ([]StoredMember, error) {
	kvs, _, err := kv.List(ctx, MembersPrefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", MembersPrefix, err)
	}
	out := make([]StoredMember, 0, len(kvs))
	for _, e := range kvs {
		r, err := decodeMemberRecord(e.Key, e.Value)
		if err != nil {
			continue
		}
		out = append(out, StoredMember{Member: r.Member, Expires: r.Expires})
	}
	return out, nil
}

// Epoch returns the epoch of this replica's hold of shard s; ok is false
// when it does not hold s. What an owner publishes for s carries it, so
// that readers prefer the newest owner's writes.
func (o *Owners) Epoch(s int) (epoch int64, ok bool) {
	if !o.OwnsShard(s) {
		return 0, false
	}
	return o.epochs[s].Load(), true
}

// Owned returns the shards this replica holds, in order.
func (o *Owners) Owned() []int {
	var out []int
	for s := range o.owned {
		if o.owned[s].Load() {
			out = append(out, s)
		}
	}
	return out
}

// Changes returns a channel that receives a value (coalesced: one slot)
// after the shards this replica owns, the ownership records or the live
// members changed; read Owned, Owner and Members then. One channel for
// every caller: give it one reader.
func (o *Owners) Changes() <-chan struct{} { return o.changes }

func (o *Owners) notify() {
	select {
	case o.changes <- struct{}{}:
	default:
	}
}

func (o *Owners) kick() {
	select {
	case o.trigger <- struct{}{}:
	default:
	}
}

// Run takes part until ctx ends: it checks the shard count, heartbeats
// the member record, watches members and ownership records, and
// campaigns for the shards this replica ranks first for. On return it has
// given up its shards (records marked released, elections resigned) and
// deleted its member record. It returns nil when ctx ends, or an error
// wrapping ErrShardCount (naming --mesh-shards) or the store's error when
// the shard count cannot be checked. With Elect nil it waits for ctx.
func (o *Owners) Run(ctx context.Context) error {
	if o.electors == nil {
		<-ctx.Done()
		return nil
	}
	at := o.cfg.Now()
	if err := o.checkShards(ctx); err != nil {
		return err
	}
	o.wrote(at)
	// Members heartbeat every TTL/3: after TTL/2 of watching, every live
	// one has been seen.
	o.settled = o.cfg.Now().Add(o.cfg.TTL / 2)
	var wg sync.WaitGroup
	wg.Go(func() { o.heartbeatLoop(ctx) })
	wg.Go(func() { o.watchLoop(ctx, MembersPrefix, o.listMembers, o.applyMember) })
	wg.Go(func() { o.watchLoop(ctx, OwnershipPrefix, o.listRecords, o.applyRecord) })
	if cd, ok := o.cfg.KV.(systemstore.CondDeleter); ok {
		wg.Go(func() { o.reapLoop(ctx, cd) })
	}
	o.coordinate(ctx) // returns after every shard is given up
	wg.Wait()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.cfg.TTL)
	defer cancel()
	if _, err := o.cfg.KV.Delete(dctx, MembersPrefix+o.cfg.ID); err != nil {
		o.log.Warn("delete member record; it ages out", "err", err)
	}
	return nil
}

// checkShards records the shard count in the store, or compares it with
// the one recorded.
func (o *Owners) checkShards(ctx context.Context) error {
	v, _, err := o.cfg.KV.Get(ctx, ShardsKey)
	if errors.Is(err, systemstore.ErrNotFound) {
		if _, err := o.cfg.KV.Put(ctx, ShardsKey, []byte(strconv.Itoa(o.cfg.Shards))); err != nil {
			return fmt.Errorf("record the shard count (%s): %w", ShardsKey, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the shard count (%s): %w", ShardsKey, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(v)))
	if err != nil {
		return fmt.Errorf("read the shard count (%s): %q is not a number", ShardsKey, v)
	}
	if n != o.cfg.Shards {
		return fmt.Errorf("--mesh-shards %d: the store records %d shards (%s); every replica on a store must use the same count: %w", o.cfg.Shards, n, ShardsKey, ErrShardCount)
	}
	return nil
}

// wrote records that a write started at at succeeded.
func (o *Owners) wrote(at time.Time) {
	for {
		old := o.lastWrite.Load()
		if old >= at.UnixNano() || o.lastWrite.CompareAndSwap(old, at.UnixNano()) {
			return
		}
	}
}

// silent reports whether no write has succeeded for 2/3 of the TTL: the
// store may have expired this replica's election holds (its client may
// notice later), so it owns nothing until the store answers again.
func (o *Owners) silent() bool {
	return o.cfg.Now().UnixNano()-o.lastWrite.Load() > int64(2*o.cfg.TTL/3)
}

// heartbeatLoop writes the member record every TTL/3.
func (o *Owners) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(o.cfg.TTL / 3)
	defer t.Stop()
	failing := false
	for {
		at := o.cfg.Now()
		b, _ := json.Marshal(memberRecord{Member: o.self, Expires: at.Add(o.cfg.TTL)})
		_, err := o.cfg.KV.Put(ctx, MembersPrefix+o.cfg.ID, b)
		if err == nil {
			o.wrote(at)
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			o.log.Warn("member heartbeat failed", "err", err)
			failing = true
		case err == nil && failing:
			o.log.Info("member heartbeat written again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reapAfter is how long a member record must go unchanged, as this
// replica observed it, before it is deleted as the record of a replica
// that was killed.
func (o *Owners) reapAfter() time.Duration { return 3 * o.cfg.TTL }

// reapLoop deletes, every TTL, the member records that have not changed
// for reapAfter (replicas killed without deleting theirs), each only at
// the revision observed, so a replica that came back under the same ID
// keeps its new record. Every replica does it; the conditional delete
// makes that harmless.
func (o *Owners) reapLoop(ctx context.Context, cd systemstore.CondDeleter) {
	t := time.NewTicker(o.cfg.TTL)
	defer t.Stop()
	since := o.cfg.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := o.cfg.Now()
		if now.Sub(since) < o.reapAfter() {
			continue // a member listed at start has an unknown age
		}
		type stale struct {
			id  string
			rev int64
		}
		var gone []stale
		o.mu.Lock()
		for id, sm := range o.seen {
			if id != o.cfg.ID && (sm.at.IsZero() || now.Sub(sm.at) >= o.reapAfter()) {
				gone = append(gone, stale{id, sm.rev})
			}
		}
		o.mu.Unlock()
		for _, g := range gone {
			deleted, err := cd.DeleteIf(ctx, MembersPrefix+g.id, g.rev)
			switch {
			case err != nil && ctx.Err() == nil:
				o.log.Warn("delete a dead member's record", "member", g.id, "err", err)
			case deleted:
				o.log.Info("deleted a dead member's record", "member", g.id, "unchanged_for", o.reapAfter())
			}
		}
	}
}

// watchLoop lists prefix and watches it from the listed revision; a
// failed watch is followed by a new List.
func (o *Owners) watchLoop(ctx context.Context, prefix string, list func(context.Context) (int64, error), apply func(systemstore.WatchEvent)) {
	retry := o.cfg.TTL / 10
	for ctx.Err() == nil {
		rev, err := list(ctx)
		if err != nil {
			if ctx.Err() == nil {
				o.log.Warn("list failed; retrying", "prefix", prefix, "err", err)
			}
			sleep(ctx, retry)
			continue
		}
		for ev := range o.cfg.KV.Watch(ctx, prefix, rev) {
			if ev.Err != nil {
				if ctx.Err() == nil {
					o.log.Warn("watch failed; listing again", "prefix", prefix, "rev", rev, "err", ev.Err)
				}
				break
			}
			apply(ev)
			rev = ev.Rev
		}
		sleep(ctx, retry)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// listMembers replaces the member view with a List. A member first seen
// in a List at start has an unknown age and counts as live only from its
// next heartbeat; one whose record changed since this replica last saw
// it counts as seen now.
func (o *Owners) listMembers(ctx context.Context) (int64, error) {
	kvs, rev, err := o.cfg.KV.List(ctx, MembersPrefix)
	if err != nil {
		return 0, err
	}
	now := o.cfg.Now()
	o.mu.Lock()
	next := make(map[string]seenMember, len(kvs))
	for _, kv := range kvs {
		m, err := decodeMember(kv.Key, kv.Value)
		if err != nil {
			o.log.Warn("ignoring member record", "err", err)
			continue
		}
		old, known := o.seen[m.ID]
		switch {
		case known && old.rev == kv.Rev:
			next[m.ID] = old
		case known:
			next[m.ID] = seenMember{m: m, rev: kv.Rev, at: now, since: o.joined(old, now)}
		default:
			next[m.ID] = seenMember{m: m, rev: kv.Rev}
		}
	}
	o.seen = next
	o.mu.Unlock()
	o.kick()
	return rev, nil
}

func (o *Owners) applyMember(ev systemstore.WatchEvent) {
	id := strings.TrimPrefix(ev.Key, MembersPrefix)
	o.mu.Lock()
	if ev.Type == systemstore.EventDelete {
		delete(o.seen, id)
	} else if m, err := decodeMember(ev.Key, ev.Value); err != nil {
		o.log.Warn("ignoring member record", "err", err)
	} else {
		now := o.cfg.Now()
		since := now
		if old, ok := o.seen[id]; ok {
			since = o.joined(old, now)
		} else if now.Before(o.settled) {
			since = time.Time{}
		}
		o.seen[id] = seenMember{m: m, rev: ev.Rev, at: now, since: since}
	}
	o.mu.Unlock()
	if ev.Type == systemstore.EventDelete {
		o.kick() // a clean leave: re-plan now
	}
}

func (o *Owners) listRecords(ctx context.Context) (int64, error) {
	kvs, rev, err := o.cfg.KV.List(ctx, OwnershipPrefix)
	if err != nil {
		return 0, err
	}
	for _, kv := range kvs {
		o.applyRecord(systemstore.WatchEvent{Type: systemstore.EventPut, Key: kv.Key, Value: kv.Value, Rev: kv.Rev})
	}
	return rev, nil
}

func (o *Owners) applyRecord(ev systemstore.WatchEvent) {
	if ev.Type == systemstore.EventDelete {
		s, err := strconv.Atoi(strings.TrimPrefix(ev.Key, OwnershipPrefix))
		if err == nil && s >= 0 && s < len(o.records) {
			o.records[s].Store(nil)
			o.notify()
			o.kick()
		}
		return
	}
	s, r, err := decodeRecord(ev.Key, ev.Value, o.cfg.Shards)
	if err != nil {
		o.log.Warn("ignoring ownership record", "err", err)
		return
	}
	if o.storeRecord(s, r) {
		o.notify()
		o.kick()
	}
}

// storeRecord keeps r as shard s's record unless a newer epoch is known;
// it reports whether the record changed.
func (o *Owners) storeRecord(s int, r *Record) bool {
	for {
		old := o.records[s].Load()
		if old != nil && (old.Epoch > r.Epoch || *old == *r) {
			return false
		}
		if o.records[s].CompareAndSwap(old, r) {
			return true
		}
	}
}

// joined returns the join time of a member seen again at now, last seen
// as old: kept while it stayed live, now when it had aged out.
func (o *Owners) joined(old seenMember, now time.Time) time.Time {
	if o.isLive(old, now) {
		return old.since
	}
	if now.Before(o.settled) {
		return time.Time{}
	}
	return now
}

func (o *Owners) isLive(sm seenMember, now time.Time) bool {
	return !sm.at.IsZero() && now.Sub(sm.at) < o.cfg.TTL
}

// rankAfter is how long a member that joined after this replica settled
// is live before it is ranked: long enough for it to have settled and be
// campaigning, so that a holder does not give a shard up to a member that
// is not yet asking for it.
func (o *Owners) rankAfter() time.Duration { return o.cfg.TTL/2 + o.cfg.TTL/10 }

// liveMembers returns the live members at now, sorted by ID (and updates
// Members), and the IDs of those ranked for shards: live and joined at
// least rankAfter ago. This replica is always both.
func (o *Owners) liveMembers(now time.Time) (live []Member, ranked []string) {
	o.mu.Lock()
	live = []Member{o.self}
	ranked = []string{o.cfg.ID}
	for id, sm := range o.seen {
		if id == o.cfg.ID || !o.isLive(sm, now) {
			continue
		}
		live = append(live, sm.m)
		if sm.since.IsZero() || now.Sub(sm.since) >= o.rankAfter() {
			ranked = append(ranked, id)
		}
	}
	o.mu.Unlock()
	slices.SortFunc(live, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	slices.Sort(ranked)
	if !slices.Equal(live, *o.members.Load()) {
		o.members.Store(&live)
		o.notify()
	}
	return live, ranked
}

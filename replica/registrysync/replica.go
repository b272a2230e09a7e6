package registrysync

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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore"
)

// Key prefixes a Replica uses besides systemstore's.
const (
	LastSeenPrefix = "lastseen/"
	probeKey       = "election/probe"
)

// Defaults for Config's zero values.
const (
	DefaultFlush  = 10 * time.Second // the default TTL / 3
	DefaultShards = 32
	// DefaultValueBytes is a stamp value's bound: the store's value limit
	// less room for the request around it (etcd refuses a request over
	// 1.5 MiB by default; systemstore.MaxValueLen is 1 MiB).
	DefaultValueBytes = systemstore.MaxValueLen - 4<<10
	DefaultProbe      = time.Second
	// retry is the pause after a failed List or Campaign.
	retry = time.Second
)

// Leases is the lease manager a Replica feeds; *lease.Manager.
type Leases interface {
	Adopt(rec systemstore.Record, rev int64, seen time.Time) error
	AdoptBatch(batch []lease.Adoption) []error
	Drop(key string, rev int64) error
	Keys() map[string]int64
	Seen(id string, t time.Time)
	LocalStamps(fn func(lease.Stamp))
}

// Settings takes the settings other replicas store; *migration.Controller.
type Settings interface {
	ApplyStored(key string, value []byte) error
}

var _ Leases = (*lease.Manager)(nil)

// Config configures a Replica.
type Config struct {
	// KV is the shared store; non-nil.
	KV systemstore.KV
	// Name names the store in status and logs ("etcd://h:2379/spillway").
	Name string
	// Settings is fed the stored settings; nil ignores them.
	Settings Settings
	// Elector elects the expiry decider; nil means this replica always
	// decides (only right when it is alone on the store).
	Elector systemstore.Elector
	// ID names this replica in the store and the election: letters,
	// digits and -_.:=@+; non-empty.
	ID string
	// Flush is how often last-seen stamps are written; zero means 10 s.
	Flush time.Duration
	// Shards is how many values this replica's stamps are spread over;
	// zero means 32.
	Shards int
	// ValueBytes bounds one stored stamp value; a shard whose stamps
	// encode larger is split over more keys (<shard>, <shard>-1, ...), so
	// a replica holds any number of leases under the store's request
	// limit. Zero means DefaultValueBytes.
	ValueBytes int
	// Probe is how often the store is checked; zero means 1 s.
	Probe time.Duration
	// MaxTTL is the longest lease TTL (lease.Config.MaxTTL); a stamp value
	// whose newest stamp is older than MaxTTL plus Grace belongs to a
	// replica that is gone, and the decider deletes it. Zero means 1 h.
	MaxTTL time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Replica keeps this process in step with the shared store.
type Replica struct {
	// Read-only after New.
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	grace   time.Duration
	metrics *metrics

	up      atomic.Bool
	upSince atomic.Int64 // unix nanos of the last down→up, or of start
	// relisting is true while the registrations are being listed again
	// after their watch broke (Complete).
	relisting atomic.Bool
	leader    atomic.Bool
	leadSince atomic.Int64
	freshAt   atomic.Int64  // unix nanos of the last List of every replica's stamps
	upNotify  chan struct{} // 1-slot: the store came back, flush now

	// mu guards lastErr, regRev, resync and newest.
	mu      sync.Mutex
	newest  map[string]int64 // other replicas' stamp keys → their newest stamp
	lastErr error
	regRev  int64         // revision the registrations are synced to
	resync  chan struct{} // closed when the store comes back: watches list again

	// Flusher only.
	written map[int][]stamp // shard → stamps last written, by lease id
	chunks  map[int]int     // shard → values it was last written in (0: none)

	// leases is the lease manager this replica feeds; set by Init, before
	// Run.
	leases Leases

	// startRev is each prefix's revision listed by Init; read-only after
	// Init.
	startRev map[string]int64
}

// New validates cfg and returns a Replica.
func New(cfg Config) (*Replica, error) {
	switch {
	case cfg.KV == nil:
		return nil, errors.New("replica config: KV is nil")
	case cfg.Flush < 0:
		return nil, fmt.Errorf("replica config: Flush %v is negative", cfg.Flush)
	case cfg.Shards < 0:
		return nil, fmt.Errorf("replica config: Shards %d is negative", cfg.Shards)
	case cfg.Probe < 0:
		return nil, fmt.Errorf("replica config: Probe %v is negative", cfg.Probe)
	case cfg.MaxTTL < 0:
		return nil, fmt.Errorf("replica config: MaxTTL %v is negative", cfg.MaxTTL)
	case cfg.ValueBytes != 0 && (cfg.ValueBytes < 1024 || cfg.ValueBytes > systemstore.MaxValueLen):
		return nil, fmt.Errorf("replica config: ValueBytes %d: want 1024 to %d (0 for %d)", cfg.ValueBytes, systemstore.MaxValueLen, DefaultValueBytes)
	}
	if err := systemstore.ValidateKey(LastSeenPrefix + cfg.ID); err != nil || cfg.ID == "" || strings.Contains(cfg.ID, "/") {
		return nil, fmt.Errorf("replica config: ID %q: want letters, digits and -_.:=@+", cfg.ID)
	}
	if cfg.Flush == 0 {
		cfg.Flush = DefaultFlush
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Probe == 0 {
		cfg.Probe = DefaultProbe
	}
	if cfg.ValueBytes == 0 {
		cfg.ValueBytes = DefaultValueBytes
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = lease.DefaultMaxTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Replica{
		cfg: cfg, log: cfg.Logger, now: cfg.Now,
		grace:    GraceFor(cfg.Flush, cfg.Probe),
		upNotify: make(chan struct{}, 1),
		resync:   make(chan struct{}),
		newest:   map[string]int64{},
		written:  map[int][]stamp{},
		chunks:   map[int]int{},
	}
	r.metrics = newMetrics(r)
	if cfg.Registerer != nil {
		if err := r.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("replica metrics: %w", err)
		}
	}
	return r, nil
}

// GraceFor is the Grace of a Replica with flush and probe (zero: their
// defaults).
func GraceFor(flush, probe time.Duration) time.Duration {
	if flush == 0 {
		flush = DefaultFlush
	}
	if probe == 0 {
		probe = DefaultProbe
	}
	return flush + 2*probe
}

// Grace is how late another replica's last-seen stamp may be: Flush plus
// two probes. Give it to lease.Config.ExpiryGrace.
func (r *Replica) Grace() time.Duration { return r.grace }

// MayExpire implements lease.Decider: this replica holds the election,
// the store answers, and it has listed every replica's last-seen stamps
// at least Grace after both became true (so that what other replicas
// could not flush while it was not deciding, or while the store was out,
// has arrived).
func (r *Replica) MayExpire() bool {
	if !r.up.Load() || !r.leader.Load() {
		return false
	}
	return r.freshAt.Load() >= r.holdUntil()
}

// holdUntil is when the stamps are complete enough to decide expiry.
func (r *Replica) holdUntil() int64 {
	return max(r.upSince.Load(), r.leadSince.Load()) + int64(r.grace)
}

// refreshStamps lists the stamps once the hold has passed, if this
// replica decides and has not listed them since.
func (r *Replica) refreshStamps(ctx context.Context) {
	if !r.up.Load() || !r.leader.Load() {
		return
	}
	hold := r.holdUntil()
	if r.freshAt.Load() >= hold || r.now().UnixNano() < hold {
		return
	}
	now := r.now().UnixNano()
	if _, err := r.syncStamps(ctx); err != nil {
		r.log.Warn("list last-seen stamps before deciding expiry", "err", err)
		return
	}
	r.freshAt.Store(now)
	r.log.Info("expiry decider has every replica's last-seen stamps; expiring", "replica", r.cfg.ID)
}

// Sharing implements lease.Sharer: nil while this replica reaches the
// store, so that the stamps of the heartbeats it takes reach the expiry
// decider at the next Flush. While the probe fails (the store is down, or
// only this replica is cut from it) it names the store and the last
// error: the lease manager then answers heartbeats UNAVAILABLE after
// renewing them, so that agents move to a replica that can share them.
// Without that, the decider would expire the live leases of the agents
// that stay on a cut replica.
func (r *Replica) Sharing() error {
	if r.up.Load() {
		return nil
	}
	r.mu.Lock()
	err := r.lastErr
	r.mu.Unlock()
	if err == nil {
		return fmt.Errorf("store %s: not reached yet", r.cfg.Name)
	}
	return fmt.Errorf("store %s unreachable from this replica: %w", r.cfg.Name, err)
}

// Complete implements lease.View: nil while this replica's registrations
// follow the store's watch; an error while the store is unreachable
// (Sharing) or while it lists them again after a broken watch (after an
// outage that is a full list: seconds at 100,000 registrations), when a
// lease another replica made meanwhile may not be here yet.
func (r *Replica) Complete() error {
	if err := r.Sharing(); err != nil {
		return err
	}
	if r.relisting.Load() {
		return fmt.Errorf("store %s: listing the registrations again after a broken watch", r.cfg.Name)
	}
	return nil
}

// Status is what /readyz shows of the store.
type Status struct {
	Name    string
	Up      bool
	Decider bool  // this replica holds the expiry election
	Rev     int64 // registrations synced to this revision
	Err     error // the last store error, or nil
}

func (s Status) String() string {
	state := "up"
	if !s.Up {
		state = "unreachable"
		if s.Err != nil {
			state += ": " + s.Err.Error()
		}
	}
	role := "another replica decides expiry"
	if s.Decider {
		role = "this replica decides expiry"
	}
	return fmt.Sprintf("store %s: %s; synced to revision %d; %s", s.Name, state, s.Rev, role)
}

// Status returns the store's state as this replica sees it.
func (r *Replica) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Status{Name: r.cfg.Name, Up: r.up.Load(), Decider: r.leader.Load(), Rev: r.regRev, Err: r.lastErr}
}

func (r *Replica) setUp(err error) {
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
	if err == nil {
		if !r.up.Swap(true) {
			r.upSince.Store(r.now().UnixNano())
			r.log.Info("store reachable", "store", r.cfg.Name)
			select {
			case r.upNotify <- struct{}{}:
			default:
			}
			r.mu.Lock()
			close(r.resync)
			r.resync = make(chan struct{})
			r.mu.Unlock()
		}
		return
	}
	if r.up.Swap(false) {
		r.log.Error("store unreachable: serving from memory, expiring nothing, refusing writes", "store", r.cfg.Name, "err", err)
	}
}

// Init loads the settings, the last-seen stamps and the registrations
// into leases, so that the replica serves the whole fleet before it
// reports ready. Run feeds the same leases. The lease manager is given
// here rather than in Config because it is built after the Replica: the
// Replica is its expiry decider (lease.Config.Decider).
func (r *Replica) Init(ctx context.Context, leases Leases) error {
	if leases == nil {
		return errors.New("replica init: leases is nil")
	}
	r.leases = leases
	r.startRev = map[string]int64{}
	for _, p := range []struct {
		prefix string
		list   func(context.Context) (int64, error)
	}{
		{systemstore.SettingsPrefix, r.syncSettings},
		{systemstore.RegistrationsPrefix, r.syncRegistrations},
		{LastSeenPrefix, r.syncStamps}, // after the leases they stamp
	} {
		rev, err := p.list(ctx)
		if err != nil {
			return err
		}
		r.startRev[p.prefix] = rev
	}
	r.setUp(nil)
	return nil
}

// Run syncs, flushes, probes and campaigns until ctx ends; it returns nil
// then.
func (r *Replica) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { r.watchLoop(ctx, systemstore.RegistrationsPrefix, r.syncRegistrations, r.applyRegistration) })
	wg.Go(func() { r.watchLoop(ctx, systemstore.SettingsPrefix, r.syncSettings, r.applySetting) })
	wg.Go(func() { r.watchLoop(ctx, LastSeenPrefix, r.syncStamps, r.applyStamp) })
	wg.Go(func() { r.probeLoop(ctx) })
	wg.Go(func() { r.flushLoop(ctx) })
	wg.Go(func() { r.electLoop(ctx) })
	wg.Wait()
	return nil
}

// watchLoop lists prefix (after the first time) and watches it from the
// listed revision; a failed watch is followed by a new List.
func (r *Replica) watchLoop(ctx context.Context, prefix string, list func(context.Context) (int64, error), apply func(systemstore.WatchEvent)) {
	rev, ok := r.startRev[prefix]
	if !ok {
		rev = -1
	}
	regs := prefix == systemstore.RegistrationsPrefix
	for ctx.Err() == nil {
		if rev < 0 {
			if regs {
				r.relisting.Store(true)
			}
			var err error
			if rev, err = list(ctx); err != nil {
				rev = -1
				r.log.Warn("list failed; retrying", "prefix", prefix, "err", err)
				sleep(ctx, retry)
				continue
			}
			r.metrics.resyncs.Inc()
			if regs {
				r.relisting.Store(false)
			}
		}
		r.mu.Lock()
		resync := r.resync
		r.mu.Unlock()
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-resync: // the store came back: do not trust a watch that lived through the outage
				cancel()
			case <-wctx.Done():
			}
		}()
		for ev := range r.cfg.KV.Watch(wctx, prefix, rev) {
			if ev.Err != nil {
				if ctx.Err() == nil {
					r.log.Warn("watch failed; listing again", "prefix", prefix, "rev", rev, "err", ev.Err)
				}
				break
			}
			apply(ev)
			rev = ev.Rev
		}
		cancel()
		rev = -1
		sleep(ctx, retry/10)
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

// setRegRev records the revision registrations are synced to.
func (r *Replica) setRegRev(rev int64) {
	r.mu.Lock()
	if rev > r.regRev {
		r.regRev = rev
	}
	r.mu.Unlock()
}

// syncRegistrations lists every registration, adopts each, and drops the
// leases held here that the store no longer has.
func (r *Replica) syncRegistrations(ctx context.Context) (int64, error) {
	kvs, rev, err := r.cfg.KV.List(ctx, systemstore.RegistrationsPrefix)
	if err != nil {
		return 0, fmt.Errorf("sync registrations from %s: %w", r.cfg.Name, err)
	}
	held := r.leases.Keys()
	batch := make([]lease.Adoption, 0, len(kvs))
	for i := range kvs {
		key := strings.TrimPrefix(kvs[i].Key, systemstore.RegistrationsPrefix)
		delete(held, key)
		rec, err := systemstore.DecodeRecord(kvs[i].Value)
		kvs[i].Value = nil // decoded: let it go before the next one
		if err != nil {
			r.log.Error("skipped undecodable registration", "key", key, "err", err)
			continue
		}
		batch = append(batch, lease.Adoption{Rec: rec, Rev: kvs[i].Rev})
	}
	// One registry change per few thousand registrations, not one each:
	// a million adopted one by one took a minute (docs/benchmarks.md).
	for _, err := range r.leases.AdoptBatch(batch) {
		r.log.Error("skipped registration", "err", err)
	}
	for key := range held {
		if err := r.leases.Drop(key, rev); err != nil {
			r.log.Error("drop registration", "key", key, "err", err)
		}
	}
	r.setRegRev(rev)
	r.log.Info("synced registrations", "store", r.cfg.Name, "count", len(kvs), "rev", rev)
	return rev, nil
}

func (r *Replica) adopt(key string, value []byte, rev int64) {
	rec, err := systemstore.DecodeRecord(value)
	if err != nil {
		r.log.Error("skipped undecodable registration", "key", key, "err", err)
		return
	}
	if err := r.leases.Adopt(rec, rev, time.Time{}); err != nil {
		r.log.Error("skipped registration", "key", key, "err", err)
	}
}

func (r *Replica) applyRegistration(ev systemstore.WatchEvent) {
	key := strings.TrimPrefix(ev.Key, systemstore.RegistrationsPrefix)
	switch ev.Type {
	case systemstore.EventPut:
		r.adopt(key, ev.Value, ev.Rev)
	case systemstore.EventDelete:
		if err := r.leases.Drop(key, ev.Rev); err != nil {
			r.log.Error("drop registration", "key", key, "err", err)
		}
	}
	r.setRegRev(ev.Rev)
}

func (r *Replica) syncSettings(ctx context.Context) (int64, error) {
	kvs, rev, err := r.cfg.KV.List(ctx, systemstore.SettingsPrefix)
	if err != nil {
		return 0, fmt.Errorf("sync settings from %s: %w", r.cfg.Name, err)
	}
	for _, kv := range kvs {
		r.applySetting(systemstore.WatchEvent{Type: systemstore.EventPut, Key: kv.Key, Value: kv.Value, Rev: kv.Rev})
	}
	return rev, nil
}

func (r *Replica) applySetting(ev systemstore.WatchEvent) {
	if r.cfg.Settings == nil || ev.Type != systemstore.EventPut {
		return
	}
	key := strings.TrimPrefix(ev.Key, systemstore.SettingsPrefix)
	if err := r.cfg.Settings.ApplyStored(key, ev.Value); err != nil {
		r.log.Error("stored setting not applied", "key", key, "err", err)
	}
}

// stamps is the stored form of one last-seen shard.
type stamps struct {
	Stamps map[string]int64 `json:"stamps"` // lease id → unix nanoseconds
}

func (r *Replica) ownPrefix() string { return LastSeenPrefix + r.cfg.ID + "/" }

func (r *Replica) syncStamps(ctx context.Context) (int64, error) {
	kvs, rev, err := r.cfg.KV.List(ctx, LastSeenPrefix)
	if err != nil {
		return 0, fmt.Errorf("sync last-seen stamps from %s: %w", r.cfg.Name, err)
	}
	for _, kv := range kvs {
		r.applyStamp(systemstore.WatchEvent{Type: systemstore.EventPut, Key: kv.Key, Value: kv.Value, Rev: kv.Rev})
	}
	return rev, nil
}

func (r *Replica) applyStamp(ev systemstore.WatchEvent) {
	if strings.HasPrefix(ev.Key, r.ownPrefix()) {
		return
	}
	if ev.Type == systemstore.EventDelete {
		r.mu.Lock()
		delete(r.newest, ev.Key)
		r.mu.Unlock()
		return
	}
	var s stamps
	if err := json.Unmarshal(ev.Value, &s); err != nil {
		r.log.Error("skipped undecodable last-seen stamps", "key", ev.Key, "err", err)
		return
	}
	var newest int64
	for id, ns := range s.Stamps {
		r.leases.Seen(id, time.Unix(0, ns))
		newest = max(newest, ns)
	}
	r.mu.Lock()
	r.newest[ev.Key] = newest
	r.mu.Unlock()
	r.metrics.stampsRead.Add(float64(len(s.Stamps)))
}

// dropGone deletes, on the decider, the stamp values of replicas that are
// gone: none of their stamps is younger than MaxTTL plus Grace, so they
// keep no lease alive. (A Deployment's pods get new names, hence new ids,
// at every restart.)
func (r *Replica) dropGone(ctx context.Context) {
	if !r.MayExpire() {
		return
	}
	horizon := r.now().UnixNano() - int64(r.cfg.MaxTTL+r.grace)
	r.mu.Lock()
	var gone []string
	for k, ns := range r.newest {
		if ns < horizon {
			gone = append(gone, k)
		}
	}
	r.mu.Unlock()
	for _, k := range gone {
		if _, err := r.cfg.KV.Delete(ctx, k); err != nil {
			r.log.Warn("delete a gone replica's last-seen stamps", "key", k, "err", err)
			return
		}
		r.mu.Lock()
		delete(r.newest, k)
		r.mu.Unlock()
		r.log.Info("deleted a gone replica's last-seen stamps", "key", k)
	}
}

func (r *Replica) shard(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(r.cfg.Shards))
}

func (r *Replica) flushLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.upNotify:
		}
		if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("last-seen flush failed", "store", r.cfg.Name, "err", err)
		}
		r.dropGone(ctx)
	}
}

// Flush writes the shards whose stamps moved since the last flush: one
// store write per changed shard, whatever the number of heartbeats. Stamps
// older than their lease's TTL plus Grace are left out (the lease is not
// heartbeated here any more). Run calls it every Flush; it is exported for
// tests and benchmarks and must not run concurrently with itself.
//
// Each shard's stamps are a slice in the order LocalStamps walks the
// leases (the lease set's own order, which only registrations and
// removals change), compared with the last written one and encoded
// straight from it: at a million leases a flush built and compared a
// million-entry map and sorted its keys twice (for the chunks, then in
// json.Marshal) every interval, and then still sorted the slices by
// lease id (a quarter of a second). Readers take a value's stamps in any
// order.
func (r *Replica) Flush(ctx context.Context) error {
	now := r.now().UnixNano()
	next := make([][]stamp, r.cfg.Shards)
	r.leases.LocalStamps(func(s lease.Stamp) {
		ns := s.Seen.UnixNano()
		if now-ns > int64(s.TTL+r.grace) {
			return
		}
		sh := r.shard(s.LeaseID)
		next[sh] = append(next[sh], stamp{id: s.LeaseID, ns: ns})
	})
	var errs []error
	for sh := 0; sh < r.cfg.Shards; sh++ {
		cur := next[sh]
		if slices.Equal(cur, r.written[sh]) {
			continue
		}
		err := r.writeShard(ctx, sh, cur)
		if err != nil {
			errs = append(errs, err)
			if !errors.Is(err, systemstore.ErrInvalid) {
				break // the store is down: the next flush retries
			}
			continue
		}
		r.written[sh] = cur
		r.metrics.stampsWritten.Add(float64(len(cur)))
	}
	return errors.Join(errs...)
}

// stamp is one lease's last heartbeat here, as Flush writes it.
type stamp struct {
	id string
	ns int64 // unix nanoseconds
}

// stampKey is the key of shard sh's chunk c: "<shard>" for the first,
// "<shard>-<c>" for the others. Readers take every value under
// "lastseen/<replica>/" whatever its key (a770d6c did too), so chunks
// need nothing of them.
func (r *Replica) stampKey(sh, c int) string {
	if c == 0 {
		return fmt.Sprintf("%s%03d", r.ownPrefix(), sh)
	}
	return fmt.Sprintf("%s%03d-%d", r.ownPrefix(), sh, c)
}

// writeShard stores shard sh's stamps, in their order, in as few
// values of at most ValueBytes as they fit, so the same stamps in the
// same order give the same chunks, then deletes the chunks of the last write past the new
// count. A shard with no stamps deletes them all.
func (r *Replica) writeShard(ctx context.Context, sh int, cur []stamp) error {
	values, err := chunkStamps(cur, r.cfg.ValueBytes)
	if err != nil {
		return err
	}
	for c, b := range values {
		if _, err := r.cfg.KV.Put(ctx, r.stampKey(sh, c), b); err != nil {
			return err
		}
		r.metrics.writes.Inc()
	}
	for c := len(values); c < r.chunks[sh]; c++ {
		if _, err := r.cfg.KV.Delete(ctx, r.stampKey(sh, c)); err != nil {
			return err
		}
		r.metrics.writes.Inc()
	}
	r.chunks[sh] = len(values)
	return nil
}

// chunkStamps encodes stamps, in their order, into values of at most
// limit bytes each, in the JSON of type stamps ({"stamps":{"<lease
// id>":<unix ns>,...}}) that every release reads.
func chunkStamps(all []stamp, limit int) ([][]byte, error) {
	const head, tail = `{"stamps":{`, `}}`
	var out [][]byte
	var entry []byte
	for len(all) > 0 {
		b := append(make([]byte, 0, min(limit, len(head)+len(tail)+len(all)*40)), head...)
		n := 0
		for ; n < len(all); n++ {
			entry = appendStamp(entry[:0], all[n], n > 0)
			if len(b)+len(entry)+len(tail) > limit {
				break
			}
			b = append(b, entry...)
		}
		if n == 0 {
			return nil, fmt.Errorf("last-seen stamps: lease id %.40q does not fit a value of %d bytes: %w", all[0].id, limit, systemstore.ErrInvalid)
		}
		out = append(out, append(b, tail...))
		all = all[n:]
	}
	return out, nil
}

// appendStamp appends `"<id>":<ns>` to b, after a comma unless first.
func appendStamp(b []byte, s stamp, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	if plainID(s.id) {
		b = append(b, '"')
		b = append(b, s.id...)
		b = append(b, '"')
	} else {
		q, _ := json.Marshal(s.id) // a string always encodes
		b = append(b, q...)
	}
	b = append(b, ':')
	return strconv.AppendInt(b, s.ns, 10)
}

// plainID reports whether id is JSON as it is between quotes (lease ids
// are hex; a record from elsewhere may hold anything).
func plainID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func (r *Replica) probeLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Probe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.Probe)
		_, _, err := r.cfg.KV.Get(pctx, probeKey)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, systemstore.ErrNotFound) {
			err = nil
		}
		r.setUp(err)
		r.refreshStamps(ctx)
	}
}

func (r *Replica) electLoop(ctx context.Context) {
	if r.cfg.Elector == nil {
		r.leadSince.Store(r.now().UnixNano())
		r.leader.Store(true)
		<-ctx.Done()
		r.leader.Store(false)
		return
	}
	for ctx.Err() == nil {
		lost, resign, err := r.cfg.Elector.Campaign(ctx, r.cfg.ID)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("expiry election: campaign failed; retrying", "err", err)
				sleep(ctx, retry)
			}
			continue
		}
		r.leadSince.Store(r.now().UnixNano())
		r.leader.Store(true)
		r.metrics.elected.Inc()
		r.log.Info("elected expiry decider", "replica", r.cfg.ID, "expires_after", r.grace)
		select {
		case <-lost:
		case <-ctx.Done():
		}
		r.leader.Store(false)
		resign()
		if ctx.Err() == nil {
			r.log.Warn("lost the expiry election", "replica", r.cfg.ID)
		}
	}
}

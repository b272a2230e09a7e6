package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spillway/spillway/registry/systemstore"
)

// Buckets of the bbolt file. Keys live in kvBucket; revBucket indexes them
// by the revision that last wrote them, so a watch replays from any
// revision with one cursor; metaBucket holds the revision counter and the
// compaction horizon. legacy* are the buckets of spillway before the KV
// (registrations and settings), moved into kvBucket once on open.
var (
	kvBucket   = []byte("kv/v1")
	revBucket  = []byte("kv-revs/v1")
	metaBucket = []byte("kv-meta/v1")

	metaRev       = []byte("rev")
	metaCompacted = []byte("compacted")

	legacyRecords  = []byte("vm-registrations/v1")
	legacySettings = []byte("settings/v1")
)

// An entry in kvBucket: revision, kind, wall time of the write (unix ns,
// used to expire tombstones), then the value.
const (
	entryHeader   = 17
	kindValue     = 0
	kindTombstone = 1
)

// DefaultTombstoneRetention is how long a delete is kept for watches that
// replay from an older revision; a watch from before it gets systemstore.ErrCompacted.
const DefaultTombstoneRetention = 24 * time.Hour

// Options are the optional knobs of Open.
type Options struct {
	// TombstoneRetention: how long deletes are kept for watch replay; zero
	// means DefaultTombstoneRetention.
	TombstoneRetention time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// KV is the KV in one embedded bbolt file: one process, the default.
// Watch sees the writes of this process only (the file is locked against
// others).
type KV struct {
	// Read-only after Open.
	db        *bolt.DB
	path      string
	retention time.Duration
	now       func() time.Time
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup

	// mu guards closed and watchers.
	mu       sync.Mutex
	closed   bool
	watchers map[chan struct{}]struct{} // 1-slot kicks, one per watch
}

var _ systemstore.KV = (*KV)(nil)

// Open opens (creating if needed) registrations.db in dir. A file
// written by an older spillway (registrations and settings buckets) is
// moved into the KV layout once, under "registrations/" and "settings/".
// It fails if another process holds the file.
func Open(dir string, opts Options) (*KV, error) {
	if dir == "" {
		return nil, errors.New("open store: data dir is empty")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	path := filepath.Join(dir, "registrations.db")
	db, err := bolt.Open(path, 0o640, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w (is another spillway using this data dir?)", path, err)
	}
	// Let a burst of writes share one commit; Put still returns only after
	// its commit is on disk.
	db.MaxBatchDelay = 2 * time.Millisecond
	b := &KV{
		db: db, path: path, retention: opts.TombstoneRetention, now: opts.Now,
		done: make(chan struct{}), watchers: map[chan struct{}]struct{}{},
	}
	if b.retention <= 0 {
		b.retention = DefaultTombstoneRetention
	}
	if b.now == nil {
		b.now = time.Now
	}
	if err := db.Update(b.setup); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := b.CompactTombstones(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	b.wg.Add(1)
	go b.gcLoop()
	return b, nil
}

// setup creates the buckets and moves a legacy layout into them.
func (b *KV) setup(tx *bolt.Tx) error {
	for _, name := range [][]byte{kvBucket, revBucket, metaBucket} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	for _, legacy := range []struct {
		bucket []byte
		prefix string
	}{{legacyRecords, systemstore.RegistrationsPrefix}, {legacySettings, systemstore.SettingsPrefix}} {
		old := tx.Bucket(legacy.bucket)
		if old == nil {
			continue
		}
		if err := old.ForEach(func(k, v []byte) error {
			_, err := b.write(tx, legacy.prefix+string(k), kindValue, v)
			return err
		}); err != nil {
			return fmt.Errorf("move bucket %s: %w", legacy.bucket, err)
		}
		if err := tx.DeleteBucket(legacy.bucket); err != nil {
			return fmt.Errorf("move bucket %s: %w", legacy.bucket, err)
		}
	}
	return nil
}

func u64(v []byte) int64 {
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func revKey(rev int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(rev)) }

// write stores key at the next revision, inside tx.
func (b *KV) write(tx *bolt.Tx, key string, kind byte, value []byte) (int64, error) {
	meta, kvs, revs := tx.Bucket(metaBucket), tx.Bucket(kvBucket), tx.Bucket(revBucket)
	rev := u64(meta.Get(metaRev)) + 1
	if err := meta.Put(metaRev, revKey(rev)); err != nil {
		return 0, err
	}
	if old := kvs.Get([]byte(key)); len(old) >= entryHeader {
		if err := revs.Delete(old[:8]); err != nil {
			return 0, err
		}
	}
	e := make([]byte, entryHeader, entryHeader+len(value))
	binary.BigEndian.PutUint64(e, uint64(rev))
	e[8] = kind
	binary.BigEndian.PutUint64(e[9:], uint64(b.now().UnixNano()))
	e = append(e, value...)
	if err := kvs.Put([]byte(key), e); err != nil {
		return 0, err
	}
	return rev, revs.Put(revKey(rev), []byte(key))
}

func (b *KV) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// kick wakes every watch after a commit.
func (b *KV) kick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for w := range b.watchers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Put implements KV.
func (b *KV) Put(_ context.Context, key string, value []byte) (int64, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, fmt.Errorf("put: %w", err)
	}
	if b.isClosed() {
		return 0, fmt.Errorf("put %s: %w", key, systemstore.ErrClosed)
	}
	// A copy: Batch may run the function again, after the caller reused
	// value.
	v := bytes.Clone(value)
	var rev int64
	err := b.db.Batch(func(tx *bolt.Tx) error {
		var err error
		rev, err = b.write(tx, key, kindValue, v)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	b.kick()
	return rev, nil
}

// Delete implements KV. It keeps a tombstone for TombstoneRetention so
// that a watch replaying from an older revision sees the delete.
func (b *KV) Delete(_ context.Context, key string) (int64, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("delete: %w", err)
	}
	if b.isClosed() {
		return 0, fmt.Errorf("delete %s: %w", key, systemstore.ErrClosed)
	}
	var rev int64
	var wrote bool
	err := b.db.Batch(func(tx *bolt.Tx) error {
		wrote = false
		old := tx.Bucket(kvBucket).Get([]byte(key))
		if len(old) < entryHeader || old[8] == kindTombstone {
			rev = u64(tx.Bucket(metaBucket).Get(metaRev))
			return nil
		}
		var err error
		rev, err = b.write(tx, key, kindTombstone, nil)
		wrote = err == nil
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete %s: %w", key, err)
	}
	if wrote {
		b.kick()
	}
	return rev, nil
}

// Get implements KV.
func (b *KV) Get(_ context.Context, key string) ([]byte, int64, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return nil, 0, fmt.Errorf("get: %w", err)
	}
	if b.isClosed() {
		return nil, 0, fmt.Errorf("get %s: %w", key, systemstore.ErrClosed)
	}
	var v []byte
	var rev int64
	err := b.db.View(func(tx *bolt.Tx) error {
		e := tx.Bucket(kvBucket).Get([]byte(key))
		if len(e) < entryHeader || e[8] == kindTombstone {
			return systemstore.ErrNotFound
		}
		rev, v = u64(e[:8]), bytes.Clone(e[entryHeader:])
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", key, err)
	}
	return v, rev, nil
}

// List implements KV.
func (b *KV) List(_ context.Context, prefix string) ([]systemstore.KeyValue, int64, error) {
	if err := systemstore.ValidatePrefix(prefix); err != nil {
		return nil, 0, fmt.Errorf("list: %w", err)
	}
	if b.isClosed() {
		return nil, 0, fmt.Errorf("list %s: %w", prefix, systemstore.ErrClosed)
	}
	var out []systemstore.KeyValue
	var rev int64
	err := b.db.View(func(tx *bolt.Tx) error {
		rev = u64(tx.Bucket(metaBucket).Get(metaRev))
		c := tx.Bucket(kvBucket).Cursor()
		p := []byte(prefix)
		for k, e := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, e = c.Next() {
			if len(e) < entryHeader || e[8] == kindTombstone {
				continue
			}
			out = append(out, systemstore.KeyValue{Key: string(k), Value: bytes.Clone(e[entryHeader:]), Rev: u64(e[:8])})
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	return out, rev, nil
}

// changesAfter reads, in revision order, the changes under prefix after
// rev, and the store's revision they bring the watch to; systemstore.ErrCompacted when
// tombstones after rev were dropped.
func (b *KV) changesAfter(prefix string, rev int64) ([]systemstore.WatchEvent, int64, error) {
	var out []systemstore.WatchEvent
	var now int64
	err := b.db.View(func(tx *bolt.Tx) error {
		now = u64(tx.Bucket(metaBucket).Get(metaRev))
		if h := u64(tx.Bucket(metaBucket).Get(metaCompacted)); rev < h {
			return fmt.Errorf("watch %s after revision %d: tombstones up to %d are dropped: %w", prefix, rev, h, systemstore.ErrCompacted)
		}
		kvs := tx.Bucket(kvBucket)
		c := tx.Bucket(revBucket).Cursor()
		for r, k := c.Seek(revKey(rev + 1)); r != nil; r, k = c.Next() {
			if !bytes.HasPrefix(k, []byte(prefix)) {
				continue
			}
			e := kvs.Get(k)
			if len(e) < entryHeader {
				continue
			}
			ev := systemstore.WatchEvent{Type: systemstore.EventPut, Key: string(k), Rev: u64(r), Value: bytes.Clone(e[entryHeader:])}
			if e[8] == kindTombstone {
				ev.Type, ev.Value = systemstore.EventDelete, nil
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, now, err
}

// Watch implements KV.
func (b *KV) Watch(ctx context.Context, prefix string, afterRev int64) <-chan systemstore.WatchEvent {
	out := make(chan systemstore.WatchEvent, 1)
	fail := func(err error) <-chan systemstore.WatchEvent {
		out <- systemstore.WatchEvent{Err: err}
		close(out)
		return out
	}
	if err := systemstore.ValidatePrefix(prefix); err != nil {
		return fail(fmt.Errorf("watch: %w", err))
	}
	kick := make(chan struct{}, 1)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fail(fmt.Errorf("watch %s: %w", prefix, systemstore.ErrClosed))
	}
	b.watchers[kick] = struct{}{}
	b.wg.Add(1)
	b.mu.Unlock()

	go func() {
		defer b.wg.Done()
		defer close(out)
		defer func() {
			b.mu.Lock()
			delete(b.watchers, kick)
			b.mu.Unlock()
		}()
		send := func(ev systemstore.WatchEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
			case <-b.done:
			}
			return false
		}
		last := afterRev
		for {
			evs, now, err := b.changesAfter(prefix, last)
			if err != nil {
				send(systemstore.WatchEvent{Err: err})
				return
			}
			for _, ev := range evs {
				if !send(ev) {
					return
				}
			}
			// Everything up to now is delivered, so an idle watch does
			// not fall behind the compaction of other prefixes.
			last = max(last, now)
			select {
			case <-kick:
			case <-ctx.Done():
				return
			case <-b.done:
				select {
				case out <- systemstore.WatchEvent{Err: fmt.Errorf("watch %s: %w", prefix, systemstore.ErrClosed)}:
				default:
				}
				return
			}
		}
	}()
	return out
}

// CompactTombstones drops the tombstones older than the retention and
// moves the compaction horizon past them. Open calls it, then every
// hour.
func (b *KV) CompactTombstones() error {
	cutoff := b.now().Add(-b.retention).UnixNano()
	return b.db.Update(func(tx *bolt.Tx) error {
		kvs, revs, meta := tx.Bucket(kvBucket), tx.Bucket(revBucket), tx.Bucket(metaBucket)
		horizon := u64(meta.Get(metaCompacted))
		var drop [][]byte
		c := revs.Cursor()
		for r, k := c.First(); r != nil; r, k = c.Next() {
			e := kvs.Get(k)
			if len(e) >= entryHeader && e[8] == kindTombstone && int64(binary.BigEndian.Uint64(e[9:17])) < cutoff {
				drop = append(drop, bytes.Clone(r))
				horizon = max(horizon, u64(r))
			}
		}
		for _, r := range drop {
			if err := kvs.Delete(revs.Get(r)); err != nil {
				return err
			}
			if err := revs.Delete(r); err != nil {
				return err
			}
		}
		if len(drop) == 0 {
			return nil
		}
		return meta.Put(metaCompacted, revKey(horizon))
	})
}

func (b *KV) gcLoop() {
	defer b.wg.Done()
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
			_ = b.CompactTombstones() // retried next hour; reads are unaffected
		}
	}
}

// Close ends the watches and closes the file.
func (b *KV) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	b.mu.Unlock()
	b.wg.Wait()
	return b.db.Close()
}

// OpenStore opens the bbolt store in dir with the default options, as a
// systemstore.Store: one replica's system store (the default).
func OpenStore(dir string) (*systemstore.Store, error) {
	kv, err := Open(dir, Options{})
	if err != nil {
		return nil, err
	}
	return systemstore.NewStore(kv), nil
}

var (
	_ systemstore.CondPutter  = (*KV)(nil)
	_ systemstore.CondDeleter = (*KV)(nil)
)

// current is key's revision in tx: 0 when absent or a tombstone.
func current(tx *bolt.Tx, key string) int64 {
	e := tx.Bucket(kvBucket).Get([]byte(key))
	if len(e) < entryHeader || e[8] == kindTombstone {
		return 0
	}
	return u64(e[:8])
}

// PutIf implements systemstore.CondPutter: the check and the write are
// one bolt write transaction.
func (b *KV) PutIf(_ context.Context, key string, value []byte, rev int64) (int64, bool, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, false, fmt.Errorf("put: %w", err)
	}
	if b.isClosed() {
		return 0, false, fmt.Errorf("put %s: %w", key, systemstore.ErrClosed)
	}
	v := bytes.Clone(value)
	var got int64
	var ok bool
	err := b.db.Batch(func(tx *bolt.Tx) error {
		got, ok = current(tx, key), false
		if got != rev {
			return nil
		}
		var err error
		got, err = b.write(tx, key, kindValue, v)
		ok = err == nil
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("put %s: %w", key, err)
	}
	if ok {
		b.kick()
	}
	return got, ok, nil
}

// DeleteIf implements systemstore.CondDeleter: a tombstone written only
// while key is at rev, in one bolt write transaction.
func (b *KV) DeleteIf(_ context.Context, key string, rev int64) (bool, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return false, fmt.Errorf("delete: %w", err)
	}
	if b.isClosed() {
		return false, fmt.Errorf("delete %s: %w", key, systemstore.ErrClosed)
	}
	var deleted bool
	err := b.db.Batch(func(tx *bolt.Tx) error {
		deleted = false
		if cur := current(tx, key); cur == 0 || cur != rev {
			return nil
		}
		_, err := b.write(tx, key, kindTombstone, nil)
		deleted = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete %s: %w", key, err)
	}
	if deleted {
		b.kick()
	}
	return deleted, nil
}

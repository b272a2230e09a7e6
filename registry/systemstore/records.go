package systemstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Records is a per-service setting replicated through a KV: one JSON
// record R per service under a key prefix (PREFIX<service>), and an
// in-memory view of each record decoded into a V, kept in step with the
// KV on every replica (Init, then Follow). Reads take no lock; a write
// goes to the KV first and then to the view, and the watch brings the
// other replicas' writes. registry/settings builds every per-service
// setting (the route rules, the per-service config) on it.
//
// The view keeps, per service, the KV revision its record was written at,
// and never replaces it with an older one: a write's own apply and the
// watch event of the same write can arrive in either order.
type Records[R, V any] struct {
	// Read-only after NewRecords.
	kv     KV // nil keeps the records in memory only
	prefix string
	name   string
	decode func(service string, rec *R, rev int64) (V, error)
	log    *slog.Logger

	view   atomic.Pointer[map[string]stored[V]]
	memRev atomic.Int64 // numbers the writes without a KV
	memMu  sync.Mutex   // without a KV: makes WriteIf's check and write one step
	listed atomic.Int64 // the revision the last Init listed

	// mu serialises changes of the view and guards changed and version.
	mu      sync.Mutex
	changed chan struct{}
	version uint64
}

type stored[V any] struct {
	v   V
	rev int64
}

// RecordsConfig configures a Records.
type RecordsConfig[R, V any] struct {
	// KV holds the records, shared by every replica; nil keeps them in
	// memory only.
	KV KV
	// Prefix is the key prefix, e.g. "routes/".
	Prefix string
	// Name starts the errors, e.g. "routes".
	Name string
	// Decode turns a stored record into its value, given the revision it
	// was stored at. A record it refuses (stored by a newer version, or
	// damaged) is logged and left out of the view.
	Decode func(service string, rec *R, rev int64) (V, error)
	// Logger, or nil to discard.
	Logger *slog.Logger
}

// NewRecords returns an empty Records; call Init to load.
func NewRecords[R, V any](cfg RecordsConfig[R, V]) (*Records[R, V], error) {
	if err := ValidatePrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	if cfg.Decode == nil {
		return nil, fmt.Errorf("%s: Decode is nil", cfg.Name)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Records[R, V]{kv: cfg.KV, prefix: cfg.Prefix, name: cfg.Name, decode: cfg.Decode, log: cfg.Logger, changed: make(chan struct{})}
	r.view.Store(&map[string]stored[V]{})
	return r, nil
}

// Get returns service's value and the revision of its record; false when
// it has none. service is used as given (callers normalise it).
func (r *Records[R, V]) Get(service string) (V, int64, bool) {
	e, ok := (*r.view.Load())[service]
	return e.v, e.rev, ok
}

// All yields every service's value, in no order, from one view.
func (r *Records[R, V]) All(yield func(service string, v V) bool) {
	for service, e := range *r.view.Load() {
		if !yield(service, e.v) {
			return
		}
	}
}

// Services returns the services with a record, sorted.
func (r *Records[R, V]) Services() []string {
	return slices.Sorted(maps.Keys(*r.view.Load()))
}

// Changed returns a channel closed at the next change of the view.
func (r *Records[R, V]) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Version counts the changes of the view.
func (r *Records[R, V]) Version() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

// Write stores rec as service's record (rec nil deletes it) in the KV and
// then in the view, and returns the revision. A KV failure wraps
// ErrUnavailable and changes nothing.
func (r *Records[R, V]) Write(ctx context.Context, service string, rec *R) (int64, error) {
	var rev int64
	if r.kv == nil {
		r.memMu.Lock()
		defer r.memMu.Unlock()
	}
	if r.kv != nil {
		var err error
		if rec == nil {
			rev, err = r.kv.Delete(ctx, r.prefix+service)
		} else {
			b, merr := json.Marshal(rec)
			if merr != nil {
				return 0, merr
			}
			rev, err = r.kv.Put(ctx, r.prefix+service, b)
		}
		if err != nil {
			return 0, fmt.Errorf("%s: store %s: %w: %w", r.name, service, ErrUnavailable, err)
		}
	} else {
		rev = r.memRev.Add(1)
	}
	r.apply(service, rec, rev)
	return rev, nil
}

// WriteIf is Write only while service's record is at rev (0: it has
// none), the check and the write one store transaction (a CondPutter or
// CondDeleter KV; every driver is one). Otherwise it writes nothing and
// returns an error wrapping ErrConflict that names the current
// revision, which it also returns (0: none). A delete (rec nil) of no
// record is a conflict too.
func (r *Records[R, V]) WriteIf(ctx context.Context, service string, rec *R, rev int64) (int64, error) {
	conflict := func(cur int64) (int64, error) {
		if cur == 0 {
			return 0, fmt.Errorf("%s: %s: %w: version %d was read, and there is none now", r.name, service, ErrConflict, rev)
		}
		return cur, fmt.Errorf("%s: %s: %w: version %d was read, the current one is %d", r.name, service, ErrConflict, rev, cur)
	}
	if r.kv == nil {
		r.memMu.Lock()
		defer r.memMu.Unlock()
		_, cur, _ := r.Get(service)
		if cur != rev || (rec == nil && cur == 0) {
			return conflict(cur)
		}
		rev = r.memRev.Add(1)
		r.apply(service, rec, rev)
		return rev, nil
	}
	key := r.prefix + service
	var newRev int64
	if rec == nil {
		cd, ok := r.kv.(CondDeleter)
		if !ok {
			return 0, fmt.Errorf("%s: delete %s: the store has no conditional delete", r.name, service)
		}
		deleted, err := cd.DeleteIf(ctx, key, rev)
		if err != nil {
			return 0, fmt.Errorf("%s: delete %s: %w: %w", r.name, service, ErrUnavailable, err)
		}
		if !deleted {
			_, cur, err := r.kv.Get(ctx, key)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return 0, fmt.Errorf("%s: delete %s: %w: %w", r.name, service, ErrUnavailable, err)
			}
			return conflict(cur)
		}
	} else {
		cp, ok := r.kv.(CondPutter)
		if !ok {
			return 0, fmt.Errorf("%s: store %s: the store has no conditional write", r.name, service)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return 0, err
		}
		got, ok, err := cp.PutIf(ctx, key, b, rev)
		if err != nil {
			return 0, fmt.Errorf("%s: store %s: %w: %w", r.name, service, ErrUnavailable, err)
		}
		if !ok {
			return conflict(got)
		}
		newRev = got
	}
	r.apply(service, rec, newRev)
	return newRev, nil
}

// Forget drops service from the view without touching the KV: for a
// record the KV no longer has.
func (r *Records[R, V]) Forget(service string) { r.apply(service, nil, 0) }

// apply puts (rec non-nil) or drops service's record at rev in the view,
// unless the view holds a later revision of it (rev 0 always applies).
func (r *Records[R, V]) apply(service string, rec *R, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.view.Load()
	if cur, ok := old[service]; ok && rev != 0 && cur.rev >= rev {
		return
	}
	next := maps.Clone(old)
	if rec == nil {
		if _, ok := old[service]; !ok {
			return
		}
		delete(next, service)
	} else {
		v, err := r.decode(service, rec, rev)
		if err != nil {
			r.log.Error("stored record not applied", "key", r.prefix+service, "err", err)
			return
		}
		next[service] = stored[V]{v: v, rev: rev}
	}
	r.view.Store(&next)
	r.version++
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Records[R, V]) applyStored(service string, value []byte, rev int64) {
	rec := new(R)
	if err := json.Unmarshal(value, rec); err != nil {
		r.log.Error("undecodable stored record", "key", r.prefix+service, "err", err)
		return
	}
	r.apply(service, rec, rev)
}

// Init loads every record from the KV, drops from the view what the KV no
// longer has, and returns the revision listed.
func (r *Records[R, V]) Init(ctx context.Context) (int64, error) {
	if r.kv == nil {
		return 0, nil
	}
	kvs, rev, err := r.kv.List(ctx, r.prefix)
	if err != nil {
		return 0, fmt.Errorf("%s: list %s: %w", r.name, r.prefix, err)
	}
	seen := map[string]bool{}
	for _, kv := range kvs {
		service := strings.TrimPrefix(kv.Key, r.prefix)
		seen[service] = true
		r.applyStored(service, kv.Value, kv.Rev)
	}
	for _, service := range r.Services() {
		if !seen[service] {
			r.apply(service, nil, 0)
		}
	}
	r.listed.Store(rev)
	return rev, nil
}

// Follow applies the other replicas' writes until ctx ends (Follow, from
// the revision Init listed; a failed watch is followed by a new Init).
// Call Init first. Without a KV it only waits for ctx.
func (r *Records[R, V]) Follow(ctx context.Context) {
	if r.kv == nil {
		<-ctx.Done()
		return
	}
	Follow(ctx, r.kv, r.prefix, r.listed.Load(), r.Init, func(ev WatchEvent) {
		service := strings.TrimPrefix(ev.Key, r.prefix)
		if ev.Type == EventDelete {
			r.apply(service, nil, ev.Rev)
		} else {
			r.applyStored(service, ev.Value, ev.Rev)
		}
	}, r.log)
}

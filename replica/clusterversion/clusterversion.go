package clusterversion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/replica/ownership"
)

// Cluster versions. Each version names what replicas may do once every
// one of them runs a binary that supports it; a release that adds a
// version adds its constant here and moves Current.
const (
	// Baseline is the version of a770d6c and of every member record that
	// names none (the releases before this package).
	Baseline = 1
	// StrictSenderBinding is version 2: over a verified client
	// certificate, a load summary is taken only for a member whose
	// record names that certificate's identity. A member record without
	// an identity (a release before identities were recorded) binds no
	// certificate (package replica/exchange).
	StrictSenderBinding = 2
	// Current is the highest version this binary supports.
	Current = StrictSenderBinding
)

// Key is the store key of the finalised version (Record, JSON). Absent
// means Baseline, no hold.
const Key = "cluster/version"

var (
	// ErrUnsupported is wrapped by Init's and Run's error when the
	// store's version is above Current: this binary must not run on the
	// store.
	ErrUnsupported = errors.New("cluster version not supported by this binary")
	// ErrNotShared is wrapped by SetHold on a single replica (Config.KV
	// nil), where nothing is stored and nothing can be held.
	ErrNotShared = errors.New("no shared store")
	// ErrInvalid is wrapped when the stored record does not decode or
	// names a version below Baseline.
	ErrInvalid = errors.New("invalid cluster version record")
)

// Supported returns the highest version member m's binary supports: its
// record's MaxVersion, Baseline when the record names none.
func Supported(m ownership.Member) int { return max(m.MaxVersion, Baseline) }

// Record is the value of Key.
type Record struct {
	// Version is the finalised cluster version, Baseline or more. It only
	// ever goes up.
	Version int `json:"version"`
	// Hold, while true, stops every replica from raising Version: an
	// operator sets it before an upgrade so that a rollback stays
	// possible, and clears it to finalise.
	Hold bool `json:"hold"`
	// At and By are when and by which replica Version was finalised;
	// zero for Baseline.
	At time.Time `json:"at,omitzero"`
	By string    `json:"by,omitempty"`
	// HoldAt and HoldBy are when and by which identity Hold last
	// changed.
	HoldAt time.Time `json:"hold_at,omitzero"`
	HoldBy string    `json:"hold_by,omitempty"`
}

// State is the record as this replica last read or wrote it.
type State struct {
	Record
	// Rev is the store revision of the record; 0 when none is stored.
	Rev int64
}

// Versions is this replica's view of the cluster version: read from the
// store at Init, followed (and raised) by Run, and held or released
// through SetHold.
type Versions struct {
	// Read-only after New.
	cfg  Config
	log  *slog.Logger
	kick chan struct{} // 1-slot: Run reads (and raises) now

	state atomic.Pointer[State] // never nil after New
	seen  atomic.Bool           // the store was read once

	// mu guards waiting.
	mu sync.Mutex
	// waiting says why Run's last round did not raise the version ("" if
	// it did, or there was nothing to raise).
	waiting string
}

// New validates cfg and returns Versions. On a shared store the version
// is Baseline until Init reads it; with cfg.KV nil it is Current.
func New(cfg Config) (*Versions, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	v := &Versions{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1)}
	st := &State{Record: Record{Version: Baseline}}
	if cfg.KV == nil {
		st.Version = Current
	}
	v.state.Store(st)
	if cfg.Registerer != nil {
		if err := registerMetrics(cfg.Registerer, v); err != nil {
			return nil, fmt.Errorf("clusterversion metrics: %w", err)
		}
	}
	return v, nil
}

// Version returns the cluster version in force on this replica.
func (v *Versions) Version() int { return v.state.Load().Version }

// Active reports whether version n is in force: every live replica
// supported n when it was finalised, so what n turns on may be relied on.
func (v *Versions) Active(n int) bool { return v.Version() >= n }

// State returns the record as last read or written.
func (v *Versions) State() State { return *v.state.Load() }

// Shared reports whether the version lives in a shared store (false: a
// single replica).
func (v *Versions) Shared() bool { return v.cfg.KV != nil }

// Waiting says why the last round of Run did not raise the version, ""
// when it did or there was nothing to raise.
func (v *Versions) Waiting() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.waiting
}

// Init reads the version from the store. It returns an error wrapping
// ErrUnsupported, naming both versions and what to do, when the store's
// version is above Current; one wrapping ErrInvalid when the record does
// not decode; the store's error when it cannot be read. Nothing is
// written. With Config.KV nil it does nothing.
func (v *Versions) Init(ctx context.Context) error {
	if v.cfg.KV == nil {
		return nil
	}
	st, _, err := v.read(ctx)
	if err != nil {
		return err
	}
	if err := unsupported(st); err != nil {
		return err
	}
	v.log.Info("cluster version", "version", st.Version, "supported", Current, "hold", st.Hold, "finalised_by", st.By)
	return nil
}

// unsupported returns the refusal of a store whose version this binary
// does not support, or nil.
func unsupported(st State) error {
	if st.Version <= Current {
		return nil
	}
	by := ""
	if st.By != "" {
		by = " by " + st.By
	}
	at := ""
	if !st.At.IsZero() {
		at = " at " + st.At.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("this binary supports cluster version %d; the store's cluster version is %d, finalised%s%s (%s): run a release that supports %d: %w",
		Current, st.Version, by, at, Key, st.Version, ErrUnsupported)
}

// read gets Key, keeps it as the state (Version never below the one in
// force) and returns it with the stored bytes (nil when absent).
func (v *Versions) read(ctx context.Context) (State, []byte, error) {
	raw, rev, err := v.cfg.KV.Get(ctx, Key)
	var st State
	switch {
	case errors.Is(err, systemstore.ErrNotFound):
		raw = nil
		st = State{Record: Record{Version: Baseline}}
	case err != nil:
		return State{}, nil, fmt.Errorf("read the cluster version (%s): %w", Key, err)
	default:
		rec, err := decode(raw)
		if err != nil {
			return State{}, nil, err
		}
		st = State{Record: rec, Rev: rev}
	}
	v.apply(st, "")
	return st, raw, nil
}

// decode parses a stored record; fields it does not know are left for
// encode to keep.
func decode(raw []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return Record{}, fmt.Errorf("cluster version record %s: %w: %v", Key, ErrInvalid, err)
	}
	if rec.Version < Baseline {
		return Record{}, fmt.Errorf("cluster version record %s: version: %d, want %d or more: %w", Key, rec.Version, Baseline, ErrInvalid)
	}
	return rec, nil
}

// encode returns rec as JSON over the stored bytes raw (nil for none),
// keeping the fields of raw that Record does not know: a later release
// may have added some.
func encode(raw []byte, rec Record) []byte {
	fields := map[string]json.RawMessage{}
	if raw != nil {
		_ = json.Unmarshal(raw, &fields)
	}
	own, _ := json.Marshal(rec)
	var mine map[string]json.RawMessage
	_ = json.Unmarshal(own, &mine)
	for _, k := range []string{"version", "hold", "at", "by", "hold_at", "hold_by"} {
		if b, ok := mine[k]; ok {
			fields[k] = b
		} else {
			delete(fields, k)
		}
	}
	b, _ := json.Marshal(fields)
	return b
}

// apply makes st this replica's state and logs what changed; wrote
// names the change this replica made ("" for one read), which its
// caller logs. A stored version below the one in force (the key deleted
// or overwritten by hand) does not lower it: Run writes the version
// back.
func (v *Versions) apply(st State, wrote string) {
	for {
		old := v.state.Load()
		next := st
		next.Version = max(next.Version, old.Version)
		if !v.state.CompareAndSwap(old, &next) {
			continue
		}
		if !v.seen.Swap(true) || wrote != "" {
			return // the first read is Init's to log
		}
		if st.Version < old.Version {
			v.log.Error("the stored cluster version is below the one in force (the key was deleted or overwritten outside spillway); keeping it, and writing it back",
				"key", Key, "stored", st.Version, "version", old.Version)
		}
		if next.Version > old.Version {
			v.log.Info("cluster version changed", "from", old.Version, "to", next.Version, "finalised_by", next.By, "at", next.At)
		}
		if next.Hold != old.Hold {
			v.log.Info("cluster version hold changed", "hold", next.Hold, "by", next.HoldBy, "at", next.HoldAt)
		}
		return
	}
}

// Run follows the stored version until ctx ends: it reads Key every
// Config.Interval (and at once after SetHold) and, with members non-nil,
// raises the version one step when it may (see Next and the package
// doc). It returns nil when ctx ends, or an error wrapping
// ErrUnsupported when the store's version passes Current: the replica
// must stop. Store failures are logged and retried. With Config.KV nil
// it waits for ctx.
func (v *Versions) Run(ctx context.Context, members Members) error {
	if v.cfg.KV == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(v.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		err := v.round(ctx, members)
		if errors.Is(err, ErrUnsupported) {
			return err
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			v.log.Warn("cluster version round failed; retrying", "err", err)
			failing = true
		case err == nil && failing:
			v.log.Info("cluster version read again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-v.kick:
		}
	}
}

func (v *Versions) trigger() {
	select {
	case v.kick <- struct{}{}:
	default:
	}
}

func (v *Versions) setWaiting(why string) {
	v.mu.Lock()
	v.waiting = why
	v.mu.Unlock()
}

// round reads the version and raises it if it may.
func (v *Versions) round(ctx context.Context, members Members) error {
	st, raw, err := v.read(ctx)
	if err != nil {
		return err
	}
	if err := unsupported(st); err != nil {
		return err
	}
	if members == nil {
		v.setWaiting("this replica has no member record (--mesh-load=false or --zone-aware=false): it follows the version, the replicas of the mesh raise it")
		return nil
	}
	// The version in force may be above the stored one (the key was
	// deleted): raise from the stored one, one step at a time, back to it.
	next, why := v.next(ctx, st, members)
	v.setWaiting(why)
	if next == 0 {
		return nil
	}
	return v.raise(ctx, st, raw, next)
}

// SetHold sets (hold true) or clears the hold, as identity by. With
// ifRev non-nil the change applies only while the record is at that
// revision (0: none stored), else it is an error wrapping
// systemstore.ErrConflict naming the current revision. Without, a write
// that races another is tried again on the new record, at most 3 times
// (then ErrConflict). A hold already as asked writes nothing. Store
// failures wrap systemstore.ErrUnavailable; on a single replica it
// returns ErrNotShared. It returns the state after.
func (v *Versions) SetHold(ctx context.Context, hold bool, by string, ifRev *int64) (State, error) {
	if v.cfg.KV == nil {
		return v.State(), fmt.Errorf("cluster version: %w: a single replica (bbolt or memory) runs its binary's version %d at once; there is nothing to hold", ErrNotShared, Current)
	}
	cp := v.cfg.KV.(systemstore.CondPutter)
	for range 3 {
		st, raw, err := v.read(ctx)
		if err != nil {
			if errors.Is(err, ErrInvalid) {
				return State{}, err
			}
			return State{}, fmt.Errorf("%w: %w", systemstore.ErrUnavailable, err)
		}
		if err := unsupported(st); err != nil {
			return st, err
		}
		if ifRev != nil && *ifRev != st.Rev {
			return st, conflict(*ifRev, st.Rev)
		}
		if st.Hold == hold {
			return st, nil
		}
		rec := st.Record
		rec.Version = max(rec.Version, v.Version())
		rec.Hold, rec.HoldBy, rec.HoldAt = hold, by, v.cfg.Now().UTC()
		rev, ok, err := cp.PutIf(ctx, Key, encode(raw, rec), st.Rev)
		if err != nil {
			return st, fmt.Errorf("%w: write the cluster version hold (%s): %w", systemstore.ErrUnavailable, Key, err)
		}
		if !ok {
			if ifRev != nil {
				return st, conflict(*ifRev, rev)
			}
			continue
		}
		after := State{Record: rec, Rev: rev}
		v.apply(after, "hold")
		v.log.Info("cluster version hold changed", "hold", hold, "by", by, "version", rec.Version)
		v.trigger()
		return after, nil
	}
	return v.State(), fmt.Errorf("cluster version hold (%s): %w: other writes won 3 times; try again", Key, systemstore.ErrConflict)
}

func conflict(read, cur int64) error {
	if cur == 0 {
		return fmt.Errorf("cluster version (%s): %w: revision %d was read, and there is no record now", Key, systemstore.ErrConflict, read)
	}
	return fmt.Errorf("cluster version (%s): %w: revision %d was read, the current one is %d", Key, systemstore.ErrConflict, read, cur)
}

// Status is one line for /readyz: the version in force, what this
// binary supports, and the hold.
func (v *Versions) Status() string {
	st := v.State()
	if !v.Shared() {
		return fmt.Sprintf("cluster version %d (a single replica: this binary's)", st.Version)
	}
	hold := "no hold"
	if st.Hold {
		hold = "held"
		if st.HoldBy != "" {
			hold += " by " + st.HoldBy
		}
	}
	return fmt.Sprintf("cluster version %d (this binary supports %d), %s", st.Version, Current, hold)
}

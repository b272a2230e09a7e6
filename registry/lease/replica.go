package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

// What package replica calls to keep this manager in step with the shared
// store: Adopt and Drop apply the store's watch events for registrations
// made or ended on any replica; Seen applies another replica's last-seen
// stamps; LocalStamps is what this replica has to publish.

// Adopt takes the registration rec, stored at revision rev, into the
// registry and the lease set, unless this manager already knows that key
// at rev or later. A lease new here gets one TTL from now (or from seen,
// when that is later) to be heartbeated, as after Restore. It writes
// nothing to Storage.
func (m *Manager) Adopt(rec systemstore.Record, rev int64, seen time.Time) error {
	e := rec.Endpoint
	e.Source = registry.SourceVM
	e.Normalize()
	if err := registry.ValidateService("service", rec.Service); err != nil {
		return fmt.Errorf("adopt %s: %w", rec.Key(), err)
	}
	if err := e.Validate("endpoint"); err != nil {
		return fmt.Errorf("adopt %s: %w", rec.Key(), err)
	}
	if rec.LeaseID == "" || rec.TTL <= 0 {
		return fmt.Errorf("adopt %s: lease_id %q, ttl %v: %w", rec.Key(), rec.LeaseID, rec.TTL, registry.ErrInvalid)
	}
	key := systemstore.Key(rec.Service, e.ID)
	kl := m.keyLock(key)
	kl.Lock()
	defer kl.Unlock()
	m.mu.RLock()
	old := m.byKey[key]
	m.mu.RUnlock()
	if old != nil && old.rev >= rev {
		return nil
	}
	if old != nil && old.id == rec.LeaseID {
		old.rev = rev // our own registration, or a record rewritten
		if _, err := m.cfg.Store.Apply(registry.Upsert(rec.Service, &e)); err != nil {
			return fmt.Errorf("adopt %s: %w", key, err)
		}
		return nil
	}
	l := &lease{id: rec.LeaseID, key: key, service: rec.Service, epID: e.ID, ttl: rec.TTL, owner: rec.Owner, rev: rev}
	now := time.Now()
	if seen.After(now) {
		now = seen
	}
	l.deadline.Store(now.Add(rec.TTL).UnixNano())
	l.lastSeen.Store(e.LastSeen.UnixNano())
	if !seen.IsZero() {
		l.lastSeen.Store(seen.UnixNano())
	}
	if _, err := m.cfg.Store.Apply(registry.Upsert(rec.Service, &e)); err != nil {
		return fmt.Errorf("adopt %s: %w", key, err)
	}
	m.mu.Lock()
	if old != nil {
		m.deleteLocked(old.id)
	}
	m.setLocked(l)
	m.byKey[key] = l
	m.mu.Unlock()
	return nil
}

// Adoption is one stored registration and the revision it was stored at,
// for AdoptBatch.
type Adoption struct {
	Rec systemstore.Record
	Rev int64
}

// adoptChunk is how many endpoints one store Apply of AdoptBatch takes:
// big enough that a million registrations are a few hundred Applies
// (one Apply copies each service and shard it touches), small enough
// that a chunk the store refuses is retried one by one quickly.
const adoptChunk = 4096

// AdoptBatch is Adopt for many registrations (a full List of the store)
// with their lease set and registry changes made in batches: one store
// Apply per adoptChunk endpoints instead of one each, which at a million
// registrations is the difference between a minute and seconds. Each
// lease new here gets one TTL from now. It holds every key lock while it
// runs, so registrations on this replica wait for it. A record that
// Adopt would refuse is skipped and its error returned, one per skipped
// record; a chunk the store refuses (an endpoint another source holds) is
// applied one endpoint at a time, so only the refused ones are skipped.
func (m *Manager) AdoptBatch(batch []Adoption) []error {
	for i := range m.keyLocks {
		m.keyLocks[i].Lock()
	}
	defer func() {
		for i := range m.keyLocks {
			m.keyLocks[i].Unlock()
		}
	}()
	type adopted struct {
		l, old *lease // l nil: old is kept, at a new revision
		key    string
		rev    int64
		op     registry.Op
	}
	var errs []error
	todo := make([]adopted, 0, len(batch))
	m.mu.RLock()
	for i := range batch {
		rec, rev := &batch[i].Rec, batch[i].Rev
		e := rec.Endpoint.Clone()
		e.Source = registry.SourceVM
		e.Normalize()
		if err := registry.ValidateService("service", rec.Service); err != nil {
			errs = append(errs, fmt.Errorf("adopt %s: %w", rec.Key(), err))
			continue
		}
		if err := e.Validate("endpoint"); err != nil {
			errs = append(errs, fmt.Errorf("adopt %s: %w", rec.Key(), err))
			continue
		}
		if rec.LeaseID == "" || rec.TTL <= 0 {
			errs = append(errs, fmt.Errorf("adopt %s: lease_id %q, ttl %v: %w", rec.Key(), rec.LeaseID, rec.TTL, registry.ErrInvalid))
			continue
		}
		key := systemstore.Key(rec.Service, e.ID)
		old := m.byKey[key]
		if old != nil && old.rev >= rev {
			continue
		}
		a := adopted{old: old, key: key, rev: rev, op: registry.Upsert(rec.Service, e)}
		if old == nil || old.id != rec.LeaseID {
			l := &lease{id: rec.LeaseID, key: key, service: rec.Service, epID: e.ID, ttl: rec.TTL, owner: rec.Owner, rev: rev}
			l.lastSeen.Store(e.LastSeen.UnixNano())
			a.l = l
		}
		todo = append(todo, a)
	}
	m.mu.RUnlock()

	ops := make([]registry.Op, 0, adoptChunk)
	for len(todo) > 0 {
		chunk := todo[:min(adoptChunk, len(todo))]
		todo = todo[len(chunk):]
		// A new lease gets its whole TTL from when its chunk is applied,
		// as Adopt gives it from its own Apply: a million records take
		// seconds, which the last ones must not lose.
		now := time.Now()
		ops = ops[:0]
		for _, a := range chunk {
			ops = append(ops, a.op)
			if a.l != nil {
				a.l.deadline.Store(now.Add(a.l.ttl).UnixNano())
			}
		}
		ok := make([]bool, len(chunk))
		if _, err := m.cfg.Store.Apply(ops...); err == nil {
			for i := range ok {
				ok[i] = true
			}
		} else {
			for i := range chunk {
				if _, err := m.cfg.Store.Apply(chunk[i].op); err != nil {
					errs = append(errs, fmt.Errorf("adopt %s: %w", chunk[i].key, err))
					continue
				}
				ok[i] = true
			}
		}
		m.mu.Lock()
		for i, a := range chunk {
			if !ok[i] {
				continue
			}
			if a.l == nil {
				a.old.rev = a.rev // our own registration, or a record rewritten
				continue
			}
			if a.old != nil {
				m.deleteLocked(a.old.id)
			}
			m.setLocked(a.l)
			m.byKey[a.l.key] = a.l
		}
		m.mu.Unlock()
	}
	return errs
}

// Drop removes the lease of key and its endpoint after the store deleted
// the key at revision rev (a deregistration or an expiry on any replica),
// unless this manager holds a newer registration of it. It writes nothing
// to Storage.
func (m *Manager) Drop(key string, rev int64) error {
	kl := m.keyLock(key)
	kl.Lock()
	defer kl.Unlock()
	m.mu.Lock()
	l := m.byKey[key]
	if l == nil || l.rev >= rev {
		m.mu.Unlock()
		return nil
	}
	m.deleteLocked(l.id)
	delete(m.byKey, key)
	m.mu.Unlock()
	_, err := m.cfg.Store.Apply(registry.Remove(l.service, l.epID, registry.SourceVM))
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return fmt.Errorf("drop %s: %w", key, err)
	}
	return nil
}

// Keys returns the key and revision of every lease, for reconciling with
// a fresh List of the store.
func (m *Manager) Keys() map[string]int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]int64, len(m.byKey))
	for k, l := range m.byKey {
		out[k] = l.rev
	}
	return out
}

// Seen records that another replica saw lease id heartbeat at t: the
// lease's last-seen and deadline move forward to t, never back. An unknown
// lease is ignored.
func (m *Manager) Seen(id string, t time.Time) {
	m.mu.RLock()
	l := m.leases[id]
	m.mu.RUnlock()
	if l != nil {
		l.seen(t.UnixNano())
	}
}

// Stamp is one lease's last heartbeat to this replica.
type Stamp struct {
	LeaseID string
	TTL     time.Duration
	Seen    time.Time
}

// LocalStamps calls fn for every lease that was heartbeated (or
// registered) on this replica, with when it last was. fn must not call
// the Manager.
func (m *Manager) LocalStamps(fn func(Stamp)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, l := range m.all {
		if t := l.localSeen.Load(); t != 0 {
			fn(Stamp{LeaseID: l.id, TTL: l.ttl, Seen: time.Unix(0, t)})
		}
	}
}

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
		delete(m.leases, old.id)
	}
	m.leases[l.id] = l
	m.byKey[key] = l
	m.mu.Unlock()
	return nil
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
	delete(m.leases, l.id)
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
	for id, l := range m.leases {
		if t := l.localSeen.Load(); t != 0 {
			fn(Stamp{LeaseID: id, TTL: l.ttl, Seen: time.Unix(0, t)})
		}
	}
}

package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
)

// ErrNotFound: the lease is unknown or has expired. The client should
// register again.
var ErrNotFound = errors.New("lease not found")

// ErrNotOwner: the caller is not the identity that made the lease (for a
// lease made anonymously: the caller is not anonymous). API edges map it
// to gRPC PERMISSION_DENIED and HTTP 403. The error is an *OwnerError.
var ErrNotOwner = errors.New("permission denied")

// OwnerError is a call on a lease (or a re-registration of its endpoint)
// by another identity than the lease's owner. It wraps ErrNotOwner.
type OwnerError struct {
	// Identity is the caller (authn.Identity.String()).
	Identity string
	// Action is "heartbeat", "deregister", "report" or "register".
	Action string
	// LeaseID, Service and Endpoint name the lease.
	LeaseID, Service, Endpoint string
	// Owner is the authn.Identity.Name that made the lease; "" when it
	// was made anonymously (the message says "anonymous").
	Owner string
}

func (e *OwnerError) Error() string {
	owner := authn.Identity{Name: e.Owner}.String()
	if e.Action == "register" {
		return fmt.Sprintf("permission denied: %s may not register endpoint %s of %s (its lease belongs to %s)", e.Identity, e.Endpoint, e.Service, owner)
	}
	return fmt.Sprintf("permission denied: %s may not %s lease %s of %s (it belongs to %s)", e.Identity, e.Action, e.LeaseID, e.Service, owner)
}

func (e *OwnerError) Unwrap() error { return ErrNotOwner }

// Storage keeps registrations durable. Put and Delete must not return before
// the change survives a crash.
type Storage interface {
	Put(ctx context.Context, r systemstore.Record) error
	Delete(ctx context.Context, key string) error
	List(ctx context.Context) ([]systemstore.Record, error)
}

// revStorage is a Storage that returns the revision of a Put
// (*systemstore.Store), so that a registration can be ordered against the
// watch events of other replicas.
type revStorage interface {
	PutRev(ctx context.Context, r systemstore.Record) (int64, error)
}

// condStorage is a Storage that writes a record only while its key is at
// a revision (*systemstore.Store over a CondPutter KV: every driver).
type condStorage interface {
	PutRevIf(ctx context.Context, r systemstore.Record, ifRev int64) (rev int64, ok bool, cur *systemstore.Record, curRev int64, err error)
}

// ErrBusy: an endpoint's registration kept changing on other replicas
// while this one tried to write it; the caller may try again. It maps
// to gRPC ABORTED and HTTP 409.
var ErrBusy = errors.New("the endpoint's registration is changing on another replica; try again")

// putRecordTries bounds the compare-and-swap rounds of one registration.
const putRecordTries = 3

// putRecord stores rec, the record of the new lease l. With conditional
// writes (condStorage) it applies only while the key is at the revision
// this replica last saw it at (held's, or none): a registration of the
// same endpoint that another replica wrote and whose event has not
// arrived here is read back and judged by its owner before it is
// replaced, so two replicas never hand one endpoint to two identities.
// The caller holds the key lock.
func (m *Manager) putRecord(ctx context.Context, l *lease, rec systemstore.Record, held *lease, caller authn.Identity) error {
	cs, ok := m.cfg.Storage.(condStorage)
	if !ok {
		var err error
		if rs, ok := m.cfg.Storage.(revStorage); ok {
			l.rev, err = rs.PutRev(ctx, rec)
		} else {
			err = m.cfg.Storage.Put(ctx, rec)
		}
		return err
	}
	var ifRev int64
	if held != nil {
		ifRev = held.rev
	}
	for round := range putRecordTries {
		rev, ok, cur, curRev, err := cs.PutRevIf(ctx, rec, ifRev)
		if err != nil {
			return err
		}
		if ok {
			l.rev = rev
			return nil
		}
		if round > 0 || held == nil || held.rev != 0 {
			// A lease restored from a list has no revision: its first
			// round fails as expected, it is not a race.
			m.metrics.raced.Inc()
		}
		if cur != nil && !mayUse(cur.Owner, caller) {
			m.metrics.notOwner.Inc()
			return &OwnerError{Identity: caller.String(), Action: "register", LeaseID: cur.LeaseID, Service: rec.Service, Endpoint: rec.Endpoint.ID, Owner: cur.Owner}
		}
		ifRev = curRev // the caller may replace what is there: at its revision
	}
	return ErrBusy
}

// leaseDeleter is a Storage that removes a record only while it holds a
// given lease (*systemstore.Store): an expiry removes each lease once and
// never a newer registration made on another replica.
type leaseDeleter interface {
	DeleteLease(ctx context.Context, key, leaseID string) (bool, error)
}

// ErrNotShared: the heartbeat was taken, but this replica cannot share
// it with the others (it does not reach the store), so the expiry
// decider may never see it. The heartbeat is kept here and published
// when the store is back; the agent should heartbeat another replica.
// It wraps systemstore.ErrUnavailable, so API edges answer UNAVAILABLE.
var ErrNotShared = fmt.Errorf("heartbeat taken by a replica that cannot reach the store: %w", systemstore.ErrUnavailable)

// Sharer says whether the heartbeats this replica takes reach the
// replica that decides expiry (package registrysync implements it): nil
// when they do, an error naming the store and why not otherwise.
type Sharer interface {
	Sharing() error
}

// View says whether this replica holds every lease the store has: nil
// when it does, an error naming why not while it cannot be sure (the
// store is unreachable, or the replica is listing the registrations
// again after a broken watch). Package registrysync implements it.
type View interface {
	Complete() error
}

// Decider says whether this replica may expire leases now. With several
// replicas on one store exactly one, elected through the store, may; and
// none while the store is unreachable (package replica implements it).
type Decider interface {
	MayExpire() bool
}

// Defaults for Config's zero values.
const (
	DefaultTTL           = 30 * time.Second
	DefaultMinTTL        = time.Second
	DefaultMaxTTL        = time.Hour
	DefaultTick          = time.Second
	DefaultGuardShare    = 0.20
	DefaultGuardMinCount = 10
)

// Config configures a Manager.
type Config struct {
	// Store receives the endpoints; non-nil.
	Store *registry.Store
	// Storage makes registrations durable; non-nil.
	Storage Storage
	// DefaultTTL is used when a registration asks for none; zero means 30 s.
	DefaultTTL time.Duration
	// MinTTL and MaxTTL bound requested TTLs; zero means 1 s and 1 h.
	MinTTL, MaxTTL time.Duration
	// Tick is how often expiry runs; zero means 1 s.
	Tick time.Duration
	// GuardShare is the share of leases at risk above which expiry pauses;
	// zero means 0.2, 1 or more disables the guard.
	GuardShare float64
	// GuardMinCount is the least number of leases at risk that can trip the
	// guard, so a small fleet can still lose a VM; zero means 10.
	GuardMinCount int
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer

	// Decider gates expiry; nil means this manager always decides (one
	// replica, the default).
	Decider Decider
	// ExpiryGrace is added to every lease's TTL before it expires or
	// counts as at risk: with several replicas, how late another
	// replica's last-seen stamp may arrive (its flush interval plus the
	// watch delay). Zero for one replica.
	ExpiryGrace time.Duration
	// Sharer, with several replicas, tells whether a heartbeat taken here
	// reaches the others; while it does not, Heartbeat still renews the
	// lease but returns ErrNotShared so that the agent moves. Nil: every
	// heartbeat is shared (one replica).
	Sharer Sharer
	// View, with several replicas, tells whether a lease this manager
	// does not hold can exist: while it cannot be sure, a heartbeat for
	// an unknown lease is answered ErrNotShared (the agent moves) rather
	// than ErrNotFound (the agent registers again). Nil: an unknown lease
	// is not found.
	View View
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("lease config: Store is nil")
	}
	if c.Storage == nil {
		return errors.New("lease config: Storage is nil")
	}
	if c.MinTTL == 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.DefaultTTL == 0 {
		c.DefaultTTL = DefaultTTL
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.GuardShare == 0 {
		c.GuardShare = DefaultGuardShare
	}
	if c.GuardMinCount == 0 {
		c.GuardMinCount = DefaultGuardMinCount
	}
	switch {
	case c.MinTTL < 0 || c.MaxTTL < c.MinTTL:
		return fmt.Errorf("lease config: MinTTL %v and MaxTTL %v: want 0 < MinTTL <= MaxTTL", c.MinTTL, c.MaxTTL)
	case c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL:
		return fmt.Errorf("lease config: DefaultTTL %v outside [%v, %v]", c.DefaultTTL, c.MinTTL, c.MaxTTL)
	case c.Tick < 0:
		return fmt.Errorf("lease config: Tick %v is negative", c.Tick)
	case c.GuardShare < 0:
		return fmt.Errorf("lease config: GuardShare %v is negative", c.GuardShare)
	case c.GuardMinCount < 0:
		return fmt.Errorf("lease config: GuardMinCount %d is negative", c.GuardMinCount)
	case c.ExpiryGrace < 0:
		return fmt.Errorf("lease config: ExpiryGrace %v is negative", c.ExpiryGrace)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Lease is what a registration returns.
type Lease struct {
	ID         string
	TTL        time.Duration
	EndpointID string
	// Version is the store version that includes the registration.
	Version uint64
}

type lease struct {
	// The fields every walk of every lease reads come first, so that
	// they share the struct's first cache line (expiry reads deadline
	// and ttl of a million leases each tick, a flush localSeen, ttl and
	// id).
	deadline  atomic.Int64 // unix nanoseconds
	localSeen atomic.Int64 // unix nanoseconds of the last heartbeat to this replica; 0 if none
	lastSeen  atomic.Int64 // unix nanoseconds, any replica's

	// Read-only after creation.
	ttl     time.Duration
	id      string
	key     string
	service string
	epID    string
	owner   string // authn.Identity.Name of the creator; "" is anonymous

	// rev is the store revision of the record; guarded by the key lock.
	rev int64
	// idx is the lease's place in Manager.all; guarded by Manager.mu.
	idx int
}

func (l *lease) renew(now time.Time) {
	l.lastSeen.Store(now.UnixNano())
	l.deadline.Store(now.Add(l.ttl).UnixNano())
}

// seen moves lastSeen and the deadline forward to t, never back.
func (l *lease) seen(t int64) {
	for {
		cur := l.lastSeen.Load()
		if t <= cur || l.lastSeen.CompareAndSwap(cur, t) {
			break
		}
	}
	d := t + int64(l.ttl)
	for {
		cur := l.deadline.Load()
		if d <= cur || l.deadline.CompareAndSwap(cur, d) {
			return
		}
	}
}

// Manager owns every VM lease.
type Manager struct {
	// Read-only after New.
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	// keyLocks serialise Register and Deregister per endpoint, so the
	// durable record and the store agree; different endpoints proceed in
	// parallel and share fsyncs.
	keyLocks [64]sync.Mutex

	// mu guards leases, all and byKey; Heartbeat takes it for reading
	// only. Change leases only through setLocked and deleteLocked, which
	// keep all in step with it.
	mu     sync.RWMutex
	leases map[string]*lease // by lease id
	byKey  map[string]*lease // by systemstore.Key(service, endpoint id)
	// all is every lease of leases, for the walks of every lease (expiry
	// each tick, the local stamps each flush): a slice walks a million
	// leases about 5× faster than a map, mostly in the order they were
	// allocated.
	all []*lease

	paused atomic.Bool
}

// New validates cfg and returns a Manager with no leases.
func New(cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:    cfg,
		log:    cfg.Logger,
		leases: map[string]*lease{},
		byKey:  map[string]*lease{},
	}
	m.metrics = newMetrics(m)
	if cfg.Registerer != nil {
		if err := m.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("lease metrics: %w", err)
		}
	}
	return m, nil
}

// setLocked makes l the lease of its id; the caller holds mu for writing.
func (m *Manager) setLocked(l *lease) {
	m.deleteLocked(l.id)
	m.leases[l.id] = l
	l.idx = len(m.all)
	m.all = append(m.all, l)
}

// deleteLocked forgets the lease of id, if any; the caller holds mu for
// writing. The last lease of all takes its place.
func (m *Manager) deleteLocked(id string) {
	l := m.leases[id]
	if l == nil {
		return
	}
	delete(m.leases, id)
	last := len(m.all) - 1
	m.all[l.idx] = m.all[last]
	m.all[l.idx].idx = l.idx
	m.all[last] = nil
	m.all = m.all[:last]
	if cap(m.all) > 1024 && len(m.all) < cap(m.all)/4 {
		m.all = slices.Clip(slices.Clone(m.all))
	}
}

func (m *Manager) keyLock(key string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(key))
	return &m.keyLocks[h.Sum32()%uint32(len(m.keyLocks))]
}

func newLeaseID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// TTLFor returns the TTL a registration asking for ttl gets: the default for
// zero, else ttl if it is within bounds.
func (m *Manager) TTLFor(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return m.cfg.DefaultTTL, nil
	}
	if ttl < m.cfg.MinTTL || ttl > m.cfg.MaxTTL {
		return 0, &registry.FieldError{Field: "ttl_seconds", Reason: fmt.Sprintf("%v outside [%v, %v]", ttl, m.cfg.MinTTL, m.cfg.MaxTTL)}
	}
	return ttl, nil
}

// Register validates e, stores it durably, publishes it and returns its
// lease, owned by the identity in ctx (authn.FromContext). Registering an
// endpoint that already has a lease replaces that lease, unless that lease
// has another owner (see CheckOwner: an anonymous lease is replaced only
// by an anonymous caller). Errors: registry.ErrInvalid (a *registry.FieldError),
// registry.ErrConflict (the id belongs to another source), an *OwnerError
// (ErrNotOwner: the endpoint's live lease belongs to another identity), or
// a storage error.
func (m *Manager) Register(ctx context.Context, service string, e *registry.Endpoint, ttl time.Duration) (Lease, error) {
	service = registry.NormalizeService(service)
	if err := registry.ValidateService("service", service); err != nil {
		return Lease{}, err
	}
	ttl, err := m.TTLFor(ttl)
	if err != nil {
		return Lease{}, err
	}
	e = e.Clone()
	e.Source = registry.SourceVM
	if e.ID == "" && e.Address.IsValid() && len(e.Ports) > 0 {
		e.ID = registry.DefaultEndpointID(e.Address, e.Ports[0].Number)
	}
	e.Normalize()
	if err := e.Validate("endpoint"); err != nil {
		return Lease{}, err
	}
	key := systemstore.Key(service, e.ID)
	kl := m.keyLock(key)
	kl.Lock()
	defer kl.Unlock()

	caller := authn.FromContext(ctx)
	m.mu.RLock()
	held := m.byKey[key]
	m.mu.RUnlock()
	if held != nil && !mayUse(held.owner, caller) {
		m.metrics.notOwner.Inc()
		return Lease{}, &OwnerError{Identity: caller.String(), Action: "register", LeaseID: held.id, Service: service, Endpoint: e.ID, Owner: held.owner}
	}
	now := time.Now()
	e.Registered, e.LastSeen = now, now
	snap := m.cfg.Store.Snapshot()
	if svc, ok := snap.Service(service); ok {
		if old, ok := svc.Endpoint(e.ID); ok {
			if old.Source != registry.SourceVM {
				return Lease{}, fmt.Errorf("register %s/%s: endpoint is %s's: %w", service, e.ID, old.Source, registry.ErrConflict)
			}
			e.Registered = old.Registered
		}
	}
	l := &lease{id: newLeaseID(), key: key, service: service, epID: e.ID, ttl: ttl, owner: caller.Name}
	l.renew(now)
	l.localSeen.Store(now.UnixNano())
	rec := systemstore.Record{LeaseID: l.id, Service: service, TTL: ttl, Endpoint: *e, Owner: caller.Name}
	if err := m.putRecord(ctx, l, rec, held, caller); err != nil {
		return Lease{}, fmt.Errorf("register %s/%s: %w", service, e.ID, err)
	}
	version, err := m.cfg.Store.Apply(registry.Upsert(service, e))
	if err != nil {
		// A conflict that raced us, or a name the store refuses (too long
		// for the domain, or a service's name): undo the record.
		if derr := m.cfg.Storage.Delete(context.WithoutCancel(ctx), key); derr != nil {
			m.log.Error("undo registration record", "key", key, "err", derr)
		}
		return Lease{}, fmt.Errorf("register %s/%s: %w", service, e.ID, err)
	}
	m.mu.Lock()
	if old := m.byKey[key]; old != nil {
		m.deleteLocked(old.id)
	}
	m.setLocked(l)
	m.byKey[key] = l
	m.mu.Unlock()
	m.metrics.registrations.Inc()
	m.log.Debug("registered", "service", service, "endpoint", e.ID, "lease", l.id, "ttl", ttl)
	return Lease{ID: l.id, TTL: ttl, EndpointID: e.ID, Version: version}, nil
}

// Holder describes a live lease: its service, endpoint and owner.
type Holder struct {
	Service, Endpoint string
	// Owner is the authn.Identity.Name that made the lease; "" when it
	// was made anonymously (or stored by a release that kept no owners,
	// which had no identities either).
	Owner string
}

// Holder returns what lease id holds, or false when it is unknown.
func (m *Manager) Holder(id string) (Holder, bool) {
	m.mu.RLock()
	l := m.leases[id]
	m.mu.RUnlock()
	if l == nil {
		return Holder{}, false
	}
	return Holder{Service: l.service, Endpoint: l.epID, Owner: l.owner}, true
}

// CheckOwner returns an *OwnerError unless the identity in ctx may act
// (action: "heartbeat", "deregister", "report") on lease id: it made the
// lease. Anonymous is an owner like any identity: a lease made
// anonymously takes only anonymous callers, and a named lease never takes
// them; so a deployment without credentials (every caller anonymous) is
// unaffected. An unknown lease is ErrNotFound. A lease's owner never
// changes, so the answer holds for as long as the lease id is live.
func (m *Manager) CheckOwner(ctx context.Context, action, id string) (Holder, error) {
	h, ok := m.Holder(id)
	if !ok {
		return Holder{}, fmt.Errorf("%s %q: %w", action, id, ErrNotFound)
	}
	caller := authn.FromContext(ctx)
	if !mayUse(h.Owner, caller) {
		m.metrics.notOwner.Inc()
		return h, &OwnerError{Identity: caller.String(), Action: action, LeaseID: id, Service: h.Service, Endpoint: h.Endpoint, Owner: h.Owner}
	}
	return h, nil
}

// mayUse says whether caller may act on (or replace) a lease of owner:
// only the owner may, and anonymous (owner "") is one owner. Anonymous
// callers cannot be told apart, so they share the anonymous leases; a
// named identity, which the policy may trust with other services, never
// acts on them.
func mayUse(owner string, caller authn.Identity) bool { return owner == caller.Name }

// Heartbeat renews a lease and returns its TTL. It writes nothing to disk
// and checks no owner (CheckOwner does). With a Config.Sharer that says
// this replica cannot reach the store, the lease is renewed all the same
// (and its stamp published when the store is back), but the error wraps
// ErrNotShared: a replica cut from the store must send its agents to
// another replica, or the decider, which never sees their heartbeats,
// expires live leases.
func (m *Manager) Heartbeat(id string) (time.Duration, error) {
	m.mu.RLock()
	l := m.leases[id]
	m.mu.RUnlock()
	if l == nil {
		if m.cfg.View != nil {
			if err := m.cfg.View.Complete(); err != nil {
				m.metrics.heartbeatsNotShared.Inc()
				return 0, fmt.Errorf("heartbeat %q: lease not held here, and this replica may not have every lease yet: %w (%v); heartbeat another replica", id, ErrNotShared, err)
			}
		}
		m.metrics.heartbeatsUnknown.Inc()
		return 0, fmt.Errorf("heartbeat %q: %w", id, ErrNotFound)
	}
	now := time.Now()
	l.renew(now)
	l.localSeen.Store(now.UnixNano())
	m.metrics.heartbeats.Inc()
	if m.cfg.Sharer != nil {
		if err := m.cfg.Sharer.Sharing(); err != nil {
			m.metrics.heartbeatsNotShared.Inc()
			return l.ttl, fmt.Errorf("heartbeat %q: %w (%v); heartbeat another replica", id, ErrNotShared, err)
		}
	}
	return l.ttl, nil
}

// Deregister removes the lease's endpoint from the store and from storage.
func (m *Manager) Deregister(ctx context.Context, id string) (uint64, error) {
	m.mu.RLock()
	l := m.leases[id]
	m.mu.RUnlock()
	if l == nil {
		return 0, fmt.Errorf("deregister %q: %w", id, ErrNotFound)
	}
	return m.remove(ctx, l, "deregister")
}

// errSuperseded: an expiry found the record no longer holding its lease (a
// newer registration, or another decider's expiry): nothing was removed
// here; the store's watch brings the change.
var errSuperseded = errors.New("record superseded")

// superseded is errSuperseded for an expiry; for a deregistration also
// ErrNotFound: the lease is no longer the endpoint's (a newer
// registration on another replica holds it, or it is gone).
func superseded(why string) error {
	if why == "expire" {
		return errSuperseded
	}
	return fmt.Errorf("%w: %w (a newer registration of the endpoint holds it)", ErrNotFound, errSuperseded)
}

// remove ends lease l: storage first, so that a crash in between brings the
// endpoint back for one TTL rather than losing a deregistration's record
// while the endpoint is still served. A storage failure removes nothing:
// the endpoint stays served and the error (systemstore.ErrUnavailable) is
// returned.
func (m *Manager) remove(ctx context.Context, l *lease, why string) (uint64, error) {
	kl := m.keyLock(l.key)
	kl.Lock()
	defer kl.Unlock()
	m.mu.RLock()
	cur := m.leases[l.id]
	m.mu.RUnlock()
	if cur != l {
		return 0, fmt.Errorf("%s %q: %w", why, l.id, ErrNotFound) // replaced or removed meanwhile
	}
	if ld, ok := m.cfg.Storage.(leaseDeleter); ok {
		// Only while the record still holds this lease: neither an expiry
		// nor a deregistration removes a newer registration of the
		// endpoint that another replica made.
		deleted, err := ld.DeleteLease(ctx, l.key, l.id)
		switch {
		case errors.Is(err, systemstore.ErrNotFound):
			// Gone from the store (removed elsewhere, its event not yet
			// here): stop serving it, but it is not this call's.
			m.dropLocked(l)
			return 0, fmt.Errorf("%s %q: %w", why, l.id, superseded(why))
		case err != nil:
			return 0, fmt.Errorf("%s %q: %w", why, l.id, err)
		case !deleted:
			return 0, fmt.Errorf("%s %q: %w", why, l.id, superseded(why))
		}
	} else if err := m.cfg.Storage.Delete(ctx, l.key); err != nil {
		return 0, fmt.Errorf("%s %q: %w", why, l.id, err)
	}
	m.mu.Lock()
	m.deleteLocked(l.id)
	delete(m.byKey, l.key)
	m.mu.Unlock()
	v, err := m.cfg.Store.Apply(registry.Remove(l.service, l.epID, registry.SourceVM))
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return v, fmt.Errorf("%s %q: %w", why, l.id, err)
	}
	return v, nil
}

// dropLocked removes lease l and its endpoint from memory; the caller
// holds l's key lock.
func (m *Manager) dropLocked(l *lease) {
	m.mu.Lock()
	if m.leases[l.id] == l {
		m.deleteLocked(l.id)
		delete(m.byKey, l.key)
	}
	m.mu.Unlock()
	if _, err := m.cfg.Store.Apply(registry.Remove(l.service, l.epID, registry.SourceVM)); err != nil && !errors.Is(err, registry.ErrNotFound) {
		m.log.Error("drop lease", "lease", l.id, "err", err)
	}
}

// Restore loads every durable registration into the store in one batch.
// Each lease gets a full TTL from now to heartbeat again. It returns how many
// it restored; records that fail to decode or validate are logged and
// skipped.
func (m *Manager) Restore(ctx context.Context) (int, error) {
	recs, err := m.cfg.Storage.List(ctx)
	if err != nil && recs == nil {
		return 0, fmt.Errorf("restore leases: %w", err)
	}
	if err != nil {
		m.log.Error("skipped undecodable registrations", "err", err)
	}
	now := time.Now()
	ops := make([]registry.Op, 0, len(recs))
	var ls []*lease
	for _, r := range recs {
		e := r.Endpoint
		e.Source = registry.SourceVM
		e.Normalize()
		if err := registry.ValidateService("service", r.Service); err != nil {
			m.log.Error("skipped invalid registration", "key", r.Key(), "err", err)
			continue
		}
		if err := e.Validate("endpoint"); err != nil || r.LeaseID == "" || r.TTL <= 0 {
			m.log.Error("skipped invalid registration", "key", r.Key(), "err", err)
			continue
		}
		if err := m.cfg.Store.CheckNames(r.Service, &e); err != nil {
			// Saved under a shorter domain: it does not fit this one.
			m.log.Error("skipped invalid registration", "key", r.Key(), "err", err)
			continue
		}
		l := &lease{id: r.LeaseID, key: systemstore.Key(r.Service, e.ID), service: r.Service, epID: e.ID, ttl: r.TTL, owner: r.Owner}
		l.deadline.Store(now.Add(r.TTL).UnixNano())
		l.lastSeen.Store(e.LastSeen.UnixNano())
		ops = append(ops, registry.Upsert(r.Service, &e))
		ls = append(ls, l)
	}
	if _, err := m.cfg.Store.Apply(ops...); err != nil {
		return 0, fmt.Errorf("restore leases: %w", err)
	}
	m.mu.Lock()
	for _, l := range ls {
		m.setLocked(l)
		m.byKey[l.key] = l
	}
	m.mu.Unlock()
	m.log.Info("restored registrations", "count", len(ls))
	return len(ls), nil
}

// LastSeen returns when the lease holding endpoint id of service last
// heartbeated, and the lease id.
func (m *Manager) LastSeen(service, id string) (time.Time, string, bool) {
	m.mu.RLock()
	l := m.byKey[systemstore.Key(service, id)]
	m.mu.RUnlock()
	if l == nil {
		return time.Time{}, "", false
	}
	return time.Unix(0, l.lastSeen.Load()), l.id, true
}

// Len is the number of live leases.
func (m *Manager) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.leases)
}

// GuardActive reports whether the mass-expiry guard is holding expiry.
func (m *Manager) GuardActive() bool { return m.paused.Load() }

// Run expires leases every Tick until ctx ends; it returns nil then.
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			m.expire(ctx, now)
		}
	}
}

// expire runs one round: count, decide, expire.
func (m *Manager) expire(ctx context.Context, now time.Time) {
	if m.cfg.Decider != nil && !m.cfg.Decider.MayExpire() {
		return
	}
	nowNs := now.UnixNano() - int64(m.cfg.ExpiryGrace)
	var expired []*lease
	atRisk := 0
	m.mu.RLock()
	total := len(m.leases)
	for _, l := range m.all {
		left := l.deadline.Load() - nowNs
		if left <= 0 {
			expired = append(expired, l)
		}
		if left < int64(l.ttl/2) {
			atRisk++
		}
	}
	m.mu.RUnlock()
	m.metrics.atRisk.Set(float64(atRisk))

	trip := atRisk >= m.cfg.GuardMinCount && float64(atRisk) > m.cfg.GuardShare*float64(total)
	if trip != m.paused.Load() {
		m.paused.Store(trip)
		if trip {
			m.metrics.guard.Set(1)
			m.metrics.guardTrips.Inc()
			m.log.Warn("mass-expiry guard on: pausing lease expiry, suspecting a partition between VMs and the registry",
				"at_risk", atRisk, "leases", total, "share_limit", m.cfg.GuardShare, "min_count", m.cfg.GuardMinCount)
		} else {
			m.metrics.guard.Set(0)
			m.log.Info("mass-expiry guard off: heartbeats are back, expiry resumes", "at_risk", atRisk, "leases", total)
		}
	}
	if trip {
		return
	}
	for _, l := range expired {
		// A heartbeat may have come in since the count.
		if l.deadline.Load() > time.Now().UnixNano()-int64(m.cfg.ExpiryGrace) {
			continue
		}
		if m.cfg.Decider != nil && !m.cfg.Decider.MayExpire() {
			return // lost the election or the store meanwhile
		}
		if _, err := m.remove(ctx, l, "expire"); err != nil {
			if errors.Is(err, systemstore.ErrUnavailable) {
				// Cannot record the expiry: expire nothing until the store is back.
				m.log.Error("expire lease: store unavailable, expiry paused", "lease", l.id, "err", err)
				return
			}
			if !errors.Is(err, ErrNotFound) && !errors.Is(err, errSuperseded) {
				m.log.Error("expire lease", "lease", l.id, "service", l.service, "endpoint", l.epID, "err", err)
			}
			continue
		}
		m.metrics.expirations.Inc()
		m.log.Info("lease expired", "lease", l.id, "service", l.service, "endpoint", l.epID)
	}
}

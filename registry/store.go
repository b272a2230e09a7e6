package registry

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Errors returned by Store.Apply, wrapped with the service and endpoint.
var (
	// ErrNotFound: the endpoint or service to change does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the endpoint id is owned by another source.
	ErrConflict = errors.New("owned by another source")
)

// Service is an immutable view of one service at one store version.
type Service struct {
	Name string
	// Version is the store version at which this service last changed.
	Version uint64
	// Endpoints are sorted by ID. Neither the slice nor the endpoints may be
	// modified. Serve Serving(), not these: see serving.go.
	Endpoints []*Endpoint

	serving servingSet // set by the store when it builds the service
}

// Endpoint returns the endpoint with the given id.
func (s *Service) Endpoint(id string) (*Endpoint, bool) {
	i, ok := slices.BinarySearchFunc(s.Endpoints, id, func(e *Endpoint, id string) int { return cmp.Compare(e.ID, id) })
	if !ok {
		return nil, false
	}
	return s.Endpoints[i], true
}

const numShards = 256

type shards [numShards]map[string]*Service

// Snapshot is an immutable, consistent view of the whole store. Getting one
// is a single atomic load; holding one never blocks writers.
type Snapshot struct {
	version      uint64
	namesVersion uint64
	shards       *shards
	services     int
	endpoints    int
	shadowed     int               // endpoints not served: see serving.go
	flags        map[string]string // immutable
}

// Version is the store's global version: it grows by one with every write
// that changed something.
func (s *Snapshot) Version() uint64 { return s.version }

// NamesVersion changes only when a service is added or forgotten, so
// readers can cache what depends on the set of names alone.
func (s *Snapshot) NamesVersion() uint64 { return s.namesVersion }

// Flag returns a global flag set with SetFlag.
func (s *Snapshot) Flag(name string) (string, bool) {
	v, ok := s.flags[name]
	return v, ok
}

// Len is the number of known services.
func (s *Snapshot) Len() int { return s.services }

// EndpointCount is the number of endpoints across all services.
func (s *Snapshot) EndpointCount() int { return s.endpoints }

// Service returns a known service. ok is false for an unknown service; a
// known service may have zero endpoints.
func (s *Snapshot) Service(name string) (svc *Service, ok bool) {
	svc, ok = s.shards[shardOf(name)][name]
	return svc, ok
}

// Services returns the names of all known services, sorted.
func (s *Snapshot) Services() []string {
	out := make([]string, 0, s.services)
	for _, m := range s.shards {
		for name := range m {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func shardOf(name string) int {
	// FNV-1a, inlined so the read path does not allocate.
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return int(h % numShards)
}

// Store is the in-memory registry: the one piece of shared state in
// spillway. Sources write it with Apply; the resolver and xDS read Snapshots
// and subscribe to changes.
//
// Readers never take a lock. Writers are serialised by one mutex, build the
// next snapshot outside the readers' view and publish it with one atomic
// store.
type Store struct {
	cur   atomic.Pointer[Snapshot]
	names dnsNames // read-only after NewStoreWith

	synced     atomic.Bool
	syncedOnce sync.Once
	syncedC    chan struct{}

	// mu serialises writers: Apply and subscriber notification.
	mu     sync.Mutex
	writes atomic.Uint64 // writes that changed something, for metrics and tests
	intern interner      // shared port lists and locality names; guarded by mu

	// subsMu guards the subscriber sets. Taken after mu, never before.
	subsMu  sync.Mutex
	subsAll map[*Subscription]struct{}
	subsBy  map[string]map[*Subscription]struct{}

	conflicts conflictStats // address conflicts: see serving.go
}

// StoreConfig holds a Store's settings.
type StoreConfig struct {
	// Domain is the DNS domain the store's names are served under, e.g.
	// "spillway.internal." (a trailing dot is added if missing). Apply
	// rejects a name that would not fit in a DNS name under it (see
	// CheckNames). Empty means DefaultDomain.
	Domain string
}

// NewStore returns an empty store at version 0, not yet synced, whose
// names are checked against DefaultDomain.
func NewStore() *Store {
	s, err := NewStoreWith(StoreConfig{})
	if err != nil {
		panic(err) // DefaultDomain is valid
	}
	return s
}

// NewStoreWith is NewStore with cfg; an invalid cfg.Domain is a
// *FieldError naming "Domain".
func NewStoreWith(cfg StoreConfig) (*Store, error) {
	names, err := newDNSNames(cfg.Domain)
	if err != nil {
		return nil, fmt.Errorf("store config: %w", err)
	}
	s := &Store{
		names:   names,
		syncedC: make(chan struct{}),
		subsAll: make(map[*Subscription]struct{}),
		subsBy:  make(map[string]map[*Subscription]struct{}),
	}
	var sh shards
	for i := range sh {
		sh[i] = map[string]*Service{}
	}
	s.cur.Store(&Snapshot{shards: &sh})
	return s, nil
}

// Snapshot returns the current snapshot. It never blocks.
func (s *Store) Snapshot() *Snapshot { return s.cur.Load() }

// Writes is the number of writes that changed the store since it was made.
func (s *Store) Writes() uint64 { return s.writes.Load() }

// MarkSynced records that every source has delivered its initial state.
// Until then, readers must not treat a missing service as nonexistent.
func (s *Store) MarkSynced() {
	s.syncedOnce.Do(func() {
		s.synced.Store(true)
		close(s.syncedC)
	})
}

// Synced reports whether MarkSynced was called.
func (s *Store) Synced() bool { return s.synced.Load() }

// SyncedC is closed by MarkSynced.
func (s *Store) SyncedC() <-chan struct{} { return s.syncedC }

type opKind uint8

const (
	opUpsert opKind = iota + 1
	opRemove
	opDeclare
	opForget
	opSetFlag
)

// Global flags kept in the store.
const (
	// FlagXDS is the panic flag: "on" lets clients use xDS, "off" sends
	// every client back to DNS. Unset means "on".
	FlagXDS = "xds"
	// FlagsChanged is the name a subscription reports when a flag changed;
	// it cannot be a service name.
	FlagsChanged = "_flags"
)

// Op is one change in an Apply batch. Build it with Upsert, Remove,
// Declare or Forget.
type Op struct {
	kind     opKind
	service  string
	endpoint *Endpoint
	id       string
	source   Source
	value    string
}

// Upsert adds or replaces endpoint e of service (declaring the service if
// needed). The store keeps its own copy of e. An existing endpoint with the
// same id owned by another source is an ErrConflict. Replacing an endpoint
// with equal content is not a change.
func Upsert(service string, e *Endpoint) Op { return Op{kind: opUpsert, service: service, endpoint: e} }

// Remove deletes endpoint id of service, if src owns it. A missing endpoint
// is ErrNotFound. The service stays known, possibly with zero endpoints.
func Remove(service, id string, src Source) Op {
	return Op{kind: opRemove, service: service, id: id, source: src}
}

// Declare makes a service known even with no endpoints.
func Declare(service string) Op { return Op{kind: opDeclare, service: service} }

// Forget removes a service that has no endpoints left; with endpoints it is
// an error.
func Forget(service string) Op { return Op{kind: opForget, service: service} }

// SetFlag sets a global flag. FlagXDS takes "on" or "off".
func SetFlag(name, value string) Op { return Op{kind: opSetFlag, id: name, value: value} }

// Apply performs ops atomically: either all apply and are published as one
// new version, or none does and the error says which failed. A batch that
// changes nothing leaves the version as it was. It returns the version that
// reflects the batch: a Snapshot taken after Apply returns sees it.
func (s *Store) Apply(ops ...Op) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	old := s.cur.Load()
	next := old.version + 1
	b := builder{old: old, next: next, dns: &s.names, intern: &s.intern}
	for i := range ops {
		if err := b.apply(&ops[i]); err != nil {
			return old.version, err
		}
	}
	if len(b.changed) == 0 {
		return old.version, nil
	}
	snap := b.build()
	s.cur.Store(snap)
	s.writes.Add(1)
	s.conflicts.report(b.conflicts)
	s.notify(b.changed)
	return next, nil
}

// builder makes the next snapshot copy-on-write: it copies only the shards
// and services a batch touches.
type builder struct {
	dns        *dnsNames
	intern     *interner
	old        *Snapshot
	next       uint64
	sh         *shards
	copied     [numShards]bool
	work       map[string]*Service // services copied in this batch, mutable until build
	changed    []string
	changedSet map[string]struct{} // the names in changed
	services   int
	endpoints  int
	names      bool // a service was added or forgotten
	flags      map[string]string
	started    bool
	conflicts  []conflictEvent // new address conflicts, from build
}

func (b *builder) start() {
	if b.started {
		return
	}
	b.started = true
	sh := *b.old.shards
	b.sh = &sh
	b.work = map[string]*Service{}
	b.services = b.old.services
	b.endpoints = b.old.endpoints
}

func (b *builder) shard(name string) map[string]*Service {
	i := shardOf(name)
	if !b.copied[i] {
		b.copied[i] = true
		// maps.Clone copies the table as it is, without hashing every
		// name again: a shard holds services/256 of them (195 at
		// 50,000 services) and a write copies one.
		m := maps.Clone(b.sh[i])
		if m == nil {
			m = map[string]*Service{}
		}
		b.sh[i] = m
	}
	return b.sh[i]
}

// lookup returns the current (possibly in-batch) state of a service.
func (b *builder) lookup(name string) (*Service, bool) {
	if b.started {
		if w, ok := b.work[name]; ok {
			return w, w != nil
		}
		svc, ok := b.sh[shardOf(name)][name]
		return svc, ok
	}
	return b.old.Service(name)
}

// writable returns a copy of the service private to this batch, creating the
// service if create is set.
func (b *builder) writable(name string, create bool) (*Service, bool) {
	b.start()
	if w, ok := b.work[name]; ok && w != nil {
		return w, true
	}
	m := b.shard(name)
	old, ok := m[name]
	if !ok && !create {
		return nil, false
	}
	w := &Service{Name: name, Version: b.next}
	if ok {
		w.Endpoints = slices.Clone(old.Endpoints)
	} else {
		b.services++
		b.names = true
	}
	m[name] = w
	b.work[name] = w
	b.markChanged(name)
	return w, true
}

// markChanged adds name to the batch's changed names once, in the order
// first changed: a set beside the list, so that a batch of n services
// (a static file, a lease restore) costs O(n), not O(n²).
func (b *builder) markChanged(name string) {
	if _, ok := b.changedSet[name]; ok {
		return
	}
	if b.changedSet == nil {
		b.changedSet = map[string]struct{}{}
	}
	b.changedSet[name] = struct{}{}
	b.changed = append(b.changed, name)
}

func (b *builder) apply(op *Op) error {
	if op.kind == opSetFlag {
		return b.setFlag(op.id, op.value)
	}
	if err := ValidateService("service", op.service); err != nil {
		return err
	}
	switch op.kind {
	case opUpsert:
		e := op.endpoint.Clone()
		e.Normalize()
		if err := e.Validate("endpoint"); err != nil {
			return fmt.Errorf("upsert %s/%s: %w", op.service, e.ID, err)
		}
		if err := b.dns.checkService(op.service); err != nil {
			return fmt.Errorf("upsert %s/%s: %w", op.service, e.ID, err)
		}
		if err := b.dns.checkEndpoint(op.service, e); err != nil {
			return fmt.Errorf("upsert %s/%s: %w", op.service, e.ID, err)
		}
		cur, known := b.lookup(op.service)
		isNew := true
		if known {
			if old, ok := cur.Endpoint(e.ID); ok {
				if old.Source != e.Source {
					return fmt.Errorf("upsert %s/%s: endpoint is %s's, not %s's: %w", op.service, e.ID, old.Source, e.Source, ErrConflict)
				}
				if old.Equal(e) {
					return nil
				}
				isNew = false
			}
		} else if err := b.checkNewService(op.service); err != nil {
			return err
		}
		if isNew {
			if err := b.checkNewEndpoint(op.service, e.ID); err != nil {
				return err
			}
		}
		b.intern.endpoint(e)
		w, _ := b.writable(op.service, true)
		i, found := slices.BinarySearchFunc(w.Endpoints, e.ID, func(x *Endpoint, id string) int { return cmp.Compare(x.ID, id) })
		if found {
			w.Endpoints[i] = e
		} else {
			w.Endpoints = slices.Insert(w.Endpoints, i, e)
			b.endpoints++
		}
	case opRemove:
		cur, ok := b.lookup(op.service)
		if !ok {
			return fmt.Errorf("remove %s/%s: service %w", op.service, op.id, ErrNotFound)
		}
		old, ok := cur.Endpoint(op.id)
		if !ok {
			return fmt.Errorf("remove %s/%s: endpoint %w", op.service, op.id, ErrNotFound)
		}
		if old.Source != op.source {
			return fmt.Errorf("remove %s/%s: endpoint is %s's, not %s's: %w", op.service, op.id, old.Source, op.source, ErrConflict)
		}
		w, _ := b.writable(op.service, false)
		i, _ := slices.BinarySearchFunc(w.Endpoints, op.id, func(x *Endpoint, id string) int { return cmp.Compare(x.ID, id) })
		w.Endpoints = slices.Delete(w.Endpoints, i, i+1)
		b.endpoints--
	case opDeclare:
		if _, ok := b.lookup(op.service); ok {
			return nil
		}
		if err := b.dns.checkService(op.service); err != nil {
			return fmt.Errorf("declare %s: %w", op.service, err)
		}
		if err := b.checkNewService(op.service); err != nil {
			return err
		}
		b.writable(op.service, true)
	case opForget:
		cur, ok := b.lookup(op.service)
		if !ok {
			return nil
		}
		if len(cur.Endpoints) > 0 {
			return fmt.Errorf("forget %s: service still has %d endpoints", op.service, len(cur.Endpoints))
		}
		b.start()
		delete(b.shard(op.service), op.service)
		b.work[op.service] = nil
		b.services--
		b.names = true
		b.markChanged(op.service)
	default:
		return fmt.Errorf("op on %s: unknown kind %d", op.service, op.kind)
	}
	return nil
}

func (b *builder) setFlag(name, value string) error {
	switch name {
	case FlagXDS:
		if value != "on" && value != "off" {
			return fieldErr("flag."+name, "%q, want on or off", value)
		}
	default:
		return fieldErr("flag", "unknown flag %q", name)
	}
	cur := b.old.flags
	if b.flags != nil {
		cur = b.flags
	}
	if v, ok := cur[name]; ok && v == value {
		return nil
	}
	b.start()
	m := make(map[string]string, len(cur)+1)
	for k, v := range cur {
		m[k] = v
	}
	m[name] = value
	b.flags = m
	b.markChanged(FlagsChanged)
	return nil
}

func (b *builder) build() *Snapshot {
	delta, fresh := b.resolveServing()
	b.conflicts = fresh
	snap := &Snapshot{version: b.next, namesVersion: b.old.namesVersion, shards: b.sh,
		services: b.services, endpoints: b.endpoints, shadowed: b.old.shadowed + delta, flags: b.old.flags}
	if b.names {
		snap.namesVersion = b.next
	}
	if b.flags != nil {
		snap.flags = b.flags
	}
	return snap
}

package kubernetes

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/spillway/spillway/registry"
)

// part is one Kubernetes Service's endpoints in one cluster.
type part struct {
	// service is the registry service the Kubernetes Service maps to.
	service string
	// endpoints are sorted by id and valid, with zero times. After update
	// they belong to the merger, which may swap them for the store's equal
	// (immutable) ones.
	endpoints []*registry.Endpoint
	// gone: the cluster has no slice of the Service (any more).
	gone bool
}

// partKey names a part: a cluster and a "<namespace>/<service>" key.
type partKey struct {
	cluster int
	key     string
}

func comparePartKeys(a, b partKey) int {
	if c := cmp.Compare(a.cluster, b.cluster); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}

// Bounds of one Apply batch: the store checks names changed in a batch
// linearly, so an initial sync of thousands of services goes in chunks.
const (
	maxBatchServices = 512
	maxBatchOps      = 8192
)

// merger holds every cluster's parts and writes their union to the store.
// Cluster workers call update; it is serialised, so the union a worker
// computes and applies is never overwritten by an older one.
type merger struct {
	// Read-only after newMerger.
	store   *registry.Store
	log     *slog.Logger
	metrics *metrics
	now     func() time.Time
	// afterApply, if set, runs after every successful Apply with mu held.
	// A test seam: the store then holds exactly the state this source wrote.
	afterApply func()

	// mu serialises update and guards what follows.
	mu sync.Mutex
	// services maps a registry service to its parts.
	services map[string]map[partKey][]*registry.Endpoint
	// declared are the services this source made known, which it forgets
	// when no cluster has them any more.
	declared map[string]bool
	// refused are, per service, the endpoint ids left out because their
	// DNS name is refused, so each refusal is counted and logged once, not
	// at every resync.
	refused map[string]map[string]bool
}

func newMerger(store *registry.Store, log *slog.Logger, m *metrics) *merger {
	return &merger{
		store:    store,
		log:      log,
		metrics:  m,
		now:      time.Now,
		services: map[string]map[partKey][]*registry.Endpoint{},
		refused:  map[string]map[string]bool{},
		declared: map[string]bool{},
	}
}

// update records cluster's parts (by "<namespace>/<service>" key) and
// brings the store's Kubernetes endpoints of every service they touch in
// line with the union of all clusters' parts: one batch per group of
// services, each service's change atomic. With fresh, endpoints new to the
// store get a zero Registered time (they predate this sync).
//
// It returns the keys whose service the store refused; they keep their new
// part and should be submitted again later.
func (m *merger) update(cluster int, parts map[string]part, fresh bool) (failed []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	touched := map[string][]string{} // service → keys
	for key, p := range parts {
		pk := partKey{cluster, key}
		ps := m.services[p.service]
		if p.gone {
			if ps == nil {
				continue
			}
			delete(ps, pk)
		} else {
			if ps == nil {
				ps = map[partKey][]*registry.Endpoint{}
				m.services[p.service] = ps
			}
			ps[pk] = p.endpoints
		}
		touched[p.service] = append(touched[p.service], key)
	}
	names := slices.Sorted(maps.Keys(touched))
	snap := m.store.Snapshot()
	now := m.now()

	type change struct {
		name string
		ops  []registry.Op
	}
	var batch []change
	nops := 0
	flush := func() {
		if len(batch) == 0 {
			return
		}
		all := make([]registry.Op, 0, nops)
		for _, c := range batch {
			all = append(all, c.ops...)
		}
		if _, err := m.store.Apply(all...); err == nil {
			for _, c := range batch {
				m.applied(c.name, snap, cluster, touched[c.name])
			}
			m.hook()
		} else {
			// Find the service at fault; apply the others.
			for _, c := range batch {
				if _, err := m.store.Apply(c.ops...); err != nil {
					m.metrics.applyErrs.Inc()
					m.log.Error("registry refused a Kubernetes service update; will retry", "service", c.name, "err", err)
					failed = append(failed, touched[c.name]...)
					continue
				}
				m.applied(c.name, snap, cluster, touched[c.name])
				m.hook()
			}
		}
		batch, nops = batch[:0], 0
	}
	for _, name := range names {
		ops := m.diff(name, snap, fresh, now)
		if len(ops) == 0 {
			m.applied(name, snap, cluster, touched[name])
			continue
		}
		batch = append(batch, change{name, ops})
		nops += len(ops)
		if len(batch) >= maxBatchServices || nops >= maxBatchOps {
			flush()
		}
	}
	flush()
	return failed
}

func (m *merger) hook() {
	if m.afterApply != nil {
		m.afterApply()
	}
}

// applied updates the bookkeeping of a service whose diff is in the store,
// and makes the parts just submitted (cluster's keys) share the store's
// endpoints instead of holding equal copies: endpoints in the store are
// immutable, and it halves the source's memory.
func (m *merger) applied(name string, before *registry.Snapshot, cluster int, keys []string) {
	ps := m.services[name]
	if len(ps) == 0 {
		delete(m.services, name)
		if _, known := m.store.Snapshot().Service(name); !known {
			delete(m.declared, name)
		}
		return
	}
	if _, known := before.Service(name); !known {
		m.declared[name] = true
	}
	svc, ok := m.store.Snapshot().Service(name)
	if !ok {
		return
	}
	for _, key := range keys {
		eps := ps[partKey{cluster, key}]
		for i, e := range eps {
			if s, ok := svc.Endpoint(e.ID); ok && s != e && s.Source == registry.SourceKubernetes && sameContent(s, e) {
				eps[i] = s
			}
		}
	}
}

// sameContent is Endpoint.Equal without the times.
func sameContent(a, b *registry.Endpoint) bool {
	x := *a
	x.Registered, x.LastSeen = b.Registered, b.LastSeen
	return x.Equal(b)
}

// checkName is the store's name check of a new endpoint e of service,
// done here so that one bad endpoint is left out instead of failing its
// service's batch: the SRV target must fit under the domain and must not
// be the name of a service in snap.
func (m *merger) checkName(service string, e *registry.Endpoint, snap *registry.Snapshot) error {
	if err := m.store.CheckNames(service, e); err != nil {
		return err
	}
	if _, taken := snap.Service(e.ID + "." + service); taken {
		return fmt.Errorf("endpoint.id: %q: %s.%s is service %q's name: %w", e.ID, e.ID, service, e.ID+"."+service, registry.ErrNameTaken)
	}
	return nil
}

// diff returns the ops that make the store's Kubernetes endpoints of
// service name equal to the union of its parts.
func (m *merger) diff(name string, snap *registry.Snapshot, fresh bool, now time.Time) []registry.Op {
	ps := m.services[name]
	want := m.union(name, ps)
	cur, known := snap.Service(name)
	var ops []registry.Op
	if len(ps) > 0 && !known {
		ops = append(ops, registry.Declare(name))
	}
	was := m.refused[name]
	var refused map[string]bool
	defer func() {
		if refused == nil {
			delete(m.refused, name)
		} else {
			m.refused[name] = refused
		}
	}()
	for _, e := range want {
		var old *registry.Endpoint
		if cur != nil {
			old, _ = cur.Endpoint(e.ID)
		}
		registered := now
		if fresh {
			registered = time.Time{} // it predates this sync
		}
		switch {
		case old == nil:
			// A new id: one whose DNS name does not fit, or is a
			// service's, would make the store refuse the whole service.
			if err := m.checkName(name, e, snap); err != nil {
				if refused == nil {
					refused = map[string]bool{}
				}
				refused[e.ID] = true
				if !was[e.ID] {
					m.metrics.badNames.Inc()
					m.log.Warn("Kubernetes endpoint left out: its DNS name is refused",
						"service", name, "id", e.ID, "err", err)
				}
				continue
			}
		case old.Source != registry.SourceKubernetes:
			m.metrics.conflicts.Inc()
			m.log.Warn("endpoint id taken by another source; Kubernetes endpoint left out",
				"service", name, "id", e.ID, "owner", old.Source)
			continue
		default:
			if old.Address == e.Address {
				// The same instance keeps the time it joined, which slow
				// start keys on; equal content then costs no write.
				registered = old.Registered
				if sameContent(old, e) {
					continue
				}
			}
		}
		// Parts may share the store's endpoints: change a copy (the store
		// keeps its own deep copy of it).
		up := *e
		up.Registered, up.LastSeen = registered, now
		ops = append(ops, registry.Upsert(name, &up))
	}
	left := 0
	if cur != nil {
		for _, old := range cur.Endpoints {
			if old.Source != registry.SourceKubernetes {
				left++
				continue
			}
			if _, ok := slices.BinarySearchFunc(want, old.ID, func(e *registry.Endpoint, id string) int { return cmp.Compare(e.ID, id) }); !ok {
				ops = append(ops, registry.Remove(name, old.ID, registry.SourceKubernetes))
			}
		}
	}
	if len(ps) == 0 && known && left == 0 && m.declared[name] {
		ops = append(ops, registry.Forget(name))
	}
	return ops
}

// union merges the parts of a service, sorted by id. Two parts with the
// same id (clusters named so, or Services merged by the name template)
// keep the healthier endpoint, the first part's on a tie.
func (m *merger) union(name string, ps map[partKey][]*registry.Endpoint) []*registry.Endpoint {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		for _, eps := range ps {
			return eps
		}
	}
	keys := slices.SortedFunc(maps.Keys(ps), comparePartKeys)
	n := 0
	for _, k := range keys {
		n += len(ps[k])
	}
	out := make([]*registry.Endpoint, 0, n)
	idx := make(map[string]int, n)
	for _, k := range keys {
		for _, e := range ps[k] {
			if i, dup := idx[e.ID]; dup {
				m.metrics.conflicts.Inc()
				m.log.Debug("two Kubernetes endpoints with one id; keeping one", "service", name, "id", e.ID)
				if rank(e.Health) < rank(out[i].Health) {
					out[i] = e
				}
				continue
			}
			idx[e.ID] = len(out)
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *registry.Endpoint) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

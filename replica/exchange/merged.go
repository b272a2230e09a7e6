package exchange

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/spillway/spillway/load"
)

// Defaults of MergedConfig.
const (
	DefaultMaxSenders  = 256
	DefaultMaxServices = 100_000
	DefaultForget      = 5 * time.Minute
	DefaultMaxReports  = 1_000_000
	// DefaultMaxBytes is the default budget of one sender's summaries in
	// memory: about 100,000 services of 9 flows and 3 client zones, or
	// 5,000 services of 100 endpoint reports.
	DefaultMaxBytes = 64 << 20
	// FreshIntervals is how many of its sender's intervals a summary
	// stays fresh after it arrived.
	FreshIntervals = 3
)

// ErrFull is returned by Merged.Add when a summary would take Merged past
// MaxSenders or MaxServices; nothing of it is stored.
var ErrFull = errors.New("load summaries full")

// MergedConfig bounds a Merged. Zero fields take the defaults.
type MergedConfig struct {
	// MaxSenders bounds the sender replicas remembered; 0: 256.
	MaxSenders int
	// MaxServices bounds the services remembered per sender; 0: 100,000.
	MaxServices int
	// MaxReports bounds the endpoint utilization reports remembered per
	// sender, summed over its services; 0: 1,000,000.
	MaxReports int
	// MaxBytes bounds the memory, in bytes as estimated by Merged, held
	// for one sender's summaries; 0: 64 MiB. A service whose summary
	// would take its sender past it is dropped (its older summary too)
	// and counted in Budget.Dropped; the rest of the summary is stored.
	MaxBytes int64
	// Forget is how long a sender, or one of its services, is remembered
	// after its last summary; 0: 5 minutes.
	Forget time.Duration
	// Now is the owner's clock; nil: time.Now.
	Now func() time.Time
}

// Contributor is a replica whose load a Merged sums for a service, and
// how long ago its latest summary arrived.
type Contributor struct {
	Replica string
	Age     time.Duration
}

// Merged holds, per (sender replica, service), the latest ServiceSummary
// and when it arrived (the owner's clock), and answers the planner's
// questions from the fresh ones. It is safe for concurrent use.
type Merged struct {
	// Read-only after NewMerged.
	cfg MergedConfig

	mu sync.Mutex // guards the fields below
	// senders by replica id.
	senders   map[string]*senderState
	lastPrune time.Time
	dropped   int // services dropped past a sender's byte budget
	// Scratch of AppendLoads, kept between calls.
	seen  map[string]struct{}
	names []string
	ids   []string
	index map[flowKey]int
}

type senderState struct {
	last     time.Time // arrival of its latest summary
	interval time.Duration
	services map[string]*entry
	reports  int   // endpoint reports, summed over services
	bytes    int64 // estimated size of services, summed
	// shards are the shards its latest summary (arrived at last) lists
	// as routed here.
	shards []load.ShardEpoch
}

type entry struct {
	arrived  time.Time
	interval time.Duration
	size     int64 // estimated bytes held, see entrySize
	// sum's flows have Updated on the owner's clock.
	sum load.ServiceSummary
}

func (e *entry) fresh(now time.Time) bool {
	return now.Sub(e.arrived) <= FreshIntervals*e.interval
}

// NewMerged returns an empty Merged.
func NewMerged(cfg MergedConfig) *Merged {
	if cfg.MaxSenders <= 0 {
		cfg.MaxSenders = DefaultMaxSenders
	}
	if cfg.MaxServices <= 0 {
		cfg.MaxServices = DefaultMaxServices
	}
	if cfg.MaxReports <= 0 {
		cfg.MaxReports = DefaultMaxReports
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Forget <= 0 {
		cfg.Forget = DefaultForget
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Merged{cfg: cfg, senders: map[string]*senderState{}}
}

// Add validates s and stores its services as the sender's latest,
// received at now (the owner's clock). An invalid summary (the error
// wraps ErrInvalid) or one past the bounds (ErrFull) changes nothing; a
// service past the sender's byte budget (MaxBytes) is dropped and
// counted in Budget.Dropped.
func (m *Merged) Add(s load.Summary, now time.Time) error {
	if err := Validate(s); err != nil {
		return err
	}
	_, err := m.add(s, now, nil)
	return err
}

// entrySize estimates the bytes an entry holding ss takes: the structs,
// the strings they point to and the map slot.
func entrySize(ss *load.ServiceSummary) int64 {
	const mapSlot = 64 // key string header, pointer, bucket overhead
	n := int64(unsafe.Sizeof(entry{})) + mapSlot + 2*int64(len(ss.Service))
	for i := range ss.Flows {
		n += int64(unsafe.Sizeof(ss.Flows[i])) + int64(len(ss.Flows[i].ClientZone)+len(ss.Flows[i].Zone))
	}
	for i := range ss.Clients {
		n += int64(unsafe.Sizeof(ss.Clients[i])) + int64(len(ss.Clients[i].Zone))
	}
	for i := range ss.Endpoints {
		n += int64(unsafe.Sizeof(ss.Endpoints[i])) + int64(len(ss.Endpoints[i].ID))
	}
	return n
}

// add stores a validated summary. With live non-nil (the replica ids
// that are live members), a new sender first makes room by forgetting
// held senders that are not live once as many senders are held as
// there are live members, so the senders held stay bounded by the live
// members. It returns how many services went past the byte budget.
func (m *Merged) add(s load.Summary, now time.Time, live map[string]bool) (overBudget int, err error) {
	// Flows are placed on the owner's clock: their age relative to the
	// sender's At, before now. Built outside the lock.
	entries := make([]entry, len(s.Services))
	for i, ss := range s.Services {
		out := load.ServiceSummary{Service: ss.Service, Clients: slices.Clone(ss.Clients)}
		if len(ss.Flows) > 0 {
			out.Flows = make([]load.Flow, len(ss.Flows))
			for j, f := range ss.Flows {
				if !f.Updated.IsZero() {
					f.Updated = now.Add(-s.At.Sub(f.Updated))
				}
				out.Flows[j] = f
			}
		}
		if len(ss.Endpoints) > 0 {
			out.Endpoints = make([]load.EndpointUtilization, len(ss.Endpoints))
			for j, e := range ss.Endpoints {
				e.Reported = now.Add(-s.At.Sub(e.Reported))
				out.Endpoints[j] = e
			}
		}
		entries[i] = entry{arrived: now, interval: s.Interval, sum: out, size: entrySize(&out)}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked(now)
	st := m.senders[s.Replica]
	reports := 0
	if st != nil {
		reports = st.reports
		for _, ss := range s.Services {
			if e := st.services[ss.Service]; e != nil {
				reports -= len(e.sum.Endpoints)
			}
		}
	}
	for _, ss := range s.Services {
		reports += len(ss.Endpoints)
	}
	if reports > m.cfg.MaxReports {
		return 0, fmt.Errorf("summary.services: sender %q would have %d endpoint reports, at most %d: %w", s.Replica, reports, m.cfg.MaxReports, ErrFull)
	}
	if st == nil {
		if live != nil && len(m.senders) >= len(live) {
			for id := range m.senders {
				if !live[id] {
					delete(m.senders, id)
				}
			}
		}
		if len(m.senders) >= m.cfg.MaxSenders {
			return 0, fmt.Errorf("summary.replica: %q: already %d senders: %w", s.Replica, len(m.senders), ErrFull)
		}
		if len(s.Services) > m.cfg.MaxServices {
			return 0, fmt.Errorf("summary.services: sender %q would have %d services, at most %d: %w", s.Replica, len(s.Services), m.cfg.MaxServices, ErrFull)
		}
	} else {
		added := 0
		for _, ss := range s.Services {
			if _, ok := st.services[ss.Service]; !ok {
				added++
			}
		}
		if len(st.services)+added > m.cfg.MaxServices {
			return 0, fmt.Errorf("summary.services: sender %q would have %d services, at most %d: %w", s.Replica, len(st.services)+added, m.cfg.MaxServices, ErrFull)
		}
	}
	if st == nil {
		st = &senderState{services: make(map[string]*entry, len(s.Services))}
		m.senders[s.Replica] = st
	}
	st.last, st.interval = now, s.Interval
	st.shards = slices.Clone(s.Shards)
	for i := range entries {
		e := &entries[i]
		old := st.services[e.sum.Service]
		if old != nil {
			st.bytes -= old.size
			st.reports -= len(old.sum.Endpoints)
		}
		if st.bytes+e.size > m.cfg.MaxBytes {
			// Past the budget: the service is dropped, its older
			// summary too, so what is held is never a mix of rounds.
			delete(st.services, e.sum.Service)
			overBudget++
			continue
		}
		st.bytes += e.size
		st.reports += len(e.sum.Endpoints)
		st.services[e.sum.Service] = e
	}
	m.dropped += overBudget
	return overBudget, nil
}

// pruneLocked forgets senders and services silent for cfg.Forget, at most
// once a second.
func (m *Merged) pruneLocked(now time.Time) {
	if now.Sub(m.lastPrune) < time.Second && !m.lastPrune.IsZero() {
		return
	}
	m.lastPrune = now
	for id, st := range m.senders {
		for svc, e := range st.services {
			if now.Sub(e.arrived) > m.cfg.Forget {
				st.reports -= len(e.sum.Endpoints)
				st.bytes -= e.size
				delete(st.services, svc)
			}
		}
		if len(st.services) == 0 && now.Sub(st.last) > m.cfg.Forget {
			delete(m.senders, id)
		}
	}
}

// Loads returns the flows of service ("" for every service) summed over
// the senders whose latest summary of it is fresh (arrived within
// FreshIntervals of the sender's interval), sorted by service, client
// zone and zone. Locality carries only the zone; Reporters is the sum
// over senders; Totals are zero (they are per replica).
func (m *Merged) Loads(service string, now time.Time) []load.Load {
	if service == "" {
		return m.AppendLoads(nil, now)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.appendService(nil, service, now)
}

// AppendLoads appends Loads("", now) to dst and returns it: the owner's
// planner reads every service's flows each cycle into the same buffer
// (weights.LoadAppender), so the flows cost no allocation per service.
func (m *Merged) AppendLoads(dst []load.Load, now time.Time) []load.Load {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[string]struct{}{}
	}
	clear(m.seen)
	names := m.names[:0]
	for _, st := range m.senders {
		for svc, e := range st.services {
			if len(e.sum.Flows) == 0 || !e.fresh(now) {
				continue
			}
			if _, ok := m.seen[svc]; !ok {
				m.seen[svc] = struct{}{}
				names = append(names, svc)
			}
		}
	}
	slices.Sort(names)
	for _, svc := range names {
		dst = m.appendService(dst, svc, now)
	}
	clear(names) // the scratch keeps no service names alive
	m.names = names[:0]
	return dst
}

// appendService appends service's flows summed over the fresh senders,
// in sender id order (the sums are the same on every call), sorted by
// client zone and zone. Called with m.mu held.
func (m *Merged) appendService(dst []load.Load, service string, now time.Time) []load.Load {
	ids := m.ids[:0]
	for id := range m.senders {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	start := len(dst)
	index := m.index // rows of the service by flow, once it has many
	clear(index)
	for _, id := range ids {
		e := m.senders[id].services[service]
		if e == nil || !e.fresh(now) {
			continue
		}
		for i := range e.sum.Flows {
			f := &e.sum.Flows[i]
			k := flowKey{f.ClientZone, f.Zone}
			row := -1
			if n := len(dst) - start; n <= linearRows {
				for j := start; j < len(dst); j++ {
					if dst[j].ClientZone == k.cz && dst[j].Locality.Zone == k.z {
						row = j
						break
					}
				}
			} else {
				if len(index) == 0 {
					if index == nil {
						index = map[flowKey]int{}
						m.index = index
					}
					for j := start; j < len(dst); j++ {
						index[flowKey{dst[j].ClientZone, dst[j].Locality.Zone}] = j
					}
				}
				if j, ok := index[k]; ok {
					row = j
				}
			}
			if row < 0 {
				row = len(dst)
				dst = append(dst, load.Load{})
				l := &dst[row]
				l.Service, l.ClientZone, l.Locality.Zone = service, k.cz, k.z
				if len(index) > 0 {
					index[k] = row
				}
			}
			l := &dst[row]
			l.Issued += f.Issued
			l.Succeeded += f.Succeeded
			l.Errored += f.Errored
			l.InProgress += f.InProgress
			l.Reporters += f.Reporters
			if f.Updated.After(l.Updated) {
				l.Updated = f.Updated
			}
		}
	}
	clear(index)
	clear(ids)
	m.ids = ids[:0]
	slices.SortFunc(dst[start:], func(a, b load.Load) int {
		return cmpStrings(a.ClientZone, b.ClientZone, a.Locality.Zone, b.Locality.Zone)
	})
	return dst
}

// flowKey is a flow of one service: client zone to zone.
type flowKey struct{ cz, z string }

// linearRows is how many rows of a service appendService searches one
// by one before it indexes them.
const linearRows = 32

func cmpStrings(pairs ...string) int {
	for i := 0; i+1 < len(pairs); i += 2 {
		if c := strings.Compare(pairs[i], pairs[i+1]); c != 0 {
			return c
		}
	}
	return 0
}

// ClientCounts returns service -> client zone -> xDS streams, summed over
// the senders whose latest summary of the service is fresh by the
// configured clock.
func (m *Merged) ClientCounts() map[string]map[string]int {
	now := m.cfg.Now()
	out := map[string]map[string]int{}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.senders {
		for svc, e := range st.services {
			if !e.fresh(now) || len(e.sum.Clients) == 0 {
				continue
			}
			zones := out[svc]
			if zones == nil {
				zones = map[string]int{}
				out[svc] = zones
			}
			for _, c := range e.sum.Clients {
				zones[c.Zone] += c.Count
			}
		}
	}
	return out
}

// Contributors returns the senders whose fresh summary of service Loads
// sums, with the age of that summary at now, sorted by replica. A
// summary that arrived after now (a caller's now taken a moment before
// the call) has age 0.
func (m *Merged) Contributors(service string, now time.Time) []Contributor {
	var out []Contributor
	m.mu.Lock()
	for id, st := range m.senders {
		if e := st.services[service]; e != nil && e.fresh(now) {
			out = append(out, Contributor{Replica: id, Age: max(0, now.Sub(e.arrived))})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Contributor) int { return strings.Compare(a.Replica, b.Replica) })
	return out
}

// Utilizations returns, per endpoint of service, the newest utilization
// report (by Reported, on the owner's clock) among the senders whose
// latest summary of service is fresh, counting only reports still fresh
// themselves (now - Reported <= FreshIntervals × the report's interval),
// sorted by ID (equal times: the lowest sender replica id's). A backend's reports may reach any replica; this is every
// replica's view of them merged.
func (m *Merged) Utilizations(service string, now time.Time) []load.EndpointUtilization {
	type pick struct {
		u      load.EndpointUtilization
		sender string
	}
	newest := map[string]pick{}
	m.mu.Lock()
	for id, st := range m.senders {
		e := st.services[service]
		if e == nil || !e.fresh(now) {
			continue
		}
		for _, u := range e.sum.Endpoints {
			if now.Sub(u.Reported) > FreshIntervals*u.Interval {
				continue
			}
			// Equal times: the lower sender id, so every call agrees.
			old, ok := newest[u.ID]
			if !ok || u.Reported.After(old.u.Reported) || u.Reported.Equal(old.u.Reported) && id < old.sender {
				newest[u.ID] = pick{u, id}
			}
		}
	}
	m.mu.Unlock()
	out := make([]load.EndpointUtilization, 0, len(newest))
	for _, p := range newest {
		out = append(out, p.u)
	}
	slices.SortFunc(out, func(a, b load.EndpointUtilization) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Fresh reports whether a summary from replica arrived after since: the
// owner that took a shard at since waits for it before publishing.
func (m *Merged) Fresh(replica string, since time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.senders[replica]
	return st != nil && st.last.After(since)
}

// Acked reports whether the latest summary from replica arrived after
// since and lists (shard, epoch): replica routes that shard's load here
// under that hold of the shard. The owner that took shard at epoch at
// since waits for it from every live replica before publishing.
func (m *Merged) Acked(replica string, shard int, epoch int64, since time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.senders[replica]
	if st == nil || !st.last.After(since) {
		return false
	}
	return slices.Contains(st.shards, load.ShardEpoch{Shard: shard, Epoch: epoch})
}

// Size is how much a Merged holds.
type Size struct {
	Senders, Services int // services summed over senders
}

// Size returns how much m holds.
func (m *Merged) Size() Size {
	m.mu.Lock()
	defer m.mu.Unlock()
	sz := Size{Senders: len(m.senders)}
	for _, st := range m.senders {
		sz.Services += len(st.services)
	}
	return sz
}

// Budget is the memory a Merged holds against its senders' byte
// budgets (MergedConfig.MaxBytes).
type Budget struct {
	// Bytes is the estimated memory of the services held, summed over
	// senders.
	Bytes int64
	// Dropped counts, since NewMerged, the services dropped past a
	// sender's budget.
	Dropped int
}

// Budget returns the memory m holds and what it dropped.
func (m *Merged) Budget() Budget {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := Budget{Dropped: m.dropped}
	for _, st := range m.senders {
		b.Bytes += st.bytes
	}
	return b
}

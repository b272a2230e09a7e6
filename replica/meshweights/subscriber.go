package meshweights

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry/systemstore"

	"github.com/spillway/spillway/weights/subset"
)

// retry is the pause before listing again after a failed List.
const retry = time.Second

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// KV is the shared store. Required.
	KV systemstore.KV
	// Shard is the shard of a service, the same function the owners
	// use; a plan whose record names another shard is rejected. Nil
	// trusts the record.
	Shard func(service string) int
	// Now is the local clock, or nil for time.Now.
	Now func() time.Time
	// OnUpdate is called (without locks held) after records were
	// applied, or nil.
	OnUpdate func()
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer for the metrics, or nil for none.
	Registerer prometheus.Registerer
}

// Subscriber keeps every published plan and shard heartbeat of the store
// in memory: List, then Watch from the listed revision, and List again
// after a failed watch. Every replica runs one, the owners included.
type Subscriber struct {
	// Read-only after NewSubscriber.
	cfg  SubscriberConfig
	log  *slog.Logger
	bad  *prometheus.CounterVec
	list prometheus.Counter

	// selector is the Selector built over this Subscriber: told of every
	// update like OnUpdate. Set by NewSelector, before Run.
	selector *Selector

	// mu guards the fields below.
	mu     sync.Mutex
	plans  map[string]*planEntry
	shards map[int]*shardEntry
	badN   map[string]int64
	up     bool // the last List succeeded and its watch has not failed
}

type planEntry struct {
	rec *PlanRecord
	rev int64
}

type shardEntry struct {
	hb      Heartbeat
	rev     int64
	changed time.Time // local time the heartbeat last changed
}

// NewSubscriber validates cfg and returns a Subscriber.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.KV == nil {
		return nil, errors.New("mesh subscriber: kv: is nil")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Subscriber{
		cfg: cfg,
		log: log.With("component", "mesh-subscriber"),
		bad: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_bad_records_total",
			Help: "Records under weights/ that were ignored, by kind: plan or heartbeat (undecodable or invalid), fenced (a plan from an older epoch than its shard's heartbeat).",
		}, []string{"kind"}),
		list: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_mesh_lists_total", Help: "Lists of weights/ (at start and after a failed watch).",
		}),
		badN:   map[string]int64{},
		plans:  map[string]*planEntry{},
		shards: map[int]*shardEntry{},
	}
	for _, k := range []string{"plan", "heartbeat", "fenced"} {
		s.bad.WithLabelValues(k)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.bad, s.list} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("mesh subscriber: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// BadRecords returns how many records of kind ("plan", "heartbeat",
// "fenced") were ignored.
func (s *Subscriber) BadRecords(kind string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.badN[kind]
}

// ignored counts an ignored record; s.mu is held.
func (s *Subscriber) ignored(kind string) {
	s.badN[kind]++
	s.bad.WithLabelValues(kind).Inc()
}

// Run lists and watches weights/ until ctx ends; it returns nil then.
func (s *Subscriber) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		rev, err := s.Sync(ctx)
		if err != nil {
			s.setUp(false)
			s.log.Warn("list failed; retrying", "prefix", Prefix, "err", err)
			sleep(ctx, retry)
			continue
		}
		for ev := range s.cfg.KV.Watch(ctx, Prefix, rev) {
			if ev.Err != nil {
				if ctx.Err() == nil {
					s.log.Warn("watch failed; listing again", "prefix", Prefix, "rev", rev, "err", ev.Err)
				}
				break
			}
			s.mu.Lock()
			s.apply(ev.Type, ev.Key, ev.Value, ev.Rev, false)
			s.mu.Unlock()
			rev = ev.Rev
			s.notify()
		}
		s.setUp(false)
		sleep(ctx, retry/10)
	}
	return nil
}

func (s *Subscriber) notify() {
	if s.selector != nil {
		s.selector.Trigger()
	}
	if s.cfg.OnUpdate != nil {
		s.cfg.OnUpdate()
	}
}

func (s *Subscriber) setUp(up bool) {
	s.mu.Lock()
	changed := s.up != up
	s.up = up
	s.mu.Unlock()
	if changed {
		s.notify()
	}
}

// Up reports whether the subscriber is in sync with the store (its last
// List succeeded and the watch since has not failed).
func (s *Subscriber) Up() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// Sync lists weights/ and applies it: heartbeats first, so fencing sees
// the newest epochs; plans the List no longer has are dropped. It returns
// the listed revision. Run calls it; tests may too.
func (s *Subscriber) Sync(ctx context.Context) (int64, error) {
	kvs, rev, err := s.cfg.KV.List(ctx, Prefix)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", Prefix, err)
	}
	s.list.Inc()
	s.mu.Lock()
	seen := map[string]bool{}
	for _, kv := range kvs {
		if strings.HasPrefix(kv.Key, ShardPrefix) {
			s.apply(systemstore.EventPut, kv.Key, kv.Value, kv.Rev, true)
		}
	}
	for _, kv := range kvs {
		if strings.HasPrefix(kv.Key, PlanPrefix) {
			seen[kv.Key] = true
			s.apply(systemstore.EventPut, kv.Key, kv.Value, kv.Rev, true)
		}
	}
	for svc := range s.plans {
		if !seen[PlanKey(svc)] {
			delete(s.plans, svc)
		}
	}
	s.up = true
	s.mu.Unlock()
	s.notify()
	return rev, nil
}

// apply applies one stored change; s.mu is held. listed: from a List
// (fencing then also compares revisions, see the package doc).
func (s *Subscriber) apply(typ systemstore.EventType, key string, value []byte, rev int64, listed bool) {
	switch {
	case strings.HasPrefix(key, PlanPrefix):
		svc := strings.TrimPrefix(key, PlanPrefix)
		if typ == systemstore.EventDelete {
			delete(s.plans, svc)
			return
		}
		rec, err := DecodePlan(key, value)
		if err == nil && s.cfg.Shard != nil && s.cfg.Shard(svc) != rec.Shard {
			err = fmt.Errorf("shard: %d, but service %s is in shard %d: %w", rec.Shard, svc, s.cfg.Shard(svc), ErrBadRecord)
		}
		if err != nil {
			s.ignored("plan")
			s.log.Warn("ignored bad plan record", "key", key, "rev", rev, "err", err)
			return
		}
		if sh, ok := s.shards[rec.Shard]; ok && rec.Epoch < sh.hb.Epoch && (!listed || rev > sh.rev) {
			s.ignored("fenced")
			s.log.Warn("ignored plan from an older owner epoch", "key", key, "owner", rec.Owner, "epoch", rec.Epoch, "shard_epoch", sh.hb.Epoch, "shard_owner", sh.hb.Owner)
			return
		}
		if old, ok := s.plans[svc]; ok && rec.Epoch < old.rec.Epoch {
			s.ignored("fenced")
			s.log.Warn("ignored plan older than the one held", "key", key, "epoch", rec.Epoch, "held_epoch", old.rec.Epoch)
			return
		}
		s.plans[svc] = &planEntry{rec: rec, rev: rev}
	case strings.HasPrefix(key, ShardPrefix):
		if typ == systemstore.EventDelete {
			return // the shard goes stale
		}
		shard, hb, err := DecodeHeartbeat(key, value)
		if err != nil {
			s.ignored("heartbeat")
			s.log.Warn("ignored bad heartbeat record", "key", key, "rev", rev, "err", err)
			return
		}
		old, ok := s.shards[shard]
		if ok && hb.Epoch < old.hb.Epoch {
			s.ignored("fenced")
			s.log.Warn("ignored heartbeat from an older owner epoch", "key", key, "owner", hb.Owner, "epoch", hb.Epoch, "shard_epoch", old.hb.Epoch)
			return
		}
		if ok && old.hb == *hb {
			old.rev = rev
			return
		}
		// The local clock times every change; a heartbeat seen for the
		// first time (start, restart) is dated by the owner's own stamp
		// when that is in the past, so a dead owner's last heartbeat is
		// not taken for a fresh one.
		changed := s.cfg.Now()
		if !ok && hb.At.Before(changed) {
			changed = hb.At
		}
		s.shards[shard] = &shardEntry{hb: *hb, rev: rev, changed: changed}
	}
}

// published is what the selector needs of one service: its plan record and
// its shard's heartbeat.
type published struct {
	rec       *PlanRecord
	hb        Heartbeat
	hasHB     bool
	hbChanged time.Time
}

// lookup returns service's published plan and its shard's heartbeat.
func (s *Subscriber) lookup(service string) (published, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.plans[service]
	if !ok {
		return published{}, false
	}
	p := published{rec: e.rec}
	if sh, ok := s.shards[e.rec.Shard]; ok {
		p.hb, p.hasHB, p.hbChanged = sh.hb, true, sh.changed
	}
	return p, true
}

// services returns the services with a published plan.
func (s *Subscriber) services() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.plans))
	for svc := range s.plans {
		out = append(out, svc)
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Subsets returns the subsets of service's last published plan, nil for
// none: where a new owner's planner starts from (weights.SubsetMemory),
// so that an owner change moves no client's subset by itself.
func (s *Subscriber) Subsets(service string) *subset.Assignment {
	p, ok := s.lookup(service)
	if !ok {
		return nil
	}
	return p.rec.Subsets
}

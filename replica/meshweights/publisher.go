package meshweights

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/weights"
)

// Defaults of PublisherConfig.
const (
	DefaultInterval = 10 * time.Second
	// DefaultCheckpointEvery is 30 cycles (5 minutes at 10 s): a service's
	// state is also checkpointed whenever its plan is published, so what
	// a new owner restores between two refreshes differs from the last
	// one only in slow-start progress, health and load history, which
	// the next cycles recompute from fresh load (BenchmarkOwnerCycle: at
	// 6 the checkpoints were 626 of 633 writes per cycle and 1.2 MB).
	DefaultCheckpointEvery = 30
	// waitIntervals is how long a new owner waits for every live
	// member's acknowledgement before it warns (and counts the wait);
	// it keeps waiting past it.
	waitIntervals = 2
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// ID is this replica's id (the owner named in records). Required.
	ID string
	// KV is the shared store. Required.
	KV systemstore.KV
	// Ownership says which shards this replica holds. Required.
	Ownership Ownership
	// Merged is the owner's mesh-wide load table. Required.
	Merged MergedLoad
	// Planner computes the owned services' plans from Merged. Required.
	Planner Planner
	// Services lists the registry's services. Required.
	Services func() []string
	// Shards is the shard count (the same on every replica); zero means
	// DefaultShards.
	Shards int
	// Interval is the cycle period of Run; zero means DefaultInterval.
	// It is also the unit of the new owner's wait: past 2 intervals
	// without every live member's acknowledgement it warns, and keeps
	// waiting.
	Interval time.Duration
	// CheckpointEvery is how many cycles pass between two state
	// checkpoints of a service (the services are spread over the
	// cycles), besides the one written with each published plan; zero
	// means DefaultCheckpointEvery.
	CheckpointEvery int
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer for the metrics, or nil for none.
	Registerer prometheus.Registerer
}

// WriteCounts are the store writes a Publisher made, by kind.
type WriteCounts struct {
	Plan, Heartbeat, State int64
}

// Publisher is the owner side: each cycle it runs the owner Planner,
// publishes the plans of the owned services whose vectors changed, and a
// heartbeat per owned shard. See the package doc for the protocol.
type Publisher struct {
	// Read-only after NewPublisher.
	cfg    PublisherConfig
	log    *slog.Logger
	writes *prometheus.CounterVec
	waits  *prometheus.CounterVec

	// mu guards the fields below; Cycle holds it for its whole run (one
	// cycle at a time).
	mu    sync.Mutex
	cycle uint64
	held  map[int]*hold     // shard -> this replica's hold
	last  map[string]string // service -> vector key last published
	// lastPlan is the plan last published per service: the same plan
	// (plans are never modified) has the same key, so a service whose
	// plan the planner kept costs no key.
	lastPlan map[string]*weights.Plan
	states   map[string][]byte // service -> state last checkpointed
	counts   WriteCounts
	failed   bool // a write of this cycle failed: skip the rest
}

// hold is this replica's hold of one shard.
type hold struct {
	epoch int64
	taken time.Time // when the hold was first seen
	ready bool      // the acknowledgement wait is over
	// warned is set once the wait passed waitIntervals (logged and
	// counted once per hold).
	warned bool
	// unread are the services whose checkpoint could not be read (store
	// error): retried every cycle, and nothing of the shard is published
	// before they are read.
	unread []string
}

// NewPublisher validates cfg and returns a Publisher.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	switch {
	case cfg.ID == "":
		return nil, errors.New("mesh publisher: id: is empty")
	case cfg.KV == nil:
		return nil, errors.New("mesh publisher: kv: is nil")
	case cfg.Ownership == nil:
		return nil, errors.New("mesh publisher: ownership: is nil")
	case cfg.Merged == nil:
		return nil, errors.New("mesh publisher: merged: is nil")
	case cfg.Planner == nil:
		return nil, errors.New("mesh publisher: planner: is nil")
	case cfg.Services == nil:
		return nil, errors.New("mesh publisher: services: is nil")
	case cfg.Shards < 0 || cfg.Shards > 1<<16:
		return nil, fmt.Errorf("mesh publisher: shards: %d out of range [0, 65536]", cfg.Shards)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("mesh publisher: interval: %v is negative", cfg.Interval)
	case cfg.CheckpointEvery < 0:
		return nil, fmt.Errorf("mesh publisher: checkpoint_every: %d is negative", cfg.CheckpointEvery)
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = DefaultCheckpointEvery
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{
		cfg: cfg,
		log: log.With("component", "mesh-publisher"),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_store_writes_total",
			Help: "Store writes of the mesh weights owner, by kind: plan (a service's vectors changed), heartbeat (one per owned shard per cycle), state (checkpoints).",
		}, []string{"kind"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_mesh_publish_waits_total",
			Help: "Shard holds whose first publish waited past 2 intervals, by reason: unacked (a live member has not yet acknowledged that it routes the shard's load here under this epoch).",
		}, []string{"reason"}),
		held:     map[int]*hold{},
		last:     map[string]string{},
		lastPlan: map[string]*weights.Plan{},
		states:   map[string][]byte{},
	}
	for _, k := range []string{"plan", "heartbeat", "state"} {
		p.writes.WithLabelValues(k)
	}
	p.waits.WithLabelValues("unacked")
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{p.writes, p.waits} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("mesh publisher: register metrics: %w", err)
			}
		}
	}
	return p, nil
}

// Writes returns the store writes made so far.
func (p *Publisher) Writes() WriteCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// Run runs a cycle every Interval until ctx ends, then checkpoints the
// state of the shards still held (a shutdown gives them up) and returns
// nil.
func (p *Publisher) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Interval)
			p.mu.Lock()
			shards := make([]int, 0, len(p.held))
			for s := range p.held {
				shards = append(shards, s)
			}
			p.mu.Unlock()
			for _, s := range shards {
				p.Release(sctx, s)
			}
			cancel()
			return nil
		case now := <-t.C:
			p.Cycle(ctx, now)
		}
	}
}

// put writes one record; after a failure the rest of the cycle's writes
// are skipped (the store is likely unreachable: one request timeout per
// cycle, not one per service), and retried next cycle.
func (p *Publisher) put(ctx context.Context, kind, key string, v []byte) bool {
	if p.failed {
		return false
	}
	if _, err := p.cfg.KV.Put(ctx, key, v); err != nil {
		p.failed = true
		p.log.Warn("store write failed; skipping this cycle's other writes", "kind", kind, "key", key, "err", err)
		return false
	}
	p.writes.WithLabelValues(kind).Inc()
	switch kind {
	case "plan":
		p.counts.Plan++
	case "heartbeat":
		p.counts.Heartbeat++
	case "state":
		p.counts.State++
	}
	return true
}

// putHeartbeats writes the held shards' heartbeats, in one PutBatch when
// the store has it, else one put each; what the store took is counted,
// and a failure skips the rest of the cycle's writes, as put does.
func (p *Publisher) putHeartbeats(ctx context.Context, hbs []systemstore.KeyValue) {
	b, ok := p.cfg.KV.(systemstore.BatchPutter)
	if !ok {
		for _, hb := range hbs {
			p.put(ctx, "heartbeat", hb.Key, hb.Value)
		}
		return
	}
	if p.failed || len(hbs) == 0 {
		return
	}
	n, err := b.PutBatch(ctx, hbs)
	p.writes.WithLabelValues("heartbeat").Add(float64(n))
	p.counts.Heartbeat += int64(n)
	if err != nil {
		p.failed = true
		p.log.Warn("store write failed; skipping this cycle's other writes", "kind", "heartbeat", "records", len(hbs), "taken", n, "err", err)
	}
}

// del deletes one record of a service that left, counted as a plan write.
func (p *Publisher) del(ctx context.Context, key string) bool {
	if p.failed {
		return false
	}
	if _, err := p.cfg.KV.Delete(ctx, key); err != nil {
		p.failed = true
		p.log.Warn("store delete failed; skipping this cycle's other writes", "key", key, "err", err)
		return false
	}
	p.writes.WithLabelValues("plan").Inc()
	p.counts.Plan++
	return true
}

// Cycle runs one owner cycle at now: note taken and lost shards, run the
// planner, write the heartbeats of the held shards, then the changed
// plans of the ready ones (each with its state), and every
// CheckpointEvery cycles the state.
func (p *Publisher) Cycle(ctx context.Context, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cycle++
	p.failed = false
	own := p.cfg.Ownership

	// Shards held now, and the services of each.
	held := map[int]int64{}
	for s := 0; s < p.cfg.Shards; s++ {
		if e, ok := own.Epoch(s); ok {
			held[s] = e
		}
	}
	byShard := map[int][]string{}
	for _, svc := range p.cfg.Services() {
		if !own.Owns(svc) {
			continue
		}
		s := own.Shard(svc)
		if _, ok := held[s]; !ok {
			continue
		}
		if err := validService(svc); err != nil {
			p.log.Warn("service name cannot be a store key; not published", "service", svc, "err", err)
			continue
		}
		byShard[s] = append(byShard[s], svc)
	}

	// Lost shards: forget what was published, so a later hold publishes
	// everything again under its new epoch. Their state is not written:
	// the new owner may have read it already (Release is the way to hand
	// state over).
	for s := range p.held {
		if _, ok := held[s]; !ok {
			p.log.Info("shard lost", "shard", s, "epoch", p.held[s].epoch)
			delete(p.held, s)
			p.forget(s)
		}
	}
	// Taken shards: restore their services' state before the planner
	// runs, then wait for fresh load.
	for s, e := range held {
		if h, ok := p.held[s]; ok && h.epoch == e {
			continue
		}
		p.log.Info("shard taken", "shard", s, "epoch", e, "services", len(byShard[s]))
		p.held[s] = &hold{epoch: e, taken: now}
		p.forget(s)
		p.held[s].unread = p.restore(ctx, byShard[s])
	}
	for _, h := range p.held {
		if len(h.unread) > 0 {
			h.unread = p.restore(ctx, h.unread)
		}
	}

	shards := make([]int, 0, len(held))
	for s := range held {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	// The acknowledgements are checked before the planner runs: a shard
	// is published only from plans computed while every live member's
	// acknowledging summary (and its load) was in the merged table. An
	// acknowledgement that arrives while the planner computes counts from
	// the next cycle, whose plans include that member's load.
	for _, s := range shards {
		h := p.held[s]
		if len(h.unread) > 0 || h.ready {
			continue
		}
		if missing := p.unacked(s, h); len(missing) > 0 {
			if !h.warned && now.Sub(h.taken) >= waitIntervals*p.cfg.Interval {
				h.warned = true
				p.waits.WithLabelValues("unacked").Inc()
				p.log.Warn("shard not published: live members have not acknowledged the new owner; still waiting",
					"shard", s, "epoch", h.epoch, "waited", now.Sub(h.taken), "members", missing)
			}
			continue
		}
		h.ready = true
		p.log.Info("shard ready to publish", "shard", s, "epoch", h.epoch, "waited", now.Sub(h.taken))
		// The cycles that ran while the shard waited computed from partial
		// load and moved the planner's state away from what was restored:
		// the first published cycle starts again from the checkpoint, so
		// its hysteresis compares with the vectors the replicas serve.
		for _, svc := range byShard[s] {
			if b, ok := p.states[svc]; ok {
				if err := p.cfg.Planner.ImportState(svc, b); err != nil {
					p.log.Warn("state checkpoint rejected at the first publish; service starts fresh", "service", svc, "err", err)
				}
			}
		}
	}

	p.cfg.Planner.Cycle(now)

	hbs := make([]systemstore.KeyValue, 0, len(shards))
	for _, s := range shards {
		h := p.held[s]
		hb, _ := json.Marshal(Heartbeat{V: recordVersion, Owner: p.cfg.ID, Epoch: h.epoch, Cycle: p.cycle, At: now})
		hbs = append(hbs, systemstore.KeyValue{Key: ShardKey(s), Value: hb})
	}
	p.putHeartbeats(ctx, hbs)
	var jobs []writeJob
	for _, s := range shards {
		h := p.held[s]
		if len(h.unread) > 0 || !h.ready {
			continue
		}
		for _, svc := range byShard[s] {
			if j, ok := p.publish(svc, s, h.epoch, now); ok {
				jobs = append(jobs, j)
			}
		}
	}
	p.write(ctx, jobs)
	// Services that left the registry (or the shard): their plan and
	// state go, so no replica serves them.
	owned := map[string]bool{}
	for _, svcs := range byShard {
		for _, svc := range svcs {
			owned[svc] = true
		}
	}
	for svc := range p.last {
		if _, held := p.held[own.Shard(svc)]; !held || owned[svc] || !p.held[own.Shard(svc)].ready {
			continue
		}
		if p.del(ctx, PlanKey(svc)) && p.del(ctx, StateKey(svc)) {
			delete(p.last, svc)
			delete(p.lastPlan, svc)
			delete(p.states, svc)
		}
	}
	// Each service is checkpointed every CheckpointEvery cycles, the
	// services spread over the cycles so the writes are not bursts.
	k := uint64(p.cfg.CheckpointEvery)
	var due []string
	for _, s := range shards {
		if !p.held[s].ready {
			continue
		}
		for _, svc := range byShard[s] {
			if (p.cycle+uint64(hash32(svc)))%k == 0 {
				due = append(due, svc)
			}
		}
	}
	p.checkpoint(ctx, due)
}

func hash32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// unacked returns the live members that have not acknowledged shard s's
// hold h: no summary of theirs arrived after the take listing (s,
// h.epoch). Until they all have, the merged load of s may lack theirs
// (they still route it to the old owner), so nothing of s is published;
// a dead member leaves the live list within the member TTL. This replica
// is one of them: its own load reaches its merged table only when its
// sender delivers, on the sender's tick, and a plan computed before that
// lacks every client zone this replica serves (each would fail open to
// capacity for a cycle, measured: a 74-point swing at a handover).
func (p *Publisher) unacked(s int, h *hold) (missing []string) {
	for _, m := range p.cfg.Ownership.LiveMembers() {
		if !p.cfg.Merged.Acked(m, s, h.epoch, h.taken) {
			missing = append(missing, m)
		}
	}
	return missing
}

func (p *Publisher) forget(shard int) {
	for svc := range p.last {
		if p.cfg.Ownership.Shard(svc) == shard {
			delete(p.last, svc)
			delete(p.lastPlan, svc)
		}
	}
	for svc := range p.states {
		if p.cfg.Ownership.Shard(svc) == shard {
			delete(p.states, svc)
		}
	}
}

// restore imports each service's checkpointed state; a missing or bad
// one leaves the service to start fresh. It returns the services whose
// checkpoint could not be read (a store error), to try again.
func (p *Publisher) restore(ctx context.Context, services []string) (unread []string) {
	for _, svc := range services {
		if p.failed {
			unread = append(unread, svc)
			continue
		}
		b, _, err := p.cfg.KV.Get(ctx, StateKey(svc))
		if errors.Is(err, systemstore.ErrNotFound) {
			continue
		}
		if err != nil {
			p.failed = true
			p.log.Warn("state checkpoint unreadable; trying again next cycle", "service", svc, "err", err)
			unread = append(unread, svc)
			continue
		}
		if err := p.cfg.Planner.ImportState(svc, b); err != nil {
			p.log.Warn("state checkpoint rejected; service starts fresh", "service", svc, "err", err)
			continue
		}
		p.states[svc] = b
	}
	return unread
}

// writeJob is one service's writes of a cycle: its plan record (nil
// for none) and, after it, its state (nil for none).
type writeJob struct {
	svc   string
	key   string // the plan's vector key, with plan
	plan  *weights.Plan
	rec   []byte
	state []byte
	// Set by write: which of the two the store took.
	planOK, stateOK bool
}

// publishWriters is how many services' writes are in flight at once
// when the store writes one record per round trip (no
// systemstore.BatchPutter): a cycle writes a plan and a state per
// changed service, and one at a time they took about 1 ms each on etcd
// (scale part "weights": 441 of a 497 ms owner cycle for 5,000
// services), where etcd commits concurrent writes together.
const publishWriters = 16

// With a systemstore.BatchPutter (etcd), the writes go publishBatch
// services (a plan and a state each: etcd's 128 operations per
// transaction) per PutBatch, publishBatches of them in flight (scale
// part "weights" at 100 %, 4,260 writes: publish 885 ms one Put at a
// time, 330 ms with 4 batches in flight, 285 ms with 8).
const (
	publishBatch   = 64
	publishBatches = 8
)

// publish returns the writes of svc's plan when its vectors changed
// since the last published: the record and the planner's state to
// checkpoint with it.
func (p *Publisher) publish(svc string, shard int, epoch int64, now time.Time) (writeJob, bool) {
	plan := p.cfg.Planner.Plan(svc)
	if plan == nil || plan.Result == nil {
		return writeJob{}, false
	}
	if _, ok := p.last[svc]; ok && p.lastPlan[svc] == plan {
		return writeJob{}, false
	}
	key := planKey(plan.Result, plan.Endpoints, plan.LocalityFromEndpoints) + subsetKey(plan.Subsets)
	if last, ok := p.last[svc]; ok && last == key {
		p.lastPlan[svc] = plan
		return writeJob{}, false
	}
	rec := PlanRecord{
		V: recordVersion, Service: svc, Owner: p.cfg.ID, Epoch: epoch, Shard: shard, Published: now,
		Contributors: encodeContributors(p.cfg.Merged.Contributors(svc, now)),
		Result:       plan.Result,
		Endpoints:    plan.Endpoints, LocalityFromEndpoints: plan.LocalityFromEndpoints, PID: plan.PID,
		Subsets: plan.Subsets,
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		p.log.Error("plan not encodable; not published", "service", svc, "err", err)
		return writeJob{}, false
	}
	if len(b) > MaxRecordBytes {
		p.log.Error("plan too large; not published", "service", svc, "bytes", len(b))
		return writeJob{}, false
	}
	// The state goes with the plan: a new owner's hysteresis then
	// compares with the vectors the replicas serve.
	return writeJob{svc: svc, key: key, plan: plan, rec: b, state: p.exportChanged(svc)}, true
}

// exportChanged is svc's state when it differs from the one last
// checkpointed, else nil.
func (p *Publisher) exportChanged(svc string) []byte {
	b, ok := p.cfg.Planner.ExportState(svc)
	if !ok || bytes.Equal(b, p.states[svc]) {
		return nil
	}
	return b
}

// write makes the jobs' writes, each service's plan before its state (a
// state only after its plan was taken), and then records what the store
// took. A store that is a systemstore.BatchPutter gets them
// publishBatch services per PutBatch, publishBatches at a time; any
// other, publishWriters services at a time, one Put each. After a
// failure no further write starts (those in flight finish), as put
// does.
func (p *Publisher) write(ctx context.Context, jobs []writeJob) {
	if len(jobs) == 0 || p.failed {
		return
	}
	if b, ok := p.cfg.KV.(systemstore.BatchPutter); ok {
		p.failed = p.writeBatches(ctx, b, jobs)
	} else {
		p.failed = p.writeEach(ctx, jobs)
	}
	for i := range jobs {
		j := &jobs[i]
		if j.planOK {
			p.writes.WithLabelValues("plan").Inc()
			p.counts.Plan++
			p.last[j.svc] = j.key
			p.lastPlan[j.svc] = j.plan
		}
		if j.stateOK {
			p.writes.WithLabelValues("state").Inc()
			p.counts.State++
			p.states[j.svc] = j.state
		}
	}
}

// writeEach writes the jobs with one Put per record, publishWriters
// services at a time, and reports whether a write failed.
func (p *Publisher) writeEach(ctx context.Context, jobs []writeJob) (failed bool) {
	var fail atomic.Bool
	putOne := func(j *writeJob) {
		if j.rec != nil {
			if fail.Load() {
				return
			}
			if _, err := p.cfg.KV.Put(ctx, PlanKey(j.svc), j.rec); err != nil {
				if !fail.Swap(true) {
					p.log.Warn("store write failed; skipping this cycle's other writes", "kind", "plan", "key", PlanKey(j.svc), "err", err)
				}
				return
			}
			j.planOK = true
		}
		if j.state != nil && !fail.Load() {
			if _, err := p.cfg.KV.Put(ctx, StateKey(j.svc), j.state); err != nil {
				if !fail.Swap(true) {
					p.log.Warn("store write failed; skipping this cycle's other writes", "kind", "state", "key", StateKey(j.svc), "err", err)
				}
				return
			}
			j.stateOK = true
		}
	}
	next := make(chan *writeJob)
	var wg sync.WaitGroup
	for range min(publishWriters, len(jobs)) {
		wg.Go(func() {
			for j := range next {
				putOne(j)
			}
		})
	}
	for i := range jobs {
		if fail.Load() {
			break
		}
		next <- &jobs[i]
	}
	close(next)
	wg.Wait()
	return fail.Load()
}

// writeBatches writes the jobs publishBatch services per PutBatch (each
// service's plan, then its state), publishBatches calls at a time, and
// reports whether a write failed. What a call's store took is a prefix
// of its records, so a state is taken only with or after its plan.
func (p *Publisher) writeBatches(ctx context.Context, b systemstore.BatchPutter, jobs []writeJob) (failed bool) {
	var fail atomic.Bool
	putBatch := func(group []writeJob) {
		puts := make([]systemstore.KeyValue, 0, 2*len(group))
		for i := range group {
			if j := &group[i]; j.rec != nil {
				puts = append(puts, systemstore.KeyValue{Key: PlanKey(j.svc), Value: j.rec})
			}
			if j := &group[i]; j.state != nil {
				puts = append(puts, systemstore.KeyValue{Key: StateKey(j.svc), Value: j.state})
			}
		}
		n, err := b.PutBatch(ctx, puts)
		n0 := n
		for i := range group {
			j := &group[i]
			if j.rec != nil && n > 0 {
				j.planOK = true
				n--
			} else if j.rec != nil {
				break
			}
			if j.state != nil && n > 0 {
				j.stateOK = true
				n--
			} else if j.state != nil {
				break
			}
		}
		if err != nil && !fail.Swap(true) {
			p.log.Warn("store write failed; skipping this cycle's other writes", "kind", "plan and state", "records", len(puts), "taken", n0, "err", err)
		}
	}
	next := make(chan []writeJob)
	var wg sync.WaitGroup
	for range min(publishBatches, (len(jobs)+publishBatch-1)/publishBatch) {
		wg.Go(func() {
			for g := range next {
				putBatch(g)
			}
		})
	}
	for lo := 0; lo < len(jobs); lo += publishBatch {
		if fail.Load() {
			break
		}
		next <- jobs[lo:min(lo+publishBatch, len(jobs))]
	}
	close(next)
	wg.Wait()
	return fail.Load()
}

func (p *Publisher) checkpoint(ctx context.Context, services []string) {
	var jobs []writeJob
	for _, svc := range services {
		if b := p.exportChanged(svc); b != nil {
			jobs = append(jobs, writeJob{svc: svc, state: b})
		}
	}
	p.write(ctx, jobs)
}

// Release checkpoints the state of shard's services: call it before this
// replica gives the shard up (resign, shutdown), so the next owner
// restores it.
func (p *Publisher) Release(ctx context.Context, shard int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = false
	var svcs []string
	for _, svc := range p.cfg.Services() {
		if p.cfg.Ownership.Shard(svc) == shard && validService(svc) == nil {
			svcs = append(svcs, svc)
		}
	}
	p.checkpoint(ctx, svcs)
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// Lease states.
const (
	stRegistering   int32 = iota // a Register is in flight (the first, or again after found=false)
	stLive                       // acknowledged and heartbeated
	stDeregistering              // Deregister called: no more heartbeats
	stGone                       // deregistered
	stAbandoned                  // a registration or deregistration gave up: out of the checks
)

// slots is the number of heartbeat ticks per interval: each tick
// heartbeats the leases of one slot, so the heartbeats are spread evenly.
const slots = 10

// rpcTimeout bounds one Register, Deregister or ListEndpoints call.
const rpcTimeout = 10 * time.Second

// repStats are a replica's counters, written by the load loops and read
// by the sampler.
type repStats struct {
	hbAcked, hbNotFound, hbStreamFails atomic.Int64
	regOK, regFailed                   atomic.Int64
	deregOK, deregFailed               atomic.Int64
	xdsOpen                            atomic.Int64 // a gauge: streams that have had a response and are not yet ended
	xdsOpened, xdsFailed, xdsResponses atomic.Int64
}

// lease is one endpoint of the workload and the lease that holds it.
type lease struct {
	// Read-only after newLease.
	n           int
	service, id string
	slot        int

	state       atomic.Int32
	home        atomic.Int32 // the replica it heartbeats
	leaseID     atomic.Pointer[string]
	acked       atomic.Bool  // a registration of it was acknowledged
	ackedAt     atomic.Int64 // when the latest was, since the load started (ns)
	ackedBy     atomic.Int32 // the replica that acknowledged it
	deregCalled atomic.Bool  // Deregister was called: a store delete is expected

	idx int // position in workload.live; workload.mu
}

func (l *lease) key() string { return l.service + "/" + l.id }

func (l *lease) lid() string {
	if p := l.leaseID.Load(); p != nil {
		return *p
	}
	return ""
}

// expiry is a heartbeat of a live lease answered found=false.
type expiry struct {
	at      time.Duration
	key     string
	replica int           // the replica that answered
	ackedBy int           // the replica that acknowledged the lease
	age     time.Duration // since that acknowledgement
}

// workload is the leases: registered, heartbeated, churned.
type workload struct {
	// Read-only after newWorkload.
	c    config
	log  *slog.Logger
	reps []*replica
	t0   atomic.Int64 // UnixNano of the load's start; 0 before

	mu    sync.Mutex // guards live, byKey and rng
	live  []*lease   // acknowledged, heartbeated, not chosen for deregistration
	byKey map[string]*lease
	rng   *rand.Rand

	next    atomic.Int64 // next endpoint number
	rr      atomic.Int64 // round robin of new registrations over the replicas
	regWait sync.WaitGroup

	expMu   sync.Mutex // guards expired and failCodes
	expired []expiry
	// failCodes counts the heartbeat streams that failed, by gRPC code.
	failCodes map[codes.Code]int

	hbMoved, hbGaveUp, hbMismatch            atomic.Int64
	regAbandoned, regAgain                   atomic.Int64
	deregNotFound, deregAbandoned, churnDrop atomic.Int64
	churnAdds, churnRemoves                  atomic.Int64
}

func newWorkload(c config, log *slog.Logger, reps []*replica) *workload {
	return &workload{c: c, log: log, reps: reps, byKey: map[string]*lease{}, failCodes: map[codes.Code]int{},
		rng: rand.New(rand.NewPCG(uint64(c.seed), 0x50a6))}
}

func (w *workload) since() time.Duration {
	t0 := w.t0.Load()
	if t0 == 0 {
		return 0
	}
	return time.Duration(time.Now().UnixNano() - t0)
}

func (w *workload) newLease(n int) *lease {
	l := &lease{n: n, service: serviceName(n % w.c.services), id: fmt.Sprintf("ep-%d", n), slot: n % slots, idx: -1}
	w.mu.Lock()
	w.byKey[l.key()] = l
	w.mu.Unlock()
	return l
}

func serviceName(i int) string { return fmt.Sprintf("svc-%d", i) }

// address is endpoint n's IPv4 address, unique for n < 15,625,000.
func address(n int) string {
	return fmt.Sprintf("10.%d.%d.%d", n/62500%250, n/250%250, n%250+1)
}

func (w *workload) request(l *lease) *pb.RegisterRequest {
	return &pb.RegisterRequest{
		Service: l.service, TtlSeconds: uint32(w.c.ttl / time.Second),
		Endpoint: &pb.Endpoint{
			Id: l.id, Address: address(l.n), Ports: []*pb.Port{{Name: "grpc", Number: 8080}},
			Locality: &pb.Locality{Region: "r1", Zone: fmt.Sprintf("zone-%c", 'a'+l.n%3)},
		},
	}
}

func (w *workload) addLive(l *lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.idx < 0 {
		l.idx = len(w.live)
		w.live = append(w.live, l)
	}
}

func (w *workload) removeLive(l *lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLiveLocked(l)
}

func (w *workload) removeLiveLocked(l *lease) {
	i := l.idx
	if i < 0 {
		return
	}
	last := w.live[len(w.live)-1]
	w.live[i], last.idx = last, i
	w.live = w.live[:len(w.live)-1]
	l.idx = -1
}

// pickLive takes a random live lease out of the live set, or nil.
func (w *workload) pickLive() *lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range 10 {
		if len(w.live) == 0 {
			return nil
		}
		l := w.live[w.rng.IntN(len(w.live))]
		if l.state.Load() == stLive {
			w.removeLiveLocked(l)
			return l
		}
	}
	return nil
}

// register registers l, first on replica start, then on the next ones
// after a failure (two rounds, a second's pause between them). Each
// failed attempt counts against its replica. On success l is live and
// heartbeated on the replica that acknowledged.
func (w *workload) register(ctx context.Context, l *lease, start int) bool {
	req := w.request(l)
	n := len(w.reps)
	for attempt := 0; attempt < 2*n && ctx.Err() == nil; attempt++ {
		h := (start + attempt) % n
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := w.reps[h].reg.Register(rctx, req)
		cancel()
		if err == nil {
			w.reps[h].stats.regOK.Add(1)
			id := resp.LeaseId
			l.leaseID.Store(&id)
			l.home.Store(int32(h))
			l.ackedAt.Store(int64(w.since()))
			l.ackedBy.Store(int32(h))
			l.acked.Store(true)
			l.state.Store(stLive)
			w.addLive(l)
			return true
		}
		w.reps[h].stats.regFailed.Add(1)
		if attempt == n-1 {
			sleep(ctx, time.Second)
		}
	}
	l.state.Store(stAbandoned)
	w.regAbandoned.Add(1)
	return false
}

// registerInitial registers endpoints 0..leases-1, endpoint n first on
// replica n%N, 32 at a time.
func (w *workload) registerInitial(ctx context.Context) error {
	const inFlight = 32
	var next atomic.Int64
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= w.c.leases || ctx.Err() != nil {
					return
				}
				w.register(ctx, w.newLease(n), n%len(w.reps))
			}
		})
	}
	wg.Wait()
	w.next.Store(int64(w.c.leases))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("initial registrations: %w", err)
	}
	if n := w.regAbandoned.Load(); n > 0 {
		return fmt.Errorf("initial registrations: %d of %d gave up on every replica", n, w.c.leases)
	}
	return nil
}

// heartbeats heartbeats every live lease once per --heartbeat-interval,
// a tenth of them every tenth of it, until ctx ends (and at most maxTicks
// ticks). A slow tick delays the next ones; none is skipped.
func (w *workload) heartbeats(ctx context.Context, maxTicks int) {
	tick := time.NewTicker(w.c.beat / slots)
	defer tick.Stop()
	for k := 0; k < maxTicks; k++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		byHome := make([][]*lease, len(w.reps))
		w.mu.Lock()
		for _, l := range w.live {
			if l.slot == k%slots && l.state.Load() == stLive {
				h := l.home.Load()
				byHome[h] = append(byHome[h], l)
			}
		}
		w.mu.Unlock()
		var wg sync.WaitGroup
		for h, ls := range byHome {
			for len(ls) > 0 {
				batch := ls[:min(len(ls), w.c.hbBatch)]
				ls = ls[len(batch):]
				wg.Go(func() { w.beat(ctx, h, batch, 0) })
			}
		}
		wg.Wait()
	}
}

// beat heartbeats ls over one HeartbeatStream to replica h. When the
// stream fails, the leases not answered move to the next replica and are
// heartbeated there at once (as clientlib/heartbeat moves an agent), up
// to N-1 moves.
func (w *workload) beat(ctx context.Context, h int, ls []*lease, moves int) {
	st := w.reps[h].stats
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.lid()
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rest := ls
	stream, err := w.reps[h].reg.HeartbeatStream(sctx)
	if err == nil {
		go func() {
			for _, id := range ids {
				if stream.Send(&pb.HeartbeatRequest{LeaseId: id}) != nil {
					return
				}
			}
			stream.CloseSend()
		}()
		for i := range ls {
			resp, rerr := stream.Recv()
			if rerr != nil {
				err = rerr
				break
			}
			rest = ls[i+1:]
			if resp.LeaseId != ids[i] {
				w.hbMismatch.Add(1)
			}
			if resp.Found {
				st.hbAcked.Add(1)
			} else {
				st.hbNotFound.Add(1)
				w.notFound(ctx, ls[i], ids[i], h)
			}
		}
	}
	if len(rest) == 0 || ctx.Err() != nil {
		return
	}
	st.hbStreamFails.Add(1)
	w.expMu.Lock()
	w.failCodes[status.Code(err)]++
	w.expMu.Unlock()
	if moves >= len(w.reps)-1 {
		w.hbGaveUp.Add(int64(len(rest)))
		return
	}
	next := (h + 1) % len(w.reps)
	for _, l := range rest {
		l.home.CompareAndSwap(int32(h), int32(next))
	}
	w.hbMoved.Add(int64(len(rest)))
	w.beat(ctx, next, rest, moves+1)
}

// notFound handles a heartbeat answered found=false: for the lease's
// current id while it is live, that is a live endpoint expired; it is
// recorded and the lease registers again (same endpoint id).
func (w *workload) notFound(ctx context.Context, l *lease, id string, h int) {
	if l.lid() != id || !l.state.CompareAndSwap(stLive, stRegistering) {
		return // an older lease of it, or it is being deregistered
	}
	w.removeLive(l)
	w.expMu.Lock()
	now := w.since()
	w.expired = append(w.expired, expiry{at: now, key: l.key(), replica: h, ackedBy: int(l.ackedBy.Load()), age: now - time.Duration(l.ackedAt.Load())})
	w.expMu.Unlock()
	w.log.Warn("live lease unknown to a replica", "endpoint", l.key(), "lease", id, "replica", w.reps[h].name)
	w.regAgain.Add(1)
	w.regWait.Go(func() { w.register(ctx, l, h) })
}

// churn registers a new endpoint and deregisters a random live one,
// --churn times a second, until stop is closed (at most rate × limit
// times). The calls run on 16 workers; a call the workers have no room
// for is dropped and counted. The calls under way when stop closes are
// finished (on ctx).
func (w *workload) churn(ctx context.Context, stop <-chan struct{}, limit time.Duration) {
	if w.c.churn <= 0 {
		return
	}
	jobs := make(chan func(), 256)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for j := range jobs {
				j()
			}
		})
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / w.c.churn))
	defer tick.Stop()
	n := int(w.c.churn*limit.Seconds()) + 1
loop:
	for range n {
		select {
		case <-ctx.Done():
			break loop
		case <-stop:
			break loop
		case <-tick.C:
		}
		for _, j := range []func(){w.addOne(ctx), w.removeOne(ctx)} {
			select {
			case jobs <- j:
			default:
				w.churnDrop.Add(1)
			}
		}
	}
	close(jobs)
	wg.Wait()
}

func (w *workload) addOne(ctx context.Context) func() {
	return func() {
		n := int(w.next.Add(1) - 1)
		if w.register(ctx, w.newLease(n), int(w.rr.Add(1))%len(w.reps)) {
			w.churnAdds.Add(1)
		}
	}
}

func (w *workload) removeOne(ctx context.Context) func() {
	return func() {
		if l := w.pickLive(); l != nil {
			w.deregister(ctx, l)
		}
	}
}

// deregister stops heartbeating l and deregisters it through its home
// replica, then the next ones after a failure. NotFound after a failed
// attempt means that attempt did it; NotFound at the first attempt is
// counted (the replica does not know a lease the workload holds) and
// taken as done.
func (w *workload) deregister(ctx context.Context, l *lease) {
	l.state.Store(stDeregistering)
	l.deregCalled.Store(true)
	n := len(w.reps)
	home := int(l.home.Load())
	failed := false
	for attempt := 0; attempt < 2*n && ctx.Err() == nil; attempt++ {
		h := (home + attempt) % n
		dctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := w.reps[h].reg.Deregister(dctx, &pb.DeregisterRequest{LeaseId: l.lid()})
		cancel()
		switch status.Code(err) {
		case codes.OK:
			w.reps[h].stats.deregOK.Add(1)
			l.state.Store(stGone)
			w.churnRemoves.Add(1)
			return
		case codes.NotFound:
			if !failed {
				w.deregNotFound.Add(1)
			}
			l.state.Store(stGone)
			w.churnRemoves.Add(1)
			return
		}
		w.reps[h].stats.deregFailed.Add(1)
		failed = true
		if attempt == n-1 {
			sleep(ctx, time.Second)
		}
	}
	l.state.Store(stAbandoned)
	w.deregAbandoned.Add(1)
}

// classify says what a store delete of key is, from what the workload
// did with it.
func (w *workload) classify(key string) deleteKind {
	w.mu.Lock()
	l := w.byKey[key]
	w.mu.Unlock()
	switch {
	case l == nil:
		return delForeign
	case l.deregCalled.Load():
		return delDeregistered
	case !l.acked.Load():
		return delUnacked
	}
	return delLive
}

// servedCheck is what the replicas list against what the workload holds.
type servedCheck struct {
	expected, deregistered int
	lost, stale, foreign   []int      // per replica
	examples               [][]string // per replica, at most 5 lost keys
	listErrors             []int      // per replica
}

// checkServed lists every service on every replica (ListEndpoints) and
// compares the VM endpoints with the workload: every acknowledged, live
// registration must be listed by every replica (else lost); a
// deregistered one must not be (stale); an endpoint the workload never
// created is foreign. (Listings carry no lease id: it is the holder's
// secret.)
func (w *workload) checkServed(ctx context.Context) servedCheck {
	want := map[string]bool{}
	gone := map[string]bool{}
	w.mu.Lock()
	for k, l := range w.byKey {
		switch l.state.Load() {
		case stLive:
			want[k] = true
		case stGone:
			gone[k] = true
		}
	}
	w.mu.Unlock()
	n := len(w.reps)
	sc := servedCheck{expected: len(want), deregistered: len(gone),
		lost: make([]int, n), stale: make([]int, n), foreign: make([]int, n),
		examples: make([][]string, n), listErrors: make([]int, n)}
	for i, r := range w.reps {
		served := map[string]bool{}
		for s := range w.c.services {
			svc := serviceName(s)
			lctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			resp, err := r.reg.ListEndpoints(lctx, &pb.ListEndpointsRequest{Service: svc})
			cancel()
			if err != nil && status.Code(err) != codes.NotFound {
				sc.listErrors[i]++
				continue
			}
			for _, e := range resp.GetEndpoints() {
				served[svc+"/"+e.Id] = true
			}
		}
		for k := range want {
			if !served[k] {
				sc.lost[i]++
				if len(sc.examples[i]) < 5 {
					sc.examples[i] = append(sc.examples[i], k)
				}
			}
		}
		for k := range served {
			if gone[k] {
				sc.stale[i]++
			} else if !want[k] {
				w.mu.Lock()
				_, known := w.byKey[k]
				w.mu.Unlock()
				if !known {
					sc.foreign[i]++
				}
			}
		}
	}
	return sc
}

// liveCount is the number of leases heartbeated.
func (w *workload) liveCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.live)
}

// streamFailures returns the heartbeat stream failures by gRPC code.
func (w *workload) streamFailures() map[codes.Code]int {
	w.expMu.Lock()
	defer w.expMu.Unlock()
	return maps.Clone(w.failCodes)
}

func (w *workload) expiries() []expiry {
	w.expMu.Lock()
	defer w.expMu.Unlock()
	return append([]expiry(nil), w.expired...)
}

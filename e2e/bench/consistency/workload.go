package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/e2e/bench/consistency/model"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// fate is what the workload does with an endpoint once it is registered.
type fate uint8

const (
	live       fate = iota // heartbeated until the run ends
	deregister             // deregistered at endAt
	expire                 // no more heartbeats from endAt: the lease must expire
)

func (f fate) String() string {
	return [...]string{"live", "deregister", "expire"}[f]
}

// endpoint is one simulated VM: registered through a replica, heartbeated
// there every --heartbeat (moving to the next replica when an RPC fails,
// as clientlib/heartbeat does), registered again when a heartbeat answers
// NotFound.
type endpoint struct {
	// Read-only after newEndpoint.
	key         int32
	service, id string
	addr        string
	fate        fate
	endAt       time.Time

	started atomic.Bool // its first Register was called; the readers look

	// Its life goroutine only.
	home  int // the replica it heartbeats
	lease string
}

// workload drives the endpoints and the readers, recording every RPC.
type workload struct {
	// Read-only after newWorkload.
	c    config
	rec  *model.Recorder
	reps []*replica

	rngMu sync.Mutex // guards rng
	rng   *rand.Rand

	mu        sync.Mutex // guards eps and byService
	eps       []*endpoint
	byService map[string][]*endpoint

	ackedMu sync.Mutex      // guards acked
	acked   map[string]bool // every lease id a Register answered

	foreign     atomic.Int64 // listed endpoints the workload never registered
	readErrors  []atomic.Int64
	notFoundHBs atomic.Int64 // heartbeats answered NotFound
	movedHBs    atomic.Int64 // heartbeats that failed and moved to another replica
}

func newWorkload(c config, rec *model.Recorder, reps []*replica) *workload {
	return &workload{
		c: c, rec: rec, reps: reps,
		rng:        rand.New(rand.NewPCG(uint64(c.seed), 0x5eed)),
		byService:  map[string][]*endpoint{},
		acked:      map[string]bool{},
		readErrors: make([]atomic.Int64, len(reps)),
	}
}

func (w *workload) intn(n int) int {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.IntN(n)
}

func (w *workload) service(i int) string { return fmt.Sprintf("svc-%d", i%w.c.services) }

// newEndpoint creates endpoint i with a random fate and home.
func (w *workload) newEndpoint(i int) *endpoint {
	svc := w.service(i)
	id := fmt.Sprintf("ep-%03d", i)
	f := live
	switch n := w.intn(100); {
	case n < 25:
		f = deregister
	case n < 50:
		f = expire
	}
	life := w.c.minLife + time.Duration(w.intn(int(w.c.maxLife-w.c.minLife)/int(time.Millisecond)+1))*time.Millisecond
	ep := &endpoint{
		key: w.rec.Key(svc + "/" + id), service: svc, id: id,
		addr: fmt.Sprintf("10.77.%d.%d", i/250, i%250+1),
		fate: f, endAt: time.Now().Add(life), home: w.intn(len(w.reps)),
	}
	w.mu.Lock()
	w.eps = append(w.eps, ep)
	w.byService[svc] = append(w.byService[svc], ep)
	w.mu.Unlock()
	return ep
}

// run creates --initial endpoints at once and one every --arrival until
// stop is closed or --endpoints exist, and reads every replica every
// --read-interval, until ctx ends. It returns when every goroutine has.
func (w *workload) run(ctx context.Context, stopCreating <-chan struct{}) {
	var wg sync.WaitGroup
	readCtx, stopReads := context.WithCancel(context.Background())
	for _, r := range w.reps {
		wg.Go(func() { w.reader(readCtx, r) })
	}
	var lives sync.WaitGroup
	i := 0
	for ; i < w.c.initial && i < w.c.endpoints; i++ {
		ep := w.newEndpoint(i)
		lives.Go(func() { w.life(ctx, ep) })
	}
	tick := time.NewTicker(w.c.arrival)
loop:
	for ; i < w.c.endpoints; i++ {
		select {
		case <-ctx.Done():
			break loop
		case <-stopCreating:
			break loop
		case <-tick.C:
		}
		ep := w.newEndpoint(i)
		lives.Go(func() { w.life(ctx, ep) })
	}
	tick.Stop()
	<-ctx.Done()
	// Reads stop first: a read after the heartbeats stopped would see
	// leases the workload no longer keeps.
	stopReads()
	wg.Wait()
	lives.Wait()
}

func (w *workload) client(i int) pb.RegistryClient { return w.reps[i].client() }

// life registers the endpoint, heartbeats it and ends it by its fate.
func (w *workload) life(ctx context.Context, ep *endpoint) {
	if !w.register(ctx, ep) {
		return
	}
	tick := time.NewTicker(w.c.beat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ep.fate != live && time.Now().After(ep.endAt) {
			if ep.fate == expire {
				w.rec.Abandon(ep.key)
			} else {
				w.deregister(ctx, ep)
			}
			return
		}
		w.heartbeat(ctx, ep)
	}
}

// register registers the endpoint through its home replica, moving to the
// next after a failure, until one is acknowledged or ctx ends.
func (w *workload) register(ctx context.Context, ep *endpoint) bool {
	req := &pb.RegisterRequest{
		Service: ep.service, TtlSeconds: uint32(w.c.ttl / time.Second),
		Endpoint: &pb.Endpoint{Id: ep.id, Address: ep.addr, Ports: []*pb.Port{{Name: "grpc", Number: 8080}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"}},
	}
	for ctx.Err() == nil {
		ep.started.Store(true)
		rctx, cancel := context.WithTimeout(ctx, w.c.writeTimeout)
		call := w.rec.Now()
		resp, err := w.client(ep.home).Register(rctx, req)
		ret := w.rec.Now()
		cancel()
		o := model.OutcomeOf(err)
		if o == model.NotFound {
			o = model.Failed
		}
		w.rec.Write(model.OpRegister, ep.home, ep.key, call, ret, o)
		if err == nil {
			ep.lease = resp.LeaseId
			w.ackedMu.Lock()
			w.acked[resp.LeaseId] = true
			w.ackedMu.Unlock()
			return true
		}
		ep.home = (ep.home + 1) % len(w.reps)
		sleep(ctx, 500*time.Millisecond)
	}
	return false
}

// heartbeat renews the lease on the home replica: a failure moves the
// endpoint to the next replica, NotFound registers it again.
func (w *workload) heartbeat(ctx context.Context, ep *endpoint) {
	hctx, cancel := context.WithTimeout(ctx, 2*w.c.beat)
	call := w.rec.Now()
	_, err := w.client(ep.home).Heartbeat(hctx, &pb.HeartbeatRequest{LeaseId: ep.lease})
	ret := w.rec.Now()
	cancel()
	if ctx.Err() != nil {
		return
	}
	o := model.OutcomeOf(err)
	w.rec.Heartbeat(ep.home, ep.key, call, ret, o)
	switch o {
	case model.Failed:
		w.movedHBs.Add(1)
		ep.home = (ep.home + 1) % len(w.reps)
	case model.NotFound:
		w.notFoundHBs.Add(1)
		w.register(ctx, ep)
	}
}

// deregister deregisters through a random replica until one answers: an
// acknowledgement, or NotFound after a failed attempt (which may have
// done it). NotFound without one is retried a few times (the replica may
// not have the lease yet).
func (w *workload) deregister(ctx context.Context, ep *endpoint) {
	failed, notFound := false, 0
	for ctx.Err() == nil {
		r := w.intn(len(w.reps))
		dctx, cancel := context.WithTimeout(ctx, w.c.writeTimeout)
		call := w.rec.Now()
		_, err := w.client(r).Deregister(dctx, &pb.DeregisterRequest{LeaseId: ep.lease})
		ret := w.rec.Now()
		cancel()
		o := model.OutcomeOf(err)
		w.rec.Write(model.OpDeregister, r, ep.key, call, ret, o)
		switch o {
		case model.Acked:
			return
		case model.NotFound:
			notFound++
			if failed || notFound >= 5 {
				return
			}
			sleep(ctx, 300*time.Millisecond)
		default:
			failed = true
			sleep(ctx, 500*time.Millisecond)
		}
	}
}

// reader lists every service on one replica every --read-interval: each
// listing is one OpList per endpoint of the service whose registration
// has been called.
func (w *workload) reader(ctx context.Context, r *replica) {
	tick := time.NewTicker(w.c.readEvery)
	defer tick.Stop()
	var ops []model.Op
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for s := range w.c.services {
			svc := w.service(s)
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			call := w.rec.Now()
			resp, err := r.client().ListEndpoints(lctx, &pb.ListEndpointsRequest{Service: svc})
			ret := w.rec.Now()
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil && status.Code(err) != codes.NotFound { // NotFound: no endpoint of svc
				w.readErrors[r.id].Add(1)
				continue
			}
			listed := map[string]bool{}
			for _, e := range resp.GetEndpoints() {
				listed[e.Id] = true
			}
			w.mu.Lock()
			eps := w.byService[svc]
			w.mu.Unlock()
			ops = ops[:0]
			known := 0
			for _, ep := range eps {
				if !ep.started.Load() {
					continue
				}
				ops = append(ops, model.Op{Kind: model.OpList, Present: listed[ep.id], Replica: int8(r.id), Key: ep.key, Call: call, Return: ret})
				if listed[ep.id] {
					known++
				}
			}
			if n := len(listed) - known; n > 0 {
				w.foreign.Add(int64(n))
			}
			w.rec.Add(ops...)
		}
	}
}

// endpoints returns every endpoint created.
func (w *workload) endpoints() []*endpoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*endpoint(nil), w.eps...)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

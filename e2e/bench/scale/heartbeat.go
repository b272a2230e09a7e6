package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/e2e/bench/internal/hbload"
	"github.com/spillway/spillway/e2e/bench/internal/procstat"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// storeProfiles, when set, is where the heartbeat part saves a 20 s CPU
// profile of spillway taken during the heartbeats.
var storeProfiles = flag.String("store-profiles", "", "heartbeat: save a CPU profile of spillway during the heartbeats in this `dir`")

func init() {
	register(part{
		name: "heartbeat",
		doc:  "every lease of the region heartbeated over HeartbeatStream while registrations churn: heartbeats/s, spillway's CPU and the load generator's, store writes per lease per TTL/3, the largest store request",
		run:  runHeartbeat,
	})
}

// Heartbeat part settings.
const (
	// hbWindow is how long the heartbeats run: three heartbeat rounds,
	// so three last-seen flushes (TTL/3 each).
	hbWindow = 30 * time.Second
	// hbStreams is how many HeartbeatStream streams carry them, each on
	// its own connection.
	hbStreams = 8
	// hbStep paces each stream's share: a tenth of it every 100 ms.
	hbStep = 100 * time.Millisecond
	// hbSteadyFrom and hbSteadyTo are the steps between which the
	// sustained rate is read (5 s to 25 s), hbSteadyEarly how long
	// before each step's sending.
	hbSteadyFrom, hbSteadyTo = 50, 250
	hbSteadyEarly            = time.Millisecond
	// churnWorkers bounds the registrations and deregistrations in
	// flight. The region's churn comes from as many agents, each waiting
	// only for its own answer; at 1,000/s with a job's p99 of about
	// 250 ms (etcd on the same 2 cores) that is 250 in flight at the
	// tail, so 64 made a slow moment hold the offers back.
	churnWorkers = 256
	// etcdRequestLimit is etcd's --max-request-bytes default.
	etcdRequestLimit = 1.5 * (1 << 20)
)

// storeWatch counts, from a watch of every key under etcdPrefix, what
// spillway writes: last-seen puts and registration puts and deletes, and
// the largest put (key and value bytes). A watch delivers every
// committed change, so nothing spillway wrote escapes it.
type storeWatch struct {
	lastseenPuts, regPuts, regDeletes, other atomic.Int64
	maxPut                                   atomic.Int64
	maxKey                                   atomic.Value // string

	mu     sync.Mutex
	others map[string]int // other writes by their key's first two segments
}

func (w *storeWatch) countOther(key string) {
	w.other.Add(1)
	seg := strings.SplitN(key, "/", 3)
	if len(seg) > 2 {
		seg = seg[:2]
	}
	w.mu.Lock()
	if w.others == nil {
		w.others = map[string]int{}
	}
	w.others[strings.Join(seg, "/")]++
	w.mu.Unlock()
}

func (w *storeWatch) run(ctx context.Context, cli *clientv3.Client, fromRev int64) {
	for resp := range cli.Watch(ctx, etcdPrefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev)) {
		for _, ev := range resp.Events {
			key := strings.TrimPrefix(string(ev.Kv.Key), etcdPrefix)
			switch {
			case ev.Type == clientv3.EventTypeDelete && strings.HasPrefix(key, "registrations/"):
				w.regDeletes.Add(1)
			case ev.Type == clientv3.EventTypeDelete:
				w.countOther(key)
			case strings.HasPrefix(key, "lastseen/"):
				w.lastseenPuts.Add(1)
			case strings.HasPrefix(key, "registrations/"):
				w.regPuts.Add(1)
			default:
				w.countOther(key)
			}
			if ev.Type == clientv3.EventTypePut {
				if n := int64(len(ev.Kv.Key) + len(ev.Kv.Value)); n > w.maxPut.Load() {
					w.maxPut.Store(n)
					w.maxKey.Store(key)
				}
			}
		}
	}
}

func runHeartbeat(ctx context.Context, e *env, r region) ([]figure, error) {
	bins, err := spillwayBins(ctx, e)
	if err != nil {
		return nil, err
	}
	x, err := startEtcdRegion(ctx, e, r, "etcd-heartbeat")
	if err != nil {
		return nil, err
	}
	defer x.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{x.Client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var figs []figure
	for i, b := range bins {
		f, err := heartbeatOne(ctx, e, r, x, cli, b, i)
		if err != nil {
			return nil, fmt.Errorf("%sheartbeat: %w", b.Label, err)
		}
		figs = append(figs, f...)
	}
	return figs, nil
}

func heartbeatOne(ctx context.Context, e *env, r region, x *etcdRegion, cli *clientv3.Client, b spillwayBin, run int) ([]figure, error) {
	name := fmt.Sprintf("heartbeat-%d", run)
	p, err := startReplica(e, b.Path, name, x)
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	// What the store holds now: an earlier run's churn changed it, and
	// deregistered the region's last services; the readiness check asks
	// for the last service no run's churn touches.
	leaving := min(r.Churn*int(hbWindow/time.Second), len(x.LeaseIDs)/10)
	last := serviceOf(r, len(x.LeaseIDs)-2*leaving-1)
	count := func(prefix string) (int, error) {
		resp, err := cli.Get(ctx, etcdPrefix+"registrations/"+prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return int(resp.Count), nil
	}
	all, err1 := count("")
	lastSize, err2 := count(last + "/")
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if _, err := p.waitServingCounts(ctx, all, last, lastSize, startupTimeout); err != nil {
		return nil, err
	}
	// The churn deregisters some of the region's last leases (VMs
	// leaving; each run its own block of them), so they are not
	// heartbeated; it registers as many new ones.
	beat := x.LeaseIDs[:len(x.LeaseIDs)-2*leaving]
	end := len(x.LeaseIDs) - (run%2)*leaving
	old := x.LeaseIDs[end-leaving : end]

	// The churn's Register and Deregister go over grpc-go clients; the
	// heartbeats have connections of their own (hbload.RawStream).
	conns := make([]pb.RegistryClient, hbStreams)
	for i := range conns {
		rp, err := startClient(p.GRPC)
		if err != nil {
			return nil, err
		}
		defer rp.Close()
		conns[i] = pb.NewRegistryClient(rp)
	}

	metrics := []string{"spillway_vm_heartbeats_total", "spillway_lastseen_writes_total", "spillway_lastseen_stamps_written_total"}
	m0, err := benchproc.Scrape("http://"+p.HTTP+"/metrics", metrics...)
	if err != nil {
		return nil, err
	}
	rev0, err := cli.Get(ctx, "scale-revision-probe")
	if err != nil {
		return nil, err
	}
	wctx, wcancel := context.WithCancel(ctx)
	var sw storeWatch
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); sw.run(wctx, cli, rev0.Header.Revision+1) }()
	cpu0, _ := procstat.CPUSeconds(p.PID())
	gen0, _ := procstat.CPUSeconds(os.Getpid())
	if *storeProfiles != "" {
		go saveProfile(e, p, filepath.Join(*storeProfiles, fmt.Sprintf("heartbeat-%g-%d.pprof", r.Fraction, run)))
	}

	var counts hbload.Counts
	var sent atomic.Int64
	acked, notFound, streamErrs := &counts.Acked, &counts.NotFound, &counts.StreamErrs
	var streamErr atomic.Value // the first stream error
	var regOK, regFail, deregOK, deregFail atomic.Int64
	var churnEnd atomic.Int64     // unix nanos of the last churn answer
	var churnOffered atomic.Int64 // unix nanos the last churn job was handed to a worker
	var churnLat latencies        // each job's Register and Deregister
	var churnErr atomic.Value     // the first churn error
	start := time.Now()
	steps := int(r.Heartbeat / hbStep) // steps per heartbeat interval
	total := int(hbWindow / hbStep)
	sctx, scancel := context.WithTimeout(ctx, hbWindow+time.Minute)
	defer scancel()
	// Each stream offers its part of N heartbeats per interval, N the
	// region's endpoints, though the leaving leases are not among them.
	perStream := r.Endpoints / hbStreams
	var wg, hw sync.WaitGroup // hw: the heartbeat streams
	// The steady state: the heartbeats acknowledged to the streams,
	// counted just before the steps of hbSteadyFrom and hbSteadyTo are
	// sent (each step's heartbeats are answered by then when spillway
	// keeps up), so that neither the first steps nor the drain of the
	// last count.
	var steady struct {
		beats, secs float64
		measured    float64 // seconds between the two reads
		steps       float64 // steps whose sending began between them
		err         error
	}
	var stepsBegun atomic.Int64 // over every stream: hbStreams per step
	steadyDone := make(chan struct{})
	go func() {
		defer close(steadyDone)
		var at [2]time.Time
		var got, begun [2]float64
		for i, k := range []int{hbSteadyFrom, hbSteadyTo} {
			due := start.Add(time.Duration(k) * hbStep)
			select {
			case <-sctx.Done():
				steady.err = sctx.Err()
				return
			case <-time.After(time.Until(due.Add(-hbSteadyEarly))):
			}
			begun[i] = float64(stepsBegun.Load()) / hbStreams
			got[i], at[i] = float64(acked.Load()), time.Now()
		}
		// The count is the heartbeats spillway answered between the
		// reads, over the steps' time between them: the scheduled
		// hbSteadyTo-hbSteadyFrom steps, or more if a read woke late,
		// after its step's sending began (that step may be partly
		// counted). A spillway that falls behind holds the sending
		// back: fewer steps begin, fewer heartbeats are answered, over
		// the same scheduled time.
		steady.beats = got[1] - got[0]
		steady.measured = at[1].Sub(at[0]).Seconds()
		steady.steps = begun[1] - begun[0]
		steady.secs = max(hbSteadyTo-hbSteadyFrom, steady.steps) * hbStep.Seconds()
	}()
	for s := range hbStreams {
		share := beat[s*len(beat)/hbStreams : (s+1)*len(beat)/hbStreams]
		hw.Go(func() {
			stream, err := hbload.DialRaw(sctx, p.GRPC, &counts)
			if err != nil {
				streamErrs.Add(1)
				streamErr.CompareAndSwap(nil, err.Error())
				return
			}
			// Step k sends this stream's part of the region's rate,
			// going round its share, as one batch; a late step is sent
			// at once.
			cursor := 0
			var batch []string
		send:
			for k := range total {
				if d := time.Until(start.Add(time.Duration(k) * hbStep)); d > 0 {
					select {
					case <-sctx.Done():
						break send
					case <-time.After(d):
					}
				}
				batch = batch[:0]
				for range (k+1)*perStream/steps - k*perStream/steps {
					batch = append(batch, share[cursor])
					cursor = (cursor + 1) % len(share)
				}
				stepsBegun.Add(1)
				n, err := stream.Send(sctx, batch)
				sent.Add(int64(n))
				if err != nil {
					break send // the stream's reader counts its end
				}
			}
			stream.CloseSend()
			select {
			case <-stream.Done():
			case <-sctx.Done():
			}
			stream.Close()
			if err := stream.Err(); err != nil {
				streamErr.CompareAndSwap(nil, err.Error())
			}
		})
	}
	// Churn: each 100 ms step registers a tenth of r.Churn new endpoints
	// and deregisters as many of the region's last leases.
	jobs := make(chan func(), churnWorkers)
	var cw sync.WaitGroup
	for range churnWorkers {
		cw.Go(func() {
			for j := range jobs {
				j()
			}
		})
	}
	wg.Go(func() {
		defer close(jobs)
		perStep := max(1, r.Churn/int(time.Second/hbStep))
		n := 0
		for k := range total {
			if d := time.Until(start.Add(time.Duration(k) * hbStep)); d > 0 {
				select {
				case <-sctx.Done():
					return
				case <-time.After(d):
				}
			}
			for range perStep {
				i := n
				n++
				if i >= len(old) {
					return
				}
				job := func() {
					t0 := time.Now()
					defer func() { churnLat.add(time.Since(t0)) }()
					rctx, cancel := context.WithTimeout(sctx, 10*time.Second)
					defer cancel()
					a := netip.AddrFrom4([4]byte{byte(11 + run), byte(i >> 16), byte(i >> 8), byte(i)})
					_, err := conns[i%hbStreams].Register(rctx, &pb.RegisterRequest{
						Service:    ServiceName(i % r.Services),
						Endpoint:   &pb.Endpoint{Address: a.String(), Ports: []*pb.Port{{Name: "http", Number: 8080}}},
						TtlSeconds: uint32(regionTTL / time.Second),
					})
					if err != nil {
						regFail.Add(1)
						churnErr.CompareAndSwap(nil, "register: "+err.Error())
					} else {
						regOK.Add(1)
					}
					if _, err := conns[i%hbStreams].Deregister(rctx, &pb.DeregisterRequest{LeaseId: old[i]}); err != nil {
						deregFail.Add(1)
						churnErr.CompareAndSwap(nil, "deregister: "+err.Error())
					} else {
						deregOK.Add(1)
					}
					churnEnd.Store(time.Now().UnixNano())
				}
				select {
				case jobs <- job:
					churnOffered.Store(time.Now().UnixNano())
				case <-sctx.Done():
					return
				}
			}
		}
	})
	hw.Wait()
	// The heartbeats' span: the hbWindow of their steps, or until the
	// last stream had its answers if later. The window runs on to the
	// churn's last answer.
	hbSpan := max(hbWindow, time.Since(start)).Seconds()
	<-steadyDone
	wg.Wait()
	cw.Wait()
	window := time.Since(start)
	cpu1, _ := procstat.CPUSeconds(p.PID())
	gen1, _ := procstat.CPUSeconds(os.Getpid())
	// One more flush after the window: its writes count against the
	// window's heartbeats too (a flush every TTL/3 = 10 s).
	time.Sleep(2 * time.Second)
	wcancel()
	<-watchDone
	m1, err := benchproc.Scrape("http://"+p.HTTP+"/metrics", metrics...)
	if err != nil {
		return nil, err
	}
	logTail, _ := os.ReadFile(p.Log)
	tooLarge := strings.Count(string(logTail), "too large")

	w := window.Seconds()
	leases := float64(len(x.LeaseIDs))
	ttl3s := w / (regionTTL / 3).Seconds() // TTL/3 periods in the window
	beats := m1["spillway_vm_heartbeats_total"] - m0["spillway_vm_heartbeats_total"]
	served := beats / hbSpan
	cpu := cpu1 - cpu0
	gen := gen1 - gen0
	stampWrites := m1["spillway_lastseen_writes_total"] - m0["spillway_lastseen_writes_total"]
	stamps := m1["spillway_lastseen_stamps_written_total"] - m0["spillway_lastseen_stamps_written_total"]
	maxKey, _ := sw.maxKey.Load().(string)
	e.Logf("%sheartbeat at %s: sent %d, acked %d, unknown %d, stream errors %d in %.2f s (first stream error: %v), window %.1f s; spillway counted %.0f/s, CPU %.1f s; generator CPU %.1f s; store: %d lastseen puts, %d registration puts, %d deletes, %d other; largest put %d bytes (%s); registrations %d ok %d failed, deregistrations %d ok %d failed",
		b.Label, r.Label(), sent.Load(), acked.Load(), notFound.Load(), streamErrs.Load(), hbSpan, streamErr.Load(), w, served, cpu, gen,
		sw.lastseenPuts.Load(), sw.regPuts.Load(), sw.regDeletes.Load(), sw.other.Load(), sw.maxPut.Load(), maxKey,
		regOK.Load(), regFail.Load(), deregOK.Load(), deregFail.Load())

	need := float64(r.Endpoints) / r.Heartbeat.Seconds()
	if steady.err != nil {
		return nil, fmt.Errorf("steady-state heartbeat count: %w", steady.err)
	}
	hb := atLeast(b.Label+"heartbeats/s sustained", steady.beats/steady.secs, "/s", need)
	hb.Note = fmt.Sprintf("heartbeats acknowledged to the streams, counted just before step %d and just before step %d of %v are sent, over %.3f s: the scheduled steps, or more if a count was taken after its step began (%.2f steps began between the counts, taken %.3f s apart); spillway_vm_heartbeats_total over every heartbeat's span %.0f/s (%.2f s: their %d steps, or until the last stream's answers if later; the window, to the churn's last answer, was %.2f s); %d leases each once per %v over %d HeartbeatStream streams, each on its own connection (%.0f/s offered, %.0f/s acknowledged, %d unknown, %d stream errors); the generator is a raw HTTP/2 stream (hbload.RawStream) writing one DATA frame per message as grpc-go's client does, each 100 ms step's share in one write; target N/10 s", hbSteadyFrom, hbSteadyTo, hbStep, steady.secs, steady.steps, steady.measured, served, hbSpan, total, w, len(beat), r.Heartbeat, hbStreams, float64(sent.Load())/hbSpan, float64(acked.Load())/hbSpan, notFound.Load(), streamErrs.Load())
	if err := streamErr.Load(); err != nil {
		hb.Note += fmt.Sprintf("; first stream error: %v", err)
	}
	writes := atMost(b.Label+"store writes per lease per TTL/3", float64(sw.lastseenPuts.Load())/leases/ttl3s, "", 1)
	writes.Note = fmt.Sprintf("etcd puts of last-seen stamps (a watch of every write from the window's start) / leases / TTL/3 periods: %d puts in %.1f periods of %v; spillway_lastseen_writes_total %.0f", sw.lastseenPuts.Load(), ttl3s, regionTTL/3, stampWrites)
	perLease := atMost(b.Label+"lease stamps written per lease per TTL/3", stamps/leases/ttl3s, "", 1)
	perLease.Note = "spillway_lastseen_stamps_written_total / leases / TTL/3 periods: how often each lease's last-seen reaches the store"
	largest := atMost(b.Label+"largest store request", float64(sw.maxPut.Load()), "B", etcdRequestLimit)
	largest.Note = fmt.Sprintf("largest key+value of any put spillway made in the window (etcd watch of every write; a put request is that plus a few bytes), key %s; %d 'too large' errors in spillway's log; limit etcd's --max-request-bytes default 1.5 MiB", maxKey, tooLarge)
	// The churn's span: its hbWindow of steps, or until its last job
	// was taken by a worker if later (with churnWorkers busy and as
	// many queued, a server that falls behind stretches it).
	offered := time.Unix(0, churnOffered.Load())
	cs := max(hbWindow, offered.Sub(start)).Seconds()
	lag := time.Unix(0, churnEnd.Load()).Sub(offered)
	churn := atLeast(b.Label+"registrations/s acknowledged while churning", float64(regOK.Load())/cs, "/s", float64(r.Churn))
	churn.Note = fmt.Sprintf("Register (a new endpoint) then Deregister (one of the region's leases) over the registry gRPC API, offered at %d/s for %v, %d in flight and as many queued at most; acknowledged over %.2f s (the offers' span, longer if a full queue held them back); the last answer came %v after the last offer; a job (Register then Deregister) took %v median, %v p99", r.Churn, hbWindow, churnWorkers, cs, lag.Round(time.Millisecond), churnLat.quantile(0.5).Round(time.Millisecond), churnLat.quantile(0.99).Round(time.Millisecond))
	sw.mu.Lock()
	others := fmt.Sprint(sw.others)
	sw.mu.Unlock()
	figs := []figure{
		hb,
		{Name: b.Label + "spillway CPU", Value: cpu / w, Unit: "cores", Note: fmt.Sprintf("utime+stime over the window: %.2f µs per heartbeat (with the churn)", cpu/max(beats, 1)*1e6)},
		{Name: b.Label + "generator CPU (bench process)", Value: gen / w, Unit: "cores", Note: fmt.Sprintf("utime+stime of the bench process over the window, on the same machine as spillway: the %d raw heartbeat streams, the churn's gRPC clients and the etcd watch of every write; %.2f µs per heartbeat sent, all of it counted", hbStreams, gen/max(float64(sent.Load()), 1)*1e6)},
		writes,
		perLease,
		{Name: b.Label + "other store writes/s", Value: float64(sw.other.Load()) / w, Unit: "/s", Note: "writes besides last-seen stamps and registrations, by key: " + others},
		largest,
		churn,
		{Name: b.Label + "deregistrations/s acknowledged while churning", Value: float64(deregOK.Load()) / cs, Unit: "/s", Note: fmt.Sprintf("%d registrations and %d deregistrations failed; first error: %v", regFail.Load(), deregFail.Load(), churnErr.Load())},
	}
	return figs, nil
}

// latencies collects durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	ds []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

// quantile is the q quantile of what was added, 0 if nothing was.
func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ds) == 0 {
		return 0
	}
	return percentile(l.ds, q)
}

// serviceOf is the service of endpoint n of r (in r.Walk order).
func serviceOf(r region, n int) string {
	for i, size := range r.Sizes() {
		if n < size {
			return ServiceName(i)
		}
		n -= size
	}
	return ServiceName(r.Services - 1)
}

// saveProfile writes a 20 s CPU profile of p to path, starting 5 s in.
func saveProfile(e *env, p *replicaProc, path string) {
	time.Sleep(5 * time.Second)
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get("http://" + p.HTTP + "/debug/pprof/profile?seconds=20")
	if err != nil {
		e.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		e.Logf("profile: %v", err)
	}
}

// startClient dials addr over plain gRPC.
func startClient(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

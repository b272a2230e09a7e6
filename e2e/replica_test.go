package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

// Figures of the replica cluster the tests run: leases of 6 s heartbeated
// every second, last-seen flushed every second (so Grace is 3 s), an
// election that a dead replica holds for at most 2 s, expiry checked every
// 500 ms.
const (
	replicaTTL      = 6 * time.Second
	replicaBeat     = time.Second
	replicaServices = 4
	replicaFleet    = 1000
	etcdPrefix      = "e2e"
)

// replicaCluster is one real etcd process and spillway processes sharing
// it with --store etcd://.
type replicaCluster struct {
	etcd    *etcdtest.Server
	servers []*server
}

func newReplicaCluster(t *testing.T, n int) *replicaCluster {
	t.Helper()
	return newReplicaClusterWith(t, n)
}

// newReplicaClusterWith is newReplicaCluster with extra flags for every
// replica.
func newReplicaClusterWith(t *testing.T, n int, extra ...string) *replicaCluster {
	t.Helper()
	c := &replicaCluster{etcd: etcdtest.Start(t)}
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := "etcd://" + strings.TrimPrefix(c.etcd.Endpoint, "http://") + "/" + etcdPrefix
	for i := range n {
		args := []string{"--store", store, "--replica-id", fmt.Sprintf("r%d", i),
			"--lastseen-flush", "1s", "--election-ttl", "2s", "--lease-tick", "500ms",
			"--lease-min-ttl", "1s", "--admin-token-file", tokenFile, "--log-level", "info"}
		c.servers = append(c.servers, newServer(t, append(args, extra...)...))
	}
	for _, s := range c.servers {
		s.startNoWait()
	}
	for _, s := range c.servers {
		s.waitReady()
	}
	return c
}

// deletes watches the etcd registrations prefix from the test and counts
// the deletes of every key: an expiry or deregistration is one delete.
type deletes struct {
	mu    sync.Mutex
	count map[string]int
}

func watchDeletes(t *testing.T, endpoint string) *deletes {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &deletes{count: map[string]int{}}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cli.Close() })
	prefix := "/" + etcdPrefix + "/registrations/"
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(1))
	go func() {
		defer close(done)
		for resp := range wch {
			for _, e := range resp.Events {
				if e.Type == clientv3.EventTypeDelete {
					d.mu.Lock()
					d.count[strings.TrimPrefix(string(e.Kv.Key), prefix)]++
					d.mu.Unlock()
				}
			}
		}
	}()
	return d
}

func (d *deletes) snapshot() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.count))
	for k, v := range d.count {
		out[k] = v
	}
	return out
}

// vmAgent is one simulated VM: registered on its home replica, it
// heartbeats there and moves to the next replica when that one stops
// answering, keeping its lease (as clientlib/heartbeat does).
type vmAgent struct {
	service, id, lease string
	home               atomic.Int32
	stopped            atomic.Bool
}

func (a *vmAgent) key() string { return a.service + "/" + a.id }

// fleet heartbeats its agents over one HeartbeatStream per replica per
// round, every replicaBeat.
type fleet struct {
	c        *replicaCluster
	clients  []pb.RegistryClient
	mu       sync.Mutex // guards agents
	agents   []*vmAgent
	notFound atomic.Int64 // heartbeats of a live agent answered "unknown lease"
	moves    atomic.Int64
	rounds   atomic.Int64
}

func newFleet(t *testing.T, c *replicaCluster) *fleet {
	f := &fleet{c: c}
	for _, s := range c.servers {
		f.clients = append(f.clients, rclient(s))
	}
	return f
}

// register registers agents [from, to) spread over the replicas and
// services, 16 at a time; every one must be acknowledged.
func (f *fleet) register(t *testing.T, from, to int) []*vmAgent {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	out := make([]*vmAgent, to-from)
	errs := make(chan error, to-from)
	for i := from; i < to; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			home := i % len(f.clients)
			req := vmRequest(fmt.Sprintf("svc-%d", i%replicaServices), i)
			req.TtlSeconds = uint32(replicaTTL / time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, err := f.clients[home].Register(ctx, req)
			if err != nil {
				errs <- fmt.Errorf("register %d on r%d: %w", i, home, err)
				return
			}
			a := &vmAgent{service: req.Service, id: resp.EndpointId, lease: resp.LeaseId}
			a.home.Store(int32(home))
			out[i-from] = a
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.agents = append(f.agents, out...)
	f.mu.Unlock()
	return out
}

// run heartbeats until ctx ends (at most 600 rounds).
func (f *fleet) run(ctx context.Context) {
	tick := time.NewTicker(replicaBeat)
	defer tick.Stop()
	for round := 0; round < 600; round++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f.mu.Lock()
		byHome := make([][]*vmAgent, len(f.clients))
		for _, a := range f.agents {
			if !a.stopped.Load() {
				h := a.home.Load()
				byHome[h] = append(byHome[h], a)
			}
		}
		f.mu.Unlock()
		var wg sync.WaitGroup
		for h, as := range byHome {
			if len(as) > 0 {
				wg.Go(func() { f.beat(ctx, h, as) })
			}
		}
		wg.Wait()
		f.rounds.Add(1)
	}
}

// beat heartbeats as on replica h; when the stream fails, those not
// answered move to the next replica.
func (f *fleet) beat(ctx context.Context, h int, as []*vmAgent) {
	sctx, cancel := context.WithTimeout(ctx, replicaBeat*2)
	defer cancel()
	move := func(rest []*vmAgent) {
		for _, a := range rest {
			a.home.Store(int32((h + 1) % len(f.clients)))
			f.moves.Add(1)
		}
	}
	stream, err := f.clients[h].HeartbeatStream(sctx)
	if err != nil {
		move(as)
		return
	}
	go func() {
		for _, a := range as {
			if stream.Send(&pb.HeartbeatRequest{LeaseId: a.lease}) != nil {
				return
			}
		}
		stream.CloseSend()
	}()
	for i, a := range as {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				move(as[i:])
			}
			return
		}
		if !resp.Found && !a.stopped.Load() {
			f.notFound.Add(1)
		}
	}
}

func (f *fleet) live() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for _, a := range f.agents {
		if !a.stopped.Load() {
			out[a.key()] = true
		}
	}
	return out
}

// clients caches one registry client per server, kept across restarts
// (same address).
var clients sync.Map // *server → pb.RegistryClient

func rclient(s *server) pb.RegistryClient {
	if c, ok := clients.Load(s); ok {
		return c.(pb.RegistryClient)
	}
	c := s.client()
	clients.Store(s, c)
	return c
}

// served is every VM endpoint key a replica lists over its registry API.
func served(t *testing.T, c pb.RegistryClient) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := map[string]bool{}
	for i := range replicaServices {
		svc := fmt.Sprintf("svc-%d", i)
		resp, err := c.ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: svc})
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range resp.Endpoints {
			out[svc+"/"+e.Id] = true
		}
	}
	return out, nil
}

// waitServed polls every given replica until each lists exactly want, and
// returns how long that took; it fails the test after 60 s.
func waitServed(t *testing.T, what string, ss []*server, want map[string]bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok := true
		var diff string
		for _, s := range ss {
			got, err := served(t, rclient(s))
			if err != nil || !sameKeys(got, want) {
				ok = false
				diff = fmt.Sprintf("%s serves %d, want %d (err %v)", s.flag("--replica-id"), len(got), len(want), err)
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("%s: not converged after 60s: %s", what, diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sameKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// digSRV returns the SRV targets dig gets over TCP for service from s.
func digSRV(t *testing.T, s *server, service string) map[string]bool {
	t.Helper()
	r, _ := digZone(t, s.flag("--dns-addr"), "_grpc._tcp."+service+".spillway.internal.", "SRV", "+tcp")
	if r.Rcode != "NOERROR" {
		t.Fatalf("dig SRV %s on %s: %s", service, s.flag("--replica-id"), r.Rcode)
	}
	out := map[string]bool{}
	for _, rr := range r.Answer {
		if srv, ok := rr.(*dns.SRV); ok {
			out[srv.Target] = true
		}
	}
	return out
}

// claAddrs lists the endpoint addresses of cla.
func claAddrs(cla *v3endpointpb.ClusterLoadAssignment) map[string]bool {
	out := map[string]bool{}
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = true
		}
	}
	return out
}

// checkSameEverywhere: dig on every replica gives the same SRV set for
// every service, of the size wanted, and a raw ADS client on every replica
// gets the same endpoints.
func checkSameEverywhere(t *testing.T, ss []*server, want map[string]bool) {
	t.Helper()
	perService := map[string]int{}
	for k := range want {
		perService[strings.SplitN(k, "/", 2)[0]]++
	}
	for i := range replicaServices {
		svc := fmt.Sprintf("svc-%d", i)
		var first, firstEDS map[string]bool
		for _, s := range ss {
			got := digSRV(t, s, svc)
			if len(got) != perService[svc] {
				t.Errorf("dig SRV %s on %s: %d targets, want %d", svc, s.flag("--replica-id"), len(got), perService[svc])
			}
			if first == nil {
				first = got
			} else if !sameKeys(first, got) {
				t.Errorf("dig SRV %s on %s differs from %s", svc, s.flag("--replica-id"), ss[0].flag("--replica-id"))
			}
			cla := watchEDS(t, s.grpcAddr, svc, "zone-a").until(t, fmt.Sprintf("%d endpoints", perService[svc]), func(cla *v3endpointpb.ClusterLoadAssignment) bool {
				return len(claAddrs(cla)) == perService[svc]
			})
			if firstEDS == nil {
				firstEDS = claAddrs(cla)
			} else if !sameKeys(firstEDS, claAddrs(cla)) {
				t.Errorf("EDS %s on %s differs from %s", svc, s.flag("--replica-id"), ss[0].flag("--replica-id"))
			}
		}
	}
}

func (s *server) readyz() (int, string) {
	resp, err := http.Get("http://" + s.httpAddr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// TestReplicas runs issue 12's acceptance 2 to 6 on one cluster, in order:
// a real etcd process and three spillway processes with --store etcd://.
//
//   - converge: 1,000 VMs registered across the replicas; every replica
//     lists them all, answers dig with the same SRV sets and pushes the
//     same endpoints over a raw ADS stream. The time from the last
//     acknowledgement to convergence is logged.
//   - panic: the panic flag set through one replica is in every replica's
//     TXT answer; the time is logged.
//   - kill_decider: 10 VMs stop heartbeating; the expiry decider (which
//     also serves a third of the fleet) is killed with SIGKILL. Its VMs move
//     to the others; the survivors' DNS never drops a live endpoint; a new
//     decider is elected (time logged); the 10 expire exactly once (one
//     etcd delete each) and nothing else is deleted. Restarted, the killed
//     replica serves the full set at its first ready answer.
//   - etcd_down: etcd is stopped for 30 s: every replica keeps serving
//     every endpoint over DNS, xDS and its API, /readyz stays 200 naming
//     the store as unreachable, spillway_store_up is 0, a registration
//     gets UNAVAILABLE naming the store. etcd restarted, registrations
//     succeed without restarting spillway and every acknowledged one is
//     on every replica.
//
// Throughout, no heartbeat of a live VM is answered "unknown lease".
func TestReplicas(t *testing.T) {
	c := newReplicaCluster(t, 3)
	dels := watchDeletes(t, c.etcd.Endpoint)
	f := newFleet(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	var fleetDone sync.WaitGroup
	fleetDone.Go(func() { f.run(ctx) })
	t.Cleanup(func() { cancel(); fleetDone.Wait() })

	start := time.Now()
	f.register(t, 0, replicaFleet)
	acked := time.Now()
	took := waitServed(t, "converge", c.servers, f.live())
	t.Logf("converge: %d registrations acknowledged in %v; every replica lists all of them %v after the last acknowledgement",
		replicaFleet, acked.Sub(start).Round(time.Millisecond), took.Round(time.Millisecond))
	checkSameEverywhere(t, c.servers, f.live())
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("converge: dig (TCP, %d services) and a raw ADS client on each of the 3 replicas agreed %v after the last acknowledgement (the 24 checks included)",
		replicaServices, time.Since(acked).Round(time.Millisecond))

	t.Run("heartbeats_not_writes", func(t *testing.T) {
		sum := func(name string) float64 {
			var n float64
			for _, s := range c.servers {
				var v float64
				fmt.Sscan(s.metric(name), &v)
				n += v
			}
			return n
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		etcdRev := func() int64 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := cli.Get(ctx, "rev-probe")
			if err != nil {
				t.Fatal(err)
			}
			return resp.Header.Revision
		}
		hb0, w0, rev0, t0 := sum("spillway_vm_heartbeats_total"), sum("spillway_lastseen_writes_total"), etcdRev(), time.Now()
		time.Sleep(5 * replicaBeat)
		hb1, w1, rev1, t1 := sum("spillway_vm_heartbeats_total"), sum("spillway_lastseen_writes_total"), etcdRev(), time.Now()
		secs := t1.Sub(t0).Seconds()
		t.Logf("heartbeats_not_writes: %.0f heartbeats/s; %.0f last-seen writes/s; etcd revisions grew %.0f/s (every write of every key)",
			(hb1-hb0)/secs, (w1-w0)/secs, float64(rev1-rev0)/secs)
		if hb1-hb0 < replicaFleet {
			t.Errorf("heartbeats in %.1fs = %.0f, want at least %d", secs, hb1-hb0, replicaFleet)
		}
		// At most one last-seen write per shard per replica per flush,
		// whatever the heartbeat rate: a 1 s ticker fires at most
		// ceil(secs)+1 times in the window (the metric reads are a few
		// milliseconds off t0 and t1), 3 × 32 writes each.
		if max := 3 * 32 * (math.Ceil(secs) + 1); w1-w0 > max {
			t.Errorf("last-seen writes in %.1fs = %.0f, want at most %.0f (3 replicas × 32 shards per 1s flush)", secs, w1-w0, max)
		}
		// And the store sees far fewer writes than heartbeats: every write
		// of every key (ownership, membership and mesh heartbeats too) is
		// under a quarter of the heartbeats (one a second per VM here).
		if hb := hb1 - hb0; float64(rev1-rev0) > hb/4 {
			t.Errorf("etcd revisions grew %d in %.1fs for %.0f heartbeats, want under a quarter of them: heartbeats are not writes", rev1-rev0, secs, hb)
		}
	})

	t.Run("panic", func(t *testing.T) {
		set := time.Now()
		if r := c.servers[0].ctlEnv([]string{"SPILLWAY_ADMIN_TOKEN=" + e2eToken}, "panic", "on"); r.code != 0 {
			t.Fatalf("spillwayctl panic on: %s", r.stderr)
		}
		for _, s := range c.servers {
			for s.xdsTXT() != "xds=off" {
				if time.Since(set) > 30*time.Second {
					t.Fatalf("TXT _xds on %s still xds=on 30s after panic on", s.flag("--replica-id"))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		t.Logf("panic: set through r0, in the TXT answer of all 3 replicas %v later", time.Since(set).Round(time.Millisecond))
		if r := c.servers[1].ctlEnv([]string{"SPILLWAY_ADMIN_TOKEN=" + e2eToken}, "panic", "off"); r.code != 0 {
			t.Fatalf("spillwayctl panic off: %s", r.stderr)
		}
		for _, s := range c.servers {
			for s.xdsTXT() != "xds=on" {
				if time.Since(set) > 60*time.Second {
					t.Fatalf("TXT _xds on %s still xds=off after panic off", s.flag("--replica-id"))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})

	t.Run("kill_decider", func(t *testing.T) {
		decider := -1
		for deadline := time.Now().Add(30 * time.Second); decider < 0; time.Sleep(50 * time.Millisecond) {
			for i, s := range c.servers {
				if s.metric("spillway_expiry_decider") == "1" {
					decider = i
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("no replica reports spillway_expiry_decider 1 after 30s")
			}
		}
		f.mu.Lock()
		var stopped []*vmAgent
		for _, a := range f.agents[:10] {
			a.stopped.Store(true)
			stopped = append(stopped, a)
		}
		f.mu.Unlock()
		live := f.live()
		var survivors []*server
		for i, s := range c.servers {
			if i != decider {
				survivors = append(survivors, s)
			}
		}

		// The survivors' DNS must keep every live endpoint while the fleet moves.
		var dropped atomic.Int64
		var dropMsg atomic.Value
		checkCtx, stopCheck := context.WithCancel(context.Background())
		var checking sync.WaitGroup
		checking.Go(func() {
			for n := 0; n < 2000 && checkCtx.Err() == nil; n++ {
				for _, s := range survivors {
					for i := range replicaServices {
						svc := fmt.Sprintf("svc-%d", i)
						got := digSRV(t, s, svc)
						for k := range live {
							if strings.HasPrefix(k, svc+"/") && !got[strings.SplitN(k, "/", 2)[1]+"."+svc+".spillway.internal."] {
								dropped.Add(1)
								dropMsg.Store(fmt.Sprintf("%s: %s missing from dig SRV", s.flag("--replica-id"), k))
							}
						}
					}
				}
			}
		})

		movesBefore := f.moves.Load()
		killed := time.Now()
		c.servers[decider].kill()
		t.Logf("kill_decider: killed r%d, the expiry decider", decider)
		next := -1
		for deadline := time.Now().Add(60 * time.Second); next < 0; time.Sleep(20 * time.Millisecond) {
			for i, s := range c.servers {
				if i != decider && s.metric("spillway_expiry_decider") == "1" {
					next = i
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("no new expiry decider 60s after the kill")
			}
		}
		t.Logf("kill_decider: r%d elected expiry decider %v after the kill", next, time.Since(killed).Round(time.Millisecond))

		waitServed(t, "stopped VMs expire", survivors, live)
		t.Logf("kill_decider: the %d stopped VMs gone from both survivors %v after the kill (TTL %v + grace 3s + election)",
			len(stopped), time.Since(killed).Round(time.Millisecond), replicaTTL)
		stopCheck()
		checking.Wait()
		if n := dropped.Load(); n != 0 {
			t.Errorf("survivors' DNS dropped a live endpoint %d times; e.g. %v", n, dropMsg.Load())
		}
		// Counted from the kill: agents that moved earlier (a slow stream
		// on a busy machine moves one too) say nothing of this one.
		if n := f.moves.Load() - movesBefore; n == 0 {
			t.Errorf("no agent moved off the killed replica after the kill (%d moves before it)", movesBefore)
		}

		// Restart: ready means the whole fleet is served.
		s := c.servers[decider]
		s.startNoWait()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if code, _ := s.readyz(); code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("restarted r%d not ready after 60s:\n%s", decider, s.logs)
			}
		}
		fresh := s.client() // the cached one may still back off from the dead time
		clients.Store(s, fresh)
		got, err := served(t, fresh)
		if err != nil || !sameKeys(got, live) {
			t.Errorf("restarted r%d at its first ready answer serves %d endpoints (err %v), want %d", decider, len(got), err, len(live))
		}
		for i := range replicaServices {
			svc := fmt.Sprintf("svc-%d", i)
			if n, want := len(digSRV(t, s, svc)), countService(live, svc); n != want {
				t.Errorf("restarted r%d: dig SRV %s = %d targets, want %d", decider, svc, n, want)
			}
		}
		checkDeletes(t, dels, stopped, live)
	})

	t.Run("etcd_down", func(t *testing.T) {
		live := f.live()
		c.etcd.Stop()
		down := time.Now()
		// The registration that the outage refuses.
		req := vmRequest("svc-0", 5000)
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := rclient(c.servers[1]).Register(rctx, req)
		rcancel()
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "etcd") ||
			!strings.Contains(status.Convert(err).Message(), strings.TrimPrefix(c.etcd.Endpoint, "http://")) {
			t.Errorf("Register during the outage = %v, want UNAVAILABLE naming etcd %s", err, c.etcd.Endpoint)
		} else {
			t.Logf("etcd_down: Register during the outage: %v", err)
		}
		checks := 0
		for time.Since(down) < 30*time.Second {
			for _, s := range c.servers {
				got, err := served(t, rclient(s))
				if err != nil || !sameKeys(got, live) {
					t.Fatalf("%s during the outage serves %d endpoints (err %v), want %d", s.flag("--replica-id"), len(got), err, len(live))
				}
				if n, want := len(digSRV(t, s, "svc-1")), countService(live, "svc-1"); n != want {
					t.Fatalf("%s during the outage: dig SRV svc-1 = %d targets, want %d", s.flag("--replica-id"), n, want)
				}
			}
			checks++
			time.Sleep(500 * time.Millisecond)
		}
		// A new xDS client during the outage gets every endpoint too.
		for _, s := range c.servers {
			want := countService(live, "svc-2")
			watchEDS(t, s.grpcAddr, "svc-2", "zone-b").until(t, fmt.Sprintf("%d endpoints", want), func(cla *v3endpointpb.ClusterLoadAssignment) bool {
				return len(claAddrs(cla)) == want
			})
			code, body := s.readyz()
			if code != 200 || !strings.Contains(body, "unreachable") {
				t.Errorf("%s /readyz during the outage = %d %q, want 200 reporting the store unreachable", s.flag("--replica-id"), code, body)
			}
			if got := s.metric("spillway_store_up"); got != "0" {
				t.Errorf("%s spillway_store_up during the outage = %q, want 0", s.flag("--replica-id"), got)
			}
		}
		t.Logf("etcd_down: %d rounds of checks over %v: every replica served all %d endpoints (API and dig)", checks, time.Since(down).Round(time.Second), len(live))

		c.etcd.Restart()
		back := time.Now()
		// Writes succeed again without restarting spillway: each replica
		// is retried while its etcd client reconnects.
		want := map[string]bool{}
		for i, s := range c.servers {
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				addr := fmt.Sprintf("10.99.0.%d", i+1)
				resp, err := rclient(s).Register(ctx, &pb.RegisterRequest{Service: "svc-0", Endpoint: &pb.Endpoint{Address: addr, Ports: []*pb.Port{{Name: "grpc", Number: 8080}}}, TtlSeconds: 600})
				cancel()
				if err == nil {
					want["svc-0/"+resp.EndpointId] = true
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Register on %s 60s after etcd came back: %v", s.flag("--replica-id"), err)
				}
			}
			t.Logf("etcd_down: %s accepts registrations again %v after etcd restarted", s.flag("--replica-id"), time.Since(back).Round(time.Millisecond))
		}
		added := f.register(t, replicaFleet, replicaFleet+30)
		for k := range f.live() {
			want[k] = true
		}
		took := waitServed(t, "after the outage", c.servers, want)
		t.Logf("etcd_down: %d more registrations acknowledged; every replica lists all %d %v later", len(added), len(want), took.Round(time.Millisecond))
		for _, s := range c.servers {
			if got := s.metric("spillway_store_up"); got != "1" {
				t.Errorf("%s spillway_store_up after the outage = %q, want 1", s.flag("--replica-id"), got)
			}
		}
		// Leases live through the outage: give the decider time to act.
		time.Sleep(replicaTTL)
		waitServed(t, "a lease check after the outage", c.servers, want)
		checkDeletes(t, dels, nil, live)
	})

	if n := f.notFound.Load(); n != 0 {
		t.Errorf("%d heartbeats of live VMs were answered 'unknown lease' (a live lease expired)", n)
	}
	t.Logf("fleet: %d heartbeat rounds, %d agent moves between replicas", f.rounds.Load(), f.moves.Load())
}

func countService(keys map[string]bool, svc string) int {
	n := 0
	for k := range keys {
		if strings.HasPrefix(k, svc+"/") {
			n++
		}
	}
	return n
}

// checkDeletes: each stopped VM's record was deleted exactly once, and no
// live VM's record ever was.
func checkDeletes(t *testing.T, d *deletes, stopped []*vmAgent, live map[string]bool) {
	t.Helper()
	got := d.snapshot()
	for _, a := range stopped {
		if got[a.key()] != 1 {
			t.Errorf("stopped VM %s: %d deletes in etcd, want exactly 1", a.key(), got[a.key()])
		}
	}
	for k := range live {
		if got[k] != 0 {
			t.Errorf("live VM %s: %d deletes in etcd, want 0", k, got[k])
		}
	}
}

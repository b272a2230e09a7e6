package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/internal/testwait"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/replica/clusterversion"
)

// previousRelease is the commit of the release before this tree: the
// upgrade test rolls a cluster from it to this tree and back. Move it
// forward with each release.
const previousRelease = "a770d6c"

// release is a build of another commit's binaries.
type release struct{ spillway, spillwayctl string }

// releases holds the builds of buildRelease for the test process (a
// -count=N run builds each commit once), next to this tree's binaries:
// one build per commit, started by the first to ask (TestMain starts the
// previous release's while the first tests run, when the run includes
// the upgrade test).
var releases struct {
	mu     sync.Mutex
	builds map[string]*releaseBuild
}

// releaseBuild is one commit's build, done when done is closed.
type releaseBuild struct {
	done chan struct{}
	rel  release
	err  error
}

// startRelease starts building commit's spillway and spillwayctl, once
// per process, and returns the build to wait on.
func startRelease(commit string) *releaseBuild {
	releases.mu.Lock()
	defer releases.mu.Unlock()
	if b, ok := releases.builds[commit]; ok {
		return b
	}
	if releases.builds == nil {
		releases.builds = map[string]*releaseBuild{}
	}
	b := &releaseBuild{done: make(chan struct{})}
	releases.builds[commit] = b
	go func() {
		defer close(b.done)
		b.rel, b.err = buildReleaseAt(filepath.Join(filepath.Dir(bin.spillway), "release-"+commit), commit)
	}()
	return b
}

// buildRelease returns spillway and spillwayctl built at commit from this
// repository's history (git archive, then go build with this module
// cache; -race as this test binary is), building them once per process.
func buildRelease(t *testing.T, commit string) release {
	t.Helper()
	b := startRelease(commit)
	<-b.done
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.rel
}

// buildReleaseAt builds commit's binaries into dir (removed with this
// tree's binaries), both in one go build.
func buildReleaseAt(dir, commit string) (release, error) {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return release{}, err
	}
	archive := exec.Command("sh", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "sh", commit, src)
	archive.Dir = ".."
	if out, err := archive.CombinedOutput(); err != nil {
		return release{}, fmt.Errorf("git archive %s (the upgrade test needs the repository's history): %v\n%s", commit, err, out)
	}
	if err := goBuild(src, dir, "./cmd/spillway", "./cmd/spillwayctl"); err != nil {
		return release{}, fmt.Errorf("at %s: %w", commit, err)
	}
	return release{spillway: filepath.Join(dir, "spillway"), spillwayctl: filepath.Join(dir, "spillwayctl")}, nil
}

// upgradeWatch records, while a cluster is rolled, what its clients see:
// every xDS RPC's outcome, every DNS poll of every replica, and the
// shards' weights heartbeats in etcd.
type upgradeWatch struct {
	rpcs, rpcFailures atomic.Int64

	mu         sync.Mutex
	firstFail  string
	polls      int                  // DNS answers checked
	violations []string             // DNS answers missing an endpoint
	lastBeat   map[string]time.Time // weights/shard/NN: last write seen
	maxGap     time.Duration        // the longest time a shard went without a heartbeat
	handovers  []time.Duration      // a shard's last heartbeat of one owner to the first of the next
}

// TestRollingUpgrade (issue 27, point 2): three replicas of the previous
// release on real etcd, mesh-wide weights on, three backends registered
// by agents (of the previous release) with a 3 s TTL listing every
// replica, and real grpc-go xDS clients on two replicas making RPCs the
// whole time. Each replica in turn gets SIGTERM and restarts on this
// tree's binary with the same flags and data dir; then back again. At no
// point may an RPC fail, a replica that answers DNS leave out an agent's
// endpoint, or a shard's weights stop being published; a registration
// through a replica just restarted must reach the others. The cluster
// version (replica/clusterversion) stays 1 on every replica of this tree
// while one of the previous release is live; the first replica on this
// tree sets the hold through spillwayctl, as an operator does before an
// upgrade, so that once all three run this tree it still stays 1 and the
// rollback is supported.
func TestRollingUpgrade(t *testing.T) {
	old := buildRelease(t, previousRelease)
	etcd := etcdtest.Start(t)
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := "etcd://" + strings.TrimPrefix(etcd.Endpoint, "http://") + "/" + etcdPrefix
	var servers []*server
	for i := range 3 {
		s := newServer(t, "--store", store, "--replica-id", fmt.Sprintf("r%d", i),
			"--lastseen-flush", "1s", "--election-ttl", "2s", "--lease-tick", "500ms", "--lease-min-ttl", "1s",
			"--admin-token-file", tokenFile, "--log-level", "info", "--shutdown-grace", "3s",
			"--mesh-shards", "4", "--lrs-interval", "1s", "--weights-interval", "1s", "--mesh-stale-cycles", "6")
		s.binary = old.spillway
		servers = append(servers, s)
		s.startNoWait()
	}
	for _, s := range servers {
		s.waitReady()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	list := servers[0].grpcAddr + "," + servers[1].grpcAddr + "," + servers[2].grpcAddr
	var ids []string
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		be := startXDSBackend(t, fmt.Sprintf("vm-%d", i), zone)
		ids = append(ids, be.id)
		p := &agentProc{logs: &syncBuffer{}, done: make(chan struct{})}
		p.cmd = exec.Command(old.spillwayctl, "agent", "--server", list, "--service", xdsService, "--address", "127.0.0.1",
			"--port", fmt.Sprintf("grpc=%d", be.port), "--zone", zone, "--region", "r1", "--id", be.id, "--ttl", "3s")
		p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	testwait.For(t, 60*time.Second, "every agent's endpoint on every replica", func() (bool, string) {
		for _, s := range servers {
			got, err := listIDs(s, xdsService)
			if err != nil || len(got) != len(ids) {
				return false, fmt.Sprintf("%s: %v %v", s.flag("--replica-id"), got, err)
			}
		}
		return true, ""
	})

	w := &upgradeWatch{lastBeat: map[string]time.Time{}}
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer func() { stopWatch(); wg.Wait() }()
	for i, zone := range []string{"zone-a", "zone-b"} {
		conn := dialXDSZone(t, servers[i].grpcAddr, xdsService, zone)
		hc := healthpb.NewHealthClient(conn)
		// Wait for the first answer before counting: the client is
		// starting, not failing.
		testwait.For(t, 60*time.Second, "the xDS client on "+servers[i].flag("--replica-id")+" reaches a backend", func() (bool, string) {
			rctx, c := context.WithTimeout(ctx, 2*time.Second)
			defer c()
			_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{})
			return err == nil, fmt.Sprint(err)
		})
		wg.Go(func() { w.rpcLoop(watchCtx, hc, zone) })
	}
	wg.Go(func() { w.dnsLoop(watchCtx, servers, ids) })
	wg.Go(func() { w.beatLoop(watchCtx, t, etcd.Endpoint) })

	probe := 0
	roll := func(to string, binary string, after func(i int)) {
		for i, s := range servers {
			id := s.flag("--replica-id")
			term := time.Now()
			s.stop()
			exited := time.Now()
			s.binary = binary
			s.startNoWait()
			s.waitReady()
			clients.Delete(s) // a cached client may be backing off from the dead time
			t.Logf("%s: %s exited %v after SIGTERM, ready on the %s binary %v after it started", to, id,
				exited.Sub(term).Round(time.Millisecond), to, time.Since(exited).Round(time.Millisecond))
			// A registration through the replica just restarted reaches
			// the others.
			probe++
			pid := fmt.Sprintf("probe-%d", probe)
			rctx, c := context.WithTimeout(ctx, 10*time.Second)
			_, err := rclient(s).Register(rctx, &pb.RegisterRequest{Service: "probes", TtlSeconds: 3600, Endpoint: &pb.Endpoint{
				Id: pid, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: uint32(9000 + probe)}},
				Locality: &pb.Locality{Region: "r1", Zone: "zone-a"}}})
			c()
			if err != nil {
				t.Fatalf("%s: register %s through %s: %v", to, pid, id, err)
			}
			registered := time.Now()
			testwait.For(t, 30*time.Second, pid+" on every replica", func() (bool, string) {
				for _, o := range servers {
					got, err := listIDs(o, "probes")
					if err != nil || !got[pid] {
						return false, fmt.Sprintf("%s: %v", o.flag("--replica-id"), err)
					}
				}
				return true, ""
			})
			t.Logf("%s: %s registered through %s, on every replica %v later", to, pid, id, time.Since(registered).Round(time.Millisecond))
			after(i)
		}
	}
	// Every replica of this tree runs cluster version 1 while a replica
	// of the previous release is live, or the hold is set.
	atVersion1 := func(when string) {
		for _, s := range servers {
			if s.binary == bin.spillway {
				if got := s.metric("spillway_cluster_version"); got != "1" {
					t.Errorf("%s: %s spillway_cluster_version = %q, want 1", when, s.flag("--replica-id"), got)
				}
			}
		}
	}
	roll("upgrade", bin.spillway, func(i int) {
		when := fmt.Sprintf("upgrade, %d of 3 on this tree", i+1)
		atVersion1(when)
		if i == 0 {
			// The operator's hold, through the first replica of this
			// tree, before the last one of the previous release goes.
			start := time.Now()
			out := servers[0].ctl(ctx, "cluster-version", "hold", "--token", e2eToken)
			if !strings.Contains(out, "hold: on") {
				t.Errorf("%s: cluster-version hold printed %q, want the hold on", when, out)
			}
			held := time.Now()
			took := testwait.For(t, 10*time.Second, "r0 lists r1 and r2 (previous release) at version 1", func() (bool, string) {
				var v clusterversion.View
				err := getJSONErr(servers[0], clusterversion.Path, &v)
				return err == nil && v.Hold && strings.Contains(v.Waiting, "r1 (supports 1), r2 (supports 1)"), fmt.Sprintf("%+v %v", v, err)
			})
			t.Logf("%s: hold set through r0 in %v; r0 listed r1 and r2 at version 1 %v later", when, held.Sub(start).Round(time.Millisecond), took.Round(time.Millisecond))
		}
	})
	// All on this tree: only the hold keeps version 1, on every replica.
	took := testwait.For(t, 20*time.Second, "every replica of this tree held at cluster version 1 by the hold alone", func() (bool, string) {
		for _, s := range servers {
			var v clusterversion.View
			if err := getJSONErr(s, clusterversion.Path, &v); err != nil || !strings.HasPrefix(v.Waiting, "held by admin") || strings.Contains(v.Waiting, "supports 1") {
				return false, fmt.Sprintf("%s: %+v %v", s.flag("--replica-id"), v, err)
			}
		}
		return true, ""
	})
	t.Logf("upgrade done: every replica held at cluster version 1 by the hold alone %v after the roll ended", took.Round(time.Millisecond))
	atVersion1("upgrade done, held")
	roll("rollback", old.spillway, func(i int) { atVersion1(fmt.Sprintf("rollback, %d of 3 on the previous release", i+1)) })
	// The clients keep going a little on the rolled-back cluster.
	time.Sleep(3 * time.Second)
	stopWatch()
	wg.Wait()

	w.mu.Lock()
	defer w.mu.Unlock()
	slices.Sort(w.handovers)
	var median time.Duration
	if len(w.handovers) > 0 {
		median = w.handovers[len(w.handovers)/2]
	}
	t.Logf("%d xDS RPCs, %d failed; %d DNS answers checked, %d missed an endpoint; longest weights heartbeat gap of a shard %v; %d shard handovers, median %v, longest %v",
		w.rpcs.Load(), w.rpcFailures.Load(), w.polls, len(w.violations), w.maxGap.Round(time.Millisecond),
		len(w.handovers), median.Round(time.Millisecond), w.maxGap.Round(time.Millisecond))
	if n := w.rpcFailures.Load(); n > 0 {
		t.Errorf("%d of %d xDS RPCs failed during the rolls; first: %s", n, w.rpcs.Load(), w.firstFail)
	}
	if len(w.violations) > 0 {
		t.Errorf("%d DNS answers left out an agent's endpoint; first ones: %v", len(w.violations), w.violations[:min(5, len(w.violations))])
	}
	if w.polls < 50 {
		t.Errorf("only %d DNS answers checked: the poll did not run", w.polls)
	}
	if len(w.lastBeat) != 4 {
		t.Errorf("weights heartbeats seen for shards %v, want all 4", w.lastBeat)
	}
	// "Keeps being published": no shard goes longer without its owner's
	// heartbeat than a handover takes (the election TTL plus the stale
	// window the replicas wait, 6 cycles) — past that every replica falls
	// back to its own view.
	if limit := 2*time.Second + 6*time.Second; w.maxGap > limit {
		t.Errorf("a shard went %v without a weights heartbeat, more than a handover (%v): weights stopped being published", w.maxGap, limit)
	}
}

// listIDs lists the endpoint ids of service on s, or the error (a
// replica restarting).
func listIDs(s *server, service string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rclient(s).ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: service})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range resp.Endpoints {
		out[e.Id] = true
	}
	return out, nil
}

// rpcLoop makes health RPCs through the xDS client until ctx ends.
func (w *upgradeWatch) rpcLoop(ctx context.Context, hc healthpb.HealthClient, zone string) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.rpcs.Add(1)
		if err != nil {
			if w.rpcFailures.Add(1) == 1 {
				w.mu.Lock()
				w.firstFail = fmt.Sprintf("%s at %s: %v", zone, time.Now().Format(time.StampMilli), err)
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dnsLoop asks every replica for the service's SRV records every 250 ms;
// a replica that answers NOERROR must list every agent's endpoint (a
// replica down, or SERVFAIL while it syncs, is not answering).
func (w *upgradeWatch) dnsLoop(ctx context.Context, servers []*server, ids []string) {
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion("_grpc._tcp."+xdsService+".spillway.internal.", dns.TypeSRV)
	q.SetEdns0(1232, false)
	for ctx.Err() == nil {
		for _, s := range servers {
			r, _, err := c.ExchangeContext(ctx, q, s.flag("--dns-addr"))
			if err != nil || r.Rcode != dns.RcodeSuccess || r.Truncated {
				continue
			}
			var got []string
			for _, rr := range r.Answer {
				if srv, ok := rr.(*dns.SRV); ok {
					got = append(got, strings.SplitN(srv.Target, ".", 2)[0])
				}
			}
			slices.Sort(got)
			w.mu.Lock()
			w.polls++
			if !slices.Equal(got, ids) {
				w.violations = append(w.violations, fmt.Sprintf("%s at %s: %v", s.flag("--replica-id"), time.Now().Format(time.StampMilli), got))
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// beatLoop watches the shards' weights heartbeats in etcd and keeps the
// longest gap between two of a shard's writes (or from the last write to
// now, when the loop ends) and, at each change of a shard's owner, the
// time from the old owner's last heartbeat to the new owner's first: the
// handover.
func (w *upgradeWatch) beatLoop(ctx context.Context, t *testing.T, endpoint string) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Error(err)
		return
	}
	defer cli.Close()
	prefix := "/" + etcdPrefix + "/weights/shard/"
	owner := map[string]string{}
	for resp := range cli.Watch(ctx, prefix, clientv3.WithPrefix()) {
		now := time.Now()
		w.mu.Lock()
		for _, e := range resp.Events {
			shard := strings.TrimPrefix(string(e.Kv.Key), prefix)
			var hb struct {
				Owner string `json:"owner"`
			}
			_ = json.Unmarshal(e.Kv.Value, &hb)
			if last, ok := w.lastBeat[shard]; ok {
				w.maxGap = max(w.maxGap, now.Sub(last))
				if prev := owner[shard]; prev != "" && hb.Owner != "" && prev != hb.Owner {
					w.handovers = append(w.handovers, now.Sub(last))
				}
			}
			w.lastBeat[shard] = now
			if hb.Owner != "" {
				owner[shard] = hb.Owner
			}
		}
		w.mu.Unlock()
	}
	now := time.Now()
	w.mu.Lock()
	for _, last := range w.lastBeat {
		w.maxGap = max(w.maxGap, now.Sub(last))
	}
	w.mu.Unlock()
}

// getJSONErr GETs path from s and decodes the JSON answer into v; an
// answer other than 200 is an error.
func getJSONErr(s *server, path string, v any) error {
	resp, err := s.httpClient().Get(s.url(path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// TestClusterVersionFinalises: two replicas of this tree on etcd under
// the hold an operator set before the upgrade run cluster version 1;
// released through one of them (spillwayctl cluster-version release),
// both run version 2 within seconds, finalised by one of them.
func TestClusterVersionFinalises(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/"+etcdPrefix+"/"+clusterversion.Key, `{"version":1,"hold":true,"hold_by":"admin"}`); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := "etcd://" + strings.TrimPrefix(etcd.Endpoint, "http://") + "/" + etcdPrefix
	var servers []*server
	for i := range 2 {
		s := newServer(t, "--store", store, "--replica-id", fmt.Sprintf("r%d", i), "--election-ttl", "2s",
			"--admin-token-file", tokenFile, "--mesh-shards", "4", "--log-level", "info")
		s.startNoWait()
		servers = append(servers, s)
	}
	for _, s := range servers {
		s.waitReady()
	}
	testwait.For(t, 20*time.Second, "both replicas held at version 1 by the hold alone", func() (bool, string) {
		for _, s := range servers {
			var v clusterversion.View
			if err := getJSONErr(s, clusterversion.Path, &v); err != nil || v.Version != 1 || !strings.HasPrefix(v.Waiting, "held by admin") || len(v.Members) != 2 {
				return false, fmt.Sprintf("%s: %+v %v", s.flag("--replica-id"), v, err)
			}
		}
		return true, ""
	})
	for _, s := range servers {
		if got := s.metric("spillway_cluster_version"); got != "1" {
			t.Errorf("%s: spillway_cluster_version = %q while held, want 1", s.flag("--replica-id"), got)
		}
	}
	out := servers[1].ctl(ctx, "cluster-version", "release", "--token", e2eToken)
	if !strings.Contains(out, "hold: off") {
		t.Errorf("cluster-version release printed %q, want the hold off", out)
	}
	took := testwait.For(t, 10*time.Second, "cluster version 2 on both replicas", func() (bool, string) {
		var got []string
		for _, s := range servers {
			got = append(got, s.flag("--replica-id")+"="+s.metric("spillway_cluster_version"))
		}
		return got[0] == "r0=2" && got[1] == "r1=2", strings.Join(got, " ")
	})
	t.Logf("cluster version 2 on both replicas %v after the release", took.Round(time.Millisecond))
	if out := servers[0].ctl(ctx, "cluster-version"); !strings.Contains(out, "cluster version 2, finalised by r") {
		t.Errorf("cluster-version printed %q, want version 2 finalised by a replica", out)
	}
}

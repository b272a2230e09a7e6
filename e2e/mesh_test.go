package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// The mesh-wide load tests (issue 13) run three spillway replicas on one
// real etcd with the zone-aware service on 2/2/4 backends in zone-a, -b
// and -c (capacity 25/25/50%). The service's owner (whichever replica the
// store elects) gets no client: the heavy zone-a client (meshRates)
// connects to one of the other replicas, the light zone-b and zone-c
// clients to the last one. So no replica sees the service's whole demand,
// and the owner sees none of it except through the other replicas' load
// summaries.
//
// Global demand is 400/100/100 rps: 67/17/17%. The optimum same-zone
// share is Σ min(demand, capacity) = 25 + 17 + 17 = 58%. Each replica on
// its own view (sharing off) plans for the demand it sees: zone-a's
// replica sends zone-a's clients in proportion to capacity (25% local),
// the other keeps zone-c local and spills half of zone-b: 42% in all.
var meshRates = map[string]float64{"zone-a": 400, "zone-b": 100, "zone-c": 100}

var meshBackends = map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 4}

const (
	meshWindow = 8 * time.Second
	// meshSamePoints is acceptance 1's bound: measured same-zone within 2
	// points of the optimum from global demand.
	meshSamePoints = 0.02
	// meshOverPoints: no zone's load share more than 5 points above its
	// capacity share.
	meshOverPoints = 0.05
)

// meshFixture is the cluster, the backends registered through it, the
// grpc-go clients on their replicas, and a raw EDS watch per replica per
// client zone (what each replica pushes).
type meshFixture struct {
	*zaFixture
	c       *replicaCluster
	owner   int            // index of the service's owner at the start
	clients map[string]int // client zone -> replica index
	watch   [][]*zaWatch   // [replica][client zone index]
}

func newMeshFixture(t *testing.T, sharing bool) *meshFixture {
	t.Helper()
	c := newReplicaClusterWith(t, 3,
		"--xds-debounce", "20ms", "--lrs-interval", zaCycle.String(), "--weights-interval", zaCycle.String(),
		"--lease-ttl", "1h", "--zone-aware=true", fmt.Sprintf("--mesh-load=%t", sharing),
		"--mesh-stale-cycles", "6") // past a handover: --election-ttl 2s + 2 cycles
	f := &meshFixture{c: c, zaFixture: &zaFixture{s: c.servers[0], backendCount: meshBackends, rates: meshRates, http: &http.Client{Timeout: 5 * time.Second}}}
	reg := c.servers[0].client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, zone := range xdsZones {
		for i := range meshBackends[zone] {
			b := startZABackend(t, fmt.Sprintf("%s-%d", zone, i), zone)
			if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: zaService, Endpoint: &pb.Endpoint{
				Id: b.id, Address: "127.0.0.1",
				Ports:    []*pb.Port{{Name: "grpc", Number: b.port}},
				Locality: &pb.Locality{Region: "r1", Zone: zone},
			}}); err != nil {
				t.Fatalf("register %s: %v", b.id, err)
			}
			f.backends = append(f.backends, b)
		}
	}
	// Who owns the service decides where the clients go; with sharing
	// off there is no owner and r2 gets no client.
	f.owner = 2
	f.waitFor(t, 30*time.Second, "an owner of the service named by every replica", func() bool {
		if !sharing {
			return true
		}
		owners := map[string]bool{}
		for _, s := range c.servers {
			if w := meshWeights(t, f.http, s); w != nil {
				owners[w.Origin.Owner] = true
			}
		}
		if len(owners) != 1 {
			return false
		}
		for o := range owners {
			f.owner = replicaIndex(c, o)
		}
		return f.owner >= 0
	})
	var others []int
	for i := range c.servers {
		if i != f.owner {
			others = append(others, i)
		}
	}
	f.clients = map[string]int{"zone-a": others[0], "zone-b": others[1], "zone-c": others[1]}
	t.Logf("owner r%d; zone-a's client on r%d, zone-b's and zone-c's on r%d", f.owner, others[0], others[1])
	for _, s := range c.servers {
		var ws []*zaWatch
		for _, zone := range xdsZones {
			ws = append(ws, startZAWatch(t, s.grpcAddr, zaService, zone))
		}
		f.watch = append(f.watch, ws)
	}
	for _, zone := range xdsZones {
		f.watches = append(f.watches, f.watch[f.clients[zone]][zaZone(zone)])
	}
	f.waitFor(t, xdsWait, "EDS with all backends in every replica's watches", func() bool {
		for _, ws := range f.watch {
			for _, w := range ws {
				_, n, err := w.state()
				if err != nil {
					t.Fatalf("EDS watch of %s: %v", w.zone, err)
				}
				if n != len(f.backends) {
					return false
				}
			}
		}
		return true
	})
	for _, zone := range xdsZones {
		f.conns = append(f.conns, dialXDSZone(t, c.servers[f.clients[zone]].grpcAddr, zaService, zone))
	}
	for i, zone := range xdsZones {
		rctx, rcancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, clientZoneKey, zone), xdsWait)
		_, err := healthpb.NewHealthClient(f.conns[i]).Check(rctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		rcancel()
		if err != nil {
			t.Fatalf("first RPC of the client in %s: %v", zone, err)
		}
	}
	f.waitFor(t, xdsWait, "every client connected to every backend", func() bool {
		for _, b := range f.backends {
			if b.conns.Load() < int64(len(xdsZones)) {
				return false
			}
		}
		return true
	})
	return f
}

func replicaIndex(c *replicaCluster, id string) int {
	for i := range c.servers {
		if id == fmt.Sprintf("r%d", i) {
			return i
		}
	}
	return -1
}

// meshPlan is GET /v1/weights of one replica.
type meshPlan struct {
	// Origin says which replica computed the plan from whose load.
	Origin struct {
		Source       string // mesh or local
		Owner        string
		Reason       string
		Contributors []struct {
			Replica string
			Age     float64 `json:"age_seconds"`
		}
	}
	Fallback struct{ Key string }
	// Endpoints are the PID endpoint weights, when the service has them.
	Endpoints []struct {
		ID     string
		Weight uint32
	}
	SameZone float64 `json:"same_zone"`
	Optimum  float64
	Routes   []struct {
		ClientZone string `json:"client_zone"`
		Weights    []struct {
			Zone   string
			Weight uint32
		}
	}
}

func (p *meshPlan) weights(clientZone string) map[string]uint32 {
	for _, r := range p.Routes {
		if r.ClientZone == clientZone {
			m := map[string]uint32{}
			for _, w := range r.Weights {
				m[w.Zone] = w.Weight
			}
			return m
		}
	}
	return nil
}

func (p *meshPlan) contributors() []string {
	var out []string
	for _, c := range p.Origin.Contributors {
		out = append(out, c.Replica)
	}
	slices.Sort(out)
	return out
}

// meshWeights reads the replica's plan of zaService; nil while it has
// none (404) or the replica is down.
func meshWeights(t *testing.T, hc *http.Client, s *server) *meshPlan {
	t.Helper()
	return meshWeightsOf(t, hc, s, zaService)
}

// meshWeightsOf is meshWeights for any service.
func meshWeightsOf(t *testing.T, hc *http.Client, s *server, service string) *meshPlan {
	t.Helper()
	resp, err := hc.Get("http://" + s.httpAddr + "/v1/weights?service=" + service)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/weights on %s: %s: %s", s.httpAddr, resp.Status, body)
	}
	var p meshPlan
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("GET /v1/weights on %s: %v\n%s", s.httpAddr, err, body)
	}
	return &p
}

// waitMesh waits until every live replica serves a plan of source want
// computed from load reports (fallback none) and returns them.
func (f *meshFixture) waitMesh(t *testing.T, d time.Duration, want string, live []int) []*meshPlan {
	t.Helper()
	var ps []*meshPlan
	var last []string
	deadline := time.Now().Add(d)
	for {
		ps, last = ps[:0], last[:0]
		for _, i := range live {
			p := meshWeights(t, f.http, f.c.servers[i])
			if p == nil {
				last = append(last, fmt.Sprintf("r%d: no plan", i))
				continue
			}
			last = append(last, fmt.Sprintf("r%d: %s plan (owner %q, %s), fallback %s", i, p.Origin.Source, p.Origin.Owner, p.Origin.Reason, p.Fallback.Key))
			if p.Origin.Source == want && p.Fallback.Key == "none" {
				ps = append(ps, p)
			}
		}
		if len(ps) == len(live) {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s plan from load reports on every live replica within %v: %s\nmesh logs:\n%s", want, d, strings.Join(last, "; "), f.meshLogs(live))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// capacityShare is each zone's share of the backends (equal backends).
func meshCapacity(zone string) float64 {
	var n int
	for _, c := range meshBackends {
		n += c
	}
	return float64(meshBackends[zone]) / float64(n)
}

// meshOptimum is Σ min(demand share, capacity share) over the measured
// client demand of m.
func meshOptimum(m *zaMeasure) float64 {
	var opt float64
	for cz, zone := range xdsZones {
		var from float64
		for uz := range xdsZones {
			from += m.arrived[cz][uz]
		}
		opt += math.Min(from/m.total(), meshCapacity(zone))
	}
	return opt
}

// sameVectors fails unless every live replica pushes the same weights to
// each client zone at the end of the window.
func (f *meshFixture) sameVectors(t *testing.T, live []int) {
	t.Helper()
	for z, zone := range xdsZones {
		var first map[string]uint32
		for _, i := range live {
			cur, _, err := f.watch[i][z].state()
			if err != nil {
				t.Fatalf("EDS watch of %s on r%d: %v", zone, i, err)
			}
			if first == nil {
				first = cur
				continue
			}
			if !equalWeights(first, cur) {
				t.Errorf("r%d pushes %v to %s clients, r%d pushes %v", i, cur, zone, live[0], first)
			}
		}
	}
}

func (f *meshFixture) live() []int {
	var out []int
	for i, s := range f.c.servers {
		select {
		case <-s.done:
		default:
			out = append(out, i)
		}
	}
	return out
}

// window records meshWindow of load and returns the measure.
func (f *meshFixture) window(t *testing.T) zaMeasure {
	t.Helper()
	rec := f.record(t, time.Now().Add(meshWindow), false)
	m := measure(rec)
	var rate float64
	for _, r := range meshRates {
		rate += r
	}
	if want := rate * meshWindow.Seconds(); m.total() < zaSustain*want {
		t.Fatalf("%.0f RPCs in the window, want about %.0f: the machine did not sustain the load", m.total(), want)
	}
	got, pushed := m.sameZone()
	t.Logf("same zone: measured %s, pushed weights %s, optimum from global demand %s", pts(got), pts(pushed), pts(meshOptimum(&m)))
	for uz, zone := range xdsZones {
		got, pushed := m.load(uz)
		t.Logf("load on %s: measured %s, pushed weights %s, capacity %s", zone, pts(got), pts(pushed), pts(meshCapacity(zone)))
	}
	return m
}

// converged measures windows until the weights pushed during one are
// settled, within half of meshSamePoints of the optimum from the demand
// measured in it, and returns that window; it fails the test if none is
// by within, unless the last window's pushed weights are within
// meshSamePoints (then that window is returned). The first cycles from
// load reports see a partial interval of the load and a busy machine
// makes them later, so how long the plan takes to settle is not what is
// judged: what the clients measure once it has is. A window taken while
// the plan still moves (pushed 1.9 points off, measured 2.7 by the
// clients' sampling noise on top) judged the noise, not the plan. The
// measured shares of the returned window are judged by the caller.
func (f *meshFixture) converged(t *testing.T, within time.Duration) zaMeasure {
	t.Helper()
	start := time.Now()
	for n := 1; ; n++ {
		m := f.window(t)
		_, pushed := m.sameZone()
		opt := meshOptimum(&m)
		off := math.Abs(pushed - opt)
		if off <= meshSamePoints/2 {
			t.Logf("window %d (%v after the plans were there): pushed weights within %.0f point of the optimum", n, time.Since(start).Round(time.Second), 100*meshSamePoints/2)
			return m
		}
		if time.Since(start)+meshWindow > within {
			if off <= meshSamePoints {
				t.Logf("window %d (%v after the plans were there): pushed weights within %.0f points of the optimum (not %.0f)", n, time.Since(start).Round(time.Second), 100*meshSamePoints, 100*meshSamePoints/2)
				return m
			}
			t.Fatalf("the pushed weights' same-zone share was %s in the last window, optimum %s: not within %.0f points in %d windows (%v)",
				pts(pushed), pts(opt), 100*meshSamePoints, n, within)
		}
		t.Logf("window %d: pushed weights %s same-zone, optimum %s: not settled yet", n, pts(pushed), pts(opt))
	}
}

// TestMeshLoad is acceptance 1 to 3 of mesh-wide load.
//
//  1. Every replica pushes the same vectors; measured same-zone is within
//     2 points of the optimum from global demand, and no zone carries
//     more than 5 points above its capacity share.
//  2. The owner is killed (SIGKILL): the new owner's plans are computed
//     from every replica's load (contributors), it publishes within a
//     bound, and no client zone's share of any upstream zone moves more
//     than 5 points at the handover.
//  3. etcd stopped: the replicas keep the last published vectors, then
//     fall back to their own view and say so; etcd back: mesh plans
//     resume.
func TestMeshLoad(t *testing.T) {
	f := newMeshFixture(t, true)
	stop := f.startLoad(240 * time.Second)
	defer stop()
	all := f.live()
	ps := f.waitMesh(t, 30*time.Second, "mesh", all)
	for i, p := range ps {
		t.Logf("r%d: source %s, owner %s, contributors %v", all[i], p.Origin.Source, p.Origin.Owner, p.contributors())
	}
	m := f.converged(t, time.Minute)
	f.checkClients(t)
	f.sameVectors(t, all)
	got, _ := m.sameZone()
	if opt := meshOptimum(&m); math.Abs(got-opt) > meshSamePoints {
		t.Errorf("same-zone share = %s, optimum from global demand %s: more than %.0f points apart", pts(got), pts(opt), 100*meshSamePoints)
	}
	for uz, zone := range xdsZones {
		if got, _ := m.load(uz); got > meshCapacity(zone)+meshOverPoints {
			t.Errorf("load share of %s = %s, capacity share %s: more than %.0f points above", zone, pts(got), pts(meshCapacity(zone)), 100*meshOverPoints)
		}
	}
	p := meshWeights(t, f.http, f.c.servers[f.owner])
	if want := []string{fmt.Sprintf("r%d", f.clients["zone-a"]), fmt.Sprintf("r%d", f.clients["zone-b"])}; !subset(want, p.contributors()) {
		t.Errorf("owner's plan merged load from %v, want at least %v", p.contributors(), want)
	}

	t.Run("kill_owner", func(t *testing.T) {
		published := watchPlans(t, f.c.etcd.Endpoint)
		before := map[string]map[string]uint32{}
		for _, zone := range xdsZones {
			cur, _, _ := f.watches[zaZone(zone)].state()
			before[zone] = cur
		}
		old := fmt.Sprintf("r%d", f.owner)
		killed := time.Now()
		f.c.servers[f.owner].kill()
		live := f.live()
		// Sample every live replica's plan until a new owner publishes.
		var took time.Duration
		deadline := killed.Add(30 * time.Second)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("no plan from a new owner within 30s of killing %s; mesh logs:\n%s", old, f.meshLogs(live))
			}
			var newOwner bool
			for _, i := range live {
				p := meshWeights(t, f.http, f.c.servers[i])
				if p == nil {
					t.Fatalf("r%d has no plan after the kill", i)
				}
				if p.Origin.Source == "mesh" && p.Origin.Owner != old {
					newOwner = true
					if !subset([]string{fmt.Sprintf("r%d", live[0]), fmt.Sprintf("r%d", live[1])}, p.contributors()) {
						t.Errorf("r%d serves a plan of new owner %s merged from %v only: partial data", i, p.Origin.Owner, p.contributors())
					}
				}
			}
			if newOwner {
				took = time.Since(killed)
				break
			}
			time.Sleep(zaTick)
		}
		t.Logf("new owner published %v after the kill (election TTL 2s, one report interval %v)", took.Round(10*time.Millisecond), zaCycle)
		time.Sleep(3 * zaCycle)
		f.sameVectors(t, live)
		// Every vector a live replica pushed after the kill is one an owner
		// published from the load of both replicas with clients: none from
		// partial data, none from a replica's own view.
		full := []string{fmt.Sprintf("r%d", f.clients["zone-a"]), fmt.Sprintf("r%d", f.clients["zone-b"])}
		var pushes int
		for _, i := range live {
			for z, zone := range xdsZones {
				for _, p := range f.watch[i][z].pushes(killed) {
					pushes++
					if !published.fromFull(zone, p.weights, full, old) {
						t.Errorf("r%d pushed %v to %s clients %v after the kill: not a plan published from the load of %v", i, p.weights, zone, p.at.Sub(killed).Round(time.Millisecond), full)
					}
				}
			}
		}
		published.mu.Lock()
		var newPlans int
		for i, p := range published.plans {
			if i >= len(published.plans)-8 {
				t.Logf("plan record %d: owner %s epoch %d, published %v after the kill, contributors %+v, source %v, fallback %v (%s), data age %v, weights a %v b %v c %v",
					i, p.Owner, p.Epoch, p.Published.Sub(killed).Round(time.Millisecond), p.Contributors, p.Result.Source, p.Result.Fallback, p.Result.Reason, p.Result.DataAge,
					p.weights("zone-a"), p.weights("zone-b"), p.weights("zone-c"))
			}
			if p.Owner == old {
				continue
			}
			newPlans++
			var have []string
			for _, c := range p.Contributors {
				have = append(have, c.Replica)
			}
			if !subset(full, have) {
				t.Errorf("new owner %s (epoch %d) published a plan merged from %v only: partial data", p.Owner, p.Epoch, have)
			}
		}
		if newPlans == 0 {
			t.Errorf("no plan record from a new owner in etcd after the kill")
		}
		t.Logf("%d pushes on the live replicas after the kill; %d plan records published in all, %d by the new owner; %d undecodable", pushes, len(published.plans), newPlans, len(published.errs))
		if len(published.errs) > 0 {
			t.Errorf("plan records the test could not decode: %v", published.errs)
		}
		published.mu.Unlock()
		for _, zone := range xdsZones {
			cz := zaZone(zone)
			for _, p := range f.watches[cz].pushes(killed) {
				for _, uz := range xdsZones {
					if d := math.Abs(shareOf(p.weights, uz) - shareOf(before[zone], uz)); d > 0.05 {
						t.Errorf("after the kill, %s clients' share of %s moved %.1f points (%v -> %v at %v)", zone, uz, 100*d, before[zone], p.weights, p.at.Sub(killed).Round(time.Millisecond))
					}
				}
			}
		}
	})

	t.Run("store_down", func(t *testing.T) {
		live := f.live()
		f.c.etcd.Stop()
		stopped := time.Now()
		// Held first: the published plan stays while it is fresh.
		for _, i := range live {
			if p := meshWeights(t, f.http, f.c.servers[i]); p == nil || p.Origin.Source != "mesh" {
				t.Errorf("r%d right after etcd stopped: %+v, want the published plan held", i, p)
			}
		}
		f.waitFor(t, 30*time.Second, "every live replica on its own view, saying why", func() bool {
			for _, i := range live {
				p := meshWeights(t, f.http, f.c.servers[i])
				if p == nil || p.Origin.Source != "local" || p.Origin.Reason == "" {
					return false
				}
			}
			return true
		})
		t.Logf("replicas on their own view %v after etcd stopped", time.Since(stopped).Round(10*time.Millisecond))
		for _, i := range live {
			p := meshWeights(t, f.http, f.c.servers[i])
			t.Logf("r%d: source %s: %s", i, p.Origin.Source, p.Origin.Reason)
			if v := f.c.servers[i].metric(`spillway_weights_source_services{source="local"}`); v != "1" {
				t.Errorf(`r%d: spillway_weights_source_services{source="local"} = %q, want 1`, i, v)
			}
		}
		f.c.etcd.Restart()
		f.waitMesh(t, 60*time.Second, "mesh", live)
		time.Sleep(2 * zaCycle)
		f.sameVectors(t, live)
	})
}

// TestMeshLoadOff is the same cluster and load with sharing off: each
// replica plans from its own load reports. It shows what acceptance 1
// prevents: the replicas push different vectors, and same-zone falls far
// below the optimum.
func TestMeshLoadOff(t *testing.T) {
	f := newMeshFixture(t, false)
	stop := f.startLoad(60 * time.Second)
	defer stop()
	// r2 has no client: it plans from client counts, not load reports.
	f.waitMesh(t, 30*time.Second, "local", []int{f.clients["zone-a"], f.clients["zone-b"]})
	time.Sleep(3 * zaCycle)
	m := f.window(t)
	f.checkClients(t)
	got, _ := m.sameZone()
	opt := meshOptimum(&m)
	if got > opt-0.08 {
		t.Errorf("same-zone share with sharing off = %s, optimum %s: want it at least 8 points below (each replica plans for the demand it sees)", pts(got), pts(opt))
	}
	var diff []string
	for z, zone := range xdsZones {
		a, _, _ := f.watch[f.clients["zone-a"]][z].state()
		b, _, _ := f.watch[f.clients["zone-b"]][z].state()
		if !equalWeights(a, b) {
			diff = append(diff, fmt.Sprintf("%s: %v vs %v", zone, a, b))
		}
	}
	t.Logf("vectors that differ between the two replicas with clients: %s", strings.Join(diff, "; "))
	if len(diff) == 0 {
		t.Error("with sharing off the replicas pushed identical vectors; the test shows nothing")
	}
}

func subset(want, have []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// meshLogs returns the mesh lines of the replicas' logs, for a failure.
func (f *meshFixture) meshLogs(live []int) string {
	var b strings.Builder
	for _, i := range live {
		for _, line := range strings.Split(f.c.servers[i].logs.String(), "\n") {
			if strings.Contains(line, "component=mesh") || strings.Contains(line, "component=load-exchange") {
				fmt.Fprintf(&b, "r%d: %s\n", i, line)
			}
		}
	}
	return b.String()
}

// publishedPlan is one write of the service's plan record in etcd, as
// the test decodes it (replica/meshweights.PlanRecord).
type publishedPlan struct {
	Owner        string
	Epoch        int64
	Published    time.Time
	Contributors []struct {
		Replica string
		AgeMS   int64 `json:"age_ms"`
	}
	// PID endpoint weights and the round's outcome, when the service
	// has them (weights.EndpointWeight, weights.PIDExplain).
	Endpoints map[string]struct {
		Weight uint32
		Status string
	}
	PID    *struct{ Outcome string }
	Result struct {
		Source   any
		Fallback any
		Reason   string
		DataAge  time.Duration
		Routes   []struct {
			ClientZone string
			Weights    []struct {
				Zone   string
				Weight uint32
			}
		}
	}
}

func (p *publishedPlan) weights(clientZone string) map[string]uint32 {
	for _, r := range p.Result.Routes {
		if r.ClientZone == clientZone {
			m := map[string]uint32{}
			for _, w := range r.Weights {
				m[w.Zone] = w.Weight
			}
			return m
		}
	}
	return nil
}

// planLog is every write of zaService's plan record, read from etcd's
// watch by the test: what the owners published, in order.
type planLog struct {
	mu    sync.Mutex
	plans []publishedPlan
	errs  []string
}

func watchPlans(t *testing.T, endpoint string) *planLog {
	t.Helper()
	return watchPlansOf(t, endpoint, zaService)
}

// watchPlansOf is watchPlans for any service.
func watchPlansOf(t *testing.T, endpoint, service string) *planLog {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &planLog{}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cli.Close() })
	key := "/" + etcdPrefix + "/weights/plan/" + service
	wch := cli.Watch(ctx, key, clientv3.WithRev(1))
	go func() {
		defer close(done)
		for resp := range wch {
			for _, e := range resp.Events {
				if e.Type != clientv3.EventTypePut {
					continue
				}
				var p publishedPlan
				err := json.Unmarshal(e.Kv.Value, &p)
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err.Error())
				} else {
					l.plans = append(l.plans, p)
				}
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// fromFull reports whether weights, pushed to clientZone's clients, are
// those of a plan published from the load of every replica in want: the
// last plan of owner old (what the clients had at the kill) or a later
// one. Earlier plans do not count: a plan of the first cycles after the
// load began, from a partial interval, would match a bad push.
func (l *planLog) fromFull(clientZone string, weights map[string]uint32, want []string, old string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := 0
	for i := range l.plans {
		if l.plans[i].Owner == old {
			from = i
		}
	}
	for i := from; i < len(l.plans); i++ {
		p := &l.plans[i]
		var have []string
		for _, c := range p.Contributors {
			have = append(have, c.Replica)
		}
		if subset(want, have) && equalWeights(p.weights(clientZone), weights) {
			return true
		}
	}
	return false
}

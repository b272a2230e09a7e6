package xds_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/subset"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
)

const edsURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

// subsetClient is one raw stream watching web's endpoints, with the
// addresses of its last ClusterLoadAssignment.
type subsetClient struct {
	c    *sotwClient
	last []string
}

// next waits for the stream's next EDS response, acks it and records its
// addresses.
func (sc *subsetClient) next(t *testing.T) []string {
	t.Helper()
	resp := sc.c.recvType(edsURL)
	sc.c.ack(resp)
	cla := &v3endpointpb.ClusterLoadAssignment{}
	if err := resp.GetResources()[0].UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			addrs = append(addrs, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(addrs)
	sc.last = addrs
	return addrs
}

// TestSubsetStreams: with subset_size 4 over 12 endpoints, each of 9
// streams gets 4 endpoints, and every endpoint is in exactly 3 of them
// (9 × 4 / 12). When one stream leaves, the group's last stream takes
// its slot (and is pushed that subset), and the next cycle rebalances 8
// streams over the 12 endpoints: each in 2 or 3. Streams of a service
// without subsets get every endpoint.
func TestSubsetStreams(t *testing.T) {
	store := rawStore(t, map[string]int{"web": 12, "plain": 5})
	var p *weights.Planner
	cfg := xds.Config{Plans: xds.PlanFunc(func(service string) *weights.Plan { return p.Plan(service) })}
	rs := startRawXDS(t, store, cfg)
	var err error
	p, err = weights.NewPlanner(weights.Config{
		Registry: store, Loads: rs.x.Loads(), Clients: rs.x, Zones: rs.x,
		OnChange: rs.x.Dispatch,
		Strategies: weights.StrategyFunc(func(service string) weights.Strategy {
			s := weights.Strategy{ZoneAware: true}
			if service == "web" {
				s.Subset = weights.SubsetConfig{Mode: subset.Deterministic, Size: 4}
			}
			return s
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	var clients []*subsetClient
	for range 9 {
		sc := &subsetClient{c: newSotwClient(t, rs.conn)}
		sc.c.subscribe(edsURL, "web")
		if got := sc.next(t); len(got) != 12 {
			t.Fatalf("before the first plan a stream got %d endpoints, want all 12", len(got))
		}
		clients = append(clients, sc)
	}
	plain := &subsetClient{c: newSotwClient(t, rs.conn)}
	plain.c.subscribe(edsURL, "plain")
	plain.next(t)

	if got := rs.x.SubsetSlots("web"); got[subset.Group{Zone: "zone-a"}] != 9 {
		t.Fatalf("SubsetSlots(web) = %v, want 9 in zone-a", got)
	}
	p.Cycle(time.Now())
	counts := map[string]int{}
	for i, sc := range clients {
		got := sc.next(t)
		if len(got) != 4 {
			t.Fatalf("stream %d got %d endpoints after the plan, want its subset of 4", i, len(got))
		}
		for _, a := range got {
			counts[a]++
		}
	}
	for a, n := range counts {
		if n != 3 {
			t.Errorf("endpoint %s is in %d subsets, want 3 (9 streams x 4 / 12)", a, n)
		}
	}
	if len(counts) != 12 {
		t.Errorf("%d endpoints are in a subset, want all 12", len(counts))
	}
	for len(plain.c.resps) > 0 {
		plain.next(t)
	}
	if len(plain.last) != 5 {
		t.Errorf("a stream of a service without subsets holds %d endpoints, want all 5", len(plain.last))
	}

	// Stream 0 leaves: the last stream takes slot 0 and gets its subset.
	want0 := clients[0].last
	clients[0].c.close()
	last := clients[len(clients)-1]
	if got := last.next(t); !slices.Equal(got, want0) {
		t.Errorf("the last stream moved into the freed slot got %v, want that slot's subset %v", got, want0)
	}
	clients = clients[1:]
	registrytestWait(t, "8 slots", func() bool { return rs.x.SubsetSlots("web")[subset.Group{Zone: "zone-a"}] == 8 })
	p.Cycle(time.Now())
	// The streams whose subset changed are pushed; read what each holds.
	deadline := time.Now().Add(5 * time.Second)
	for {
		counts = map[string]int{}
		for _, sc := range clients {
			for len(sc.c.resps) > 0 {
				sc.next(t)
			}
			for _, a := range sc.last {
				counts[a]++
			}
		}
		ok := len(counts) == 12
		for _, n := range counts {
			ok = ok && (n == 2 || n == 3)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a stream left and a cycle: endpoints in %v subsets, want each of the 12 in 2 or 3", counts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// registrytestWait polls ok until it holds, for 10 s.
func registrytestWait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out", what)
		}
	}
}

// TestSubsetKeepsPIDWeights (issue 29 point 5): a plan with per-endpoint
// PID weights and subsets gives each stream its subset's endpoints with
// their PID weights, and a locality of PID alone weighs the sum of the
// subset's weights there.
func TestSubsetKeepsPIDWeights(t *testing.T) {
	store := rawStore(t, map[string]int{"web": 6})
	eps := map[string]weights.EndpointWeight{}
	for i := 1; i <= 6; i++ {
		eps[fmt.Sprintf("ep-%d", i)] = weights.EndpointWeight{Zone: "zone-a", Weight: uint32(100 * i)}
	}
	as, err := subset.Assign(nil, subset.Input{
		Size: 2, Mode: subset.Deterministic, Seed: "web",
		Slots:      map[subset.Group]int{{Zone: "zone-a"}: 1},
		Localities: map[string][]string{"zone-a": {"ep-1", "ep-2", "ep-3", "ep-4", "ep-5", "ep-6"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	plan := &weights.Plan{Gen: 1, Result: &zoneaware.Result{}, Endpoints: eps, LocalityFromEndpoints: true, Subsets: as}
	rs := startRawXDS(t, store, xds.Config{Plans: xds.PlanFunc(func(string) *weights.Plan { return plan })})
	c := newSotwClient(t, rs.conn)
	c.subscribe(edsURL, "web")
	resp := c.recvType(edsURL)
	cla := &v3endpointpb.ClusterLoadAssignment{}
	if err := resp.GetResources()[0].UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	want := as.Subset(subset.Group{Zone: "zone-a"}, 0)
	var got []string
	var sum uint32
	for _, l := range cla.GetEndpoints() {
		var lsum uint32
		for _, e := range l.GetLbEndpoints() {
			addr := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			var id string
			for i := 1; i <= 6; i++ {
				if addr == fmt.Sprintf("10.0.0.%d", i) {
					id = fmt.Sprintf("ep-%d", i)
				}
			}
			got = append(got, id)
			if w := e.GetLoadBalancingWeight().GetValue(); w != eps[id].Weight {
				t.Errorf("endpoint %s weighs %d in the subset's EDS, want its PID weight %d", id, w, eps[id].Weight)
			}
			lsum += e.GetLoadBalancingWeight().GetValue()
		}
		if w := l.GetLoadBalancingWeight().GetValue(); w != lsum {
			t.Errorf("locality weighs %d, want the sum of its subset endpoints' weights %d", w, lsum)
		}
		sum += lsum
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the stream got endpoints %v, want its subset %v", got, want)
	}
}

// TestSubsetZonePlan (issue 29, the zone figure): 4, 2 and 2 endpoints in
// zones a, b and c, 8, 4 and 4 clients, subsets of 4 on the zone-aware
// plan. Each stream's locality weights give each zone the share its
// zone's route gives it (so the same-zone share is the plan's, within 2
// points), and the load the streams send to each zone stays within its
// capacity share + 5 points.
func TestSubsetZonePlan(t *testing.T) {
	store := registry.NewStore()
	var ops []registry.Op
	n := 0
	for zone, k := range map[string]int{"a": 4, "b": 2, "c": 2} {
		for range k {
			n++
			e := rawEndpoint(n, 0)
			e.Locality.Zone = zone
			ops = append(ops, registry.Upsert("web", e))
		}
	}
	if _, err := store.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()
	var p *weights.Planner
	rs := startRawXDS(t, store, xds.Config{Plans: xds.PlanFunc(func(service string) *weights.Plan { return p.Plan(service) })})
	var err error
	p, err = weights.NewPlanner(weights.Config{
		Registry: store, Loads: rs.x.Loads(), Clients: rs.x, Zones: rs.x, OnChange: rs.x.Dispatch,
		Strategies: weights.StrategyFunc(func(string) weights.Strategy {
			return weights.Strategy{ZoneAware: true, Subset: weights.SubsetConfig{Mode: subset.Deterministic, Size: 4}}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	type stream struct {
		zone string
		c    *sotwClient
	}
	var streams []stream
	for zone, k := range map[string]int{"a": 8, "b": 4, "c": 4} {
		for range k {
			c := newSotwClient(t, rs.conn)
			c.node = &v3corepb.Node{Id: "c-" + zone, Cluster: "tests", Locality: &v3corepb.Locality{Region: "r1", Zone: zone}}
			c.subscribe(edsURL, "web")
			c.ack(c.recvType(edsURL))
			streams = append(streams, stream{zone, c})
		}
	}
	registrytestWait(t, "16 slots", func() bool {
		total := 0
		for _, k := range rs.x.SubsetSlots("web") {
			total += k
		}
		return total == 16
	})
	p.Cycle(time.Now())
	plan := p.Plan("web")
	if plan.Subsets == nil {
		t.Fatal("no subsets in the plan")
	}
	load := map[string]float64{} // upstream zone -> streams' traffic
	for _, st := range streams {
		resp := st.c.recvType(edsURL)
		st.c.ack(resp)
		cla := &v3endpointpb.ClusterLoadAssignment{}
		if err := resp.GetResources()[0].UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		var total float64
		byZone := map[string]float64{}
		for _, l := range cla.GetEndpoints() {
			w := float64(l.GetLoadBalancingWeight().GetValue())
			byZone[l.GetLocality().GetZone()] += w
			total += w
		}
		var routeTotal float64
		route := map[string]float64{}
		for _, zw := range plan.Result.Route(st.zone).Weights {
			route[zw.Zone] = float64(zw.Weight)
			routeTotal += float64(zw.Weight)
		}
		for z, w := range route {
			got, want := byZone[z]/total, w/routeTotal
			if math.Abs(got-want) > 0.02 {
				t.Errorf("a client in %s sends %.1f%% to zone %s through its subset, the plan %.1f%%", st.zone, 100*got, z, 100*want)
			}
			load[z] += got
		}
	}
	capacity := map[string]float64{"a": 0.5, "b": 0.25, "c": 0.25}
	t.Logf("traffic by upstream zone through the subsets: a %.1f%%, b %.1f%%, c %.1f%% (capacity 50/25/25)",
		100*load["a"]/16, 100*load["b"]/16, 100*load["c"]/16)
	for z, l := range load {
		if share := l / float64(len(streams)); share > capacity[z]+0.05 {
			t.Errorf("zone %s gets %.1f%% of the traffic through the subsets, capacity %.0f%% + 5 points", z, 100*share, 100*capacity[z])
		}
	}
}

// TestSubsetThousandStreams is the raw-stream figure: 1,000
// streams of one service, 100 endpoints, subsets of 10. Deterministic
// subsets put every endpoint in the same number of streams' EDS
// (max/avg <= 1.05); random ones, in the same run, spread as the binomial
// law says (about 1.25).
func TestSubsetThousandStreams(t *testing.T) {
	const m, n, size = 1000, 100, 10
	for _, mode := range []subset.Mode{subset.Deterministic, subset.Random} {
		t.Run(string(mode), func(t *testing.T) {
			store := rawStore(t, map[string]int{"web": n})
			var p *weights.Planner
			rs := startRawXDS(t, store, xds.Config{Plans: xds.PlanFunc(func(service string) *weights.Plan { return p.Plan(service) })})
			var err error
			p, err = weights.NewPlanner(weights.Config{
				Registry: store, Loads: rs.x.Loads(), Clients: rs.x, Zones: rs.x, OnChange: rs.x.Dispatch,
				Strategies: weights.StrategyFunc(func(string) weights.Strategy {
					return weights.Strategy{ZoneAware: true, Subset: weights.SubsetConfig{Mode: mode, Size: size}}
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			clients := make([]*subsetClient, m)
			for i := range clients {
				clients[i] = &subsetClient{c: newSotwClient(t, rs.conn)}
				clients[i].c.subscribe(edsURL, "web")
			}
			for _, sc := range clients {
				sc.next(t)
			}
			registrytestWait(t, "1,000 slots", func() bool { return rs.x.SubsetSlots("web")[subset.Group{Zone: "zone-a"}] == m })
			p.Cycle(time.Now())
			counts := map[string]int{}
			for i, sc := range clients {
				if got := sc.next(t); len(got) != size {
					t.Fatalf("stream %d holds %d endpoints, want %d", i, len(got), size)
				}
				for _, a := range sc.last {
					counts[a]++
				}
			}
			var sum, hi float64
			for _, c := range counts {
				sum += float64(c)
				hi = max(hi, float64(c))
			}
			ratio := hi / (sum / n)
			t.Logf("%s: %d streams x %d over %d endpoints: connections per endpoint max/avg %.3f", mode, m, size, n, ratio)
			if mode == subset.Deterministic && (ratio > 1.05 || len(counts) != n) {
				t.Errorf("deterministic: max/avg %.3f over %d endpoints, want <= 1.05 over all %d", ratio, len(counts), n)
			}
			if mode == subset.Random && ratio < 1.1 {
				t.Errorf("random: max/avg %.3f, want the binomial spread (about 1.25)", ratio)
			}
		})
	}
}

// TestSubsetEdgeWeights (issue 29 item 3): 7 streams, 10 endpoints,
// subsets of 3: 21 (stream, endpoint) pairs cannot fall evenly (one
// endpoint is in 3 subsets, nine in 2), so the subsets carry fractional
// edge weights (scaled to integers) that give every endpoint the same
// expected share of the streams' traffic when each stream splits its
// traffic by endpoint weight (clientlib/wrr; grpc-go's round_robin
// ignores endpoint weights).
func TestSubsetEdgeWeights(t *testing.T) {
	store := rawStore(t, map[string]int{"web": 10})
	var p *weights.Planner
	cfg := xds.Config{Plans: xds.PlanFunc(func(service string) *weights.Plan { return p.Plan(service) })}
	rs := startRawXDS(t, store, cfg)
	var err error
	p, err = weights.NewPlanner(weights.Config{
		Registry: store, Loads: rs.x.Loads(), Clients: rs.x, Zones: rs.x,
		OnChange: rs.x.Dispatch,
		Strategies: weights.StrategyFunc(func(string) weights.Strategy {
			return weights.Strategy{ZoneAware: true, Subset: weights.SubsetConfig{Mode: subset.Deterministic, Size: 3}}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	var clients []*sotwClient
	for range 7 {
		c := newSotwClient(t, rs.conn)
		c.subscribe(edsURL, "web")
		c.ack(c.recvType(edsURL))
		clients = append(clients, c)
	}
	registrytestWait(t, "7 slots", func() bool { return rs.x.SubsetSlots("web")[subset.Group{Zone: "zone-a"}] == 7 })
	p.Cycle(time.Now())
	counts, load := map[string]float64{}, map[string]float64{}
	for i, c := range clients {
		resp := c.recvType(edsURL)
		c.ack(resp)
		cla := &v3endpointpb.ClusterLoadAssignment{}
		if err := resp.GetResources()[0].UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		var sum float64
		ws := map[string]float64{}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				a := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
				w := float64(e.GetLoadBalancingWeight().GetValue())
				ws[a] = w
				sum += w
			}
		}
		if len(ws) != 3 {
			t.Fatalf("stream %d holds %d endpoints, want its subset of 3", i, len(ws))
		}
		for a, w := range ws {
			counts[a]++
			load[a] += w / sum
		}
	}
	spread := func(m map[string]float64) float64 {
		var sum, hi float64
		for _, v := range m {
			sum += v
			hi = max(hi, v)
		}
		return hi / (sum / 10)
	}
	if len(counts) != 10 {
		t.Fatalf("%d endpoints are in a subset, want all 10", len(counts))
	}
	if c := spread(counts); c < 1.4 {
		t.Errorf("connections per endpoint max/avg %.3f, want 3/2.1 = 1.43 (21 pairs over 10)", c)
	}
	if l := spread(load); l > 1.001 {
		t.Errorf("expected share per endpoint max/avg %.4f (connections %.3f), want 1 to the weights' rounding", l, spread(counts))
	}
}

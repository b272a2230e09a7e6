package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/meshweights"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
)

// The weights part's workload.
const (
	// weightsChangeShare is the share of services whose demand moves
	// enough each cycle to change their vectors: 1,000 registrations/s
	// are 10,000 endpoint changes per 10 s cycle, touching about one
	// service in six of the region's (a 20-endpoint service has a 1 in
	// 5 chance), and demand shifts come on top; BenchmarkOwnerCycle's 1%
	// is the quiet end. 10% is between the two.
	weightsChangeShare = 0.10
	// weightsCycles and weightsIdleCycles are the measured cycles with
	// demand moving and with every rate as the cycle before.
	weightsCycles     = 5
	weightsIdleCycles = 3
	// weightsReplicas is the mesh's replica count; the owner holds
	// weightsOwnedShards of meshweights.DefaultShards (a third).
	weightsReplicas    = 3
	weightsOwnedShards = 6
	// weightsCycleTarget is issue 31's cycle target for 50,000 services,
	// scaled with the services (a cycle is linear in them).
	weightsCycleTarget = time.Second
	// weightsChangedTarget is issue 31's bound on the bytes a cycle
	// allocates per service whose plan it replaces.
	weightsChangedTarget = 2048
	// weightsBudget bounds each of the two measurements at one size:
	// past a quarter of it, one idle cycle; past half, three moving.
	weightsBudget = 2 * time.Minute
)

// weightsBaselineEnv, set to anything, also measures the owner writing
// one Put per record (etcdstore's PutBatch hidden), before the owner as
// it is: before/after in one run.
const weightsBaselineEnv = "SCALE_WEIGHTS_BASELINE"

func init() {
	register(part{
		name: "weights",
		doc:  "the weights cycle: the single replica's planner over load.Table, and the mesh owner's cycle (merge, planner, publish to a real etcd)",
		run:  runWeights,
	})
}

// weightsDemand are the two demand profiles a service moves between
// (requests per second by client zone, zones a, b, c).
var weightsDemand = [2][3]float64{{600, 200, 200}, {200, 600, 200}}

// weightsWorld is the region in one process: a registry and every
// service's demand profile.
type weightsWorld struct {
	r        region
	store    *registry.Store
	services []string
	profile  []int
	next     int
	now      time.Time
}

func newWeightsWorld(ctx context.Context, r region) (*weightsWorld, error) {
	w := &weightsWorld{r: r, store: registry.NewStore(), now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	reg := w.now.Add(-24 * time.Hour) // long past slow start
	var ops []registry.Op
	ep := 0
	for i, size := range r.Sizes() {
		svc := ServiceName(i)
		w.services = append(w.services, svc)
		for j := range size {
			a := netip.AddrFrom4([4]byte{10, byte(ep >> 16), byte(ep >> 8), byte(ep)})
			ops = append(ops, registry.Upsert(svc, &registry.Endpoint{
				ID: fmt.Sprintf("ep-%d", ep), Address: a,
				Ports:    []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
				Locality: registry.Locality{Region: "r1", Zone: ZoneName(j % r.Zones)}, Health: registry.Healthy,
				Source: registry.SourceStatic, Registered: reg,
			}))
			ep++
		}
		if len(ops) >= 5000 || i == r.Services-1 {
			if _, err := w.store.Apply(ops...); err != nil {
				return nil, fmt.Errorf("weights: registry: %w", err)
			}
			ops = ops[:0]
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	w.profile = make([]int, len(w.services))
	return w, nil
}

// advance moves the clock one cycle on and the demand of the next
// change services to their other profile.
func (w *weightsWorld) advance(change int) {
	w.now = w.now.Add(heartbeatEvery)
	for range change {
		w.profile[w.next%len(w.services)] ^= 1
		w.next++
	}
}

// rps is service i's demand from client zone cz to zone z: 90% of a
// client zone's calls stay in it.
func (w *weightsWorld) rps(i, cz, z int) float64 {
	split := 0.05
	if cz == z {
		split = 0.9
	}
	return weightsDemand[w.profile[i]][cz] * split
}

// clients is every service's connected streams: 2 per zone.
func (w *weightsWorld) clients() map[string]map[string]int {
	out := make(map[string]map[string]int, len(w.services))
	for _, svc := range w.services {
		out[svc] = map[string]int{ZoneName(0): 2, ZoneName(1): 2, ZoneName(2): 2}
	}
	return out
}

// timedLoads times a LoadSource's reads and counts what they allocate,
// so the planner's own cost is told from its source's.
type timedLoads struct {
	weights.LoadSource
	spent time.Duration
	bytes uint64
}

func (t *timedLoads) Loads(service string, now time.Time) []load.Load {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	out := t.LoadSource.Loads(service, now)
	t.spent += time.Since(start)
	runtime.ReadMemStats(&m1)
	t.bytes += m1.TotalAlloc - m0.TotalAlloc
	return out
}

// AppendLoads times the source's AppendLoads when it has one (as
// load.Table does), so the planner reads through timedLoads as it would
// read the source itself.
func (t *timedLoads) AppendLoads(dst []load.Load, now time.Time) []load.Load {
	la, ok := t.LoadSource.(weights.LoadAppender)
	if !ok {
		return append(dst, t.Loads("", now)...)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	out := la.AppendLoads(dst, now)
	t.spent += time.Since(start)
	runtime.ReadMemStats(&m1)
	t.bytes += m1.TotalAlloc - m0.TotalAlloc
	return out
}

type staticClients map[string]map[string]int

func (c staticClients) ClientCounts() map[string]map[string]int { return c }

type everyZone struct{}

func (everyZone) Has(string) bool { return true }

// cycleCost is what one measured cycle cost.
type cycleCost struct {
	took     time.Duration
	bytes    uint64
	allocs   uint64
	replaced int // services whose plan the cycle replaced
	// The load source's part of took and bytes (single replica).
	srcTook  time.Duration
	srcBytes uint64
}

// measureCycle runs fn (one cycle) from a collected heap and reads its
// time and allocations; replaced counts the plans of services that
// differ afterwards.
func measureCycle(services []string, plan func(string) *weights.Plan, fn func()) cycleCost {
	before := make([]*weights.Plan, len(services))
	for i, s := range services {
		before[i] = plan(s)
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	fn()
	took := time.Since(start)
	runtime.ReadMemStats(&m1)
	c := cycleCost{took: took, bytes: m1.TotalAlloc - m0.TotalAlloc, allocs: m1.Mallocs - m0.Mallocs}
	for i, s := range services {
		if plan(s) != before[i] {
			c.replaced++
		}
	}
	return c
}

// cycleFigures turns idle and moving cycles into the part's figures
// under the prefix name.
// publishes says the cycle writes its records to the store: its bytes per
// changed service then include them, and the 2 KiB target is judged on
// the planner's share alone (a figure of its own).
func cycleFigures(name string, r region, owned int, idle, moving []cycleCost, publishes bool) []figure {
	med := func(cs []cycleCost, f func(cycleCost) float64) float64 {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = f(c)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	// A cycle is linear in the services (BenchmarkPlannerCycleRegion):
	// the figure with the target is the cycle scaled to the region's
	// 50,000 services, so one target holds at every size.
	scale := float64(fullServices) / float64(r.Services)
	idleBytes := med(idle, func(c cycleCost) float64 { return float64(c.bytes) })
	// Per changed service: the cycle's own bytes (its load source's
	// read apart) over an idle cycle's, per plan replaced.
	idleOwn := med(idle, func(c cycleCost) float64 { return float64(c.bytes - c.srcBytes) })
	perChanged := med(moving, func(c cycleCost) float64 {
		if c.replaced == 0 {
			return 0
		}
		return max(0, float64(c.bytes-c.srcBytes)-idleOwn) / float64(c.replaced)
	})
	figs := []figure{
		{Name: name + " cycle, median", Value: med(moving, func(c cycleCost) float64 { return float64(c.took.Microseconds()) / 1000 }), Unit: "ms"},
		atMost(name+" cycle scaled to 50,000 services", scale*med(moving, func(c cycleCost) float64 { return float64(c.took.Microseconds()) / 1000 }), "ms", float64(weightsCycleTarget.Milliseconds())),
		{Name: name + " cycle, nothing changed, median", Value: med(idle, func(c cycleCost) float64 { return float64(c.took.Microseconds()) / 1000 }), Unit: "ms"},
		{Name: name + " plans replaced per cycle", Value: med(moving, func(c cycleCost) float64 { return float64(c.replaced) }), Unit: fmt.Sprintf("of %d", owned)},
		perChangedFigure(name, perChanged, publishes),
		{Name: name + " allocated per cycle, nothing changed", Value: idleBytes, Unit: "B"},
		{Name: name + " allocated per service, nothing changed", Value: idleBytes / float64(owned), Unit: "B"},
		{Name: name + " allocations per cycle, nothing changed", Value: med(idle, func(c cycleCost) float64 { return float64(c.allocs) }), Unit: ""},
	}
	if moving[0].srcTook > 0 {
		figs = append(figs,
			figure{Name: name + " of which load.Table.Loads, median", Value: med(moving, func(c cycleCost) float64 { return float64(c.srcTook.Microseconds()) / 1000 }), Unit: "ms"},
			figure{Name: name + " of which load.Table.Loads allocated per service", Value: med(moving, func(c cycleCost) float64 { return float64(c.srcBytes) }) / float64(owned), Unit: "B"},
		)
	}
	return figs
}

func runWeights(ctx context.Context, e *env, r region) ([]figure, error) {
	start := time.Now()
	w, err := newWeightsWorld(ctx, r)
	if err != nil {
		return nil, err
	}
	e.Logf("weights: registry of %d services, %d endpoints built in %v", len(w.services), r.Endpoints, time.Since(start).Round(time.Millisecond))
	single, err := weightsSingle(ctx, e, w)
	if err != nil {
		return nil, err
	}
	figs := single
	if os.Getenv(weightsBaselineEnv) != "" {
		base, err := weightsOwner(ctx, e, w, "owner, one Put per record", true)
		if err != nil {
			return nil, err
		}
		figs = append(figs, base...)
	}
	owner, err := weightsOwner(ctx, e, w, "owner", false)
	if err != nil {
		return nil, err
	}
	figs = append(figs, owner...)
	figs = append(figs, figure{Name: "part's run time", Value: time.Since(start).Seconds(), Unit: "s",
		Note: fmt.Sprintf("%d%% of the services' demand moves each measured cycle; targets scaled with the services (1 s at 100%%); allocated per changed service = (cycle's bytes − its load source's − an idle cycle's) / plans replaced", int(weightsChangeShare*100))})
	return figs, nil
}

// weightsSingle measures the single replica's planner: load reports
// recorded in a real load.Table (one LRS stream per service and client
// zone), the planner as cmd/spillway builds it.
func weightsSingle(ctx context.Context, e *env, w *weightsWorld) ([]figure, error) {
	table := load.NewTable(5 * time.Minute)
	streams := make([]uint64, 3*len(w.services))
	for i := range streams {
		streams[i] = table.NewStream()
	}
	record := func() {
		snap := w.store.Snapshot()
		for i, svc := range w.services {
			for cz := range 3 {
				cs := &v3endpointpb.ClusterStats{ClusterName: svc, LoadReportInterval: durationpb.New(heartbeatEvery)}
				for z := range 3 {
					n := uint64(w.rps(i, cz, z) * heartbeatEvery.Seconds())
					cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, &v3endpointpb.UpstreamLocalityStats{
						Locality:            &v3corepb.Locality{Region: "r1", Zone: ZoneName(z)},
						TotalIssuedRequests: n, TotalSuccessfulRequests: n, TotalRequestsInProgress: n / 1000,
					})
				}
				zn := ZoneName(cz)
				table.Record(streams[3*i+cz], load.Node{Zone: zn, Label: zn, Cluster: "client"}, cs, w.now.Add(-time.Second), snap, nil)
			}
		}
	}
	src := &timedLoads{LoadSource: table}
	p, err := weights.NewPlanner(weights.Config{
		Registry: w.store, Loads: src, Clients: staticClients(w.clients()), Zones: everyZone{},
		ZoneAware:  zoneaware.Config{ReportInterval: heartbeatEvery},
		Strategies: weights.StrategyFunc(func(string) weights.Strategy { return weights.Strategy{ZoneAware: true} }),
	})
	if err != nil {
		return nil, fmt.Errorf("weights: planner: %w", err)
	}
	change := int(float64(len(w.services)) * weightsChangeShare)
	var recording time.Duration
	timedRecord := func() {
		start := time.Now()
		record()
		recording = time.Since(start)
	}
	for range 2 { // settle: every plan published, states sized
		w.advance(0)
		timedRecord()
		p.Cycle(w.now)
	}
	e.Logf("weights: planner settled; recording one cycle's LRS reports (%d) took %v", 3*len(w.services), recording.Round(time.Millisecond))
	var idle, moving []cycleCost
	begin := time.Now()
	for i := range weightsIdleCycles {
		if i > 0 && time.Since(begin) > weightsBudget/4 {
			break // slow cycles: fewer of them
		}
		w.advance(0)
		timedRecord()
		src.spent, src.bytes = 0, 0
		c := measureCycle(w.services, p.Plan, func() { p.Cycle(w.now) })
		c.srcTook, c.srcBytes = src.spent, src.bytes
		idle = append(idle, c)
	}
	for i := range weightsCycles {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if i >= 3 && time.Since(begin) > weightsBudget/2 {
			break
		}
		w.advance(change)
		timedRecord()
		src.spent, src.bytes = 0, 0
		c := measureCycle(w.services, p.Plan, func() { p.Cycle(w.now) })
		c.srcTook, c.srcBytes = src.spent, src.bytes
		e.Logf("weights: planner cycle %v, %d plans replaced, %d MB (recording the reports took %v)", c.took.Round(time.Millisecond), c.replaced, c.bytes>>20, recording.Round(time.Millisecond))
		moving = append(moving, c)
	}
	return cycleFigures("planner", w.r, len(w.services), idle, moving, false), nil
}

// weightsShard is the mesh shard of service (fnv32a, as the bench
// ownership of replica/meshweights).
func weightsShard(service string) int {
	h := fnv.New32a()
	h.Write([]byte(service))
	return int(h.Sum32() % meshweights.DefaultShards)
}

// weightsOwnership: this replica (r1) holds shards 0..5 at epoch 1.
type weightsOwnership struct{}

func (weightsOwnership) Owns(s string) bool { return weightsShard(s) < weightsOwnedShards }
func (weightsOwnership) Shard(s string) int { return weightsShard(s) }
func (weightsOwnership) Epoch(shard int) (int64, bool) {
	return 1, shard < weightsOwnedShards
}
func (weightsOwnership) LiveMembers() []string { return []string{"r1", "r2", "r3"} }

// weightsMerged adapts exchange.Merged to meshweights.MergedLoad, as
// cmd/spillway does.
type weightsMerged struct{ m *exchange.Merged }

func (a weightsMerged) Acked(replica string, shard int, epoch int64, since time.Time) bool {
	return a.m.Acked(replica, shard, epoch, since)
}

func (a weightsMerged) Contributors(service string, now time.Time) []weights.Contributor {
	cs := a.m.Contributors(service, now)
	out := make([]weights.Contributor, len(cs))
	for i, c := range cs {
		out[i] = weights.Contributor{Replica: c.Replica, Age: c.Age}
	}
	return out
}

// weightsOwner measures the mesh owner's cycle: the 3 replicas'
// summaries of its services merged (exchange.Merged.Add, as the exchange
// server does), the owner's planner over the merged load, and
// meshweights.Publisher writing heartbeats, plans and states to a real
// etcd. Building the summaries is the senders' work and is not counted.
func weightsOwner(ctx context.Context, e *env, w *weightsWorld, name string, putOnly bool) ([]figure, error) {
	dir := filepath.Join(e.TmpDir, fmt.Sprintf("weights-etcd-%g-%t", w.r.Fraction, putOnly))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer os.RemoveAll(dir)
	proc, client, err := benchproc.StartEtcd(ctx, "weights", dir, dir, e.EtcdBin)
	if err != nil {
		return nil, fmt.Errorf("weights: etcd: %w", err)
	}
	defer proc.Stop()
	kv, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: []string{client}, Prefix: "/weights-scale/", RequestTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("weights: etcd client: %w", err)
	}
	defer kv.Close()
	var store systemstore.KV = kv
	if putOnly {
		store = putOnlyKV{kv}
	}

	var owned []int // indexes into w.services
	var ownedNames []string
	for i, svc := range w.services {
		if weightsShard(svc) < weightsOwnedShards {
			owned = append(owned, i)
			ownedNames = append(ownedNames, svc)
		}
	}
	clock := func() time.Time { return w.now }
	merged := exchange.NewMerged(exchange.MergedConfig{Now: clock})
	var acks []load.ShardEpoch
	for s := range weightsOwnedShards {
		acks = append(acks, load.ShardEpoch{Shard: s, Epoch: 1})
	}
	// summaries are each replica's summaries of the owned services, in
	// messages of at most exchange.MaxServices services.
	summaries := func() [][]load.Summary {
		out := make([][]load.Summary, weightsReplicas)
		at := w.now.Add(-time.Second)
		for r := range weightsReplicas {
			for lo := 0; lo < len(owned); lo += exchange.MaxServices {
				s := load.Summary{Replica: fmt.Sprintf("r%d", r+1), At: at, Interval: heartbeatEvery, Shards: acks}
				for _, i := range owned[lo:min(lo+exchange.MaxServices, len(owned))] {
					ss := load.ServiceSummary{Service: w.services[i], Flows: make([]load.Flow, 0, 9), Clients: make([]load.ClientCount, 0, 3)}
					for cz := range 3 {
						for z := range 3 {
							v := w.rps(i, cz, z) / weightsReplicas
							ss.Flows = append(ss.Flows, load.Flow{ClientZone: ZoneName(cz), Zone: ZoneName(z), Issued: v, Succeeded: v,
								InProgress: uint64(v / 100), Reporters: 2, Updated: at.Add(-time.Second)})
						}
						ss.Clients = append(ss.Clients, load.ClientCount{Zone: ZoneName(cz), Count: 2})
					}
					s.Services = append(s.Services, ss)
				}
				out[r] = append(out[r], s)
			}
		}
		return out
	}
	planner, err := weights.NewPlanner(weights.Config{
		Registry: w.store, Loads: merged, Clients: merged, Zones: everyZone{},
		ZoneAware: zoneaware.Config{ReportInterval: heartbeatEvery}, Interval: heartbeatEvery,
		Owns:       weightsOwnership{}.Owns,
		Strategies: weights.StrategyFunc(func(string) weights.Strategy { return weights.Strategy{ZoneAware: true} }),
	})
	if err != nil {
		return nil, fmt.Errorf("weights: owner planner: %w", err)
	}
	tp := &timedCycle{Planner: planner}
	pub, err := meshweights.NewPublisher(meshweights.PublisherConfig{
		ID: "r1", KV: store, Ownership: weightsOwnership{}, Merged: weightsMerged{merged},
		Planner: tp, Services: func() []string { return w.services }, Interval: heartbeatEvery,
	})
	if err != nil {
		return nil, fmt.Errorf("weights: publisher: %w", err)
	}
	var merge, publish time.Duration
	cycle := func(sums [][]load.Summary) error {
		start := time.Now()
		for _, rs := range sums {
			for _, s := range rs {
				if err := merged.Add(s, w.now); err != nil {
					return fmt.Errorf("weights: merge: %w", err)
				}
			}
		}
		merge = time.Since(start)
		tp.spent, tp.bytes = 0, 0
		start = time.Now()
		pub.Cycle(ctx, w.now)
		publish = time.Since(start) - tp.spent
		return nil
	}
	// Settle: the first cycle takes the shards and reads their (absent)
	// checkpoints, the second publishes every plan.
	warm := time.Now()
	for range 3 {
		w.advance(0)
		if err := cycle(summaries()); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	e.Logf("weights: "+name+" of %d services settled in %v (%d plan writes)", len(owned), time.Since(warm).Round(time.Millisecond), pub.Writes().Plan)
	change := int(float64(len(w.services)) * weightsChangeShare)
	var idle, moving []cycleCost
	var merges, planners, publishes []float64
	var plannerBytes []uint64
	var cycleErr error
	run := func(ch int) cycleCost {
		w.advance(ch)
		sums := summaries()
		w0 := pub.Writes()
		c := measureCycle(ownedNames, planner.Plan, func() { cycleErr = cycle(sums) })
		merges = append(merges, float64(merge.Microseconds())/1000)
		planners = append(planners, float64(tp.spent.Microseconds())/1000)
		publishes = append(publishes, float64(publish.Microseconds())/1000)
		plannerBytes = append(plannerBytes, tp.bytes)
		w1 := pub.Writes()
		e.Logf("weights: "+name+" cycle %v (merge %v, planner %v, publish %v: %d plan, %d state writes), %d plans replaced",
			c.took.Round(time.Millisecond), merge.Round(time.Millisecond), tp.spent.Round(time.Millisecond), publish.Round(time.Millisecond),
			w1.Plan-w0.Plan, w1.State-w0.State, c.replaced)
		return c
	}
	for range weightsIdleCycles {
		idle = append(idle, run(0))
		if cycleErr != nil {
			return nil, cycleErr
		}
	}
	idlePlanner := slices.Clone(plannerBytes)
	slices.Sort(idlePlanner)
	merges, planners, publishes, plannerBytes = merges[:0], planners[:0], publishes[:0], plannerBytes[:0]
	w0 := pub.Writes()
	for range weightsCycles {
		moving = append(moving, run(change))
		if cycleErr != nil {
			return nil, cycleErr
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	w1 := pub.Writes()
	figs := cycleFigures(name, w.r, len(owned), idle, moving, true)
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	// The planner's share of the owner's bytes per changed service: its
	// cycle's bytes over an idle one's, per plan replaced.
	var perChanged []float64
	for i, c := range moving {
		if c.replaced > 0 {
			perChanged = append(perChanged, max(0, float64(plannerBytes[i])-float64(idlePlanner[len(idlePlanner)/2]))/float64(c.replaced))
		}
	}
	if len(perChanged) > 0 {
		figs = append(figs, atMost(name+" planner allocated per changed service", median(perChanged), "B", weightsChangedTarget))
	}
	figs = append(figs,
		figure{Name: name + " merge, median", Value: median(merges), Unit: "ms"},
		figure{Name: name + " planner, median", Value: median(planners), Unit: "ms"},
		figure{Name: name + " publish (etcd writes), median", Value: median(publishes), Unit: "ms"},
		figure{Name: name + " plan + state writes per cycle", Value: float64(w1.Plan-w0.Plan+w1.State-w0.State) / weightsCycles, Unit: ""},
	)
	return figs, nil
}

// putOnlyKV hides etcdstore's PutBatch: the publisher writes one Put per
// record, 16 in flight, as before PutBatch (SCALE_WEIGHTS_BASELINE).
type putOnlyKV struct{ systemstore.KV }

// timedCycle times the planner's cycles inside Publisher.Cycle.
type timedCycle struct {
	*weights.Planner
	spent time.Duration
	bytes uint64 // allocated by the cycles
}

func (t *timedCycle) Cycle(now time.Time) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	t.Planner.Cycle(now)
	t.spent += time.Since(start)
	runtime.ReadMemStats(&m1)
	t.bytes += m1.TotalAlloc - m0.TotalAlloc
}

// perChangedFigure is a cycle's bytes per changed service: judged against
// the target for a planner; for an owner, which also encodes and writes a
// plan and a state record per changed service (about 3.7 and 1.9 KB of
// JSON, before etcd's client copies them), printed without one.
func perChangedFigure(name string, v float64, publishes bool) figure {
	if !publishes {
		return atMost(name+" allocated per changed service", v, "B", weightsChangedTarget)
	}
	return figure{Name: name + " allocated per changed service, publish included", Value: v, Unit: "B",
		Note: "no target: it includes the plan and state records written per changed service (about 5.6 KB of JSON); the 2 KiB target is judged on the owner's planner below"}
}

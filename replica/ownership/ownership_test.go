package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

// TestMain checks for leaked goroutines; the Spanner client (spanner
// test) starts opencensus's worker at init and leaves idle HTTP
// connections behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

// testTTL is the member and election TTL of the store tests: etcd's
// smallest lease is 1.5 s with its default election timeout.
const testTTL = 2 * time.Second

// transition is one shard taken or given up by one replica.
type transition struct {
	id    string
	shard int
	owned bool
	epoch int64
	at    time.Time
}

// history records every replica's transitions in one order. A take is
// recorded after the election is won, a give-up before it is resigned or
// as soon as the hold is seen lost, so a handover through the election
// appears as the old holder's give-up before the new holder's take.
type history struct {
	mu  sync.Mutex
	evs []transition
}

func (h *history) hook(id string) func(int, bool, int64) {
	return func(s int, owned bool, epoch int64) {
		h.mu.Lock()
		h.evs = append(h.evs, transition{id, s, owned, epoch, time.Now()})
		h.mu.Unlock()
	}
}

// since returns the offsets from t of the give-ups after t.
func (h *history) since(t time.Time) []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Duration
	for _, ev := range h.evs {
		if !ev.owned && ev.at.After(t) {
			out = append(out, ev.at.Sub(t).Round(10*time.Millisecond))
		}
	}
	return out
}

// check replays the history: at no point does a shard have two holders;
// each shard's epochs grow with every take; an epoch has one owner.
func (h *history) check(t *testing.T) (takes int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	holder := map[int]string{}
	lastEpoch := map[int]int64{}
	for i, ev := range h.evs {
		if ev.owned {
			takes++
			if cur, ok := holder[ev.shard]; ok {
				t.Errorf("event %d: %s takes shard %d held by %s", i, ev.id, ev.shard, cur)
			}
			if ev.epoch <= lastEpoch[ev.shard] {
				t.Errorf("event %d: %s takes shard %d at epoch %d, not above the last epoch %d", i, ev.id, ev.shard, ev.epoch, lastEpoch[ev.shard])
			}
			holder[ev.shard] = ev.id
			lastEpoch[ev.shard] = ev.epoch
			continue
		}
		if cur := holder[ev.shard]; cur != ev.id || lastEpoch[ev.shard] != ev.epoch {
			t.Errorf("event %d: %s gives up shard %d epoch %d, held by %q at epoch %d", i, ev.id, ev.shard, ev.epoch, cur, lastEpoch[ev.shard])
		}
		delete(holder, ev.shard)
	}
	return takes
}

// tWriter logs through t (warnings of the replicas: why a shard was
// given up).
type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// inst is one replica's Owners over its own etcd client.
type inst struct {
	id     string
	o      *Owners
	kv     systemstore.KV
	cancel context.CancelFunc
	done   chan error
}

func openKV(t *testing.T, endpoint string) *etcdstore.KV {
	t.Helper()
	kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{endpoint}, Prefix: "/mesh/"})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func newInst(t *testing.T, endpoint, id string, shards int, h *history) *inst {
	t.Helper()
	kv := openKV(t, endpoint)
	return newInstKV(t, kv, func(name string) (systemstore.Elector, error) { return kv.Election(name, testTTL) }, id, shards, testTTL, h)
}

func newInstKV(t *testing.T, kv systemstore.KV, elect func(string) (systemstore.Elector, error), id string, shards int, ttl time.Duration, h *history) *inst {
	t.Helper()
	o, err := New(Config{
		KV: kv, ID: id, GRPCAddr: "127.0.0.1:" + id, Shards: shards, TTL: ttl, Elect: elect,
		Logger:     slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", id),
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if h != nil {
		o.onTransition = h.hook(id)
	}
	return &inst{id: id, o: o, kv: kv}
}

func (in *inst) run() {
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel, in.done = cancel, make(chan error, 1)
	go func() { in.done <- in.o.Run(ctx) }()
}

// stop ends Run (a clean stop) and closes the client.
func (in *inst) stop(t *testing.T) {
	t.Helper()
	if in.cancel != nil {
		in.cancel()
		if err := <-in.done; err != nil {
			t.Errorf("%s: Run = %v, want nil", in.id, err)
		}
		in.cancel = nil
	}
	in.kv.Close()
}

// kill models kill -9: the store client dies first (no resign, no
// release, no member delete reach the store), then Run is told to end;
// wait for it on the returned channel.
func (in *inst) kill() <-chan error {
	in.kv.Close()
	in.cancel()
	in.cancel = nil
	return in.done
}

func startInsts(t *testing.T, endpoint string, h *history, ids ...string) []*inst {
	t.Helper()
	var out []*inst
	for _, id := range ids {
		in := newInst(t, endpoint, id, DefaultShards, h)
		in.run()
		t.Cleanup(func() { in.stop(t) })
		out = append(out, in)
	}
	return out
}

// serviceOf returns a service name of every shard.
func serviceOf(n int) []string {
	out := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		name := fmt.Sprintf("svc-%d", i)
		if s := ShardOf(name, n); out[s] == "" {
			out[s] = name
			found++
		}
	}
	return out
}

// settledState reports "" when every shard has exactly one holder among
// insts and every inst's records name that holder at one epoch; else
// what is wrong.
func settledState(insts []*inst) string {
	svcs := serviceOf(DefaultShards)
	for s, svc := range svcs {
		var holders []string
		for _, in := range insts {
			if in.o.Owns(svc) {
				holders = append(holders, in.id)
			}
		}
		if len(holders) != 1 {
			return fmt.Sprintf("shard %d holders %v", s, holders)
		}
		var epoch int64
		for i, in := range insts {
			m, e, ok := in.o.Owner(svc)
			if !ok || m.ID != holders[0] || m.GRPCAddr != "127.0.0.1:"+holders[0] {
				return fmt.Sprintf("shard %d: %s's record names %+v (ok %v), want %s", s, in.id, m, ok, holders[0])
			}
			if i > 0 && e != epoch {
				return fmt.Sprintf("shard %d: epochs differ between replicas: %d and %d", s, epoch, e)
			}
			epoch = e
		}
	}
	return ""
}

// waitFor polls cond every 20ms until it returns "" or the bound (a
// bound on a hang, not a speed check) passes, and returns how long it
// took.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() string) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < bound {
		if last = cond(); last == "" {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %s", what, bound, last)
	return 0
}

func counts(insts []*inst) map[string]int {
	out := map[string]int{}
	for _, in := range insts {
		out[in.id] = len(in.o.Owned())
	}
	return out
}

// TestThreeReplicas: three replicas on one etcd end with one holder per
// shard, ownership records that agree on every replica, and a balanced
// spread; Members and the metrics agree.
func TestThreeReplicas(t *testing.T) {
	srv := etcdtest.Start(t)
	h := &history{}
	insts := startInsts(t, srv.Endpoint, h, "a", "b", "c")
	// Balanced is waited for with the rest: a replica that a busy machine
	// starts late joins after the others took every shard, and gets its
	// share by the rebalancing.
	limit := (DefaultShards+2)/3 + 2
	took := waitFor(t, 60*time.Second, fmt.Sprintf("one holder per shard, at most %d per replica", limit), func() string {
		if s := settledState(insts); s != "" {
			return s
		}
		for id, n := range counts(insts) {
			if n > limit {
				return fmt.Sprintf("%s owns %d shards (%v)", id, n, counts(insts))
			}
		}
		return ""
	})
	t.Logf("settled %v after start (TTL %v); shards per replica %v", took.Round(time.Millisecond), testTTL, counts(insts))
	waitFor(t, 30*time.Second, "members", func() string {
		for _, in := range insts {
			var ids []string
			for _, m := range in.o.Members() {
				ids = append(ids, m.ID)
			}
			if d := cmp.Diff([]string{"a", "b", "c"}, ids); d != "" {
				return in.id + ": " + d
			}
		}
		return ""
	})
	// The gauge follows a take or a release just after the shard set:
	// read until they agree.
	waitFor(t, 10*time.Second, "spillway_mesh_shards_owned and spillway_mesh_members agree with Owned and Members", func() string {
		for _, in := range insts {
			if got, want := testutil.ToFloat64(in.o.metrics.owned), float64(len(in.o.Owned())); got != want {
				return fmt.Sprintf("%s: spillway_mesh_shards_owned = %v, Owned has %v", in.id, got, want)
			}
			if got := testutil.ToFloat64(in.o.metrics.members); got != 3 {
				return fmt.Sprintf("%s: spillway_mesh_members = %v, want 3", in.id, got)
			}
		}
		return ""
	})
	for _, in := range insts {
		select {
		case <-in.o.Changes():
		default:
			t.Errorf("%s: Changes() has no value after shards were taken", in.id)
		}
	}
	h.check(t)
}

// TestJoin: a fourth replica joining gets shards, handed over through the
// elections: no shard ever has two holders, epochs only grow.
func TestJoin(t *testing.T) {
	srv := etcdtest.Start(t)
	h := &history{}
	insts := startInsts(t, srv.Endpoint, h, "a", "b", "c")
	waitFor(t, 60*time.Second, "one holder per shard", func() string { return settledState(insts) })
	before := h.check(t)
	t.Logf("three replicas: %v", counts(insts))

	// Sample Owns often while d joins: an observation of two holders
	// is possible (the replicas are read one after another), so it is
	// reported, and the history is the assertion.
	stopSampling := make(chan struct{})
	var samples, doubles atomic.Int64
	var sampler sync.WaitGroup
	all := append(slices.Clone(insts), newInst(t, srv.Endpoint, "d", DefaultShards, h))
	sampler.Go(func() {
		svcs := serviceOf(DefaultShards)
		for i := 0; i < 200_000; i++ {
			select {
			case <-stopSampling:
				return
			default:
			}
			for _, svc := range svcs {
				n := 0
				for _, in := range all {
					if in.o.Owns(svc) {
						n++
					}
				}
				if n > 1 {
					doubles.Add(1)
				}
			}
			samples.Add(1)
			time.Sleep(time.Millisecond)
		}
	})
	d := all[3]
	d.run()
	t.Cleanup(func() { d.stop(t) })
	took := waitFor(t, 60*time.Second, "d owns shards, one holder each", func() string {
		if len(d.o.Owned()) == 0 {
			return "d owns none"
		}
		return settledState(all)
	})
	close(stopSampling)
	sampler.Wait()
	t.Logf("d joined: settled %v after its start; shards %v; %d of %d sample rounds saw a shard with two holders", took.Round(time.Millisecond), counts(all), doubles.Load(), samples.Load())
	after := h.check(t)
	limit := (DefaultShards+3)/4 + 2
	for id, n := range counts(all) {
		if n > limit {
			t.Errorf("%s owns %d shards with 4 replicas, want at most %d", id, n, limit)
		}
	}
	if moved := after - before; moved > DefaultShards/2 {
		t.Errorf("join moved %d shards, want at most %d", moved, DefaultShards/2)
	}
}

// TestKill: a replica killed without resigning (its store client dies,
// as with kill -9) loses its shards to the others once its member record
// ages out and its election sessions expire, about the TTL.
func TestKill(t *testing.T) {
	srv := etcdtest.Start(t)
	h := &history{}
	insts := startInsts(t, srv.Endpoint, h, "a", "b", "c")
	waitFor(t, 60*time.Second, "one holder per shard", func() string { return settledState(insts) })
	victim := insts[1]
	lost := victim.o.Owned()
	if len(lost) == 0 {
		t.Fatalf("b owns no shard: %v", counts(insts))
	}
	done := victim.kill()
	rest := []*inst{insts[0], insts[2]}
	took := waitFor(t, 60*time.Second, "b's shards moved", func() string { return settledState(rest) })
	t.Logf("b killed owning shards %v: all held by a and c %v after its store client closed (TTL %v); now %v",
		lost, took.Round(time.Millisecond), testTTL, counts(rest))
	<-done
	if got := victim.o.Owned(); len(got) != 0 {
		t.Errorf("b still reports shards %v after its store client died", got)
	}
	waitFor(t, 30*time.Second, "b out of members", func() string {
		for _, in := range rest {
			for _, m := range in.o.Members() {
				if m.ID == "b" {
					return in.id + " still counts b live"
				}
			}
		}
		return ""
	})
	took = waitFor(t, 60*time.Second, "b's member record deleted", func() string {
		if _, _, err := insts[0].kv.Get(context.Background(), MembersPrefix+"b"); !errors.Is(err, systemstore.ErrNotFound) {
			return fmt.Sprintf("Get(members/b) = %v", err)
		}
		return ""
	})
	t.Logf("b's member record deleted by the others %v after its shards moved (unchanged for %v)", took.Round(time.Millisecond), 3*testTTL)
	h.check(t)
}

// TestCleanStop: a replica stopped cleanly releases its shards and
// deletes its member record; the others take its shards.
func TestCleanStop(t *testing.T) {
	srv := etcdtest.Start(t)
	h := &history{}
	insts := startInsts(t, srv.Endpoint, h, "a", "b")
	waitFor(t, 60*time.Second, "one holder per shard", func() string { return settledState(insts) })
	insts[1].stop(t)
	kv := insts[0].kv
	if _, _, err := kv.Get(context.Background(), MembersPrefix+"b"); !errors.Is(err, systemstore.ErrNotFound) {
		t.Errorf("member record of b after its clean stop: Get = %v, want ErrNotFound", err)
	}
	took := waitFor(t, 60*time.Second, "a holds every shard", func() string { return settledState(insts[:1]) })
	t.Logf("b stopped cleanly: a holds all shards %v later", took.Round(time.Millisecond))
	h.check(t)
}

// TestShardCountMismatch: a replica configured with another shard count
// than the store records refuses to start, naming the flag and both
// counts.
func TestShardCountMismatch(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startInsts(t, srv.Endpoint, nil, "a")[0]
	waitFor(t, 30*time.Second, "shard count recorded", func() string {
		if _, _, err := a.kv.Get(context.Background(), ShardsKey); err != nil {
			return err.Error()
		}
		return ""
	})
	b := newInst(t, srv.Endpoint, "b", 8, nil)
	defer b.kv.Close()
	err := b.o.Run(context.Background())
	if !errors.Is(err, ErrShardCount) {
		t.Fatalf("Run with 8 shards on a 16-shard store = %v, want ErrShardCount", err)
	}
	for _, want := range []string{"--mesh-shards 8", "16"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run error %q does not name %q", err, want)
		}
	}
	if len(b.o.Owned()) != 0 {
		t.Errorf("refused replica owns %v", b.o.Owned())
	}
}

// countKV fails every call and counts it.
type countKV struct{ calls atomic.Int64 }

func (c *countKV) Put(context.Context, string, []byte) (int64, error) {
	c.calls.Add(1)
	return 0, systemstore.ErrClosed
}
func (c *countKV) Delete(context.Context, string) (int64, error) {
	c.calls.Add(1)
	return 0, systemstore.ErrClosed
}
func (c *countKV) Get(context.Context, string) ([]byte, int64, error) {
	c.calls.Add(1)
	return nil, 0, systemstore.ErrClosed
}
func (c *countKV) List(context.Context, string) ([]systemstore.KeyValue, int64, error) {
	c.calls.Add(1)
	return nil, 0, systemstore.ErrClosed
}
func (c *countKV) Watch(context.Context, string, int64) <-chan systemstore.WatchEvent {
	c.calls.Add(1)
	ch := make(chan systemstore.WatchEvent)
	close(ch)
	return ch
}
func (c *countKV) Close() error { return nil }

// TestSingleReplica: with no elector (bbolt) the replica owns every shard
// from New on, through Run, without touching the store.
func TestSingleReplica(t *testing.T) {
	kv := &countKV{}
	reg := prometheus.NewRegistry()
	o, err := New(Config{KV: kv, ID: "solo", GRPCAddr: "127.0.0.1:9000", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int, DefaultShards)
	for i := range want {
		want[i] = i
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	if d := cmp.Diff(want, o.Owned()); d != "" {
		t.Errorf("Owned() (-want +got):\n%s", d)
	}
	for _, svc := range []string{"payments", "orders", ""} {
		if !o.Owns(svc) {
			t.Errorf("Owns(%q) = false", svc)
		}
		m, epoch, ok := o.Owner(svc)
		if !ok || m.ID != "solo" || m.GRPCAddr != "127.0.0.1:9000" || epoch != 1 {
			t.Errorf("Owner(%q) = %+v, %d, %v; want solo at epoch 1", svc, m, epoch, ok)
		}
	}
	if got := o.Members(); len(got) != 1 || got[0].ID != "solo" {
		t.Errorf("Members() = %+v, want solo alone", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if n := kv.calls.Load(); n != 0 {
		t.Errorf("single replica made %d store calls, want 0", n)
	}
	if got := testutil.ToFloat64(o.metrics.owned); got != DefaultShards {
		t.Errorf("spillway_mesh_shards_owned = %v, want %d", got, DefaultShards)
	}
	if len(o.Owned()) != DefaultShards {
		t.Errorf("after Run: Owned() = %v, want every shard", o.Owned())
	}
}

func TestNewValidates(t *testing.T) {
	kv := &countKV{}
	elect := func(string) (systemstore.Elector, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"empty_id", Config{KV: kv}, "ID"},
		{"slash_in_id", Config{KV: kv, ID: "a/b"}, "ID"},
		{"space_in_id", Config{KV: kv, ID: "a b"}, "ID"},
		{"no_kv_with_elect", Config{ID: "a", Elect: elect}, "KV"},
		{"negative_shards", Config{KV: kv, ID: "a", Shards: -1}, "Shards"},
		{"too_many_shards", Config{KV: kv, ID: "a", Shards: MaxShards + 1}, "Shards"},
		{"negative_ttl", Config{KV: kv, ID: "a", TTL: -time.Second}, "TTL"},
		{"identity_with_space", Config{KV: kv, ID: "a", Identity: "spiffe://x/a b"}, "Identity"},
		{"elect_fails", Config{KV: kv, ID: "a", Elect: func(string) (systemstore.Elector, error) { return nil, errors.New("boom") }}, "Elect(election/shard/00)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestMemberRecordIdentity: a member record carries the replica's
// certificate identity and the highest cluster version it supports, and
// a record of the previous release (a770d6c, neither field) still reads,
// with neither.
func TestMemberRecordIdentity(t *testing.T) {
	at := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	b, err := json.Marshal(memberRecord{Member: Member{ID: "r1", GRPCAddr: "10.0.0.1:9000", Started: at, Identity: "spiffe://prod/replica/r1", MaxVersion: 2}, Expires: at})
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMember(MembersPrefix+"r1", b)
	if err != nil || got.Identity != "spiffe://prod/replica/r1" || got.MaxVersion != 2 {
		t.Errorf("decodeMember(new record) = %+v, %v; want the identity and max version 2", got, err)
	}
	old := []byte(`{"id":"r1","grpc_addr":"10.0.0.1:9000","started":"2026-12-02T03:00:00Z","expires":"2026-12-02T03:00:05Z"}`)
	got, err = decodeMember(MembersPrefix+"r1", old)
	if err != nil || got.ID != "r1" || got.GRPCAddr != "10.0.0.1:9000" || got.Identity != "" || got.MaxVersion != 0 {
		t.Errorf("decodeMember(a770d6c record) = %+v, %v; want r1 without identity or max version", got, err)
	}
	// The previous release decodes members with encoding/json into a
	// struct without the field: the new record reads there too.
	var prev struct {
		ID       string    `json:"id"`
		GRPCAddr string    `json:"grpc_addr"`
		Started  time.Time `json:"started"`
		Expires  time.Time `json:"expires"`
	}
	if err := json.Unmarshal(b, &prev); err != nil || prev.ID != "r1" || prev.GRPCAddr != "10.0.0.1:9000" {
		t.Errorf("the previous release's decoding of a new record = %+v, %v", prev, err)
	}
}

func TestShardOf(t *testing.T) {
	for _, svc := range []string{"payments", "orders", "", "a.b.c"} {
		h := fnv.New32a()
		h.Write([]byte(svc))
		for _, n := range []int{1, 16, 7} {
			if got, want := ShardOf(svc, n), int(h.Sum32()%uint32(n)); got != want {
				t.Errorf("ShardOf(%q, %d) = %d, want %d", svc, n, got, want)
			}
		}
	}
	if got := ShardKey(3); got != "03" {
		t.Errorf("ShardKey(3) = %q, want 03", got)
	}
}

// TestAssign: every shard has one first-ranked member, load is bounded
// by ceil(shards/members), the second differs from the first, and a
// member joining moves few shards.
func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  []string
		n    int
	}{
		{"one", []string{"a"}, 16},
		{"three", []string{"a", "b", "c"}, 16},
		{"four", []string{"a", "b", "c", "d"}, 16},
		{"five_of_seven", []string{"r1", "r2", "r3", "r4", "r5"}, 7},
		{"hosts", []string{"spillway-0-811", "spillway-1-812", "spillway-2-813"}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := assign(tc.ids, tc.n)
			limit := (tc.n + len(tc.ids) - 1) / len(tc.ids)
			load := map[string]int{}
			for s := range tc.n {
				if !slices.Contains(tc.ids, a.first[s]) {
					t.Fatalf("shard %d first %q not a member", s, a.first[s])
				}
				load[a.first[s]]++
				if len(tc.ids) > 1 && (a.second[s] == a.first[s] || !slices.Contains(tc.ids, a.second[s])) {
					t.Errorf("shard %d second %q, first %q", s, a.second[s], a.first[s])
				}
			}
			for id, l := range load {
				if l > limit {
					t.Errorf("%s ranks first for %d shards, want at most %d", id, l, limit)
				}
			}
			if d := cmp.Diff(a, assign(tc.ids, tc.n), cmp.AllowUnexported(assignment{})); d != "" {
				t.Errorf("assign not deterministic:\n%s", d)
			}
			joined := assign(append(slices.Clone(tc.ids), "zz-new"), tc.n)
			moved := 0
			for s := range tc.n {
				if joined.first[s] != a.first[s] {
					moved++
				}
			}
			t.Logf("load %v; a join moves %d of %d shards", load, moved, tc.n)
			if fair := tc.n/(len(tc.ids)+1) + 1; moved > 2*fair+1 {
				t.Errorf("a join moved %d shards, want at most %d", moved, 2*fair+1)
			}
		})
	}
}

// TestStoreOutage: with etcd stopped, holders keep their shards until
// their election holds are lost (the session keep-alive fails for the
// TTL), then own nothing; with etcd back, every shard has one holder
// again.
func TestStoreOutage(t *testing.T) {
	srv := etcdtest.Start(t)
	h := &history{}
	insts := startInsts(t, srv.Endpoint, h, "a", "b", "c")
	waitFor(t, 60*time.Second, "one holder per shard", func() string { return settledState(insts) })
	stopped := time.Now()
	srv.Stop()
	took := waitFor(t, 60*time.Second, "nothing owned while the store is down", func() string {
		for _, in := range insts {
			if got := in.o.Owned(); len(got) != 0 {
				return fmt.Sprintf("%s owns %v", in.id, got)
			}
		}
		return ""
	})
	t.Logf("etcd stopped: holders gave up every shard %v later (TTL %v); give-ups at %v", took.Round(time.Millisecond), testTTL, h.since(stopped))
	srv.Restart()
	took = waitFor(t, 60*time.Second, "one holder per shard after the store's return", func() string { return settledState(insts) })
	t.Logf("etcd back: one holder per shard %v after the restart; %v", took.Round(time.Millisecond), counts(insts))
	took = waitFor(t, 60*time.Second, "balanced again", func() string {
		for id, n := range counts(insts) {
			if n > (DefaultShards+2)/3 {
				return fmt.Sprintf("%s owns %d", id, n)
			}
		}
		return settledState(insts)
	})
	t.Logf("balanced again %v later: %v", took.Round(time.Millisecond), counts(insts))
	h.check(t)
}

// BenchmarkOwns: the per-service calls are a hash and atomic loads, no
// allocation.
func BenchmarkOwns(b *testing.B) {
	o, err := New(Config{ID: "solo"})
	if err != nil {
		b.Fatal(err)
	}
	svcs := serviceOf(DefaultShards)
	b.Run("Owns", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if !o.Owns(svcs[i%len(svcs)]) {
				b.Fatal("not owned")
			}
		}
	})
	b.Run("Owner", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, _, ok := o.Owner(svcs[i%len(svcs)]); !ok {
				b.Fatal("no owner")
			}
		}
	})
}

// TestRecordsSingleReplica: without an election the replica's own record
// (epoch 1) is every shard's.
func TestRecordsSingleReplica(t *testing.T) {
	o, err := New(Config{KV: &countKV{}, ID: "solo", GRPCAddr: "127.0.0.1:9000", Shards: 3})
	if err != nil {
		t.Fatal(err)
	}
	recs := o.Records()
	if len(recs) != 3 {
		t.Fatalf("Records = %d, want 3", len(recs))
	}
	for s, r := range recs {
		if r.Owner != "solo" || r.GRPCAddr != "127.0.0.1:9000" || r.Epoch != 1 || r.Released {
			t.Errorf("Records()[%d] = %+v, want solo at 127.0.0.1:9000 epoch 1", s, r)
		}
	}
}

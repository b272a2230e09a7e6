package registrysync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gate is the lease manager's Decider until its Replica exists.
type gate struct{ r atomic.Pointer[Replica] }

func (g *gate) MayExpire() bool {
	r := g.r.Load()
	return r != nil && r.MayExpire()
}

// Complete is the lease manager's View, as cmd/spillway wires it.
func (g *gate) Complete() error {
	if r := g.r.Load(); r != nil {
		return r.Complete()
	}
	return errors.New("replica not started")
}

// Sharing is the lease manager's Sharer, as cmd/spillway wires it.
func (g *gate) Sharing() error {
	if r := g.r.Load(); r != nil {
		return r.Sharing()
	}
	return errors.New("replica not started")
}

// node is one replica in-process: its own registry, lease manager,
// migration controller and Replica over the shared kv.
type node struct {
	id     string
	store  *registry.Store
	leases *lease.Manager
	ctl    *migration.Controller
	rep    *Replica
	cancel context.CancelFunc
	done   sync.WaitGroup
}

const (
	testTTL   = 2 * time.Second
	testFlush = 500 * time.Millisecond
	testProbe = 100 * time.Millisecond
)

func startNode(t *testing.T, kv systemstore.KV, id string, el systemstore.Elector) *node {
	t.Helper()
	n := &node{id: id, store: registry.NewStore()}
	st := systemstore.NewStore(kv)
	g := &gate{}
	var err error
	n.leases, err = lease.New(lease.Config{
		Store: n.store, Storage: st, Tick: 100 * time.Millisecond, MinTTL: time.Second,
		Decider: g, Sharer: g, View: g, ExpiryGrace: GraceFor(testFlush, testProbe), GuardShare: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.ctl, err = migration.NewController(migration.ControllerConfig{Store: n.store, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	n.rep, err = New(Config{KV: kv, Name: "memkv://test", Settings: n.ctl, Elector: el, ID: id, Flush: testFlush, Probe: testProbe, MaxTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if err := n.rep.Init(ctx, n.leases); err != nil {
		t.Fatal(err)
	}
	g.r.Store(n.rep)
	n.done.Go(func() { n.rep.Run(ctx) })
	n.done.Go(func() { n.leases.Run(ctx) })
	t.Cleanup(n.stop)
	return n
}

// stop ends the node's goroutines, as a killed process: nothing is
// flushed or deregistered.
func (n *node) stop() {
	n.cancel()
	n.done.Wait()
}

func vm(i int) *registry.Endpoint {
	return &registry.Endpoint{
		Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}),
		Ports:   []registry.Port{{Name: "grpc", Number: 8080, Protocol: "tcp"}},
	}
}

func (n *node) has(service, id string) bool {
	svc, ok := n.store.Snapshot().Service(service)
	if !ok {
		return false
	}
	_, ok = svc.Endpoint(id)
	return ok
}

// deletes counts the delete events of registrations/<key> in kv's log.
func deletes(m *systemstoretest.MemKV, key string) int {
	c := 0
	for _, ev := range m.Events() {
		if ev.Type == systemstore.EventDelete && ev.Key == systemstore.RegistrationsPrefix+key {
			c++
		}
	}
	return c
}

// TestSyncAcrossReplicas: a registration made on one replica is served by
// the other, which takes its heartbeats; a deregistration on the second
// removes it from the first; the panic flag set on one is in force on the
// other.
func TestSyncAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		el := newOneElector("a")
		a, b := startNode(t, kv, "a", el), startNode(t, kv, "b", el)
		ctx := context.Background()

		l, err := a.leases.Register(ctx, "payments", vm(1), 0)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !b.has("payments", l.EndpointID) {
			t.Fatalf("b does not serve %s registered on a", l.EndpointID)
		}
		if _, err := b.leases.Heartbeat(l.ID); err != nil {
			t.Errorf("b.Heartbeat(a's lease) = %v, want nil", err)
		}
		if _, err := b.leases.Deregister(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if a.has("payments", l.EndpointID) {
			t.Errorf("a still serves %s deregistered on b", l.EndpointID)
		}
		if _, err := a.leases.Heartbeat(l.ID); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("a.Heartbeat(deregistered) = %v, want ErrNotFound", err)
		}

		if _, _, err := a.ctl.SetPanic(ctx, true); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !b.ctl.Panic().Panic {
			t.Errorf("b's panic flag off after a set it on")
		}
		if got, _ := b.store.Snapshot().Flag(registry.FlagXDS); got != "off" {
			t.Errorf("b's TXT _xds flag = %q, want off", got)
		}
	})
}

// TestResyncAfterOutage: what the watch did not deliver (a change lost
// to compaction, simulated by a write that bypasses the log) is picked up
// by the List that follows the store's return; writes during the outage
// fail with systemstore.ErrUnavailable naming the store.
func TestResyncAfterOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		el := newOneElector("a")
		a, b := startNode(t, kv, "a", el), startNode(t, kv, "b", el)
		ctx := context.Background()

		kv.Down.Store(true)
		time.Sleep(3 * testProbe)
		if st := a.rep.Status(); st.Up || !strings.Contains(st.String(), "unreachable") || !strings.Contains(st.String(), "connection refused") {
			t.Errorf("a.Status() during the outage = %q (up %v), want unreachable with the error", st, st.Up)
		}
		_, err := a.leases.Register(ctx, "payments", vm(2), 0)
		if !errors.Is(err, systemstore.ErrUnavailable) || !strings.Contains(err.Error(), "memkv 127.0.0.1:1") {
			t.Errorf("Register during the outage = %v, want ErrUnavailable naming the store", err)
		}
		if a.has("payments", "10-0-0-2-8080") {
			t.Errorf("a serves a registration the store refused")
		}

		// A change the watch never delivers.
		rec := systemstore.Record{LeaseID: "feedface", Service: "orders", TTL: time.Hour, Endpoint: *vm(3)}
		rec.Endpoint.ID = "10-0-0-3-8080"
		raw, _ := encode(rec)
		kv.PutUnseen(systemstore.RegistrationsPrefix+rec.Key(), raw)

		kv.Down.Store(false)
		time.Sleep(3 * testProbe)
		synctest.Wait()
		for _, n := range []*node{a, b} {
			if !n.has("orders", "10-0-0-3-8080") {
				t.Errorf("%s does not serve the record listed after the outage", n.id)
			}
			if !n.rep.Status().Up {
				t.Errorf("%s: store not up after the outage", n.id)
			}
		}
		if _, err := a.leases.Register(ctx, "payments", vm(2), 0); err != nil {
			t.Errorf("Register after the outage = %v, want nil", err)
		}
	})
}

// TestOneDeciderExpires: only the elected replica expires; a lease
// heartbeated only on the other replica never expires; a lease nobody
// heartbeats expires exactly once; after a handover the new decider
// waits for the stamps and expires nothing live.
func TestOneDeciderExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		el := newOneElector("a")
		a, b := startNode(t, kv, "a", el), startNode(t, kv, "b", el)
		ctx := context.Background()

		onA, err := a.leases.Register(ctx, "svc", vm(1), testTTL)
		if err != nil {
			t.Fatal(err)
		}
		onB, err := b.leases.Register(ctx, "svc", vm(2), testTTL)
		if err != nil {
			t.Fatal(err)
		}
		dead, err := b.leases.Register(ctx, "svc", vm(3), testTTL)
		if err != nil {
			t.Fatal(err)
		}
		var beating sync.WaitGroup
		bctx, stopBeats := context.WithCancel(ctx)
		beat := func(n *node, id string) {
			for bctx.Err() == nil {
				if _, err := n.leases.Heartbeat(id); err != nil {
					t.Errorf("%s.Heartbeat(%s) = %v", n.id, id, err)
					return
				}
				select {
				case <-bctx.Done():
				case <-time.After(testTTL / 3):
				}
			}
		}
		beating.Go(func() { beat(a, onA.ID) })
		beating.Go(func() { beat(b, onB.ID) })

		time.Sleep(10 * testTTL)
		synctest.Wait()
		for _, n := range []*node{a, b} {
			if n.has("svc", dead.EndpointID) {
				t.Errorf("%s still serves the lease nobody heartbeats", n.id)
			}
			for _, l := range []lease.Lease{onA, onB} {
				if !n.has("svc", l.EndpointID) {
					t.Errorf("%s dropped live lease %s", n.id, l.EndpointID)
				}
			}
		}
		if got := deletes(kv, "svc/"+dead.EndpointID); got != 1 {
			t.Errorf("deletes of the dead lease = %d, want 1", got)
		}
		if b.rep.MayExpire() {
			t.Errorf("b.MayExpire() = true while a holds the election")
		}

		// Handover to b, and another lease that nobody heartbeats.
		dead2, err := a.leases.Register(ctx, "svc", vm(4), testTTL)
		if err != nil {
			t.Fatal(err)
		}
		el.set("b")
		time.Sleep(testProbe)
		if b.rep.MayExpire() {
			t.Errorf("b.MayExpire() = true right after the handover, want false for Grace")
		}
		time.Sleep(10 * testTTL)
		synctest.Wait()
		if !b.rep.MayExpire() || a.rep.MayExpire() {
			t.Errorf("after the handover MayExpire a=%v b=%v, want false true", a.rep.MayExpire(), b.rep.MayExpire())
		}
		for _, l := range []lease.Lease{onA, onB} {
			if got := deletes(kv, "svc/"+l.EndpointID); got != 0 {
				t.Errorf("live lease %s deleted %d times", l.EndpointID, got)
			}
		}
		if got := deletes(kv, "svc/"+dead2.EndpointID); got != 1 {
			t.Errorf("deletes of the second dead lease = %d, want 1", got)
		}
		stopBeats()
		beating.Wait()
	})
}

// TestOutageExpiresNothing: while the store is unreachable nothing
// expires, not even a lease nobody heartbeats; leases heartbeated on a
// non-deciding replica during the outage survive its end; the silent one
// expires once after it.
func TestOutageExpiresNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		el := newOneElector("a")
		a, b := startNode(t, kv, "a", el), startNode(t, kv, "b", el)
		ctx := context.Background()
		var live []lease.Lease
		for i := range 20 {
			l, err := b.leases.Register(ctx, "svc", vm(10+i), testTTL)
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, l)
		}
		silent, err := a.leases.Register(ctx, "svc", vm(99), testTTL)
		if err != nil {
			t.Fatal(err)
		}
		bctx, stopBeats := context.WithCancel(ctx)
		var beating sync.WaitGroup
		beating.Go(func() {
			for bctx.Err() == nil {
				for _, l := range live {
					// During the outage the heartbeat is taken but not
					// shared: the agent would try another replica, all
					// as cut off as this one.
					if _, err := b.leases.Heartbeat(l.ID); err != nil && !errors.Is(err, lease.ErrNotShared) {
						t.Errorf("Heartbeat(%s) = %v", l.ID, err)
					}
				}
				select {
				case <-bctx.Done():
				case <-time.After(testTTL / 3):
				}
			}
		})
		time.Sleep(testProbe / 2)
		kv.Down.Store(true)
		time.Sleep(15 * testTTL)
		synctest.Wait()
		if !a.has("svc", silent.EndpointID) {
			t.Errorf("the silent lease expired during the outage")
		}
		if a.rep.MayExpire() {
			t.Errorf("a.MayExpire() = true during the outage")
		}
		kv.Down.Store(false)
		time.Sleep(10 * testTTL)
		synctest.Wait()
		for _, l := range live {
			if !a.has("svc", l.EndpointID) || !b.has("svc", l.EndpointID) {
				t.Errorf("live lease %s dropped after the outage", l.EndpointID)
			}
			if got := deletes(kv, "svc/"+l.EndpointID); got != 0 {
				t.Errorf("live lease %s deleted %d times", l.EndpointID, got)
			}
		}
		if got := deletes(kv, "svc/"+silent.EndpointID); got != 1 {
			t.Errorf("deletes of the silent lease after the outage = %d, want 1", got)
		}
		stopBeats()
		beating.Wait()
	})
}

// TestFlushBatchesHeartbeats measures store writes against heartbeats:
// 20,000 leases heartbeated once each cost one write per shard; a flush
// with no new heartbeat costs none.
func TestFlushBatchesHeartbeats(t *testing.T) {
	const leases = 20000
	m, ids := manyLeases(t, leases)
	kv := systemstoretest.NewMemKV()
	r, err := New(Config{KV: kv, Name: "memkv://test", ID: "a", Shards: 32})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Init(ctx, m); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		for _, id := range ids {
			if _, err := m.Heartbeat(id); err != nil {
				t.Fatal(err)
			}
		}
		before := kv.Writes.Load()
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := kv.Writes.Load() - before; got != 32 {
			t.Errorf("round %d: %d heartbeats cost %d store writes, want 32 (one per shard)", round, leases, got)
		}
		before = kv.Writes.Load()
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := kv.Writes.Load() - before; got != 0 {
			t.Errorf("round %d: a flush without heartbeats cost %d writes, want 0", round, got)
		}
	}
	if got := kv.KeysUnder(LastSeenPrefix + "a/"); got != 32 {
		t.Errorf("stamp shards stored = %d, want 32", got)
	}
}

// TestStampsChunkedUnderTheLimit (issue 27, point 6), with the value
// limit lowered to 4 KiB so that 20,000 leases need what 2M would at the
// real limit: every stored value stays under the limit, the values under
// the replica's prefix hold every stamp (readers take every value there,
// whatever its key), and when leases go the chunks past the new count
// are deleted.
func TestStampsChunkedUnderTheLimit(t *testing.T) {
	const leases, limit = 20000, 4096
	m, ids := manyLeases(t, leases)
	kv := systemstoretest.NewMemKV()
	r, err := New(Config{KV: kv, Name: "memkv://test", ID: "a", Shards: 4, ValueBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Init(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := m.Heartbeat(id); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() (map[string]int64, int) {
		t.Helper()
		kvs, _, err := kv.List(ctx, LastSeenPrefix+"a/")
		if err != nil {
			t.Fatal(err)
		}
		all := map[string]int64{}
		for _, e := range kvs {
			if len(e.Value) > limit {
				t.Errorf("%s: %d bytes, over the limit of %d", e.Key, len(e.Value), limit)
			}
			var v stamps
			if err := json.Unmarshal(e.Value, &v); err != nil {
				t.Fatalf("%s: %v", e.Key, err)
			}
			for id, ns := range v.Stamps {
				if _, dup := all[id]; dup {
					t.Errorf("lease %s in two values", id)
				}
				all[id] = ns
			}
		}
		return all, len(kvs)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all, keys := stored()
	if len(all) != leases {
		t.Errorf("stored stamps = %d, want %d", len(all), leases)
	}
	if keys <= 4 {
		t.Errorf("values = %d, want the 4 shards split further", keys)
	}
	t.Logf("%d leases in %d values of at most %d bytes", leases, keys, limit)

	// Most leases go: their shards shrink, and the chunks past the new
	// count are deleted.
	for _, id := range ids[:leases*9/10] {
		if _, err := m.Deregister(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	after, fewer := stored()
	if len(after) != leases/10 {
		t.Errorf("stored stamps after deregistering 90%% = %d, want %d", len(after), leases/10)
	}
	for _, id := range ids[leases*9/10:] {
		if _, ok := after[id]; !ok {
			t.Fatalf("lease %s still live but its stamp is gone", id)
		}
	}
	if fewer >= keys {
		t.Errorf("values after the shrink = %d, want fewer than %d", fewer, keys)
	}
	// A lease id that cannot fit any value is refused, naming it.
	if _, err := chunkStamps([]stamp{{id: strings.Repeat("x", limit), ns: 1}}, limit); !errors.Is(err, systemstore.ErrInvalid) {
		t.Errorf("chunkStamps of an id longer than a value = %v, want ErrInvalid", err)
	}
}

// TestStampsChunkedOnEtcd: at the default value bound, one shard of
// 40,000 leases (about 2.4 MB of stamps, more than a value or an etcd
// request may hold) is written to a real etcd in values it takes; read
// back, they hold every stamp. Before chunking this flush failed.
func TestStampsChunkedOnEtcd(t *testing.T) {
	const leases = 40000
	srv := etcdtest.Start(t)
	kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/stamps-test/", RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	m, err := lease.New(lease.Config{Store: registry.NewStore(), Storage: systemstore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{KV: kv, Name: "etcd", ID: "a", Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Init first: it makes the manager hold what etcd holds (nothing);
	// the leases are this replica's from then on.
	if err := r.Init(ctx, m); err != nil {
		t.Fatal(err)
	}
	for i := range leases {
		l, err := m.Register(ctx, fmt.Sprintf("svc-%d", i%100), vm(i), 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Heartbeat(l.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush of %d leases in one shard: %v", leases, err)
	}
	kvs, _, err := kv.List(ctx, LastSeenPrefix+"a/")
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, e := range kvs {
		var v stamps
		if err := json.Unmarshal(e.Value, &v); err != nil {
			t.Fatalf("%s: %v", e.Key, err)
		}
		got += len(v.Stamps)
	}
	if got != leases || len(kvs) < 2 {
		t.Errorf("etcd holds %d stamps in %d values, want %d in at least 2", got, len(kvs), leases)
	}
	t.Logf("%d leases of one shard in %d etcd values", leases, len(kvs))
}

// manyLeases registers n leases in a lease manager over memory storage.
func manyLeases(tb testing.TB, n int) (*lease.Manager, []string) {
	tb.Helper()
	m, err := lease.New(lease.Config{Store: registry.NewStore(), Storage: systemstore.NewMemory()})
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, n)
	for i := range n {
		l, err := m.Register(context.Background(), fmt.Sprintf("svc-%d", i%100), vm(i), 0)
		if err != nil {
			tb.Fatal(err)
		}
		ids[i] = l.ID
	}
	return m, ids
}

// BenchmarkHeartbeatsVsWrites: a 100,000-VM fleet heartbeating every 10 s
// on one replica (10,000 heartbeats/s), flushed every 10 s: the store
// writes per second it costs, reported as writes/s next to heartbeats/s.
func BenchmarkHeartbeatsVsWrites(b *testing.B) {
	const leases = 100000
	const interval = 10 // seconds between heartbeats, and between flushes
	m, ids := manyLeases(b, leases)
	kv := systemstoretest.NewMemKV()
	r, err := New(Config{KV: kv, Name: "memkv://bench", ID: "a"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Init(ctx, m); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		for _, id := range ids {
			m.Heartbeat(id)
		}
		if err := r.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	rounds := float64(b.N)
	b.ReportMetric(leases/interval, "heartbeats/s")
	b.ReportMetric(float64(kv.Writes.Load())/rounds/interval, "writes/s")
}

func encode(r systemstore.Record) ([]byte, error) { return json.Marshal(r) }

// TestGoneReplicaStampsDeleted: the decider deletes the stamp values of a
// replica none of whose stamps is younger than MaxTTL plus Grace; a live
// replica's stay.
func TestGoneReplicaStampsDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		el := newOneElector("a")
		startNode(t, kv, "a", el) // the decider
		b := startNode(t, kv, "b", el)
		l, err := b.leases.Register(context.Background(), "svc", vm(1), 0)
		if err != nil {
			t.Fatal(err)
		}
		gone, _ := json.Marshal(stamps{Stamps: map[string]int64{"0000000000000001": time.Now().UnixNano()}})
		if _, err := kv.Put(context.Background(), LastSeenPrefix+"gone-pod/000", gone); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			b.leases.Heartbeat(l.ID)
		}
		synctest.Wait()
		if got := kv.KeysUnder(LastSeenPrefix + "gone-pod/"); got != 0 {
			t.Errorf("gone replica's stamp values = %d, want 0", got)
		}
		if got := kv.KeysUnder(LastSeenPrefix + "b/"); got != 1 {
			t.Errorf("live replica b's stamp values = %d, want 1", got)
		}
	})
}

// TestExpiryOfRecordGoneFromStore: a lease whose record left the store
// without its delete event reaching this replica (lost to compaction) is
// dropped by the decider's expiry when it falls due, without a second
// delete in the store.
func TestExpiryOfRecordGoneFromStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		a := startNode(t, kv, "a", newOneElector("a"))
		l, err := a.leases.Register(context.Background(), "svc", vm(1), testTTL)
		if err != nil {
			t.Fatal(err)
		}
		kv.DeleteUnseen(systemstore.RegistrationsPrefix + "svc/" + l.EndpointID)
		time.Sleep(5 * testTTL)
		synctest.Wait()
		if a.has("svc", l.EndpointID) {
			t.Errorf("a still serves a lease gone from the store, past its TTL")
		}
		if got := deletes(kv, "svc/"+l.EndpointID); got != 0 {
			t.Errorf("delete events = %d, want 0", got)
		}
	})
}

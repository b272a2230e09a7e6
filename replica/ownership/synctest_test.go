package ownership

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry/systemstore"
)

const fakeTTL = 5 * time.Second

// fakeInst starts a replica on m with fake elections and its clock off
// by skew.
func fakeInst(t *testing.T, m *memKV, els *elections, id string, skew time.Duration, h *history) *inst {
	t.Helper()
	c := m.client()
	o, err := New(Config{
		KV: c, ID: id, GRPCAddr: "127.0.0.1:" + id, TTL: fakeTTL,
		Elect:      func(name string) (systemstore.Elector, error) { return &elector{e: els, name: name, c: c}, nil },
		Logger:     slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", id),
		Registerer: prometheus.NewRegistry(),
		Now:        func() time.Time { return time.Now().Add(skew) },
	})
	if err != nil {
		t.Fatal(err)
	}
	o.onTransition = h.hook(id)
	in := &inst{id: id, o: o, kv: c}
	in.run()
	return in
}

func memberIDs(o *Owners) []string {
	var ids []string
	for _, m := range o.Members() {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestSkewAndKill (fake time): replicas whose clocks are an hour apart
// agree on the members and on one holder per shard, since each judges
// liveness by its own clock; a killed replica counts as live until TTL
// after its last heartbeat was seen, and its shards move when its
// election holds expire, TTL after its death.
func TestSkewAndKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, els, h := newMemKV(), newElections(fakeTTL), &history{}
		a := fakeInst(t, m, els, "a", 0, h)
		b := fakeInst(t, m, els, "b", time.Hour, h)
		c := fakeInst(t, m, els, "c", -time.Hour, h)
		time.Sleep(2 * fakeTTL)
		synctest.Wait()
		all := []*inst{a, b, c}
		if msg := settledState(all); msg != "" {
			t.Fatalf("after 2×TTL: %s", msg)
		}
		for _, in := range all {
			if got := memberIDs(in.o); !slices.Equal(got, []string{"a", "b", "c"}) {
				t.Errorf("%s: Members() = %v, want a b c", in.id, got)
			}
		}
		lost := b.o.Owned()
		if len(lost) == 0 {
			t.Fatalf("b owns nothing: %v", counts(all))
		}

		b.kill()
		b.cancel = nil
		<-b.done
		rest := []*inst{a, c}
		time.Sleep(fakeTTL / 2)
		synctest.Wait()
		for _, in := range rest {
			if got := memberIDs(in.o); !slices.Contains(got, "b") {
				t.Errorf("%s: TTL/2 after b died, Members() = %v; b's last heartbeat is under TTL old", in.id, got)
			}
			for _, s := range lost {
				if in.o.OwnsShard(s) {
					t.Errorf("%s owns b's shard %d TTL/2 after b died, while b's hold lasts TTL", in.id, s)
				}
			}
		}
		time.Sleep(fakeTTL/2 + fakeTTL/5)
		synctest.Wait()
		if msg := settledState(rest); msg != "" {
			t.Errorf("TTL+TTL/5 after b died: %s", msg)
		}
		for _, in := range rest {
			if got := memberIDs(in.o); !slices.Equal(got, []string{in.id}) && !slices.Equal(got, []string{"a", "c"}) {
				t.Errorf("%s: Members() = %v, want a c", in.id, got)
			}
		}
		a.stop(t)
		c.stop(t)
		h.check(t)
	})
}

// TestOrphanGuard (fake time): a member that heartbeats but never
// campaigns ranks first for some shards; after 2×TTL without a holder
// the second-ranked replicas take them.
func TestOrphanGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, els, h := newMemKV(), newElections(fakeTTL), &history{}
		ghost := m.client()
		ctx, cancel := context.WithCancel(context.Background())
		beat := make(chan struct{})
		go func() {
			defer close(beat)
			for ctx.Err() == nil {
				b, _ := json.Marshal(memberRecord{Member: Member{ID: "ghost", Started: time.Now()}})
				ghost.Put(ctx, MembersPrefix+"ghost", b)
				select {
				case <-ctx.Done():
				case <-time.After(fakeTTL / 3):
				}
			}
		}()
		a := fakeInst(t, m, els, "a", 0, h)
		b := fakeInst(t, m, els, "b", 0, h)
		all := []*inst{a, b}
		time.Sleep(fakeTTL)
		synctest.Wait()
		ghostShards := 0
		for s, id := range assign([]string{"a", "b", "ghost"}, DefaultShards).first {
			if id != "ghost" {
				continue
			}
			ghostShards++
			if a.o.OwnsShard(s) || b.o.OwnsShard(s) {
				t.Errorf("shard %d, the ghost's, held after TTL (before the 2×TTL guard)", s)
			}
		}
		if ghostShards == 0 {
			t.Fatal("the ghost ranks first for no shard; pick another id")
		}
		time.Sleep(2*fakeTTL + fakeTTL/5)
		synctest.Wait()
		if msg := settledState(all); msg != "" {
			t.Errorf("3×TTL after start, with a ghost member ranked first for %d shards: %s", ghostShards, msg)
		}
		t.Logf("ghost ranked first for %d shards; taken by the second-ranked: %v", ghostShards, counts(all))
		cancel()
		<-beat
		a.stop(t)
		b.stop(t)
		h.check(t)
	})
}

// TestMaxVersionAndSettled (fake time): a member record publishes the
// replica's MaxVersion, one of the previous release (no field) reads as
// 0; Members lists every live member only once Settled, TTL/2 after
// Run starts; StoredMembers reads both records with their expiry.
func TestMaxVersionAndSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, els := newMemKV(), newElections(fakeTTL)
		old := m.client()
		ctx, cancel := context.WithCancel(context.Background())
		beat := make(chan struct{})
		go func() { // a replica of a770d6c: its record has no max_version
			defer close(beat)
			for ctx.Err() == nil {
				now := time.Now()
				b, _ := json.Marshal(map[string]any{"id": "old", "grpc_addr": "127.0.0.1:1", "started": now, "expires": now.Add(fakeTTL)})
				old.Put(ctx, MembersPrefix+"old", b)
				select {
				case <-ctx.Done():
				case <-time.After(fakeTTL / 3):
				}
			}
		}()
		c := m.client()
		o, err := New(Config{
			KV: c, ID: "new", GRPCAddr: "127.0.0.1:2", TTL: fakeTTL, MaxVersion: 2,
			Elect:  func(name string) (systemstore.Elector, error) { return &elector{e: els, name: name, c: c}, nil },
			Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			t.Fatal(err)
		}
		in := &inst{id: "new", o: o, kv: c}
		in.run()
		synctest.Wait()
		if o.Settled() {
			t.Errorf("Settled() = true at start, before TTL/2 of watching")
		}
		time.Sleep(fakeTTL/2 + fakeTTL/5)
		synctest.Wait()
		if !o.Settled() {
			t.Errorf("Settled() = false TTL/2+TTL/5 after start")
		}
		got := map[string]int{}
		for _, mb := range o.Members() {
			got[mb.ID] = mb.MaxVersion
		}
		if want := map[string]int{"new": 2, "old": 0}; !maps.Equal(got, want) {
			t.Errorf("Members() max versions = %v, want %v", got, want)
		}
		stored, err := StoredMembers(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int{}
		for _, sm := range stored {
			got[sm.ID] = sm.MaxVersion
			if !sm.Expires.After(time.Now()) {
				t.Errorf("StoredMembers: %s expires %v, want after now", sm.ID, sm.Expires)
			}
		}
		if want := map[string]int{"new": 2, "old": 0}; !maps.Equal(got, want) {
			t.Errorf("StoredMembers() max versions = %v, want %v", got, want)
		}
		cancel()
		<-beat
		in.stop(t)
	})
}

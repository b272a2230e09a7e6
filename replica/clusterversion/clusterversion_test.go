package clusterversion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/spillway/spillway/internal/testwait"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/replica/ownership"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeMembers is a Members whose live members the test sets.
type fakeMembers struct {
	mu        sync.Mutex // guards the fields below
	ms        []ownership.Member
	unsettled bool
}

func (f *fakeMembers) Members() []ownership.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ms
}

func (f *fakeMembers) Settled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unsettled
}

func (f *fakeMembers) set(ms ...ownership.Member) {
	f.mu.Lock()
	f.ms = ms
	f.mu.Unlock()
}

func (f *fakeMembers) settle(ok bool) {
	f.mu.Lock()
	f.unsettled = !ok
	f.mu.Unlock()
}

// logCount counts the log messages of a Versions, by message, and
// passes them to the test log.
type logCount struct {
	counts *counts
	next   slog.Handler
}

type counts struct {
	mu sync.Mutex // guards n
	n  map[string]int
}

func newLogCount(t *testing.T) *logCount {
	return &logCount{counts: &counts{n: map[string]int{}}, next: slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})}
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) Handle(ctx context.Context, r slog.Record) error {
	l.counts.mu.Lock()
	l.counts.n[r.Message]++
	l.counts.mu.Unlock()
	return l.next.Handle(ctx, r)
}
func (l *logCount) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCount{l.counts, l.next.WithAttrs(as)}
}
func (l *logCount) WithGroup(string) slog.Handler { return l }

func (l *logCount) count(msg string) int {
	l.counts.mu.Lock()
	defer l.counts.mu.Unlock()
	return l.counts.n[msg]
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

const testInterval = 10 * time.Millisecond

func newVersions(t *testing.T, kv systemstore.KV, id string, log *logCount) *Versions {
	t.Helper()
	var h slog.Handler = slog.DiscardHandler
	if log != nil {
		h = log
	}
	v, err := New(Config{KV: kv, ID: id, Interval: testInterval, Logger: slog.New(h).With("replica", id)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// run starts v.Run with members until the test ends; the returned
// channel has its result.
func run(t *testing.T, v *Versions, members Members) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- v.Run(ctx, members); close(finished) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return 10s after its context ended")
		}
	})
	return done
}

func member(id string, maxVersion int) ownership.Member {
	return ownership.Member{ID: id, GRPCAddr: "127.0.0.1:1", MaxVersion: maxVersion}
}

func stored(t *testing.T, kv systemstore.KV) (Record, int64) {
	t.Helper()
	b, rev, err := kv.Get(context.Background(), Key)
	if err != nil {
		t.Fatalf("Get(%s): %v", Key, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r, rev
}

// putMember writes a member record as ownership does (expires at exp),
// maxVersion 0 writing none, as a770d6c.
func putMember(t *testing.T, kv systemstore.KV, id string, maxVersion int, exp time.Time) {
	t.Helper()
	rec := map[string]any{"id": id, "grpc_addr": "127.0.0.1:1", "started": exp.Add(-time.Hour), "expires": exp}
	if maxVersion != 0 {
		rec["max_version"] = maxVersion
	}
	b, _ := json.Marshal(rec)
	if _, err := kv.Put(context.Background(), ownership.MembersPrefix+id, b); err != nil {
		t.Fatal(err)
	}
}

func TestNext(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		rec      Record
		live     []ownership.Member
		next     int
		whyHas   []string
		whyEmpty bool
	}{
		{"every_member_supports_2", Record{Version: 1}, []ownership.Member{member("a", 2), member("b", 2)}, 2, nil, true},
		{"a_field_less_member_blocks", Record{Version: 1}, []ownership.Member{member("a", 2), member("old", 0)}, 0, []string{"old (supports 1)"}, false},
		{"an_old_member_blocks", Record{Version: 1}, []ownership.Member{member("a", 1), member("b", 2)}, 0, []string{"a (supports 1)"}, false},
		{"a_negative_max_reads_as_baseline", Record{Version: 1}, []ownership.Member{member("a", -5)}, 0, []string{"a (supports 1)"}, false},
		{"a_newer_member_does_not_block", Record{Version: 1}, []ownership.Member{member("a", 2), member("b", 7)}, 2, nil, true},
		{"hold", Record{Version: 1, Hold: true, HoldBy: "admin", HoldAt: at}, []ownership.Member{member("a", 2)}, 0, []string{"held by admin since 2026-12-05T10:00:00Z", "release"}, false},
		{"hold_and_an_old_member", Record{Version: 1, Hold: true, HoldBy: "admin"}, []ownership.Member{member("a", 2), member("old", 0)}, 0, []string{"held by admin", "old (supports 1)"}, false},
		{"at_current", Record{Version: Current}, []ownership.Member{member("a", 2)}, 0, nil, true},
		{"above_current", Record{Version: Current + 1}, []ownership.Member{member("a", 9)}, 0, nil, true},
		{"no_members", Record{Version: 1}, nil, 0, []string{"no live member"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, why := Next(tc.rec, tc.live)
			if next != tc.next {
				t.Errorf("Next = %d (%q), want %d", next, why, tc.next)
			}
			if tc.whyEmpty && why != "" {
				t.Errorf("why = %q, want empty", why)
			}
			for _, w := range tc.whyHas {
				if !strings.Contains(why, w) {
					t.Errorf("why = %q, want it to name %q", why, w)
				}
			}
		})
	}
}

// TestFinalisesOnlyWhenEveryLiveMemberSupports: a live member of the
// previous release (no max_version) holds the version at 1; once it is
// gone from the live members (or upgraded), the version becomes 2,
// finalised by the replica that raised it.
func TestFinalisesOnlyWhenEveryLiveMemberSupports(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	v := newVersions(t, kv, "a", newLogCount(t))
	if err := v.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	members := &fakeMembers{}
	members.set(member("a", 2), member("old", 0))
	run(t, v, members)
	testwait.For(t, 10*time.Second, "the old member named as what finalisation waits for", func() (bool, string) {
		w := v.Waiting()
		return strings.Contains(w, "old (supports 1)"), w
	})
	if v.Version() != 1 || v.Active(StrictSenderBinding) {
		t.Fatalf("Version = %d with an old member live, want 1", v.Version())
	}
	if _, _, err := kv.Get(context.Background(), Key); !errors.Is(err, systemstore.ErrNotFound) {
		t.Errorf("%s written while an old member is live: %v", Key, err)
	}

	members.set(member("a", 2)) // old is gone
	testwait.For(t, 10*time.Second, "version 2", func() (bool, string) { return v.Version() == 2, fmt.Sprint(v.Version(), v.Waiting()) })
	rec, rev := stored(t, kv)
	if rec.Version != 2 || rec.By != "a" || rec.At.IsZero() || rec.Hold || rev == 0 {
		t.Errorf("stored record = %+v at %d, want version 2 by a", rec, rev)
	}
	if !v.Active(StrictSenderBinding) || v.Active(Current+1) {
		t.Errorf("Active(2) = %v, Active(3) = %v; want true, false", v.Active(StrictSenderBinding), v.Active(Current+1))
	}
}

// TestMemberRecordsInTheStore: a member record that has not expired
// blocks even when this replica's view lacks it (its watch has not
// heard it yet); an expired one (a killed replica, before it is reaped)
// does not.
func TestMemberRecordsInTheStore(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	putMember(t, kv, "dead", 0, time.Now().Add(-time.Minute))
	putMember(t, kv, "unseen", 0, time.Now().Add(time.Hour))
	v := newVersions(t, kv, "a", nil)
	members := &fakeMembers{}
	members.set(member("a", 2))
	run(t, v, members)
	testwait.For(t, 10*time.Second, "the unexpired record named", func() (bool, string) {
		w := v.Waiting()
		return strings.Contains(w, "unseen (supports 1") && !strings.Contains(w, "dead"), w
	})
	if v.Version() != 1 {
		t.Fatalf("Version = %d with an unexpired old record, want 1", v.Version())
	}
	putMember(t, kv, "unseen", 0, time.Now().Add(-time.Second))
	testwait.For(t, 10*time.Second, "version 2", func() (bool, string) { return v.Version() == 2, v.Waiting() })
}

// TestHoldBlocksReleaseFinalises: with every member on this release, a
// hold keeps the version at 1 (rollback possible); releasing it
// finalises.
func TestHoldBlocksReleaseFinalises(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	v := newVersions(t, kv, "a", nil)
	ctx := context.Background()
	st, err := v.SetHold(ctx, true, "admin", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Hold || st.Version != 1 || st.HoldBy != "admin" || st.Rev == 0 {
		t.Errorf("SetHold(true) = %+v, want version 1 held by admin", st)
	}
	members := &fakeMembers{}
	members.set(member("a", 2), member("b", 2))
	run(t, v, members)
	testwait.For(t, 10*time.Second, "the hold named as what finalisation waits for", func() (bool, string) {
		w := v.Waiting()
		return strings.Contains(w, "held by admin"), w
	})
	if v.Version() != 1 {
		t.Fatalf("Version = %d while held, want 1", v.Version())
	}
	again, err := v.SetHold(ctx, true, "someone", nil)
	if err != nil || again.Rev != st.Rev || again.HoldBy != "admin" {
		t.Errorf("SetHold(true) again = %+v, %v; want no write (revision %d, by admin)", again, err, st.Rev)
	}
	if _, err := v.SetHold(ctx, false, "admin", nil); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "version 2 after the release", func() (bool, string) { return v.Version() == 2, v.Waiting() })
	rec, _ := stored(t, kv)
	if rec.Hold || rec.HoldBy != "admin" || rec.Version != 2 || rec.By != "a" {
		t.Errorf("stored = %+v, want version 2 by a, hold released by admin", rec)
	}
	// A hold after finalisation keeps 2: the version never goes down.
	if st, err := v.SetHold(ctx, true, "admin", nil); err != nil || st.Version != 2 {
		t.Errorf("SetHold(true) after finalisation = %+v, %v; want version 2 held", st, err)
	}
}

// TestNeverGoesDown: a key deleted (or overwritten lower) by hand does
// not lower the version in force, and Run writes it back.
func TestNeverGoesDown(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	logs := newLogCount(t)
	v := newVersions(t, kv, "a", logs)
	members := &fakeMembers{}
	members.set(member("a", 2))
	run(t, v, members)
	testwait.For(t, 10*time.Second, "version 2", func() (bool, string) { return v.Version() == 2, v.Waiting() })
	_, before := stored(t, kv)
	if _, err := kv.Delete(context.Background(), Key); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the version written back", func() (bool, string) {
		b, rev, err := kv.Get(context.Background(), Key)
		return err == nil && rev > before && strings.Contains(string(b), `"version":2`), fmt.Sprint(string(b), err)
	})
	if v.Version() != 2 {
		t.Errorf("Version = %d after the key was deleted, want 2", v.Version())
	}
	if logs.count("the stored cluster version is below the one in force (the key was deleted or overwritten outside spillway); keeping it, and writing it back") == 0 {
		t.Errorf("the lowered record was not logged")
	}
}

// TestRacingReplicasRaiseOnce: replicas that may all raise the version
// at once write it once between them; the others read the winner's.
func TestRacingReplicasRaiseOnce(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	members := &fakeMembers{}
	members.set(member("a", 2), member("b", 2), member("c", 2))
	var vs []*Versions
	for _, id := range []string{"a", "b", "c"} {
		vs = append(vs, newVersions(t, kv, id, nil))
	}
	for _, v := range vs {
		run(t, v, members)
	}
	testwait.For(t, 10*time.Second, "version 2 on every replica", func() (bool, string) {
		var got []int
		ok := true
		for _, v := range vs {
			got = append(got, v.Version())
			ok = ok && v.Version() == 2
		}
		return ok, fmt.Sprint(got)
	})
	writes := 0
	for _, ev := range kv.Events() {
		if ev.Key == Key && ev.Type == systemstore.EventPut {
			writes++
		}
	}
	if writes != 1 {
		t.Errorf("%s written %d times, want once", Key, writes)
	}
}

// TestNotSettled: a replica whose view of the members has not settled
// (it just started) does not raise the version.
func TestNotSettled(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	v := newVersions(t, kv, "a", nil)
	members := &fakeMembers{}
	members.set(member("a", 2))
	members.settle(false)
	run(t, v, members)
	testwait.For(t, 10*time.Second, "waiting for the view to settle", func() (bool, string) {
		w := v.Waiting()
		return strings.Contains(w, "not yet seen every live member"), w
	})
	if v.Version() != 1 {
		t.Fatalf("Version = %d before the view settled, want 1", v.Version())
	}
	members.settle(true)
	testwait.For(t, 10*time.Second, "version 2", func() (bool, string) { return v.Version() == 2, v.Waiting() })
}

// TestFollowOnly: a replica outside the mesh (members nil) never raises
// the version, and follows what another replica finalised.
func TestFollowOnly(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	follower := newVersions(t, kv, "f", nil)
	run(t, follower, nil)
	testwait.For(t, 10*time.Second, "the follower says why", func() (bool, string) {
		w := follower.Waiting()
		return strings.Contains(w, "no member record"), w
	})
	if follower.Version() != 1 {
		t.Fatalf("follower Version = %d, want 1", follower.Version())
	}
	members := &fakeMembers{}
	members.set(member("a", 2))
	run(t, newVersions(t, kv, "a", nil), members)
	testwait.For(t, 10*time.Second, "the follower at 2", func() (bool, string) { return follower.Version() == 2, follower.Waiting() })
}

// TestStartupRefusal: a binary below the store's version refuses to
// start, naming both versions, who finalised it, when, and what to do;
// one that sees it while running stops.
func TestStartupRefusal(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	ctx := context.Background()
	if _, err := kv.Put(ctx, Key, []byte(`{"version":3,"hold":false,"at":"2027-01-02T03:04:05Z","by":"r9"}`)); err != nil {
		t.Fatal(err)
	}
	v := newVersions(t, kv, "a", nil)
	err := v.Init(ctx)
	want := "this binary supports cluster version 2; the store's cluster version is 3, finalised by r9 at 2027-01-02T03:04:05Z (cluster/version): run a release that supports 3"
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("Init = %v, want ErrUnsupported saying %q", err, want)
	}
	if _, err := v.SetHold(ctx, true, "admin", nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("SetHold on a newer store = %v, want ErrUnsupported", err)
	}

	// Running at 1, the store moves to 3 under it.
	kv2 := systemstoretest.NewMemKV()
	defer kv2.Close()
	v2 := newVersions(t, kv2, "a", nil)
	if err := v2.Init(ctx); err != nil {
		t.Fatal(err)
	}
	members := &fakeMembers{}
	members.set(member("a", 2), member("old", 1))
	done := run(t, v2, members)
	if _, err := kv2.Put(ctx, Key, []byte(`{"version":3,"by":"r9"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "run a release that supports 3") {
			t.Errorf("Run = %v, want ErrUnsupported", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after the store moved to version 3")
	}
}

// TestInvalidRecord: a record that does not decode, or names a version
// below 1, refuses the start naming the key and the field.
func TestInvalidRecord(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"not_json", `{"version":`, "cluster version record cluster/version"},
		{"zero", `{"version":0}`, "version: 0, want 1 or more"},
		{"string", `{"version":"2"}`, "cluster version record cluster/version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := systemstoretest.NewMemKV()
			defer kv.Close()
			if _, err := kv.Put(context.Background(), Key, []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			err := newVersions(t, kv, "a", nil).Init(context.Background())
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Init = %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

// TestSetHoldConditional: with a revision, a hold applies only while the
// record is still at it; fields a later release added are kept.
func TestSetHoldConditional(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	ctx := context.Background()
	v := newVersions(t, kv, "a", nil)
	none := int64(0)
	st, err := v.SetHold(ctx, true, "admin", &none)
	if err != nil || !st.Hold {
		t.Fatalf("SetHold(true, if none) = %+v, %v", st, err)
	}
	stale := st.Rev + 100
	if _, err := v.SetHold(ctx, false, "admin", &stale); !errors.Is(err, systemstore.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("the current one is %d", st.Rev)) {
		t.Errorf("SetHold(false, if %d) = %v, want ErrConflict naming revision %d", stale, err, st.Rev)
	}
	if _, err := v.SetHold(ctx, false, "admin", &none); !errors.Is(err, systemstore.ErrConflict) {
		t.Errorf("SetHold(false, if none) with a record = %v, want ErrConflict", err)
	}
	if rec, _ := stored(t, kv); !rec.Hold {
		t.Errorf("a refused release changed the record: %+v", rec)
	}
	// A later release's field survives this release's writes.
	if _, err := kv.Put(ctx, Key, []byte(`{"version":1,"hold":true,"future":{"x":1}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.SetHold(ctx, false, "admin", nil); err != nil {
		t.Fatal(err)
	}
	b, _, _ := kv.Get(ctx, Key)
	if !strings.Contains(string(b), `"future":{"x":1}`) || !strings.Contains(string(b), `"hold":false`) {
		t.Errorf("stored %s, want the future field kept and the hold off", b)
	}
}

// TestSingleReplica: with no shared store the binary's version is in
// force at once, nothing is stored, nothing can be held.
func TestSingleReplica(t *testing.T) {
	reg := prometheus.NewRegistry()
	v, err := New(Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v.Version() != Current || !v.Active(StrictSenderBinding) || v.Shared() {
		t.Errorf("Version = %d, Shared = %v; want %d, false", v.Version(), v.Shared(), Current)
	}
	if _, err := v.SetHold(context.Background(), true, "admin", nil); !errors.Is(err, ErrNotShared) {
		t.Errorf("SetHold = %v, want ErrNotShared", err)
	}
	if got := gauge(t, reg, "spillway_cluster_version"); got != Current {
		t.Errorf("spillway_cluster_version = %v, want %d", got, Current)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := v.Run(ctx, nil); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// TestMetrics: the gauges follow the version and the hold.
func TestMetrics(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	reg := prometheus.NewRegistry()
	v, err := New(Config{KV: kv, ID: "a", Interval: testInterval, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.SetHold(context.Background(), true, "admin", nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"spillway_cluster_version": 1, "spillway_cluster_version_held": 1, "spillway_cluster_version_supported": Current} {
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// gauge returns the value of the gauge named name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestNewValidates(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no_id", Config{KV: kv}, "ID"},
		{"negative_interval", Config{KV: kv, ID: "a", Interval: -time.Second}, "Interval"},
		{"no_conditional_write", Config{KV: noCond{kv}, ID: "a"}, "PutIf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// noCond hides a KV's PutIf.
type noCond struct{ systemstore.KV }

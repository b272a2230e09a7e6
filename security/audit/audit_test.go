package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/peer"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/authn"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newLog(t *testing.T, cfg Config) *Log {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func adminCtx() context.Context {
	ctx := authn.NewContext(context.Background(), authn.Identity{Name: "admin", Method: authn.Token})
	return WithPeer(ctx, "127.0.0.1:5555")
}

// TestRecordList records entries over every backend and lists them back:
// newest first, identity and peer from the context, since and limit.
func TestRecordList(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   func() systemstore.KV
	}{
		{"memoryRing", func() systemstore.KV { return nil }},
		{"memKV", func() systemstore.KV { return systemstoretest.NewMemKV() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{t: t0}
			l := newLog(t, Config{KV: tc.kv(), Replica: "r1", Now: clk.Now})
			ctx := adminCtx()
			l.Record(ctx, Entry{Action: "panic", Old: "off", New: "on"})
			clk.Add(time.Second)
			l.Record(ctx, Entry{Action: "rollout", Old: "version 1", New: "version 2"})
			clk.Add(time.Second)
			l.Record(context.Background(), Entry{Action: "register", Resource: "checkout", Outcome: OutcomeDenied, Reason: "permission denied"})

			got, err := l.List(context.Background(), time.Time{}, 10)
			if err != nil {
				t.Fatal(err)
			}
			want := []Entry{
				{Time: t0.Add(2 * time.Second), Identity: "anonymous", Method: "none", Action: "register", Resource: "checkout", Outcome: OutcomeDenied, Reason: "permission denied", Replica: "r1"},
				{Time: t0.Add(time.Second), Identity: "admin", Method: "token", Peer: "127.0.0.1:5555", Action: "rollout", Outcome: OutcomeAllowed, Old: "version 1", New: "version 2", Replica: "r1"},
				{Time: t0, Identity: "admin", Method: "token", Peer: "127.0.0.1:5555", Action: "panic", Outcome: OutcomeAllowed, Old: "off", New: "on", Replica: "r1"},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
			got, _ = l.List(context.Background(), t0.Add(time.Second), 10)
			if len(got) != 2 || got[1].Action != "rollout" {
				t.Errorf("List(since t0+1s) = %v, want register and rollout", got)
			}
			got, _ = l.List(context.Background(), time.Time{}, 1)
			if len(got) != 1 || got[0].Action != "register" {
				t.Errorf("List(limit 1) = %v, want the newest (register)", got)
			}
			for _, n := range []int{0, -1, MaxLimit + 1} {
				if _, err := l.List(context.Background(), time.Time{}, n); err == nil || !strings.Contains(err.Error(), "limit") {
					t.Errorf("List(limit %d) error = %v, want one naming limit", n, err)
				}
			}
		})
	}
}

// TestPeerFromGRPC: without WithPeer, the gRPC peer's address is used.
func TestPeerFromGRPC(t *testing.T) {
	l := newLog(t, Config{Replica: "r1"})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 4242}})
	l.Record(ctx, Entry{Action: "panic"})
	got, _ := l.List(ctx, time.Time{}, 1)
	if len(got) != 1 || got[0].Peer != "127.0.0.9:4242" {
		t.Errorf("List = %v, want peer 127.0.0.9:4242", got)
	}
}

// twoReplicas records on two Logs over one store and checks that each
// lists the other's entries too, in time order.
func twoReplicas(t *testing.T, kvA, kvB systemstore.KV) {
	t.Helper()
	clk := &clock{t: t0}
	a := newLog(t, Config{KV: kvA, Replica: "replica-a", Now: clk.Now})
	b := newLog(t, Config{KV: kvB, Replica: "replica-b", Now: clk.Now})
	ctx := adminCtx()
	for i := range 3 {
		a.Record(ctx, Entry{Action: "panic", New: fmt.Sprint("a", i)})
		clk.Add(time.Millisecond)
		b.Record(ctx, Entry{Action: "rollout", New: fmt.Sprint("b", i)})
		clk.Add(time.Millisecond)
	}
	// Two entries in the same nanosecond on one replica keep both.
	a.Record(ctx, Entry{Action: "config", Resource: "cart", New: "x"})
	a.Record(ctx, Entry{Action: "config", Resource: "cart", New: "y"})
	for _, l := range []*Log{a, b} {
		got, err := l.List(context.Background(), time.Time{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		var news []string
		for _, e := range got {
			news = append(news, e.New)
		}
		want := []string{"y", "x", "b2", "a2", "b1", "a1", "b0", "a0"}
		if diff := cmp.Diff(want, news); diff != "" {
			t.Errorf("replica %s lists (-want +got):\n%s", l.Replica(), diff)
		}
		if got[2].Replica != "replica-b" || got[3].Replica != "replica-a" {
			t.Errorf("replica %s: entries name replicas %q, %q, want replica-b, replica-a", l.Replica(), got[2].Replica, got[3].Replica)
		}
	}
}

func TestTwoReplicasMemKV(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	twoReplicas(t, kv, kv)
}

// TestTwoReplicasEtcd runs two Logs over two clients of one real etcd.
func TestTwoReplicasEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func() systemstore.KV {
		kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/spillway/"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kv.Close() })
		return kv
	}
	twoReplicas(t, open(), open())
}

// TestTrim keeps the newest Keep entries and drops those over MaxAge,
// whichever replica trims, and trimming twice deletes nothing more.
func TestTrim(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	clk := &clock{t: t0}
	a := newLog(t, Config{KV: kv, Replica: "a", Keep: 5, MaxAge: time.Hour, Now: clk.Now})
	b := newLog(t, Config{KV: kv, Replica: "b", Keep: 5, MaxAge: time.Hour, Now: clk.Now})
	for i := range 8 {
		a.Record(context.Background(), Entry{Action: "panic", New: fmt.Sprint(i)})
		clk.Add(10 * time.Minute)
	}
	// 8 entries at t0 .. t0+70m; now t0+80m.
	n, err := b.Trim(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("Trim by count = %d, %v; want 3 deleted", n, err)
	}
	if n, err := a.Trim(context.Background()); err != nil || n != 0 {
		t.Errorf("second Trim = %d, %v; want 0", n, err)
	}
	clk.Add(30 * time.Minute) // now t0+110m: entries before t0+50m are over an hour old
	if n, err := a.Trim(context.Background()); err != nil || n != 2 {
		t.Errorf("Trim by age = %d, %v; want 2 deleted (t0+30m, t0+40m)", n, err)
	}
	got, _ := a.List(context.Background(), time.Time{}, 100)
	var news []string
	for _, e := range got {
		news = append(news, e.New)
	}
	if diff := cmp.Diff([]string{"7", "6", "5"}, news); diff != "" {
		t.Errorf("after trims (-want +got):\n%s", diff)
	}
}

// TestTrimRing: the memory ring keeps Keep entries and ages out.
func TestTrimRing(t *testing.T) {
	clk := &clock{t: t0}
	l := newLog(t, Config{Keep: 3, MaxAge: time.Hour, Now: clk.Now})
	for i := range 5 {
		l.Record(context.Background(), Entry{Action: "panic", New: fmt.Sprint(i)})
		clk.Add(20 * time.Minute)
	}
	got, _ := l.List(context.Background(), time.Time{}, 10)
	if len(got) != 3 || got[0].New != "4" || got[2].New != "2" {
		t.Errorf("ring = %v, want 4, 3, 2", got)
	}
	clk.Add(time.Minute) // now t0+101m: 2 (t0+40m) is over an hour old
	if n, _ := l.Trim(context.Background()); n != 1 {
		t.Errorf("Trim = %d, want 1", n)
	}
}

// TestRunTrims: Run trims at the start and every TrimEvery (fake time).
func TestRunTrims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		l := newLog(t, Config{KV: kv, Replica: "a", MaxAge: time.Hour, TrimEvery: time.Minute})
		l.Record(context.Background(), Entry{Action: "panic", New: "old"})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		time.Sleep(30 * time.Minute)
		l.Record(context.Background(), Entry{Action: "panic", New: "new"})
		time.Sleep(31 * time.Minute) // "old" is 61 minutes old; a trim ran since
		synctest.Wait()
		got, _ := l.List(context.Background(), time.Time{}, 10)
		if len(got) != 1 || got[0].New != "new" {
			t.Errorf("after an hour = %v, want only the new entry", got)
		}
		cancel()
		<-done
	})
}

// TestBoundedFields: long values are cut to their bound, on a rune
// boundary, with the original length named.
func TestBoundedFields(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	l := newLog(t, Config{KV: kv, Replica: "a"})
	long := strings.Repeat("é", 10_000) // 20,000 bytes
	l.Record(context.Background(), Entry{Identity: long, Action: long, Resource: long, Reason: long, Old: long, New: long})
	got, err := l.List(context.Background(), time.Time{}, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("List = %v, %v", got, err)
	}
	e := got[0]
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{
		{"identity", e.Identity, MaxField}, {"action", e.Action, MaxField}, {"resource", e.Resource, MaxField},
		{"reason", e.Reason, MaxReason}, {"old", e.Old, MaxValue}, {"new", e.New, MaxValue},
	} {
		if len(f.v) > f.max || !utf8.ValidString(f.v) || !strings.HasSuffix(f.v, "…(20000 bytes)") {
			t.Errorf("%s: %d bytes ending %q, want at most %d valid UTF-8 ending …(20000 bytes)", f.name, len(f.v), f.v[max(0, len(f.v)-20):], f.max)
		}
	}
	kvs, _, _ := kv.List(context.Background(), KeyPrefix)
	if n := len(kvs[0].Value); n > 3*MaxValue+2*MaxReason {
		t.Errorf("stored entry = %d bytes, want it bounded", n)
	}
}

// TestStoreFailure: an unreachable store does not fail Record; the entry
// is logged and the failure counted.
func TestStoreFailure(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	var buf bytes.Buffer
	l := newLog(t, Config{KV: kv, Replica: "a", Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	kv.Down.Store(true)
	l.Record(adminCtx(), Entry{Action: "panic", Old: "off", New: "on"})
	if got := testutil.ToFloat64(l.failures); got != 1 {
		t.Errorf("spillway_audit_write_failures_total = %v, want 1", got)
	}
	var line map[string]any
	if err := json.Unmarshal(bytes.SplitN(buf.Bytes(), []byte("\n"), 2)[0], &line); err != nil {
		t.Fatal(err)
	}
	if line["msg"] != "audit" || line["identity"] != "admin" || line["new"] != "on" || line["level"] != "INFO" {
		t.Errorf("log line = %v, want msg audit, identity admin, new on, level INFO", line)
	}
	if !strings.Contains(buf.String(), "audit entry not stored") {
		t.Errorf("log = %s, want the store failure", buf.String())
	}
	if _, err := l.List(context.Background(), time.Time{}, 10); err == nil {
		t.Error("List on a down store: no error")
	}
}

// TestDeniedLevelAndRate: a denial logs at Warn; past the burst, denials
// are logged but not stored, and counted.
func TestDeniedLevelAndRate(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	clk := &clock{t: t0}
	var buf bytes.Buffer
	l := newLog(t, Config{KV: kv, Replica: "a", DeniedRate: 1, DeniedBurst: 2, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	ctx := authn.NewContext(context.Background(), authn.Identity{Name: "spiffe://x/ns/a/sa/web", Method: authn.Certificate})
	for range 5 {
		l.Denied(ctx, "spiffe://x/ns/a/sa/web", "register", "checkout", "permission denied: spiffe://x/ns/a/sa/web may not register checkout")
	}
	clk.Add(time.Second)
	l.Denied(ctx, "", "heartbeat", "checkout", "not the lease's owner")
	got, _ := l.List(context.Background(), time.Time{}, 100)
	if len(got) != 3 {
		t.Errorf("stored %d denials, want 3 (burst 2, then 1 a second later)", len(got))
	}
	if got[0].Identity != "spiffe://x/ns/a/sa/web" || got[0].Method != "certificate" || got[0].Outcome != OutcomeDenied {
		t.Errorf("newest = %+v, want the identity from the context, certificate, denied", got[0])
	}
	if n := testutil.ToFloat64(l.suppressed); n != 3 {
		t.Errorf("spillway_audit_denials_not_stored_total = %v, want 3", n)
	}
	if n := strings.Count(buf.String(), "level=WARN msg=audit"); n != 6 {
		t.Errorf("%d Warn audit lines, want 6 (every denial logged)", n)
	}
}

func TestPolicyReloaded(t *testing.T) {
	l := newLog(t, Config{Replica: "a"})
	l.PolicyReloaded(context.Background(), "/etc/spillway/authz.yaml", "sha256:aa", "sha256:bb", nil)
	l.PolicyReloaded(context.Background(), "/etc/spillway/authz.yaml", "sha256:bb", "", fmt.Errorf("authz.yaml:3: rights: unknown action"))
	got, _ := l.List(context.Background(), time.Time{}, 10)
	if len(got) != 2 || got[1].Identity != "file:/etc/spillway/authz.yaml" || got[1].Action != ActionPolicyReload ||
		got[1].New != "sha256:bb" || got[0].Outcome != OutcomeFailed || !strings.Contains(got[0].Reason, "rights") {
		t.Errorf("entries = %+v", got)
	}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Keep: -1}, "Keep"},
		{Config{MaxAge: -time.Second}, "MaxAge"},
		{Config{TrimEvery: -time.Second}, "TrimEvery"},
		{Config{WriteTimeout: -time.Second}, "WriteTimeout"},
		{Config{DeniedRate: -1}, "DeniedRate"},
		{Config{DeniedBurst: -1}, "DeniedBurst"},
		{Config{Replica: "!!!"}, "Replica"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
			}
		})
	}
}

func TestListPrefix(t *testing.T) {
	clk := &clock{t: t0}
	l := newLog(t, Config{Replica: "a", Now: clk.Now})
	for _, tc := range []struct {
		since time.Time
		want  string
	}{
		{time.Time{}, "audit/"},
		{t0.Add(-5 * time.Minute), "audit/2025-06-01T1"},
		{t0.Add(-40 * 24 * time.Hour), "audit/2025-0"},
		{t0.Add(48 * time.Hour), "audit/"},
	} {
		got := l.listPrefix(tc.since)
		if got != tc.want {
			t.Errorf("listPrefix(%v) = %q, want %q", tc.since, got, tc.want)
		}
		if err := systemstore.ValidatePrefix(got); err != nil {
			t.Errorf("listPrefix(%v) = %q: %v", tc.since, got, err)
		}
	}
}

// FuzzTruncate: the result is within the bound, valid UTF-8 when the
// input is, and the input itself when it fits.
func FuzzTruncate(f *testing.F) {
	f.Add("hello", 3)
	f.Add(strings.Repeat("é", 100), 40)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n%10_000 + 20
		if n < 20 {
			n += 10_000
		}
		got := Truncate(s, n)
		switch {
		case len(s) <= n && got != s:
			t.Errorf("Truncate(%q, %d) = %q, want it unchanged", s, n, got)
		case len(got) > n:
			t.Errorf("Truncate(%q, %d) = %d bytes", s, n, len(got))
		case utf8.ValidString(s) && !utf8.ValidString(got):
			t.Errorf("Truncate(%q, %d) = %q, not valid UTF-8", s, n, got)
		}
	})
}

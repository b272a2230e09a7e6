// Package systemstoretest is the conformance suite of systemstore.KV: every
// backend's tests run RunConformance against a real store (a bbolt file, an
// etcd server process, spannertest over gRPC).
package systemstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
)

// Backend is a store under test.
type Backend struct {
	// Fresh makes an empty store for one subtest and returns a function
	// that opens a client on it. Every call of that function opens another
	// client on the same data; the suite closes the clients it opens.
	Fresh func(t *testing.T) (open func(t *testing.T) systemstore.KV)
	// SingleClient: only one client may be open at a time (bbolt locks
	// its file). The suite then uses the one client as the "second" one.
	SingleClient bool
	// Compact drops the history up to and including rev, so that a watch
	// from before rev fails with ErrCompacted.
	Compact func(t *testing.T, kv systemstore.KV, rev int64)
	// NoIsolation, when set, says why concurrent transactions of the
	// backend are not isolated (spannertest does not simulate them), so
	// the conditional-write race is not run on it: its outcome would
	// measure the fake, not the driver.
	NoIsolation string
}

// wait bounds how long the suite waits for an event that must come: a
// liveness guard against a hung test, not a measure of speed.
const wait = 30 * time.Second

// RunConformance runs the suite against b.
func RunConformance(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"put_get_list_delete", testCRUD},
		{"overwrite", testOverwrite},
		{"empty_value", testEmptyValue},
		{"revisions_grow", testRevisions},
		{"concurrent_puts", testConcurrent},
		{"watch_second_client", testWatchSecondClient},
		{"watch_ordering", testWatchOrdering},
		{"watch_replay", testWatchReplay},
		{"watch_cancel", testWatchCancel},
		{"reopen", testReopen},
		{"bad_input", testBadInput},
		{"closed", testClosed},
		{"compacted", testCompacted},
		{"conditional_writes", testConditional},
	}
	if b.NoIsolation == "" {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, b Backend)
		}{"conditional_race", testConditionalRace})
	} else {
		t.Logf("conditional_race not run: %s", b.NoIsolation)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

// clients opens the first client and, unless the backend allows one
// only, a second one on the same store.
func clients(t *testing.T, b Backend) (open func(t *testing.T) systemstore.KV, c1, c2 systemstore.KV) {
	open = b.Fresh(t)
	c1 = open(t)
	t.Cleanup(func() { c1.Close() })
	c2 = c1
	if !b.SingleClient {
		c2 = open(t)
		t.Cleanup(func() { c2.Close() })
	}
	return open, c1, c2
}

func mustPut(t *testing.T, kv systemstore.KV, key, value string) int64 {
	t.Helper()
	rev, err := kv.Put(context.Background(), key, []byte(value))
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return rev
}

func mustDelete(t *testing.T, kv systemstore.KV, key string) int64 {
	t.Helper()
	rev, err := kv.Delete(context.Background(), key)
	if err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	return rev
}

func list(t *testing.T, kv systemstore.KV, prefix string) ([]systemstore.KeyValue, int64) {
	t.Helper()
	kvs, rev, err := kv.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return kvs, rev
}

func keysValues(kvs []systemstore.KeyValue) string {
	var s []string
	for _, kv := range kvs {
		s = append(s, kv.Key+"="+string(kv.Value))
	}
	return strings.Join(s, " ")
}

// next returns the next event of ch, failing the test if the channel
// closes or nothing comes within wait.
func next(t *testing.T, ch <-chan systemstore.WatchEvent) systemstore.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed, want an event")
		}
		if ev.Err != nil {
			t.Fatalf("watch event error: %v", ev.Err)
		}
		return ev
	case <-time.After(wait):
		t.Fatalf("no watch event in %v", wait)
	}
	return systemstore.WatchEvent{}
}

func evString(ev systemstore.WatchEvent) string {
	if ev.Type == systemstore.EventDelete {
		return fmt.Sprintf("delete %s@%d", ev.Key, ev.Rev)
	}
	return fmt.Sprintf("put %s=%s@%d", ev.Key, ev.Value, ev.Rev)
}

func testCRUD(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	ctx := context.Background()
	r1 := mustPut(t, c1, "svc/a/1", "one")
	r2 := mustPut(t, c1, "svc/a/2", "two")
	mustPut(t, c1, "svc/b/1", "other")
	mustPut(t, c1, "svc/a", "parent") // a key that is a prefix of others

	v, rev, err := c2.Get(ctx, "svc/a/1")
	if err != nil || string(v) != "one" || rev != r1 {
		t.Errorf("second client Get(svc/a/1) = %q, %d, %v; want one, %d, nil", v, rev, err, r1)
	}
	kvs, lrev := list(t, c2, "svc/a/")
	if got, want := keysValues(kvs), "svc/a/1=one svc/a/2=two"; got != want {
		t.Errorf("List(svc/a/) = %s, want %s", got, want)
	}
	if len(kvs) == 2 && (kvs[0].Rev != r1 || kvs[1].Rev != r2) {
		t.Errorf("List revs = %d, %d; want %d, %d", kvs[0].Rev, kvs[1].Rev, r1, r2)
	}
	if lrev < r2 {
		t.Errorf("List rev = %d, want >= %d, the last write it shows", lrev, r2)
	}
	all, _ := list(t, c2, "")
	if got, want := keysValues(all), "svc/a=parent svc/a/1=one svc/a/2=two svc/b/1=other"; got != want {
		t.Errorf(`List("") = %s, want %s`, got, want)
	}

	dr := mustDelete(t, c1, "svc/a/1")
	if dr <= r2 {
		t.Errorf("Delete rev = %d, want > %d", dr, r2)
	}
	if _, _, err := c2.Get(ctx, "svc/a/1"); !errors.Is(err, systemstore.ErrNotFound) {
		t.Errorf("Get of a deleted key: err = %v, want ErrNotFound", err)
	}
	if _, _, err := c2.Get(ctx, "never/written"); !errors.Is(err, systemstore.ErrNotFound) {
		t.Errorf("Get of a missing key: err = %v, want ErrNotFound", err)
	}
	if _, err := c1.Delete(ctx, "never/written"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	if _, err := c1.Delete(ctx, "svc/a/1"); err != nil {
		t.Errorf("Delete of a deleted key: %v, want nil", err)
	}
	kvs, _ = list(t, c2, "svc/a/")
	if got, want := keysValues(kvs), "svc/a/2=two"; got != want {
		t.Errorf("List(svc/a/) after delete = %s, want %s", got, want)
	}
	if kvs, _ := list(t, c2, "nothing/"); len(kvs) != 0 {
		t.Errorf("List(nothing/) = %s, want none", keysValues(kvs))
	}
}

func testOverwrite(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	r1 := mustPut(t, c1, "k", "v1")
	r2 := mustPut(t, c1, "k", "v2")
	if r2 <= r1 {
		t.Errorf("second Put rev = %d, want > %d", r2, r1)
	}
	v, rev, err := c2.Get(context.Background(), "k")
	if err != nil || string(v) != "v2" || rev != r2 {
		t.Errorf("Get(k) = %q, %d, %v; want v2, %d, nil", v, rev, err, r2)
	}
	// The store keeps its own copy of what Put got and Get returned.
	val := []byte("v3")
	if _, err := c1.Put(context.Background(), "k", val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'X'
	v, _, _ = c2.Get(context.Background(), "k")
	if len(v) > 0 {
		v[0] = 'Y'
	}
	v, _, _ = c2.Get(context.Background(), "k")
	if string(v) != "v3" {
		t.Errorf("Get(k) after changing the caller's slices = %q, want v3", v)
	}
}

func testEmptyValue(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	mustPut(t, c1, "empty/nil", "")
	if _, err := c1.Put(context.Background(), "empty/nil2", nil); err != nil {
		t.Fatalf("Put of a nil value: %v", err)
	}
	for _, k := range []string{"empty/nil", "empty/nil2"} {
		v, _, err := c2.Get(context.Background(), k)
		if err != nil || len(v) != 0 {
			t.Errorf("Get(%s) = %q, %v; want empty, nil", k, v, err)
		}
	}
	if kvs, _ := list(t, c2, "empty/"); len(kvs) != 2 {
		t.Errorf("List(empty/) = %d keys, want 2", len(kvs))
	}
}

func testRevisions(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	last := int64(0)
	for i := range 20 {
		c := c1
		if i%2 == 1 {
			c = c2 // two clients write in turn: one order for both
		}
		var rev int64
		if i%5 == 4 {
			rev = mustDelete(t, c, fmt.Sprintf("rev/%d", i-1))
		} else {
			rev = mustPut(t, c, fmt.Sprintf("rev/%d", i), "x")
		}
		if rev <= last {
			t.Fatalf("write %d rev = %d, want > %d (the write before it)", i, rev, last)
		}
		last = rev
	}
}

func testConcurrent(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	var wg sync.WaitGroup
	for i := range 40 {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		wg.Go(func() {
			if _, err := c.Put(context.Background(), fmt.Sprintf("conc/%02d", i), []byte{byte(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	kvs, _ := list(t, c1, "conc/")
	if len(kvs) != 40 {
		t.Fatalf("List(conc/) = %d keys, want 40", len(kvs))
	}
	for i, kv := range kvs {
		if want := fmt.Sprintf("conc/%02d", i); kv.Key != want || !bytes.Equal(kv.Value, []byte{byte(i)}) {
			t.Errorf("kvs[%d] = %s=%v, want %s=%v", i, kv.Key, kv.Value, want, []byte{byte(i)})
		}
	}
}

// testWatchSecondClient: what one client writes, a watch on another sees,
// one write at a time, each at the revision its write returned.
func testWatchSecondClient(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	mustPut(t, c1, "w/0", "before")
	_, rev := list(t, c2, "w/")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c2.Watch(ctx, "w/", rev)

	type write struct {
		del   bool
		key   string
		value string
	}
	for _, w := range []write{{key: "w/1", value: "a"}, {key: "x/1", value: "elsewhere"}, {key: "w/2", value: "b"}, {key: "w/1", value: "c"}, {del: true, key: "w/0"}} {
		var want systemstore.WatchEvent
		if w.del {
			want = systemstore.WatchEvent{Type: systemstore.EventDelete, Key: w.key, Rev: mustDelete(t, c1, w.key)}
		} else {
			want = systemstore.WatchEvent{Type: systemstore.EventPut, Key: w.key, Value: []byte(w.value), Rev: mustPut(t, c1, w.key, w.value)}
		}
		if !strings.HasPrefix(w.key, "w/") {
			continue // outside the watched prefix: must not show up
		}
		if got := next(t, ch); evString(got) != evString(want) {
			t.Errorf("event = %s, want %s", evString(got), evString(want))
		}
	}
}

// testWatchOrdering: a burst of writes arrives in revision order; a key
// written twice may show only its last write, but nothing is lost and
// nothing is invented.
func testWatchOrdering(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	_, rev := list(t, c2, "o/")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c2.Watch(ctx, "o/", rev)

	writes := map[int64]systemstore.WatchEvent{}
	latest := map[string]int64{}
	for i := range 60 {
		key := fmt.Sprintf("o/%02d", i%25)
		var ev systemstore.WatchEvent
		if i%7 == 6 {
			ev = systemstore.WatchEvent{Type: systemstore.EventDelete, Key: key, Rev: mustDelete(t, c1, key)}
			if _, written := latest[key]; !written {
				continue // deleting a key never written: no event
			}
		} else {
			ev = systemstore.WatchEvent{Type: systemstore.EventPut, Key: key, Value: []byte(fmt.Sprint(i)), Rev: mustPut(t, c1, key, fmt.Sprint(i))}
		}
		writes[ev.Rev] = ev
		latest[key] = ev.Rev
	}
	var lastRev int64
	for _, r := range latest {
		lastRev = max(lastRev, r)
	}
	seen := map[int64]bool{}
	prev := rev
	for prev < lastRev {
		ev := next(t, ch)
		if ev.Rev <= prev {
			t.Fatalf("event %s after revision %d: out of order", evString(ev), prev)
		}
		prev = ev.Rev
		w, ok := writes[ev.Rev]
		if !ok || evString(w) != evString(ev) {
			t.Fatalf("event %s matches no write (write at that revision: %s)", evString(ev), evString(w))
		}
		seen[ev.Rev] = true
	}
	for key, r := range latest {
		if !seen[r] {
			t.Errorf("last write of %s (%s) not delivered", key, evString(writes[r]))
		}
	}
}

// testWatchReplay: a watch from an old revision, opened after the writes
// on a new client, replays what came after that revision only.
func testWatchReplay(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	mustPut(t, c1, "r/old", "x")
	_, from := list(t, c1, "r/")
	want := []systemstore.WatchEvent{
		{Type: systemstore.EventPut, Key: "r/a", Value: []byte("1"), Rev: mustPut(t, c1, "r/a", "1")},
		{Type: systemstore.EventPut, Key: "r/b", Value: []byte("2"), Rev: mustPut(t, c1, "r/b", "2")},
		{Type: systemstore.EventDelete, Key: "r/old", Rev: mustDelete(t, c1, "r/old")},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c2.Watch(ctx, "r/", from)
	for _, w := range want {
		if got := next(t, ch); evString(got) != evString(w) {
			t.Errorf("replayed event = %s, want %s", evString(got), evString(w))
		}
	}
	// Then it goes on live.
	live := systemstore.WatchEvent{Type: systemstore.EventPut, Key: "r/c", Value: []byte("3"), Rev: mustPut(t, c1, "r/c", "3")}
	if got := next(t, ch); evString(got) != evString(live) {
		t.Errorf("live event after replay = %s, want %s", evString(got), evString(live))
	}
}

func testWatchCancel(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	ch := c2.Watch(ctx, "c/", 0)
	mustPut(t, c1, "c/1", "x")
	next(t, ch)
	cancel()
	deadline := time.After(wait)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				// Closed. Writes after the cancel must not block or fail.
				mustPut(t, c1, "c/2", "y")
				return
			}
			if ev.Err != nil && !errors.Is(ev.Err, context.Canceled) {
				t.Errorf("event after cancel: %v, want the channel closed", ev.Err)
			}
		case <-deadline:
			t.Fatalf("watch channel not closed %v after cancel", wait)
		}
	}
}

func testReopen(t *testing.T, b Backend) {
	open := b.Fresh(t)
	c := open(t)
	r1 := mustPut(t, c, "keep/1", "one")
	mustPut(t, c, "keep/2", "two")
	mustDelete(t, c, "keep/2")
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c = open(t)
	defer c.Close()
	v, rev, err := c.Get(context.Background(), "keep/1")
	if err != nil || string(v) != "one" || rev != r1 {
		t.Errorf("Get(keep/1) after reopen = %q, %d, %v; want one, %d, nil", v, rev, err, r1)
	}
	kvs, lrev := list(t, c, "keep/")
	if got, want := keysValues(kvs), "keep/1=one"; got != want {
		t.Errorf("List after reopen = %s, want %s", got, want)
	}
	if r := mustPut(t, c, "keep/3", "three"); r <= lrev {
		t.Errorf("Put after reopen rev = %d, want > %d (revisions go on growing)", r, lrev)
	}
}

func testBadInput(t *testing.T, b Backend) {
	_, c1, _ := clients(t, b)
	ctx := context.Background()
	badKeys := map[string]string{
		"empty":        "",
		"leading_sl":   "/a",
		"trailing_sl":  "a/",
		"empty_seg":    "a//b",
		"dotdot":       "a/../b",
		"space":        "a b",
		"newline":      "a\nb",
		"nul":          "a\x00b",
		"non_ascii":    "café",
		"percent":      "a%2f",
		"too_long":     strings.Repeat("k", systemstore.MaxKeyLen+1),
		"backslash":    `a\b`,
		"only_dotdot":  "..",
		"star":         "a*",
		"question":     "a?",
		"control_char": "a\tb",
	}
	for name, key := range badKeys {
		t.Run(name, func(t *testing.T) {
			_, err := c1.Put(ctx, key, []byte("v"))
			if !errors.Is(err, systemstore.ErrInvalid) || !strings.Contains(err.Error(), "key") {
				t.Errorf("Put(%q) err = %v, want ErrInvalid naming key", key, err)
			}
			if _, err := c1.Delete(ctx, key); !errors.Is(err, systemstore.ErrInvalid) {
				t.Errorf("Delete(%q) err = %v, want ErrInvalid", key, err)
			}
			if _, _, err := c1.Get(ctx, key); !errors.Is(err, systemstore.ErrInvalid) {
				t.Errorf("Get(%q) err = %v, want ErrInvalid", key, err)
			}
		})
	}
	big := bytes.Repeat([]byte("v"), systemstore.MaxValueLen+1)
	if _, err := c1.Put(ctx, "big", big); !errors.Is(err, systemstore.ErrInvalid) || !strings.Contains(err.Error(), "value") {
		t.Errorf("Put of %d bytes err = %v, want ErrInvalid naming value", len(big), err)
	}
	if kvs, _ := list(t, c1, ""); len(kvs) != 0 {
		t.Errorf("after bad input the store has %s, want nothing", keysValues(kvs))
	}
	// The limits themselves are fine.
	max := bytes.Repeat([]byte("v"), systemstore.MaxValueLen)
	if _, err := c1.Put(ctx, strings.Repeat("k", systemstore.MaxKeyLen), max); err != nil {
		t.Errorf("Put of a %d-byte key and a %d-byte value: %v", systemstore.MaxKeyLen, len(max), err)
	}
	if _, _, err := c1.List(ctx, "a//"); !errors.Is(err, systemstore.ErrInvalid) || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("List(a//) err = %v, want ErrInvalid naming prefix", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case ev := <-c1.Watch(wctx, "a b", 0):
		if !errors.Is(ev.Err, systemstore.ErrInvalid) {
			t.Errorf("Watch(a b) first event = %+v, want an ErrInvalid error", ev)
		}
	case <-time.After(wait):
		t.Errorf("Watch with a bad prefix: nothing in %v, want an error", wait)
	}
}

func testClosed(t *testing.T, b Backend) {
	open := b.Fresh(t)
	c := open(t)
	mustPut(t, c, "z", "1")
	ch := c.Watch(context.Background(), "", 0)
	next(t, ch)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := context.Background()
	if _, err := c.Put(ctx, "z", []byte("2")); !errors.Is(err, systemstore.ErrClosed) {
		t.Errorf("Put after Close err = %v, want ErrClosed", err)
	}
	if _, _, err := c.Get(ctx, "z"); !errors.Is(err, systemstore.ErrClosed) {
		t.Errorf("Get after Close err = %v, want ErrClosed", err)
	}
	if _, _, err := c.List(ctx, ""); !errors.Is(err, systemstore.ErrClosed) {
		t.Errorf("List after Close err = %v, want ErrClosed", err)
	}
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return // the open watch ended
			}
		case <-deadline:
			t.Fatalf("watch not closed %v after Close", wait)
		}
	}
}

func testCompacted(t *testing.T, b Backend) {
	if b.Compact == nil {
		t.Fatal("Backend.Compact is nil: every backend must say how its history is dropped")
	}
	_, c1, c2 := clients(t, b)
	before := mustPut(t, c1, "h/a", "1")
	del := mustDelete(t, c1, "h/a")
	mustPut(t, c1, "h/b", "2")
	b.Compact(t, c1, del)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	select {
	case ev := <-c2.Watch(ctx, "h/", before-1):
		if !errors.Is(ev.Err, systemstore.ErrCompacted) {
			t.Errorf("Watch from before the compaction: first event %s (err %v), want ErrCompacted", evString(ev), ev.Err)
		}
	case <-time.After(wait):
		t.Fatalf("Watch from before the compaction: nothing in %v", wait)
	}
	// From the present it still works.
	_, rev := list(t, c2, "h/")
	ch := c2.Watch(ctx, "h/", rev)
	want := systemstore.WatchEvent{Type: systemstore.EventPut, Key: "h/c", Value: []byte("3"), Rev: mustPut(t, c1, "h/c", "3")}
	if got := next(t, ch); evString(got) != evString(want) {
		t.Errorf("event after compaction = %s, want %s", evString(got), evString(want))
	}
	kvs, _ := list(t, c2, "h/")
	if got := keysValues(kvs); got != "h/b=2 h/c=3" {
		t.Errorf("List(h/) after compaction = %s, want h/b=2 h/c=3", got)
	}
}

// testConditional: PutIf and DeleteIf write only at the revision given
// (0: absent, a deleted key included), report the current revision when
// they do not, change nothing then, and are seen by a watch.
func testConditional(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	ctx := context.Background()
	cp, ok1 := c1.(systemstore.CondPutter)
	cd, ok2 := c1.(systemstore.CondDeleter)
	if !ok1 || !ok2 {
		t.Fatalf("%T does not implement CondPutter and CondDeleter", c1)
	}
	_, start := list(t, c2, "")
	watch := c2.Watch(ctx, "cond/", start)

	r1, ok, err := cp.PutIf(ctx, "cond/a", []byte("one"), 0)
	if err != nil || !ok || r1 <= start {
		t.Fatalf("PutIf(absent, 0) = %d, %v, %v; want written after %d", r1, ok, err, start)
	}
	if ev := next(t, watch); ev.Type != systemstore.EventPut || ev.Key != "cond/a" || string(ev.Value) != "one" || ev.Rev != r1 {
		t.Errorf("watch after PutIf = %s, want put cond/a=one at %d", evString(ev), r1)
	}
	for _, stale := range []int64{0, r1 - 1, r1 + 1000} {
		cur, ok, err := cp.PutIf(ctx, "cond/a", []byte("lost"), stale)
		if err != nil || ok || cur != r1 {
			t.Errorf("PutIf(cond/a at %d, which is at %d) = %d, %v, %v; want refused with %d", stale, r1, cur, ok, err, r1)
		}
	}
	if v, rev, err := c2.Get(ctx, "cond/a"); err != nil || string(v) != "one" || rev != r1 {
		t.Errorf("Get after refused PutIfs = %q at %d, %v; want one at %d", v, rev, err, r1)
	}
	r2, ok, err := cp.PutIf(ctx, "cond/a", []byte("two"), r1)
	if err != nil || !ok || r2 <= r1 {
		t.Fatalf("PutIf(cond/a at %d) = %d, %v, %v; want written after %d", r1, r2, ok, err, r1)
	}
	if deleted, err := cd.DeleteIf(ctx, "cond/a", r1); err != nil || deleted {
		t.Errorf("DeleteIf(cond/a at %d, which is at %d) = %v, %v; want not deleted", r1, r2, deleted, err)
	}
	if deleted, err := cd.DeleteIf(ctx, "cond/missing", 0); err != nil || deleted {
		t.Errorf("DeleteIf(absent, 0) = %v, %v; want not deleted", deleted, err)
	}
	if deleted, err := cd.DeleteIf(ctx, "cond/a", r2); err != nil || !deleted {
		t.Fatalf("DeleteIf(cond/a at %d) = %v, %v; want deleted", r2, deleted, err)
	}
	if _, _, err := c2.Get(ctx, "cond/a"); !errors.Is(err, systemstore.ErrNotFound) {
		t.Errorf("Get after DeleteIf = %v, want ErrNotFound", err)
	}
	if r3, ok, err := cp.PutIf(ctx, "cond/a", []byte("three"), 0); err != nil || !ok || r3 <= r2 {
		t.Errorf("PutIf(deleted key, 0) = %d, %v, %v; want written", r3, ok, err)
	}
}

// testConditionalRace: writers on two clients that read one revision
// race PutIf at it; exactly one wins, and the key holds its value.
func testConditionalRace(t *testing.T, b Backend) {
	_, c1, c2 := clients(t, b)
	ctx := context.Background()
	rev := mustPut(t, c1, "race/k", "start")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners []string
	for i := range 16 {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		wg.Go(func() {
			v := fmt.Sprintf("w%02d", i)
			_, ok, err := c.(systemstore.CondPutter).PutIf(ctx, "race/k", []byte(v), rev)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				winners = append(winners, v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("PutIf winners at one revision = %v, want exactly one", winners)
	}
	if v, _, err := c2.Get(ctx, "race/k"); err != nil || string(v) != winners[0] {
		t.Errorf("race/k = %q, %v; want the winner's %s", v, err, winners[0])
	}
}

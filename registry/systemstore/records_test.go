package systemstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

// note is the stored record of the tests; its value is the text upper-cased
// with the revision it was stored at.
type note struct {
	Text string `json:"text"`
}

func newNotes(t *testing.T, kv systemstore.KV) *systemstore.Records[note, string] {
	t.Helper()
	r, err := systemstore.NewRecords(systemstore.RecordsConfig[note, string]{
		KV: kv, Prefix: "notes/", Name: "notes",
		Decode: func(service string, rec *note, rev int64) (string, error) {
			if rec.Text == "bad" {
				return "", errors.New("refused")
			}
			return fmt.Sprintf("%s=%s@%d", service, strings.ToUpper(rec.Text), rev), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func get(r *systemstore.Records[note, string], service string) string {
	v, _, ok := r.Get(service)
	if !ok {
		return "(none)"
	}
	return v
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Writes reach the view at once, with their revision, and close Changed;
// a refused record and a delete of nothing change nothing, and a KV
// failure is ErrUnavailable and leaves the view as it was.
func TestRecordsWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   func() systemstore.KV
	}{
		{"memory", func() systemstore.KV { return nil }},
		{"kv", func() systemstore.KV { return systemstoretest.NewMemKV() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newNotes(t, tc.kv())
			if _, err := r.Init(ctx); err != nil {
				t.Fatal(err)
			}
			ch, v0 := r.Changed(), r.Version()
			rev, err := r.Write(ctx, "a", &note{Text: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := get(r, "a"), fmt.Sprintf("a=X@%d", rev); got != want {
				t.Errorf("after write: %s, want %s", got, want)
			}
			select {
			case <-ch:
			default:
				t.Error("Changed not closed by a write")
			}
			if r.Version() != v0+1 {
				t.Errorf("version %d, want %d", r.Version(), v0+1)
			}

			// A record Decode refuses stays out of the view.
			if _, err := r.Write(ctx, "b", &note{Text: "bad"}); err != nil {
				t.Fatal(err)
			}
			if got := get(r, "b"); got != "(none)" {
				t.Errorf("refused record in the view: %s", got)
			}

			v1 := r.Version()
			if _, err := r.Write(ctx, "nothing", nil); err != nil {
				t.Fatal(err)
			}
			if r.Version() != v1 {
				t.Errorf("deleting nothing changed the version: %d, want %d", r.Version(), v1)
			}
			if _, err := r.Write(ctx, "a", nil); err != nil {
				t.Fatal(err)
			}
			if got := get(r, "a"); got != "(none)" || len(r.Services()) != 0 {
				t.Errorf("after delete: %s, services %v", got, r.Services())
			}
		})
	}
}

// unavailable is a KV whose writes fail.
type unavailable struct{ systemstore.KV }

func (unavailable) Put(context.Context, string, []byte) (int64, error) {
	return 0, errors.New("connection refused")
}

func TestRecordsWriteFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	mem := systemstoretest.NewMemKV()
	r := newNotes(t, mem)
	if _, err := r.Write(ctx, "a", &note{Text: "x"}); err != nil {
		t.Fatal(err)
	}
	before, v := get(r, "a"), r.Version()

	failing := newNotes(t, unavailable{mem})
	if _, err := failing.Init(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := failing.Write(ctx, "a", &note{Text: "y"})
	if !errors.Is(err, systemstore.ErrUnavailable) || !strings.Contains(err.Error(), "notes: store a") {
		t.Fatalf("err = %v, want ErrUnavailable naming notes and a", err)
	}
	if got := get(failing, "a"); got != before {
		t.Errorf("view after a failed write: %s, want %s", got, before)
	}
	if got := get(r, "a"); got != before || r.Version() != v {
		t.Errorf("the other view changed: %s", got)
	}
}

// Two replicas on one KV: each sees the other's puts and deletes through
// Follow, and an Init drops what the KV no longer has.
func TestRecordsFollow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv := systemstoretest.NewMemKV()
	a, b := newNotes(t, kv), newNotes(t, kv)
	if _, err := kv.Put(ctx, "notes/old", []byte(`{"text":"o"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "other/x", []byte(`{"text":"no"}`)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*systemstore.Records[note, string]{a, b} {
		if _, err := r.Init(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Services(); len(got) != 1 || got[0] != "old" {
		t.Fatalf("listed %v, want [old] (the prefix only)", got)
	}
	done := make(chan struct{})
	go func() { b.Follow(ctx); close(done) }()

	rev, err := a.Write(ctx, "new", &note{Text: "n"})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("new=N@%d", rev)
	waitFor(t, "b to see a's put", func() bool { return get(b, "new") == want })
	if _, err := a.Write(ctx, "old", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to see a's delete", func() bool { return get(b, "old") == "(none)" })

	// Undecodable JSON stored by someone else is skipped, not applied.
	if _, err := kv.Put(ctx, "notes/junk", []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, "last", &note{Text: "l"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to see the last put", func() bool { return get(b, "last") != "(none)" })
	if got := get(b, "junk"); got != "(none)" {
		t.Errorf("undecodable record applied: %s", got)
	}

	// a does not follow: only a new Init tells it what b deleted.
	if _, err := b.Write(ctx, "new", nil); err != nil {
		t.Fatal(err)
	}
	if get(a, "new") == "(none)" {
		t.Fatal("a saw b's delete without following")
	}
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(a, "new"); got != "(none)" {
		t.Errorf("after Init: %s, want none", got)
	}

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not return when ctx ended")
	}
}

// scriptedWatch is a KV whose Watch delivers the events the test sends.
type scriptedWatch struct {
	systemstore.KV
	events chan systemstore.WatchEvent
}

func (s scriptedWatch) Watch(context.Context, string, int64) <-chan systemstore.WatchEvent {
	return s.events
}

// A write's own apply and the watch event of an older write may come in
// either order: the view keeps the latest revision, for puts and deletes.
func TestRecordsKeepLatestRevision(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv := scriptedWatch{KV: systemstoretest.NewMemKV(), events: make(chan systemstore.WatchEvent)}
	r := newNotes(t, kv)
	if _, err := r.Init(ctx); err != nil {
		t.Fatal(err)
	}
	rev1, err := r.Write(ctx, "a", &note{Text: "one"})
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := r.Write(ctx, "a", &note{Text: "two"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Follow(ctx); close(done) }()
	defer func() {
		cancel()
		close(kv.events) // a real watch closes its channel when ctx ends
		<-done
	}()
	seen := 0
	// deliver sends ev, then a put of a marker key, and waits for the
	// marker: ev has been handled.
	deliver := func(ev systemstore.WatchEvent) {
		t.Helper()
		kv.events <- ev
		seen++
		marker := fmt.Sprintf("m%d", seen)
		kv.events <- systemstore.WatchEvent{Type: systemstore.EventPut, Key: "notes/" + marker, Value: []byte(`{"text":"m"}`), Rev: rev2 + int64(seen)}
		waitFor(t, marker, func() bool { return get(r, marker) != "(none)" })
	}
	want := fmt.Sprintf("a=TWO@%d", rev2)
	deliver(systemstore.WatchEvent{Type: systemstore.EventPut, Key: "notes/a", Value: []byte(`{"text":"one"}`), Rev: rev1})
	if got := get(r, "a"); got != want {
		t.Errorf("after the older put's event: %s, want %s", got, want)
	}
	deliver(systemstore.WatchEvent{Type: systemstore.EventDelete, Key: "notes/a", Rev: rev1})
	if got := get(r, "a"); got != want {
		t.Errorf("after an older delete's event: %s, want %s", got, want)
	}
	deliver(systemstore.WatchEvent{Type: systemstore.EventDelete, Key: "notes/a", Rev: rev2 + 100})
	if got := get(r, "a"); got != "(none)" {
		t.Errorf("after a newer delete's event: %s, want none", got)
	}
}

func TestNewRecordsRefusesBadConfig(t *testing.T) {
	if _, err := systemstore.NewRecords(systemstore.RecordsConfig[note, string]{Prefix: "/bad", Name: "notes", Decode: func(string, *note, int64) (string, error) { return "", nil }}); err == nil || !strings.Contains(err.Error(), "notes: prefix") {
		t.Errorf("bad prefix: err = %v", err)
	}
	if _, err := systemstore.NewRecords(systemstore.RecordsConfig[note, string]{Prefix: "notes/", Name: "notes"}); err == nil {
		t.Error("nil Decode accepted")
	}
}

package systemstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

// failingWatch is a KV whose first Watch fails at once, as a compacted
// or lost watch does.
type failingWatch struct {
	systemstore.KV
	mu     sync.Mutex
	failed bool
}

func (f *failingWatch) Watch(ctx context.Context, prefix string, after int64) <-chan systemstore.WatchEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed {
		return f.KV.Watch(ctx, prefix, after)
	}
	f.failed = true
	ch := make(chan systemstore.WatchEvent, 1)
	ch <- systemstore.WatchEvent{Err: fmt.Errorf("watch: %w", systemstore.ErrCompacted)}
	close(ch)
	return ch
}

// TestFollow: the view is listed, relisted after a failed watch, then
// follows puts and deletes under the prefix only, and Follow returns when
// the context ends.
func TestFollow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := systemstoretest.NewMemKV()
	kv := &failingWatch{KV: mem}
	if _, err := mem.Put(ctx, "p/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	view, lists := map[string]string{}, 0
	list := func(ctx context.Context) (int64, error) {
		kvs, rev, err := mem.List(ctx, "p/")
		if err != nil {
			return 0, err
		}
		mu.Lock()
		defer mu.Unlock()
		lists++
		clear(view)
		for _, e := range kvs {
			view[e.Key] = string(e.Value)
		}
		return rev, nil
	}
	apply := func(ev systemstore.WatchEvent) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Type == systemstore.EventDelete {
			delete(view, ev.Key)
		} else {
			view[ev.Key] = string(ev.Value)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		systemstore.Follow(ctx, kv, "p/", 0, list, apply, slog.New(slog.DiscardHandler))
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for i := 0; i < 500; i++ {
			mu.Lock()
			good := ok()
			mu.Unlock()
			if good {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s: view %v after %d lists", what, view, lists)
	}
	waitFor("a relist after the failed watch", func() bool { return lists == 2 && view["p/a"] == "1" })
	mem.Put(ctx, "p/b", []byte("2"))
	mem.Put(ctx, "q/x", []byte("other prefix"))
	mem.Delete(ctx, "p/a")
	waitFor("the changes after the relist", func() bool {
		_, hasA := view["p/a"]
		_, hasX := view["q/x"]
		return !hasA && !hasX && view["p/b"] == "2" && len(view) == 1
	})
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return after the context ended")
	}
	if lists != 2 {
		t.Errorf("lists = %d, want 2 (the first and one after the failed watch)", lists)
	}
}

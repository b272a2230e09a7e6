package registrysync

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

// cutKV is one replica's view of a shared MemKV that a test can cut: while
// cut every call fails and every watch ends with an error, as for a
// replica whose network to the store drops, while the others still reach
// it.
type cutKV struct {
	*systemstoretest.MemKV
	cut atomic.Bool
}

var errCut = errors.New("etcd 127.0.0.1:2379: context deadline exceeded")

func (k *cutKV) Put(ctx context.Context, key string, v []byte) (int64, error) {
	if k.cut.Load() {
		return 0, errCut
	}
	return k.MemKV.Put(ctx, key, v)
}

func (k *cutKV) Delete(ctx context.Context, key string) (int64, error) {
	if k.cut.Load() {
		return 0, errCut
	}
	return k.MemKV.Delete(ctx, key)
}

func (k *cutKV) DeleteIf(ctx context.Context, key string, rev int64) (bool, error) {
	if k.cut.Load() {
		return false, errCut
	}
	return k.MemKV.DeleteIf(ctx, key, rev)
}

func (k *cutKV) PutIf(ctx context.Context, key string, v []byte, rev int64) (int64, bool, error) {
	if k.cut.Load() {
		return 0, false, errCut
	}
	return k.MemKV.PutIf(ctx, key, v, rev)
}

func (k *cutKV) Get(ctx context.Context, key string) ([]byte, int64, error) {
	if k.cut.Load() {
		return nil, 0, errCut
	}
	return k.MemKV.Get(ctx, key)
}

func (k *cutKV) List(ctx context.Context, prefix string) ([]systemstore.KeyValue, int64, error) {
	if k.cut.Load() {
		return nil, 0, errCut
	}
	return k.MemKV.List(ctx, prefix)
}

// Watch forwards the MemKV's events until the cut, then delivers errCut
// and closes.
func (k *cutKV) Watch(ctx context.Context, prefix string, afterRev int64) <-chan systemstore.WatchEvent {
	out := make(chan systemstore.WatchEvent)
	if k.cut.Load() {
		go func() {
			defer close(out)
			select {
			case out <- systemstore.WatchEvent{Err: errCut}:
			case <-ctx.Done():
			}
		}()
		return out
	}
	wctx, cancel := context.WithCancel(ctx)
	in := k.MemKV.Watch(wctx, prefix, afterRev)
	go func() {
		defer close(out)
		defer cancel()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			var ev systemstore.WatchEvent
			var ok bool
			select {
			case ev, ok = <-in:
				if !ok {
					return
				}
			case <-tick.C:
				if !k.cut.Load() {
					continue
				}
				ev = systemstore.WatchEvent{Err: errCut}
			case <-ctx.Done():
				return
			}
			if k.cut.Load() {
				ev = systemstore.WatchEvent{Err: errCut}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Err != nil {
				return
			}
		}
	}()
	return out
}

// TestCutReplicaSendsAgentsAway is the cut fault of
// e2e/bench/consistency in-process: replica b is cut from the store for
// many TTLs while a, which decides expiry, still reaches it. VMs that
// heartbeat b are told their heartbeats are not shared (they are still
// renewed on b) and, like clientlib/heartbeat, move to a: no live lease
// expires, and b's own view recovers when the cut ends. The same cut with
// agents that ignore the answer and stay on b (agents_stay)
// loses their leases: that is what the answer is for.
func TestCutReplicaSendsAgentsAway(t *testing.T) {
	for _, move := range []bool{true, false} {
		name := map[bool]string{true: "agents_move", false: "agents_stay"}[move]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := systemstoretest.NewMemKV()
				bkv := &cutKV{MemKV: mem}
				el := newOneElector("a")
				a, b := startNode(t, mem, "a", el), startNode(t, bkv, "b", el)
				ctx := context.Background()
				var live []lease.Lease
				for i := range 20 {
					l, err := b.leases.Register(ctx, "svc", vm(10+i), testTTL)
					if err != nil {
						t.Fatal(err)
					}
					live = append(live, l)
				}
				home := make([]*node, len(live)) // each VM's replica
				for i := range home {
					home[i] = b
				}
				var notShared atomic.Int64
				bctx, stopBeats := context.WithCancel(ctx)
				var beating sync.WaitGroup
				beating.Go(func() {
					for bctx.Err() == nil {
						for i, l := range live {
							_, err := home[i].leases.Heartbeat(l.ID)
							switch {
							case errors.Is(err, lease.ErrNotShared):
								notShared.Add(1)
								if move {
									home[i] = a
								}
							case errors.Is(err, lease.ErrNotFound) && !move:
								// expired, as an agent that stays finds out
							case err != nil:
								t.Errorf("Heartbeat(%s) on %s = %v", l.ID, home[i].id, err)
							}
						}
						select {
						case <-bctx.Done():
						case <-time.After(testTTL / 3):
						}
					}
				})
				time.Sleep(testTTL) // heartbeated and stamped everywhere
				synctest.Wait()
				bkv.cut.Store(true)
				time.Sleep(10 * testTTL)
				synctest.Wait()
				if err := b.rep.Sharing(); err == nil {
					t.Errorf("b.Sharing() = nil during the cut")
				}
				if err := b.rep.Complete(); err == nil {
					t.Errorf("b.Complete() = nil during the cut: it may lack leases made meanwhile")
				}
				if err := a.rep.Sharing(); err != nil {
					t.Errorf("a.Sharing() = %v during b's cut", err)
				}
				bkv.cut.Store(false)
				time.Sleep(5 * testTTL)
				synctest.Wait()
				stopBeats()
				beating.Wait()

				if notShared.Load() == 0 {
					t.Errorf("no heartbeat on the cut replica was answered not shared")
				}
				lost := 0
				for _, l := range live {
					if deletes(mem, "svc/"+l.EndpointID) > 0 || !a.has("svc", l.EndpointID) {
						lost++
					}
				}
				if move && lost > 0 {
					t.Errorf("%d of %d live leases expired while their replica was cut from the store, want 0", lost, len(live))
				}
				if !move && lost == 0 {
					t.Errorf("agents that stayed on the cut replica kept their leases: the test does not cut")
				}
				if move {
					for _, l := range live {
						if !b.has("svc", l.EndpointID) {
							t.Errorf("b does not serve %s after the cut", l.EndpointID)
						}
					}
				}
				t.Logf("%s: %d heartbeats answered not shared; %d of %d leases lost", name, notShared.Load(), lost, len(live))
			})
		})
	}
}

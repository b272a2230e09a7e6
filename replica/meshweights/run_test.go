package meshweights

import (
	"context"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spillway/spillway/weights"
)

// TestRunLoops: the three Run loops wired as a replica wires them (the
// subscriber's OnUpdate triggers the selector): plans reach the selector
// and OnChange without explicit calls, and a shutdown of the publisher
// checkpoints the state of the shards it held.
func TestRunLoops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		kv := &countingKV{KV: systemstoretest.NewMemKV()}
		services := testServices(5)
		o := newOwner(t, "A", kv, services, newOwnership(1, "A"))
		var sel *Selector
		sub, err := NewSubscriber(SubscriberConfig{KV: kv, Shard: shardOf, OnUpdate: func() { sel.Trigger() }})
		if err != nil {
			t.Fatal(err)
		}
		ch := &changes{}
		sel, err = NewSelector(SelectorConfig{Subscriber: sub, Local: newFakeLocal(services), Services: func() []string { return services }, Interval: interval, OnChange: ch.OnChange})
		if err != nil {
			t.Fatal(err)
		}
		pctx, stopPub := context.WithCancel(ctx)
		var pubDone sync.WaitGroup
		pubDone.Go(func() { o.pub.Run(pctx) })
		wg.Go(func() { sub.Run(ctx) })
		wg.Go(func() { sel.Run(ctx) })

		time.Sleep(interval + time.Millisecond)
		synctest.Wait()
		for _, svc := range services {
			if p := sel.Plan(svc); p == nil || p.Source != weights.SourceMesh {
				t.Fatalf("%s after one interval: %+v, want the published plan", svc, p)
			}
		}
		if len(ch.take()) == 0 {
			t.Error("no OnChange when the published plans arrived")
		}
		stopPub()
		pubDone.Wait()
		for _, svc := range services {
			want, _ := o.planner.ExportState(svc)
			got, _, err := kv.Get(ctx, StateKey(svc))
			if err != nil || string(got) != string(want) {
				t.Errorf("%s: stored state after shutdown %q, %v; want %q", svc, got, err, want)
			}
		}
		// The owner is gone: after StaleCycles intervals the selector's own
		// ticker falls back to the local plans and says so.
		time.Sleep(4 * interval)
		synctest.Wait()
		for _, svc := range services {
			if p := sel.Plan(svc); p == nil || p.Source != weights.SourceLocal {
				t.Fatalf("%s after the owner stopped: %+v, want local", svc, p)
			}
		}
	})
}

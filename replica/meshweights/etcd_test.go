package meshweights

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/weights"
)

func openEtcd(t *testing.T, endpoint string) *etcdstore.KV {
	t.Helper()
	kv, err := etcdstore.Open(context.Background(), etcdstore.Config{
		Endpoints: []string{endpoint}, Prefix: "/mesh-test/", RequestTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	return kv
}

// eventually polls cond until it holds; the bound is generous and only
// there so that a broken watch fails the test instead of hanging it.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: never happened", what)
}

// TestEtcdTwoReplicas: over a real etcd, replica A owns and publishes,
// replicas A and B (each with its own etcd client) serve identical
// vectors; constant cycles write heartbeats only; etcd killed and started
// again, B's watch resumes and a changed plan reaches it.
func TestEtcdTwoReplicas(t *testing.T) {
	srv := etcdtest.Start(t)
	kvA, kvB := openEtcd(t, srv.Endpoint), openEtcd(t, srv.Endpoint)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	services := testServices(20)
	countA := &countingKV{KV: kvA}
	o := newOwner(t, "A", countA, services, newOwnership(1, "A", "B"))
	o.merged.setFresh("B", true)
	a, b := newNode(t, kvA, services, nil), newNode(t, kvB, services, nil)
	a.run(ctx, &wg)
	b.run(ctx, &wg)

	o.pub.Cycle(ctx, time.Now())
	served := func(n *replicaNode, svc string, want map[string]map[string]uint32) bool {
		n.sel.Refresh(time.Now())
		p := n.sel.Plan(svc)
		return p != nil && p.Source == weights.SourceMesh && cmp.Equal(vectors(p), want)
	}
	for _, svc := range services {
		want := vectors(&weights.Plan{Result: getPlan(t, kvB, svc).Result})
		if diff := cmp.Diff(vectors(o.planner.Plan(svc)), want); diff != "" {
			t.Fatalf("%s: stored vectors differ from the owner's (-owner +stored):\n%s", svc, diff)
		}
		eventually(t, svc+" served by A from the mesh", func() bool { return served(a, svc, want) })
		eventually(t, svc+" served by B from the mesh", func() bool { return served(b, svc, want) })
	}
	for range 4 {
		o.pub.Cycle(ctx, time.Now())
	}
	if got, want := countA.count(PlanPrefix), len(services); got != want {
		t.Errorf("plan puts after 5 constant cycles = %d, want %d", got, want)
	}
	if got, want := countA.count(ShardPrefix), 5*testShards; got != want {
		t.Errorf("heartbeat puts after 5 cycles = %d, want %d", got, want)
	}

	// etcd killed: writes fail, B keeps serving; started again: the
	// owner's next changed plans reach B through a new List and Watch.
	srv.Stop()
	o.planner.setDemand(map[string]int{"a": 10, "b": 10, "c": 80})
	o.pub.Cycle(ctx, time.Now())
	if got, want := countA.count(PlanPrefix)+countA.count(ShardPrefix), len(services)+5*testShards+1; got != want {
		t.Errorf("puts attempted in the outage cycle = %d, want 1 (the first failure ends the cycle's writes)", got-want+1)
	}
	b.sel.Refresh(time.Now())
	if p := b.sel.Plan(services[0]); p == nil || p.Source != weights.SourceMesh {
		t.Fatalf("etcd down: B serves %+v, want the published plan held", p)
	}
	srv.Restart()
	eventually(t, "owner publishes after etcd restarts", func() bool {
		o.pub.Cycle(ctx, time.Now())
		return o.pub.Writes().Plan == int64(2*len(services))
	})
	for _, svc := range services {
		want := vectors(o.planner.Plan(svc))
		eventually(t, svc+" changed plan served by B after the restart", func() bool { return served(b, svc, want) })
	}
}

package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

// TestOwnerRaceAcrossReplicas (issue 27, point 4): two lease managers
// on one real etcd, as two replicas before either has seen the other's
// write (no watch between them), register one endpoint at the same time
// for two identities. In every round exactly one wins; the other is
// refused naming the winner as the owner, and the record is the
// winner's. Then a deregistration of a lease the endpoint no longer
// holds removes nothing.
func TestOwnerRaceAcrossReplicas(t *testing.T) {
	srv := etcdtest.Start(t)
	open := func() *Manager {
		kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/lease-race/", RequestTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kv.Close() })
		m, err := New(Config{Store: registry.NewStore(), Storage: systemstore.NewStore(kv)})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := open(), open()
	reader := systemstore.NewStore(func() systemstore.KV {
		kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/lease-race/"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kv.Close() })
		return kv
	}())
	wins := map[string]int{}
	for round := range 20 {
		ep := vmEndpoint(round)
		var wg sync.WaitGroup
		errs := map[string]error{}
		var epID string
		var mu sync.Mutex
		for _, c := range []struct {
			m    *Manager
			name string
		}{{a, "payments"}, {b, "checkout"}} {
			wg.Go(func() {
				l, err := c.m.Register(as(c.name), "vm", ep, 0)
				mu.Lock()
				errs[c.name] = err
				if err == nil {
					epID = l.EndpointID
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		var winner, loser string
		switch {
		case errs["payments"] == nil && errs["checkout"] != nil:
			winner, loser = "payments", "checkout"
		case errs["checkout"] == nil && errs["payments"] != nil:
			winner, loser = "checkout", "payments"
		default:
			t.Fatalf("round %d: payments %v, checkout %v; want exactly one to win", round, errs["payments"], errs["checkout"])
		}
		wins[winner]++
		var oe *OwnerError
		if !errors.As(errs[loser], &oe) || oe.Owner != winner || oe.Identity != loser {
			t.Errorf("round %d: %s's refusal = %v, want an OwnerError naming %s as the owner", round, loser, errs[loser], winner)
		}
		recs, err := reader.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		owner := ""
		for _, r := range recs {
			if r.Endpoint.ID == epID {
				owner = r.Owner
			}
		}
		if owner != winner {
			t.Errorf("round %d: the stored record's owner = %q, want the winner %s", round, owner, winner)
		}
	}
	t.Logf("wins over 20 rounds: %v", wins)

	// Replica a registers an endpoint; replica b, which has not seen it,
	// still holds an older lease of it (registered first through b by the
	// same identity). Deregistering b's old lease removes nothing of a's.
	ep := vmEndpoint(100)
	old, err := b.Register(as("payments"), "vm", ep, 0)
	if err != nil {
		t.Fatal(err)
	}
	// a has never seen b's record: its first round fails, reads the
	// record (same owner), and replaces it.
	if _, err := a.Register(as("payments"), "vm", ep, 0); err != nil {
		t.Fatalf("re-registration by the owner through another replica = %v, want OK", err)
	}
	if _, err := b.Deregister(as("payments"), old.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("deregister of the superseded lease = %v, want ErrNotFound", err)
	}
	recs, _ := reader.List(context.Background())
	found := false
	for _, r := range recs {
		found = found || r.Endpoint.ID == old.EndpointID
	}
	if !found {
		t.Errorf("the newer registration was removed by the deregistration of the lease it replaced")
	}
}

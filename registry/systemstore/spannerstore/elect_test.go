package spannerstore_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore/spannerstore"
)

// TestElection: the lease row goes to one campaigner at a time; renewals
// keep it; a holder that stops renewing (killed) loses it to the next
// after the TTL; a resign hands it over at once. spannertest runs
// transactions without isolation, so this shows the protocol, not that
// two takes racing in one instant exclude each other (that needs Spanner).
func TestElection(t *testing.T) {
	opts := fake(t)
	// The Spanner client leaves an idle keep-alive HTTP connection of
	// http.DefaultTransport behind now and then; goleak would see it.
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	open := func() *spannerstore.KV {
		kv, err := spannerstore.Open(context.Background(), spannerstore.Config{
			Database: "projects/test-project/instances/test-instance/databases/elect", ClientOptions: opts, GCInterval: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kv.Close() })
		return kv
	}
	// A holder renews every third of the TTL: 2 s leaves a busy machine
	// room for a stall without losing a live holder its row.
	const ttl = 2 * time.Second
	el := func(kv *spannerstore.KV) *spannerstore.Election {
		e, err := kv.Election("election/expiry", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b, c := el(open()), el(open()), el(open())

	actx, killA := context.WithCancel(context.Background())
	lostA, _, err := a.Campaign(actx, "a")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lost   <-chan struct{}
		resign func()
	}
	wonB := make(chan result, 1)
	bctx, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	go func() {
		l, r, err := b.Campaign(bctx, "b")
		if err == nil {
			wonB <- result{l, r}
		}
	}()
	select {
	case <-wonB:
		t.Fatal("b won while a renews the row")
	case <-lostA:
		t.Fatal("a lost the row while renewing it")
	case <-time.After(2 * ttl): // a bound, not a speed check: nothing may change in it
	}

	killed := time.Now()
	killA() // a stops renewing without resigning, as a killed process
	select {
	case <-lostA:
	case <-time.After(30 * time.Second):
		t.Fatal("a's lost signal not within 30s of its context ending")
	}
	var rb result
	select {
	case rb = <-wonB:
		t.Logf("b took the row %v after a stopped renewing (TTL %v)", time.Since(killed).Round(time.Millisecond), ttl)
	case <-time.After(30 * time.Second):
		t.Fatal("b did not take the row 30s after a stopped")
	}

	wonC, doneC := make(chan struct{}), make(chan struct{})
	cctx, cancelC := context.WithCancel(context.Background())
	defer func() { cancelC(); <-doneC }()
	go func() {
		defer close(doneC)
		if _, r, err := c.Campaign(cctx, "c"); err == nil {
			close(wonC)
			r()
		}
	}()
	rb.resign()
	select {
	case <-rb.lost:
	case <-time.After(30 * time.Second):
		t.Fatal("b's lost channel open after resign")
	}
	select {
	case <-wonC:
	case <-time.After(30 * time.Second):
		t.Fatal("c did not take the row 30s after b resigned")
	}
}

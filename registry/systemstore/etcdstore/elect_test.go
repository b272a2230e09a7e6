package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

// TestDeleteIf: the delete happens only at the revision given, so of two
// expiries of one record only the first deletes it.
func TestDeleteIf(t *testing.T) {
	srv := etcdtest.Start(t)
	kv := open(t, srv.Endpoint, "/deleteif/")
	defer kv.Close()
	ctx := context.Background()
	rev, err := kv.Put(ctx, "registrations/web/e1", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	newer, err := kv.Put(ctx, "registrations/web/e1", []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rev  int64
		want bool
	}{
		{"stale_revision", rev, false},
		{"current_revision", newer, true},
		{"already_deleted", newer, false},
	} {
		got, err := kv.DeleteIf(ctx, "registrations/web/e1", tc.rev)
		if err != nil || got != tc.want {
			t.Errorf("%s: DeleteIf = %v, %v; want %v, nil", tc.name, got, err, tc.want)
		}
	}
	if _, _, err := kv.Get(ctx, "registrations/web/e1"); err == nil {
		t.Errorf("key still there after DeleteIf at its revision")
	}
}

// TestElection: of two campaigners one holds the election; the other
// gets it when the first resigns, and when the first's session dies
// (its client closed without resigning, as a killed process) within
// about the session TTL.
func TestElection(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	campaign := func(kv systemstore.Elector, id string) (chan struct{}, chan func(), chan (<-chan struct{})) {
		won, resign, lost := make(chan struct{}), make(chan func(), 1), make(chan (<-chan struct{}), 1)
		go func() {
			l, r, err := kv.Campaign(ctx, id)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("campaign of %s: %v", id, err)
				}
				return
			}
			resign <- r
			lost <- l
			close(won)
		}()
		return won, resign, lost
	}
	kvA, kvB, kvC := open(t, srv.Endpoint, "/elect/"), open(t, srv.Endpoint, "/elect/"), open(t, srv.Endpoint, "/elect/")
	defer kvB.Close()
	defer kvC.Close()
	// The session TTL is what a holder's keep-alive must beat: 3 s, so a
	// busy machine's stall of a second does not lose a live holder its
	// lease (which would rightly elect b).
	const ttl = 3 * time.Second
	elA, err := kvA.Election("election/expiry", ttl)
	if err != nil {
		t.Fatal(err)
	}
	elB, _ := kvB.Election("election/expiry", ttl)
	elC, _ := kvC.Election("election/expiry", ttl)

	wonA, _, lostA := campaign(elA, "a")
	within(t, wonA, "a elected alone")
	wonB, resignB, _ := campaign(elB, "b")
	select {
	case <-wonB:
		t.Fatal("b won while a holds the election")
	case <-time.After(ttl + time.Second): // a bound, not a speed check: b must not win in it
	}
	// a dies without resigning: its session lease ends after its TTL.
	died := time.Now()
	kvA.Close()
	within(t, <-lostA, "a's lost signal after its client closed")
	select {
	case <-wonB:
		t.Logf("b elected %v after a's client closed (session TTL %v)", time.Since(died).Round(time.Millisecond), ttl)
	case <-time.After(30 * time.Second):
		t.Fatal("b not elected 30s after a died")
	}
	wonC, _, _ := campaign(elC, "c")
	(<-resignB)() // b won, so its resign is there
	select {
	case <-wonC:
	case <-time.After(30 * time.Second):
		t.Fatal("c not elected 30s after b resigned")
	}
}

// within waits for ch to be closed or to deliver, failing after 30 s (a
// bound on a hang, not a speed check).
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30s", what)
	}
}

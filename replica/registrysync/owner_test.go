package registrysync

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/authn"
)

// TestLeaseOwnerAcrossReplicas: the identity that registered a lease on
// one replica owns it on every replica: another identity can neither
// heartbeat nor deregister it through the other replica, nor re-register
// its endpoint there.
func TestLeaseOwnerAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := systemstoretest.NewMemKV()
		el := newOneElector("a")
		a, b := startNode(t, kv, "a", el), startNode(t, kv, "b", el)
		payments := authn.NewContext(context.Background(), authn.Identity{Name: "payments", Method: authn.Certificate})
		checkout := authn.NewContext(context.Background(), authn.Identity{Name: "checkout", Method: authn.Certificate})

		l, err := a.leases.Register(payments, "payments", vm(1), 0)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h, ok := b.leases.Holder(l.ID); !ok || h.Owner != "payments" {
			t.Fatalf("b.Holder(%s) = %+v, %v; want owner payments", l.ID, h, ok)
		}
		for _, action := range []string{"heartbeat", "deregister"} {
			if _, err := b.leases.CheckOwner(checkout, action, l.ID); !errors.Is(err, lease.ErrNotOwner) {
				t.Errorf("b.CheckOwner(checkout, %s) = %v, want ErrNotOwner", action, err)
			}
			if _, err := b.leases.CheckOwner(payments, action, l.ID); err != nil {
				t.Errorf("b.CheckOwner(payments, %s) = %v, want nil", action, err)
			}
		}
		if _, err := b.leases.Register(checkout, "payments", vm(1), 0); !errors.Is(err, lease.ErrNotOwner) {
			t.Errorf("b.Register(checkout, payments' endpoint) = %v, want ErrNotOwner", err)
		}
	})
}

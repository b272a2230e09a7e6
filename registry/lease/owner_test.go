package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
	"github.com/spillway/spillway/security/authn"
)

func as(name string) context.Context {
	if name == "" {
		return context.Background()
	}
	return authn.NewContext(context.Background(), authn.Identity{Name: name, Method: authn.Certificate})
}

// TestLeaseOwner: a lease belongs to the identity that registered it;
// another identity may not heartbeat, deregister or re-register it; a
// lease without an owner (anonymous, or an older record) lets anyone.
func TestLeaseOwner(t *testing.T) {
	for _, tc := range []struct {
		name, owner, caller string
		wantErr             string // "" allows
	}{
		{"owner", "payments", "payments", ""},
		{"other_identity", "payments", "checkout", "permission denied: checkout may not heartbeat lease LEASE of vm (it belongs to payments)"},
		{"anonymous_caller", "payments", "", "permission denied: anonymous may not heartbeat lease LEASE of vm (it belongs to payments)"},
		{"admin_is_not_the_owner", "payments", "admin", "permission denied: admin may not heartbeat lease LEASE of vm (it belongs to payments)"},
		{"no_owner_anyone", "", "checkout", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			l, err := f.m.Register(as(tc.owner), "vm", vmEndpoint(1), 0)
			if err != nil {
				t.Fatal(err)
			}
			recs, _ := f.storage.List(context.Background())
			if len(recs) != 1 || recs[0].Owner != tc.owner {
				t.Fatalf("stored records = %+v, want one with Owner %q", recs, tc.owner)
			}
			h, err := f.m.CheckOwner(as(tc.caller), "heartbeat", l.ID)
			if diff := cmp.Diff(Holder{Service: "vm", Endpoint: l.EndpointID, Owner: tc.owner}, h); diff != "" {
				t.Errorf("CheckOwner holder (-want +got):\n%s", diff)
			}
			want := ""
			if tc.wantErr != "" {
				want = replaceLease(tc.wantErr, l.ID)
			}
			if got := errString(err); got != want {
				t.Errorf("CheckOwner = %q, want %q", got, want)
			}
			if tc.wantErr != "" && !errors.Is(err, ErrNotOwner) {
				t.Errorf("CheckOwner = %v, want ErrNotOwner", err)
			}
			var oe *OwnerError
			if tc.wantErr != "" && (!errors.As(err, &oe) || oe.Owner != tc.owner) {
				t.Errorf("CheckOwner = %#v, want an *OwnerError naming owner %q", err, tc.owner)
			}

			// Re-registering the endpoint: refused for another identity
			// while the lease lives, and nothing changes.
			v := f.store.Snapshot().Version()
			l2, err := f.m.Register(as(tc.caller), "vm", vmEndpoint(1), 0)
			if tc.wantErr != "" {
				wantReg := "permission denied: " + authn.FromContext(as(tc.caller)).String() + " may not register endpoint " + l.EndpointID + " of vm (its lease belongs to " + tc.owner + ")"
				if errString(err) != wantReg || !errors.Is(err, ErrNotOwner) {
					t.Errorf("re-Register by %q = %v, want %q", tc.caller, err, wantReg)
				}
				if got := f.store.Snapshot().Version(); got != v {
					t.Errorf("store version after a refused re-registration = %d, want %d", got, v)
				}
				if _, lid, _ := f.m.LastSeen("vm", l.EndpointID); lid != l.ID {
					t.Errorf("lease after a refused re-registration = %q, want %q", lid, l.ID)
				}
				recs, _ := f.storage.List(context.Background())
				if len(recs) != 1 || recs[0].LeaseID != l.ID || recs[0].Owner != tc.owner {
					t.Errorf("stored records after a refused re-registration = %+v, want lease %s of %q", recs, l.ID, tc.owner)
				}
				return
			}
			if err != nil {
				t.Fatalf("re-Register by %q = %v, want it to replace the lease", tc.caller, err)
			}
			if h, _ := f.m.Holder(l2.ID); h.Owner != tc.caller {
				t.Errorf("new lease's owner = %q, want %q", h.Owner, tc.caller)
			}
		})
	}
}

// TestLeaseOwnerSurvivesRestore: the owner is in the durable record, so
// a restarted server (bbolt) still refuses another identity; a record
// written before owners were kept lets anyone.
func TestLeaseOwnerSurvivesRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := boltstore.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Store: registry.NewStore(), Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Register(as("spiffe://example.org/ns/prod/sa/payments"), "payments", vmEndpoint(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	old := record("old-lease", 2, DefaultTTL) // no Owner: written before owners were kept
	old.Service = "payments"
	if err := st.Put(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = boltstore.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m2, err := New(Config{Store: registry.NewStore(), Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m2.Restore(ctx); err != nil || n != 2 {
		t.Fatalf("Restore = %d, %v; want 2", n, err)
	}
	if _, err := m2.CheckOwner(as("spiffe://example.org/ns/prod/sa/checkout"), "deregister", l.ID); !errors.Is(err, ErrNotOwner) {
		t.Errorf("after restart, CheckOwner(checkout, payments' lease) = %v, want ErrNotOwner", err)
	}
	if _, err := m2.CheckOwner(as("spiffe://example.org/ns/prod/sa/payments"), "deregister", l.ID); err != nil {
		t.Errorf("after restart, CheckOwner(payments, its lease) = %v, want nil", err)
	}
	if _, err := m2.CheckOwner(as("spiffe://example.org/ns/prod/sa/checkout"), "heartbeat", "old-lease"); err != nil {
		t.Errorf("CheckOwner(anyone, a record without owner) = %v, want nil", err)
	}
	if _, err := m2.CheckOwner(as("payments"), "heartbeat", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("CheckOwner(unknown lease) = %v, want ErrNotFound", err)
	}
}

// TestAdoptKeepsOwner: a registration another replica made keeps its
// owner here.
func TestAdoptKeepsOwner(t *testing.T) {
	f := newFixture(t, Config{})
	rec := record("l1", 1, DefaultTTL)
	rec.Owner = "payments"
	if err := f.m.Adopt(rec, 3, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.CheckOwner(as("checkout"), "heartbeat", "l1"); !errors.Is(err, ErrNotOwner) {
		t.Errorf("CheckOwner(checkout, adopted lease of payments) = %v, want ErrNotOwner", err)
	}
	if _, err := f.m.Register(as("checkout"), "vm", vmEndpoint(1), 0); !errors.Is(err, ErrNotOwner) {
		t.Errorf("Register(checkout) over an adopted lease of payments = %v, want ErrNotOwner", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func replaceLease(s, id string) string { return strings.Replace(s, "LEASE", id, 1) }

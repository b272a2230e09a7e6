package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
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
// another identity may not heartbeat, deregister or re-register it.
// Anonymous is an owner like any other: an anonymous lease takes only
// anonymous callers (a deployment without credentials is unchanged).
func TestLeaseOwner(t *testing.T) {
	for _, tc := range []struct {
		name, owner, caller string
		wantErr             string // "" allows
	}{
		{"owner", "payments", "payments", ""},
		{"other_identity", "payments", "checkout", "permission denied: checkout may not heartbeat lease LEASE of vm (it belongs to payments)"},
		{"anonymous_caller", "payments", "", "permission denied: anonymous may not heartbeat lease LEASE of vm (it belongs to payments)"},
		{"admin_is_not_the_owner", "payments", "admin", "permission denied: admin may not heartbeat lease LEASE of vm (it belongs to payments)"},
		{"anonymous_lease_anonymous_caller", "", "", ""},
		{"anonymous_lease_named_caller", "", "checkout", "permission denied: checkout may not heartbeat lease LEASE of vm (it belongs to anonymous)"},
		{"anonymous_lease_admin", "", "admin", "permission denied: admin may not heartbeat lease LEASE of vm (it belongs to anonymous)"},
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
				wantReg := "permission denied: " + authn.FromContext(as(tc.caller)).String() + " may not register endpoint " + l.EndpointID + " of vm (its lease belongs to " + authn.FromContext(as(tc.owner)).String() + ")"
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
// written before owners were kept (when every caller was anonymous) is
// anonymous's.
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
	if _, err := m2.CheckOwner(as(""), "heartbeat", "old-lease"); err != nil {
		t.Errorf("CheckOwner(anonymous, a record without owner) = %v, want nil", err)
	}
	if _, err := m2.CheckOwner(as("spiffe://example.org/ns/prod/sa/checkout"), "heartbeat", "old-lease"); !errors.Is(err, ErrNotOwner) {
		t.Errorf("CheckOwner(checkout, a record without owner) = %v, want ErrNotOwner", err)
	}
	if _, err := m2.CheckOwner(as("payments"), "heartbeat", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("CheckOwner(unknown lease) = %v, want ErrNotFound", err)
	}
}

// Records as the previous release writes them (bytes pinned): a named
// owner's, and an anonymous one's (no Owner key, as also in records of
// the releases before owners were kept).
const (
	prevNamedRecord = `{"LeaseID":"0123456789abcdef","Service":"payments","TTL":30000000000,"Endpoint":{"ID":"10-1-0-1-8080","Address":"10.1.0.1","Ports":[{"Name":"grpc","Number":8080,"Protocol":"tcp"}],"Locality":{"Region":"","Zone":"zone-1","SubZone":""},"Health":"healthy","Weight":100,"Metadata":null,"Source":"vm","Registered":"2026-03-01T12:00:00Z","LastSeen":"2026-03-01T12:00:00Z"},"Owner":"spiffe://example.org/ns/prod/sa/payments"}`
	prevAnonRecord  = `{"LeaseID":"fedcba9876543210","Service":"payments","TTL":30000000000,"Endpoint":{"ID":"10-1-0-2-8080","Address":"10.1.0.2","Ports":[{"Name":"grpc","Number":8080,"Protocol":"tcp"}],"Locality":{"Region":"","Zone":"zone-2","SubZone":""},"Health":"healthy","Weight":100,"Metadata":null,"Source":"vm","Registered":"2026-03-01T12:00:00Z","LastSeen":"2026-03-01T12:00:00Z"}}`
)

// TestLeaseOwnerPreviousReleaseRecord: records written by the previous
// release load on restart (Restore, bbolt) and on another replica
// (Adopt), and each lease then works for its owner only: the named one
// for its identity, the anonymous one for anonymous callers.
func TestLeaseOwnerPreviousReleaseRecord(t *testing.T) {
	const payments, checkout = "spiffe://example.org/ns/prod/sa/payments", "spiffe://example.org/ns/prod/sa/checkout"
	check := func(t *testing.T, m *Manager) {
		t.Helper()
		for _, tc := range []struct {
			lease, owner string
		}{{"0123456789abcdef", payments}, {"fedcba9876543210", ""}} {
			for _, caller := range []string{payments, checkout, ""} {
				_, err := m.CheckOwner(as(caller), "heartbeat", tc.lease)
				if caller == tc.owner && err != nil {
					t.Errorf("CheckOwner(%q, its lease %s) = %v, want nil", caller, tc.lease, err)
				}
				if caller != tc.owner && !errors.Is(err, ErrNotOwner) {
					t.Errorf("CheckOwner(%q, %q's lease %s) = %v, want ErrNotOwner", caller, tc.owner, tc.lease, err)
				}
			}
			if _, err := m.Heartbeat(tc.lease); err != nil {
				t.Errorf("Heartbeat(%s) = %v", tc.lease, err)
			}
		}
		if _, err := m.Deregister(as(payments), "0123456789abcdef"); err != nil {
			t.Errorf("Deregister(payments' restored lease) = %v", err)
		}
	}

	t.Run("restore", func(t *testing.T) {
		ctx := context.Background()
		dir := t.TempDir()
		st, err := boltstore.OpenStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for key, v := range map[string]string{"payments/10-1-0-1-8080": prevNamedRecord, "payments/10-1-0-2-8080": prevAnonRecord} {
			if _, err := st.KV().Put(ctx, systemstore.RegistrationsPrefix+key, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		m, err := New(Config{Store: registry.NewStore(), Storage: st})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := m.Restore(ctx); err != nil || n != 2 {
			t.Fatalf("Restore = %d, %v; want 2", n, err)
		}
		check(t, m)
	})
	t.Run("adopt", func(t *testing.T) {
		f := newFixture(t, Config{})
		for i, v := range []string{prevNamedRecord, prevAnonRecord} {
			rec, err := systemstore.DecodeRecord([]byte(v))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.m.Adopt(rec, int64(i+1), time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		check(t, f.m)
	})
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

package lease

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	store   *registry.Store
	storage *systemstore.Memory
	m       *Manager
	reg     *prometheus.Registry
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{store: registry.NewStore(), storage: systemstore.NewMemory(), reg: prometheus.NewRegistry()}
	cfg.Store, cfg.Storage, cfg.Registerer = f.store, f.storage, f.reg
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func vmEndpoint(i int) *registry.Endpoint {
	return &registry.Endpoint{
		Address:  netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}),
		Ports:    []registry.Port{{Name: "grpc", Number: 8080}},
		Locality: registry.Locality{Zone: fmt.Sprintf("zone-%d", i%3)},
	}
}

// register n endpoints of service "vm" and return their lease ids.
func (f *fixture) register(t *testing.T, n int, ttl time.Duration) []string {
	t.Helper()
	var ids []string
	for i := range n {
		l, err := f.m.Register(context.Background(), "vm", vmEndpoint(i), ttl)
		if err != nil {
			t.Fatalf("Register %d: %v", i, err)
		}
		ids = append(ids, l.ID)
	}
	return ids
}

func (f *fixture) count() int {
	svc, ok := f.store.Snapshot().Service("vm")
	if !ok {
		return 0
	}
	return len(svc.Endpoints)
}

// heartbeat renews leases[i] for every i where alive(i), every interval,
// until d has passed on the fake clock.
func heartbeatFor(t *testing.T, m *Manager, leases []string, alive func(int) bool, interval, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i, id := range leases {
			if alive(i) {
				if _, err := m.Heartbeat(id); err != nil {
					t.Fatalf("Heartbeat(lease %d): %v", i, err)
				}
			}
		}
		time.Sleep(interval)
		synctest.Wait()
	}
}

func TestExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go f.m.Run(ctx)
		ids := f.register(t, 1, 10*time.Second)

		time.Sleep(9 * time.Second)
		synctest.Wait()
		if f.count() != 1 {
			t.Fatalf("before TTL: %d endpoints, want 1", f.count())
		}
		if _, err := f.m.Heartbeat(ids[0]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if f.count() != 1 {
			t.Fatalf("heartbeat did not extend the lease: %d endpoints", f.count())
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if f.count() != 0 {
			t.Fatalf("after TTL: %d endpoints, want 0", f.count())
		}
		if _, ok := f.store.Snapshot().Service("vm"); !ok {
			t.Error("service forgotten after its last endpoint expired; want known with zero endpoints")
		}
		if _, err := f.m.Heartbeat(ids[0]); !errors.Is(err, ErrNotFound) {
			t.Errorf("Heartbeat after expiry = %v, want ErrNotFound", err)
		}
		if recs, _ := f.storage.List(ctx); len(recs) != 0 {
			t.Errorf("durable records after expiry = %d, want 0", len(recs))
		}
		if got := testutil.ToFloat64(f.m.metrics.expirations); got != 1 {
			t.Errorf("expirations metric = %v, want 1", got)
		}
	})
}

// TestMassExpiryGuard is acceptance 3: 50% of heartbeats stop at once →
// nothing expires and the guard metric is set; they resume → guard off;
// 5% stop → those expire normally.
func TestMassExpiryGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		const ttl = 30 * time.Second
		const interval = ttl / 3
		f := newFixture(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go f.m.Run(ctx)
		leases := f.register(t, n, ttl)
		all := func(int) bool { return true }
		heartbeatFor(t, f.m, leases, all, interval, 2*ttl)
		if f.count() != n || f.m.GuardActive() {
			t.Fatalf("steady state: %d endpoints, guard %v; want %d, false", f.count(), f.m.GuardActive(), n)
		}

		// A partition: half the fleet goes silent at once, for 3 TTLs.
		half := func(i int) bool { return i%2 == 0 }
		heartbeatFor(t, f.m, leases, half, interval, 3*ttl)
		if f.count() != n {
			t.Errorf("during partition: %d endpoints, want all %d kept", f.count(), n)
		}
		if !f.m.GuardActive() {
			t.Error("guard not active during partition")
		}
		if got := testutil.ToFloat64(f.m.metrics.guard); got != 1 {
			t.Errorf("guard metric = %v, want 1", got)
		}
		if got := testutil.ToFloat64(f.m.metrics.expirations); got != 0 {
			t.Errorf("expirations during partition = %v, want 0", got)
		}

		// The partition heals.
		heartbeatFor(t, f.m, leases, all, interval, ttl)
		if f.m.GuardActive() || testutil.ToFloat64(f.m.metrics.guard) != 0 {
			t.Error("guard still active after heartbeats returned")
		}
		if f.count() != n {
			t.Errorf("after healing: %d endpoints, want %d", f.count(), n)
		}

		// 5% really die: they expire, the rest stay.
		dead := func(i int) bool { return i%20 == 0 }
		heartbeatFor(t, f.m, leases, func(i int) bool { return !dead(i) }, interval, 2*ttl)
		if want := n - n/20; f.count() != want {
			t.Errorf("after 5%% stopped: %d endpoints, want %d", f.count(), want)
		}
		if f.m.GuardActive() {
			t.Error("guard tripped by 5% of leases")
		}
		if got := testutil.ToFloat64(f.m.metrics.expirations); got != n/20 {
			t.Errorf("expirations = %v, want %d", got, n/20)
		}
		if got := testutil.ToFloat64(f.m.metrics.guardTrips); got != 1 {
			t.Errorf("guard trips = %v, want 1", got)
		}
	})
}

// A small fleet can still lose VMs: below GuardMinCount at risk, the share
// does not matter.
func TestGuardMinCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go f.m.Run(ctx)
		leases := f.register(t, 5, 30*time.Second)
		heartbeatFor(t, f.m, leases, func(i int) bool { return i >= 3 }, 10*time.Second, 70*time.Second)
		if f.count() != 2 {
			t.Errorf("%d endpoints, want 2 (3 of 5 expired: 60%% but fewer than 10)", f.count())
		}
		if f.m.GuardActive() {
			t.Error("guard active for a 5-VM fleet")
		}
	})
}

func TestRegisterReplaceDeregister(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	l1, err := f.m.Register(ctx, "Web.", vmEndpoint(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l1.TTL != DefaultTTL || l1.EndpointID != "10-1-0-1-8080" {
		t.Errorf("lease = %+v, want default TTL and id 10-1-0-1-8080", l1)
	}
	first, _ := f.store.Snapshot().Service("web")
	reg1 := first.Endpoints[0].Registered
	e := vmEndpoint(1)
	e.Weight = 7
	l2, err := f.m.Register(ctx, "web", e, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l2.ID == l1.ID {
		t.Error("re-register returned the same lease id")
	}
	if _, err := f.m.Heartbeat(l1.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("old lease after re-register: %v, want ErrNotFound", err)
	}
	svc, _ := f.store.Snapshot().Service("web")
	if len(svc.Endpoints) != 1 || svc.Endpoints[0].Weight != 7 || !svc.Endpoints[0].Registered.Equal(reg1) {
		t.Errorf("after re-register: %+v; want one endpoint, weight 7, first registration time kept", svc.Endpoints)
	}
	recs, _ := f.storage.List(ctx)
	if len(recs) != 1 || recs[0].LeaseID != l2.ID || recs[0].TTL != 5*time.Second {
		t.Errorf("durable records = %+v, want one with the new lease", recs)
	}
	if _, err := f.m.Deregister(ctx, l2.ID); err != nil {
		t.Fatal(err)
	}
	if svc, _ := f.store.Snapshot().Service("web"); len(svc.Endpoints) != 0 {
		t.Errorf("after deregister: %d endpoints", len(svc.Endpoints))
	}
	if recs, _ := f.storage.List(ctx); len(recs) != 0 {
		t.Errorf("after deregister: %d records", len(recs))
	}
	if _, err := f.m.Deregister(ctx, l2.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second deregister: %v, want ErrNotFound", err)
	}
}

func TestRegisterRejects(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	// Another source owns the id.
	k := vmEndpoint(1)
	k.ID = "pod-1"
	k.Source = registry.SourceKubernetes
	if _, err := f.store.Apply(registry.Upsert("web", k)); err != nil {
		t.Fatal(err)
	}
	v := f.store.Snapshot().Version()
	e := vmEndpoint(1)
	e.ID = "pod-1"
	if _, err := f.m.Register(ctx, "web", e, 0); !errors.Is(err, registry.ErrConflict) {
		t.Errorf("register over a kubernetes endpoint: %v, want ErrConflict", err)
	}
	var fe *registry.FieldError
	if _, err := f.m.Register(ctx, "web", vmEndpoint(2), time.Millisecond); !errors.As(err, &fe) || fe.Field != "ttl_seconds" {
		t.Errorf("tiny TTL: %v, want a ttl_seconds field error", err)
	}
	bad := vmEndpoint(3)
	bad.Ports = append(bad.Ports, registry.Port{Name: "grpc", Number: 9})
	if _, err := f.m.Register(ctx, "web", bad, 0); !errors.As(err, &fe) || fe.Field != "endpoint.ports[1].name" {
		t.Errorf("duplicate port: %v, want endpoint.ports[1].name", err)
	}
	if f.store.Snapshot().Version() != v || f.m.Len() != 0 {
		t.Errorf("rejected registrations changed state: version %d (want %d), %d leases", f.store.Snapshot().Version(), v, f.m.Len())
	}
	if recs, _ := f.storage.List(ctx); len(recs) != 0 {
		t.Errorf("rejected registrations wrote %d records", len(recs))
	}
}

// After a restart every stored registration is served at once and gets one
// TTL of grace; those that heartbeat stay, the others expire.
func TestRestoreGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{})
		leases := f.register(t, 20, 10*time.Second)
		time.Sleep(time.Hour) // the server was down for an hour

		store := registry.NewStore()
		m2, err := New(Config{Store: store, Storage: f.storage})
		if err != nil {
			t.Fatal(err)
		}
		n, err := m2.Restore(context.Background())
		if err != nil || n != 20 {
			t.Fatalf("Restore = %d, %v; want 20", n, err)
		}
		if svc, _ := store.Snapshot().Service("vm"); len(svc.Endpoints) != 20 {
			t.Fatalf("after restore: %d endpoints, want 20 at once", len(svc.Endpoints))
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go m2.Run(ctx)
		heartbeatFor(t, m2, leases, func(i int) bool { return i != 0 }, 3*time.Second, 15*time.Second)
		if svc, _ := store.Snapshot().Service("vm"); len(svc.Endpoints) != 19 {
			t.Errorf("one TTL after restore: %d endpoints, want 19 (the silent one expired)", len(svc.Endpoints))
		}
	})
}

func TestConfigValidate(t *testing.T) {
	s, st := registry.NewStore(), systemstore.NewMemory()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no_store", Config{Storage: st}, "Store"},
		{"no_storage", Config{Store: s}, "Storage"},
		{"ttl_bounds", Config{Store: s, Storage: st, MinTTL: time.Minute, MaxTTL: time.Second}, "MaxTTL"},
		{"default_outside", Config{Store: s, Storage: st, DefaultTTL: 2 * time.Hour}, "DefaultTTL"},
		{"negative_share", Config{Store: s, Storage: st, GuardShare: -1}, "GuardShare"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

package registry

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// at is an endpoint with id at addr with one port.
func at(id, addr string, port uint16, h Health, src Source, registered time.Time) *Endpoint {
	e := validEndpoint()
	e.ID, e.Address, e.Health, e.Source, e.Registered = id, netip.MustParseAddr(addr), h, src, registered
	e.Ports = []Port{{Name: "grpc", Number: port, Protocol: TCP}}
	return e
}

func idsOf(eps []*Endpoint) []string {
	out := []string{}
	for _, e := range eps {
		out = append(out, e.ID)
	}
	return out
}

func conflictIDs(cs []AddressConflict) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s<%s:%d", c.Shadowed.ID, c.Winner.ID, c.Port))
	}
	return out
}

func TestResolveAddressConflicts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	tests := []struct {
		name         string
		eps          []*Endpoint // sorted by ID
		wantServing  []string
		wantShadowed []string // shadowed<winner:port
	}{
		{"distinct", []*Endpoint{
			at("a", "10.0.0.1", 80, Healthy, SourceVM, t0),
			at("b", "10.0.0.2", 80, Healthy, SourceVM, t0),
			at("c", "10.0.0.1", 81, Healthy, SourceVM, t0), // same host, other port
		}, []string{"a", "b", "c"}, []string{}},
		{"healthy-over-draining", []*Endpoint{
			at("a", "10.0.0.1", 80, Draining, SourceKubernetes, t1),
			at("b", "10.0.0.1", 80, Healthy, SourceStatic, t0),
		}, []string{"b"}, []string{"a<b:80"}},
		{"draining-over-unhealthy", []*Endpoint{
			at("a", "10.0.0.1", 80, Unhealthy, SourceKubernetes, t1),
			at("b", "10.0.0.1", 80, Draining, SourceStatic, t0),
		}, []string{"b"}, []string{"a<b:80"}},
		{"kubernetes-over-vm-over-static", []*Endpoint{
			at("a", "10.0.0.1", 80, Healthy, SourceStatic, t1),
			at("b", "10.0.0.1", 80, Healthy, SourceVM, t1),
			at("c", "10.0.0.1", 80, Healthy, SourceKubernetes, t0),
		}, []string{"c"}, []string{"a<c:80", "b<c:80"}},
		{"vm-over-static", []*Endpoint{
			at("a", "10.0.0.1", 80, Healthy, SourceStatic, t1),
			at("b", "10.0.0.1", 80, Healthy, SourceVM, t0),
		}, []string{"b"}, []string{"a<b:80"}},
		{"newest-registered", []*Endpoint{
			at("old-pod", "10.0.0.1", 80, Healthy, SourceKubernetes, t0),
			at("new-pod", "10.0.0.1", 80, Healthy, SourceKubernetes, t1),
		}, []string{"new-pod"}, []string{"old-pod<new-pod:80"}},
		{"id-breaks-ties", []*Endpoint{
			at("a", "10.0.0.1", 80, Healthy, SourceVM, t0),
			at("b", "10.0.0.1", 80, Healthy, SourceVM, t0),
		}, []string{"a"}, []string{"b<a:80"}},
		{"any-common-port", func() []*Endpoint {
			a := at("a", "10.0.0.1", 80, Healthy, SourceVM, t0)
			a.Ports = append(a.Ports, Port{Name: "http", Number: 8080, Protocol: TCP})
			b := at("b", "10.0.0.1", 8080, Healthy, SourceStatic, t0)
			b.Ports[0].Name = "admin"
			return []*Endpoint{a, b}
		}(), []string{"a"}, []string{"b<a:8080"}},
		{"a-loser-does-not-shadow", func() []*Endpoint {
			// b loses to a on port 80; c shares only port 90 with b, and
			// b is not served, so c is.
			a := at("a", "10.0.0.1", 80, Healthy, SourceKubernetes, t0)
			b := at("b", "10.0.0.1", 80, Healthy, SourceVM, t0)
			b.Ports = append(b.Ports, Port{Name: "x", Number: 90, Protocol: TCP})
			c := at("c", "10.0.0.1", 90, Healthy, SourceStatic, t0)
			return []*Endpoint{a, b, c}
		}(), []string{"a", "c"}, []string{"b<a:80"}},
		{"ipv6", []*Endpoint{
			at("a", "2001:db8::1", 80, Healthy, SourceVM, t0),
			at("b", "2001:db8::1", 80, Unhealthy, SourceKubernetes, t1),
		}, []string{"a"}, []string{"b<a:80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serving, shadowed := ResolveAddressConflicts(tt.eps)
			if diff := cmp.Diff(tt.wantServing, idsOf(serving)); diff != "" {
				t.Errorf("serving (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantShadowed, conflictIDs(shadowed)); diff != "" {
				t.Errorf("shadowed (-want +got):\n%s", diff)
			}
			// Every served (address, port) is unique: what grpc-go needs.
			seen := map[netip.AddrPort]string{}
			for _, e := range serving {
				for _, p := range e.Ports {
					k := netip.AddrPortFrom(e.Address, p.Number)
					if o, dup := seen[k]; dup {
						t.Errorf("%s served by %s and %s", k, o, e.ID)
					}
					seen[k] = e.ID
				}
			}
		})
	}
}

// TestStoreServing: the store decides the served endpoints as it builds a
// service, incrementally, and its metric and log see each conflict once.
func TestStoreServing(t *testing.T) {
	s := NewStore()
	var logs bytes.Buffer
	s.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(s))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	check := func(step string, serving, shadowed []string, gauge float64) {
		t.Helper()
		svc, _ := s.Snapshot().Service("web")
		if diff := cmp.Diff(serving, idsOf(svc.Serving())); diff != "" {
			t.Errorf("%s: serving (-want +got):\n%s", step, diff)
		}
		if diff := cmp.Diff(shadowed, conflictIDs(svc.Shadowed())); diff != "" {
			t.Errorf("%s: shadowed (-want +got):\n%s", step, diff)
		}
		// The incremental decision equals the one from scratch.
		full, fullShadowed := ResolveAddressConflicts(svc.Endpoints)
		if !cmp.Equal(idsOf(full), idsOf(svc.Serving())) || !cmp.Equal(conflictIDs(fullShadowed), conflictIDs(svc.Shadowed())) {
			t.Errorf("%s: incremental %v/%v, from scratch %v/%v", step, idsOf(svc.Serving()), conflictIDs(svc.Shadowed()), idsOf(full), conflictIDs(fullShadowed))
		}
		if got := s.Snapshot().AddressConflicts(); float64(got) != gauge {
			t.Errorf("%s: AddressConflicts = %d, want %v", step, got, gauge)
		}
		if got := testutil.ToFloat64(gaugeOnly{NewCollector(s)}); got != gauge {
			t.Errorf("%s: spillway_registry_address_conflicts = %v, want %v", step, got, gauge)
		}
	}

	mustApply(t, s, Upsert("web", at("vm-1", "10.0.0.1", 8080, Healthy, SourceVM, t0)),
		Upsert("web", at("vm-2", "10.0.0.2", 8080, Healthy, SourceVM, t0)))
	check("no conflict", []string{"vm-1", "vm-2"}, []string{}, 0)
	if svc, _ := s.Snapshot().Service("web"); &svc.Serving()[0] != &svc.Endpoints[0] {
		t.Error("without conflicts, Serving is not Endpoints itself")
	}

	// A static entry for the VM's address: the VM stays served.
	mustApply(t, s, Upsert("web", at("static-1", "10.0.0.1", 8080, Healthy, SourceStatic, t0)))
	check("static over vm", []string{"vm-1", "vm-2"}, []string{"static-1<vm-1:8080"}, 1)

	// Unrelated writes keep the decision.
	mustApply(t, s, Upsert("web", at("vm-3", "10.0.0.3", 8080, Healthy, SourceVM, t0)))
	check("unrelated write", []string{"vm-1", "vm-2", "vm-3"}, []string{"static-1<vm-1:8080"}, 1)

	// The VM turns unhealthy: the healthy static entry wins now.
	mustApply(t, s, Upsert("web", at("vm-1", "10.0.0.1", 8080, Unhealthy, SourceVM, t0)))
	check("vm unhealthy", []string{"static-1", "vm-2", "vm-3"}, []string{"vm-1<static-1:8080"}, 1)

	// The VM goes: nothing is shadowed.
	mustApply(t, s, Remove("web", "vm-1", SourceVM))
	check("vm removed", []string{"static-1", "vm-2", "vm-3"}, []string{}, 0)

	// Another service's conflicts add up in the gauge.
	mustApply(t, s, Upsert("db", at("a", "10.0.1.1", 5432, Healthy, SourceVM, t0)), Upsert("db", at("b", "10.0.1.1", 5432, Healthy, SourceKubernetes, t0)))
	check("other service", []string{"static-1", "vm-2", "vm-3"}, []string{}, 1)
	mustApply(t, s, Remove("db", "a", SourceVM), Remove("db", "b", SourceKubernetes), Forget("db"))
	check("other service forgotten", []string{"static-1", "vm-2", "vm-3"}, []string{}, 0)

	want := `
# HELP spillway_registry_address_conflicts_total Address conflicts detected (an endpoint shadowed by another with the same address and port), by the source of the endpoint served and of the one shadowed.
# TYPE spillway_registry_address_conflicts_total counter
`
	for _, w := range sourceLabels {
		for _, l := range sourceLabels {
			n := 0
			switch {
			case w == "vm" && l == "static", w == "static" && l == "vm", w == "kubernetes" && l == "vm":
				n = 1
			}
			want += fmt.Sprintf("spillway_registry_address_conflicts_total{served_source=%q,shadowed_source=%q} %d\n", w, l, n)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillway_registry_address_conflicts_total"); err != nil {
		t.Error(err)
	}
	if got := strings.Count(logs.String(), "endpoint not served"); got != 3 {
		t.Errorf("logged %d conflicts, want 3 (each once):\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "endpoint=static-1 source=static health=healthy address=10.0.0.1:8080 served=vm-1 served_source=vm") {
		t.Errorf("log does not name both endpoints and the address:\n%s", logs.String())
	}
}

// gaugeOnly exposes only the conflicts gauge of a Collector.
type gaugeOnly struct{ c Collector }

func (g gaugeOnly) Describe(ch chan<- *prometheus.Desc) { ch <- descConflicts }
func (g gaugeOnly) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(g.c.s.Snapshot().AddressConflicts()))
}

// BenchmarkWriteServing upserts one endpoint per write, at an address of
// its own (the usual case) or at another endpoint's (a conflict), into a
// service of n endpoints: the cost of deciding the served set.
func BenchmarkWriteServing(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		for _, conflict := range []bool{false, true} {
			b.Run(fmt.Sprintf("endpoints=%d/conflict=%v", n, conflict), func(b *testing.B) {
				s := bigStore(b, n)
				e := validEndpoint()
				e.ID = "zz-extra"
				e.Address = netip.MustParseAddr("10.200.0.1")
				if conflict {
					e.Address = netip.AddrFrom4([4]byte{10, 0, 0, 5}) // e00005's
					e.Source = SourceStatic
				}
				var w atomic.Uint32
				b.ReportAllocs()
				for b.Loop() {
					e.Weight = w.Add(1)%1000 + 1
					if _, err := s.Apply(Upsert("big", e)); err != nil {
						b.Fatal(err)
					}
				}
				if got, want := s.Snapshot().AddressConflicts(), map[bool]int{false: 0, true: 1}[conflict]; got != want {
					b.Fatalf("AddressConflicts = %d, want %d", got, want)
				}
			})
		}
	}
}

// FuzzServing drives a store with random upserts and removals of
// endpoints over a few addresses, ports, sources and health states, and
// checks after every write that the store's incremental decision is the
// one from scratch, that every served address and port is unique, and
// that every endpoint is either served or shadowed by a served one.
func FuzzServing(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x22, 0x33})
	f.Add([]byte{0x01, 0x01, 0x81, 0x41, 0x05, 0xff, 0x10, 0x90})
	f.Add([]byte("conflicts: a static entry and a vm at one address"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 512 {
			ops = ops[:512]
		}
		s := NewStore()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		sources := []Source{SourceKubernetes, SourceVM, SourceStatic}
		healths := []Health{Healthy, Draining, Unhealthy}
		owner := map[string]Source{}
		for i := 0; i+1 < len(ops); i += 2 {
			a, b := ops[i], ops[i+1]
			id := fmt.Sprintf("e%d", a&0x0f)
			if b&0x80 != 0 { // remove
				if src, ok := owner[id]; ok {
					mustApply(t, s, Remove("web", id, src))
					delete(owner, id)
				}
				continue
			}
			src := sources[int(a>>4)%3]
			if o, ok := owner[id]; ok {
				src = o // an id belongs to one source
			}
			e := at(id, fmt.Sprintf("10.0.0.%d", b&0x03), 8080+uint16(b>>2&0x01), healths[int(b>>3&0x03)%3], src, t0.Add(time.Duration(b>>5)*time.Minute))
			if b&0x40 != 0 {
				e.Ports = append(e.Ports, Port{Name: "admin", Number: 9090, Protocol: TCP})
			}
			mustApply(t, s, Upsert("web", e))
			owner[id] = src

			svc, _ := s.Snapshot().Service("web")
			full, fullShadowed := ResolveAddressConflicts(svc.Endpoints)
			if !cmp.Equal(idsOf(full), idsOf(svc.Serving())) || !cmp.Equal(conflictIDs(fullShadowed), conflictIDs(svc.Shadowed())) {
				t.Fatalf("after op %d: incremental %v/%v, from scratch %v/%v", i/2, idsOf(svc.Serving()), conflictIDs(svc.Shadowed()), idsOf(full), conflictIDs(fullShadowed))
			}
			seen := map[netip.AddrPort]bool{}
			served := map[*Endpoint]bool{}
			for _, e := range svc.Serving() {
				served[e] = true
				for _, p := range e.Ports {
					k := netip.AddrPortFrom(e.Address, p.Number)
					if seen[k] {
						t.Fatalf("after op %d: %s served twice", i/2, k)
					}
					seen[k] = true
				}
			}
			if len(svc.Serving())+len(svc.Shadowed()) != len(svc.Endpoints) {
				t.Fatalf("after op %d: %d served + %d shadowed != %d endpoints", i/2, len(svc.Serving()), len(svc.Shadowed()), len(svc.Endpoints))
			}
			for _, c := range svc.Shadowed() {
				if !served[c.Winner] || served[c.Shadowed] || c.Winner.Address != c.Shadowed.Address || preferred(c.Winner, c.Shadowed) >= 0 {
					t.Fatalf("after op %d: bad conflict %s<%s", i/2, c.Shadowed.ID, c.Winner.ID)
				}
			}
			if s.Snapshot().AddressConflicts() != len(svc.Shadowed()) {
				t.Fatalf("after op %d: AddressConflicts = %d, want %d", i/2, s.Snapshot().AddressConflicts(), len(svc.Shadowed()))
			}
		}
	})
}

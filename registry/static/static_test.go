package static

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway/spillway/registry"
)

// example is the file from the package documentation, minus comments.
const example = `services:
  - name: payments
    endpoints:
      - id: pay-1
        address: 10.0.0.1
        ports: [{name: grpc, number: 8080, protocol: tcp}]
        zone: us-east1-a
        region: us-east1
        sub_zone: ""
        health: healthy
        weight: 100
        metadata: {version: v2}
      - address: 2001:db8::7
        ports: ["grpc=8080/tcp", "metrics=9090"]
  - name: empty-service
`

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Minute)
	t2 = t0.Add(2 * time.Minute)
)

// newSource writes content to a fresh file and returns a Source for it
// whose clock reads *clock.
func newSource(t *testing.T, store *registry.Store, content string, clock *time.Time) (*Source, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "services.yaml")
	writeFile(t, path, content)
	src, err := New(Config{Path: path, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	src.now = func() time.Time { return *clock }
	return src, path
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile replaces path atomically, as editors and config tools do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// row is what the tests check of an endpoint.
type row struct {
	ID         string
	Address    string
	Weight     uint32
	Source     registry.Source
	Registered time.Time
}

// dump returns the store's services and their endpoints, in id order.
func dump(snap *registry.Snapshot) map[string][]row {
	out := map[string][]row{}
	for _, name := range snap.Services() {
		svc, _ := snap.Service(name)
		rows := []row{}
		for _, e := range svc.Endpoints {
			rows = append(rows, row{e.ID, e.Address.String(), e.Weight, e.Source, e.Registered})
		}
		out[name] = rows
	}
	return out
}

func TestNew(t *testing.T) {
	store := registry.NewStore()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"ok", Config{Path: "services.yaml", Store: store}, ""},
		{"no-path", Config{Store: store}, "Config.Path"},
		{"no-store", Config{Path: "services.yaml"}, "Config.Store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New = %v, want no error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	store := registry.NewStore()
	clock := t0
	src, _ := newSource(t, store, example, &clock)
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	snap := store.Snapshot()
	if got, want := snap.Services(), []string{"empty-service", "payments"}; !cmp.Equal(got, want) {
		t.Errorf("services = %v, want %v", got, want)
	}
	if svc, ok := snap.Service("empty-service"); !ok || len(svc.Endpoints) != 0 {
		t.Errorf("empty-service = %v, %v; want known with no endpoints", svc, ok)
	}
	svc, _ := snap.Service("payments")
	want := []*registry.Endpoint{
		{
			ID:         "2001-db8--7-8080",
			Address:    netip.MustParseAddr("2001:db8::7"),
			Ports:      []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}, {Name: "metrics", Number: 9090, Protocol: registry.TCP}},
			Health:     registry.Healthy,
			Weight:     registry.DefaultWeight,
			Source:     registry.SourceStatic,
			Registered: t0,
			LastSeen:   t0,
		},
		{
			ID:         "pay-1",
			Address:    netip.MustParseAddr("10.0.0.1"),
			Ports:      []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
			Locality:   registry.Locality{Region: "us-east1", Zone: "us-east1-a"},
			Health:     registry.Healthy,
			Weight:     100,
			Metadata:   map[string]string{"version": "v2"},
			Source:     registry.SourceStatic,
			Registered: t0,
			LastSeen:   t0,
		},
	}
	addrs := cmp.Comparer(func(a, b netip.Addr) bool { return a == b })
	if diff := cmp.Diff(want, svc.Endpoints, addrs); diff != "" {
		t.Errorf("payments endpoints (-want +got):\n%s", diff)
	}
	if got := store.Writes(); got != 1 {
		t.Errorf("Writes = %d, want 1 (one batch)", got)
	}
}

func TestLoadErrors(t *testing.T) {
	const good = `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080]
`
	tests := []struct {
		name    string
		file    string
		wantErr string // the error must contain it
	}{
		{"bad-ip", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.x
        ports: [grpc=8080]
`, `line 4: services[0].endpoints[0].address: "10.0.0.x" is not an IP address`},
		{"unknown-field", `services:
  - name: payments
    endpoints:
      - adress: 10.0.0.1
        ports: [grpc=8080]
`, `line 4: services[0].endpoints[0].adress: unknown field`},
		{"unknown-top-level-field", `service:
  - name: payments
`, `line 1: service: unknown field`},
		{"duplicate-port", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports:
          - {name: grpc, number: 8080}
          - grpc=8081
`, `line 7: services[0].endpoints[0].ports[1].name: duplicate port name "grpc"`},
		{"bad-service-name", `services:
  - name: pay_ments
`, `line 2: services[0].name: label 1: "pay_ments": character '_' not allowed`},
		{"missing-service-name", `services:
  - endpoints: []
`, `line 2: services[0].name: is required`},
		{"malformed-yaml", "services:\n  - name: [payments\n", `malformed YAML: line 1: did not find expected ',' or ']'`},
		{"tab-indent", "services:\n\t- name: payments\n", `malformed YAML`},
		{"empty-file", "", `empty file`},
		{"comments-only", "# nothing here\n", `empty file`},
		{"two-documents", "services: []\n---\nservices: []\n", `line 2: more than one YAML document`},
		{"not-a-mapping", "- payments\n", `line 1: file: want a mapping`},
		{"services-not-a-list", "services: payments\n", `line 1: services: want a list, got "payments"`},
		{"duplicate-service", `services:
  - name: payments
  - name: search
  - name: Payments
`, `line 4: services[2].name: service "payments" is already listed as services[0]`},
		{"duplicate-field", `services:
  - name: payments
    name: search
`, `line 3: services[0].name: field is listed twice`},
		{"duplicate-default-id", `services:
  - name: payments
    endpoints:
      - {address: 10.0.0.1, ports: [grpc=8080]}
      - {address: 10.0.0.1, ports: [grpc=8080/udp]}
`, `line 5: services[0].endpoints[1].id: endpoint id "10-0-0-1-8080" is already used by services[0].endpoints[0]`},
		{"missing-address", `services:
  - name: payments
    endpoints:
      - ports: [grpc=8080]
`, `line 4: services[0].endpoints[0].address: is required`},
		{"ipv6-zone", `services:
  - name: payments
    endpoints:
      - {address: "fe80::1%eth0", ports: [grpc=8080]}
`, `line 4: services[0].endpoints[0].address: "fe80::1%eth0" must not carry an IPv6 zone`},
		{"no-ports", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
`, `line 4: services[0].endpoints[0].ports: at least one port is required`},
		{"bad-port-shorthand", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: ["grpc:8080"]
`, `line 5: services[0].endpoints[0].ports[0]: "grpc:8080" is not name=number[/protocol]`},
		{"port-number-too-big", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports:
          - name: grpc
            number: 70000
`, `line 7: services[0].endpoints[0].ports[0].number: "70000", want a whole number 0..65535`},
		{"port-number-zero", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [{name: grpc, number: 0}]
`, `line 5: services[0].endpoints[0].ports[0].number: must be 1..65535`},
		{"bad-protocol", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080/sctp]
`, `line 5: services[0].endpoints[0].ports[0].protocol: "sctp", want tcp or udp`},
		{"weight-not-a-number", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080]
        weight: heavy
`, `line 6: services[0].endpoints[0].weight: "heavy", want a whole number 0..65535`},
		{"weight-zero", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080]
        weight: 0
`, `line 6: services[0].endpoints[0].weight: 0, want 1..65535`},
		{"bad-zone", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080]
        zone: us_east1
`, `line 6: services[0].endpoints[0].zone: "us_east1": character '_' not allowed`},
		{"bad-health", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080]
        health: sick
`, `line 6: services[0].endpoints[0].health: "sick", want healthy, draining or unhealthy`},
		{"bad-metadata-key", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080]
        metadata:
          "a key": v
`, `line 6: services[0].endpoints[0].metadata: key "a key": character ' ' not allowed`},
		{"metadata-value-not-a-string", `services:
  - name: payments
    endpoints:
      - address: 10.0.0.1
        ports: [grpc=8080]
        metadata:
          version: [v1, v2]
`, `line 7: services[0].endpoints[0].metadata[version]: want a string, got a list`},
		{"alias", `services:
  - name: payments
    endpoints:
      - &ep {address: 10.0.0.1, ports: [grpc=8080]}
      - *ep
`, `line 5: services[0].endpoints[1]: YAML aliases (*ep) are not supported`},
		{"second-service-bad", `services:
  - name: search
    endpoints:
      - {address: 10.0.0.9, ports: [grpc=8080]}
  - name: payments
    endpoints:
      - {address: 10.0.0.256, ports: [grpc=8080]}
`, `line 7: services[1].endpoints[0].address: "10.0.0.256" is not an IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := registry.NewStore()
			clock := t0
			src, path := newSource(t, store, good, &clock)
			if err := src.Load(); err != nil {
				t.Fatal(err)
			}
			before, version, writes := dump(store.Snapshot()), store.Snapshot().Version(), store.Writes()

			writeFile(t, path, tt.file)
			err := src.Load()
			if err == nil {
				t.Fatalf("Load = nil, want an error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Load = %q, want it to contain %q", err, tt.wantErr)
			}
			if !errors.Is(err, registry.ErrInvalid) {
				t.Errorf("errors.Is(%v, registry.ErrInvalid) = false, want true", err)
			}
			if got := store.Snapshot().Version(); got != version {
				t.Errorf("store version = %d, want %d (unchanged)", got, version)
			}
			if got := store.Writes(); got != writes {
				t.Errorf("Writes = %d, want %d (unchanged)", got, writes)
			}
			if diff := cmp.Diff(before, dump(store.Snapshot())); diff != "" {
				t.Errorf("store changed (-before +after):\n%s", diff)
			}
			if got := src.Failures(); got != 1 {
				t.Errorf("Failures = %d, want 1", got)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	store := registry.NewStore()
	src, err := New(Config{Path: filepath.Join(t.TempDir(), "missing.yaml"), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Load(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load = %v, want os.ErrNotExist", err)
	}
	if got := src.Failures(); got != 1 {
		t.Errorf("Failures = %d, want 1", got)
	}
}

func TestLoadConflict(t *testing.T) {
	store := registry.NewStore()
	vm := &registry.Endpoint{
		ID:      "pay-1",
		Address: netip.MustParseAddr("10.0.0.1"),
		Ports:   []registry.Port{{Name: "grpc", Number: 8080}},
		Source:  registry.SourceVM,
	}
	if _, err := store.Apply(registry.Upsert("payments", vm)); err != nil {
		t.Fatal(err)
	}
	version := store.Snapshot().Version()
	clock := t0
	src, _ := newSource(t, store, example, &clock)
	err := src.Load()
	if !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("Load = %v, want registry.ErrConflict", err)
	}
	if want := "line 4: services[0].endpoints[0]: endpoint payments/pay-1 is vm's: owned by another source"; !strings.Contains(err.Error(), want) {
		t.Errorf("Load = %q, want it to contain %q", err, want)
	}
	if got := store.Snapshot().Version(); got != version {
		t.Errorf("store version = %d, want %d (unchanged)", got, version)
	}
}

// TestReload loads a sequence of files into one store; each step checks the
// whole store and the number of writes the step made.
func TestReload(t *testing.T) {
	store := registry.NewStore()
	// A VM endpoint shares the service "shared" with the file; the file
	// must never touch it.
	vm := &registry.Endpoint{
		ID:         "vm-1",
		Address:    netip.MustParseAddr("10.9.9.9"),
		Ports:      []registry.Port{{Name: "grpc", Number: 8080}},
		Source:     registry.SourceVM,
		Registered: t0,
	}
	if _, err := store.Apply(registry.Upsert("shared", vm)); err != nil {
		t.Fatal(err)
	}
	vmRow := row{"vm-1", "10.9.9.9", 100, registry.SourceVM, t0}
	static := func(id, addr string, weight uint32, registered time.Time) row {
		return row{id, addr, weight, registry.SourceStatic, registered}
	}

	clock := t0
	src, path := newSource(t, store, "services: []\n", &clock)
	steps := []struct {
		name       string
		now        time.Time
		file       string
		want       map[string][]row
		wantWrites uint64
	}{
		{
			name: "initial",
			now:  t0,
			file: `services:
  - name: payments
    endpoints:
      - {id: a, address: 10.0.0.1, ports: [grpc=8080]}
      - {id: b, address: 10.0.0.2, ports: [grpc=8080]}
  - name: search
    endpoints:
      - {id: c, address: 10.0.1.1, ports: [grpc=8080]}
  - name: empty
  - name: shared
    endpoints:
      - {id: s, address: 10.0.2.1, ports: [grpc=8080]}
`,
			want: map[string][]row{
				"payments": {static("a", "10.0.0.1", 100, t0), static("b", "10.0.0.2", 100, t0)},
				"search":   {static("c", "10.0.1.1", 100, t0)},
				"empty":    {},
				"shared":   {static("s", "10.0.2.1", 100, t0), vmRow},
			},
			wantWrites: 1,
		},
		{
			name: "same-content-reformatted",
			now:  t1,
			file: `# the same services, in another order and style
services:
  - name: shared
    endpoints: [{id: s, address: 10.0.2.1, ports: [{name: grpc, number: 8080, protocol: tcp}]}]
  - name: empty
  - name: search
    endpoints:
      - {id: c, address: 10.0.1.1, ports: [grpc=8080/tcp], weight: 100, health: healthy}
  - name: payments
    endpoints:
      - {id: b, address: 10.0.0.2, ports: [grpc=8080]}
      - {id: a, address: 10.0.0.1, ports: [grpc=8080]}
`,
			want: map[string][]row{
				"payments": {static("a", "10.0.0.1", 100, t0), static("b", "10.0.0.2", 100, t0)},
				"search":   {static("c", "10.0.1.1", 100, t0)},
				"empty":    {},
				"shared":   {static("s", "10.0.2.1", 100, t0), vmRow},
			},
			wantWrites: 0,
		},
		{
			name: "remove-endpoint-change-weight-move-address",
			now:  t1,
			file: `services:
  - name: payments
    endpoints:
      - {id: a, address: 10.0.0.1, ports: [grpc=8080], weight: 50}
  - name: search
    endpoints:
      - {id: c, address: 10.0.1.2, ports: [grpc=8080]}
  - name: empty
  - name: shared
    endpoints:
      - {id: s, address: 10.0.2.1, ports: [grpc=8080]}
`,
			want: map[string][]row{
				// Same id and address: keeps its first registration.
				"payments": {static("a", "10.0.0.1", 50, t0)},
				// Same id, new address: a new instance.
				"search": {static("c", "10.0.1.2", 100, t1)},
				"empty":  {},
				"shared": {static("s", "10.0.2.1", 100, t0), vmRow},
			},
			wantWrites: 1,
		},
		{
			name: "remove-services",
			now:  t2,
			file: `services:
  - name: payments
    endpoints:
      - {id: a, address: 10.0.0.1, ports: [grpc=8080], weight: 50}
`,
			want: map[string][]row{
				"payments": {static("a", "10.0.0.1", 50, t0)},
				// search and empty are forgotten; shared keeps its VM
				// endpoint and stays known.
				"shared": {vmRow},
			},
			wantWrites: 1,
		},
		{
			name:       "no-services",
			now:        t2,
			file:       "services:\n",
			want:       map[string][]row{"shared": {vmRow}},
			wantWrites: 1,
		},
	}
	for _, st := range steps {
		writes := store.Writes()
		clock = st.now
		writeFile(t, path, st.file)
		if err := src.Load(); err != nil {
			t.Fatalf("%s: Load = %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, dump(store.Snapshot())); diff != "" {
			t.Errorf("%s: store (-want +got):\n%s", st.name, diff)
		}
		if got := store.Writes() - writes; got != st.wantWrites {
			t.Errorf("%s: store writes = %d, want %d", st.name, got, st.wantWrites)
		}
		// Loading the same file again never writes.
		writes = store.Writes()
		if err := src.Load(); err != nil {
			t.Fatalf("%s: second Load = %v", st.name, err)
		}
		if got := store.Writes() - writes; got != 0 {
			t.Errorf("%s: second Load made %d store writes, want 0", st.name, got)
		}
	}
}

// runSource runs src in the background, reporting each reload's outcome on
// the returned channel, and stops it when the test ends.
func runSource(t *testing.T, src *Source) <-chan error {
	t.Helper()
	reloads := make(chan error, 64)
	src.reloaded = func(err error) { reloads <- err }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	})
	return reloads
}

// waitReload waits for a reload whose outcome matches wantErr (nil or not).
func waitReload(ctx context.Context, t *testing.T, reloads <-chan error, wantErr bool) error {
	t.Helper()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("no reload with error=%v: %v", wantErr, ctx.Err())
		case err := <-reloads:
			if (err != nil) == wantErr {
				return err
			}
		}
	}
}

// waitStore waits, through sub, until the store holds want.
func waitStore(ctx context.Context, t *testing.T, store *registry.Store, sub *registry.Subscription, want map[string][]row) {
	t.Helper()
	for {
		if cmp.Equal(want, dump(store.Snapshot())) {
			return
		}
		if _, _, err := sub.Next(ctx); err != nil {
			t.Fatalf("store never reached the wanted state: %v; diff (-want +got):\n%s", err, cmp.Diff(want, dump(store.Snapshot())))
		}
	}
}

func TestRun(t *testing.T) {
	store := registry.NewStore()
	clock := t0
	src, path := newSource(t, store, "services:\n  - name: one\n", &clock)
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	sub := store.Subscribe("")
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reloads := runSource(t, src)

	// Run's first reload sees the file Load applied and writes nothing.
	writes := store.Writes()
	waitReload(ctx, t, reloads, false)
	if got := store.Writes(); got != writes {
		t.Errorf("Writes = %d after Run's first reload, want %d", got, writes)
	}

	ep := func(id, addr string) row { return row{id, addr, 100, registry.SourceStatic, t0} }
	t.Run("rewrite-in-place", func(t *testing.T) {
		writeFile(t, path, "services:\n  - name: two\n    endpoints: [{id: a, address: 10.0.0.1, ports: [grpc=80]}]\n")
		waitStore(ctx, t, store, sub, map[string][]row{"two": {ep("a", "10.0.0.1")}})
	})
	t.Run("rename-replace", func(t *testing.T) {
		replaceFile(t, path, "services:\n  - name: three\n")
		waitStore(ctx, t, store, sub, map[string][]row{"three": {}})
	})
	t.Run("bad-file-keeps-state", func(t *testing.T) {
		version, failures := store.Snapshot().Version(), src.Failures()
		replaceFile(t, path, "services:\n  - name: three\n    endpoints: [{address: 10.0.0.x, ports: [grpc=80]}]\n")
		err := waitReload(ctx, t, reloads, true)
		if want := "services[0].endpoints[0].address"; !strings.Contains(err.Error(), want) {
			t.Errorf("reload error = %q, want it to name %s", err, want)
		}
		if got := store.Snapshot().Version(); got != version {
			t.Errorf("store version = %d, want %d (unchanged)", got, version)
		}
		if got := src.Failures(); got <= failures {
			t.Errorf("Failures = %d, want more than %d", got, failures)
		}
	})
	t.Run("identical-content-no-writes", func(t *testing.T) {
		writes := store.Writes()
		writeFile(t, path, "services:\n  - name: three\n")
		waitReload(ctx, t, reloads, false)
		if got := store.Writes(); got != writes {
			t.Errorf("Writes = %d, want %d (unchanged)", got, writes)
		}
	})
	t.Run("file-removed-and-recreated", func(t *testing.T) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		waitReload(ctx, t, reloads, true)
		writeFile(t, path, "services:\n  - name: four\n")
		waitStore(ctx, t, store, sub, map[string][]row{"four": {}})
	})
}

// TestRunConfigMap swaps a Kubernetes ConfigMap volume the way the kubelet
// does: the file is a symlink through "..data", a symlink to a timestamped
// directory, and an update points "..data" at a new directory.
func TestRunConfigMap(t *testing.T) {
	dir := t.TempDir()
	writeVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "services.yaml"), content)
	}
	writeVersion("..2026_01_01_v1", "services:\n  - name: one\n")
	if err := os.Symlink("..2026_01_01_v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "services.yaml")
	if err := os.Symlink(filepath.Join("..data", "services.yaml"), path); err != nil {
		t.Fatal(err)
	}

	store := registry.NewStore()
	src, err := New(Config{Path: path, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	sub := store.Subscribe("")
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runSource(t, src)

	writeVersion("..2026_01_02_v2", "services:\n  - name: two\n")
	if err := os.Symlink("..2026_01_02_v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01_v1")); err != nil {
		t.Fatal(err)
	}
	waitStore(ctx, t, store, sub, map[string][]row{"two": {}})
}

func TestRunNoDirectory(t *testing.T) {
	src, err := New(Config{Path: filepath.Join(t.TempDir(), "missing", "services.yaml"), Store: registry.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Run(context.Background()); err == nil {
		t.Error("Run = nil, want an error for a directory that does not exist")
	}
}

// TestDebounce drives Run's loop with fake events on a fake clock: a burst
// makes one reload, and a directory that never goes quiet is still
// reloaded at least once per window.
func TestDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := registry.NewStore()
		clock := t0
		src, path := newSource(t, store, "services: []\n", &clock)
		var reloads atomic.Int32
		src.reloaded = func(error) { reloads.Add(1) }
		events := make(chan fsnotify.Event)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- src.loop(ctx, events, nil) }()
		ev := fsnotify.Event{Name: path, Op: fsnotify.Write}

		synctest.Wait()
		if got := reloads.Load(); got != 1 {
			t.Fatalf("reloads = %d at start, want 1", got)
		}

		for range 10 {
			events <- ev
		}
		time.Sleep(debounce - time.Millisecond)
		synctest.Wait()
		if got := reloads.Load(); got != 1 {
			t.Errorf("reloads = %d before the window ends, want 1", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := reloads.Load(); got != 2 {
			t.Errorf("reloads = %d after a burst, want 2", got)
		}

		// An event every 60ms for 600ms: windows open at 0, 120, 240,
		// 360 and 480ms.
		for range 10 {
			events <- ev
			time.Sleep(60 * time.Millisecond)
		}
		time.Sleep(debounce)
		synctest.Wait()
		if got := reloads.Load(); got != 2+5 {
			t.Errorf("reloads = %d after a steady stream, want %d", got, 2+5)
		}

		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop = %v, want nil", err)
		}
	})
}

// TestDocExample checks that the example in doc.go loads and matches the
// example the tests use.
func TestDocExample(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		if l == "//\tservices:" {
			in = true
		}
		if in {
			if !strings.HasPrefix(l, "//\t") {
				break
			}
			lines = append(lines, strings.TrimPrefix(l, "//\t"))
		}
	}
	doc := strings.Join(lines, "\n") + "\n"
	got, err := parse([]byte(doc))
	if err != nil {
		t.Fatalf("doc.go example: %v\n%s", err, doc)
	}
	want, err := parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	opts := []cmp.Option{
		cmp.AllowUnexported(file{}, service{}),
		cmpopts.IgnoreFields(service{}, "lines"),
		cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	}
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("doc.go example differs from the test example (-test +doc):\n%s", diff)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		example,
		"services: []\n",
		"services:\n  - name: a\n    endpoints: [{address: 10.0.0.1, ports: [grpc=8080/udp]}]\n",
		"services:\n  - name: a\n    endpoints:\n      - &x {address: 10.0.0.1}\n      - *x\n",
		"services:\n  - name: a\n    endpoints: [{address: '::ffff:10.0.0.1', ports: [{name: G, number: 0x50}], metadata: {k: ~}}]\n",
		"---\n---\n",
		"services: [\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parse(data)
		if err != nil {
			if !errors.Is(err, registry.ErrInvalid) {
				t.Fatalf("parse error %v does not wrap registry.ErrInvalid", err)
			}
			return
		}
		for _, svc := range got.services {
			if err := registry.ValidateService("service", svc.name); err != nil {
				t.Fatalf("parsed an invalid service name: %v", err)
			}
			for _, e := range svc.endpoints {
				if err := e.Validate("endpoint"); err != nil {
					t.Fatalf("parsed an invalid endpoint: %v", err)
				}
			}
		}
	})
}

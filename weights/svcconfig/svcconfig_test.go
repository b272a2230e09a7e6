package svcconfig

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{"empty", "", ""},
		{"full", "strategy: zone-aware+pid\nprobe_share: 0.03\nheadroom: 0.7\nslow_start: {fraction: 0.1, ramp: 30s, requests: 50}\npid: {kp: 1, ki: 0.2, kd: 0, min_weight: 0.2, max_weight: 4, initial_weight: 0.5, skip_missing_share: 0.35, target: 0.6}\nmetric: cpu\nreport_interval: 5s\nblend: {from: zone-aware, to: zone-aware+pid, percent: 30}\n", ""},
		{"json", `{"strategy": "pid", "pid": {"kp": 0.3}}`, ""},
		{"pidGuard", "strategy: pid\npid: {error_guard: false, error_penalty: 0, min_rps: 0.5}\n", ""},
		{"pidGuardType", "pid:\n  error_guard: yes please\n", `payments.yaml:2: pid.error_guard: want true or false, got "yes please"`},
		{"pidGuardNumber", "pid:\n  error_guard: 1\n", `payments.yaml:2: pid.error_guard: want true or false, got "1"`},
		{"pidPenalty", "pid:\n  error_penalty: 11\n", "payments.yaml:2: pid.error_penalty: 11 is out of range [0, 10]"},
		{"pidMinRPS", "pid:\n  min_rps: 0\n", "payments.yaml:2: pid.min_rps: 0 is out of range (0, 1e+06]"},
		{"unknown", "strategy: pid\nweigth: 3\n", "payments.yaml:2: weigth: unknown field"},
		{"nestedUnknown", "pid:\n  kp: 1\n  kx: 2\n", "payments.yaml:3: pid.kx: unknown field"},
		{"badStrategy", "strategy: fastest\n", `payments.yaml:1: strategy: "fastest" is not one of`},
		{"badType", "headroom: high\n", `payments.yaml:1: headroom: want a number`},
		{"range", "probe_share: 0.9\n", "payments.yaml:1: probe_share: 0.9 is out of range"},
		{"percent", "blend: {from: zone-aware, to: pid, percent: 130}\n", "payments.yaml:1: blend.percent: 130 is out of range"},
		{"sameBlend", "blend: {from: pid, to: pid, percent: 3}\n", "blend.to:"},
		{"blendMissing", "blend: {from: pid, percent: 3}\n", "payments.yaml:1: blend.to: missing"},
		{"minMax", "pid:\n  min_weight: 0.5\n  max_weight: 5\n  initial_weight: 0.2\n", "payments.yaml:4: pid.initial_weight: 0.2 is outside"},
		{"duration", "report_interval: 100ms\n", "payments.yaml:1: report_interval: 100ms is out of range"},
		{"dup", "metric: cpu\nmetric: max\n", "payments.yaml:2: metric: set twice"},
		{"twoDocs", "metric: cpu\n---\nmetric: max\n", "payments.yaml:2: more than one YAML document"},
		{"notMap", "- a\n", "payments.yaml:1: want a mapping"},
		{"redirects", "redirects:\n  - {from: r1, to: r2, until: 2026-12-01T16:00:00Z}\n  - {from: r3, to: r2}\nexclude:\n  - {region: r4}\n", ""},
		{"redirectSame", "redirects: [{from: r1, to: r1}]\n", "payments.yaml:1: redirects[0].to: \"r1\" is the from region too"},
		{"redirectMissingTo", "redirects: [{from: r1}]\n", "redirects[0].to: missing"},
		{"redirectUnknown", "redirects: [{from: r1, to: r2, unitl: x}]\n", "redirects[0].unitl: unknown field"},
		{"redirectBadUntil", "redirects: [{from: r1, to: r2, until: tomorrow}]\n", "redirects[0].until: want an RFC 3339 time"},
		{"redirectTwice", "redirects: [{from: r1, to: r2}, {from: r1, to: r3}]\n", "redirects[1].from: \"r1\" is redirects[0].from too"},
		{"redirectBadRegion", "redirects: [{from: R_1, to: r2}]\n", "redirects[0].from:"},
		{"redirectsNotList", "redirects: {from: r1, to: r2}\n", "redirects: want a list"},
		{"excludeMissing", "exclude: [{until: 2026-12-01T16:00:00Z}]\n", "exclude[0].region: missing"},
		{"excludeTwice", "exclude: [{region: r1}, {region: r1}]\n", "exclude[1].region:"},
		{"subset", "subset_mode: deterministic\nsubset_size: 10\n", ""},
		{"subsetRandom", "subset_mode: random\nsubset_size: 3\n", ""},
		{"subsetOff", "subset_mode: off\n", ""},
		{"subsetBadMode", "subset_mode: ring\nsubset_size: 10\n", `payments.yaml:1: subset_mode: "ring" is not one of off, deterministic, random`},
		{"subsetZero", "subset_mode: deterministic\nsubset_size: 0\n", "payments.yaml:2: subset_size: 0 is out of range"},
		{"subsetHuge", "subset_mode: deterministic\nsubset_size: 5000\n", "payments.yaml:2: subset_size: 5000 is out of range"},
		{"subsetType", "subset_mode: deterministic\nsubset_size: ten\n", "payments.yaml:2: subset_size:"},
		{"subsetNoMode", "subset_size: 10\n", "payments.yaml:1: subset_size: is set but subset_mode is not set"},
		{"subsetModeOff", "subset_mode: off\nsubset_size: 10\n", "payments.yaml:2: subset_size: is set but subset_mode is off"},
		{"subsetNoSize", "subset_mode: deterministic\n", "payments.yaml:1: subset_mode: is deterministic but subset_size is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("payments.yaml", []byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v, want an ErrInvalid containing %q", err, tt.wantErr)
			}
		})
	}
	c, err := Parse("x.yaml", []byte("strategy: pid\npid: {kp: 0.3}\n"))
	if err != nil || c.Strategy != PID || c.PID.Kp != 0.3 || c.PID.Ki != Default().PID.Ki || c.Metric != MetricMax {
		t.Errorf("Parse = %+v, %v; want pid, kp 0.3, other fields default", c, err)
	}
}

// TestParseRegionRules: redirects and exclusions become package regions'
// rules, an omitted until meaning no expiry.
func TestParseRegionRules(t *testing.T) {
	c, err := Parse("p.yaml", []byte("redirects: [{from: r1, to: r2, until: 2026-12-01T16:00:00Z}]\nexclude: [{region: r3}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.RegionRules()
	want := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	if len(r.Redirects) != 1 || r.Redirects[0].From != "r1" || r.Redirects[0].To != "r2" || !r.Redirects[0].Until.Equal(want) {
		t.Errorf("Redirects = %+v, want r1 -> r2 until %v", r.Redirects, want)
	}
	if len(r.Excludes) != 1 || r.Excludes[0].Region != "r3" || !r.Excludes[0].Until.IsZero() {
		t.Errorf("Excludes = %+v, want r3 with no expiry", r.Excludes)
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	c, err := Parse("x.yaml", []byte("slow_start: {ramp: 90s}\nreport_interval: 3s\nblend: {from: pid, to: static, percent: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got Config
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}

// FuzzParse: Parse refuses with an *Error of the file or accepts a
// config that keeps the rules (the resilience block's held against
// checkResilience, written apart from the parser), and the accepted
// config as shown (its JSON) parses back to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "strategy: pid\n", "pid: {kp: 1, min_weight: 0.3}\n", `{"blend": {"from": "pid", "to": "static", "percent": 5}}`, "slow_start:\n  ramp: 1m\n",
		fullResilience,
		"strategy: pid\nresilience:\n  outlier_detection: {failure_percentage: {threshold: 50}}\n  lb: {client_wrr: {blackout_period: 30s, oob_reporting_period: 30s}}\n",
		"resilience: {retry: {on: [deadline_exceeded, internal], base_interval: 1s}, lb: {least_request: {choice_count: 3}}}\n",
		`{"resilience": {"timeout": "1h", "fault": {"abort": {"grpc_status": 16, "percent": 0.5}, "header": "x-a"}, "lb": {"ring_hash": {"header": "x", "max_ring_size": 8388608}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("Parse error %q: want ErrInvalid starting with the file", err)
			}
			return
		}
		if c.PID.MinWeight > c.PID.MaxWeight || c.PID.InitialWeight < c.PID.MinWeight || c.Headroom <= 0 || c.Headroom > 1 {
			t.Fatalf("Parse accepted an invalid config %+v", c)
		}
		if msg := checkResilience(c.Resilience); msg != "" {
			t.Fatalf("Parse accepted an invalid resilience block: %s", msg)
		}
		shown(t, c)
	})
}

func TestServiceFromFile(t *testing.T) {
	if s, err := ServiceFromFile("/etc/x/payments.prod.yaml"); err != nil || s != "payments.prod" {
		t.Errorf("ServiceFromFile = %q, %v", s, err)
	}
	for _, bad := range []string{"pay_ments.yaml", "x.yml", ".yaml"} {
		if _, err := ServiceFromFile(bad); err == nil {
			t.Errorf("ServiceFromFile(%q) = nil error", bad)
		}
	}
}

func openKV(t *testing.T) systemstore.KV {
	kv, err := boltstore.Open(t.TempDir(), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	return kv
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func write(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDirLifecycle: edit applies (change notification), a bad file is
// refused with file:line:field and the old config kept, a removed file is
// tombstoned and still applies, the defaults after the tombstone time,
// undelete restores.
func TestDirLifecycle(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := NewStore(StoreConfig{KV: openKV(t), Tombstone: 48 * time.Hour, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d, _ := NewDir(DirConfig{Path: dir, Store: s})

	write(t, dir, "payments.yaml", "strategy: pid\n")
	changed := s.Changed()
	if err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	<-changed
	if c, st, ok := s.Get("payments"); !ok || c.Strategy != PID || st.Source != SourceDir || st.File != "payments.yaml" {
		t.Fatalf("Get = %+v, %+v, %v; want pid from payments.yaml", c, st, ok)
	}

	v := s.Version()
	write(t, dir, "payments.yaml", "strategy: pid\npid:\n  kp: 2\n  kq: 1\n")
	err = d.Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "payments.yaml:4: pid.kq: unknown field") {
		t.Fatalf("Load = %v, want payments.yaml:4: pid.kq: unknown field", err)
	}
	if c, _, _ := s.Get("payments"); c.PID.Kp != Default().PID.Kp || s.Version() != v || d.Failures() != 1 {
		t.Fatalf("after a bad file: kp %v version %d failures %d, want the old config kept", c.PID.Kp, s.Version(), d.Failures())
	}

	if err := os.Remove(filepath.Join(dir, "payments.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	c, st, ok := s.Get("payments")
	if !ok || c.Strategy != PID || !st.Deleted || !st.DeletedAt.Equal(clock.now()) || !st.Until.Equal(clock.now().Add(48*time.Hour)) {
		t.Fatalf("after delete: %+v %+v %v; want pid still applied, deleted now, until +48h", c, st, ok)
	}

	clock.add(47 * time.Hour)
	if _, err := s.Undelete(ctx, "payments"); err != nil {
		t.Fatal(err)
	}
	if c, st, ok := s.Get("payments"); !ok || st.Deleted || c.Strategy != PID || st.Source != SourceAPI {
		t.Fatalf("after undelete: %+v %+v %v", c, st, ok)
	}

	if _, err := s.Delete(ctx, "payments", SourceAPI); err != nil {
		t.Fatal(err)
	}
	clock.add(48 * time.Hour)
	if c, _, ok := s.Get("payments"); ok || c.Strategy != ZoneAware {
		t.Fatalf("after the tombstone time: %+v %v, want defaults", c, ok)
	}
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Services(); len(got) != 0 {
		t.Fatalf("after sweep Services = %v, want none", got)
	}
	if _, err := s.Undelete(ctx, "payments"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Undelete after sweep = %v, want ErrNotFound", err)
	}
}

// TestDirWatch: a real fsnotify watch applies an edit in one reload.
func TestDirWatch(t *testing.T) {
	s, _ := NewStore(StoreConfig{KV: openKV(t)})
	dir := t.TempDir()
	d, _ := NewDir(DirConfig{Path: dir, Store: s})
	reloads := make(chan error, 100)
	d.reloaded = func(err error) { reloads <- err }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-reloads
	changed := s.Changed()
	write(t, dir, "search.yaml", "metric: inflight\n")
	<-changed
	if c, _, ok := s.Get("search"); !ok || c.Metric != MetricInflight {
		t.Fatalf("Get = %+v %v, want metric inflight", c, ok)
	}
}

// TestTwoStores: two Stores on one KV (bbolt, one client) and on a real
// etcd (two clients) see each other's set, delete and undelete through
// the watch.
func TestTwoStores(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		kv := openKV(t)
		twoStores(t, kv, kv)
	})
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		twoStores(t, openEtcd(t, srv.Endpoint), openEtcd(t, srv.Endpoint))
	})
}

func openEtcd(t *testing.T, endpoint string) systemstore.KV {
	kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{endpoint}, Prefix: "/svcconfig-test/", RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	return kv
}

func twoStores(t *testing.T, kvA, kvB systemstore.KV) {
	a, _ := NewStore(StoreConfig{KV: kvA})
	b, _ := NewStore(StoreConfig{KV: kvB})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b} {
		if _, err := s.Init(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { s.Run(ctx, 0) })
	}
	defer func() { cancel(); wg.Wait() }()
	for i, step := range []struct {
		from, to *Store
		do       func(*Store) error
		check    func(Config, Status, bool) bool
	}{
		{a, b, func(s *Store) error {
			_, err := s.Set(ctx, "cart", []byte("strategy: static\n"), SourceAPI, "")
			return err
		},
			func(c Config, _ Status, ok bool) bool { return ok && c.Strategy == Static }},
		{b, a, func(s *Store) error { _, err := s.Delete(ctx, "cart", SourceAPI); return err },
			func(c Config, st Status, ok bool) bool { return ok && st.Deleted && c.Strategy == Static }},
		{a, b, func(s *Store) error { _, err := s.Undelete(ctx, "cart"); return err },
			func(_ Config, st Status, ok bool) bool { return ok && !st.Deleted }},
	} {
		// Liveness bound only: a broken watch fails instead of hanging.
		deadline := time.After(30 * time.Second)
		for {
			ch := step.to.Changed()
			if step.do != nil {
				if err := step.do(step.from); err != nil {
					t.Fatal(err)
				}
				step.do = nil
			}
			if step.check(step.to.Get("cart")) {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				_, st, ok := step.to.Get("cart")
				t.Fatalf("step %d: the other store never saw the change: %+v %v", i, st, ok)
			}
		}
	}
}

// TestSweepSynctest: Run's sweep removes an expired tombstone on its own.
func TestSweepSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := NewStore(StoreConfig{Tombstone: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx, time.Minute); close(done) }()
		defer func() { cancel(); <-done }()
		if _, err := s.Set(ctx, "cart", []byte("strategy: pid\n"), SourceAPI, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Delete(ctx, "cart", SourceAPI); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Minute)
		synctest.Wait()
		if _, st, ok := s.Get("cart"); !ok || !st.Deleted {
			t.Fatalf("before expiry: %+v %v, want the tombstone applied", st, ok)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got := s.Services(); len(got) != 0 {
			t.Fatalf("after expiry Services = %v, want the record swept", got)
		}
	})
}

func TestHTTP(t *testing.T) {
	ctx := context.Background()
	s, _ := NewStore(StoreConfig{KV: openKV(t)})
	if _, err := s.Set(ctx, "payments", []byte("strategy: pid\n"), SourceDir, "payments.yaml"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler("s3cret", nil))
	defer srv.Close()
	tests := []struct {
		name, method, path, token, body string
		code                            int
		want                            string
	}{
		{"getDefault", "GET", "/v1/config/cart", "", "", 200, `"configured":false`},
		{"putNoToken", "PUT", "/v1/config/cart", "", "strategy: pid", 401, "no admin token"},
		{"putWrongToken", "PUT", "/v1/config/cart", "nope", "strategy: pid", 403, "wrong admin token"},
		{"putBadField", "PUT", "/v1/config/cart", "s3cret", "pid:\n  kp: -1\n", 400, `"field":"pid.kp"`},
		{"putYAML", "PUT", "/v1/config/cart", "s3cret", "strategy: pid\n", 200, `"strategy":"pid"`},
		{"putJSON", "PUT", "/v1/config/cart", "s3cret", `{"strategy": "static"}`, 200, `"strategy":"static"`},
		{"putOwned", "PUT", "/v1/config/payments", "s3cret", "strategy: static", 409, "payments.yaml"},
		{"deleteOwned", "DELETE", "/v1/config/payments", "s3cret", "", 409, "payments.yaml"},
		{"badService", "PUT", "/v1/config/Bad_Name", "s3cret", "strategy: pid", 400, `"field":"service"`},
		{"delete", "DELETE", "/v1/config/cart", "s3cret", "", 200, `"deleted":true`},
		{"getDeleted", "GET", "/v1/config/cart", "", "", 200, `"until":`},
		{"undeleteNoToken", "POST", "/v1/config/cart/undelete", "", "", 401, "no admin token"},
		{"undelete", "POST", "/v1/config/cart/undelete", "s3cret", "", 200, `"deleted":false`},
		{"undeleteLive", "POST", "/v1/config/cart/undelete", "s3cret", "", 404, "no config"},
		{"list", "GET", "/v1/config", "", "", 200, `"service":"payments"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			if _, err := readAll(&b, resp); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.code || !strings.Contains(b.String(), tt.want) {
				t.Fatalf("%s %s = %d %s, want %d containing %s", tt.method, tt.path, resp.StatusCode, b.String(), tt.code, tt.want)
			}
		})
	}
	noTok := httptest.NewServer(s.Handler("", nil))
	defer noTok.Close()
	req, _ := http.NewRequest("PUT", noTok.URL+"/v1/config/cart", strings.NewReader("strategy: pid"))
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("PUT without a server token = %d, want 403", resp.StatusCode)
	}
}

// TestDocExample: the example in docs/service-config.md parses, and its
// values other than strategy and blend are the defaults, as the doc says.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/service-config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/service-config.md has no ```yaml block")
	}
	c, err := Parse("payments.yaml", []byte(example))
	if err != nil {
		t.Fatalf("the doc's example: %v", err)
	}
	want := Default()
	want.Strategy = ZoneAwarePID
	want.Blend = &Blend{From: ZoneAware, To: ZoneAwarePID, Percent: 30}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("the doc's example (-want +got):\n%s", diff)
	}
}

// TestDirPrecedence: a file takes over a service the API set; the API is
// then refused with the file named; a badly named file is refused and
// counted; a file removed while spillway was down is tombstoned on the
// next load.
func TestDirPrecedence(t *testing.T) {
	ctx := context.Background()
	kv := openKV(t)
	s, _ := NewStore(StoreConfig{KV: kv})
	dir := t.TempDir()
	d, _ := NewDir(DirConfig{Path: dir, Store: s})
	if _, err := s.Set(ctx, "cart", []byte("strategy: static\n"), SourceAPI, ""); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "cart.yaml", "strategy: pid\n")
	write(t, dir, "Bad_Name.yaml", "strategy: pid\n")
	err := d.Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "Bad_Name.yaml: file name") || d.Failures() != 1 {
		t.Fatalf("Load = %v, failures %d; want Bad_Name.yaml refused and counted once", err, d.Failures())
	}
	if c, st, _ := s.Get("cart"); c.Strategy != PID || st.Source != SourceDir {
		t.Fatalf("cart = %s from %s, want pid from the file", c.Strategy, st.Source)
	}
	if _, err := s.Set(ctx, "cart", []byte("strategy: static\n"), SourceAPI, ""); !errors.Is(err, ErrOwnedByFile) || !strings.Contains(err.Error(), "cart.yaml") {
		t.Fatalf("API Set on a file's service = %v, want ErrOwnedByFile naming cart.yaml", err)
	}

	// "Restart": a new Store and Dir on the same KV, the file gone.
	os.Remove(filepath.Join(dir, "cart.yaml"))
	s2, _ := NewStore(StoreConfig{KV: kv})
	if _, err := s2.Init(ctx); err != nil {
		t.Fatal(err)
	}
	d2, _ := NewDir(DirConfig{Path: dir, Store: s2})
	d2.Load(ctx)
	if c, st, ok := s2.Get("cart"); !ok || !st.Deleted || c.Strategy != PID {
		t.Fatalf("after restart without the file: %s %+v %v, want the pid config tombstoned and applied", c.Strategy, st, ok)
	}
}

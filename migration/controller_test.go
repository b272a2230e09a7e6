package migration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// flakyStorage is systemstore.Memory whose writes fail while fail is set.
type flakyStorage struct {
	*systemstore.Memory
	fail bool
}

func (f *flakyStorage) PutSetting(ctx context.Context, key string, value []byte) error {
	if f.fail {
		return errors.New("disk full")
	}
	return f.Memory.PutSetting(ctx, key, value)
}

func newController(t *testing.T, store *registry.Store, st Storage, reg prometheus.Registerer) *Controller {
	t.Helper()
	c, err := NewController(ControllerConfig{Store: store, Storage: st, Registerer: reg, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func xdsFlag(s *registry.Store) string {
	v, ok := s.Snapshot().Flag(registry.FlagXDS)
	if !ok {
		return "(unset)"
	}
	return v
}

func TestNewControllerValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ControllerConfig
		want string
	}{
		{"no_store", ControllerConfig{Storage: systemstore.NewMemory()}, "Store"},
		{"no_storage", ControllerConfig{Store: registry.NewStore()}, "Storage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewController(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewController error = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestControllerPanic(t *testing.T) {
	ctx := context.Background()
	store, st, reg := registry.NewStore(), &flakyStorage{Memory: systemstore.NewMemory()}, prometheus.NewRegistry()
	c := newController(t, store, st, reg)
	if got := c.Panic(); got != (PanicState{}) || xdsFlag(store) != "(unset)" {
		t.Fatalf("fresh: Panic() = %+v, store flag %s; want off and unset", got, xdsFlag(store))
	}
	steps := []struct {
		name        string
		on, fail    bool
		wantChanged bool
		wantErr     bool
		wantFlag    string
		wantGauge   float64
	}{
		{name: "off_when_off", on: false, wantFlag: "(unset)"},
		{name: "on", on: true, wantChanged: true, wantFlag: "off", wantGauge: 1},
		{name: "on_again", on: true, wantFlag: "off", wantGauge: 1},
		{name: "storage_fails", on: false, fail: true, wantErr: true, wantFlag: "off", wantGauge: 1},
		{name: "off", on: false, wantChanged: true, wantFlag: "on"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			st.fail = s.fail
			before := store.Snapshot().Version()
			got, changed, err := c.SetPanic(ctx, s.on)
			if (err != nil) != s.wantErr || changed != s.wantChanged {
				t.Fatalf("SetPanic(%v) = changed %v, err %v; want changed %v, error %v", s.on, changed, err, s.wantChanged, s.wantErr)
			}
			if f := xdsFlag(store); f != s.wantFlag {
				t.Errorf("store flag = %s, want %s", f, s.wantFlag)
			}
			if !changed && store.Snapshot().Version() != before {
				t.Errorf("store version %d -> %d without a change", before, store.Snapshot().Version())
			}
			if got != c.Panic() {
				t.Errorf("SetPanic returned %+v, Panic() = %+v", got, c.Panic())
			}
			if g := gathered(t, reg, "spillway_panic"); g != s.wantGauge {
				t.Errorf("spillway_panic = %v, want %v", g, s.wantGauge)
			}
		})
	}
	if c.Panic().Changed != t0 {
		t.Errorf("Changed = %v, want %v", c.Panic().Changed, t0)
	}
}

func TestControllerRollout(t *testing.T) {
	ctx := context.Background()
	st := &flakyStorage{Memory: systemstore.NewMemory()}
	reg := prometheus.NewRegistry()
	c := newController(t, registry.NewStore(), st, reg)
	good := "rules:\n  - name: t3\n    match: {tier: \"3\"}\n    percent: 10\n"
	steps := []struct {
		name, yaml  string
		fail        bool
		wantChanged bool
		wantErr     string // a substring naming the field; "" for none
		wantVersion uint64
	}{
		{name: "set", yaml: good, wantChanged: true, wantVersion: 1},
		{name: "same_again", yaml: good, wantVersion: 1},
		{name: "bad_percent", yaml: "rules:\n  - percent: 150\n", wantErr: "rules[0].percent", wantVersion: 1},
		{name: "unknown_field", yaml: "rules:\n  - percnt: 10\n", wantErr: "percnt", wantVersion: 1},
		{name: "unparsable", yaml: "rules: [\n", wantErr: "yaml", wantVersion: 1},
		{name: "too_big", yaml: "rules: []\n" + strings.Repeat("#", MaxConfigBytes), wantErr: "yaml:", wantVersion: 1},
		{name: "storage_fails", yaml: "rules: []\n", fail: true, wantErr: "disk full", wantVersion: 1},
		{name: "change", yaml: "rules: []\n", wantChanged: true, wantVersion: 2},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			st.fail = s.fail
			before := c.Rollout()
			got, changed, err := c.SetRollout(ctx, []byte(s.yaml))
			switch {
			case s.wantErr == "" && err != nil:
				t.Fatalf("SetRollout: %v", err)
			case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
				t.Fatalf("SetRollout error = %v, want one naming %q", err, s.wantErr)
			}
			if changed != s.wantChanged || got.Version != s.wantVersion || c.Rollout().Version != s.wantVersion {
				t.Errorf("changed %v, version %d (in force %d); want changed %v, version %d",
					changed, got.Version, c.Rollout().Version, s.wantChanged, s.wantVersion)
			}
			if !changed && c.Rollout().YAML != before.YAML {
				t.Errorf("config in force changed without a change: %q -> %q", before.YAML, c.Rollout().YAML)
			}
			if g := gathered(t, reg, "spillway_rollout_version"); g != float64(s.wantVersion) {
				t.Errorf("spillway_rollout_version = %v, want %d", g, s.wantVersion)
			}
		})
	}
}

// TestControllerRestore: a new Controller on the same storage comes back
// with the flag (published in a new store) and the config, and keeps
// counting versions.
func TestControllerRestore(t *testing.T) {
	ctx := context.Background()
	st := systemstore.NewMemory()
	c := newController(t, registry.NewStore(), st, nil)
	if _, _, err := c.SetPanic(ctx, true); err != nil {
		t.Fatal(err)
	}
	yaml := "rules:\n  - match: {}\n    percent: 50\n"
	if _, _, err := c.SetRollout(ctx, []byte(yaml)); err != nil {
		t.Fatal(err)
	}

	store := registry.NewStore()
	c2 := newController(t, store, st, nil)
	if xdsFlag(store) != "off" || c2.Panic() != (PanicState{Panic: true, Changed: t0}) {
		t.Errorf("after restore: store flag %s, Panic() %+v; want off, panic since t0", xdsFlag(store), c2.Panic())
	}
	want := Rollout{YAML: yaml, Config: &Config{Rules: []Rule{{Match: map[string]string{}, Percent: 50}}}, Version: 1, Changed: t0}
	if diff := cmp.Diff(want, c2.Rollout()); diff != "" {
		t.Errorf("rollout after restore (-want +got):\n%s", diff)
	}
	if got, _, _ := c2.SetRollout(ctx, []byte("rules: []\n")); got.Version != 2 {
		t.Errorf("version after restore and a change = %d, want 2", got.Version)
	}
}

// TestControllerRestoreBadValues: what does not decode is left out; the
// server still starts, with the flag off and nobody eligible.
func TestControllerRestoreBadValues(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		panicV, rolV string
		wantVersion  uint64
	}{
		{name: "garbage", panicV: "{", rolV: "not json", wantVersion: 0},
		{name: "config_no_longer_parses", panicV: `{"panic":false}`, rolV: `{"yaml":"rules:\n  - percent: 500\n","version":7}`, wantVersion: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := systemstore.NewMemory()
			st.PutSetting(ctx, SettingPanic, []byte(tc.panicV))
			st.PutSetting(ctx, SettingRollout, []byte(tc.rolV))
			c := newController(t, registry.NewStore(), st, nil)
			if c.Panic().Panic {
				t.Error("panic on after restoring a bad value")
			}
			r := c.Rollout()
			if r.Version != tc.wantVersion || len(r.Config.Rules) != 0 || r.YAML != "" {
				t.Errorf("rollout = %+v, want version %d with no rules", r, tc.wantVersion)
			}
		})
	}
}

// gathered returns the value of the gauge name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

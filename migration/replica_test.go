package migration

import (
	"context"
	"testing"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

// TestApplyStored: what one replica's controller stores, another's puts in
// force through ApplyStored (the shared store's watch), publishing the
// panic flag; an older rollout version is ignored, an equal one with
// other YAML is taken (the store ordered it last); bad JSON is an error
// that leaves the state alone.
func TestApplyStored(t *testing.T) {
	ctx := context.Background()
	shared := systemstore.NewMemory()
	a := newController(t, registry.NewStore(), shared, nil)
	storeB := registry.NewStore()
	b := newController(t, storeB, systemstore.NewMemory(), nil)
	stored := func(key string) []byte {
		s, err := shared.Settings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s[key]
	}

	if _, _, err := a.SetPanic(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := b.ApplyStored(SettingPanic, stored(SettingPanic)); err != nil {
		t.Fatal(err)
	}
	if !b.Panic().Panic {
		t.Errorf("b.Panic() off after applying a's stored flag")
	}
	if got, _ := storeB.Snapshot().Flag(registry.FlagXDS); got != "off" {
		t.Errorf("b's published flag = %q, want off", got)
	}

	if _, _, err := a.SetRollout(ctx, []byte("rules:\n  - name: ten\n    match: {}\n    percent: 10\n")); err != nil {
		t.Fatal(err)
	}
	v1 := stored(SettingRollout)
	if _, _, err := a.SetRollout(ctx, []byte("rules:\n  - name: twenty\n    match: {}\n    percent: 20\n")); err != nil {
		t.Fatal(err)
	}
	v2 := stored(SettingRollout)
	for _, step := range []struct {
		name    string
		key     string
		value   []byte
		wantErr bool
		wantVer uint64
		wantYAM string
	}{
		{"v2", SettingRollout, v2, false, 2, "twenty"},
		{"older_v1_ignored", SettingRollout, v1, false, 2, "twenty"},
		{"bad_json", SettingRollout, []byte("{"), true, 2, "twenty"},
		{"same_version_other_yaml", SettingRollout, []byte(`{"yaml":"rules:\n  - name: other\n    match: {}\n    percent: 5\n","version":2}`), false, 2, "other"},
		{"unknown_key_ignored", "weights/x", []byte("?"), false, 2, "other"},
	} {
		err := b.ApplyStored(step.key, step.value)
		if (err != nil) != step.wantErr {
			t.Errorf("%s: ApplyStored = %v, want error %v", step.name, err, step.wantErr)
		}
		ro := b.Rollout()
		if ro.Version != step.wantVer || len(ro.Config.Rules) != 1 || ro.Config.Rules[0].Name != step.wantYAM {
			t.Errorf("%s: rollout = version %d rules %v, want version %d rule %q", step.name, ro.Version, ro.Config.Rules, step.wantVer, step.wantYAM)
		}
	}
	if err := b.ApplyStored(SettingPanic, []byte("not json")); err == nil || !b.Panic().Panic {
		t.Errorf("ApplyStored(bad panic JSON) = %v with panic %v, want an error and the flag kept", err, b.Panic().Panic)
	}
}

package systemstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
)

type settingsStorage interface {
	PutSetting(context.Context, string, []byte) error
	Settings(context.Context) (map[string][]byte, error)
	Close() error
}

// TestSettingsConformance runs one suite over every implementation.
func TestSettingsConformance(t *testing.T) {
	impls := map[string]func(t *testing.T) settingsStorage{
		"memory": func(*testing.T) settingsStorage { return systemstore.NewMemory() },
		"bolt": func(t *testing.T) settingsStorage {
			b, err := boltstore.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	for name, open := range impls {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			defer s.Close()
			got, err := s.Settings(ctx)
			if err != nil || len(got) != 0 {
				t.Fatalf("Settings of a new store = %v, %v; want empty, nil", got, err)
			}
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					if err := s.PutSetting(ctx, fmt.Sprintf("k%02d", i), []byte(fmt.Sprint(i))); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			v := []byte("on")
			if err := s.PutSetting(ctx, "k03", v); err != nil {
				t.Fatal(err)
			}
			v[0] = 'X' // the store keeps its own copy
			if err := s.PutSetting(ctx, "empty", nil); err != nil {
				t.Fatalf("PutSetting of a nil value: %v", err)
			}
			if err := s.PutSetting(ctx, "", []byte("x")); err == nil {
				t.Error("PutSetting with an empty key succeeded, want an error")
			}
			got, err = s.Settings(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 21 {
				t.Errorf("Settings = %d keys, want 21", len(got))
			}
			if string(got["k03"]) != "on" || string(got["k07"]) != "7" || len(got["empty"]) != 0 {
				t.Errorf("k03, k07, empty = %q, %q, %q; want on, 7, empty", got["k03"], got["k07"], got["empty"])
			}
			got["k07"][0] = 'X' // the caller owns what Settings returns
			again, _ := s.Settings(ctx)
			if string(again["k07"]) != "7" {
				t.Errorf("k07 after changing a returned value = %q, want 7", again["k07"])
			}
		})
	}
}

// TestSettingsSurviveReopen: what PutSetting acknowledged is there after
// the file is closed and opened again, next to the registrations.
func TestSettingsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b, err := boltstore.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"panic": []byte(`{"panic":true}`), "rollout": []byte("rules: []\n")}
	for k, v := range want {
		if err := b.PutSetting(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Put(ctx, rec(1)); err != nil {
		t.Fatal(err)
	}
	b.Close()

	b2, err := boltstore.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	got, err := b2.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("settings after reopen (-want +got):\n%s", diff)
	}
	recs, err := b2.List(ctx)
	if err != nil || len(recs) != 1 {
		t.Errorf("registrations after reopen: %d, %v; want 1 (settings do not mix with them)", len(recs), err)
	}
}

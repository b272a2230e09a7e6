package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

func TestParseStoreURL(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     storeSpec
		err      string // part named in the error; "" means no error
	}{
		{"default", "", storeSpec{Kind: "bolt"}, ""},
		{"bolt", "bolt", storeSpec{Kind: "bolt"}, ""},
		{"etcd_one", "etcd://127.0.0.1:2379/spillway", storeSpec{Kind: "etcd", Endpoints: []string{"127.0.0.1:2379"}, Prefix: "/spillway/"}, ""},
		{"etcd_three", "etcd://e1:2379,e2:2379,e3:2379/prod/spillway", storeSpec{Kind: "etcd", Endpoints: []string{"e1:2379", "e2:2379", "e3:2379"}, Prefix: "/prod/spillway/"}, ""},
		{"etcd_no_prefix", "etcd://e1:2379", storeSpec{Kind: "etcd", Endpoints: []string{"e1:2379"}, Prefix: "/spillway/"}, ""},
		{"etcd_trailing_slash", "etcd://e1:2379/p/", storeSpec{Kind: "etcd", Endpoints: []string{"e1:2379"}, Prefix: "/p/"}, ""},
		{"etcd_ipv6", "etcd://[::1]:2379/p", storeSpec{Kind: "etcd", Endpoints: []string{"[::1]:2379"}, Prefix: "/p/"}, ""},
		{"spanner", "spanner://projects/my-proj/instances/main/databases/spillway", storeSpec{Kind: "spanner", Database: "projects/my-proj/instances/main/databases/spillway"}, ""},
		{"no_scheme", "127.0.0.1:2379", storeSpec{}, "want etcd://"},
		{"bad_scheme", "redis://h:1/p", storeSpec{}, `scheme "redis"`},
		{"etcd_no_host", "etcd:///p", storeSpec{}, "host: none"},
		{"etcd_no_port", "etcd://e1/p", storeSpec{}, `host 1 "e1"`},
		{"etcd_bad_port", "etcd://e1:2379,e2:99999/p", storeSpec{}, `host 2 "e2:99999": port`},
		{"etcd_empty_host", "etcd://:2379/p", storeSpec{}, "host is empty"},
		{"etcd_empty_second_host", "etcd://e1:2379,/p", storeSpec{}, "host 2"},
		{"etcd_userinfo", "etcd://u@e1:2379/p", storeSpec{}, "bad character"},
		{"etcd_bad_prefix", "etcd://e1:2379/a//b", storeSpec{}, "prefix"},
		{"etcd_dotdot_prefix", "etcd://e1:2379/a/../b", storeSpec{}, "prefix"},
		{"spanner_short", "spanner://projects/p1/instances/i1", storeSpec{}, "projects/P/instances/I/databases/D"},
		{"spanner_bad_project", "spanner://projects/My_Proj/instances/i1/databases/d1", storeSpec{}, "project"},
		{"spanner_bad_database", "spanner://projects/p1/instances/i1/databases/1d", storeSpec{}, "database \"1d\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStoreURL(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--store") {
					t.Fatalf("parseStoreURL(%q) err = %v, want one naming --store and %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseStoreURL(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseStoreURL(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func FuzzParseStoreURL(f *testing.F) {
	for _, s := range []string{"", "bolt", "etcd://127.0.0.1:2379/spillway", "etcd://e1:2379,e2:2379/a/b/", "etcd://[::1]:1",
		"spanner://projects/p1/instances/i1/databases/d1", "spanner://projects//instances", "etcd://:0/", "x://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := parseStoreURL(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--store") {
				t.Fatalf("error %q does not name --store", err)
			}
			return
		}
		switch spec.Kind {
		case "bolt":
		case "etcd":
			if len(spec.Endpoints) == 0 || !strings.HasPrefix(spec.Prefix, "/") || !strings.HasSuffix(spec.Prefix, "/") {
				t.Fatalf("parseStoreURL(%q) = %+v: no endpoints or a bad prefix", s, spec)
			}
			if p := strings.Trim(spec.Prefix, "/"); p != "" {
				if err := systemstore.ValidateKey(p); err != nil {
					t.Fatalf("parseStoreURL(%q) prefix %q: %v", s, spec.Prefix, err)
				}
			}
		case "spanner":
			if !strings.HasPrefix(spec.Database, "projects/") {
				t.Fatalf("parseStoreURL(%q) database %q", s, spec.Database)
			}
		default:
			t.Fatalf("parseStoreURL(%q) kind %q", s, spec.Kind)
		}
	})
}

// TestStoreDefaultUnchanged: no flags keep bbolt in ./spillway-data.
func TestStoreDefaultUnchanged(t *testing.T) {
	cfg, err := parseConfig(nil, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "./spillway-data" || cfg.Store != (StoreConfig{Replica: ReplicaConfig{Mesh: MeshConfig{Load: true}}}) {
		t.Errorf("default data dir, store = %q, %+v; want ./spillway-data, none", cfg.DataDir, cfg.Store)
	}
	dir := filepath.Join(t.TempDir(), "spillway-data")
	st, err := openStorage(context.Background(), cfg.Store, dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := os.Stat(filepath.Join(dir, "registrations.db")); err != nil {
		t.Errorf("default store: %v, want registrations.db in the data dir", err)
	}
}

func TestStoreFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"etcd", []string{"--store", "etcd://e1:2379,e2:2379/p", "--etcd-username", "u", "--etcd-dial-timeout", "2s"}, ""},
		{"spanner", []string{"--store", "spanner://projects/p1/instances/i1/databases/d1", "--spanner-poll", "250ms"}, ""},
		{"bad_url", []string{"--store", "etcd://e1/p"}, "--store"},
		{"etcd_flags_without_etcd", []string{"--etcd-ca", "ca.pem"}, "--etcd-*"},
		{"negative_poll", []string{"--spanner-poll", "-1s"}, "--spanner-poll"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, os.Stderr)
			if tc.err == "" && err != nil {
				t.Fatalf("parseConfig(%q): %v", tc.args, err)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("parseConfig(%q) err = %v, want one naming %s", tc.args, err, tc.err)
			}
		})
	}
}

// TestStoreEtcdWiring: --store etcd://... opens the real etcd, and a
// setting one server stored is read by a second one.
func TestStoreEtcdWiring(t *testing.T) {
	srv := etcdtest.Start(t)
	url := "etcd://" + strings.TrimPrefix(srv.Endpoint, "http://") + "/wiring"
	cfg, err := parseConfig([]string{"--store", url}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, log := context.Background(), slog.New(slog.DiscardHandler)
	a, err := openStorage(ctx, cfg.Store, "", log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openStorage(ctx, cfg.Store, "", log)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.PutSetting(ctx, "migration/panic", []byte(`{"panic":true}`)); err != nil {
		t.Fatal(err)
	}
	got, err := b.Settings(ctx)
	if err != nil || string(got["migration/panic"]) != `{"panic":true}` {
		t.Errorf("second server's Settings = %q, %v; want migration/panic", got, err)
	}
}

package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

// TestStoreCopy: a single-replica bbolt data dir moves onto etcd with
// `spillway store copy`; every registration and setting reads back from
// etcd; a second copy onto the now non-empty target is refused unless
// --overwrite.
func TestStoreCopy(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "spillway-data")
	st, err := boltstore.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		e := registry.Endpoint{ID: "e" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), Ports: []registry.Port{{Name: "grpc", Number: 8080}}}
		if err := st.Put(ctx, systemstore.Record{LeaseID: "l", Service: "payments", TTL: 30 * time.Second, Endpoint: e}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutSetting(ctx, "migration/panic", []byte(`{"panic":true}`)); err != nil {
		t.Fatal(err)
	}
	st.Close()

	srv := etcdtest.Start(t)
	to := "etcd://" + strings.TrimPrefix(srv.Endpoint, "http://") + "/moved"
	var out, errb bytes.Buffer
	if code := storeMain(ctx, []string{"copy", "--from", "bbolt://" + dir, "--to", to}, &out, &errb); code != 0 {
		t.Fatalf("store copy = exit %d: %s", code, errb.String())
	}
	if want := "copied 50 registrations and 1 settings"; !strings.Contains(out.String(), want) {
		t.Errorf("store copy printed %q, want %q", out.String(), want)
	}
	target, err := openStorage(ctx, StoreConfig{URL: to}, "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	recs, err := target.List(ctx)
	if err != nil || len(recs) != 50 {
		t.Errorf("etcd after the copy: %d records (err %v), want 50", len(recs), err)
	}
	if s, err := target.Settings(ctx); err != nil || string(s["migration/panic"]) != `{"panic":true}` {
		t.Errorf("etcd settings after the copy = %q (err %v)", s, err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"target_not_empty", []string{"copy", "--from", "bbolt://" + dir, "--to", to}, 1, "--overwrite"},
		{"overwrite", []string{"copy", "--from", "bbolt://" + dir, "--to", to, "--overwrite"}, 0, ""},
		{"no_from", []string{"copy", "--to", to}, 1, "--from: empty"},
		{"bad_to", []string{"copy", "--from", "bbolt://" + dir, "--to", "etcd://nohost/p"}, 1, "--to"},
		{"same", []string{"copy", "--from", to, "--to", to}, 1, "both"},
		{"no_command", nil, 2, "usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := storeMain(ctx, tc.args, &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.err) {
				t.Errorf("store %v = exit %d, stderr %q; want exit %d with %q", tc.args, code, errb.String(), tc.code, tc.err)
			}
		})
	}
}

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
)

func TestReplicaFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(file, []byte("store:\n  url: etcd://e1:2379/p\n  replica:\n    id: pod-1\n    lastseen_flush: 3s\n    election_ttl: 4s\n    mesh:\n      shards: 8\n      stale_cycles: 5\n      addr: 10.0.0.1:18000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want ReplicaConfig
		err  string
	}{
		{"defaults", nil, ReplicaConfig{Mesh: MeshConfig{Load: true}}, ""},
		{"flags", []string{"--store", "etcd://e1:2379/p", "--replica-id", "spillway-0", "--lastseen-flush", "2s", "--election-ttl", "3s"},
			ReplicaConfig{ID: "spillway-0", LastSeenFlush: 2 * time.Second, ElectionTTL: 3 * time.Second, Mesh: MeshConfig{Load: true}}, ""},
		{"mesh_flags", []string{"--mesh-load=false", "--mesh-shards", "32", "--mesh-stale-cycles", "4", "--mesh-addr", "r1.internal:18000"},
			ReplicaConfig{Mesh: MeshConfig{Shards: 32, StaleCycles: 4, Addr: "r1.internal:18000"}}, ""},
		{"yaml", []string{"--config", file}, ReplicaConfig{ID: "pod-1", LastSeenFlush: 3 * time.Second, ElectionTTL: 4 * time.Second, Mesh: MeshConfig{Load: true, Shards: 8, StaleCycles: 5, Addr: "10.0.0.1:18000"}}, ""},
		{"flag_beats_yaml", []string{"--config", file, "--replica-id", "pod-2", "--mesh-shards", "4"}, ReplicaConfig{ID: "pod-2", LastSeenFlush: 3 * time.Second, ElectionTTL: 4 * time.Second, Mesh: MeshConfig{Load: true, Shards: 4, StaleCycles: 5, Addr: "10.0.0.1:18000"}}, ""},
		{"bad_id", []string{"--replica-id", "a/b"}, ReplicaConfig{}, "--replica-id (store.replica.id)"},
		{"negative_flush", []string{"--lastseen-flush", "-1s"}, ReplicaConfig{}, "--lastseen-flush"},
		{"short_election", []string{"--election-ttl", "500ms"}, ReplicaConfig{}, "--election-ttl"},
		{"mesh_shards", []string{"--mesh-shards", "100000"}, ReplicaConfig{}, "--mesh-shards (store.replica.mesh.shards)"},
		{"mesh_stale", []string{"--mesh-stale-cycles", "-1"}, ReplicaConfig{}, "--mesh-stale-cycles"},
		{"mesh_addr", []string{"--mesh-addr", "no-port"}, ReplicaConfig{}, "--mesh-addr (store.replica.mesh.addr)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args, os.Stderr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseConfig(%q) err = %v, want one naming %s", tc.args, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Store.Replica != tc.want {
				t.Errorf("replica config = %+v, want %+v", cfg.Store.Replica, tc.want)
			}
		})
	}
}

// TestReplicationOnlyOnSharedStores: bbolt (the default) and memory run
// as today, with no replication and no expiry decider; etcd gets both.
func TestReplicationOnlyOnSharedStores(t *testing.T) {
	ctx, log := context.Background(), slog.New(slog.DiscardHandler)
	ctl, err := migration.NewController(migration.ControllerConfig{Store: registry.NewStore(), Storage: systemstore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(t.TempDir(), "data"), ""} {
		sys, err := openStorage(ctx, StoreConfig{}, dir, log)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := newReplica(StoreConfig{}, sys, ctl, time.Hour, nil, log)
		var lc lease.Config
		decideExpiry(&lc, rep)
		if err != nil || rep != nil || lc.Decider != nil || lc.ExpiryGrace != 0 {
			t.Errorf("data dir %q: replica %v (%v), decider %v, grace %v; want none", dir, rep, err, lc.Decider, lc.ExpiryGrace)
		}
		sys.Close()
	}

	srv := etcdtest.Start(t)
	c := StoreConfig{URL: "etcd://" + strings.TrimPrefix(srv.Endpoint, "http://") + "/repl", Replica: ReplicaConfig{LastSeenFlush: 2 * time.Second}}
	sys, err := openStorage(ctx, c, "", log)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	rep, err := newReplica(c, sys, ctl, time.Hour, nil, log)
	if err != nil || rep == nil {
		t.Fatalf("etcd: replica %v, %v; want one", rep, err)
	}
	var lc lease.Config
	decideExpiry(&lc, rep)
	if lc.Decider == nil || lc.ExpiryGrace != 4*time.Second {
		t.Errorf("etcd: decider %v, grace %v; want the replica and 4s (flush 2s + 2 probes)", lc.Decider, lc.ExpiryGrace)
	}
	if lc.Decider.MayExpire() {
		t.Errorf("the replica allows expiry before it has synced")
	}
}

// TestMeshAddr: the address other replicas dial defaults to --grpc-addr
// only when that names a host.
func TestMeshAddr(t *testing.T) {
	for _, tc := range []struct {
		mesh, grpc, want, err string
	}{
		{"", "127.0.0.1:18000", "127.0.0.1:18000", ""},
		{"", "r1.internal:18000", "r1.internal:18000", ""},
		{"10.0.0.1:18000", "0.0.0.0:18000", "10.0.0.1:18000", ""},
		{"", "0.0.0.0:18000", "", "--mesh-addr"},
		{"", ":18000", "", "--mesh-addr"},
		{"", "[::]:18000", "", "--mesh-addr"},
	} {
		got, err := meshAddr(MeshConfig{Addr: tc.mesh}, tc.grpc)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("meshAddr(%q, %q) err = %v, want one naming %s", tc.mesh, tc.grpc, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("meshAddr(%q, %q) = %q, %v; want %q", tc.mesh, tc.grpc, got, err, tc.want)
		}
	}
}

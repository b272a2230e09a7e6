package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/replica/clusterversion"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/ownership"
)

// TestClusterVersionRefusesStart: a store a later release finalised
// (version 3) refuses this binary's start, naming both versions and what
// to do, before anything listens.
func TestClusterVersionRefusesStart(t *testing.T) {
	srv := etcdtest.Start(t)
	kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{srv.Endpoint}, Prefix: "/cvstart/"})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	if _, err := kv.Put(context.Background(), clusterversion.Key, []byte(`{"version":3,"at":"2027-01-02T03:04:05Z","by":"r9"}`)); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig([]string{"--store", "etcd://" + strings.TrimPrefix(srv.Endpoint, "http://") + "/cvstart", "--replica-id", "r1", "--data-dir", "",
		"--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, cfg, slog.New(slog.DiscardHandler))
	for _, want := range []string{"--store etcd://", "this binary supports cluster version 2; the store's cluster version is 3, finalised by r9 at 2027-01-02T03:04:05Z", "run a release that supports 3"} {
		if !strings.Contains(errString(err), want) {
			t.Errorf("run = %v, want an error saying %q", err, want)
		}
	}
	if !errors.Is(err, clusterversion.ErrUnsupported) {
		t.Errorf("run = %v, want ErrUnsupported", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestHeardMembers: a new owner waits for the acknowledgement of every
// live member but, when its gRPC port verifies client certificates and
// cluster version 2 is in force, those the load exchange refuses over any
// certificate (a record without identity); never itself.
func TestHeardMembers(t *testing.T) {
	members := []ownership.Member{{ID: "a"}, {ID: "b", Identity: "spiffe://test/b"}, {ID: "old"}}
	at2, err := clusterversion.New(clusterversion.Config{}) // one replica: this binary's version, 2
	if err != nil {
		t.Fatal(err)
	}
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	at1, err := clusterversion.New(clusterversion.Config{KV: kv, ID: "a"}) // Baseline until Init
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		versions *clusterversion.Versions
		verifies bool
		want     []string
	}{
		{"plaintext_version_2", at2, false, []string{"a", "b", "old"}},
		{"mtls_version_1", at1, true, []string{"a", "b", "old"}},
		{"mtls_version_2", at2, true, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := exchange.NewServer(exchange.ServerConfig{Merged: exchange.NewMerged(exchange.MergedConfig{}), Self: "a", Versions: tc.versions})
			if err != nil {
				t.Fatal(err)
			}
			if got := heardMembers(members, unheard(tc.verifies, srv)); !slices.Equal(got, tc.want) {
				t.Errorf("heardMembers = %v, want %v", got, tc.want)
			}
		})
	}
}

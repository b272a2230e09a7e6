package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, endpoint, prefix string) *etcdstore.KV {
	t.Helper()
	kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{endpoint}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestConformance runs the suite against one real etcd process; every
// subtest gets its own prefix, so they do not see each other's keys.
func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	var n atomic.Int64
	systemstoretest.RunConformance(t, systemstoretest.Backend{
		Fresh: func(t *testing.T) func(t *testing.T) systemstore.KV {
			prefix := fmt.Sprintf("/conformance-%d/", n.Add(1))
			return func(t *testing.T) systemstore.KV { return open(t, srv.Endpoint, prefix) }
		},
		Compact: func(t *testing.T, kv systemstore.KV, rev int64) {
			if err := kv.(*etcdstore.KV).Compact(context.Background(), rev); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestServerRestart: what a Put acknowledged is there after the etcd
// process is killed and started again, and a client opened then reads it.
func TestServerRestart(t *testing.T) {
	srv := etcdtest.Start(t)
	kv := open(t, srv.Endpoint, "/restart/")
	rev, err := kv.Put(context.Background(), "registrations/web/e1", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	kv.Close()
	srv.Restart()
	kv = open(t, srv.Endpoint, "/restart/")
	defer kv.Close()
	v, got, err := kv.Get(context.Background(), "registrations/web/e1")
	if err != nil || string(v) != "v" || got != rev {
		t.Errorf("Get after etcd restart = %q, %d, %v; want v, %d, nil", v, got, err, rev)
	}
}

// TestPrefixIsolation: two prefixes on one cluster do not see each other.
func TestPrefixIsolation(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv.Endpoint, "/a/"), open(t, srv.Endpoint, "/b/")
	defer a.Close()
	defer b.Close()
	if _, err := a.Put(context.Background(), "k", []byte("in a")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(context.Background(), "k"); !errors.Is(err, systemstore.ErrNotFound) {
		t.Errorf("Get(k) under /b/ = %v, want ErrNotFound", err)
	}
	kvs, _, err := b.List(context.Background(), "")
	if err != nil || len(kvs) != 0 {
		t.Errorf("List under /b/ = %v, %v; want nothing", kvs, err)
	}
}

// TestUnreachable: Open against a port nothing listens on fails, naming
// the store.
func TestUnreachable(t *testing.T) {
	srv := etcdtest.Start(t)
	endpoint := srv.Endpoint
	srv.Stop()
	_, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{endpoint}, DialTimeout: 500_000_000})
	if err == nil || !strings.Contains(err.Error(), "etcd "+endpoint) {
		t.Errorf("Open of a stopped etcd err = %v, want an error naming etcd %s", err, endpoint)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  etcdstore.Config
		want string
	}{
		{"no_endpoints", etcdstore.Config{}, "Endpoints"},
		{"prefix_no_slash", etcdstore.Config{Endpoints: []string{"127.0.0.1:1"}, Prefix: "x"}, "Prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := etcdstore.Open(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

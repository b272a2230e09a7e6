package clusterversion

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/internal/testwait"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/replica/ownership"
)

// etcdTTL is the member TTL of the etcd tests: etcd's smallest lease is
// 1.5 s with its default election timeout.
const etcdTTL = 2 * time.Second

func openEtcd(t *testing.T, endpoint, prefix string) *etcdstore.KV {
	t.Helper()
	kv, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{endpoint}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// replica is one replica's ownership (its member record) and, for one
// of this release, its Versions, each over its own etcd client.
type replica struct {
	id     string
	kv     *etcdstore.KV
	owners *ownership.Owners
	v      *Versions // nil: a replica of the previous release
	stop   func()
}

// startReplica starts a replica whose member record publishes
// maxVersion (0: none, as a770d6c), with Versions when maxVersion is
// this release's.
func startReplica(t *testing.T, endpoint, prefix, id string, maxVersion int, logs *logCount) *replica {
	t.Helper()
	kv := openEtcd(t, endpoint, prefix)
	o, err := ownership.New(ownership.Config{
		KV: kv, ID: id, GRPCAddr: "127.0.0.1:1", TTL: etcdTTL, Shards: 2, MaxVersion: maxVersion,
		Elect:  func(name string) (systemstore.Elector, error) { return kv.Election(name, etcdTTL) },
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", id),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, kv: kv, owners: o}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	n := 1
	go func() { o.Run(ctx); done <- struct{}{} }()
	if maxVersion == Current {
		r.v, err = New(Config{KV: kv, ID: id, Interval: 200 * time.Millisecond, Logger: slog.New(logs).With("replica", id)})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.v.Init(ctx); err != nil {
			t.Fatal(err)
		}
		n++
		go func() {
			if err := r.v.Run(ctx, o); err != nil {
				t.Errorf("%s: Run = %v", id, err)
			}
			done <- struct{}{}
		}()
	}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range n {
			<-done
		}
		kv.Close()
	}
	t.Cleanup(r.stop)
	return r
}

// kill models kill -9: the store client dies first, so the member
// record stays until it expires.
func (r *replica) kill() {
	r.kv.Close()
	r.stop()
}

func versionsOf(rs []*replica) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s=%d (%s)", r.id, r.v.Version(), r.v.Waiting()))
	}
	return strings.Join(out, "; ")
}

// TestFinaliseOnEtcd: two replicas of this release and one of the
// previous (its member record names no max_version) on real etcd with
// real ownership. The old one blocks; an operator holds; the old one is
// killed (its record stays until it expires: a member that is gone does
// not block) and the hold keeps version 1; released through one
// replica, both race to raise it and it is written once: version 2 on
// both within seconds.
func TestFinaliseOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	logs := newLogCount(t)
	a := startReplica(t, srv.Endpoint, "/cv-finalise/", "a", Current, logs)
	b := startReplica(t, srv.Endpoint, "/cv-finalise/", "b", Current, logs)
	old := startReplica(t, srv.Endpoint, "/cv-finalise/", "old", 0, logs)
	news := []*replica{a, b}
	testwait.For(t, 20*time.Second, "both replicas name the old member as what they wait for", func() (bool, string) {
		for _, r := range news {
			if !strings.Contains(r.v.Waiting(), "old (supports 1)") {
				return false, versionsOf(news)
			}
		}
		return true, ""
	})
	if _, err := a.v.SetHold(context.Background(), true, "admin", nil); err != nil {
		t.Fatal(err)
	}
	old.kill()
	testwait.For(t, 20*time.Second, "the old member gone: only the hold blocks", func() (bool, string) {
		for _, r := range news {
			if !strings.HasPrefix(r.v.Waiting(), "held by admin") {
				return false, versionsOf(news)
			}
		}
		return true, ""
	})
	for _, r := range news {
		if r.v.Version() != 1 {
			t.Fatalf("held: %s", versionsOf(news))
		}
	}
	released := time.Now()
	if _, err := b.v.SetHold(context.Background(), false, "admin", nil); err != nil {
		t.Fatal(err)
	}
	took := testwait.For(t, 10*time.Second, "version 2 on both", func() (bool, string) {
		return a.v.Version() == 2 && b.v.Version() == 2, versionsOf(news)
	})
	t.Logf("version 2 on both %v after the release", took.Round(time.Millisecond))
	if n := logs.count("cluster version finalised"); n != 1 {
		t.Errorf("finalised %d times, want once", n)
	}
	raw, _, err := a.kv.Get(context.Background(), Key)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decode(raw)
	if err != nil || rec.Version != 2 || (rec.By != "a" && rec.By != "b") || rec.At.Before(released.Add(-time.Second)) || rec.Hold {
		t.Errorf("stored %s (%v), want version 2 finalised by a or b after the release", raw, err)
	}
}

// TestStartupRefusalOnEtcd: a store whose version a later release
// finalised (3) refuses this binary's start, and nothing is written.
func TestStartupRefusalOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	kv := openEtcd(t, srv.Endpoint, "/cv-refuse/")
	defer kv.Close()
	ctx := context.Background()
	rev, err := kv.Put(ctx, Key, []byte(`{"version":3,"hold":false,"at":"2027-03-04T05:06:07Z","by":"r7"}`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{KV: kv, ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	err = v.Init(ctx)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "this binary supports cluster version 2; the store's cluster version is 3, finalised by r7 at 2027-03-04T05:06:07Z") || !strings.Contains(err.Error(), "run a release that supports 3") {
		t.Errorf("Init = %v, want the refusal naming both versions", err)
	}
	if _, got, err := kv.Get(ctx, Key); err != nil || got != rev {
		t.Errorf("%s at revision %d (%v) after the refusal, want %d", Key, got, err, rev)
	}
}

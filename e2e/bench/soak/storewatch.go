package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// storePrefix is the replicas' etcd prefix (--store etcd://HOST/soak).
const storePrefix = "soak"

// deleteKind is what a store delete of a registration was, by what the
// workload had done with its endpoint when the delete arrived.
type deleteKind int

const (
	delDeregistered deleteKind = iota // Deregister had been called
	delLive                           // acknowledged, never deregistered: a live endpoint expired
	delUnacked                        // stored, but no registration of it was ever acknowledged
	delForeign                        // an endpoint the workload never created
	numDeleteKinds
)

func (k deleteKind) String() string {
	return [...]string{"deregistered", "live", "unacknowledged", "foreign"}[k]
}

// storeDelete is one delete of a registration record.
type storeDelete struct {
	at   time.Duration // since the load started (negative before)
	key  string        // <service>/<endpoint id>
	rev  int64
	kind deleteKind
}

// storeWatch watches the registrations in etcd directly, as
// e2e/bench/consistency does: every put and every delete, each delete
// classified when it arrives.
type storeWatch struct {
	// Read-only after watchStore.
	cli      *clientv3.Client
	prefix   string
	classify func(key string) deleteKind
	since    func() time.Duration
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex // guards the fields below
	puts    int
	deletes []storeDelete
	rev     int64 // the newest revision the watch has shown (events or progress)
	err     error // the watch's failure, if it failed
}

// watchStore watches from the current revision until stop.
func watchStore(ctx context.Context, etcdAddr string, classify func(string) deleteKind, since func() time.Duration) (*storeWatch, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client %s: %w", etcdAddr, err)
	}
	s := &storeWatch{cli: cli, prefix: "/" + storePrefix + "/registrations/", classify: classify, since: since, done: make(chan struct{})}
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := cli.Get(gctx, s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	gcancel()
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %s: revision: %w", etcdAddr, err)
	}
	s.rev = resp.Header.Revision
	wctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	wch := cli.Watch(wctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(s.rev+1))
	go func() {
		defer close(s.done)
		for resp := range wch {
			s.mu.Lock()
			if err := resp.Err(); err != nil && s.err == nil && wctx.Err() == nil {
				s.err = err
			}
			s.rev = max(s.rev, resp.Header.Revision)
			s.mu.Unlock()
			for _, e := range resp.Events {
				key := strings.TrimPrefix(string(e.Kv.Key), s.prefix)
				if e.Type == clientv3.EventTypePut {
					s.mu.Lock()
					s.puts++
					s.mu.Unlock()
					continue
				}
				d := storeDelete{at: s.since(), key: key, rev: e.Kv.ModRevision, kind: s.classify(key)}
				s.mu.Lock()
				s.deletes = append(s.deletes, d)
				s.mu.Unlock()
			}
		}
	}()
	return s, nil
}

// catchUp waits (at most timeout) until the watch has shown etcd's
// current revision, asking for progress notifications.
func (s *storeWatch) catchUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, "soak-revision-probe")
	if err != nil {
		return fmt.Errorf("etcd revision: %w", err)
	}
	want := resp.Header.Revision
	for {
		s.mu.Lock()
		rev := s.rev
		s.mu.Unlock()
		if rev >= want {
			return nil
		}
		s.cli.RequestProgress(ctx)
		if !sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("etcd watch at revision %d, want %d after %v", rev, want, timeout)
		}
	}
}

// stop ends the watch and closes the client.
func (s *storeWatch) stop() {
	s.cancel()
	<-s.done
	s.cli.Close()
}

// summary returns the puts seen, the deletes of each kind and up to 5
// deletes of every kind but delDeregistered.
func (s *storeWatch) summary() (puts int, counts [numDeleteKinds]int, odd []storeDelete, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.deletes {
		counts[d.kind]++
		if d.kind != delDeregistered && len(odd) < 5 {
			odd = append(odd, d)
		}
	}
	return s.puts, counts, odd, s.err
}

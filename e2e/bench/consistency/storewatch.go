package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// storeWatch watches the registrations in etcd directly (not through a
// proxy): which lease each stored record holds and when it was written.
// Set against the leases the workload was given, it shows registrations
// that were stored although their RPC failed.
type storeWatch struct {
	mu     sync.Mutex // guards puts
	puts   []storedPut
	prefix string
}

// storedPut is one write of a registration record.
type storedPut struct {
	key, lease string
	at         time.Time
}

// watchRegistrations watches until ctx ends or the returned stop is
// called (stop waits for the watch to end).
func watchRegistrations(ctx context.Context, etcdAddr string) (*storeWatch, func(), error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	s := &storeWatch{prefix: "/consistency/registrations/"}
	wctx, cancel := context.WithCancel(ctx)
	wch := cli.Watch(wctx, s.prefix, clientv3.WithPrefix())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			for _, e := range resp.Events {
				if e.Type != clientv3.EventTypePut {
					continue
				}
				var rec struct{ LeaseID string }
				if json.Unmarshal(e.Kv.Value, &rec) != nil {
					continue
				}
				s.mu.Lock()
				s.puts = append(s.puts, storedPut{key: strings.TrimPrefix(string(e.Kv.Key), s.prefix), lease: rec.LeaseID, at: time.Now()})
				s.mu.Unlock()
			}
		}
	}()
	return s, func() { cancel(); <-done; cli.Close() }, nil
}

// unacknowledged returns the stored puts whose lease the workload was
// never given (acked), and those of them that replaced a record whose
// lease it was given.
func (s *storeWatch) unacknowledged(acked map[string]bool) (out, replacedAcked []storedPut) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := map[string]string{}
	for _, p := range s.puts {
		if !acked[p.lease] {
			out = append(out, p)
			if acked[last[p.key]] {
				replacedAcked = append(replacedAcked, p)
			}
		}
		last[p.key] = p.lease
	}
	return out, replacedAcked
}

// history returns the puts of key, in order.
func (s *storeWatch) history(key string) []storedPut {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storedPut
	for _, p := range s.puts {
		if p.key == key {
			out = append(out, p)
		}
	}
	return out
}

package registry

import (
	"context"
	"slices"
	"sync"
)

// Subscription is a change feed for one service or for all of them.
//
// It never queues states: a write marks the changed service names in a set
// and fills a one-slot channel. A slow subscriber therefore coalesces any
// number of writes into one wake-up, its memory is bounded by the number of
// services, and writers never wait for it. After a wake-up the subscriber
// reads the latest Snapshot, so it always ends on the final state.
//
// A new subscription starts with its watched services (all known services
// for an all-services subscription) marked changed, so the first read
// delivers the initial state.
//
// Methods are safe for concurrent use, but a subscription is meant to have
// one reader.
type Subscription struct {
	store   *Store
	service string // "" for all services
	c       chan struct{}

	// mu guards dirty and closed.
	mu     sync.Mutex
	dirty  map[string]struct{}
	closed bool
}

// Subscribe returns a change feed for service, or for every service when
// service is "". Call Close when done.
func (s *Store) Subscribe(service string) *Subscription {
	sub := &Subscription{store: s, service: service, c: make(chan struct{}, 1), dirty: map[string]struct{}{}}
	// Hold mu so no write slips between reading the initial state and
	// registering the subscriber.
	s.mu.Lock()
	defer s.mu.Unlock()
	if service == "" {
		for _, name := range s.cur.Load().Services() {
			sub.dirty[name] = struct{}{}
		}
	} else {
		sub.dirty[service] = struct{}{}
	}
	sub.c <- struct{}{}
	s.subsMu.Lock()
	if service == "" {
		s.subsAll[sub] = struct{}{}
	} else {
		m := s.subsBy[service]
		if m == nil {
			m = map[*Subscription]struct{}{}
			s.subsBy[service] = m
		}
		m[sub] = struct{}{}
	}
	s.subsMu.Unlock()
	return sub
}

// notify runs with s.mu held, right after a new snapshot is published.
func (s *Store) notify(changed []string) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for sub := range s.subsAll {
		sub.mark(changed...)
	}
	for _, name := range changed {
		for sub := range s.subsBy[name] {
			sub.mark(name)
		}
	}
}

func (sub *Subscription) mark(names ...string) {
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return
	}
	for _, n := range names {
		sub.dirty[n] = struct{}{}
	}
	sub.mu.Unlock()
	select {
	case sub.c <- struct{}{}:
	default: // a wake-up is already pending; it will see these names too
	}
}

// C receives a value when there are changes to read with Changed.
func (sub *Subscription) C() <-chan struct{} { return sub.c }

// Changed returns, sorted, the services that changed since the last call and
// forgets them. Read the store's Snapshot after calling it: the snapshot is at
// least as new as every change reported.
func (sub *Subscription) Changed() []string {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.dirty) == 0 {
		return nil
	}
	out := make([]string, 0, len(sub.dirty))
	for n := range sub.dirty {
		out = append(out, n)
	}
	clear(sub.dirty)
	slices.Sort(out)
	return out
}

// Pending is the number of changed services not yet read: the whole of the
// subscription's queued state.
func (sub *Subscription) Pending() int {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return len(sub.dirty)
}

// Next waits for changes and returns the names that changed with a snapshot
// that includes them. It returns ctx.Err() when ctx ends.
func (sub *Subscription) Next(ctx context.Context) (*Snapshot, []string, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-sub.c:
		}
		if names := sub.Changed(); len(names) > 0 {
			return sub.store.Snapshot(), names, nil
		}
	}
}

// Close stops the feed. It is safe to call more than once.
func (sub *Subscription) Close() {
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return
	}
	sub.closed = true
	clear(sub.dirty)
	sub.mu.Unlock()
	s := sub.store
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if sub.service == "" {
		delete(s.subsAll, sub)
		return
	}
	delete(s.subsBy[sub.service], sub)
	if len(s.subsBy[sub.service]) == 0 {
		delete(s.subsBy, sub.service)
	}
}

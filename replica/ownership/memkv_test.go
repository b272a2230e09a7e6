package ownership

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
)

// memKV is an in-memory systemstore.KV with a change log for watches
// (trimmed from replica/registrysync's test KV).
type memKV struct {
	// mu guards the fields below.
	mu   sync.Mutex
	rev  int64
	data map[string]systemstore.KeyValue
	log  []systemstore.WatchEvent
	wake chan struct{} // closed and replaced at every write
}

func newMemKV() *memKV {
	return &memKV{data: map[string]systemstore.KeyValue{}, wake: make(chan struct{})}
}

func (m *memKV) write(ev systemstore.WatchEvent) int64 {
	m.rev++
	ev.Rev = m.rev
	m.log = append(m.log, ev)
	close(m.wake)
	m.wake = make(chan struct{})
	return m.rev
}

// client is one replica's connection to a memKV; kill makes every call
// fail and ends its watches, as the store client of a killed process.
type client struct {
	m    *memKV
	dead atomic.Bool
	down chan struct{}
	once sync.Once
}

var (
	_ systemstore.KV          = (*client)(nil)
	_ systemstore.CondDeleter = (*client)(nil)
)

func (m *memKV) client() *client { return &client{m: m, down: make(chan struct{})} }

func (c *client) kill() { c.once.Do(func() { c.dead.Store(true); close(c.down) }) }

func (c *client) check() error {
	if c.dead.Load() {
		return systemstore.ErrClosed
	}
	return nil
}

func (c *client) Put(_ context.Context, key string, value []byte) (int64, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, err
	}
	if err := c.check(); err != nil {
		return 0, err
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	rev := m.write(systemstore.WatchEvent{Type: systemstore.EventPut, Key: key, Value: slices.Clone(value)})
	m.data[key] = systemstore.KeyValue{Key: key, Value: slices.Clone(value), Rev: rev}
	return rev, nil
}

func (c *client) Delete(_ context.Context, key string) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.data[key]; !ok {
		return m.rev, nil
	}
	delete(m.data, key)
	return m.write(systemstore.WatchEvent{Type: systemstore.EventDelete, Key: key}), nil
}

func (c *client) DeleteIf(_ context.Context, key string, rev int64) (bool, error) {
	if err := c.check(); err != nil {
		return false, err
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if kv, ok := m.data[key]; !ok || kv.Rev != rev {
		return false, nil
	}
	delete(m.data, key)
	m.write(systemstore.WatchEvent{Type: systemstore.EventDelete, Key: key})
	return true, nil
}

func (c *client) Get(_ context.Context, key string) ([]byte, int64, error) {
	if err := c.check(); err != nil {
		return nil, 0, err
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	kv, ok := m.data[key]
	if !ok {
		return nil, 0, fmt.Errorf("get %s: %w", key, systemstore.ErrNotFound)
	}
	return slices.Clone(kv.Value), kv.Rev, nil
}

func (c *client) List(_ context.Context, prefix string) ([]systemstore.KeyValue, int64, error) {
	if err := c.check(); err != nil {
		return nil, 0, err
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []systemstore.KeyValue
	for k, kv := range m.data {
		if strings.HasPrefix(k, prefix) {
			out = append(out, kv)
		}
	}
	slices.SortFunc(out, func(a, b systemstore.KeyValue) int { return strings.Compare(a.Key, b.Key) })
	return out, m.rev, nil
}

func (c *client) Watch(ctx context.Context, prefix string, afterRev int64) <-chan systemstore.WatchEvent {
	out := make(chan systemstore.WatchEvent)
	m := c.m
	go func() {
		defer close(out)
		next := 0
		for {
			m.mu.Lock()
			evs := m.log[next:]
			next = len(m.log)
			wake := m.wake
			m.mu.Unlock()
			for _, ev := range evs {
				if ev.Rev <= afterRev || !strings.HasPrefix(ev.Key, prefix) {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				case <-c.down:
					return
				}
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			case <-c.down:
				select {
				case out <- systemstore.WatchEvent{Err: systemstore.ErrClosed}:
				case <-ctx.Done():
				}
				return
			}
		}
	}()
	return out
}

func (c *client) Close() error { c.kill(); return nil }

// elections is a set of lease-style elections: a hold lasts until it is
// resigned, or until ttl after its holder's client died; a campaigner
// waits for the hold to be free.
type elections struct {
	ttl time.Duration
	// mu guards holds.
	mu     sync.Mutex
	holds  map[string]string // name → holder
	change chan struct{}     // closed and replaced when a hold is freed
}

func newElections(ttl time.Duration) *elections {
	return &elections{ttl: ttl, holds: map[string]string{}, change: make(chan struct{})}
}

func (e *elections) free(name, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.holds[name] == id {
		delete(e.holds, name)
		close(e.change)
		e.change = make(chan struct{})
	}
}

// elector is one replica's view of election name, over its client c.
type elector struct {
	e    *elections
	name string
	c    *client
}

func (el *elector) Campaign(ctx context.Context, id string) (<-chan struct{}, func(), error) {
	e := el.e
	for {
		if err := el.c.check(); err != nil {
			return nil, nil, err
		}
		e.mu.Lock()
		change := e.change
		if _, held := e.holds[el.name]; !held {
			e.holds[el.name] = id
			e.mu.Unlock()
			lost := make(chan struct{})
			closeLost := sync.OnceFunc(func() { close(lost) })
			stop := make(chan struct{})
			var resignedAlive atomic.Bool
			go func() {
				done := ctx.Done()
				for {
					select {
					case <-done:
						closeLost()
						done = nil
						continue
					case <-el.c.down: // the holder died: the store frees it after ttl
						select {
						case <-stop: // resigned before it died
							if !resignedAlive.Load() {
								break
							}
							closeLost()
							e.free(el.name, id)
							return
						default:
						}
					case <-stop:
						if resignedAlive.Load() {
							closeLost()
							e.free(el.name, id)
							return
						}
					}
					closeLost()
					time.Sleep(e.ttl)
					e.free(el.name, id)
					return
				}
			}()
			return lost, sync.OnceFunc(func() {
				resignedAlive.Store(el.c.check() == nil) // a dead client's resign does not reach the store
				close(stop)
			}), nil
		}
		e.mu.Unlock()
		select {
		case <-change:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-el.c.down:
			return nil, nil, systemstore.ErrClosed
		}
	}
}

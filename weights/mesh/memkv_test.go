package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spillway/spillway/registry/durable"
)

// memKV is an in-memory durable.KV with a change log for watches, a
// counter of writes, and a switch that makes every call fail as an
// unreachable store does.
type memKV struct {
	down   atomic.Bool
	writes atomic.Int64

	// mu guards the fields below.
	mu    sync.Mutex
	rev   int64
	data  map[string]durable.KeyValue
	log   []durable.WatchEvent
	wake  chan struct{} // closed and replaced at every write
	shut  bool
	close chan struct{}
}

var _ durable.KV = (*memKV)(nil)

var errUnreachable = errors.New("memkv 127.0.0.1:1: connection refused")

func newMemKV() *memKV {
	return &memKV{data: map[string]durable.KeyValue{}, wake: make(chan struct{}), close: make(chan struct{})}
}

func (m *memKV) check() error {
	if m.down.Load() {
		return errUnreachable
	}
	return nil
}

func (m *memKV) write(ev durable.WatchEvent) int64 {
	m.rev++
	ev.Rev = m.rev
	m.log = append(m.log, ev)
	close(m.wake)
	m.wake = make(chan struct{})
	m.writes.Add(1)
	return m.rev
}

func (m *memKV) Put(_ context.Context, key string, value []byte) (int64, error) {
	if err := durable.ValidatePut(key, value); err != nil {
		return 0, err
	}
	if err := m.check(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rev := m.write(durable.WatchEvent{Type: durable.EventPut, Key: key, Value: slices.Clone(value)})
	m.data[key] = durable.KeyValue{Key: key, Value: slices.Clone(value), Rev: rev}
	return rev, nil
}

func (m *memKV) Delete(_ context.Context, key string) (int64, error) {
	if err := m.check(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.data[key]; !ok {
		return m.rev, nil
	}
	delete(m.data, key)
	return m.write(durable.WatchEvent{Type: durable.EventDelete, Key: key}), nil
}

// DeleteIf implements durable.CondDeleter.
func (m *memKV) DeleteIf(_ context.Context, key string, rev int64) (bool, error) {
	if err := m.check(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if kv, ok := m.data[key]; !ok || kv.Rev != rev {
		return false, nil
	}
	delete(m.data, key)
	m.write(durable.WatchEvent{Type: durable.EventDelete, Key: key})
	return true, nil
}

func (m *memKV) Get(_ context.Context, key string) ([]byte, int64, error) {
	if err := m.check(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kv, ok := m.data[key]
	if !ok {
		return nil, 0, fmt.Errorf("get %s: %w", key, durable.ErrNotFound)
	}
	return slices.Clone(kv.Value), kv.Rev, nil
}

func (m *memKV) List(_ context.Context, prefix string) ([]durable.KeyValue, int64, error) {
	if err := m.check(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []durable.KeyValue
	for k, kv := range m.data {
		if strings.HasPrefix(k, prefix) {
			out = append(out, kv)
		}
	}
	slices.SortFunc(out, func(a, b durable.KeyValue) int { return strings.Compare(a.Key, b.Key) })
	return out, m.rev, nil
}

func (m *memKV) Watch(ctx context.Context, prefix string, afterRev int64) <-chan durable.WatchEvent {
	out := make(chan durable.WatchEvent)
	go func() {
		defer close(out)
		next := 0
		for {
			m.mu.Lock()
			evs := m.log[next:]
			next = len(m.log)
			wake, shut := m.wake, m.shut
			m.mu.Unlock()
			if shut {
				return
			}
			for _, ev := range evs {
				if ev.Rev <= afterRev || !strings.HasPrefix(ev.Key, prefix) {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			case <-m.close:
				return
			}
		}
	}()
	return out
}

func (m *memKV) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.shut {
		m.shut = true
		close(m.close)
	}
	return nil
}

// putsUnder counts the keys under prefix.
func (m *memKV) keysUnder(prefix string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k := range m.data {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

package systemstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spillway/spillway/registry/systemstore"
)

// MemKV is an in-memory systemstore.KV for tests of the packages that run
// over a shared store: a change log for watches, a counter of writes
// (Writes), and a switch (Down) that makes every call fail as an
// unreachable store does. It is not a conformance reference; bbolt,
// etcdstore and spannerstore are the stores.
type MemKV struct {
	// Down makes every call fail with ErrUnreachable while true.
	Down atomic.Bool
	// Writes counts successful puts and deletes.
	Writes atomic.Int64

	// mu guards the fields below.
	mu    sync.Mutex
	rev   int64
	data  map[string]systemstore.KeyValue
	log   []systemstore.WatchEvent
	wake  chan struct{} // closed and replaced at every write
	shut  bool
	close chan struct{}
}

var _ systemstore.KV = (*MemKV)(nil)

// ErrUnreachable is what every call of a MemKV that is Down returns.
var ErrUnreachable = errors.New("memkv 127.0.0.1:1: connection refused")

// NewMemKV returns an empty MemKV.
func NewMemKV() *MemKV {
	return &MemKV{data: map[string]systemstore.KeyValue{}, wake: make(chan struct{}), close: make(chan struct{})}
}

func (m *MemKV) check() error {
	if m.Down.Load() {
		return ErrUnreachable
	}
	return nil
}

func (m *MemKV) write(ev systemstore.WatchEvent) int64 {
	m.rev++
	ev.Rev = m.rev
	m.log = append(m.log, ev)
	close(m.wake)
	m.wake = make(chan struct{})
	m.Writes.Add(1)
	return m.rev
}

func (m *MemKV) Put(_ context.Context, key string, value []byte) (int64, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, err
	}
	if err := m.check(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rev := m.write(systemstore.WatchEvent{Type: systemstore.EventPut, Key: key, Value: slices.Clone(value)})
	m.data[key] = systemstore.KeyValue{Key: key, Value: slices.Clone(value), Rev: rev}
	return rev, nil
}

func (m *MemKV) Delete(_ context.Context, key string) (int64, error) {
	if err := m.check(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.data[key]; !ok {
		return m.rev, nil
	}
	delete(m.data, key)
	return m.write(systemstore.WatchEvent{Type: systemstore.EventDelete, Key: key}), nil
}

// DeleteIf implements systemstore.CondDeleter.
func (m *MemKV) DeleteIf(_ context.Context, key string, rev int64) (bool, error) {
	if err := m.check(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if kv, ok := m.data[key]; !ok || kv.Rev != rev {
		return false, nil
	}
	delete(m.data, key)
	m.write(systemstore.WatchEvent{Type: systemstore.EventDelete, Key: key})
	return true, nil
}

// PutIf implements systemstore.CondPutter.
func (m *MemKV) PutIf(_ context.Context, key string, value []byte, rev int64) (int64, bool, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, false, err
	}
	if err := m.check(); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.data[key].Rev; cur != rev {
		return cur, false, nil
	}
	newRev := m.write(systemstore.WatchEvent{Type: systemstore.EventPut, Key: key, Value: slices.Clone(value)})
	m.data[key] = systemstore.KeyValue{Key: key, Value: slices.Clone(value), Rev: newRev}
	return newRev, true, nil
}

func (m *MemKV) Get(_ context.Context, key string) ([]byte, int64, error) {
	if err := m.check(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kv, ok := m.data[key]
	if !ok {
		return nil, 0, fmt.Errorf("get %s: %w", key, systemstore.ErrNotFound)
	}
	return slices.Clone(kv.Value), kv.Rev, nil
}

func (m *MemKV) List(_ context.Context, prefix string) ([]systemstore.KeyValue, int64, error) {
	if err := m.check(); err != nil {
		return nil, 0, err
	}
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

func (m *MemKV) Watch(ctx context.Context, prefix string, afterRev int64) <-chan systemstore.WatchEvent {
	out := make(chan systemstore.WatchEvent)
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

func (m *MemKV) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.shut {
		m.shut = true
		close(m.close)
	}
	return nil
}

// KeysUnder counts the keys under prefix.
func (m *MemKV) KeysUnder(prefix string) int {
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

// Events returns a copy of the change log: every put and delete, in
// revision order.
func (m *MemKV) Events() []systemstore.WatchEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log)
}

// PutUnseen stores key as a write that no watch delivers (a change a
// watch lost), and returns its revision.
func (m *MemKV) PutUnseen(key string, value []byte) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rev++
	m.data[key] = systemstore.KeyValue{Key: key, Value: slices.Clone(value), Rev: m.rev}
	return m.rev
}

// DropLog empties the change log, for a benchmark with no watcher that
// must not keep it growing; a watch opened after it misses the events.
func (m *MemKV) DropLog() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = m.log[:0]
}

// DeleteUnseen removes key without a watch event (a change a watch lost).
func (m *MemKV) DeleteUnseen(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.data, key)
}

package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spillway/spillway/registry"
)

// Record is one durable VM registration.
type Record struct {
	LeaseID  string
	Service  string
	TTL      time.Duration
	Endpoint registry.Endpoint
}

// Key identifies a record: one endpoint of one service has at most one
// registration.
func (r *Record) Key() string { return r.Service + "/" + r.Endpoint.ID }

// Key builds the key of the record for service and endpoint id.
func Key(service, id string) string { return service + "/" + id }

var bucket = []byte("vm-registrations/v1")

// Bolt is the embedded bbolt store.
type Bolt struct {
	db *bolt.DB
}

// OpenBolt opens (creating if needed) the registrations file in dir. It
// fails if another process holds the file.
func OpenBolt(dir string) (*Bolt, error) {
	if dir == "" {
		return nil, errors.New("open registrations: data dir is empty")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("open registrations: %w", err)
	}
	path := filepath.Join(dir, "registrations.db")
	db, err := bolt.Open(path, 0o640, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open registrations %s: %w (is another spillway using this data dir?)", path, err)
	}
	// Let a burst of registrations share one commit; Put still returns only
	// after its commit is on disk.
	db.MaxBatchDelay = 2 * time.Millisecond
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("open registrations %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// Put stores r durably, replacing the record with the same key.
func (b *Bolt) Put(_ context.Context, r Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("put %s: %w", r.Key(), err)
	}
	err = b.db.Batch(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(r.Key()), v)
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", r.Key(), err)
	}
	return nil
}

// Delete removes the record with key; a missing key is not an error.
func (b *Bolt) Delete(_ context.Context, key string) error {
	err := b.db.Batch(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete([]byte(key))
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// List returns every record, sorted by key. A record that does not decode
// is skipped and reported in the joined error, so one bad record does not
// hide the others.
func (b *Bolt) List(_ context.Context) ([]Record, error) {
	var out []Record
	var errs []error
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				errs = append(errs, fmt.Errorf("record %q: %w", k, err))
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list registrations: %w", err)
	}
	return out, errors.Join(errs...)
}

// Close closes the file.
func (b *Bolt) Close() error { return b.db.Close() }

// Memory keeps records in memory; they do not survive the process.
type Memory struct {
	// mu guards recs and settings.
	mu       sync.Mutex
	recs     map[string]Record
	settings map[string][]byte // made by the first PutSetting
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{recs: map[string]Record{}} }

// Put stores r.
func (m *Memory) Put(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Endpoint = *r.Endpoint.Clone()
	m.recs[r.Key()] = r
	return nil
}

// Delete removes key.
func (m *Memory) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, key)
	return nil
}

// List returns every record, sorted by key.
func (m *Memory) List(_ context.Context) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.recs))
	for _, r := range m.recs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int {
		if a.Key() < b.Key() {
			return -1
		}
		if a.Key() > b.Key() {
			return 1
		}
		return 0
	})
	return out, nil
}

// Close does nothing.
func (m *Memory) Close() error { return nil }

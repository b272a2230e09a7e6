package systemstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/spillway/spillway/registry"
)

// Record is one durable VM registration.
type Record struct {
	LeaseID  string
	Service  string
	TTL      time.Duration
	Endpoint registry.Endpoint
	// Owner is the identity (authn.Identity.Name) that made the
	// registration: only it may heartbeat or deregister the lease. ""
	// (anonymous, or a record written before owners were kept) lets any
	// caller.
	Owner string `json:",omitempty"`
}

// Key identifies a record: one endpoint of one service has at most one
// registration.
func (r *Record) Key() string { return r.Service + "/" + r.Endpoint.ID }

// Key builds the key of the record for service and endpoint id.
func Key(service, id string) string { return service + "/" + id }

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

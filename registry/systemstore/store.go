package systemstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Key prefixes of what Store keeps in its KV.
const (
	RegistrationsPrefix = "registrations/"
	SettingsPrefix      = "settings/"
)

// Store keeps registrations (package lease's Storage) and settings
// (package migration's Storage) in any KV: a record under
// "registrations/<service>/<endpoint id>" as JSON, a setting under
// "settings/<key>" as it is given.
type Store struct {
	kv KV
}

// NewStore returns a Store over kv; Close closes kv.
func NewStore(kv KV) *Store { return &Store{kv: kv} }

// KV returns the store's KV, for watching what other replicas write.
func (s *Store) KV() KV { return s.kv }

// ErrUnavailable wraps every failure of the KV under a Store other than
// bad input (ErrInvalid): the store could not be reached or did not
// answer. The wrapped error names the store ("etcd http://h:2379: put
// ..."). API edges map it to gRPC UNAVAILABLE and HTTP 503.
var ErrUnavailable = errors.New("store unavailable")

// unavailable wraps a KV error of what with ErrUnavailable, unless it is
// bad input.
func unavailable(what string, err error) error {
	if errors.Is(err, ErrInvalid) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
}

// Put stores r durably, replacing the record with the same key.
func (s *Store) Put(ctx context.Context, r Record) error {
	_, err := s.PutRev(ctx, r)
	return err
}

// EncodeRecord returns the KV key and value Store writes for r: the key
// "registrations/<service>/<endpoint id>" and the record as JSON. Tools
// that fill a store in bulk (store copy, benchmarks) use it so that what
// they write is what a replica reads.
func EncodeRecord(r Record) (key string, value []byte, err error) {
	v, err := json.Marshal(r)
	if err != nil {
		return "", nil, fmt.Errorf("encode record %s: %w", r.Key(), err)
	}
	return RegistrationsPrefix + r.Key(), v, nil
}

// PutRev is Put that returns the revision of the write, so that a replica
// can order its own write against the watch events of other replicas.
func (s *Store) PutRev(ctx context.Context, r Record) (int64, error) {
	key, v, err := EncodeRecord(r)
	if err != nil {
		return 0, fmt.Errorf("put: %w", err)
	}
	rev, err := s.kv.Put(ctx, key, v)
	if err != nil {
		return 0, unavailable("put registration", err)
	}
	return rev, nil
}

// PutRevIf is PutRev only while the record's key is at ifRev (0: no
// record), the check and the write one store transaction (a CondPutter
// KV; on another, an unconditional PutRev). When another write got there
// first it writes nothing and returns ok false with the record there now
// (nil when there is none, or it does not decode) and its revision, for
// the caller to judge and try again.
func (s *Store) PutRevIf(ctx context.Context, r Record, ifRev int64) (rev int64, ok bool, cur *Record, curRev int64, err error) {
	cp, isCond := s.kv.(CondPutter)
	if !isCond {
		rev, err := s.PutRev(ctx, r)
		return rev, err == nil, nil, 0, err
	}
	key, v, err := EncodeRecord(r)
	if err != nil {
		return 0, false, nil, 0, fmt.Errorf("put: %w", err)
	}
	got, ok, err := cp.PutIf(ctx, key, v, ifRev)
	if err != nil {
		return 0, false, nil, 0, unavailable("put registration", err)
	}
	if ok {
		return got, true, nil, 0, nil
	}
	b, curRev, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, false, nil, 0, nil
	case err != nil:
		return 0, false, nil, 0, unavailable("get registration", err)
	}
	if rec, err := DecodeRecord(b); err == nil {
		return 0, false, &rec, curRev, nil
	}
	return 0, false, nil, curRev, nil
}

// Delete removes the record with key; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, err := s.kv.Delete(ctx, RegistrationsPrefix+key); err != nil {
		return unavailable("delete registration", err)
	}
	return nil
}

// CondDeleter is a KV that deletes a key only while it is at a revision,
// the check and the delete one transaction (etcd: a transaction on the
// mod revision; Spanner: a read-write transaction; bbolt: one write
// transaction). Every driver implements it.
type CondDeleter interface {
	// DeleteIf deletes key if its last write is at rev, and reports
	// whether it did (false: key is absent or at another revision).
	DeleteIf(ctx context.Context, key string, rev int64) (deleted bool, err error)
}

// CondPutter is a KV that writes a key only while it is at a revision,
// the check and the write one transaction. Every driver implements it.
type CondPutter interface {
	// PutIf stores value under key if key's last write is at rev, or
	// with rev 0 if key is absent, and returns the write's revision.
	// Otherwise it writes nothing and returns ok false with the key's
	// current revision (0: absent).
	PutIf(ctx context.Context, key string, value []byte, rev int64) (newRev int64, ok bool, err error)
}

// ErrConflict is wrapped by a conditional write that found its key at
// another revision than the one the caller read.
var ErrConflict = errors.New("changed since it was read")

// DeleteLease removes the record with key only while it still holds lease
// leaseID, and reports whether it removed it: a lease expires once, and an
// expiry never removes a newer registration of the same endpoint made on
// another replica. A record that is not there at all is an error wrapping
// ErrNotFound (someone else removed it). On a KV that is a CondDeleter
// (every driver) the check and the delete are one transaction; on
// another, a read then a delete.
func (s *Store) DeleteLease(ctx context.Context, key, leaseID string) (bool, error) {
	k := RegistrationsPrefix + key
	v, rev, err := s.kv.Get(ctx, k)
	if errors.Is(err, ErrNotFound) {
		return false, fmt.Errorf("delete registration %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return false, unavailable("delete registration", err)
	}
	if r, err := DecodeRecord(v); err == nil && r.LeaseID != leaseID {
		return false, nil
	}
	if cd, ok := s.kv.(CondDeleter); ok {
		ok, err := cd.DeleteIf(ctx, k, rev)
		if err != nil {
			return false, unavailable("delete registration", err)
		}
		return ok, nil
	}
	if _, err := s.kv.Delete(ctx, k); err != nil {
		return false, unavailable("delete registration", err)
	}
	return true, nil
}

// List returns every record, sorted by key. A record that does not decode
// is skipped and reported in the joined error, so one bad record does not
// hide the others.
func (s *Store) List(ctx context.Context) ([]Record, error) {
	kvs, _, err := s.kv.List(ctx, RegistrationsPrefix)
	if err != nil {
		return nil, unavailable("list registrations", err)
	}
	var out []Record
	var errs []error
	for _, kv := range kvs {
		r, err := DecodeRecord(kv.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("record %q: %w", strings.TrimPrefix(kv.Key, RegistrationsPrefix), err))
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// DecodeRecord decodes a value stored under RegistrationsPrefix.
func DecodeRecord(v []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(v, &r)
	return r, err
}

// PutSetting stores value under key durably, replacing the previous value.
// The key must not be empty.
func (s *Store) PutSetting(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("put setting: key is empty")
	}
	if _, err := s.kv.Put(ctx, SettingsPrefix+key, value); err != nil {
		return unavailable("put setting", err)
	}
	return nil
}

// Settings returns every stored setting; none is an empty map.
func (s *Store) Settings(ctx context.Context) (map[string][]byte, error) {
	kvs, _, err := s.kv.List(ctx, SettingsPrefix)
	if err != nil {
		return nil, unavailable("read settings", err)
	}
	out := make(map[string][]byte, len(kvs))
	for _, kv := range kvs {
		v := kv.Value
		if v == nil {
			v = []byte{}
		}
		out[strings.TrimPrefix(kv.Key, SettingsPrefix)] = v
	}
	return out, nil
}

// Close closes the KV.
func (s *Store) Close() error { return s.kv.Close() }

package durable

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

// OpenBolt opens the bbolt store in dir (see OpenBoltKV) with the default
// options.
func OpenBolt(dir string) (*Store, error) {
	kv, err := OpenBoltKV(dir, BoltOptions{})
	if err != nil {
		return nil, err
	}
	return NewStore(kv), nil
}

// KV returns the store's KV, for watching what other replicas write.
func (s *Store) KV() KV { return s.kv }

// Put stores r durably, replacing the record with the same key.
func (s *Store) Put(ctx context.Context, r Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("put %s: %w", r.Key(), err)
	}
	if _, err := s.kv.Put(ctx, RegistrationsPrefix+r.Key(), v); err != nil {
		return fmt.Errorf("put registration: %w", err)
	}
	return nil
}

// Delete removes the record with key; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, err := s.kv.Delete(ctx, RegistrationsPrefix+key); err != nil {
		return fmt.Errorf("delete registration: %w", err)
	}
	return nil
}

// List returns every record, sorted by key. A record that does not decode
// is skipped and reported in the joined error, so one bad record does not
// hide the others.
func (s *Store) List(ctx context.Context) ([]Record, error) {
	kvs, _, err := s.kv.List(ctx, RegistrationsPrefix)
	if err != nil {
		return nil, fmt.Errorf("list registrations: %w", err)
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
		return fmt.Errorf("put setting: %w", err)
	}
	return nil
}

// Settings returns every stored setting; none is an empty map.
func (s *Store) Settings(ctx context.Context) (map[string][]byte, error) {
	kvs, _, err := s.kv.List(ctx, SettingsPrefix)
	if err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
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

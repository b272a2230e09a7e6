package durable

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Settings are small named values that must survive a restart, such as the
// panic flag and the rollout config (package migration). They live next to
// the registrations, in the same file for Bolt, under their own bucket.

var settingsBucket = []byte("settings/v1")

// PutSetting stores value under key durably, replacing the previous value;
// it returns only after the change is fsynced. Concurrent calls share one
// commit, as Put does. The key must not be empty.
func (b *Bolt) PutSetting(_ context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("put setting: key is empty")
	}
	// A copy: Batch may run the function again, after the caller reused
	// value. Never nil: bbolt stores no nil values.
	v := append([]byte{}, value...)
	err := b.db.Batch(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(settingsBucket)
		if err != nil {
			return err
		}
		return bk.Put([]byte(key), v)
	})
	if err != nil {
		return fmt.Errorf("put setting %s: %w", key, err)
	}
	return nil
}

// Settings returns every stored setting; none is an empty map.
func (b *Bolt) Settings(_ context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(settingsBucket)
		if bk == nil {
			return nil // never written
		}
		return bk.ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v) // v is only valid inside the transaction
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	return out, nil
}

// PutSetting stores a copy of value under key.
func (m *Memory) PutSetting(_ context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("put setting: key is empty")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settings == nil {
		m.settings = map[string][]byte{}
	}
	m.settings[key] = append([]byte{}, value...)
	return nil
}

// Settings returns a copy of every stored setting.
func (m *Memory) Settings(_ context.Context) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]byte, len(m.settings))
	for k, v := range m.settings {
		out[k] = bytes.Clone(v)
	}
	return out, nil
}

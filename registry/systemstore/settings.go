package systemstore

import (
	"bytes"
	"context"
	"fmt"
)

// Settings are small named values that must survive a restart, such as the
// panic flag and the rollout config (package migration). Store keeps them
// under SettingsPrefix of its KV, next to the registrations.

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

package systemstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// KV is a small versioned key-value store: what every replica shares and
// what survives a restart. Bolt (one replica), etcdstore and spannerstore
// implement it; Store adapts any KV to the registration and settings
// storage that package lease and package migration use.
//
// Every write is given a revision; revisions grow with every write of one
// store, and a change made after another has a larger revision (two writes
// of one Spanner commit timestamp are the exception: they may share one).
//
// All methods are safe for concurrent use. After Close, every method fails
// with ErrClosed and open watches end.
type KV interface {
	// Put stores value under key, replacing any previous value, and
	// returns the revision of the write. The write is durable when Put
	// returns.
	Put(ctx context.Context, key string, value []byte) (rev int64, err error)
	// Delete removes key and returns the revision of the delete. A missing
	// key is not an error.
	Delete(ctx context.Context, key string) (rev int64, err error)
	// Get returns the value of key and the revision that last wrote it,
	// or an error wrapping ErrNotFound.
	Get(ctx context.Context, key string) (value []byte, rev int64, err error)
	// List returns every key under prefix ("" for all), sorted by key, as
	// of one revision that it returns: Watch(prefix, rev) then delivers
	// exactly the changes List did not see.
	List(ctx context.Context, prefix string) (kvs []KeyValue, rev int64, err error)
	// Watch delivers the changes to keys under prefix made after
	// afterRev, in revision order, until ctx ends; then it closes the
	// channel. A key changed several times may be delivered only at its
	// latest revision (bbolt replay, Spanner polling): applying the
	// events in order always ends at the store's state. A failure,
	// including ErrCompacted when afterRev is older than the history the
	// store keeps, is delivered as one event with Err set, after which
	// the channel is closed.
	Watch(ctx context.Context, prefix string, afterRev int64) <-chan WatchEvent
	// Close releases the store.
	Close() error
}

// KeyValue is one stored key.
type KeyValue struct {
	Key   string
	Value []byte
	Rev   int64 // the revision that last wrote Key
}

// EventType tells a put from a delete.
type EventType int

// Event types.
const (
	EventPut EventType = iota + 1
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// WatchEvent is one change, or the failure that ended a watch.
type WatchEvent struct {
	Type  EventType
	Key   string
	Value []byte // nil for a delete
	Rev   int64
	Err   error // non-nil: the watch failed and the channel closes next
}

// Errors of every KV.
var (
	ErrNotFound  = errors.New("key not found")
	ErrInvalid   = errors.New("invalid input")
	ErrCompacted = errors.New("revision compacted")
	ErrClosed    = errors.New("store closed")
)

// Limits on keys and values.
const (
	MaxKeyLen   = 512
	MaxValueLen = 1 << 20 // 1 MiB
)

// ValidateKey checks key: 1 to MaxKeyLen bytes of ASCII letters, digits
// and "-_.:/=@+", not starting or ending with "/", without "//" or "..".
// The error wraps ErrInvalid and names the field "key".
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("key: is empty: %w", ErrInvalid)
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("key: %q ends with /: %w", key, ErrInvalid)
	}
	return validatePrefix("key", key)
}

// ValidatePrefix checks a List or Watch prefix: "" (every key) or the
// start of a valid key; it may end with "/". The error wraps ErrInvalid
// and names the field "prefix".
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validatePrefix("prefix", prefix)
}

func validatePrefix(field, s string) error {
	if len(s) > MaxKeyLen {
		return fmt.Errorf("%s: %d bytes, over the limit of %d: %w", field, len(s), MaxKeyLen, ErrInvalid)
	}
	for i := 0; i < len(s); i++ {
		if !keyChar(s[i]) {
			return fmt.Errorf("%s: %q has %q at byte %d; allowed are letters, digits and -_.:/=@+: %w", field, s, s[i], i, ErrInvalid)
		}
	}
	switch {
	case strings.HasPrefix(s, "/"):
		return fmt.Errorf("%s: %q starts with /: %w", field, s, ErrInvalid)
	case strings.Contains(s, "//"):
		return fmt.Errorf("%s: %q has an empty segment (//): %w", field, s, ErrInvalid)
	case strings.Contains(s, ".."):
		return fmt.Errorf("%s: %q contains ..: %w", field, s, ErrInvalid)
	}
	return nil
}

func keyChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.:/=@+", c) >= 0
}

// ValidateValue checks that value is at most MaxValueLen bytes; the error
// wraps ErrInvalid and names the field "value".
func ValidateValue(value []byte) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("value: %d bytes, over the limit of %d: %w", len(value), MaxValueLen, ErrInvalid)
	}
	return nil
}

// ValidatePut checks the key and value of a Put.
func ValidatePut(key string, value []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return ValidateValue(value)
}

// PrefixEnd returns the smallest string greater than every string that
// starts with prefix, or "" when there is none (prefix "" or all 0xff).
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

// Elector elects one replica among those sharing a store, for a job that
// only one may do at a time (deciding lease expiry). etcdstore implements
// it with etcd's concurrency election over a session lease; a single
// replica (bbolt) needs none.
type Elector interface {
	// Campaign blocks until this replica (named id) holds the election
	// or ctx ends. Elected, it returns a channel that is closed when the
	// hold is lost (the store's session ended, or ctx ended) and a resign
	// function that gives it up; resign is safe to call more than once.
	Campaign(ctx context.Context, id string) (lost <-chan struct{}, resign func(), err error)
}

package clusterversion

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry/systemstore"
)

// DefaultInterval is how often Run reads Key, and tries to raise the
// version, when Config.Interval is zero.
const DefaultInterval = 2 * time.Second

// Config configures Versions.
type Config struct {
	// KV is the shared store (etcd, Spanner), which must be a
	// systemstore.CondPutter (every driver is). nil means a single
	// replica (bbolt, or memory only): Current is in force from New on,
	// nothing is stored and there is nothing to hold.
	KV systemstore.KV
	// ID is this replica's id, recorded as who finalised a version;
	// non-empty when KV is set.
	ID string
	// Interval is how often Run reads Key and, given members, tries to
	// raise the version; zero means DefaultInterval. A change of the hold
	// through SetHold is tried at once.
	Interval time.Duration
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer receives the metrics, or nil for none.
	Registerer prometheus.Registerer
	// Now is the clock stamped on the record and member expiry is judged
	// by; nil means time.Now.
	Now func() time.Time
}

func (c *Config) validate() error {
	switch {
	case c.KV != nil && strings.TrimSpace(c.ID) == "":
		return fmt.Errorf("clusterversion config: ID: empty, want this replica's id")
	case c.Interval < 0:
		return fmt.Errorf("clusterversion config: Interval %v is negative", c.Interval)
	}
	if c.KV != nil {
		if _, ok := c.KV.(systemstore.CondPutter); !ok {
			return fmt.Errorf("clusterversion config: KV %T has no conditional write (PutIf)", c.KV)
		}
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

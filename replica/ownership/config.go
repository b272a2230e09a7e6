package ownership

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
)

// Defaults for Config's zero values.
const (
	DefaultShards = 16
	DefaultTTL    = 5 * time.Second
	// MaxShards bounds Shards: the election names have two digits.
	MaxShards = 100
)

// Config configures Owners.
type Config struct {
	// KV is the shared store; non-nil unless Elect is nil.
	KV systemstore.KV
	// ID names this replica in the store and the elections: letters,
	// digits and -_.:=@+; non-empty.
	ID string
	// GRPCAddr is the host:port other replicas reach this replica's gRPC
	// port on; it is published in the member and ownership records. ""
	// publishes none.
	GRPCAddr string
	// Identity is the identity of the certificate this replica dials
	// other replicas with, published in its member record so that they
	// take its load summaries from that certificate only; "" without
	// TLS. A valid identity name (authn.ValidateName).
	Identity string
	// MaxVersion is the highest cluster version this replica's binary
	// supports (clusterversion.Current), published in its member record
	// so that the version is raised only once every live member supports
	// it; zero publishes none, which readers take as
	// clusterversion.Baseline.
	MaxVersion int
	// Shards is how many shards services are spread over (the
	// --mesh-shards flag); zero means 16, at most MaxShards. Every replica
	// on a store must use the same count: the first records it under
	// mesh/shards and Run refuses another.
	Shards int
	// TTL is how long a member counts as live after its last observed
	// heartbeat (heartbeats are written every TTL/3) and the TTL of every
	// shard election; zero means 5s. etcd counts whole seconds.
	TTL time.Duration
	// Elect returns the election named name ("election/shard/NN"), e.g.
	// etcdstore's or spannerstore's KV.Election(name, TTL). nil means a
	// single replica (bbolt) that owns every shard at once and never
	// touches the store.
	Elect func(name string) (systemstore.Elector, error)
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock member liveness is judged by; nil means time.Now.
	Now func() time.Time
}

func (c *Config) validate() error {
	switch {
	case c.ID == "" || strings.Contains(c.ID, "/") || systemstore.ValidateKey(MembersPrefix+c.ID) != nil:
		return fmt.Errorf("ownership config: ID %q: want letters, digits and -_.:=@+", c.ID)
	case c.Identity != "" && authn.ValidateName(c.Identity) != nil:
		return fmt.Errorf("ownership config: Identity: %w", authn.ValidateName(c.Identity))
	case c.Elect != nil && c.KV == nil:
		return errors.New("ownership config: KV is nil (it may only be nil when Elect is nil)")
	case c.Shards < 0 || c.Shards > MaxShards:
		return fmt.Errorf("ownership config: Shards %d: want 1 to %d (0 for %d)", c.Shards, MaxShards, DefaultShards)
	case c.MaxVersion < 0:
		return fmt.Errorf("ownership config: MaxVersion %d is negative", c.MaxVersion)
	case c.TTL < 0:
		return fmt.Errorf("ownership config: TTL %v is negative", c.TTL)
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

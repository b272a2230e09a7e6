package main

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/replica/registrysync"
)

// ReplicaConfig tunes replication over a shared store (etcd, Spanner);
// it has no effect on bbolt, which one replica holds.
type ReplicaConfig struct {
	// ID names this replica in the store; "" means <host name>-<pid>.
	ID string `yaml:"id"`
	// LastSeenFlush is how often heartbeats' last-seen stamps are written;
	// zero means 10s (the default lease TTL / 3).
	LastSeenFlush time.Duration `yaml:"lastseen_flush"`
	// ElectionTTL bounds how long the expiry election stays with a dead
	// replica; zero means 5s.
	ElectionTTL time.Duration `yaml:"election_ttl"`
	// Mesh is mesh-wide load (mesh.go).
	Mesh MeshConfig `yaml:"mesh"`
}

var replicaIDChars = regexp.MustCompile(`[^A-Za-z0-9_.:=@+-]`)

func (c ReplicaConfig) validate() error {
	switch {
	case c.ID != "" && replicaIDChars.MatchString(c.ID):
		return fmt.Errorf("--replica-id (store.replica.id): %q: want letters, digits and -_.:=@+", c.ID)
	case c.LastSeenFlush < 0:
		return fmt.Errorf("--lastseen-flush (store.replica.lastseen_flush): %v is negative", c.LastSeenFlush)
	case c.ElectionTTL < 0:
		return fmt.Errorf("--election-ttl (store.replica.election_ttl): %v is negative", c.ElectionTTL)
	case c.ElectionTTL > 0 && c.ElectionTTL < time.Second:
		return fmt.Errorf("--election-ttl (store.replica.election_ttl): %v, want at least 1s (etcd leases count seconds)", c.ElectionTTL)
	}
	return c.Mesh.validate()
}

// replicaID is this replica's name in the store: --replica-id, else
// <host name>-<pid>.
func replicaID(c ReplicaConfig) string {
	if c.ID != "" {
		return c.ID
	}
	host, _ := os.Hostname()
	return replicaIDChars.ReplaceAllString(fmt.Sprintf("%s-%d", host, os.Getpid()), "_")
}

// newReplica is this replica's registry sync on a shared store (etcd,
// Spanner), nil on bbolt or in memory, where one replica decides expiry
// alone as it always did. It is the lease manager's expiry decider
// (decideExpiry) and is fed the lease manager in Init.
func newReplica(c StoreConfig, sys *systemStore, ctl *migration.Controller, maxTTL time.Duration, reg prometheus.Registerer, log *slog.Logger) (*registrysync.Replica, error) {
	if !sys.shared {
		return nil, nil
	}
	var el systemstore.Elector
	if sys.elect != nil {
		e, err := sys.elect("election/expiry", c.Replica.ElectionTTL)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		el = e
	} else {
		log.Warn("this store has no expiry election: run a single replica on it", "store", sys.name)
	}
	return registrysync.New(registrysync.Config{
		KV: sys.kv, Name: sys.name, Settings: ctl, Elector: el, ID: replicaID(c.Replica),
		Flush: c.Replica.LastSeenFlush, MaxTTL: maxTTL, Logger: log, Registerer: reg,
	})
}

// decideExpiry makes rep the expiry decider of a replicated lease
// manager, and the judge of whether its heartbeats reach the others;
// nothing when rep is nil.
func decideExpiry(lc *lease.Config, rep *registrysync.Replica) {
	if rep == nil {
		return
	}
	lc.Decider = rep
	lc.ExpiryGrace = rep.Grace()
	lc.Sharer = rep
	lc.View = rep
}

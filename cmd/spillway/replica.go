package main

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/spannerstore"
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

// replicaGate is the lease manager's Decider until the Replica exists:
// nothing expires before the replica has synced and been elected.
type replicaGate struct {
	r atomic.Pointer[registrysync.Replica]
}

func (g *replicaGate) MayExpire() bool {
	r := g.r.Load()
	return r != nil && r.MayExpire()
}

// replication is the replica part of run: nil for bbolt or memory (one
// replica: the lease manager decides expiry alone, as it always did).
type replication struct {
	gate  *replicaGate
	grace time.Duration
	kv    systemstore.KV
	name  string
	cfg   ReplicaConfig
	rep   *registrysync.Replica
}

// newReplication returns the replication of st when it is a shared store,
// else nil. Call before lease.New: the lease manager takes its gate.
func newReplication(c StoreConfig, st storage) *replication {
	ds, ok := st.(*systemstore.Store)
	if !ok {
		return nil
	}
	spec, err := parseStoreURL(c.URL)
	if err != nil || spec.Kind == "bolt" {
		return nil
	}
	r := &replication{gate: &replicaGate{}, kv: ds.KV(), name: c.URL, cfg: c.Replica}
	r.grace = registrysync.GraceFor(c.Replica.LastSeenFlush, 0)
	return r
}

// leaseConfig sets the expiry gate of a replicated lease manager.
func (r *replication) leaseConfig(lc *lease.Config) {
	if r == nil {
		return
	}
	lc.Decider = r.gate
	lc.ExpiryGrace = r.grace
}

// id is this replica's name in the store: --replica-id, else
// <host name>-<pid>.
func (r *replication) id() string {
	if r.cfg.ID != "" {
		return r.cfg.ID
	}
	host, _ := os.Hostname()
	return replicaIDChars.ReplaceAllString(fmt.Sprintf("%s-%d", host, os.Getpid()), "_")
}

// start builds the Replica over the lease manager and the migration
// controller and loads the store (Init); the caller runs Run.
func (r *replication) start(leases *lease.Manager, maxTTL time.Duration, ctl *migration.Controller, reg prometheus.Registerer, log *slog.Logger) (*registrysync.Replica, error) {
	id := r.id()
	var el systemstore.Elector
	switch kv := r.kv.(type) {
	case *etcdstore.KV:
		e, err := kv.Election("election/expiry", r.cfg.ElectionTTL)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		el = e
	case *spannerstore.KV:
		e, err := kv.Election("election/expiry", r.cfg.ElectionTTL)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		el = e
	default:
		log.Warn("this store has no expiry election: run a single replica on it", "store", r.name)
	}
	rep, err := registrysync.New(registrysync.Config{
		KV: r.kv, Name: r.name, Leases: leases, Settings: ctl, Elector: el, ID: id,
		Flush: r.cfg.LastSeenFlush, MaxTTL: maxTTL, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	r.rep = rep
	return rep, nil
}

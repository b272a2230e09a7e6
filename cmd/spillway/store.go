package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/registry/systemstore/spannerstore"
)

// StoreConfig says where durable state lives (docs/replication.md).
type StoreConfig struct {
	// URL is "" (bbolt in --data-dir, the default), etcd://h:2379[,h:2379...]/prefix
	// or spanner://projects/P/instances/I/databases/D.
	URL  string         `yaml:"url"`
	Etcd EtcdFlagConfig `yaml:"etcd"`
	// SpannerPoll is how often a Spanner watch reads new rows; zero means
	// 500ms.
	SpannerPoll time.Duration `yaml:"spanner_poll"`
	// Replica tunes replication over a shared store (replica.go).
	Replica ReplicaConfig `yaml:"replica"`
}

// EtcdFlagConfig is the TLS and auth of the etcd connection; empty fields
// mean plain and anonymous.
type EtcdFlagConfig struct {
	CA           string        `yaml:"ca"`
	Cert         string        `yaml:"cert"`
	Key          string        `yaml:"key"`
	Username     string        `yaml:"username"`
	PasswordFile string        `yaml:"password_file"`
	DialTimeout  time.Duration `yaml:"dial_timeout"` // zero means 5s
}

// storeSpec is a parsed --store.
type storeSpec struct {
	Kind      string   // "bolt", "etcd" or "spanner"
	Endpoints []string // etcd: host:port
	Prefix    string   // etcd: "/<path>/"
	Database  string   // spanner: projects/P/instances/I/databases/D
}

// parseStoreURL parses --store; errors name the flag and the part.
func parseStoreURL(s string) (storeSpec, error) {
	if s == "" || s == "bolt" || s == "bbolt" {
		return storeSpec{Kind: "bolt"}, nil
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return storeSpec{}, fmt.Errorf("--store (store.url): %q: want etcd://host:port[,host:port...]/prefix, spanner://projects/P/instances/I/databases/D, or empty for bbolt in --data-dir", s)
	}
	switch scheme {
	case "etcd":
		hosts, path, _ := strings.Cut(rest, "/")
		if hosts == "" {
			return storeSpec{}, fmt.Errorf("--store (store.url): %q: host: none; want etcd://host:port[,host:port...]/prefix", s)
		}
		spec := storeSpec{Kind: "etcd", Prefix: etcdstore.DefaultPrefix}
		for i, h := range strings.Split(hosts, ",") {
			host, port, err := net.SplitHostPort(h)
			if err != nil {
				return storeSpec{}, fmt.Errorf("--store (store.url): host %d %q: %v", i+1, h, err)
			}
			if host == "" {
				return storeSpec{}, fmt.Errorf("--store (store.url): host %d %q: host is empty", i+1, h)
			}
			if strings.ContainsAny(host, "@?#%/ ") {
				return storeSpec{}, fmt.Errorf("--store (store.url): host %d %q: bad character in host", i+1, h)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return storeSpec{}, fmt.Errorf("--store (store.url): host %d %q: port %q is not 1-65535", i+1, h, port)
			}
			spec.Endpoints = append(spec.Endpoints, net.JoinHostPort(host, port))
		}
		if path = strings.TrimSuffix(path, "/"); path != "" {
			if err := systemstore.ValidateKey(path); err != nil {
				return storeSpec{}, fmt.Errorf("--store (store.url): prefix %q: %w", path, err)
			}
			spec.Prefix = "/" + path + "/"
		}
		return spec, nil
	case "spanner":
		if err := spannerstore.ValidDatabase(rest); err != nil {
			return storeSpec{}, fmt.Errorf("--store (store.url): %w", err)
		}
		return storeSpec{Kind: "spanner", Database: rest}, nil
	}
	return storeSpec{}, fmt.Errorf("--store (store.url): scheme %q: want etcd or spanner (empty --store is bbolt in --data-dir)", scheme)
}

// validate checks the store flags without reaching the store.
func (c StoreConfig) validate() error {
	spec, err := parseStoreURL(c.URL)
	if err != nil {
		return err
	}
	if spec.Kind != "etcd" && (c.Etcd != EtcdFlagConfig{}) {
		return fmt.Errorf("--etcd-* (store.etcd): set, but --store %q is not etcd://", c.URL)
	}
	if c.SpannerPoll < 0 {
		return fmt.Errorf("--spanner-poll (store.spanner_poll): %v is negative", c.SpannerPoll)
	}
	if err := c.Replica.validate(); err != nil {
		return err
	}
	if c.Etcd.DialTimeout < 0 {
		return fmt.Errorf("--etcd-dial-timeout (store.etcd.dial_timeout): %v is negative", c.Etcd.DialTimeout)
	}
	return nil
}

// systemStore is the opened system store (--store, --data-dir): what
// must survive a restart, and on etcd and Spanner what replicas share.
// openStorage fills every field from the driver it opened, so no caller
// needs to know which driver that was.
type systemStore struct {
	// storage keeps the registrations, the panic flag and the rollout
	// config.
	storage
	// kv is the key-value store under storage, which also keeps the
	// audit log, the route rules and the per-service config; nil in
	// memory-only mode (no --data-dir), where those stay in memory.
	kv systemstore.KV
	// name is --store as given, for status and logs.
	name string
	// shared is true on etcd and Spanner: replicas share the store.
	shared bool
	// elect opens a named election with a session TTL (zero: the
	// driver's default); nil where the store has none.
	elect func(name string, ttl time.Duration) (systemstore.Elector, error)
}

// openStorage opens the store --store names: bbolt in dataDir by default
// (in memory when dataDir is ""), else etcd or Spanner.
func openStorage(ctx context.Context, c StoreConfig, dataDir string, log *slog.Logger) (*systemStore, error) {
	spec, err := parseStoreURL(c.URL)
	if err != nil {
		return nil, err
	}
	switch spec.Kind {
	case "etcd":
		kv, err := openEtcd(ctx, c.Etcd, spec, log)
		if err != nil {
			return nil, err
		}
		return &systemStore{storage: systemstore.NewStore(kv), kv: kv, name: c.URL, shared: true, elect: electorOf(kv.Election)}, nil
	case "spanner":
		kv, err := spannerstore.Open(ctx, spannerstore.Config{Database: spec.Database, PollInterval: c.SpannerPoll, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		log.Info("durable state in spanner", "database", spec.Database)
		return &systemStore{storage: systemstore.NewStore(kv), kv: kv, name: c.URL, shared: true, elect: electorOf(kv.Election)}, nil
	}
	if dataDir == "" {
		log.Warn("no data dir: VM registrations are kept in memory only and lost on restart")
		return &systemStore{storage: systemstore.NewMemory()}, nil
	}
	st, err := boltstore.OpenStore(dataDir)
	if err != nil {
		return nil, err
	}
	return &systemStore{storage: st, kv: st.KV(), name: c.URL}, nil
}

// electorOf adapts a driver's Election method to systemStore.elect (an
// error gives a nil Elector, never a typed nil).
func electorOf[E systemstore.Elector](open func(string, time.Duration) (E, error)) func(string, time.Duration) (systemstore.Elector, error) {
	return func(name string, ttl time.Duration) (systemstore.Elector, error) {
		e, err := open(name, ttl)
		if err != nil {
			return nil, err
		}
		return e, nil
	}
}

// openEtcd connects to the etcd cluster spec names, with c's TLS and
// credentials.
func openEtcd(ctx context.Context, c EtcdFlagConfig, spec storeSpec, log *slog.Logger) (*etcdstore.KV, error) {
	tlsCfg, err := etcdstore.LoadTLS(c.CA, c.Cert, c.Key)
	if err != nil {
		return nil, err
	}
	var password string
	if c.PasswordFile != "" {
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-password-file: %w", err)
		}
		password = strings.TrimSpace(string(b))
	}
	scheme := "http://"
	if tlsCfg != nil {
		scheme = "https://"
	}
	var eps []string
	for _, e := range spec.Endpoints {
		eps = append(eps, scheme+e)
	}
	kv, err := etcdstore.Open(ctx, etcdstore.Config{
		Endpoints: eps, Prefix: spec.Prefix, TLS: tlsCfg,
		Username: c.Username, Password: password, DialTimeout: c.DialTimeout, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	log.Info("durable state in etcd", "endpoints", eps, "prefix", spec.Prefix)
	return kv, nil
}

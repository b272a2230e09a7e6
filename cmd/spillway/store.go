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

// openStorage opens the store --store names: bbolt in dataDir by default
// (memory when dataDir is ""), etcd or Spanner.
func openStorage(ctx context.Context, c StoreConfig, dataDir string, log *slog.Logger) (storage, error) {
	spec, err := parseStoreURL(c.URL)
	if err != nil {
		return nil, err
	}
	switch spec.Kind {
	case "etcd":
		tlsCfg, err := etcdstore.LoadTLS(c.Etcd.CA, c.Etcd.Cert, c.Etcd.Key)
		if err != nil {
			return nil, err
		}
		var password string
		if c.Etcd.PasswordFile != "" {
			b, err := os.ReadFile(c.Etcd.PasswordFile)
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
			Username: c.Etcd.Username, Password: password, DialTimeout: c.Etcd.DialTimeout, Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		log.Info("durable state in etcd", "endpoints", eps, "prefix", spec.Prefix)
		return systemstore.NewStore(kv), nil
	case "spanner":
		kv, err := spannerstore.Open(ctx, spannerstore.Config{Database: spec.Database, PollInterval: c.SpannerPoll, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		log.Info("durable state in spanner", "database", spec.Database)
		return systemstore.NewStore(kv), nil
	}
	if dataDir == "" {
		log.Warn("no data dir: VM registrations are kept in memory only and lost on restart")
		return systemstore.NewMemory(), nil
	}
	return boltstore.OpenStore(dataDir)
}

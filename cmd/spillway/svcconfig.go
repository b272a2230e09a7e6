package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/weights/svcconfig"
)

// ServiceConfigConfig is per-service weight strategy config
// (weights/svcconfig).
type ServiceConfigConfig struct {
	// Dir is the directory of SERVICE.yaml files; "" takes configs from
	// the API only.
	Dir string `yaml:"dir"`
	// Tombstone is how long a deleted config keeps applying; zero means 7 days.
	Tombstone time.Duration `yaml:"tombstone"`
}

func (c ServiceConfigConfig) validate() error {
	if c.Tombstone < 0 {
		return fmt.Errorf("--service-config-tombstone (service_config.tombstone): %v is negative", c.Tombstone)
	}
	if c.Dir != "" {
		if fi, err := os.Stat(c.Dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--service-config-dir (service_config.dir): %q is not a directory", c.Dir)
		}
	}
	return nil
}

// serviceConfig is the svcconfig part of run.
type serviceConfig struct {
	store *svcconfig.Store
	dir   *svcconfig.Dir
	token string
	// authz, when set, decides config changes instead of token.
	authz svcconfig.Authorizer
	log   *slog.Logger
}

// startServiceConfig loads the stored configs and the directory; the
// store's KV is the shared one (etcd, Spanner) or the local bbolt file,
// none in memory-only mode.
// regionsOf, non-nil, lists a service's regions with healthy endpoints,
// for the warnings of PUT.
func startServiceConfig(ctx context.Context, c ServiceConfigConfig, sys *systemStore, token string, az svcconfig.Authorizer, rec svcconfig.Recorder, regionsOf func(string) []string, reg prometheus.Registerer, log *slog.Logger) (*serviceConfig, error) {
	store, err := svcconfig.NewStore(svcconfig.StoreConfig{KV: sys.kv, Tombstone: c.Tombstone, Logger: log, Audit: rec, Regions: regionsOf})
	if err != nil {
		return nil, err
	}
	if _, err := store.Init(ctx); err != nil {
		return nil, err
	}
	sc := &serviceConfig{store: store, token: token, authz: az, log: log}
	if c.Dir != "" {
		if sc.dir, err = svcconfig.NewDir(svcconfig.DirConfig{Path: c.Dir, Store: store, Logger: log}); err != nil {
			return nil, fmt.Errorf("--service-config-dir: %w", err)
		}
		// A bad file is logged and counted, not fatal: the others apply.
		_ = sc.dir.Load(ctx)
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_service_config_load_failures_total",
			Help: "Files of --service-config-dir refused (bad name or content); the service's previous config stays.",
		}, func() float64 { return float64(sc.dir.Failures()) }))
	}
	return sc, nil
}

func (sc *serviceConfig) mount(mux *http.ServeMux) {
	logf := func(msg string, args ...any) { sc.log.Info(msg, args...) }
	h := sc.store.Handler(sc.token, logf)
	if sc.authz != nil {
		h = sc.store.AuthorizedHandler(sc.authz, logf)
	}
	for _, p := range svcconfig.Paths {
		mux.Handle(p, h)
	}
}

func (sc *serviceConfig) run(ctx context.Context, wg *sync.WaitGroup, fail func(string, error)) {
	wg.Go(func() { fail("service config store", sc.store.Run(ctx, 0)) })
	if sc.dir != nil {
		wg.Go(func() { fail("service config dir", sc.dir.Run(ctx)) })
	}
}

// watchRegionRules keeps table in step with every service's redirects and
// exclude in store, and calls dispatch with the services whose rules
// changed (a push to their xDS streams; DNS reads the table per query).
func watchRegionRules(ctx context.Context, store *svcconfig.Store, table *regions.Table, dispatch func([]string, time.Time)) {
	for {
		changed := store.Changed()
		var moved []string
		seen := map[string]bool{}
		for _, svc := range store.Services() {
			seen[svc] = true
			c, _, _ := store.Get(svc)
			if table.Set(svc, c.RegionRules()) {
				moved = append(moved, svc)
			}
		}
		for _, svc := range table.Services() {
			if !seen[svc] && table.Set(svc, regions.Rules{}) {
				moved = append(moved, svc)
			}
		}
		if len(moved) > 0 {
			dispatch(moved, time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

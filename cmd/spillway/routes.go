package main

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/routing"
)

// routes is the route rules part of run (xds/routing): the store over the
// shared KV, its HTTP API and its metric.
type routes struct {
	store *routing.Store
	authz routing.Authorizer
	log   *slog.Logger
}

// registryTargets answers the route store from the registry: a target
// exists while it has an endpoint to serve (as the xDS server decides).
func registryTargets(store *registry.Store) routing.Targets {
	return routing.TargetsFunc(func(service string) (bool, int) {
		svc, ok := store.Snapshot().Service(service)
		if !ok {
			return false, 0
		}
		healthy := 0
		for _, e := range svc.Serving() {
			if e.Health == registry.Healthy {
				healthy++
			}
		}
		return len(svc.Serving()) > 0, healthy
	})
}

// startRoutes loads the stored route rules; the KV is the system store's
// (shared between replicas on etcd and Spanner), nil in memory-only mode.
func startRoutes(ctx context.Context, sys *systemStore, store *registry.Store, az routing.Authorizer, rec routing.Recorder, reg prometheus.Registerer, log *slog.Logger) (*routes, error) {
	rs, err := routing.NewStore(routing.StoreConfig{KV: sys.kv, Targets: registryTargets(store), Check: xds.CheckRules, Logger: log, Audit: rec})
	if err != nil {
		return nil, err
	}
	if _, err := rs.Init(ctx); err != nil {
		return nil, err
	}
	reg.MustRegister(rs.Collector())
	return &routes{store: rs, authz: az, log: log}, nil
}

// routeClients lists, for the routes' dry run, the clients of the xDS
// server subscribed to a service, by client service (node.cluster).
type routeClients struct{ x *xds.Server }

// RouteClients implements routing.ClientLister.
func (c routeClients) RouteClients(service string) []routing.Client {
	counts := map[string]int{}
	for _, sub := range c.x.Subscriptions() {
		if sub.Wildcard || slices.Contains(sub.Services, service) {
			counts[sub.ClientService]++
		}
	}
	out := make([]routing.Client, 0, len(counts))
	for _, c := range slices.Sorted(maps.Keys(counts)) {
		out = append(out, routing.Client{Service: c, Streams: counts[c]})
	}
	return out
}

// mount serves the route rules' HTTP API on mux; the dry run lists
// clients' subscriptions.
func (r *routes) mount(mux *http.ServeMux, clients routing.ClientLister) {
	h := r.store.HandlerWith(routing.HandlerConfig{Authorizer: r.authz, Clients: clients, Log: func(msg string, args ...any) { r.log.Info(msg, args...) }})
	for _, p := range routing.Paths {
		mux.Handle(p, h)
	}
}

func (r *routes) run(ctx context.Context, wg *sync.WaitGroup, fail func(string, error)) {
	wg.Go(func() { fail("route rules store", r.store.Run(ctx)) })
}

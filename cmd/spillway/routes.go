package main

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
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

// startRoutes loads the stored route rules; the KV is the shared one
// (etcd, Spanner) or the local bbolt file, none in memory-only mode.
func startRoutes(ctx context.Context, st storage, store *registry.Store, xdsSrv *atomic.Pointer[xds.Server], az routing.Authorizer, rec routing.Recorder, reg prometheus.Registerer, log *slog.Logger) (*routes, error) {
	var kv systemstore.KV
	if ds, ok := st.(*systemstore.Store); ok {
		kv = ds.KV()
	}
	rs, err := routing.NewStore(routing.StoreConfig{KV: kv, Targets: registryTargets(store), Check: xds.CheckRules,
		Clients: func(service string) []routing.Client { return subscribedClients(xdsSrv.Load(), service) }, Logger: log, Audit: rec})
	if err != nil {
		return nil, err
	}
	if _, err := rs.Init(ctx); err != nil {
		return nil, err
	}
	reg.MustRegister(rs.Collector())
	return &routes{store: rs, authz: az, log: log}, nil
}

// subscribedClients counts the xDS streams subscribed to service by
// client service (node.cluster), for the dry run; none before x is set.
func subscribedClients(x *xds.Server, service string) []routing.Client {
	if x == nil {
		return nil
	}
	counts := map[string]int{}
	for _, sub := range x.Subscriptions() {
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

func (r *routes) mount(mux *http.ServeMux) {
	h := r.store.Handler(r.authz, func(msg string, args ...any) { r.log.Info(msg, args...) })
	for _, p := range routing.Paths {
		mux.Handle(p, h)
	}
}

func (r *routes) run(ctx context.Context, wg *sync.WaitGroup, fail func(string, error)) {
	wg.Go(func() { fail("route rules store", r.store.Run(ctx)) })
}

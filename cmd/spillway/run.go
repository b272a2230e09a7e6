package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/spillway/spillway/admin"
	"github.com/spillway/spillway/admin/ui"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/migration/migrationapi"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/registryapi"
	"github.com/spillway/spillway/registry/static"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/replica/registrysync"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/weights/svcconfig"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
)

// storage is what the server needs of durable registrations.
type storage interface {
	lease.Storage
	migration.Storage
	Close() error
}

// run wires the parts, serves until ctx ends, then drains and returns.
func run(ctx context.Context, cfg Config, log *slog.Logger) error {
	// The store checks names against the domain DNS serves them under.
	store, err := registry.NewStoreWith(registry.StoreConfig{Domain: cfg.Domain})
	if err != nil {
		return fmt.Errorf("--domain (domain): %w", err)
	}
	store.SetLogger(log.With("component", "registry"))
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		registry.NewCollector(store),
	)

	srvTLS, err := startTLS(cfg.TLS, metrics, log.With("component", "tls"))
	if err != nil {
		return err
	}

	token, err := adminToken(cfg, log)
	if err != nil {
		return err
	}

	st, err := openStorage(ctx, cfg.Store, cfg.DataDir, log.With("component", "store"))
	if err != nil {
		return err
	}
	defer st.Close()

	// Replication (replica.go): nil on bbolt, where this process decides
	// expiry alone.
	repl := newReplication(cfg.Store, st)

	// Every admin change and every denial, in the log and the store.
	auditLog, err := newAuditLog(st, repl, metrics, log.With("component", "audit"))
	if err != nil {
		return err
	}
	// Who is calling (certificate or token) and what they may do.
	auth, policy, err := startSecurity(cfg, token, auditLog, metrics, log)
	if err != nil {
		return err
	}
	leaseCfg := lease.Config{
		Store:         store,
		Storage:       st,
		DefaultTTL:    cfg.Leases.DefaultTTL,
		MinTTL:        cfg.Leases.MinTTL,
		MaxTTL:        cfg.Leases.MaxTTL,
		Tick:          cfg.Leases.Tick,
		GuardShare:    cfg.Leases.GuardShare,
		GuardMinCount: cfg.Leases.GuardMinCount,
		Logger:        log.With("component", "leases"),
		Registerer:    metrics,
	}
	repl.leaseConfig(&leaseCfg)
	leases, err := lease.New(leaseCfg)
	if err != nil {
		return err
	}
	// Backends' utilization reports (ReportUtilization), kept for the
	// per-endpoint planner; bounded by the registry's endpoints.
	utilizations := load.NewUtilizationTable(store, metrics)
	api, err := registryapi.New(registryapi.Config{Store: store, Leases: leases, Utilization: utilizations, Authorizer: policy, Audit: auditLog, Logger: log.With("component", "registryapi")})
	if err != nil {
		return err
	}

	var zoneAware *zoneaware.Config
	if cfg.XDS.ZoneAware {
		probe := cfg.XDS.ProbeShare
		zoneAware = &zoneaware.Config{ProbeShare: &probe, ReportInterval: cfg.XDS.LRSInterval, SlowStartRamp: cfg.hooks.slowStartRamp}
	}
	// The planner reads the xDS server's load table, streams and zone set,
	// and tells it which services' weights changed; the server reads the
	// planner's plans. planner is set before anything runs.
	//
	// With mesh-wide load (mesh.go), chosen is the selector: the plan an
	// owner published, or this replica's own while none is fresh; the
	// local planner's changes go to the selector, not to xds.
	var svcStore atomic.Pointer[svcconfig.Store] // set once the service config store starts
	var planner *weights.Planner
	var chosen interface{ Plan(string) *weights.Plan }
	var plans xds.Plans
	if zoneAware != nil {
		plans = xds.PlanFunc(func(service string) *weights.Plan { return chosen.Plan(service) })
	}
	onLocal := func(services []string, now time.Time) {}
	// Regional redirects and exclusions (svcconfig's redirects and
	// exclude), fed from the service config store by watchRegionRules.
	regionRules := regions.NewTable()
	var xdsRef atomic.Pointer[xds.Server] // set once the xDS server is made; the routes' dry run lists its clients
	rules, err := startRoutes(ctx, st, store, &xdsRef, policy, auditLog, metrics, log.With("component", "routes"))
	if err != nil {
		return err
	}
	xdsSrv, err := xds.New(xds.Config{
		RegionPreference: cfg.RegionPreference,
		RegionRules:      regionRules,
		Store:            store,
		PortName:         cfg.XDS.PortName,
		Debounce:         cfg.XDS.Debounce,
		MaxDelay:         cfg.XDS.MaxDelay,
		Resync:           cfg.XDS.Resync,
		LRSInterval:      cfg.XDS.LRSInterval,
		Plans:            plans,
		MaxZones:         cfg.XDS.MaxZones,
		Authorizer:       policy,
		Routes:           rules.store,
		Logger:           log.With("component", "xds"),
		Registerer:       metrics,
	})
	if err != nil {
		return fmt.Errorf("xds config: %w", err)
	}
	xdsRef.Store(xdsSrv)

	if zoneAware != nil {
		planner, err = weights.NewPlanner(weights.Config{
			Registry:  store,
			Loads:     xdsSrv.Loads(),
			Clients:   xdsSrv,
			Zones:     xdsSrv,
			PortName:  cfg.XDS.PortName,
			ZoneAware: *zoneAware,
			Interval:  cfg.XDS.WeightsInterval,
			OnChange:  func(services []string, now time.Time) { onLocal(services, now) },
			// Per-service strategy (zone-aware, pid, ...) and the backends'
			// utilization reports for PID endpoint weights.
			Strategies:  strategies(svcStore.Load, *zoneAware),
			Utilization: utilizationsOf(utilizations.Utilizations),
			Logger:      log.With("component", "weights"),
			Registerer:  metrics,
		})
		if err != nil {
			return fmt.Errorf("xds config: %w", err)
		}
		chosen, onLocal = planner, xdsSrv.Dispatch
	}
	var rep *registrysync.Replica // set before anything runs
	var meshW *meshWeights
	if repl != nil && zoneAware != nil && cfg.Store.Replica.Mesh.Load {
		meshW, err = newMeshWeights(meshInputs{
			cfg: cfg.Store.Replica.Mesh, store: store, kv: repl.kv, id: repl.id(), grpcAddr: cfg.GRPCAddr,
			ttl: cmp.Or(cfg.Store.Replica.ElectionTTL, etcdstore.DefaultSessionTTL), zoneAware: *zoneAware,
			portName: cfg.XDS.PortName, interval: cfg.XDS.WeightsInterval, report: cfg.XDS.LRSInterval,
			xds: xdsSrv, utilizations: utilizations, strategies: strategies(svcStore.Load, *zoneAware), local: planner, storeUp: func() bool { return rep.Status().Up },
			metrics: metrics, log: log, peerCreds: srvTLS.peerCreds(), authz: policy,
		})
		if err != nil {
			return err
		}
		chosen, onLocal = meshW.sel, meshW.sel.LocalChanged
	}
	if chosen == nil {
		chosen = planner // nil: zone-aware off, no plans
	}

	zones, err := cfg.DNS.zones()
	if err != nil {
		return err
	}
	dnsSrv, err := resolver.New(resolver.Config{
		Store:      store,
		Domain:     cfg.Domain,
		UDPSizeCap: cfg.DNS.UDPSizeCap,
		TTL: resolver.TTLs{
			SRV: cfg.DNS.TTL.SRV, A: cfg.DNS.TTL.A, TXT: cfg.DNS.TTL.TXT,
			SOA: cfg.DNS.TTL.SOA, Negative: cfg.DNS.TTL.Negative,
		},
		NSAddr:           nsAddr(cfg.DNSAddr),
		Zones:            zones,
		RegionPreference: cfg.RegionPreference,
		RegionRules:      regionRules,
		RRL:              cfg.DNS.rrl(),
		TCPMaxConns:      cfg.DNS.TCPMaxConns, TCPMaxQueries: cfg.DNS.TCPMaxQueries, TCPIdleTimeout: cfg.DNS.TCPIdleTimeout,
		Weights:    planWeights{xds.PlanFunc(func(service string) *weights.Plan { return chosen.Plan(service) })},
		Logger:     log.With("component", "dns"),
		Registerer: metrics,
	})
	if err != nil {
		return fmt.Errorf("dns config: %w", err)
	}

	migrationCtl, err := migration.NewController(migration.ControllerConfig{Store: store, Storage: st, Logger: log.With("component", "migration"), Registerer: metrics, Audit: auditLog})
	if err != nil {
		return err
	}
	migrationAPI, err := migrationapi.New(migrationapi.Config{
		Panic: migrationCtl, Rollout: migrationCtl, Clients: xdsSrv, Registry: store, Token: token, Authorizer: policy, NoTokenHint: cfg.AuthzFile == "",
		Logger: log.With("component", "migrationapi"), Registerer: metrics,
	})
	if err != nil {
		return err
	}

	var meshLoad admin.MeshLoad
	if meshW != nil {
		meshLoad = admin.JoinMesh(meshW.owners, meshW.merged)
	}
	adminAPI, err := admin.New(admin.Config{Mesh: meshLoad, Loads: xdsSrv.Loads(), Subscriptions: xdsSrv, Regions: xdsSrv, Routes: rules.store, Registry: store, Plans: xds.PlanFunc(func(service string) *weights.Plan { return chosen.Plan(service) }), Authorizer: policy, Logger: log.With("component", "admin")})
	if err != nil {
		return fmt.Errorf("admin config: %w", err)
	}

	// Bind first so a taken port fails the start before any work.
	dnsUDP, err := net.ListenPacket("udp", cfg.DNSAddr)
	if err != nil {
		return fmt.Errorf("--dns-addr (udp): %w", err)
	}
	defer dnsUDP.Close()
	dnsTCP, err := net.Listen("tcp", cfg.DNSAddr)
	if err != nil {
		return fmt.Errorf("--dns-addr (tcp): %w", err)
	}
	defer dnsTCP.Close()
	grpcTCP, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	grpcLis, err := cfg.GRPC.admission(grpcTCP)
	if err == nil {
		err = grpcLis.Register(metrics)
	}
	if err != nil {
		grpcTCP.Close()
		return err
	}
	defer grpcLis.Close()
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	defer httpLis.Close()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	fail := func(what string, err error) {
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && ctx.Err() == nil {
			cancel(fmt.Errorf("%s: %w", what, err))
		}
	}
	defer func() {
		cancel(nil) // an early return stops what already runs
		wg.Wait()
	}()
	// DNS answers from the start: SERVFAIL until the store is synced, never
	// a false NXDOMAIN while sources load.
	wg.Go(func() { fail("dns server", dnsSrv.Serve(ctx, dnsUDP, dnsTCP)) })

	// Initial state of every source, before anything is served as final.
	// The panic flag is in the store before DNS answers TXT _xds.
	if err := migrationCtl.Restore(ctx); err != nil {
		return err
	}
	if repl == nil {
		if _, err := leases.Restore(ctx); err != nil {
			return err
		}
	} else {
		// Every registration and setting in the shared store, before ready.
		if rep, err = repl.start(leases, cfg.Leases.MaxTTL, migrationCtl, metrics, log.With("component", "replica")); err != nil {
			return err
		}
		if err := rep.Init(ctx); err != nil {
			return err
		}
		repl.gate.r.Store(rep)
	}
	var src *static.Source
	if cfg.StaticFile != "" {
		src, err = static.New(static.Config{Path: cfg.StaticFile, Store: store, Logger: log.With("component", "static")})
		if err != nil {
			return fmt.Errorf("--static-file: %w", err)
		}
		if err := src.Load(); err != nil {
			return fmt.Errorf("--static-file: %w", err)
		}
		metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_static_load_failures_total",
			Help: "Loads of --static-file that failed and left the previous state in place.",
		}, func() float64 { return float64(src.Failures()) }))
	}
	svcCfg, err := startServiceConfig(ctx, cfg.ServiceConfig, st, token, auditLog, func(service string) []string {
		v, _ := xdsSrv.RegionView(service)
		return v.Present
	}, metrics, log.With("component", "svcconfig"))
	if err != nil {
		return err
	}
	svcCfg.authz = policy
	svcStore.Store(svcCfg.store)
	wg.Go(func() { watchRegionRules(ctx, svcCfg.store, regionRules, xdsSrv.Dispatch) })
	wg.Go(func() {
		regionRules.Run(ctx, func(services []string) { xdsSrv.Dispatch(services, time.Now()) })
	})
	kube, err := startKubernetes(ctx, cfg.Kubernetes, store, metrics, log.With("component", "kubernetes"), &wg, fail)
	if err != nil {
		return err
	}
	store.MarkSynced()

	// Admission's interceptors come first, so a call the others refuse
	// still ends its connection's setup.
	grpcOpts := append(cfg.GRPC.serverOptions(), grpc.ChainUnaryInterceptor(grpcLis.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(grpcLis.StreamServerInterceptor()))
	grpcOpts = append(grpcOpts, auth.grpcOptions()...)
	grpcSrv := grpc.NewServer(srvTLS.grpcOptions(grpcOpts)...)
	api.RegisterGRPC(grpcSrv)
	xdsSrv.Register(grpcSrv)
	if meshW != nil {
		meshW.register(grpcSrv)
	}
	adminAPI.RegisterGRPC(grpcSrv)
	migrationAPI.RegisterGRPC(grpcSrv)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !store.Synced() {
			http.Error(w, "not ready: registry sources have not delivered their initial state", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: %d services, %d endpoints, version %d\n", store.Snapshot().Len(), store.Snapshot().EndpointCount(), store.Snapshot().Version())
		if rep != nil { // an unreachable store is detail too: the registry in memory is served
			fmt.Fprintln(w, rep.Status())
		}
		if kube != nil { // a stale cluster is detail, not unreadiness: its last state is served
			for _, st := range kube.Status() {
				fmt.Fprintln(w, st)
			}
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics}))
	mux.Handle("/v1/", api.Handler())
	for _, p := range admin.Paths { // /v1/load, /v1/graph, /v1/weights, /v1/summary: more specific than "/v1/"
		mux.Handle(p, adminAPI.Handler())
	}
	mux.Handle(ui.Prefix, ui.Handler()) // the web page, and / sends a browser there
	mux.Handle("GET /{$}", ui.Redirect())
	mux.Handle(audit.Path, auditLog.Handler(policy))
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index) // and the named profiles under it
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	svcCfg.mount(mux)                      // /v1/config, /v1/config/{service}
	rules.mount(mux)                       // /v1/routes, /v1/routes/{service}
	for _, p := range migrationapi.Paths { // /v1/panic, /v1/rollout, /v1/rollout/validate
		mux.Handle(p, migrationAPI.Handler())
	}
	if cfg.hooks.mount != nil {
		cfg.hooks.mount(mux) // spillway demo: /v1/demo/events
	}
	httpSrv := &http.Server{Handler: audit.HTTPPeer(auth.Middleware(mux)), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveHTTP := func() error { return httpSrv.Serve(httpLis) }
	if srvTLS != nil {
		httpSrv.TLSConfig = srvTLS.http
		serveHTTP = func() error { return httpSrv.ServeTLS(httpLis, "", "") }
		wg.Go(func() { srvTLS.reloader.Run(ctx) })
	} else {
		warnPlaintext(log, "grpc", grpcLis.Addr())
		warnPlaintext(log, "http", httpLis.Addr())
	}

	wg.Go(func() { auditLog.Run(ctx) })
	wg.Go(func() { auth.tokens.Run(ctx) })
	wg.Go(func() { policy.Run(ctx) })
	wg.Go(func() { fail("lease expiry", leases.Run(ctx)) })
	if rep != nil {
		wg.Go(func() { fail("replication", rep.Run(ctx)) })
	}
	wg.Go(func() { fail("xds pushes", xdsSrv.Run(ctx)) })
	if planner != nil {
		wg.Go(func() { planner.Run(ctx) })
	}
	if meshW != nil {
		meshW.run(ctx, &wg, fail)
	}
	svcCfg.run(ctx, &wg, fail)
	rules.run(ctx, &wg, fail)
	if src != nil {
		wg.Go(func() { fail("static source", src.Run(ctx)) })
	}
	wg.Go(func() { fail("grpc server", grpcSrv.Serve(grpcLis)) })
	wg.Go(func() { fail("http server", serveHTTP()) })
	log.Info("spillway serving",
		"dns", dnsUDP.LocalAddr().String(), "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"tls", srvTLS != nil, "data_dir", cfg.DataDir, "domain", cfg.Domain,
		"services", store.Snapshot().Len(), "endpoints", store.Snapshot().EndpointCount())
	if cfg.hooks.serving != nil {
		cfg.hooks.serving(dnsUDP.LocalAddr().String(), grpcLis.Addr().String(), httpLis.Addr().String())
	}

	<-ctx.Done()
	cause := context.Cause(ctx)
	if errors.Is(cause, context.Canceled) {
		cause = nil
		log.Info("shutting down", "grace", cfg.ShutdownGrace)
	} else {
		log.Error("shutting down after a failure", "err", cause)
	}
	shutdown(cfg.ShutdownGrace, grpcSrv, httpSrv)
	wg.Wait()
	return cause
}

// newAuditLog keeps the audit entries in the shared store (etcd,
// Spanner) or the bbolt file, in memory in memory-only mode.
func newAuditLog(st storage, repl *replication, reg prometheus.Registerer, log *slog.Logger) (*audit.Log, error) {
	c := audit.Config{Logger: log, Registerer: reg}
	if ds, ok := st.(*systemstore.Store); ok {
		c.KV = ds.KV()
	}
	if repl != nil {
		c.Replica = repl.id()
	}
	return audit.New(c)
}

// adminToken reads --admin-token-file; "" when none is configured, which
// leaves the panic flag and the rollout config read-only.
func adminToken(cfg Config, log *slog.Logger) (string, error) {
	if cfg.AdminTokenFile == "" {
		log.Warn("no --admin-token-file: the panic flag and the rollout config cannot be changed")
		return "", nil
	}
	token, err := migrationapi.ReadTokenFile(cfg.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file (admin_token_file): %w", err)
	}
	return token, nil
}

// planWeights gives the resolver the zone-aware splits xDS pushes, so
// that DNS clients of a zone are sent where xDS clients of that zone are.
type planWeights struct {
	plans interface {
		Plan(service string) *weights.Plan
	}
}

var _ resolver.Weights = planWeights{}

// ZoneWeights implements resolver.Weights with the route xDS pushes to
// clientZone (the zoneless route for a zone the plan does not know). It
// allocates nothing when dst has room.
func (p planWeights) ZoneWeights(dst []resolver.ZoneWeight, service, clientZone string) ([]resolver.ZoneWeight, bool) {
	plan := p.plans.Plan(service)
	if plan == nil || plan.Result == nil || plan.LocalityFromEndpoints {
		// PID alone: no zone split, the endpoint weights decide.
		return dst, false
	}
	rt := plan.Result.Route(clientZone)
	if rt == nil || len(rt.Weights) == 0 {
		return dst, false
	}
	for _, w := range rt.Weights {
		dst = append(dst, resolver.ZoneWeight{Zone: w.Zone, Weight: w.Weight})
	}
	return dst, true
}

var _ resolver.EndpointWeights = planWeights{}

// EndpointGen implements resolver.EndpointWeights: the plan's Gen when it
// has endpoint weights, else 0.
func (p planWeights) EndpointGen(service string) uint64 {
	plan := p.plans.Plan(service)
	if plan == nil || plan.Endpoints == nil {
		return 0
	}
	return max(plan.Gen, 1)
}

// EndpointWeight implements resolver.EndpointWeights with the plan's
// per-endpoint (PID) weights.
func (p planWeights) EndpointWeight(service, id string) (uint32, bool) {
	plan := p.plans.Plan(service)
	if plan == nil {
		return 0, false
	}
	w, ok := plan.Endpoints[id]
	return max(w.Weight, 1), ok
}

// nsAddr is the address published for ns.<domain>: the DNS listen IP,
// unless it is a wildcard.
func nsAddr(dnsAddr string) netip.Addr {
	ap, err := netip.ParseAddrPort(dnsAddr)
	if err != nil || ap.Addr().IsUnspecified() {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// shutdown drains both servers, cutting them off after grace.
func shutdown(grace time.Duration, g *grpc.Server, h *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	if err := h.Shutdown(ctx); err != nil {
		h.Close()
	}
	select {
	case <-done:
	case <-ctx.Done():
		g.Stop()
		<-done
	}
}

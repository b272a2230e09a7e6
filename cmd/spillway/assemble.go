package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spillway/spillway/admin"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/migration/migrationapi"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/registryapi"
	"github.com/spillway/spillway/registry/static"
	"github.com/spillway/spillway/registry/systemstore/etcdstore"
	"github.com/spillway/spillway/replica/clusterversion"
	"github.com/spillway/spillway/replica/registrysync"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authz"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
)

// storage is what the server needs of durable registrations.
type storage interface {
	lease.Storage
	migration.Storage
	Close() error
}

// server is one spillway process, assembled. assemble builds its parts in
// the order data flows through them, each from the parts it reads:
//
//	registry store, metrics            (core)
//	TLS, system store, its cluster
//	version, audit, authn/z            (security)
//	migration, replica sync, leases,
//	utilization, registry API          (registration)
//	routes, load table, xds, per-service
//	config, planner, mesh, DNS         (serving)
//	migration API, Admin API           (apis)
//	listeners                          (listen)
//
// serve (serve.go) then loads every source's initial state and runs them.
type server struct {
	cfg     Config
	log     *slog.Logger
	store   *registry.Store
	metrics *prometheus.Registry
	unary   unaryInFlight // for the drain (drain.go)

	tls      *serverTLS // nil: plaintext
	token    string     // --admin-token-file's; "" when none
	sys      *systemStore
	versions *clusterversion.Versions
	audit    *audit.Log
	auth     authentication
	policy   *authz.Reloader

	migration    *migration.Controller
	rep          *registrysync.Replica // nil on bbolt or in memory
	leases       *lease.Manager
	utilizations *load.UtilizationTable
	registryAPI  *registryapi.API
	static       *static.Source // nil without --static-file

	routes      *routes
	regionRules *regions.Table
	loads       *load.Table
	plans       *weights.Served
	xds         *xds.Server
	svcCfg      *serviceConfig
	planner     *weights.Planner // nil: zone-aware weights off
	mesh        *meshWeights     // nil: no mesh-wide load
	dns         *resolver.Server

	migrationAPI *migrationapi.API
	admin        *admin.API

	lis *listeners
}

// assemble builds every part of the server from cfg; nothing runs yet.
// On error, what was opened is closed.
func assemble(ctx context.Context, cfg Config, log *slog.Logger) (_ *server, err error) {
	s := &server{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	for _, stage := range []func(context.Context) error{s.core, s.security, s.registration, s.serving, s.apis, s.listen} {
		if err := stage(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// close releases what assemble opened: the listeners and the system
// store.
func (s *server) close() {
	if s.lis != nil {
		s.lis.close()
	}
	if s.sys != nil {
		s.sys.Close()
	}
}

// component returns the logger of one part.
func (s *server) component(name string) *slog.Logger { return s.log.With("component", name) }

// core builds the registry store, which checks names against the domain
// DNS serves them under, and the metrics registry.
func (s *server) core(context.Context) error {
	store, err := registry.NewStoreWith(registry.StoreConfig{Domain: s.cfg.Domain})
	if err != nil {
		return fmt.Errorf("--domain (domain): %w", err)
	}
	store.SetLogger(s.component("registry"))
	s.store = store
	s.metrics = prometheus.NewRegistry()
	s.metrics.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		registry.NewCollector(store),
	)
	return nil
}

// security loads the certificates and the admin token, opens the system
// store and checks its cluster version (a store finalised past this
// binary's refuses the start), and builds the audit log (kept in the
// store) and who-may-do-what.
func (s *server) security(ctx context.Context) (err error) {
	if s.tls, err = startTLS(s.cfg.TLS, s.metrics, s.component("tls")); err != nil {
		return err
	}
	if s.token, err = adminToken(s.cfg, s.log); err != nil {
		return err
	}
	if s.sys, err = openStorage(ctx, s.cfg.Store, s.cfg.DataDir, s.component("store")); err != nil {
		return err
	}
	if s.versions, err = openClusterVersion(ctx, s.sys, replicaID(s.cfg.Store.Replica), s.metrics, s.component("cluster-version")); err != nil {
		return err
	}
	// Every admin change and every denial, in the log and the store (in
	// memory in memory-only mode).
	ac := audit.Config{KV: s.sys.kv, Logger: s.component("audit"), Registerer: s.metrics}
	if s.sys.shared {
		ac.Replica = replicaID(s.cfg.Store.Replica)
	}
	if s.audit, err = audit.New(ac); err != nil {
		return err
	}
	// Who is calling (certificate or token) and what they may do.
	if s.auth, s.policy, err = startSecurity(s.cfg, s.token, s.audit, s.metrics, s.log); err != nil {
		return err
	}
	warnOpenPolicy(s.cfg, s.sys.shared, s.component("authz"))
	return nil
}

// warnOpenPolicy says, loudly, what the default policy leaves open when
// replicas share a store and no --authz-file is given: a fleet's traffic
// then follows whatever any caller that reaches the gRPC port registers
// or reports (docs/security.md, "The default start").
func warnOpenPolicy(cfg Config, shared bool, log *slog.Logger) {
	if !shared || cfg.AuthzFile != "" {
		return
	}
	log.Warn("no --authz-file on a shared store: every caller that reaches --grpc-addr or --http-addr may register, heartbeat, deregister and report any service's endpoints, read the registry and load, connect over xDS, and send mesh load summaries that steer every replica's zone-aware weights; give a policy file (docs/security.md, \"The default start\"; deploy/kubernetes-tls/policy.yaml)",
		"store", cfg.Store.URL, "tls", cfg.TLS.on())
}

// registration builds what takes registrations: the migration controller
// (the panic flag and rollout the store also holds), the replica sync on a
// shared store (the leases' expiry decider), the leases, the backends'
// utilization table and the registry API.
func (s *server) registration(context.Context) (err error) {
	cfg := s.cfg
	s.migration, err = migration.NewController(migration.ControllerConfig{Store: s.store, Storage: s.sys, Logger: s.component("migration"), Registerer: s.metrics, Audit: s.audit})
	if err != nil {
		return err
	}
	if s.rep, err = newReplica(cfg.Store, s.sys, s.migration, cfg.Leases.MaxTTL, s.metrics, s.component("replica")); err != nil {
		return err
	}
	lc := lease.Config{
		Store: s.store, Storage: s.sys,
		DefaultTTL: cfg.Leases.DefaultTTL, MinTTL: cfg.Leases.MinTTL, MaxTTL: cfg.Leases.MaxTTL, Tick: cfg.Leases.Tick,
		GuardShare: cfg.Leases.GuardShare, GuardMinCount: cfg.Leases.GuardMinCount,
		Logger: s.component("leases"), Registerer: s.metrics,
	}
	decideExpiry(&lc, s.rep)
	if s.leases, err = lease.New(lc); err != nil {
		return err
	}
	// Backends' utilization reports (ReportUtilization), kept for the
	// per-endpoint planner; bounded by the registry's endpoints.
	s.utilizations = load.NewUtilizationTable(s.store, s.metrics)
	s.registryAPI, err = registryapi.New(registryapi.Config{Store: s.store, Leases: s.leases, Utilization: s.utilizations, Authorizer: s.policy, Audit: s.audit, Logger: s.component("registryapi")})
	if err != nil {
		return err
	}
	if cfg.StaticFile != "" {
		if s.static, err = static.New(static.Config{Path: cfg.StaticFile, Store: s.store, Logger: s.component("static")}); err != nil {
			return fmt.Errorf("--static-file: %w", err)
		}
	}
	return nil
}

// serving builds what answers clients, in the order of the one feedback
// loop: the route rules and regional rules xds serves, the per-service
// config (its resilience policies go out over xDS), the load table, the
// xDS server (its streams are the planner's demand), the planner and mesh
// weights (whose plans s.plans then serves to xds and DNS), and the DNS
// server.
func (s *server) serving(ctx context.Context) (err error) {
	cfg := s.cfg
	if s.routes, err = startRoutes(ctx, s.sys, s.store, s.policy, s.audit, s.metrics, s.component("routes")); err != nil {
		return err
	}
	// Regional redirects and exclusions (svcconfig's redirects and
	// exclude), fed from the per-service config by watchRegionRules.
	s.regionRules = regions.NewTable()
	// The config's warnings read xds's region view, only for a PUT,
	// once serving: s.xds is set by then.
	regionsOf := func(service string) []string {
		v, _ := s.xds.RegionView(service)
		return v.Present
	}
	s.svcCfg, err = startServiceConfig(ctx, cfg.ServiceConfig, s.sys, s.token, s.policy, s.audit, regionsOf, s.metrics, s.component("svcconfig"))
	if err != nil {
		return err
	}
	s.loads = load.NewTable(xds.LoadIdle)
	s.plans = &weights.Served{}
	s.xds, err = xds.New(xds.Config{
		RegionPreference: cfg.RegionPreference, RegionRules: s.regionRules, Store: s.store, Replica: replicaID(cfg.Store.Replica),
		PortName: cfg.XDS.PortName, Debounce: cfg.XDS.Debounce, MaxDelay: cfg.XDS.MaxDelay, Resync: cfg.XDS.Resync,
		LRSInterval: cfg.XDS.LRSInterval, Loads: s.loads, Plans: s.plans, MaxZones: cfg.XDS.MaxZones,
		OmitHostnames: cfg.XDS.EndpointHostname == "none",
		Authorizer:    s.policy, Routes: s.routes.store, Policies: s.svcCfg.store, Logger: s.component("xds"), Registerer: s.metrics,
	})
	if err != nil {
		return fmt.Errorf("xds config: %w", err)
	}
	if cfg.XDS.ZoneAware {
		if err := s.weights(); err != nil {
			return err
		}
	}
	return s.resolver()
}

// weights builds the zone-aware planner over the load table and the xDS
// server's streams and, on a shared store with --mesh-load, the mesh that
// serves each service's owner's plan; s.plans serves the one chosen.
func (s *server) weights() (err error) {
	cfg := s.cfg
	probe := cfg.XDS.ProbeShare
	za := zoneaware.Config{ProbeShare: &probe, ReportInterval: cfg.XDS.LRSInterval, SlowStartRamp: cfg.hooks.slowStartRamp}
	mesh := s.rep != nil && cfg.Store.Replica.Mesh.Load
	var onChange func([]string, time.Time)
	if !mesh {
		onChange = s.xds.Dispatch // with a mesh, the selector decides what is pushed
	}
	s.planner, err = weights.NewPlanner(weights.Config{
		Registry: s.store, Loads: s.loads, Clients: s.xds, Zones: s.xds,
		PortName: cfg.XDS.PortName, ZoneAware: za, Interval: cfg.XDS.WeightsInterval, OnChange: onChange,
		// Per-service strategy (zone-aware, pid, ...) and the backends'
		// utilization reports for PID endpoint weights.
		Strategies: strategies(s.svcCfg.store, za), Utilization: utilizationsOf(s.utilizations.Utilizations),
		Logger: s.component("weights"), Registerer: s.metrics,
	})
	if err != nil {
		return fmt.Errorf("xds config: %w", err)
	}
	if !mesh {
		s.plans.Serve(s.planner)
		return nil
	}
	rep := s.rep
	s.mesh, err = newMeshWeights(meshInputs{
		cfg: cfg.Store.Replica.Mesh, store: s.store, kv: s.sys.kv, storeName: s.sys.name, elect: s.sys.elect,
		id: replicaID(cfg.Store.Replica), grpcAddr: cfg.GRPCAddr,
		ttl: cmp.Or(cfg.Store.Replica.ElectionTTL, etcdstore.DefaultSessionTTL), zoneAware: za,
		portName: cfg.XDS.PortName, interval: cfg.XDS.WeightsInterval, report: cfg.XDS.LRSInterval,
		xds: s.xds, utilizations: s.utilizations, strategies: strategies(s.svcCfg.store, za), local: s.planner,
		storeUp: func() bool { return rep.Status().Up },
		metrics: s.metrics, log: s.log, peerCreds: s.tls.peerCreds(), identity: s.tls.peerIdentity(s.log), authz: s.policy,
		versions: s.versions, verifiesPeers: cfg.TLS.ClientCA != "",
	})
	if err != nil {
		return err
	}
	s.plans.Serve(s.mesh.sel)
	return nil
}

// resolver builds the DNS server over the registry and the served plans.
func (s *server) resolver() error {
	cfg := s.cfg
	zones, err := cfg.DNS.zones()
	if err != nil {
		return err
	}
	s.dns, err = resolver.New(resolver.Config{
		Store: s.store, Domain: cfg.Domain, UDPSizeCap: cfg.DNS.UDPSizeCap,
		TTL: resolver.TTLs{
			SRV: cfg.DNS.TTL.SRV, A: cfg.DNS.TTL.A, TXT: cfg.DNS.TTL.TXT,
			SOA: cfg.DNS.TTL.SOA, Negative: cfg.DNS.TTL.Negative,
		},
		NSAddr: nsAddr(cfg.DNSAddr), Zones: zones,
		RegionPreference: cfg.RegionPreference, RegionRules: s.regionRules, RRL: cfg.DNS.rrl(), Cookies: cfg.DNS.cookies(),
		TCPMaxConns: cfg.DNS.TCPMaxConns, TCPMaxQueries: cfg.DNS.TCPMaxQueries, TCPIdleTimeout: cfg.DNS.TCPIdleTimeout,
		Weights: planWeights{s.plans}, Logger: s.component("dns"), Registerer: s.metrics,
	})
	if err != nil {
		return fmt.Errorf("dns config: %w", err)
	}
	return nil
}

// apis builds the migration API (its dry run lists the xDS clients) and
// the Admin API (load, graph, weights, summary).
func (s *server) apis(context.Context) (err error) {
	s.migrationAPI, err = migrationapi.New(migrationapi.Config{
		Panic: s.migration, Rollout: s.migration, Clients: s.xds, Registry: s.store, Token: s.token, Authorizer: s.policy,
		NoTokenHint: s.cfg.AuthzFile == "", Logger: s.component("migrationapi"), Registerer: s.metrics,
	})
	if err != nil {
		return err
	}
	var meshLoad admin.MeshLoad
	if s.mesh != nil {
		meshLoad = admin.JoinMesh(s.mesh.owners, s.mesh.merged)
	}
	s.admin, err = admin.New(admin.Config{
		Mesh: meshLoad, Loads: s.loads, Subscriptions: s.xds, Regions: s.xds, Routes: s.routes.store, Registry: s.store,
		Plans: s.plans, Authorizer: s.policy, Logger: s.component("admin"),
		Slots: s.xds, Replica: replicaID(s.cfg.Store.Replica),
	})
	if err != nil {
		return fmt.Errorf("admin config: %w", err)
	}
	return nil
}

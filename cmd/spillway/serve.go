package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/spillway/spillway/admin"
	"github.com/spillway/spillway/admin/ui"
	"github.com/spillway/spillway/internal/admit"
	"github.com/spillway/spillway/internal/serverinfo"
	"github.com/spillway/spillway/migration/migrationapi"
	kubesource "github.com/spillway/spillway/registry/kubernetes"
	"github.com/spillway/spillway/replica/clusterversion"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/webguard"
)

// listeners are the server's sockets, bound before anything runs so that
// a taken port fails the start before any work.
type listeners struct {
	dnsUDP net.PacketConn
	dnsTCP net.Listener
	grpc   *admit.Listener
	http   net.Listener
}

// listen binds --dns-addr (UDP and TCP), --grpc-addr behind admission
// control, and --http-addr.
func (s *server) listen(context.Context) (err error) {
	l := &listeners{}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.dnsUDP, err = net.ListenPacket("udp", s.cfg.DNSAddr); err != nil {
		return fmt.Errorf("--dns-addr (udp): %w", err)
	}
	if l.dnsTCP, err = net.Listen("tcp", s.cfg.DNSAddr); err != nil {
		return fmt.Errorf("--dns-addr (tcp): %w", err)
	}
	grpcTCP, err := net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	if l.grpc, err = s.cfg.GRPC.admission(grpcTCP); err != nil {
		grpcTCP.Close()
		return err
	}
	if err = l.grpc.Register(s.metrics); err != nil {
		return err
	}
	if l.http, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	s.lis = l
	return nil
}

// close closes every socket that was bound.
func (l *listeners) close() {
	for _, c := range []interface{ Close() error }{l.dnsUDP, l.dnsTCP, l.grpc, l.http} {
		if c != nil && c != (*admit.Listener)(nil) {
			c.Close()
		}
	}
}

// restore loads every source's initial state, before anything is served
// as final: the panic flag (in the store before DNS answers TXT _xds),
// the registrations (from the bbolt file, or every replica's from the
// shared store), the static file, the regional rules and the Kubernetes
// clusters; then the registry is marked synced. It returns the Kubernetes source, nil when
// none is configured.
func (s *server) restore(ctx context.Context, wg *sync.WaitGroup, fail func(string, error)) (*kubesource.Source, error) {
	if err := s.migration.Restore(ctx); err != nil {
		return nil, err
	}
	if s.rep == nil {
		if _, err := s.leases.Restore(ctx); err != nil {
			return nil, err
		}
	} else if err := s.rep.Init(ctx, s.leases); err != nil {
		return nil, err
	}
	if s.static != nil {
		if err := s.static.Load(); err != nil {
			return nil, fmt.Errorf("--static-file: %w", err)
		}
		src := s.static
		s.metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_static_load_failures_total",
			Help: "Loads of --static-file that failed and left the previous state in place.",
		}, func() float64 { return float64(src.Failures()) }))
	}
	// Regional rules from the per-service config, in force before the
	// registry is synced.
	wg.Go(func() { watchRegionRules(ctx, s.svcCfg.store, s.regionRules, s.xds.Dispatch) })
	wg.Go(func() {
		s.regionRules.Run(ctx, func(services []string) { s.xds.Dispatch(services, time.Now()) })
	})
	kube, err := startKubernetes(ctx, s.cfg.Kubernetes, s.store, s.metrics, s.component("kubernetes"), wg, fail)
	if err != nil {
		return nil, err
	}
	s.store.MarkSynced()
	return kube, nil
}

// grpcServer registers every gRPC API. Admission's interceptors come
// first, so a call the others refuse still ends its connection's setup.
func (s *server) grpcServer() *grpc.Server {
	opts := append(s.cfg.GRPC.serverOptions(), grpc.ChainUnaryInterceptor(s.unary.interceptor(), s.lis.grpc.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(s.lis.grpc.StreamServerInterceptor()))
	opts = append(opts, s.auth.grpcOptions()...)
	opts = append(opts, s.cfg.GRPC.identityStreamLimit(s.metrics, s.component("grpc"))) // after auth: counts by its identity
	g := grpc.NewServer(s.tls.grpcOptions(opts)...)
	s.registryAPI.RegisterGRPC(g)
	s.xds.Register(g)
	if s.mesh != nil {
		s.mesh.register(g)
	}
	s.admin.RegisterGRPC(g)
	s.migrationAPI.RegisterGRPC(g)
	// Where the HTTP API is, so that spillwayctl needs one address.
	serverinfo.Register(g, serverinfo.Info{HTTPAddr: s.lis.http.Addr().String(), TLS: s.tls != nil})
	return g
}

// httpServer serves health, readiness, metrics, every HTTP API and the
// web page, behind authentication.
func (s *server) httpServer(kube *kubesource.Source) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { s.ready(w, kube) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{Registry: s.metrics}))
	mux.Handle("/v1/", s.registryAPI.Handler())
	for _, p := range admin.Paths { // /v1/load, /v1/graph, /v1/weights, /v1/summary: more specific than "/v1/"
		mux.Handle(p, s.admin.Handler())
	}
	mux.Handle(ui.Prefix, ui.Handler()) // the web page, and / sends a browser there
	mux.Handle("GET /{$}", ui.Redirect())
	mux.Handle(audit.Path, s.audit.Handler(s.policy))
	if s.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index) // and the named profiles under it
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle(clusterversion.Path, s.versions.Handler(clusterversion.HandlerConfig{ // hold and release
		Members: s.clusterMembers(), Authorizer: s.policy, Audit: s.audit,
	}))
	s.svcCfg.mount(mux)                         // /v1/config, /v1/config/{service}
	s.routes.mount(mux, routeClients{x: s.xds}) // /v1/routes, /v1/routes/{service}
	for _, p := range migrationapi.Paths {      // /v1/panic, /v1/rollout, /v1/rollout/validate
		mux.Handle(p, s.migrationAPI.Handler())
	}
	if s.cfg.hooks.mount != nil {
		s.cfg.hooks.mount(mux) // spillway demo: /v1/demo/events
	}
	guard := webguard.Config{Hosts: s.cfg.HTTPHosts, TLS: s.tls != nil, Registerer: s.metrics} // Host, Origin, Content-Type, nosniff
	h := &http.Server{Handler: webguard.Handler(guard, audit.HTTPPeer(s.auth.Middleware(mux))), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	if s.tls != nil {
		h.TLSConfig = s.tls.http
	}
	return h
}

// ready answers /readyz: 503 until the registry's sources have delivered
// their initial state; then the counts, and the store's and each
// cluster's status as detail (an unreachable store or a stale cluster is
// served from memory, not unready).
func (s *server) ready(w http.ResponseWriter, kube *kubesource.Source) {
	if !s.store.Synced() {
		http.Error(w, "not ready: registry sources have not delivered their initial state", http.StatusServiceUnavailable)
		return
	}
	snap := s.store.Snapshot()
	fmt.Fprintf(w, "ok: %d services, %d endpoints, version %d\n", snap.Len(), snap.EndpointCount(), snap.Version())
	if s.rep != nil {
		fmt.Fprintln(w, s.rep.Status())
		fmt.Fprintln(w, s.versions.Status())
	}
	if kube != nil {
		for _, st := range kube.Status() {
			fmt.Fprintln(w, st)
		}
	}
}

// runAll starts every part's loop on wg; fail ends the server with the
// first part that fails.
func (s *server) runAll(ctx context.Context, wg *sync.WaitGroup, fail func(string, error)) {
	wg.Go(func() { s.audit.Run(ctx) })
	wg.Go(func() { s.auth.tokens.Run(ctx) })
	wg.Go(func() { s.policy.Run(ctx) })
	wg.Go(func() { fail("lease expiry", s.leases.Run(ctx)) })
	if s.rep != nil {
		wg.Go(func() { fail("replication", s.rep.Run(ctx)) })
	}
	wg.Go(func() { fail("cluster version", s.versions.Run(ctx, s.clusterMembers())) })
	wg.Go(func() { fail("xds pushes", s.xds.Run(ctx)) })
	if s.planner != nil {
		wg.Go(func() { s.planner.Run(ctx) })
	}
	if s.mesh != nil {
		s.mesh.run(ctx, wg, fail)
	}
	s.svcCfg.run(ctx, wg, fail)
	s.routes.run(ctx, wg, fail)
	if s.static != nil {
		wg.Go(func() { fail("static source", s.static.Run(ctx)) })
	}
	if s.tls != nil {
		wg.Go(func() { s.tls.reloader.Run(ctx) })
	}
}

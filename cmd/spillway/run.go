package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/spillway/spillway/migration/migrationapi"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/weights"
)

// run assembles the server (assemble.go), serves until ctx ends (the
// signal), then drains and returns. The components run on their own
// context, which a failure ends at once but the signal ends only after
// the listeners are drained (drain.go): what answers the last RPCs keeps
// running while they finish.
func run(ctx context.Context, cfg Config, log *slog.Logger) error {
	work, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	// A signal while starting stops the start.
	starting := context.AfterFunc(ctx, func() { cancel(nil) })
	defer starting()

	s, err := assemble(work, cfg, log)
	if err != nil {
		return err
	}
	defer s.close()

	var wg sync.WaitGroup
	fail := func(what string, err error) {
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && work.Err() == nil {
			cancel(fmt.Errorf("%s: %w", what, err))
		}
	}
	defer func() {
		cancel(nil) // an early return stops what already runs
		wg.Wait()
	}()
	// DNS answers from the start: SERVFAIL until the store is synced, never
	// a false NXDOMAIN while sources load.
	wg.Go(func() { fail("dns server", s.dns.Serve(work, s.lis.dnsUDP, s.lis.dnsTCP)) })
	kube, err := s.restore(work, &wg, fail)
	if err != nil {
		return err
	}

	grpcSrv, httpSrv := s.grpcServer(), s.httpServer(kube)
	serveHTTP := func() error { return httpSrv.Serve(s.lis.http) }
	if s.tls != nil {
		serveHTTP = func() error { return httpSrv.ServeTLS(s.lis.http, "", "") }
	} else {
		warnPlaintext(log, "grpc", s.lis.grpc.Addr())
		warnPlaintext(log, "http", s.lis.http.Addr())
	}
	s.runAll(work, &wg, fail)
	wg.Go(func() { fail("grpc server", grpcSrv.Serve(s.lis.grpc)) })
	wg.Go(func() { fail("http server", serveHTTP()) })
	dnsAddr, grpcAddr, httpAddr := s.lis.dnsUDP.LocalAddr().String(), s.lis.grpc.Addr().String(), s.lis.http.Addr().String()
	log.Info("spillway serving", "dns", dnsAddr, "grpc", grpcAddr, "http", httpAddr,
		"tls", s.tls != nil, "data_dir", cfg.DataDir, "domain", cfg.Domain,
		"services", s.store.Snapshot().Len(), "endpoints", s.store.Snapshot().EndpointCount())
	if cfg.hooks.serving != nil {
		cfg.hooks.serving(dnsAddr, grpcAddr, httpAddr)
	}

	// From here the signal drains before the components stop (unless it
	// came while starting, and stopped them already).
	starting()
	select {
	case <-ctx.Done():
	case <-work.Done():
	}
	cause := context.Cause(work)
	if cause == nil || errors.Is(cause, context.Canceled) {
		cause = nil
		log.Info("shutting down", "grace", cfg.ShutdownGrace)
	} else {
		log.Error("shutting down after a failure", "err", cause)
	}
	start := time.Now()
	s.drain(cfg.ShutdownGrace, grpcSrv, httpSrv)
	drained := time.Since(start)
	cancel(nil)
	wg.Wait()
	log.Info("stopped", "drain", drained.Round(time.Millisecond), "total", time.Since(start).Round(time.Millisecond))
	return cause
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
	plans weights.PlanSource
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

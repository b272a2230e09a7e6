// Command baseline is the baseline of the xDS fan-out benchmark
// (e2e/bench/xdsbench): the minimal ADS server a go-control-plane user would
// write for the same job as spillway's xds package.
//
// It holds the benchmark's data set (internal/benchdata: --services services
// of --endpoints endpoints over --zones zones) and serves it from a
// go-control-plane v0.14 SnapshotCache in non-ADS mode (ads=false), keyed by
// the client's node.locality.zone, through pkg/server/v3 registered as the
// AggregatedDiscoveryService on a plain grpc.Server. There is one snapshot
// per zone; each holds, for every service S, the Listener S (an api_listener
// whose HttpConnectionManager takes RouteConfiguration S over ADS, with the
// router filter), the RouteConfiguration S (one virtual host routing
// everything to cluster S), the Cluster S (EDS over ADS, round robin) and the
// ClusterLoadAssignment S with one LocalityLbEndpoints per zone: the client's
// own zone at priority 0 and the others at priority 1, each locality weighted
// by its endpoint count. Every snapshot carries one version for all types,
// bumped on every change, as NewSnapshot does.
//
// The driver makes changes over HTTP on loopback:
//
//	POST /change?op=add&service=svc-005&id=add-0&address=10.200.0.1&zone=zone-a
//	POST /change?op=remove&service=svc-042&address=10.1.42.1
//
// Each one edits the model, rebuilds the three snapshots and calls
// SetSnapshot for every zone before it answers 200 with the new version.
// GET /readyz answers 200 once the first snapshots are set. With --pprof,
// /debug/pprof/ is served too (the driver's --baseline-pprof uses it).
//
// Usage:
//
//	baseline --grpc-addr 127.0.0.1:18001 --http-addr 127.0.0.1:18081
//
// SIGTERM or SIGINT stops it at once (grpc.Server.Stop: open streams are cut).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	v3clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	v3httppb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillway/spillway/e2e/bench/xdsbench/internal/benchdata"
)

func main() {
	grpcAddr := flag.String("grpc-addr", "127.0.0.1:18001", "gRPC listen address (ADS)")
	httpAddr := flag.String("http-addr", "127.0.0.1:18081", "HTTP listen address (/change, /readyz)")
	services := flag.Int("services", 100, "number of services")
	endpoints := flag.Int("endpoints", 9, "endpoints per service")
	zones := flag.Int("zones", 3, "number of zones")
	withPprof := flag.Bool("pprof", false, "serve /debug/pprof/ on the HTTP address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*grpcAddr, *httpAddr, *services, *endpoints, *zones, *withPprof, log); err != nil {
		log.Error("baseline failed", "err", err)
		os.Exit(1)
	}
}

func run(grpcAddr, httpAddr string, services, endpoints, zones int, withPprof bool, log *slog.Logger) error {
	if err := benchdata.Validate(services, endpoints, zones); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	m := &model{
		cache:    cache.NewSnapshotCache(false, zoneHash{}, nil),
		zones:    benchdata.Zones(zones),
		services: benchdata.Services(services, endpoints, zones),
	}
	if err := m.publish(ctx); err != nil {
		return err
	}

	grpcLis, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	httpLis, err := net.Listen("tcp", httpAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("--http-addr: %w", err)
	}
	grpcSrv := grpc.NewServer()
	v3discoverygrpc.RegisterAggregatedDiscoveryServiceServer(grpcSrv,
		server.NewServer(ctx, m.cache, nil, sotw.DeactivateLegacyWildcard()))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("POST /change", m.serveChange)
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	}
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- grpcSrv.Serve(grpcLis) }()
	go func() { errc <- httpSrv.Serve(httpLis) }()
	log.Info("baseline serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"services", services, "endpoints", endpoints, "zones", zones)
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	grpcSrv.Stop()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	httpSrv.Shutdown(sctx)
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// zoneHash keys the snapshot cache by the client's zone: every client of a
// zone shares one snapshot.
type zoneHash struct{}

func (zoneHash) ID(node *v3corepb.Node) string { return node.GetLocality().GetZone() }

var _ cache.NodeHash = zoneHash{}

// model is the endpoint list and the snapshots built from it.
type model struct {
	cache cache.SnapshotCache
	zones []string // read-only after construction

	// mu serialises changes: it guards services and version, and orders
	// the SetSnapshot calls of successive changes.
	mu       sync.Mutex
	services []benchdata.Service
	version  int
}

// serveChange applies one change and publishes it.
func (m *model) serveChange(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	addr, err := netip.ParseAddr(q.Get("address"))
	if err != nil {
		http.Error(w, "address: "+err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.services, func(s benchdata.Service) bool { return s.Name == q.Get("service") })
	if i < 0 {
		http.Error(w, fmt.Sprintf("service: %q unknown", q.Get("service")), http.StatusBadRequest)
		return
	}
	eps := slices.Clone(m.services[i].Endpoints)
	switch q.Get("op") {
	case "add":
		if !slices.Contains(m.zones, q.Get("zone")) {
			http.Error(w, fmt.Sprintf("zone: %q unknown", q.Get("zone")), http.StatusBadRequest)
			return
		}
		eps = append(eps, benchdata.Endpoint{ID: q.Get("id"), Address: addr, Zone: q.Get("zone")})
	case "remove":
		n := len(eps)
		eps = slices.DeleteFunc(eps, func(e benchdata.Endpoint) bool { return e.Address == addr })
		if len(eps) == n {
			http.Error(w, fmt.Sprintf("address: %s is not an endpoint of %s", addr, m.services[i].Name), http.StatusBadRequest)
			return
		}
	default:
		http.Error(w, fmt.Sprintf("op: %q, want add or remove", q.Get("op")), http.StatusBadRequest)
		return
	}
	m.services[i].Endpoints = eps
	if err := m.publish(r.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "version %d\n", m.version)
}

// publish builds a snapshot per zone at a new version and sets it. The
// caller holds mu, or is the constructor.
//
// It does not call Snapshot.Consistent: in go-control-plane v0.14 that
// follows RDS names only in a Listener's filter chains, not in an
// api_listener, so it rejects every snapshot for proxyless gRPC ("mismatched
// RouteConfiguration reference and resource lengths").
func (m *model) publish(ctx context.Context) error {
	m.version++
	v := strconv.Itoa(m.version)
	for _, zone := range m.zones {
		snap, err := cache.NewSnapshot(v, m.resources(zone))
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", zone, err)
		}
		if err := m.cache.SetSnapshot(ctx, zone, snap); err != nil {
			return fmt.Errorf("set snapshot %s: %w", zone, err)
		}
	}
	return nil
}

// resources builds every resource the clients of zone see.
func (m *model) resources(zone string) map[resource.Type][]types.Resource {
	out := map[resource.Type][]types.Resource{}
	for _, s := range m.services {
		out[resource.ListenerType] = append(out[resource.ListenerType], listener(s.Name))
		out[resource.RouteType] = append(out[resource.RouteType], route(s.Name))
		out[resource.ClusterType] = append(out[resource.ClusterType], cluster(s.Name))
		out[resource.EndpointType] = append(out[resource.EndpointType], m.assignment(s, zone))
	}
	return out
}

func adsSource() *v3corepb.ConfigSource {
	return &v3corepb.ConfigSource{
		ConfigSourceSpecifier: &v3corepb.ConfigSource_Ads{Ads: &v3corepb.AggregatedConfigSource{}},
		ResourceApiVersion:    v3corepb.ApiVersion_V3,
	}
}

func listener(name string) *v3listenerpb.Listener {
	router, _ := anypb.New(&v3routerpb.Router{})
	hcm, _ := anypb.New(&v3httppb.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &v3httppb.HttpConnectionManager_Rds{Rds: &v3httppb.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: name,
		}},
		HttpFilters: []*v3httppb.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &v3httppb.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	return &v3listenerpb.Listener{Name: name, ApiListener: &v3listenerpb.ApiListener{ApiListener: hcm}}
}

func route(name string) *v3routepb.RouteConfiguration {
	return &v3routepb.RouteConfiguration{
		Name: name,
		VirtualHosts: []*v3routepb.VirtualHost{{
			Name:    name,
			Domains: []string{"*"},
			Routes: []*v3routepb.Route{{
				Match: &v3routepb.RouteMatch{PathSpecifier: &v3routepb.RouteMatch_Prefix{Prefix: ""}},
				Action: &v3routepb.Route_Route{Route: &v3routepb.RouteAction{
					ClusterSpecifier: &v3routepb.RouteAction_Cluster{Cluster: name},
				}},
			}},
		}},
	}
}

func cluster(name string) *v3clusterpb.Cluster {
	return &v3clusterpb.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &v3clusterpb.Cluster_Type{Type: v3clusterpb.Cluster_EDS},
		EdsClusterConfig:     &v3clusterpb.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
		LbPolicy:             v3clusterpb.Cluster_ROUND_ROBIN,
	}
}

// assignment is service s as the clients of zone see it: their own zone at
// priority 0, the others at priority 1 (all at 0 if their zone has none).
func (m *model) assignment(s benchdata.Service, zone string) *v3endpointpb.ClusterLoadAssignment {
	cla := &v3endpointpb.ClusterLoadAssignment{ClusterName: s.Name}
	// Priorities must be contiguous from 0: without a local endpoint,
	// every zone is priority 0.
	hasLocal := slices.ContainsFunc(s.Endpoints, func(e benchdata.Endpoint) bool { return e.Zone == zone })
	for _, z := range m.zones {
		var lbs []*v3endpointpb.LbEndpoint
		for _, e := range s.Endpoints {
			if e.Zone != z {
				continue
			}
			lbs = append(lbs, &v3endpointpb.LbEndpoint{
				HostIdentifier: &v3endpointpb.LbEndpoint_Endpoint{Endpoint: &v3endpointpb.Endpoint{
					Address: &v3corepb.Address{Address: &v3corepb.Address_SocketAddress{SocketAddress: &v3corepb.SocketAddress{
						Address:       e.Address.String(),
						PortSpecifier: &v3corepb.SocketAddress_PortValue{PortValue: benchdata.Port},
					}}},
				}},
				HealthStatus:        v3corepb.HealthStatus_HEALTHY,
				LoadBalancingWeight: wrapperspb.UInt32(1),
			})
		}
		if len(lbs) == 0 {
			continue // a locality of weight 0 would be dropped anyway
		}
		var priority uint32
		if hasLocal && z != zone {
			priority = 1
		}
		cla.Endpoints = append(cla.Endpoints, &v3endpointpb.LocalityLbEndpoints{
			Locality:            &v3corepb.Locality{Region: benchdata.Region, Zone: z},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(uint32(len(lbs))),
			Priority:            priority,
		})
	}
	return cla
}

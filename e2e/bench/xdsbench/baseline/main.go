// Command baseline is the baseline of the xDS fan-out benchmark
// (e2e/bench/xdsbench): the ADS server a go-control-plane user would write
// for the same job as spillway's xds package, set up as go-control-plane's
// own example and docs set one up.
//
// It holds the benchmark's data set (internal/benchdata: --services services
// of --endpoints endpoints over --zones zones) and serves it from a
// go-control-plane v0.14 SnapshotCache keyed by the client's
// node.locality.zone (the clients of a zone see the same endpoints, so a
// zone is one distinct content and one snapshot), in non-ADS mode
// (ads=false, as go-control-plane's example main and docs/cache.md create
// it): in ADS mode the cache answers a request only if it names every
// resource of the snapshot's type, and a grpc-go stream names one service
// (one stream per target, every stream of a process with the same node), so
// ads=true would need a snapshot per zone and service that no NodeHash can
// pick. The cache is served through
// server.NewServer with its default options, registered as the
// AggregatedDiscoveryService on a grpc.Server with the options of
// go-control-plane's example server (MaxConcurrentStreams 1,000,000,
// keepalive Time 30 s, Timeout 5 s, enforcement MinTime 30 s with
// PermitWithoutStream).
//
// Each zone's snapshot holds, for every service S, the Listener S (an
// api_listener whose HttpConnectionManager takes RouteConfiguration S over
// ADS, with the router filter), the RouteConfiguration S (one virtual host
// routing everything to cluster S), the Cluster S (EDS over ADS, round
// robin) and the ClusterLoadAssignment S with one LocalityLbEndpoints per
// zone: the client's own zone at priority 0 and the others at priority 1,
// each locality weighted by its endpoint count.
//
// Every resource type has its own version (each Snapshot.Resources[type]
// is built with cache.NewResources(version, items), not cache.NewSnapshot,
// which gives all types one version): Listener, RouteConfiguration and
// Cluster stay at version 1 for the whole run, and an endpoint change bumps
// only the ClusterLoadAssignment version, so the cache answers only the
// EDS watches. Only the changed service's assignments are rebuilt; the
// other resources are reused.
//
// With --cache linear it serves the same resources from go-control-plane
// LinearCaches instead, as its users do when resources change one at a
// time: one per resource type (NewLinearCache(typeURL,
// WithInitialResources(...))) and, since an assignment depends on the
// client's zone, one EDS cache per zone, under a MuxCache that picks the
// cache by type and, for EDS, node.locality.zone. A change then calls
// UpdateResource on each zone's EDS cache, which answers only the watches
// of that resource, where the SnapshotCache answers every EDS watch of
// the zone. With --data FILE the data set is read from an
// internal/benchdata data file instead of built from the three numbers.
//
// With --same-content the assignments carry what spillway's xds package
// sends for the same data, byte for byte for a service with clients in
// every zone (TestSameContentEqualsSpillway): each endpoint's hostname is
// its id, its load_balancing_weight 100 (the registry's default weight)
// instead of 1, its endpoints in id order; every locality is at priority 0,
// in zone order, weighted as spillway's zone-aware planner weighs a
// service whose zones each serve their own clients: 9,900 for the
// client's zone and the other 100 of 10,000 split over the others (by
// endpoint count when the client's zone has none). Spillway's planner
// moves those weights with the clients' zones (a service whose clients
// are all in one zone spills to the others), so there a locality's weight
// can differ, by at most a byte per locality; the endpoints never do.
// The default assignments are what a go-control-plane user would write,
// without a hostname; --same-content is the extra comparison that leaves
// only the servers' work different.
//
// The driver makes changes over HTTP on loopback:
//
//	POST /change?op=add&service=svc-005&id=add-0&address=10.200.0.1&zone=zone-a
//	POST /change?op=remove&service=svc-042&address=10.1.42.1
//
// Each one edits the model, builds the new EDS resources of every zone and
// calls SetSnapshot for every zone before it answers 200 with the new EDS
// version. GET /readyz answers 200 once the first snapshots are set. With
// --pprof, /debug/pprof/ is served too (the driver's --pprof uses it).
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
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
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
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
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
	dataFile := flag.String("data", "", "read the data set from this data file (package benchdata) instead of --services, --endpoints and --zones")
	cacheKind := flag.String("cache", "snapshot", "snapshot: a SnapshotCache with a snapshot per zone; linear: a LinearCache per resource type (EDS: per zone) under a MuxCache")
	withPprof := flag.Bool("pprof", false, "serve /debug/pprof/ on the HTTP address")
	sameContent := flag.Bool("same-content", false, "assignments with spillway's content for the same data (hostnames, weights, every locality at priority 0) instead of a go-control-plane user's")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var data dataSet
	switch {
	case *dataFile != "":
		svcs, zs, err := benchdata.ReadFile(*dataFile)
		if err != nil {
			log.Error("baseline failed", "err", fmt.Errorf("--data: %w", err))
			os.Exit(2)
		}
		data = dataSet{services: svcs, zones: zs}
	default:
		if err := benchdata.Validate(*services, *endpoints, *zones); err != nil {
			log.Error("baseline failed", "err", err)
			os.Exit(2)
		}
		data = dataSet{services: benchdata.Services(*services, *endpoints, *zones), zones: benchdata.Zones(*zones)}
	}
	if *sameContent {
		data = withSameContent(data)
	}
	if *cacheKind != "snapshot" && *cacheKind != "linear" {
		log.Error("baseline failed", "err", fmt.Errorf("--cache: %q, want snapshot or linear", *cacheKind))
		os.Exit(2)
	}
	if err := run(*grpcAddr, *httpAddr, data, *cacheKind, *withPprof, log); err != nil {
		log.Error("baseline failed", "err", err)
		os.Exit(1)
	}
}

// dataSet is the services the baseline serves, and the zones of their
// endpoints and clients.
type dataSet struct {
	services []benchdata.Service
	zones    []string
	// sameContent: the assignments carry spillway's content
	// (--same-content; model.sameAssignment).
	sameContent bool
}

// withSameContent is d for --same-content: its endpoints in id order, as
// spillway's registry keeps a service's, so that sameAssignment need not
// sort them (change keeps the order).
func withSameContent(d dataSet) dataSet {
	for _, s := range d.services {
		slices.SortFunc(s.Endpoints, byID)
	}
	d.sameContent = true
	return d
}

func run(grpcAddr, httpAddr string, data dataSet, cacheKind string, withPprof bool, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var m *model
	var err error
	if cacheKind == "linear" {
		m, err = newLinearModel(data)
	} else {
		m, err = newModel(ctx, data)
	}
	if err != nil {
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
	grpcSrv := newGRPCServer(ctx, m.cache)
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
		"cache", cacheKind, "same_content", data.sameContent, "services", len(data.services), "zones", len(data.zones))
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

// The gRPC server options of go-control-plane's example server
// (internal/example/server.go).
const (
	grpcKeepaliveTime        = 30 * time.Second
	grpcKeepaliveTimeout     = 5 * time.Second
	grpcKeepaliveMinTime     = 30 * time.Second
	grpcMaxConcurrentStreams = 1000000
)

// newGRPCServer is a grpc.Server serving ADS from c with server.NewServer's
// defaults, with the options of go-control-plane's example server.
func newGRPCServer(ctx context.Context, c cache.Cache) *grpc.Server {
	s := grpc.NewServer(
		grpc.MaxConcurrentStreams(grpcMaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: grpcKeepaliveTime, Timeout: grpcKeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcKeepaliveMinTime, PermitWithoutStream: true}),
	)
	v3discoverygrpc.RegisterAggregatedDiscoveryServiceServer(s, server.NewServer(ctx, c, nil))
	return s
}

// zoneHash keys the snapshot cache by the client's zone: every client of a
// zone shares one snapshot.
type zoneHash struct{}

func (zoneHash) ID(node *v3corepb.Node) string { return node.GetLocality().GetZone() }

var _ cache.NodeHash = zoneHash{}

// model is the endpoint list and the snapshots built from it.
type model struct {
	// Read-only after newModel or newLinearModel.
	cache cache.Cache
	// publishFn publishes the assignments of service i (the caller holds
	// mu): publish for the SnapshotCache, publishLinear for the
	// LinearCaches.
	publishFn func(ctx context.Context, i int) error
	// snapshots is the SnapshotCache (cache), or nil.
	snapshots cache.SnapshotCache
	// linearEDS[zone] is the zone's EDS LinearCache, or nil.
	linearEDS map[string]*cache.LinearCache
	// index maps a service name to its index in services.
	index map[string]int
	zones []string
	// sameContent: assignment builds spillway's content (sameAssignment).
	sameContent bool
	// static holds the Listener, RouteConfiguration and Cluster resources
	// at staticVersion: they never change, and every snapshot shares them.
	static map[resource.Type]cache.Resources

	// mu serialises changes: it guards the fields below and orders the
	// SetSnapshot calls of successive changes.
	mu       sync.Mutex
	services []benchdata.Service
	// cla[zone][i] is service i's assignment as the clients of zone see it.
	cla        map[string][]types.Resource
	edsVersion int
}

// staticVersion is the version of the types an endpoint change leaves alone.
const staticVersion = "1"

// newModel builds the data set and sets the first snapshot of every zone.
func newModel(ctx context.Context, data dataSet) (*model, error) {
	snaps := cache.NewSnapshotCache(false, zoneHash{}, nil)
	m := &model{
		cache:       snaps,
		snapshots:   snaps,
		zones:       data.zones,
		sameContent: data.sameContent,
		services:    data.services,
		index:       indexOf(data.services),
		cla:         map[string][]types.Resource{},
	}
	m.publishFn = func(ctx context.Context, i int) error {
		for _, z := range m.zones {
			// A new slice: the previous snapshots keep theirs.
			cla := slices.Clone(m.cla[z])
			cla[i] = m.assignment(m.services[i], z)
			m.cla[z] = cla
		}
		return m.publish(ctx)
	}
	var ls, rs, cs []types.Resource
	for _, s := range m.services {
		ls = append(ls, listener(s.Name))
		rs = append(rs, route(s.Name))
		cs = append(cs, cluster(s.Name))
	}
	m.static = map[resource.Type]cache.Resources{
		resource.ListenerType: cache.NewResources(staticVersion, ls),
		resource.RouteType:    cache.NewResources(staticVersion, rs),
		resource.ClusterType:  cache.NewResources(staticVersion, cs),
	}
	for _, zone := range m.zones {
		for _, s := range m.services {
			m.cla[zone] = append(m.cla[zone], m.assignment(s, zone))
		}
	}
	if err := m.publish(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// indexOf maps each service's name to its index.
func indexOf(services []benchdata.Service) map[string]int {
	out := make(map[string]int, len(services))
	for i, s := range services {
		out[s.Name] = i
	}
	return out
}

// newLinearModel serves the data set from LinearCaches, as
// go-control-plane's users do when each resource is updated on its own:
// one LinearCache per resource type (NewLinearCache(typeURL,
// WithInitialResources(...))), and, since a ClusterLoadAssignment
// depends on the client's zone, one EDS LinearCache per zone; a MuxCache
// picks the cache of a request by its type and, for EDS, its node's zone.
// A change calls UpdateResource on every zone's EDS cache, which answers
// only the watches of that resource.
func newLinearModel(data dataSet) (*model, error) {
	m := &model{
		zones:       data.zones,
		sameContent: data.sameContent,
		services:    data.services,
		index:       indexOf(data.services),
		linearEDS:   map[string]*cache.LinearCache{},
	}
	ls := map[string]types.Resource{}
	rs := map[string]types.Resource{}
	cs := map[string]types.Resource{}
	for _, s := range m.services {
		ls[s.Name], rs[s.Name], cs[s.Name] = listener(s.Name), route(s.Name), cluster(s.Name)
	}
	mux := &cache.MuxCache{
		Classify: func(r *cache.Request) string {
			if r.GetTypeUrl() == resource.EndpointType {
				return r.GetTypeUrl() + "/" + r.GetNode().GetLocality().GetZone()
			}
			return r.GetTypeUrl()
		},
		ClassifyDelta: func(r *cache.DeltaRequest) string {
			if r.GetTypeUrl() == resource.EndpointType {
				return r.GetTypeUrl() + "/" + r.GetNode().GetLocality().GetZone()
			}
			return r.GetTypeUrl()
		},
		Caches: map[string]cache.Cache{
			resource.ListenerType: cache.NewLinearCache(resource.ListenerType, cache.WithInitialResources(ls)),
			resource.RouteType:    cache.NewLinearCache(resource.RouteType, cache.WithInitialResources(rs)),
			resource.ClusterType:  cache.NewLinearCache(resource.ClusterType, cache.WithInitialResources(cs)),
		},
	}
	for _, z := range m.zones {
		eds := map[string]types.Resource{}
		for _, s := range m.services {
			eds[s.Name] = m.assignment(s, z)
		}
		c := cache.NewLinearCache(resource.EndpointType, cache.WithInitialResources(eds))
		m.linearEDS[z] = c
		mux.Caches[resource.EndpointType+"/"+z] = c
	}
	m.cache = mux
	m.publishFn = m.publishLinear
	return m, nil
}

// publishLinear updates service i's assignment in every zone's EDS cache.
// The caller holds mu.
func (m *model) publishLinear(_ context.Context, i int) error {
	m.edsVersion++
	s := m.services[i]
	for _, z := range m.zones {
		if err := m.linearEDS[z].UpdateResource(s.Name, m.assignment(s, z)); err != nil {
			return fmt.Errorf("update %s in zone %s: %w", s.Name, z, err)
		}
	}
	return nil
}

// serveChange applies one change and publishes it.
func (m *model) serveChange(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v, err := m.change(r.Context(), q.Get("op"), q.Get("service"), q.Get("id"), q.Get("address"), q.Get("zone"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "version %s\n", v)
}

// change adds (op "add") or removes (op "remove") one endpoint of service
// and publishes the new EDS resources; it returns their version. id and
// zone are used by add only.
func (m *model) change(ctx context.Context, op, service, id, address, zone string) (string, error) {
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return "", fmt.Errorf("address: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.index[service]
	if !ok {
		return "", fmt.Errorf("service: %q unknown", service)
	}
	eps := slices.Clone(m.services[i].Endpoints)
	switch op {
	case "add":
		if !slices.Contains(m.zones, zone) {
			return "", fmt.Errorf("zone: %q unknown", zone)
		}
		e := benchdata.Endpoint{ID: id, Address: addr, Zone: zone}
		if m.sameContent { // in id order, as spillway's registry keeps them
			j, _ := slices.BinarySearchFunc(eps, e, byID)
			eps = slices.Insert(eps, j, e)
		} else {
			eps = append(eps, e)
		}
	case "remove":
		n := len(eps)
		eps = slices.DeleteFunc(eps, func(e benchdata.Endpoint) bool { return e.Address == addr })
		if len(eps) == n {
			return "", fmt.Errorf("address: %s is not an endpoint of %s", addr, service)
		}
	default:
		return "", fmt.Errorf("op: %q, want add or remove", op)
	}
	m.services[i].Endpoints = eps
	if err := m.publishFn(ctx, i); err != nil {
		return "", err
	}
	return strconv.Itoa(m.edsVersion), nil
}

// publish sets, for every zone, a snapshot of the static types and the
// zone's assignments at a new EDS version. The caller holds mu, or is
// newModel.
//
// It does not call Snapshot.Consistent: in go-control-plane v0.14 that
// follows RDS names only in a Listener's filter chains, not in an
// api_listener, so it rejects every snapshot for proxyless gRPC ("mismatched
// RouteConfiguration reference and resource lengths").
func (m *model) publish(ctx context.Context) error {
	m.edsVersion++
	v := strconv.Itoa(m.edsVersion)
	for _, zone := range m.zones {
		snap := &cache.Snapshot{}
		for typ, res := range m.static {
			snap.Resources[cache.GetResponseType(typ)] = res
		}
		snap.Resources[types.Endpoint] = cache.NewResources(v, m.cla[zone])
		if err := m.snapshots.SetSnapshot(ctx, zone, snap); err != nil {
			return fmt.Errorf("set snapshot %s: %w", zone, err)
		}
	}
	return nil
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
// With sameContent it is sameAssignment instead.
func (m *model) assignment(s benchdata.Service, zone string) *v3endpointpb.ClusterLoadAssignment {
	if m.sameContent {
		return m.sameAssignment(s, zone)
	}
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
			lbs = append(lbs, lbEndpoint(e, "", 1))
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

// lbEndpoint is endpoint e, HEALTHY, with hostname ("" for none) and
// weight.
func lbEndpoint(e benchdata.Endpoint, hostname string, weight uint32) *v3endpointpb.LbEndpoint {
	return &v3endpointpb.LbEndpoint{
		HostIdentifier: &v3endpointpb.LbEndpoint_Endpoint{Endpoint: &v3endpointpb.Endpoint{
			Address: &v3corepb.Address{Address: &v3corepb.Address_SocketAddress{SocketAddress: &v3corepb.SocketAddress{
				Address:       e.Address.String(),
				PortSpecifier: &v3corepb.SocketAddress_PortValue{PortValue: benchdata.Port},
			}}},
			Hostname: hostname,
		}},
		HealthStatus:        v3corepb.HealthStatus_HEALTHY,
		LoadBalancingWeight: wrapperspb.UInt32(weight),
	}
}

// What spillway sends that a go-control-plane user's assignment does not
// (--same-content): each endpoint's registry weight, the default one, and
// the zone-aware planner's weight vector of 10,000 (zoneaware.DefaultScale)
// keeping 1 % (its DefaultProbeShare) on the zones other than the
// client's.
const (
	spillwayEndpointWeight = 100 // registry.DefaultWeight
	spillwayScale          = 10000
	spillwayProbeShare     = 0.01
)

// sameAssignment is service s as spillway's xds package sends it to the
// clients of zone (--same-content): a locality per zone with endpoints, in
// zone order, all at priority 0, each endpoint with its id as hostname,
// HEALTHY and weight spillwayEndpointWeight, in id order (the registry
// keeps a service's endpoints sorted by id; so does the model with
// --same-content, and s is sorted here only if it is not). The localities
// weigh what zone-aware gives a service whose zones each serve their own
// clients: the client's zone 1 - spillwayProbeShare of spillwayScale, the
// other zones the rest in equal parts; without a local endpoint, each zone
// its share of the endpoints.
func (m *model) sameAssignment(s benchdata.Service, zone string) *v3endpointpb.ClusterLoadAssignment {
	cla := &v3endpointpb.ClusterLoadAssignment{ClusterName: s.Name}
	eps := s.Endpoints
	if !slices.IsSortedFunc(eps, byID) {
		eps = slices.SortedFunc(slices.Values(eps), byID)
	}
	count := map[string]int{}
	for _, e := range eps {
		count[e.Zone]++
	}
	local := count[zone] > 0
	for _, z := range m.zones { // sorted, as spillway sorts localities
		if count[z] == 0 {
			continue
		}
		lbs := make([]*v3endpointpb.LbEndpoint, 0, count[z])
		for _, e := range eps {
			if e.Zone != z {
				continue
			}
			lbs = append(lbs, lbEndpoint(e, e.ID, spillwayEndpointWeight))
		}
		share := float64(count[z]) / float64(len(eps))
		switch {
		case local && len(count) == 1:
			share = 1
		case local && z == zone:
			share = 1 - spillwayProbeShare
		case local:
			share = spillwayProbeShare / float64(len(count)-1)
		}
		cla.Endpoints = append(cla.Endpoints, &v3endpointpb.LocalityLbEndpoints{
			Locality:            &v3corepb.Locality{Region: benchdata.Region, Zone: z},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(uint32(max(1, math.Round(share*spillwayScale)))),
		})
	}
	return cla
}

// byID orders endpoints by id, as spillway's registry keeps them.
func byID(a, b benchdata.Endpoint) int { return strings.Compare(a.ID, b.ID) }

package admin

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/security/authz"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/routing"
)

// LoadReader reads the LRS load table. It is called from many goroutines at
// once and must be safe for that. *load.Table implements it.
type LoadReader interface {
	// Loads returns the flows to service ("" for every service), sorted,
	// with rates as of now.
	Loads(service string, now time.Time) []load.Load
}

// SubscriptionLister lists what the connected ADS streams subscribe to. It
// is called from many goroutines at once and must be safe for that.
// *xds.Server implements it.
type SubscriptionLister interface {
	Subscriptions() []xds.Subscription
}

// Plans gives the zone-aware weights computed for a service. It is called
// from many goroutines at once and must be safe for that; the Plan it
// returns is never modified afterwards. *weights.Planner implements it
// (a nil one too: no plans).
type Plans interface {
	// Plan returns the service's plan of the last weights cycle, or nil
	// when there is none (unknown service, zone-aware weights off, or not
	// computed yet).
	Plan(service string) *weights.Plan
}

// MeshLoad is the mesh-wide load that replicas send each service's owner
// (replica/exchange). It is called from many goroutines at once and must be
// safe for that. The owner's ownership (Owns) and its exchange.Merged
// (Loads, Contributors) together implement it.
type MeshLoad interface {
	// Owns reports whether this replica owns service now.
	Owns(service string) bool
	// Loads returns the flows of service summed over every replica whose
	// latest summary is fresh, sorted by client zone and zone.
	Loads(service string, now time.Time) []load.Load
	// Contributors returns the replicas whose summaries Loads sums, with
	// their ages at now.
	Contributors(service string, now time.Time) []exchange.Contributor
}

var (
	_ LoadReader         = (*load.Table)(nil)
	_ SubscriptionLister = (*xds.Server)(nil)
	_ Plans              = (*weights.Planner)(nil)
)

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements it.
// A non-nil error is a denial whose message is the PermissionDenied
// status's (HTTP 403). It is called from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// errDenied marks a refusal of the Authorizer.
var errDenied = errors.New("permission denied")

type deniedError struct{ err error }

func (d *deniedError) Error() string   { return d.err.Error() }
func (d *deniedError) Unwrap() []error { return []error{errDenied, d.err} }

// authorize asks the Authorizer for read_load of resource.
func (a *API) authorize(ctx context.Context, resource string) error {
	if a.authz == nil {
		return nil
	}
	if err := a.authz.Authorize(ctx, authz.ReadLoad, resource); err != nil {
		return &deniedError{err}
	}
	return nil
}

// authorizeRegistry asks the Authorizer for read_registry of "" (the
// whole list), as GET /v1/services does.
func (a *API) authorizeRegistry(ctx context.Context) error {
	if a.authz == nil {
		return nil
	}
	if err := a.authz.Authorize(ctx, authz.ReadRegistry, ""); err != nil {
		return &deniedError{err}
	}
	return nil
}

// RegionViewer gives what a service's regional rules decide; false for a
// service the registry does not know.
type RegionViewer interface {
	RegionView(service string) (regions.View, bool)
}

// RouteViewer gives a service's route rules as the API shows them;
// *routing.Store implements it.
type RouteViewer interface {
	EntryOf(service string) routing.Entry
}

// ClientSlots finds a client's subset slot: the client zone it is
// numbered in and its slot among the service's streams of that zone on
// this replica (*xds.Server implements it).
type ClientSlots interface {
	ClientSlot(service, nodeID string) (zone string, slot int, ok bool)
}

// Config configures an API.
type Config struct {
	// Loads is the LRS load table; non-nil.
	Loads LoadReader
	// Subscriptions lists the ADS streams' interests; non-nil.
	Subscriptions SubscriptionLister
	// Plans gives the zone-aware weights; non-nil.
	Plans Plans
	// Mesh is the mesh-wide load when replicas share load; nil (one
	// replica, or sharing off) answers Load from Loads alone. With it, Load
	// answers a service this replica owns from Mesh (merged, merged_from)
	// and any other from Loads, flagged owner_elsewhere.
	Mesh MeshLoad
	// Regions gives a service's regional rules and what they decide
	// (*xds.Server implements it); nil leaves WeightsResponse.regions
	// unset.
	Regions RegionViewer
	// Routes gives a service's route rules, broken ones flagged; nil
	// leaves WeightsResponse.route_rules unset.
	Routes RouteViewer
	// Registry is the registry GET /v1/summary lists; nil answers it
	// 501.
	Registry Snapshotter
	// Slots finds a client's subset slot for WeightsRequest.client; nil
	// shows no client's subset.
	Slots ClientSlots
	// Replica is this replica's id, the group of its clients in a
	// mesh-wide plan's subsets ("" for one replica alone).
	Replica string
	// Authorizer is asked before every read (action "read_load"; the
	// service for Load and Weights, "" for Graph); nil allows all.
	Authorizer Authorizer
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock that decides which reports are fresh; nil means
	// time.Now.
	Now func() time.Time
}

// API implements pb.AdminServer and the HTTP handler.
type API struct {
	pb.UnimplementedAdminServer

	// Read-only after New.
	loads    LoadReader
	subs     SubscriptionLister
	plans    Plans
	mesh     MeshLoad
	regs     RegionViewer // or nil
	routes   RouteViewer  // or nil
	registry Snapshotter  // or nil
	slots    ClientSlots  // or nil
	replica  string
	authz    Authorizer // or nil
	log      *slog.Logger
	now      func() time.Time
}

var _ pb.AdminServer = (*API)(nil)

// New validates cfg and returns an API.
func New(cfg Config) (*API, error) {
	if cfg.Loads == nil {
		return nil, errors.New("admin config: Loads is nil")
	}
	if cfg.Subscriptions == nil {
		return nil, errors.New("admin config: Subscriptions is nil")
	}
	if cfg.Plans == nil {
		return nil, errors.New("admin config: Plans is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &API{loads: cfg.Loads, subs: cfg.Subscriptions, plans: cfg.Plans, mesh: cfg.Mesh, regs: cfg.Regions, routes: cfg.Routes, registry: cfg.Registry, slots: cfg.Slots, replica: cfg.Replica, authz: cfg.Authorizer, log: cfg.Logger, now: cfg.Now}, nil
}

// RegisterGRPC adds the Admin service to s.
func (a *API) RegisterGRPC(s grpc.ServiceRegistrar) { pb.RegisterAdminServer(s, a) }

// errNoPlan: the service has no zone-aware weights to show.
var errNoPlan = errors.New("no zone-aware weights")

// toStatus maps domain errors to gRPC codes at the edge.
func toStatus(err error) error {
	switch {
	case errors.Is(err, errDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, registry.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, errNoPlan):
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// Load implements pb.AdminServer.
func (a *API) Load(ctx context.Context, req *pb.LoadRequest) (*pb.LoadResponse, error) {
	resp, err := a.load(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

func (a *API) load(ctx context.Context, req *pb.LoadRequest) (*pb.LoadResponse, error) {
	service := registry.NormalizeService(req.GetService())
	if err := registry.ValidateService("service", service); err != nil {
		return nil, err
	}
	if err := a.authorize(ctx, service); err != nil {
		return nil, err
	}
	now := a.now()
	resp := &pb.LoadResponse{Service: service, Time: timestamppb.New(now)}
	if p := a.plans.Plan(service); p != nil && p.Source == weights.SourceMesh {
		resp.Owner = p.Owner
	}
	var loads []load.Load
	switch {
	case a.mesh == nil:
		loads = a.loads.Loads(service, now)
	case a.mesh.Owns(service):
		resp.Merged = true
		loads = a.mesh.Loads(service, now)
		cs := a.mesh.Contributors(service, now)
		resp.MergedFrom = make([]*pb.Contributor, 0, len(cs))
		for _, c := range cs {
			resp.MergedFrom = append(resp.MergedFrom, &pb.Contributor{Replica: c.Replica, AgeSeconds: c.Age.Seconds()})
		}
	default:
		resp.OwnerElsewhere = true
		loads = a.loads.Loads(service, now)
	}
	resp.Rows = make([]*pb.LoadRow, 0, len(loads))
	for _, l := range loads {
		resp.Rows = append(resp.Rows, loadRow(l))
	}
	return resp, nil
}

func loadRow(l load.Load) *pb.LoadRow {
	r := &pb.LoadRow{
		ClientZone:     l.ClientZone,
		ClientService:  l.ClientService,
		Service:        l.Service,
		Locality:       &pb.Locality{Region: l.Locality.Region, Zone: l.Locality.Zone, SubZone: l.Locality.SubZone},
		IssuedRps:      l.Issued,
		SucceededRps:   l.Succeeded,
		ErroredRps:     l.Errored,
		InProgress:     l.InProgress,
		TotalIssued:    l.TotalIssued,
		TotalSucceeded: l.TotalSucceeded,
		TotalErrored:   l.TotalErrored,
		Reporters:      uint32(max(l.Reporters, 0)),
	}
	if !l.Updated.IsZero() {
		r.Updated = timestamppb.New(l.Updated)
	}
	return r
}

// Wildcard is the service of an edge from streams that subscribe to every
// service.
const Wildcard = "*"

type edgeKey struct{ client, service string }

type edgeAcc struct {
	streams     int
	nodes       map[string]struct{}
	zones       map[string]struct{}
	rps, errRPS float64
}

// Graph implements pb.AdminServer.
func (a *API) Graph(ctx context.Context, _ *pb.GraphRequest) (*pb.GraphResponse, error) {
	if err := a.authorize(ctx, ""); err != nil {
		return nil, toStatus(err)
	}
	return a.graph(), nil
}

func (a *API) graph() *pb.GraphResponse {
	now := a.now()
	acc := map[edgeKey]*edgeAcc{}
	get := func(k edgeKey) *edgeAcc {
		e := acc[k]
		if e == nil {
			e = &edgeAcc{nodes: map[string]struct{}{}, zones: map[string]struct{}{}}
			acc[k] = e
		}
		return e
	}
	for _, sub := range a.subs.Subscriptions() {
		names := map[string]struct{}{}
		for _, s := range sub.Services {
			names[s] = struct{}{}
		}
		if sub.Wildcard {
			names[Wildcard] = struct{}{}
		}
		for s := range names {
			e := get(edgeKey{sub.ClientService, s})
			e.streams++
			e.nodes[sub.NodeID] = struct{}{}
			e.zones[sub.Zone] = struct{}{}
		}
	}
	for _, l := range a.loads.Loads("", now) {
		if l.Reporters == 0 {
			continue // only stale reports: no current traffic to show
		}
		e := get(edgeKey{l.ClientService, l.Service})
		e.rps += l.Issued
		e.errRPS += l.Errored
	}
	resp := &pb.GraphResponse{Edges: make([]*pb.Edge, 0, len(acc)), Time: timestamppb.New(now)}
	for k, e := range acc {
		resp.Edges = append(resp.Edges, &pb.Edge{
			ClientService: k.client,
			Service:       k.service,
			Streams:       uint32(e.streams),
			Nodes:         uint32(len(e.nodes)),
			Zones:         slices.Sorted(maps.Keys(e.zones)),
			Rps:           e.rps,
			ErroredRps:    e.errRPS,
		})
	}
	slices.SortFunc(resp.Edges, func(x, y *pb.Edge) int {
		return cmp.Or(cmp.Compare(x.ClientService, y.ClientService), cmp.Compare(x.Service, y.Service))
	})
	return resp
}

// Owner says which services this replica owns.
// *ownership.Owners implements it.
type Owner interface {
	Owns(service string) bool
}

// MergedLoad is the load an owner merged from every replica's summaries.
// *exchange.Merged implements it.
type MergedLoad interface {
	Loads(service string, now time.Time) []load.Load
	Contributors(service string, now time.Time) []exchange.Contributor
}

// JoinMesh joins a replica's ownership and the merged load it keeps as an
// owner into the MeshLoad of Config.Mesh.
func JoinMesh(owner Owner, merged MergedLoad) MeshLoad {
	return joinedMesh{owner, merged}
}

type joinedMesh struct {
	Owner
	MergedLoad
}

var _ MergedLoad = (*exchange.Merged)(nil)

package registryapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/durable"
	"github.com/spillway/spillway/registry/lease"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// Leases is the VM source the API drives.
type Leases interface {
	Register(ctx context.Context, service string, e *registry.Endpoint, ttl time.Duration) (lease.Lease, error)
	Heartbeat(id string) (time.Duration, error)
	Deregister(ctx context.Context, id string) (uint64, error)
}

// LastSeener reports the live heartbeat time of a VM endpoint.
type LastSeener interface {
	LastSeen(service, id string) (t time.Time, leaseID string, ok bool)
}

// Config configures an API.
type Config struct {
	// Store is read for listings; non-nil.
	Store *registry.Store
	// Leases handles VM registrations; non-nil. If it also implements
	// LastSeener, listings show live heartbeat times.
	Leases Leases
	// Utilization stores utilization reports (ReportUtilization and POST
	// /v1/utilization); nil answers them Unimplemented.
	Utilization *load.UtilizationTable
	// Logger; nil discards.
	Logger *slog.Logger
}

// API implements pb.RegistryServer and the HTTP handler.
type API struct {
	pb.UnimplementedRegistryServer

	// Read-only after New.
	store    *registry.Store
	leases   Leases
	lastSeen LastSeener
	util     *load.UtilizationTable
	log      *slog.Logger
	now      func() time.Time
}

var _ pb.RegistryServer = (*API)(nil)

// New validates cfg and returns an API.
func New(cfg Config) (*API, error) {
	if cfg.Store == nil {
		return nil, errors.New("registryapi config: Store is nil")
	}
	if cfg.Leases == nil {
		return nil, errors.New("registryapi config: Leases is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{store: cfg.Store, leases: cfg.Leases, util: cfg.Utilization, log: cfg.Logger, now: time.Now}
	a.lastSeen, _ = cfg.Leases.(LastSeener)
	return a, nil
}

// RegisterGRPC adds the Registry service to s.
func (a *API) RegisterGRPC(s grpc.ServiceRegistrar) { pb.RegisterRegistryServer(s, a) }

// toStatus maps domain errors to gRPC codes at the edge.
func toStatus(err error) error {
	var fe *registry.FieldError
	switch {
	case errors.Is(err, durable.ErrUnavailable): // before DeadlineExceeded: a store timeout is the store's
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &fe):
		return status.Error(codes.InvalidArgument, fe.Error())
	case errors.Is(err, registry.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, lease.ErrNotFound), errors.Is(err, registry.ErrNotFound), errors.Is(err, load.ErrUnknownEndpoint):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, registry.ErrConflict):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// Register implements pb.RegistryServer.
func (a *API) Register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	resp, err := a.register(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

func (a *API) register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	service := registry.NormalizeService(req.GetService())
	if err := registry.ValidateService("service", service); err != nil {
		return nil, err
	}
	e, err := endpointFromPB(req.GetEndpoint())
	if err != nil {
		return nil, err
	}
	l, err := a.leases.Register(ctx, service, e, time.Duration(req.GetTtlSeconds())*time.Second)
	if err != nil {
		if !errors.Is(err, registry.ErrInvalid) {
			a.log.Error("register failed", "service", service, "err", err)
		}
		return nil, err
	}
	return &pb.RegisterResponse{LeaseId: l.ID, TtlSeconds: uint32(l.TTL / time.Second), EndpointId: l.EndpointID, Version: l.Version}, nil
}

func validLeaseID(id string) error {
	if id == "" {
		return fieldErr("lease_id", "is required")
	}
	if len(id) > 64 {
		return fieldErr("lease_id", "%d characters, at most 64", len(id))
	}
	return nil
}

// Heartbeat implements pb.RegistryServer.
func (a *API) Heartbeat(_ context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	ttl, err := a.leases.Heartbeat(req.GetLeaseId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.HeartbeatResponse{LeaseId: req.GetLeaseId(), Found: true, TtlSeconds: uint32(ttl / time.Second)}, nil
}

// HeartbeatStream implements pb.RegistryServer: one response per request,
// in order; an unknown lease answers found=false and keeps the stream.
func (a *API) HeartbeatStream(stream grpc.BidiStreamingServer[pb.HeartbeatRequest, pb.HeartbeatResponse]) error {
	var resp pb.HeartbeatResponse
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		// A malformed lease id is just an unknown lease here: one bad
		// message must not end the stream for every other lease on it.
		var ttl time.Duration
		err = validLeaseID(req.GetLeaseId())
		if err == nil {
			ttl, err = a.leases.Heartbeat(req.GetLeaseId())
		}
		resp.LeaseId = req.GetLeaseId()
		resp.Found = err == nil
		resp.TtlSeconds = uint32(ttl / time.Second)
		if err := stream.Send(&resp); err != nil {
			return err
		}
	}
}

// Deregister implements pb.RegistryServer.
func (a *API) Deregister(ctx context.Context, req *pb.DeregisterRequest) (*pb.DeregisterResponse, error) {
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	v, err := a.leases.Deregister(ctx, req.GetLeaseId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeregisterResponse{Version: v}, nil
}

// ListServices implements pb.RegistryServer.
func (a *API) ListServices(context.Context, *pb.ListServicesRequest) (*pb.ListServicesResponse, error) {
	snap := a.store.Snapshot()
	resp := &pb.ListServicesResponse{Version: snap.Version()}
	for _, name := range snap.Services() {
		svc, _ := snap.Service(name)
		sum := &pb.ServiceSummary{Name: name, Endpoints: uint32(len(svc.Endpoints))}
		for _, e := range svc.Endpoints {
			if e.Health == registry.Healthy {
				sum.Healthy++
			}
		}
		resp.Services = append(resp.Services, sum)
	}
	return resp, nil
}

// ListEndpoints implements pb.RegistryServer.
func (a *API) ListEndpoints(_ context.Context, req *pb.ListEndpointsRequest) (*pb.ListEndpointsResponse, error) {
	resp, err := a.listEndpoints(req)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

func (a *API) listEndpoints(req *pb.ListEndpointsRequest) (*pb.ListEndpointsResponse, error) {
	name := registry.NormalizeService(req.GetService())
	if err := registry.ValidateService("service", name); err != nil {
		return nil, err
	}
	snap := a.store.Snapshot()
	svc, ok := snap.Service(name)
	if !ok {
		return nil, fmt.Errorf("service %q: %w", name, registry.ErrNotFound)
	}
	resp := &pb.ListEndpointsResponse{Service: name, Version: snap.Version()}
	for _, e := range svc.Endpoints {
		seen, leaseID := e.LastSeen, ""
		if e.Source == registry.SourceVM && a.lastSeen != nil {
			if t, id, ok := a.lastSeen.LastSeen(name, e.ID); ok {
				seen, leaseID = t, id
			}
		}
		resp.Endpoints = append(resp.Endpoints, endpointToPB(e, seen, leaseID))
	}
	return resp, nil
}

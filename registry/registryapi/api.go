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

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// Leases is the VM source the API drives; *lease.Manager.
type Leases interface {
	// Register makes a lease owned by the identity in ctx; another
	// identity's live lease on the endpoint is a *lease.OwnerError.
	Register(ctx context.Context, service string, e *registry.Endpoint, ttl time.Duration) (lease.Lease, error)
	// CheckOwner says which service lease id holds and whether the
	// identity in ctx may act on it (*lease.OwnerError if not).
	CheckOwner(ctx context.Context, action, id string) (lease.Holder, error)
	Heartbeat(id string) (time.Duration, error)
	Deregister(ctx context.Context, id string) (uint64, error)
}

var _ Leases = (*lease.Manager)(nil)

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements
// it. A non-nil error is a denial: its message ("permission denied:
// IDENTITY may not ACTION RESOURCE") is the PermissionDenied status's
// (HTTP 403). It is called from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// Auditor records a refusal that is not the Authorizer's (a lease that
// belongs to another identity); *audit.Log implements it. The
// Authorizer's own refusals reach the audit log through the policy.
type Auditor interface {
	DeniedError(ctx context.Context, a authz.Action, resource string, err error)
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
	Utilization UtilizationSink
	// Authorizer is asked before every call, with the call's service as
	// the resource (see the package doc); nil allows every call.
	Authorizer Authorizer
	// Audit, or nil, records the refusals of lease ownership.
	Audit Auditor
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
	util     UtilizationSink
	authz    Authorizer // or nil
	audit    Auditor    // or nil
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
	a := &API{store: cfg.Store, leases: cfg.Leases, util: cfg.Utilization, authz: cfg.Authorizer, audit: cfg.Audit, log: cfg.Logger, now: time.Now}
	a.lastSeen, _ = cfg.Leases.(LastSeener)
	return a, nil
}

// RegisterGRPC adds the Registry service to s.
func (a *API) RegisterGRPC(s grpc.ServiceRegistrar) { pb.RegisterRegistryServer(s, a) }

// errDenied marks a denial of the Authorizer.
var errDenied = errors.New("permission denied")

// denied is an Authorizer's refusal; its message is the Authorizer's.
type denied struct{ err error }

func (d *denied) Error() string   { return d.err.Error() }
func (d *denied) Unwrap() []error { return []error{errDenied, d.err} }

// authorize asks the Authorizer; a refusal wraps errDenied.
func (a *API) authorize(ctx context.Context, action authz.Action, resource string) error {
	if a.authz == nil {
		return nil
	}
	if err := a.authz.Authorize(ctx, action, resource); err != nil {
		a.log.Info("call denied", "identity", authn.FromContext(ctx).String(), "action", action, "resource", resource, "err", err)
		return &denied{err}
	}
	return nil
}

// toStatus maps domain errors to gRPC codes at the edge.
func toStatus(err error) error {
	var fe *registry.FieldError
	switch {
	case errors.Is(err, errDenied), errors.Is(err, lease.ErrNotOwner):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, systemstore.ErrUnavailable): // before DeadlineExceeded: a store timeout is the store's
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &fe):
		return status.Error(codes.InvalidArgument, fe.Error())
	case errors.Is(err, registry.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, lease.ErrNotFound), errors.Is(err, registry.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, registry.ErrConflict):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, lease.ErrBusy):
		return status.Error(codes.Aborted, err.Error())
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
	if err := a.authorize(ctx, authz.Register, service); err != nil {
		return nil, err
	}
	l, err := a.leases.Register(ctx, service, e, time.Duration(req.GetTtlSeconds())*time.Second)
	if err != nil {
		if !errors.Is(err, registry.ErrInvalid) && !errors.Is(err, lease.ErrNotOwner) {
			a.log.Error("register failed", "service", service, "err", err)
		}
		a.ownerDenied(ctx, authz.Register, service, err)
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

// mayUse checks that the caller may do action (heartbeat, deregister) on
// lease id: the Authorizer allows action on the lease's service, and the
// caller owns the lease. An unknown lease is lease.ErrNotFound.
func (a *API) mayUse(ctx context.Context, action authz.Action, id string) error {
	h, err := a.leases.CheckOwner(ctx, string(action), id)
	if err != nil && !errors.Is(err, lease.ErrNotOwner) {
		return err
	}
	// The policy first: a caller without the right to the service
	// learns nothing about who holds its leases.
	if aerr := a.authorize(ctx, action, h.Service); aerr != nil {
		return aerr
	}
	a.ownerDenied(ctx, action, h.Service, err)
	return err
}

// ownerDenied hands a lease-ownership refusal to the audit log.
func (a *API) ownerDenied(ctx context.Context, action authz.Action, service string, err error) {
	if a.audit != nil && errors.Is(err, lease.ErrNotOwner) {
		a.audit.DeniedError(ctx, action, service, err)
	}
}

// Heartbeat implements pb.RegistryServer.
func (a *API) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	if err := a.mayUse(ctx, authz.Heartbeat, req.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	ttl, err := a.leases.Heartbeat(req.GetLeaseId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.HeartbeatResponse{LeaseId: req.GetLeaseId(), Found: true, TtlSeconds: uint32(ttl / time.Second)}, nil
}

// HeartbeatStream implements pb.RegistryServer: one response per request,
// in order; an unknown lease answers found=false and keeps the stream. A
// lease the caller may not heartbeat (the policy, or another identity's
// lease) ends the stream with PermissionDenied.
//
// On a replica that cannot reach the store (lease.ErrNotShared) the
// heartbeats are still taken, but not answered: for notSharedLinger after
// the first one the stream renews what it receives, so that a burst of
// leases sent together is renewed (and published when the store is
// back), then it ends with UNAVAILABLE, so that the agent moves to a
// replica that can share them. No answer means the agent counts the
// attempt as failed: when every replica is cut (an outage of the store)
// it backs off as for any failure instead of cycling through them.
func (a *API) HeartbeatStream(stream grpc.BidiStreamingServer[pb.HeartbeatRequest, pb.HeartbeatResponse]) error {
	ctx := stream.Context()
	var resp pb.HeartbeatResponse
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		notShared, err := a.beat(ctx, stream, req, &resp)
		if err != nil {
			return err
		}
		if notShared != nil {
			return a.linger(ctx, stream, notShared)
		}
	}
}

// renewOnly takes one heartbeat of a lingering stream without answering
// it; a lease the caller may not heartbeat still ends the stream.
func (a *API) renewOnly(ctx context.Context, req *pb.HeartbeatRequest) error {
	if validLeaseID(req.GetLeaseId()) != nil {
		return nil
	}
	err := a.mayUse(ctx, authz.Heartbeat, req.GetLeaseId())
	if errors.Is(err, errDenied) || errors.Is(err, lease.ErrNotOwner) {
		return toStatus(err)
	}
	if err == nil {
		a.leases.Heartbeat(req.GetLeaseId()) // renewed; the stream's end says it was not shared
	}
	return nil
}

// notSharedLinger is how long a heartbeat stream keeps answering once its
// replica has said it cannot share heartbeats: long enough for a burst
// sent together, short enough that an agent moves at once.
const notSharedLinger = 100 * time.Millisecond

// beat answers one request of a heartbeat stream. It returns the
// lease.ErrNotShared error of a heartbeat that was taken but not shared
// (and leaves it unanswered), and an error that ends the stream.
func (a *API) beat(ctx context.Context, stream grpc.BidiStreamingServer[pb.HeartbeatRequest, pb.HeartbeatResponse], req *pb.HeartbeatRequest, resp *pb.HeartbeatResponse) (notShared, end error) {
	// A malformed lease id is just an unknown lease here: one bad
	// message must not end the stream for every other lease on it.
	var ttl time.Duration
	err := validLeaseID(req.GetLeaseId())
	if err == nil {
		err = a.mayUse(ctx, authz.Heartbeat, req.GetLeaseId())
		if errors.Is(err, errDenied) || errors.Is(err, lease.ErrNotOwner) {
			return nil, toStatus(err)
		}
	}
	if err == nil {
		ttl, err = a.leases.Heartbeat(req.GetLeaseId())
		if errors.Is(err, lease.ErrNotShared) {
			return err, nil
		}
	}
	resp.LeaseId = req.GetLeaseId()
	resp.Found = err == nil
	resp.TtlSeconds = uint32(ttl / time.Second)
	if err := stream.Send(resp); err != nil {
		return nil, err
	}
	return notShared, nil
}

// linger takes the stream's requests for notSharedLinger, then ends it
// with UNAVAILABLE carrying notShared (also when the client has closed
// its side: it must still move). It answers none of them: responses come
// in the order of the requests, and the first of these went unanswered.
func (a *API) linger(ctx context.Context, stream grpc.BidiStreamingServer[pb.HeartbeatRequest, pb.HeartbeatResponse], notShared error) error {
	type recvd struct {
		req *pb.HeartbeatRequest
		err error
	}
	in := make(chan recvd)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			req, err := stream.Recv() // unblocked by the stream's end when linger returns
			select {
			case in <- recvd{req, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	t := time.NewTimer(notSharedLinger)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return toStatus(notShared)
		case <-ctx.Done():
			return ctx.Err()
		case r := <-in:
			if r.err == io.EOF {
				return toStatus(notShared)
			}
			if r.err != nil {
				return r.err
			}
			if err := a.renewOnly(ctx, r.req); err != nil {
				return err
			}
		}
	}
}

// Deregister implements pb.RegistryServer.
func (a *API) Deregister(ctx context.Context, req *pb.DeregisterRequest) (*pb.DeregisterResponse, error) {
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	if err := a.mayUse(ctx, authz.Deregister, req.GetLeaseId()); err != nil {
		return nil, toStatus(err)
	}
	v, err := a.leases.Deregister(ctx, req.GetLeaseId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeregisterResponse{Version: v}, nil
}

// ListServices implements pb.RegistryServer.
func (a *API) ListServices(ctx context.Context, _ *pb.ListServicesRequest) (*pb.ListServicesResponse, error) {
	if err := a.authorize(ctx, authz.ReadRegistry, ""); err != nil {
		return nil, toStatus(err)
	}
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
func (a *API) ListEndpoints(ctx context.Context, req *pb.ListEndpointsRequest) (*pb.ListEndpointsResponse, error) {
	resp, err := a.listEndpoints(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

func (a *API) listEndpoints(ctx context.Context, req *pb.ListEndpointsRequest) (*pb.ListEndpointsResponse, error) {
	name := registry.NormalizeService(req.GetService())
	if err := registry.ValidateService("service", name); err != nil {
		return nil, err
	}
	if err := a.authorize(ctx, authz.ReadRegistry, name); err != nil {
		return nil, err
	}
	snap := a.store.Snapshot()
	svc, ok := snap.Service(name)
	if !ok {
		return nil, fmt.Errorf("service %q: %w", name, registry.ErrNotFound)
	}
	// lease_id stays empty: a lease id is a credential for anonymous
	// leases and a handle for the owner's; only Register's answer, to the
	// registrant, carries it.
	resp := &pb.ListEndpointsResponse{Service: name, Version: snap.Version()}
	for _, e := range svc.Endpoints {
		seen := e.LastSeen
		if e.Source == registry.SourceVM && a.lastSeen != nil {
			if t, _, ok := a.lastSeen.LastSeen(name, e.ID); ok {
				seen = t
			}
		}
		resp.Endpoints = append(resp.Endpoints, endpointToPB(e, seen))
	}
	return resp, nil
}

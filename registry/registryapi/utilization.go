package registryapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/security/authz"
)

var errNoUtilization = status.Error(codes.Unimplemented, "utilization reports are not enabled on this server")

// UtilizationSink stores utilization reports; *load.UtilizationTable
// implements it (the assembly hands it in). Both methods are called from
// many goroutines at once.
type UtilizationSink interface {
	// Record validates r and stores it as its endpoint's latest report,
	// arrived at now, after check (non-nil) accepts the endpoint as the
	// registry holds it. Nothing is stored when it returns an error: one
	// wrapping registry.ErrInvalid (a *registry.FieldError naming the
	// field), registry.ErrNotFound (the endpoint is not in the
	// registry), or check's.
	Record(r registry.UtilizationReport, now time.Time, check func(*registry.Endpoint) error) error
	// Count counts a report the API refused before Record, by result:
	// UtilizationInvalid or UtilizationWrongLease.
	Count(result string)
}

// Results the API counts itself (UtilizationSink.Count), values of the
// result label of spillway_utilization_reports_total.
const (
	UtilizationInvalid    = "invalid"
	UtilizationWrongLease = "wrong_lease"
)

// ReportUtilization implements pb.RegistryServer: every report is stored
// as its endpoint's latest; the first refused report ends the stream with
// its status (InvalidArgument naming the field, NotFound for an endpoint
// not in the registry or a lease that does not hold it). A clean close
// answers how many reports were stored.
func (a *API) ReportUtilization(stream grpc.ClientStreamingServer[pb.UtilizationReport, pb.UtilizationAck]) error {
	if a.util == nil {
		return errNoUtilization
	}
	var accepted uint64
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&pb.UtilizationAck{Accepted: accepted})
		}
		if err != nil {
			return err
		}
		if err := a.reportUtilization(stream.Context(), req); err != nil {
			return toStatus(err)
		}
		accepted++
	}
}

// reportUtilization validates and stores one report, if the caller may
// report for its service and owns the lease it names.
func (a *API) reportUtilization(ctx context.Context, req *pb.UtilizationReport) error {
	r := registry.UtilizationReport{
		Service:    registry.NormalizeService(req.GetService()),
		EndpointID: req.GetEndpointId(),
		CPU:        req.GetCpu(),
		InFlight:   req.GetInFlight(),
		Limit:      req.GetLimit(),
		Interval:   time.Duration(req.GetIntervalMs()) * time.Millisecond,
		RPS:        req.GetRps(),
		EPS:        req.GetEps(),
		LatencyMs:  req.GetLatencyMs(),
	}
	if id := req.GetLeaseId(); len(id) > 64 {
		a.util.Count(UtilizationInvalid)
		return validLeaseID(id)
	}
	if r.Service != "" {
		if err := a.authorize(ctx, authz.Report, r.Service); err != nil {
			return err
		}
	}
	return a.util.Record(r, a.now(), func(e *registry.Endpoint) error {
		return a.checkLease(ctx, r.Service, e, req.GetLeaseId())
	})
}

// checkLease lets only the lease that holds a VM endpoint report for it.
// Endpoints of other sources have no lease; a lease id sent for one is
// ignored. The lease's owner must be the caller.
func (a *API) checkLease(ctx context.Context, service string, e *registry.Endpoint, leaseID string) error {
	if e.Source != registry.SourceVM || a.lastSeen == nil {
		return nil
	}
	if leaseID == "" {
		a.util.Count(UtilizationInvalid)
		return fieldErr("lease_id", "is required for VM endpoint %q", e.ID)
	}
	if _, holder, ok := a.lastSeen.LastSeen(service, e.ID); !ok || holder != leaseID {
		a.util.Count(UtilizationWrongLease)
		return fmt.Errorf("lease_id %q does not hold endpoint %q of %q: %w", leaseID, e.ID, service, lease.ErrNotFound)
	}
	if _, err := a.leases.CheckOwner(ctx, string(authz.Report), leaseID); errors.Is(err, lease.ErrNotOwner) {
		a.ownerDenied(ctx, authz.Report, service, err)
		return err
	}
	return nil
}

// reportUtilizationJSON is POST /v1/utilization: one report.
func (a *API) reportUtilizationJSON(ctx context.Context, req *pb.UtilizationReport) (*pb.UtilizationAck, error) {
	if a.util == nil {
		return nil, errNoUtilization
	}
	if err := a.reportUtilization(ctx, req); err != nil {
		return nil, toStatus(err)
	}
	return &pb.UtilizationAck{Accepted: 1}, nil
}

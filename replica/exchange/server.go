package exchange

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/replica/exchange/meshv1"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Merged receives every valid summary; non-nil.
	Merged *Merged
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer for the metrics, or nil for none.
	Registerer prometheus.Registerer
	// Now is the owner's clock, stamped on each arrival; nil: time.Now.
	Now func() time.Time
	// Authorizer is asked when a stream opens whether the caller (the
	// other replica, by its client certificate) may send load summaries
	// (action "mesh", resource ""); nil allows every stream.
	Authorizer Authorizer
}

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements it.
// A non-nil error is a denial whose message is the PermissionDenied
// status's. It is called from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// Server is the owner side of LoadExchange: it validates every summary a
// sender replica streams and merges it into a Merged.
type Server struct {
	meshv1.UnimplementedLoadExchangeServer

	merged  *Merged
	authz   Authorizer // or nil
	log     *slog.Logger
	metrics *metrics
	now     func() time.Time
}

var errNoMerged = errors.New("exchange server config: Merged: must not be nil")

// NewServer validates cfg and returns a Server.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Merged == nil {
		return nil, errNoMerged
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Server{merged: cfg.Merged, authz: cfg.Authorizer, log: log.With("component", "load-exchange"), metrics: newMetrics(cfg.Registerer), now: now}, nil
}

// Register registers the LoadExchange service on r.
func (s *Server) Register(r grpc.ServiceRegistrar) { meshv1.RegisterLoadExchangeServer(r, s) }

// Report receives one sender's stream. Every message is validated whole
// before any of it is stored; an invalid one ends the stream with
// InvalidArgument naming the field, one past Merged's bounds with
// ResourceExhausted. A stream carries one replica's summaries only. A
// caller the Authorizer refuses gets PermissionDenied before anything is
// read.
func (s *Server) Report(stream grpc.ClientStreamingServer[meshv1.Summary, meshv1.ReportAck]) error {
	if s.authz != nil {
		if err := s.authz.Authorize(stream.Context(), authz.Mesh, ""); err != nil {
			s.metrics.summaries.WithLabelValues("denied").Inc()
			s.log.Warn("load exchange stream denied", "identity", authn.FromContext(stream.Context()).String(), "err", err)
			return status.Error(codes.PermissionDenied, err.Error())
		}
	}
	var accepted uint64
	var replica string
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&meshv1.ReportAck{Summaries: accepted})
		}
		if err != nil {
			return err
		}
		s.metrics.bytes.WithLabelValues("received").Add(float64(proto.Size(msg)))
		sum, err := FromProto(msg)
		if err == nil && replica != "" && sum.Replica != replica {
			err = errorf("summary.replica", "%q on a stream of replica %q", sum.Replica, replica)
		}
		if err != nil {
			s.metrics.summaries.WithLabelValues("invalid").Inc()
			s.log.Warn("invalid load summary", "replica", msg.GetReplica(), "err", err)
			return status.Errorf(codes.InvalidArgument, "%v", err)
		}
		replica = sum.Replica
		if err := s.merged.add(sum, s.now()); err != nil {
			s.metrics.summaries.WithLabelValues("full").Inc()
			s.log.Warn("load summary not stored", "replica", sum.Replica, "err", err)
			return status.Errorf(codes.ResourceExhausted, "%v", err)
		}
		s.metrics.summaries.WithLabelValues("accepted").Inc()
		accepted++
	}
}

package exchange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/replica/exchange/meshv1"
	"github.com/spillway/spillway/replica/ownership"
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
	// Members, or nil for no check (every replica id and peer address
	// is taken): a summary's sender must be a live member other than
	// Self, and the stream's peer must be that member: over a verified
	// client certificate, the certificate's identity (authn.FromTLS) is
	// the one the member's record names (Member.Identity); without one,
	// the peer's IP address is one of the member's GRPCAddr host's (a
	// name is resolved, and cached for 30 s). The senders held are
	// bounded by the live members.
	Members Membership
	// Self is this replica's id, refused as a sender (its own summaries
	// reach its Merged without the network); "" for none.
	Self string
	// Services, or nil to keep every service: a summary's services are
	// kept only when registered and owned here, others are dropped
	// (counted) before anything is stored.
	Services Services
	// Versions is the cluster version in force, or nil for Baseline's
	// rules. From clusterversion.StrictSenderBinding (2) on, a member
	// record without an identity binds no certificate: over a verified
	// client certificate its summaries are refused (identity_missing).
	// Before, they are taken on the Authorizer's mesh grant alone, as a
	// release before identities were recorded took them.
	Versions Versions
}

// Versions tells which cluster versions are in force;
// *clusterversion.Versions implements it. Active is called from many
// goroutines at once, per stream and per summary.
type Versions interface {
	// Active reports whether cluster version v is in force. Once true
	// for v it stays true.
	Active(v int) bool
}

// Membership tells the live member replicas; *ownership.Owners
// implements it. Members is called from many goroutines at once and its
// result is not modified.
type Membership interface {
	// Members returns the live members, this replica included.
	Members() []ownership.Member
}

// Services says which services' summaries this replica keeps: those
// registered here and owned here, or in a shard the summary lists as
// routed here (a sender that saw this replica's new ownership record a
// moment before this replica marked the shard owned: its summary is
// the new owner's acknowledgement, and must come with its load). Its
// methods are called from many goroutines at once.
type Services interface {
	// Registered reports whether service is in this replica's registry.
	Registered(service string) bool
	// Owns reports whether this replica owns service's shard.
	Owns(service string) bool
	// Shard returns service's shard.
	Shard(service string) int
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

	// Read-only after NewServer.
	merged   *Merged
	authz    Authorizer // or nil
	members  Membership // or nil
	self     string
	services Services // or nil
	versions Versions // or nil
	log      *slog.Logger
	metrics  *metrics
	now      func() time.Time
	hosts    *hostCache
	warn     *logLimiter
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
	return &Server{
		merged: cfg.Merged, authz: cfg.Authorizer, members: cfg.Members, self: cfg.Self, services: cfg.Services, versions: cfg.Versions,
		log: log.With("component", "load-exchange"), metrics: newMetrics(cfg.Registerer), now: now,
		hosts: newHostCache(lookupHost, now), warn: newLogLimiter(refusalLogEvery),
	}, nil
}

// Register registers the LoadExchange service on r.
func (s *Server) Register(r grpc.ServiceRegistrar) { meshv1.RegisterLoadExchangeServer(r, s) }

// Report receives one sender's stream. Every message is validated whole
// before any of it is stored; an invalid one ends the stream with
// InvalidArgument naming the field, one past Merged's bounds with
// ResourceExhausted. A stream carries one replica's summaries only. A
// caller the Authorizer refuses, and with Members a peer that is no live
// member (by certificate identity or address), get PermissionDenied
// before anything is read; a summary from a replica that is not a live
// member (or is Self), or is not the peer, ends the stream with
// PermissionDenied naming it and is not stored.
// Services not registered or not owned here are dropped, the rest
// stored.
func (s *Server) Report(stream grpc.ClientStreamingServer[meshv1.Summary, meshv1.ReportAck]) error {
	ctx := stream.Context()
	if s.authz != nil {
		if err := s.authz.Authorize(ctx, authz.Mesh, ""); err != nil {
			s.metrics.summaries.WithLabelValues("denied").Inc()
			s.log.Warn("load exchange stream denied", "identity", authn.FromContext(ctx).String(), "err", err)
			return status.Error(codes.PermissionDenied, err.Error())
		}
	}
	var from sender
	if s.members != nil {
		f, reason, err := s.admitPeer(ctx)
		if err != nil {
			return s.refuse(reason, "", err)
		}
		from = f
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
		var live map[string]bool
		if s.members != nil {
			var m ownership.Member
			live, m = s.liveMembers(sum.Replica)
			if sum.Replica == s.self || !live[sum.Replica] {
				return s.refuse(reasonNotMember, sum.Replica, fmt.Errorf("replica %q is not a live member", sum.Replica))
			}
			if !s.bound(ctx, from, m) {
				if s.identityMissing(from, m) {
					return s.refuse(reasonIdentityMissing, sum.Replica, identityMissing(from, m))
				}
				return s.refuse(reasonNotBound, sum.Replica, notBound(from, m))
			}
		}
		replica = sum.Replica
		sum.Services = s.keep(sum)
		over, err := s.merged.add(sum, s.now(), live)
		if err != nil {
			s.metrics.summaries.WithLabelValues("full").Inc()
			s.log.Warn("load summary not stored", "replica", sum.Replica, "err", err)
			return status.Errorf(codes.ResourceExhausted, "%v", err)
		}
		if over > 0 {
			s.metrics.droppedServices.WithLabelValues(dropBudget).Add(float64(over))
			s.warnLimited(dropBudget, "load summary services past the sender's byte budget dropped", "replica", sum.Replica, "services", over)
		}
		s.metrics.summaries.WithLabelValues("accepted").Inc()
		accepted++
	}
}

// Refusal reasons (label reason of spillway_mesh_load_refused_total)
// and drop reasons (spillway_mesh_load_dropped_services_total): fixed
// sets, so the label stays bounded.
const (
	reasonNotMember    = "not_member"
	reasonPeerAddress  = "peer_address"  // a plaintext peer at no live member's address
	reasonPeerIdentity = "peer_identity" // a certificate no live member's record names
	reasonNotBound     = "not_bound"     // a live member, but not the stream's peer
	// a live member whose record names no identity, over a certificate,
	// from cluster version 2 on
	reasonIdentityMissing = "identity_missing"

	dropUnregistered = "unregistered"
	dropNotOwned     = "not_owned"
	dropBudget       = "budget"
)

// refusalLogEvery bounds the warnings of each refusal or drop reason to
// one per period; the rest are counted in the next one.
const refusalLogEvery = 10 * time.Second

// refuse counts and logs (rate-limited) a refused stream and returns
// its PermissionDenied status.
func (s *Server) refuse(reason, replica string, err error) error {
	s.metrics.summaries.WithLabelValues("denied").Inc()
	s.metrics.refused.WithLabelValues(reason).Inc()
	s.warnLimited(reason, "load exchange sender refused", "reason", reason, "replica", replica, "err", err)
	return status.Error(codes.PermissionDenied, "load exchange: "+err.Error())
}

func (s *Server) warnLimited(reason, msg string, args ...any) {
	if ok, suppressed := s.warn.allow(reason, s.now()); ok {
		s.log.Warn(msg, append(args, "suppressed", suppressed)...)
	}
}

// liveMembers returns the ids of the live members, and the member
// named id among them (the zero Member if none is).
func (s *Server) liveMembers(id string) (map[string]bool, ownership.Member) {
	ms := s.members.Members()
	live := make(map[string]bool, len(ms))
	var found ownership.Member
	for _, m := range ms {
		live[m.ID] = true
		if m.ID == id {
			found = m
		}
	}
	return live, found
}

// keep returns sum's services registered here and owned here (or in a
// shard sum lists), in order, counting the others. It reuses sum's
// array.
func (s *Server) keep(sum load.Summary) []load.ServiceSummary {
	in := sum.Services
	if s.services == nil {
		return in
	}
	routed := func(service string) bool {
		shard := s.services.Shard(service)
		for _, se := range sum.Shards {
			if se.Shard == shard {
				return true
			}
		}
		return false
	}
	out := in[:0]
	var unregistered, notOwned int
	for _, ss := range in {
		switch {
		case !s.services.Registered(ss.Service):
			unregistered++
		case !s.services.Owns(ss.Service) && !routed(ss.Service):
			notOwned++
		default:
			out = append(out, ss)
		}
	}
	clear(in[len(out):]) // no reference to what was dropped
	if unregistered > 0 {
		s.metrics.droppedServices.WithLabelValues(dropUnregistered).Add(float64(unregistered))
	}
	if notOwned > 0 {
		s.metrics.droppedServices.WithLabelValues(dropNotOwned).Add(float64(notOwned))
	}
	return out
}

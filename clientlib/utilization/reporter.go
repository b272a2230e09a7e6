package utilization

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// Source gives the reading to send; *Utilization is one.
type Source interface {
	Report() Report
}

var _ Source = (*Utilization)(nil)

// The server's bounds of a report's rps and latency_ms (load.MaxRPS,
// load.MaxLatencyMs): a report is clamped to them rather than refused.
const (
	maxRPS       = 1e7
	maxLatencyMs = 3.6e6
)

// Backoff bounds of a Reporter's reconnects.
const (
	backoffBase = 500 * time.Millisecond
	backoffMax  = 30 * time.Second
)

// Reporter streams a Source's reports to spillway's registry API
// (ReportUtilization), one every Interval. Reports are never queued: a
// report due while the stream is down is dropped, and the next one after
// the reconnect is current.
type Reporter struct {
	// Conn is a connection to the spillway registry's gRPC port, or nil
	// when Target is set. Run does not close it.
	Conn grpc.ClientConnInterface
	// Target is dialled with DialOptions when Conn is nil, e.g.
	// "127.0.0.1:18000".
	Target string
	// DialOptions dial Target; nil means plaintext (insecure
	// credentials). clientcreds.Config.DialOptions gives TLS/mTLS and a
	// bearer token.
	DialOptions []grpc.DialOption
	// TargetFunc, when non-nil and Conn is nil, is called before each
	// stream and overrides Target when it returns non-empty (e.g. the
	// heartbeat agent's active server, so both follow its failover).
	TargetFunc func() string
	// Service and EndpointID name the endpoint as the registry holds it;
	// required.
	Service, EndpointID string
	// LeaseID is the VM lease holding the endpoint (required by the
	// server for VM endpoints), or empty.
	LeaseID string
	// LeaseFunc, when non-nil, is called for every report and overrides
	// LeaseID (e.g. heartbeat.Agent.LeaseID, which changes when the agent
	// registers again). A report while it returns "" is dropped.
	LeaseFunc func() string
	// Interval between reports; zero means 1 s. The server accepts
	// 100 ms..5 min.
	Interval time.Duration
	// Source is read every Interval; non-nil.
	Source Source
	// Logger; nil discards.
	Logger *slog.Logger
}

// Run reports until ctx ends, reconnecting with capped exponential
// backoff and jitter after a failure (a refused report ends the server's
// stream, e.g. NotFound before the endpoint is registered). It returns
// ctx's error, or a configuration error at once.
func (r *Reporter) Run(ctx context.Context) error {
	if r.Service == "" || r.EndpointID == "" {
		return errors.New("utilization reporter config: Service and EndpointID are required")
	}
	if r.Source == nil {
		return errors.New("utilization reporter config: Source is nil")
	}
	interval := r.Interval
	if interval == 0 {
		interval = time.Second
	}
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if r.Conn == nil && r.Target == "" && r.TargetFunc == nil {
		return errNoTarget
	}
	var (
		cc     *grpc.ClientConn
		dialed string
	)
	defer func() {
		if cc != nil {
			cc.Close()
		}
	}()
	// connect returns the client for the next stream, dialling Target (or
	// TargetFunc's answer) again when it changed.
	connect := func() (registryv1.RegistryClient, error) {
		if r.Conn != nil {
			return registryv1.NewRegistryClient(r.Conn), nil
		}
		target := r.Target
		if r.TargetFunc != nil {
			if t := r.TargetFunc(); t != "" {
				target = t
			}
		}
		if target == "" {
			return nil, errNoTarget
		}
		if cc == nil || target != dialed {
			if cc != nil {
				cc.Close()
			}
			opts := r.DialOptions
			if len(opts) == 0 {
				opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			}
			c, err := grpc.NewClient(target, opts...)
			if err != nil {
				cc = nil
				return nil, fmt.Errorf("utilization reporter: dial %s: %w", target, err)
			}
			cc, dialed = c, target
		}
		return registryv1.NewRegistryClient(cc), nil
	}
	log = log.With("service", r.Service, "endpoint", r.EndpointID)
	backoff := backoffBase
	for {
		var sent int
		client, err := connect()
		if err == nil {
			sent, err = r.stream(ctx, client, interval)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if sent > 0 {
			backoff = backoffBase
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		log.Warn("utilization stream failed", "sent", sent, "retry_in", wait, "err", err)
		backoff = min(2*backoff, backoffMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// stream sends reports on one stream until it fails or ctx ends; it
// returns how many it sent.
func (r *Reporter) stream(ctx context.Context, client registryv1.RegistryClient, interval time.Duration) (int, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := client.ReportUtilization(sctx)
	if err != nil {
		return 0, err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	msg := &registryv1.UtilizationReport{Service: r.Service, EndpointId: r.EndpointID, LeaseId: r.LeaseID,
		IntervalMs: uint32(interval / time.Millisecond)}
	sent := 0
	for {
		if r.LeaseFunc != nil {
			msg.LeaseId = r.LeaseFunc()
		}
		rep := r.Source.Report()
		msg.Cpu, msg.InFlight, msg.Limit = rep.CPU, uint32(rep.InFlight), uint32(rep.Limit)
		msg.Rps = min(rep.RPS, maxRPS)
		msg.Eps, msg.LatencyMs = min(rep.EPS, msg.Rps), min(float64(rep.Latency)/float64(time.Millisecond), maxLatencyMs)
		if r.LeaseFunc != nil && msg.LeaseId == "" {
			// No lease yet (or between leases): drop this report.
		} else if err := s.Send(msg); err != nil {
			if err == io.EOF { // the server ended the stream: its status says why
				_, err = s.CloseAndRecv()
			}
			return sent, err
		} else {
			sent++
		}
		select {
		case <-ctx.Done():
			s.CloseAndRecv()
			return sent, ctx.Err()
		case <-tick.C:
		}
	}
}

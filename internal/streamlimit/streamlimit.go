// Package streamlimit bounds how many gRPC streams one caller holds open
// on a server.
//
// HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS (grpc.MaxConcurrentStreams)
// bounds the streams of one connection, but a caller can open more
// connections. A Limiter counts the open streams of each caller across
// all its connections and refuses one more beyond PerIdentity with
// codes.ResourceExhausted. The caller is the identity authentication put
// in the stream's context (security/authn); callers without credentials
// are told apart by their peer's IP address, so that one anonymous host
// cannot take the place of every other (a deployment without
// authentication has only anonymous callers).
//
// Its interceptor must run after authentication's in the server's chain:
// before, every caller looks anonymous. A caller's entry is deleted when
// its last stream ends, so the Limiter holds at most one entry per open
// stream, and its metrics carry no identity.
package streamlimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/security/authn"
)

// warnEvery is the shortest interval between two refusal warnings in the
// log; the metric counts every refusal.
const warnEvery = 10 * time.Second

// Config bounds the streams of one caller.
type Config struct {
	// PerIdentity is the most streams one identity (or one anonymous
	// peer IP) holds open at once; 0 is no limit.
	PerIdentity int
	// Setting names PerIdentity in refusals and logs, e.g.
	// "--grpc-max-streams-per-identity"; "" names it "the per-identity
	// stream limit".
	Setting string
	// Logger receives a warning, at most every 10s, when a stream is
	// refused; nil discards.
	Logger *slog.Logger
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.PerIdentity < 0 {
		return fmt.Errorf("PerIdentity: %d, want >= 0 (0: no limit)", c.PerIdentity)
	}
	return nil
}

// Stats are a Limiter's counts.
type Stats struct {
	Open       int    // streams open now
	Identities int    // callers with at least one stream open now
	Refused    uint64 // streams refused since New
}

// key is one caller: an authenticated identity by name, an anonymous one
// by its peer's IP (the zero Addr when the peer has none).
type key struct {
	name string
	addr netip.Addr
}

// Limiter counts open streams per caller. Its methods are safe for
// concurrent use.
type Limiter struct {
	// Read-only after New.
	limit   int
	setting string
	log     *slog.Logger

	// mu guards open and total.
	mu    sync.Mutex
	open  map[key]int // streams open per caller; no entry at zero
	total int         // sum of open

	refused  atomic.Uint64
	lastWarn atomic.Int64 // unix nanoseconds of the last refusal warning
}

// New returns a Limiter for cfg.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{limit: cfg.PerIdentity, setting: cfg.Setting, log: cfg.Logger, open: make(map[key]int)}
	if l.setting == "" {
		l.setting = "the per-identity stream limit"
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	return l, nil
}

// Stats reads the counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.total, Identities: len(l.open), Refused: l.refused.Load()}
}

// StreamServerInterceptor counts each stream against its caller while
// its handler runs, and fails one beyond the limit with
// codes.ResourceExhausted before the handler runs. Put it after
// authentication's interceptor.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		k, id := callerOf(ctx)
		if !l.acquire(k) {
			return l.refuse(k, id)
		}
		defer l.release(k)
		return handler(srv, ss)
	}
}

// callerOf is the key of ctx's caller and its identity.
func callerOf(ctx context.Context) (key, authn.Identity) {
	id := authn.FromContext(ctx)
	if !id.Anonymous() {
		return key{name: id.Name}, id
	}
	var k key
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
			k.addr = ap.Addr().Unmap()
		}
	}
	return k, id
}

// acquire counts one more stream for k, unless k holds the limit.
func (l *Limiter) acquire(k key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.open[k]
	if l.limit > 0 && n >= l.limit {
		return false
	}
	l.open[k] = n + 1
	l.total++
	return true
}

// release ends one stream of k; the entry goes at zero.
func (l *Limiter) release(k key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[k] - 1; n > 0 {
		l.open[k] = n
	} else {
		delete(l.open, k)
	}
	l.total--
}

// refuse counts a refusal, warns at most every warnEvery, and returns the
// caller's error.
func (l *Limiter) refuse(k key, id authn.Identity) error {
	l.refused.Add(1)
	who := id.String()
	if id.Anonymous() {
		who = "anonymous caller"
		if k.addr.IsValid() {
			who += " " + k.addr.String()
		}
	}
	now := time.Now().UnixNano()
	if last := l.lastWarn.Load(); now-last >= int64(warnEvery) && l.lastWarn.CompareAndSwap(last, now) {
		l.log.Warn("gRPC stream refused: per-identity stream limit", "caller", who, "limit", l.limit, "setting", l.setting)
	}
	return status.Errorf(codes.ResourceExhausted, "%s already has %d gRPC streams open, the most one identity may (%s); close streams or raise the limit", who, l.limit, l.setting)
}

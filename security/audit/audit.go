package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/peer"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// KeyPrefix is where entries live in the KV:
// audit/<time, UTC, fixed width>-<replica>-<sequence>.
const KeyPrefix = "audit/"

// Outcomes of an entry.
const (
	OutcomeAllowed = "allowed" // the change was made
	OutcomeDenied  = "denied"  // the policy refused it; nothing changed
	OutcomeFailed  = "failed"  // allowed, but it failed (storage); nothing changed
)

// MethodFile is the authn.Method of a change made by a file on disk (a
// --service-config-dir file): the identity is "file:PATH".
const MethodFile authn.Method = "file"

// Bounds on the fields of an entry, in bytes. A longer value is cut at a
// UTF-8 boundary and ends with a marker saying how long it was.
const (
	MaxValue  = 4 << 10 // Old and New
	MaxField  = 512     // Identity, Method, Peer, Action, Resource, Outcome
	MaxReason = 1 << 10
)

// Defaults of Config.
const (
	DefaultKeep         = 10_000
	DefaultMaxAge       = 30 * 24 * time.Hour
	DefaultTrimEvery    = 10 * time.Minute
	DefaultWriteTimeout = 5 * time.Second
	DefaultDeniedRate   = 20  // stored denials per second, per Log
	DefaultDeniedBurst  = 200 // stored denials at once
)

// MaxLimit bounds the entries one List returns.
const MaxLimit = 1000

// Entry is one audited event: who did (or was refused) what, when, from
// where, and the value before and after.
type Entry struct {
	Time time.Time `json:"time"`
	// Identity is authn.Identity.String(): "anonymous", a certificate's
	// SAN, a token's identity name, or "file:PATH".
	Identity string `json:"identity"`
	// Method is how Identity was proved (authn.Method).
	Method string `json:"method,omitempty"`
	// Peer is the caller's remote address; "" for a file.
	Peer string `json:"peer,omitempty"`
	// Action is an authz.Action ("panic", "config", ...) or "policy_reload".
	Action string `json:"action"`
	// Resource is the service acted on; "" for global actions.
	Resource string `json:"resource,omitempty"`
	// Outcome is OutcomeAllowed, OutcomeDenied or OutcomeFailed.
	Outcome string `json:"outcome"`
	// Reason says why a denial or failure happened, or what kind of
	// change it was ("delete", "undelete").
	Reason string `json:"reason,omitempty"`
	// Old and New are short renderings of the value before and after
	// (at most MaxValue bytes each).
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
	// Replica is the replica that recorded the entry.
	Replica string `json:"replica,omitempty"`
}

// ActionPolicyReload is the action of an entry for a reload of the
// --authz-file policy.
const ActionPolicyReload = "policy_reload"

// Recorder records audit entries. Record never fails and never blocks
// longer than the store's write timeout; it is safe for concurrent use.
// *Log implements it; callers declare their own copy of this interface.
type Recorder interface {
	Record(ctx context.Context, e Entry)
}

var _ Recorder = (*Log)(nil)

// Config configures a Log.
type Config struct {
	// KV keeps the entries, shared by every replica; nil keeps them in a
	// memory ring of Keep entries (this process only).
	KV systemstore.KV
	// Replica names this process in the keys and entries; "" picks a
	// random name.
	Replica string
	// Keep is how many entries are kept (the newest); zero means
	// DefaultKeep.
	Keep int
	// MaxAge drops older entries; zero means DefaultMaxAge.
	MaxAge time.Duration
	// TrimEvery is how often Run trims; zero means DefaultTrimEvery.
	TrimEvery time.Duration
	// WriteTimeout bounds one store write; zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// DeniedRate and DeniedBurst bound how many denials per second are
	// stored (all are logged), so that a flood of refused calls does not
	// turn into a flood of store writes; zero means the defaults.
	DeniedRate  float64
	DeniedBurst int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives one line per entry; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Log records entries as slog lines and in the KV, and lists them.
type Log struct {
	// Read-only after New.
	kv           systemstore.KV
	replica      string // as configured, in entries
	keyName      string // replica with only key characters, in keys
	keep         int
	maxAge       time.Duration
	trimEvery    time.Duration
	writeTimeout time.Duration
	now          func() time.Time
	log          *slog.Logger

	seq atomic.Uint64

	recorded   *prometheus.CounterVec
	failures   prometheus.Counter
	suppressed prometheus.Counter

	// mu guards the fields below.
	mu     sync.Mutex
	ring   []Entry // KV nil: the newest entries, oldest first
	tokens float64 // denials that may be stored now
	last   time.Time
	rate   float64
	burst  float64
}

// New validates cfg and returns a Log.
func New(cfg Config) (*Log, error) {
	switch {
	case cfg.Keep < 0:
		return nil, fmt.Errorf("audit config: Keep: %d is negative", cfg.Keep)
	case cfg.MaxAge < 0:
		return nil, fmt.Errorf("audit config: MaxAge: %v is negative", cfg.MaxAge)
	case cfg.TrimEvery < 0:
		return nil, fmt.Errorf("audit config: TrimEvery: %v is negative", cfg.TrimEvery)
	case cfg.WriteTimeout < 0:
		return nil, fmt.Errorf("audit config: WriteTimeout: %v is negative", cfg.WriteTimeout)
	case cfg.DeniedRate < 0:
		return nil, fmt.Errorf("audit config: DeniedRate: %v is negative", cfg.DeniedRate)
	case cfg.DeniedBurst < 0:
		return nil, fmt.Errorf("audit config: DeniedBurst: %d is negative", cfg.DeniedBurst)
	}
	if cfg.Replica == "" {
		var b [4]byte
		rand.Read(b[:])
		cfg.Replica = hex.EncodeToString(b[:])
	}
	if keySafe(cfg.Replica) == "" {
		return nil, fmt.Errorf("audit config: Replica: %q has no letter or digit", cfg.Replica)
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.TrimEvery == 0 {
		cfg.TrimEvery = DefaultTrimEvery
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.DeniedRate == 0 {
		cfg.DeniedRate = DefaultDeniedRate
	}
	if cfg.DeniedBurst == 0 {
		cfg.DeniedBurst = DefaultDeniedBurst
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Log{
		kv: cfg.KV, replica: Truncate(cfg.Replica, MaxField), keyName: keySafe(cfg.Replica), keep: cfg.Keep, maxAge: cfg.MaxAge, trimEvery: cfg.TrimEvery,
		writeTimeout: cfg.WriteTimeout, now: cfg.Now, log: cfg.Logger,
		rate: cfg.DeniedRate, burst: float64(cfg.DeniedBurst), tokens: float64(cfg.DeniedBurst),
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_audit_entries_total",
			Help: "Audit entries recorded, by outcome (allowed, denied, failed).",
		}, []string{"outcome"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_audit_write_failures_total",
			Help: "Audit entries that could not be written to the store (logged only).",
		}),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_audit_denials_not_stored_total",
			Help: "Denials over the stored-denial rate: logged, not written to the store.",
		}),
	}
	for _, o := range []string{OutcomeAllowed, OutcomeDenied, OutcomeFailed} {
		l.recorded.WithLabelValues(o)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{l.recorded, l.failures, l.suppressed} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("audit metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Replica is the name this Log records under.
func (l *Log) Replica() string { return l.replica }

// Record completes e (Time, Identity, Method and Peer from ctx when
// unset), bounds its fields, logs it (Info; Warn for a denial or a
// failure) and stores it. It never fails: a store error is logged and
// counted in spillway_audit_write_failures_total. The write is bounded by
// the write timeout and is not cut short when ctx is canceled.
func (l *Log) Record(ctx context.Context, e Entry) {
	if l == nil {
		return
	}
	e = l.complete(ctx, e)
	l.recorded.WithLabelValues(metricOutcome(e.Outcome)).Inc()
	level := slog.LevelInfo
	if e.Outcome != OutcomeAllowed {
		level = slog.LevelWarn
	}
	l.log.Log(ctx, level, "audit",
		"identity", e.Identity, "method", e.Method, "peer", e.Peer,
		"action", e.Action, "resource", e.Resource, "outcome", e.Outcome,
		"reason", e.Reason, "old", e.Old, "new", e.New, "time", e.Time)
	if e.Outcome == OutcomeDenied && !l.allowDenied(e.Time) {
		l.suppressed.Inc()
		return
	}
	if l.kv == nil {
		l.mu.Lock()
		l.ring = append(l.ring, e)
		if n := len(l.ring) - l.keep; n > 0 {
			l.ring = slices.Delete(l.ring, 0, n)
		}
		l.mu.Unlock()
		return
	}
	b, err := json.Marshal(e)
	if err == nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.writeTimeout)
		_, err = l.kv.Put(wctx, l.key(e.Time), b)
		cancel()
	}
	if err != nil {
		l.failures.Inc()
		l.log.Error("audit entry not stored", "action", e.Action, "identity", e.Identity, "err", err)
	}
}

func metricOutcome(o string) string {
	switch o {
	case OutcomeAllowed, OutcomeDenied:
		return o
	}
	return OutcomeFailed
}

// allowDenied takes one token of the stored-denial bucket.
func (l *Log) allowDenied(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		if d := now.Sub(l.last); d > 0 {
			l.tokens = min(l.burst, l.tokens+d.Seconds()*l.rate)
		}
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// complete fills what ctx knows and bounds every field.
func (l *Log) complete(ctx context.Context, e Entry) Entry {
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	e.Time = e.Time.UTC()
	if e.Identity == "" {
		id := authn.FromContext(ctx)
		e.Identity, e.Method = id.String(), string(id.Method)
	}
	if e.Peer == "" {
		e.Peer = PeerFromContext(ctx)
	}
	if e.Outcome == "" {
		e.Outcome = OutcomeAllowed
	}
	e.Replica = l.replica
	e.Identity = Truncate(e.Identity, MaxField)
	e.Method = Truncate(e.Method, MaxField)
	e.Peer = Truncate(e.Peer, MaxField)
	e.Action = Truncate(e.Action, MaxField)
	e.Resource = Truncate(e.Resource, MaxField)
	e.Outcome = Truncate(e.Outcome, MaxField)
	e.Reason = Truncate(e.Reason, MaxReason)
	e.Old = Truncate(e.Old, MaxValue)
	e.New = Truncate(e.New, MaxValue)
	return e
}

// Truncate returns s if it has at most max bytes; else its start, cut at
// a UTF-8 boundary, and "…(N bytes)", at most max bytes in all.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := "…(" + strconv.Itoa(len(s)) + " bytes)"
	n := max - len(marker)
	if n < 0 {
		n = 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + marker
}

// timeLayout is fixed width, so that keys sort by time.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func (l *Log) key(t time.Time) string {
	return KeyPrefix + t.UTC().Format(timeLayout) + "-" + l.keyName + "-" + strconv.FormatUint(l.seq.Add(1), 10)
}

// timeOfKey parses the time a key starts with.
func timeOfKey(key string) (time.Time, bool) {
	rest := strings.TrimPrefix(key, KeyPrefix)
	if len(rest) < len(timeLayout) {
		return time.Time{}, false
	}
	t, err := time.Parse(timeLayout, rest[:len(timeLayout)])
	return t, err == nil
}

// keySafe keeps the characters a KV key allows in one segment.
func keySafe(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '=', c == '@', c == '+':
			b.WriteByte(c)
		case c == '.', c == ':', c == '/':
			b.WriteByte('_')
		}
	}
	return Truncate(b.String(), 64)
}

// ErrInvalid is a bad argument of List.
var ErrInvalid = errors.New("invalid argument")

// List returns up to limit entries (1 to MaxLimit) recorded at or after
// since (zero: any), newest first. With a KV it reads the store, so it
// sees every replica's entries.
func (l *Log) List(ctx context.Context, since time.Time, limit int) ([]Entry, error) {
	if limit < 1 || limit > MaxLimit {
		return nil, fmt.Errorf("limit: %d, want 1 to %d: %w", limit, MaxLimit, ErrInvalid)
	}
	out := []Entry{}
	if l.kv == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := len(l.ring) - 1; i >= 0 && len(out) < limit; i-- {
			if l.ring[i].Time.Before(since) {
				break
			}
			out = append(out, l.ring[i])
		}
		return out, nil
	}
	kvs, _, err := l.kv.List(ctx, l.listPrefix(since))
	if err != nil {
		return nil, fmt.Errorf("audit: list %s: %w: %w", KeyPrefix, systemstore.ErrUnavailable, err)
	}
	for i := len(kvs) - 1; i >= 0 && len(out) < limit; i-- {
		if t, ok := timeOfKey(kvs[i].Key); ok && t.Before(since) {
			break
		}
		var e Entry
		if err := json.Unmarshal(kvs[i].Value, &e); err != nil {
			l.log.Warn("undecodable audit entry skipped", "key", kvs[i].Key, "err", err)
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// listPrefix narrows the listing to the keys from since to an hour from
// now (the slack covers replicas' clock skew): every key between two
// strings starts with their common start.
func (l *Log) listPrefix(since time.Time) string {
	if since.IsZero() {
		return KeyPrefix
	}
	a := since.UTC().Format(timeLayout)
	b := l.now().Add(time.Hour).UTC().Format(timeLayout)
	if a > b {
		return KeyPrefix // since is in the future: List filters
	}
	n := 0
	for n < len(a) && a[n] == b[n] {
		n++
	}
	return KeyPrefix + a[:n] // one "." at most: a valid prefix
}

// Trim deletes the entries beyond the newest Keep and those older than
// MaxAge, and returns how many it deleted. Every replica may trim: a
// delete of an entry another replica deleted already is not an error.
func (l *Log) Trim(ctx context.Context) (int, error) {
	cutoff := l.now().Add(-l.maxAge)
	if l.kv == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		n := 0
		for n < len(l.ring) && l.ring[n].Time.Before(cutoff) {
			n++
		}
		l.ring = slices.Delete(l.ring, 0, n)
		return n, nil
	}
	kvs, _, err := l.kv.List(ctx, KeyPrefix)
	if err != nil {
		return 0, fmt.Errorf("audit: trim: list %s: %w", KeyPrefix, err)
	}
	drop := max(0, len(kvs)-l.keep) // the oldest, by key
	for drop < len(kvs) {
		if t, ok := timeOfKey(kvs[drop].Key); ok && !t.Before(cutoff) {
			break
		}
		drop++
	}
	var errs []error
	deleted := 0
	for _, kv := range kvs[:drop] {
		if _, err := l.kv.Delete(ctx, kv.Key); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted++
	}
	if err := errors.Join(errs...); err != nil {
		return deleted, fmt.Errorf("audit: trim: %w", err)
	}
	return deleted, nil
}

// Run trims every TrimEvery until ctx ends, and once at the start.
func (l *Log) Run(ctx context.Context) error {
	t := time.NewTicker(l.trimEvery)
	defer t.Stop()
	for {
		if n, err := l.Trim(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn("audit trim failed", "err", err)
		} else if n > 0 {
			l.log.Info("audit entries trimmed", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Denied records a refused call: the shape of the authz policy's denial
// hook. identity is the caller as the denial names it.
func (l *Log) Denied(ctx context.Context, identity, action, resource, reason string) {
	id := authn.FromContext(ctx)
	e := Entry{Identity: identity, Method: string(id.Method), Action: action, Resource: resource, Outcome: OutcomeDenied, Reason: reason}
	if identity == "" {
		e.Identity = id.String()
	}
	l.Record(ctx, e)
}

// DeniedError records a refused call from the *authz.Denied error the
// policy returned (or any error, whose text is the reason).
func (l *Log) DeniedError(ctx context.Context, action authz.Action, resource string, err error) {
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	l.Denied(ctx, "", string(action), resource, reason)
}

// PolicyReloaded records a reload of the policy file path: old and new
// are short renderings (e.g. the SHA-256 of the file, or its text); a
// non-nil err is a refused reload (the old policy stays), outcome failed.
func (l *Log) PolicyReloaded(ctx context.Context, path, old, new string, err error) {
	e := Entry{Identity: "file:" + path, Method: string(MethodFile), Action: ActionPolicyReload, Old: old, New: new, Outcome: OutcomeAllowed}
	if err != nil {
		e.Outcome, e.Reason = OutcomeFailed, err.Error()
	}
	l.Record(ctx, e)
}

type peerKey struct{}

// WithPeer returns ctx carrying addr, the caller's remote address, for
// the entries recorded with it (HTTP: r.RemoteAddr).
func WithPeer(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, peerKey{}, addr)
}

// PeerFromContext returns the address WithPeer put in ctx, else the gRPC
// peer's address, else "".
func PeerFromContext(ctx context.Context) string {
	if s, ok := ctx.Value(peerKey{}).(string); ok && s != "" {
		return s
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// HTTPPeer wraps h so that every request's context carries its
// RemoteAddr (WithPeer).
func HTTPPeer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(WithPeer(r.Context(), r.RemoteAddr)))
	})
}

package authz

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/security/internal/filepoll"
)

// ReloaderConfig configures a Reloader.
type ReloaderConfig struct {
	// Path is the --authz-file; "" serves DefaultPolicy and never
	// reloads.
	Path string
	// Interval between reads of Path; 0 is 2s.
	Interval time.Duration
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer gets spillway_authz_reload_failures_total; nil registers
	// nothing.
	Registerer prometheus.Registerer
	// OnReload, or nil, is called with the file's previous and new
	// content after each reload that swapped a new policy in (not the
	// first load), for the audit log. Called from Check, one at a time.
	OnReload func(old, new string)
	// OnDeny, or nil, is called for every refusal Authorize returns,
	// before it returns (the audit log's denied entries). It must not
	// block for long: it runs on the caller's request.
	OnDeny func(ctx context.Context, d *Denied)
}

// Reloader serves the current policy of --authz-file, reloaded when the
// file changes: a file that fails to read or parse keeps the previous
// policy, is logged and counted. It implements the APIs' Authorizer.
// Safe for concurrent use.
type Reloader struct {
	cfg      ReloaderConfig // read-only after NewReloader
	poll     *filepoll.Poller
	failures prometheus.Counter

	policy atomic.Pointer[Policy]
	// text is the content of the policy in force, for OnReload; written
	// by Check only (serialised by the poller).
	text string
}

// NewReloader loads cfg.Path (a bad file is an error) or, without one,
// DefaultPolicy. Run keeps it fresh.
func NewReloader(cfg ReloaderConfig) (*Reloader, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{cfg: cfg, failures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_authz_reload_failures_total",
		Help: "Reloads of --authz-file that failed (unreadable or invalid) and kept the previous policy.",
	})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.failures); err != nil {
			return nil, fmt.Errorf("authz metrics: %w", err)
		}
	}
	if cfg.Path == "" {
		r.policy.Store(DefaultPolicy())
		r.text = DefaultYAML
		return r, nil
	}
	b, err := os.ReadFile(cfg.Path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(cfg.Path, b)
	if err != nil {
		return nil, err
	}
	r.policy.Store(p)
	r.text = string(b)
	r.poll = filepoll.New(filepoll.Config{
		Path: cfg.Path, Interval: cfg.Interval, Apply: r.apply,
		Failed: func(error) { r.failures.Inc() },
		Logger: cfg.Logger.With("file", "authz"),
	})
	r.poll.Seen(b)
	return r, nil
}

func (r *Reloader) apply(b []byte) error {
	p, err := Parse(r.cfg.Path, b)
	if err != nil {
		return err
	}
	old := r.text
	r.policy.Store(p)
	r.text = string(b)
	if r.cfg.OnReload != nil {
		r.cfg.OnReload(old, r.text)
	}
	return nil
}

// Policy is the policy in force.
func (r *Reloader) Policy() *Policy { return r.policy.Load() }

// Authorize is Policy().Authorize, and hands a refusal to OnDeny.
func (r *Reloader) Authorize(ctx context.Context, a Action, resource string) error {
	err := r.policy.Load().Authorize(ctx, a, resource)
	if d, ok := err.(*Denied); ok && r.cfg.OnDeny != nil {
		r.cfg.OnDeny(ctx, d)
	}
	return err
}

// Check reads the file once and swaps in its policy if it changed and
// parses; it reports whether it did. Run calls it every interval.
func (r *Reloader) Check() bool {
	if r.poll == nil {
		return false
	}
	return r.poll.Check()
}

// Run reloads the file every interval until ctx ends; without a file it
// returns at once.
func (r *Reloader) Run(ctx context.Context) {
	if r.poll == nil {
		return
	}
	r.poll.Run(ctx)
}

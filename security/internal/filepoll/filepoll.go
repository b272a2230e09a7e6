// Package filepoll reloads a small file when its content changes: the
// token file and the policy file of spillway's security packages. It
// polls (reads the whole file each interval and compares a digest), so it
// sees an atomic rename, an in-place write and a Kubernetes ConfigMap
// symlink swap alike, at the cost of one small read per interval.
package filepoll

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultInterval is how often a file is read when Config.Interval is 0.
const DefaultInterval = 2 * time.Second

// Config is what a Poller watches and what it calls.
type Config struct {
	// Path is the file. Required.
	Path string
	// Interval between reads; 0 is DefaultInterval.
	Interval time.Duration
	// Apply parses content and, when it is good, swaps it in. An error
	// keeps what was applied before. Called from Check only, never
	// concurrently.
	Apply func(content []byte) error
	// Failed is called (with the error) after a read or an Apply that
	// failed; nil ignores failures beyond the log.
	Failed func(err error)
	// Logger, or nil for none.
	Logger *slog.Logger
}

// Poller reads Config.Path and calls Apply when its content changed.
type Poller struct {
	cfg Config // read-only after New

	// mu serialises Check; last is the digest of the content last handed
	// to Apply (good or bad), so a bad file is reported once, not every
	// interval.
	mu   sync.Mutex
	last [sha256.Size]byte
}

// New returns a poller; the caller loads the first content itself (so a
// bad file fails the start) and passes it to Seen.
func New(cfg Config) *Poller {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Poller{cfg: cfg}
}

// Seen records content as applied, so Check calls Apply only when the
// file differs from it.
func (p *Poller) Seen(content []byte) {
	p.mu.Lock()
	p.last = sha256.Sum256(content)
	p.mu.Unlock()
}

// Check reads the file once and applies it when it changed. It reports
// whether Apply was called and succeeded.
func (p *Poller) Check() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := os.ReadFile(p.cfg.Path)
	if err != nil {
		// A missing file mid-rotation is not a new content: report it,
		// keep the old, and retry next interval.
		p.cfg.Logger.Warn("reload failed, keeping the previous content", "path", p.cfg.Path, "err", err)
		if p.cfg.Failed != nil {
			p.cfg.Failed(err)
		}
		return false
	}
	sum := sha256.Sum256(b)
	if sum == p.last {
		return false
	}
	p.last = sum
	if err := p.cfg.Apply(b); err != nil {
		p.cfg.Logger.Error("reload failed, keeping the previous content", "path", p.cfg.Path, "err", err)
		if p.cfg.Failed != nil {
			p.cfg.Failed(err)
		}
		return false
	}
	p.cfg.Logger.Info("reloaded", "path", p.cfg.Path)
	return true
}

// Run checks the file every interval until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Check()
		}
	}
}

package migration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authz"
)

// Storage keeps settings across restarts. It is called from many
// goroutines at once and must be safe for that; PutSetting returns only
// once the value is durable. *systemstore.Bolt and *systemstore.Memory implement
// it.
type Storage interface {
	PutSetting(ctx context.Context, key string, value []byte) error
	// Settings returns every stored setting.
	Settings(ctx context.Context) (map[string][]byte, error)
}

// FlagStore is where the panic flag is published: the registry store, whose
// snapshots the DNS resolver serves as TXT _xds.<domain>. *registry.Store
// implements it.
type FlagStore interface {
	Apply(ops ...registry.Op) (uint64, error)
}

var _ FlagStore = (*registry.Store)(nil)

// Recorder receives an audit entry for every change of the panic flag or
// the rollout config, and for every one that failed: who (the identity
// in the change's context), the old and the new value. Record must not
// block for long and never fails the change. *audit.Log implements it.
type Recorder interface {
	Record(ctx context.Context, e audit.Entry)
}

var _ Recorder = (*audit.Log)(nil)

// Keys of the settings a Controller stores. Values are JSON.
const (
	SettingPanic   = "migration/panic"
	SettingRollout = "migration/rollout"
)

// MaxConfigBytes bounds the YAML of a rollout config.
const MaxConfigBytes = 1 << 20

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	// Store receives the panic flag; non-nil.
	Store FlagStore
	// Storage keeps the panic flag and the rollout config; non-nil.
	Storage Storage
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives spillway_panic and spillway_rollout_version; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// Now stamps changes; nil means time.Now.
	Now func() time.Time
	// Audit records every change and failed change; nil records none.
	Audit Recorder
}

// PanicState is the panic flag.
type PanicState struct {
	// Panic true sends every client to DNS: TXT _xds.<domain> says xds=off.
	Panic bool
	// Changed is the time of the last change; zero if it never changed.
	Changed time.Time
}

// XDS is what TXT _xds.<domain> says: "off" in a panic, else "on".
func (p PanicState) XDS() string {
	if p.Panic {
		return "off"
	}
	return "on"
}

// Rollout is the rollout config in force. Values are immutable.
type Rollout struct {
	// YAML is the config as it was set, byte for byte; "" if never set.
	YAML string
	// Config is YAML parsed; non-nil, without rules if never set.
	Config *Config
	// Version grows by one with every change; 0 if never set.
	Version uint64
	// Changed is the time of the last change; zero if never set.
	Changed time.Time
}

// Controller keeps the panic flag and the rollout config: durable in
// Storage, the flag published in the FlagStore.
type Controller struct {
	// Read-only after NewController.
	store   FlagStore
	storage Storage
	log     *slog.Logger
	now     func() time.Time
	audit   Recorder

	// mu serializes changes (store, then publish); readers do not take it.
	mu      sync.Mutex
	flag    atomic.Pointer[PanicState]
	rollout atomic.Pointer[Rollout]
}

// NewController validates cfg and returns a Controller with the panic flag
// off and no rollout config; call Restore before serving.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Store == nil {
		return nil, errors.New("migration controller config: Store is nil")
	}
	if cfg.Storage == nil {
		return nil, errors.New("migration controller config: Storage is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{store: cfg.Store, storage: cfg.Storage, log: cfg.Logger, now: cfg.Now, audit: cfg.Audit}
	c.flag.Store(&PanicState{})
	c.rollout.Store(&Rollout{Config: &Config{}})
	if cfg.Registerer != nil {
		for _, m := range []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "spillway_panic",
				Help: "1 while the panic flag is on (TXT _xds says xds=off: every client on DNS), else 0.",
			}, func() float64 {
				if c.Panic().Panic {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "spillway_rollout_version",
				Help: "Version of the rollout config in force; 0 if none was ever set.",
			}, func() float64 { return float64(c.Rollout().Version) }),
		} {
			if err := cfg.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("migration controller metrics: %w", err)
			}
		}
	}
	return c, nil
}

// panicRecord and rolloutRecord are the stored forms.
type panicRecord struct {
	Panic   bool      `json:"panic"`
	Changed time.Time `json:"changed"`
}

type rolloutRecord struct {
	YAML    string    `json:"yaml"`
	Version uint64    `json:"version"`
	Changed time.Time `json:"changed"`
}

// Restore loads the stored panic flag (publishing it in the store) and
// rollout config. Call it once, before the store is marked synced and
// before serving. It fails only when Storage cannot be read; a stored value
// that does not decode, or a stored config that no longer parses, is logged
// and left out (the flag stays off; nobody is eligible), so that DNS keeps
// being served.
func (c *Controller) Restore(ctx context.Context) error {
	settings, err := c.storage.Settings(ctx)
	if err != nil {
		return fmt.Errorf("restore migration settings: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := settings[SettingPanic]; ok {
		var r panicRecord
		if err := json.Unmarshal(b, &r); err != nil {
			c.log.Error("skipped undecodable panic flag", "key", SettingPanic, "err", err)
		} else {
			p := PanicState{Panic: r.Panic, Changed: r.Changed}
			if _, err := c.store.Apply(registry.SetFlag(registry.FlagXDS, p.XDS())); err != nil {
				return fmt.Errorf("restore panic flag: %w", err)
			}
			c.flag.Store(&p)
		}
	}
	if b, ok := settings[SettingRollout]; ok {
		var r rolloutRecord
		if err := json.Unmarshal(b, &r); err != nil {
			c.log.Error("skipped undecodable rollout config", "key", SettingRollout, "err", err)
		} else if cfg, err := Parse([]byte(r.YAML)); err != nil {
			// Keep the version so that the next change still grows it.
			c.log.Error("stored rollout config does not parse: nobody is eligible until it is set again",
				"version", r.Version, "err", err)
			c.rollout.Store(&Rollout{Config: &Config{}, Version: r.Version, Changed: r.Changed})
		} else {
			c.rollout.Store(&Rollout{YAML: r.YAML, Config: cfg, Version: r.Version, Changed: r.Changed})
		}
	}
	p, ro := c.Panic(), c.Rollout()
	c.log.Info("restored migration settings", "panic", p.Panic, "xds", p.XDS(), "rollout_version", ro.Version, "rules", len(ro.Config.Rules))
	return nil
}

// Panic returns the panic flag.
func (c *Controller) Panic() PanicState { return *c.flag.Load() }

// Rollout returns the rollout config in force.
func (c *Controller) Rollout() Rollout { return *c.rollout.Load() }

// SetPanic turns the panic flag on or off: stored durably, then published.
// Setting the value in force changes nothing and returns changed false. An
// error leaves the flag as it was.
func (c *Controller) SetPanic(ctx context.Context, on bool) (_ PanicState, changed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.Panic()
	if cur.Panic == on {
		return cur, false, nil
	}
	defer func() { c.record(ctx, authz.Panic, onOff(cur.Panic), onOff(on), "", err) }()
	next := PanicState{Panic: on, Changed: c.now().UTC()}
	b, err := json.Marshal(panicRecord{Panic: next.Panic, Changed: next.Changed})
	if err != nil {
		return cur, false, fmt.Errorf("set panic flag: %w", err)
	}
	if err := c.storage.PutSetting(ctx, SettingPanic, b); err != nil {
		return cur, false, fmt.Errorf("set panic flag: %w", err)
	}
	if _, err := c.store.Apply(registry.SetFlag(registry.FlagXDS, next.XDS())); err != nil {
		// Cannot happen with "on" or "off"; undo the stored value anyway.
		old, _ := json.Marshal(panicRecord{Panic: cur.Panic, Changed: cur.Changed})
		if uerr := c.storage.PutSetting(context.WithoutCancel(ctx), SettingPanic, old); uerr != nil {
			c.log.Error("undo of the stored panic flag failed", "err", uerr)
		}
		return cur, false, fmt.Errorf("publish panic flag: %w", err)
	}
	c.flag.Store(&next)
	c.log.Warn("panic flag changed", "panic", next.Panic, "xds", next.XDS())
	return next, true, nil
}

// SetRollout parses yaml strictly and puts it in force: stored durably,
// then published with the next version. An invalid config is an error
// wrapping ErrInvalid that names the field, and the old config stays in
// force. The yaml in force again changes nothing and returns changed
// false.
func (c *Controller) SetRollout(ctx context.Context, yaml []byte) (_ Rollout, changed bool, err error) {
	cfg, err := ParseLimited(yaml)
	if err != nil {
		cur := c.Rollout()
		c.record(ctx, authz.Rollout, cur.YAML, string(yaml), fmt.Sprintf("version %d stays", cur.Version), err)
		return cur, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.Rollout()
	if cur.Version > 0 && cur.YAML == string(yaml) {
		return cur, false, nil
	}
	next := Rollout{YAML: string(yaml), Config: cfg, Version: cur.Version + 1, Changed: c.now().UTC()}
	defer func() {
		c.record(ctx, authz.Rollout, cur.YAML, next.YAML, fmt.Sprintf("version %d -> %d", cur.Version, next.Version), err)
	}()
	b, err := json.Marshal(rolloutRecord{YAML: next.YAML, Version: next.Version, Changed: next.Changed})
	if err != nil {
		return cur, false, fmt.Errorf("set rollout config: %w", err)
	}
	if err := c.storage.PutSetting(ctx, SettingRollout, b); err != nil {
		return cur, false, fmt.Errorf("set rollout config: %w", err)
	}
	c.rollout.Store(&next)
	c.log.Info("rollout config changed", "version", next.Version, "rules", len(cfg.Rules))
	return next, true, nil
}

// record hands one change (err nil) or failed change to the audit
// recorder, if any.
func (c *Controller) record(ctx context.Context, a authz.Action, old, new, reason string, err error) {
	if c.audit == nil {
		return
	}
	e := audit.Entry{Action: string(a), Outcome: audit.OutcomeAllowed, Reason: reason, Old: old, New: new}
	if err != nil {
		e.Outcome, e.Reason = audit.OutcomeFailed, err.Error()
	}
	c.audit.Record(ctx, e)
}

func onOff(panic bool) string {
	if panic {
		return "on"
	}
	return "off"
}

// ParseLimited is Parse with a bound of MaxConfigBytes on the input, the
// way the server takes a config.
func ParseLimited(yaml []byte) (*Config, error) {
	if len(yaml) > MaxConfigBytes {
		return nil, fmt.Errorf("%w: yaml: %d bytes, at most %d", ErrInvalid, len(yaml), MaxConfigBytes)
	}
	return Parse(yaml)
}

// ApplyStored puts in force a setting that another replica stored (the
// shared store's watch): key is SettingPanic or SettingRollout, value its
// stored JSON. The panic flag is published in the FlagStore; a rollout
// config is taken only if its version is newer than the one in force.
// Nothing is written to Storage. Other keys are ignored.
func (c *Controller) ApplyStored(key string, value []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch key {
	case SettingPanic:
		var r panicRecord
		if err := json.Unmarshal(value, &r); err != nil {
			return fmt.Errorf("stored panic flag: %w", err)
		}
		if cur := c.Panic(); cur.Panic == r.Panic && cur.Changed.Equal(r.Changed) {
			return nil
		}
		p := PanicState{Panic: r.Panic, Changed: r.Changed}
		if _, err := c.store.Apply(registry.SetFlag(registry.FlagXDS, p.XDS())); err != nil {
			return fmt.Errorf("publish panic flag: %w", err)
		}
		c.flag.Store(&p)
		c.log.Warn("panic flag changed on another replica", "panic", p.Panic, "xds", p.XDS())
	case SettingRollout:
		var r rolloutRecord
		if err := json.Unmarshal(value, &r); err != nil {
			return fmt.Errorf("stored rollout config: %w", err)
		}
		// Two replicas may both store version N+1; the store's order
		// decides, so an equal version with another YAML is taken too.
		if cur := c.Rollout(); r.Version < cur.Version || (r.Version == cur.Version && r.YAML == cur.YAML) {
			return nil
		}
		cfg, err := Parse([]byte(r.YAML))
		if err != nil {
			c.rollout.Store(&Rollout{Config: &Config{}, Version: r.Version, Changed: r.Changed})
			return fmt.Errorf("stored rollout config version %d: %w", r.Version, err)
		}
		c.rollout.Store(&Rollout{YAML: r.YAML, Config: cfg, Version: r.Version, Changed: r.Changed})
		c.log.Info("rollout config changed on another replica", "version", r.Version, "rules", len(cfg.Rules))
	}
	return nil
}

package svcconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spillway/spillway/registry/settings"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authz"
)

// Recorder receives an audit entry for every put, delete and undelete of
// a service's config, and every refused or failed one: who (the identity
// in the context; "file:PATH" for the directory), the old and new YAML.
// Record must not block for long and never fails the change.
// *audit.Log implements it.
type Recorder = settings.Recorder

// KeyPrefix is where records live in the KV: svcconfig/<service>.
const KeyPrefix = "svcconfig/"

// DefaultTombstone is how long a deleted config keeps applying.
const DefaultTombstone = 7 * 24 * time.Hour

// Sources of a record.
const (
	SourceDir = settings.SourceDir // a file of --service-config-dir
	SourceAPI = settings.SourceAPI // spillwayctl config / the HTTP API
)

// Errors of the Store.
var (
	// ErrOwnedByFile: the service has a file in the directory, which wins
	// over the API (HTTP 409).
	ErrOwnedByFile = errors.New("owned by a file of --service-config-dir")
	// ErrNotFound: no record (or no tombstone, for undelete).
	ErrNotFound = errors.New("no config")
)

// kind is the per-service config as a setting (package
// registry/settings): records {yaml, source, file, updated_at,
// deleted_at} under KeyPrefix, tombstones, a directory, action config.
var kind = settings.Kind[Config]{
	Name:           "svcconfig",
	Noun:           "service config",
	Prefix:         KeyPrefix,
	Path:           "/v1/config",
	Parse:          Parse,
	MaxBody:        MaxBytes,
	Action:         authz.Config,
	ErrInvalid:     ErrInvalid,
	ErrNotFound:    ErrNotFound,
	ErrOwnedByFile: ErrOwnedByFile,
	Tombstone:      DefaultTombstone,
	Sources:        true,
	Disabled:       "config changes are disabled: no authorization is configured",
}

// Status says where a service's config comes from (Source SourceDir or
// SourceAPI, File for SourceDir) and whether it is a tombstone (Deleted:
// it still applies until Until).
type Status = settings.Status

// StoreConfig configures a Store.
type StoreConfig struct {
	// KV holds the records, shared by every replica; nil keeps them in
	// memory only (no data dir).
	KV systemstore.KV
	// Tombstone is how long a deleted config keeps applying; zero means
	// DefaultTombstone.
	Tombstone time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger, or nil to discard.
	Logger *slog.Logger
	// Audit records every change; nil records none.
	Audit Recorder
	// Regions lists the regions in which a service has a healthy
	// endpoint now; with it, PUT answers the regional rules that would
	// not apply as set (Entry.Warnings). Nil: no regional warnings (the
	// resilience warnings, which need no endpoints, are still given).
	Regions func(service string) []string
}

// Store is the in-memory view of every service's config, kept in step
// with the KV. Get is lock-free; writes go to the KV and then the view.
type Store struct {
	// Read-only after New.
	now     func() time.Time
	regions func(service string) []string // or nil

	// set holds every service's config, replicated through the KV.
	set *settings.Store[Config]
}

// NewStore validates cfg and returns an empty Store; call Init to load.
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.Tombstone < 0 {
		return nil, fmt.Errorf("svcconfig: Tombstone: %v is negative", cfg.Tombstone)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	set, err := settings.New(kind, settings.Config[Config]{KV: cfg.KV, Tombstone: cfg.Tombstone, Now: cfg.Now, Logger: cfg.Logger, Audit: cfg.Audit})
	if err != nil {
		return nil, err
	}
	return &Store{now: cfg.Now, regions: cfg.Regions, set: set}, nil
}

// Get returns service's config and status. Without a config, or once its
// tombstone has run out, it returns Default() and false. Safe for
// concurrent use; it takes no lock.
func (s *Store) Get(service string) (Config, Status, bool) {
	c, st, ok := s.set.Get(service)
	if !ok {
		return Default(), Status{}, false
	}
	return c, st, true
}

// Resilience returns the resilience policies of service's config in
// force (a tombstone's too, as Get) and whether it sets any: false with
// the zero Resilience for a service without a config or with none set.
// The blocks r points to are shared by every caller: read them, do not
// modify them. Safe for concurrent use; it takes no lock.
func (s *Store) Resilience(service string) (r Resilience, ok bool) {
	c, _, found := s.set.Get(service)
	if !found {
		return Resilience{}, false
	}
	return c.Resilience, !c.Resilience.IsZero()
}

// Services returns the services with a record (tombstones included), sorted.
func (s *Store) Services() []string { return s.set.Services() }

// Changed returns a channel that is closed at the next change of the view.
func (s *Store) Changed() <-chan struct{} { return s.set.Changed() }

// Version counts the changes of the view.
func (s *Store) Version() uint64 { return s.set.Version() }

// Set parses yamlText and stores it as service's config from source (file
// is the file's name, for SourceDir). The API (SourceAPI) may not set a
// service a file owns: ErrOwnedByFile.
func (s *Store) Set(ctx context.Context, service string, yamlText []byte, source, file string) (Status, error) {
	return s.set.Set(ctx, service, yamlText, source, file)
}

// Delete tombstones service's config: it keeps applying, shown as
// deleted, for the tombstone time.
func (s *Store) Delete(ctx context.Context, service, source string) (Status, error) {
	return s.set.Delete(ctx, service, source)
}

// Undelete brings back a tombstoned config. A config whose file is gone
// comes back owned by the API.
func (s *Store) Undelete(ctx context.Context, service string) (Status, error) {
	return s.set.Undelete(ctx, service)
}

// Sweep removes the tombstones that have run out, so the defaults apply.
// Every replica may sweep; before deleting it reads the record again so a
// config set since is kept.
func (s *Store) Sweep(ctx context.Context) error { return s.set.Sweep(ctx) }

// Init loads every record from the KV and returns the revision listed.
func (s *Store) Init(ctx context.Context) (int64, error) { return s.set.Init(ctx) }

// Run watches the KV for other replicas' changes and sweeps expired
// tombstones every sweepEvery (zero: a minute), until ctx ends. Call Init
// first. A failed watch is followed by a new Init.
func (s *Store) Run(ctx context.Context, sweepEvery time.Duration) error {
	return s.set.Run(ctx, sweepEvery)
}

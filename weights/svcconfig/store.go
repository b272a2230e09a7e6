package svcconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spillway/spillway/registry/names"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authz"
)

// Recorder receives an audit entry for every put, delete and undelete of
// a service's config, and every refused or failed one: who (the identity
// in the context; "file:PATH" for the directory), the old and new YAML.
// Record must not block for long and never fails the change.
// *audit.Log implements it.
type Recorder interface {
	Record(ctx context.Context, e audit.Entry)
}

var _ Recorder = (*audit.Log)(nil)

// KeyPrefix is where records live in the KV: svcconfig/<service>.
const KeyPrefix = "svcconfig/"

// DefaultTombstone is how long a deleted config keeps applying.
const DefaultTombstone = 7 * 24 * time.Hour

// Sources of a record.
const (
	SourceDir = "dir" // a file of --service-config-dir
	SourceAPI = "api" // spillwayctl config / the HTTP API
)

// Errors of the Store.
var (
	// ErrOwnedByFile: the service has a file in the directory, which wins
	// over the API (HTTP 409).
	ErrOwnedByFile = errors.New("owned by a file of --service-config-dir")
	// ErrNotFound: no record (or no tombstone, for undelete).
	ErrNotFound = errors.New("no config")
)

// record is what the KV holds for one service. The YAML is kept as given
// and parsed again by every replica.
type record struct {
	YAML      string     `json:"yaml"`
	Source    string     `json:"source"`
	File      string     `json:"file,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}

// Status says where a service's config comes from and whether it is a
// tombstone.
type Status struct {
	Source    string    // SourceDir or SourceAPI
	File      string    // the file's name, for SourceDir
	YAML      string    // the config as written
	Version   int64     // the KV revision of the record
	UpdatedAt time.Time // when it was last set
	// Deleted: the config was deleted and still applies until Until.
	Deleted   bool
	DeletedAt time.Time
	Until     time.Time
}

type entry struct {
	cfg    Config
	status Status
}

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
	// endpoint now; with it, PUT answers the rules that would not apply as
	// set (Entry.Warnings). Nil: no warnings.
	Regions func(service string) []string
}

// Store is the in-memory view of every service's config, kept in step
// with the KV. Get is lock-free; writes go to the KV and then the view.
type Store struct {
	// Read-only after New.
	kv        systemstore.KV
	tombstone time.Duration
	now       func() time.Time
	log       *slog.Logger
	audit     Recorder
	regions   func(service string) []string // or nil

	// recs holds every service's config, replicated through kv.
	recs *systemstore.Records[record, entry]
}

// NewStore validates cfg and returns an empty Store; call Init to load.
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.Tombstone < 0 {
		return nil, fmt.Errorf("svcconfig: Tombstone: %v is negative", cfg.Tombstone)
	}
	if cfg.Tombstone == 0 {
		cfg.Tombstone = DefaultTombstone
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{kv: cfg.KV, tombstone: cfg.Tombstone, now: cfg.Now, log: cfg.Logger, audit: cfg.Audit, regions: cfg.Regions}
	recs, err := systemstore.NewRecords(systemstore.RecordsConfig[record, entry]{
		KV: cfg.KV, Prefix: KeyPrefix, Name: "svcconfig", Logger: cfg.Logger,
		Decode: s.decode,
	})
	if err != nil {
		return nil, err
	}
	s.recs = recs
	return s, nil
}

// decode turns a stored record into the view's entry.
func (s *Store) decode(service string, rec *record, rev int64) (entry, error) {
	cfg, err := Parse(service, []byte(rec.YAML))
	if err != nil {
		return entry{}, err
	}
	st := Status{Source: rec.Source, File: rec.File, YAML: rec.YAML, Version: rev, UpdatedAt: rec.UpdatedAt}
	if rec.DeletedAt != nil {
		st.Deleted, st.DeletedAt, st.Until = true, *rec.DeletedAt, rec.DeletedAt.Add(s.tombstone)
	}
	return entry{cfg: cfg, status: st}, nil
}

// Get returns service's config and status. Without a config, or once its
// tombstone has run out, it returns Default() and false. Safe for
// concurrent use; it takes no lock.
func (s *Store) Get(service string) (Config, Status, bool) {
	e, _, ok := s.recs.Get(names.NormalizeService(service))
	if !ok || (e.status.Deleted && !s.now().Before(e.status.Until)) {
		return Default(), Status{}, false
	}
	return e.cfg, e.status, true
}

// Services returns the services with a record (tombstones included), sorted.
func (s *Store) Services() []string { return s.recs.Services() }

// Changed returns a channel that is closed at the next change of the view.
func (s *Store) Changed() <-chan struct{} { return s.recs.Changed() }

// Version counts the changes of the view.
func (s *Store) Version() uint64 { return s.recs.Version() }

func (s *Store) current(service string) (entry, bool) {
	e, _, ok := s.recs.Get(service)
	return e, ok
}

// write stores rec (or deletes, rec nil) in the KV and the view.
func (s *Store) write(ctx context.Context, service string, rec *record) error {
	_, err := s.recs.Write(ctx, service, rec)
	return err
}

func checkService(service string) (string, error) {
	service = names.NormalizeService(service)
	if err := names.ValidateService("service", service); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return service, nil
}

// Set parses yamlText and stores it as service's config from source (file
// is the file's name, for SourceDir). The API (SourceAPI) may not set a
// service a file owns: ErrOwnedByFile.
func (s *Store) Set(ctx context.Context, service string, yamlText []byte, source, file string) (_ Status, err error) {
	old := s.yamlOf(service)
	defer s.record(ctx, service, "put", func() (string, string) { return old, string(yamlText) }, &err)
	service, err = checkService(service)
	if err != nil {
		return Status{}, err
	}
	label := "body"
	if file != "" {
		label = file
	}
	if _, err := Parse(label, yamlText); err != nil {
		return Status{}, err
	}
	if err := s.guard(service, source); err != nil {
		return Status{}, err
	}
	rec := &record{YAML: string(yamlText), Source: source, File: file, UpdatedAt: s.now().UTC()}
	if err := s.write(ctx, service, rec); err != nil {
		return Status{}, err
	}
	e, _ := s.current(service)
	return e.status, nil
}

func (s *Store) guard(service, source string) error {
	if source != SourceAPI {
		return nil
	}
	if e, ok := s.current(service); ok && e.status.Source == SourceDir && !e.status.Deleted {
		return fmt.Errorf("service %s: %w (%s); edit the file instead", service, ErrOwnedByFile, e.status.File)
	}
	return nil
}

// Delete tombstones service's config: it keeps applying, shown as
// deleted, for the tombstone time.
func (s *Store) Delete(ctx context.Context, service, source string) (_ Status, err error) {
	old := s.yamlOf(service)
	defer s.record(ctx, service, "delete", func() (string, string) { return old, s.yamlOf(service) }, &err)
	service, err = checkService(service)
	if err != nil {
		return Status{}, err
	}
	if err := s.guard(service, source); err != nil {
		return Status{}, err
	}
	e, ok := s.current(service)
	if !ok {
		return Status{}, fmt.Errorf("service %s: %w", service, ErrNotFound)
	}
	if e.status.Deleted {
		old = e.status.YAML + deletedMark // no change: the entry shows old == new
		return e.status, nil
	}
	now := s.now().UTC()
	rec := &record{YAML: e.status.YAML, Source: e.status.Source, File: e.status.File, UpdatedAt: e.status.UpdatedAt, DeletedAt: &now}
	if err := s.write(ctx, service, rec); err != nil {
		return Status{}, err
	}
	e, _ = s.current(service)
	return e.status, nil
}

// Undelete brings back a tombstoned config. A config whose file is gone
// comes back owned by the API.
func (s *Store) Undelete(ctx context.Context, service string) (_ Status, err error) {
	old := s.yamlOf(service)
	defer s.record(ctx, service, "undelete", func() (string, string) { return old, s.yamlOf(service) }, &err)
	service, err = checkService(service)
	if err != nil {
		return Status{}, err
	}
	e, ok := s.current(service)
	if !ok || !e.status.Deleted || !s.now().Before(e.status.Until) {
		return Status{}, fmt.Errorf("service %s: %w deleted to bring back", service, ErrNotFound)
	}
	rec := &record{YAML: e.status.YAML, Source: SourceAPI, UpdatedAt: s.now().UTC()}
	if err := s.write(ctx, service, rec); err != nil {
		return Status{}, err
	}
	e, _ = s.current(service)
	return e.status, nil
}

// deletedMark ends the audit rendering of a tombstoned config.
const deletedMark = "\n# (deleted)"

// yamlOf renders service's config for an audit entry: its YAML, marked
// when it is a tombstone; "" when there is none.
func (s *Store) yamlOf(service string) string {
	e, ok := s.current(names.NormalizeService(service))
	switch {
	case !ok:
		return ""
	case e.status.Deleted:
		return e.status.YAML + deletedMark
	}
	return e.status.YAML
}

// record hands one change (*errp nil) or refused change to the audit
// recorder, if any; values gives the old and new rendering.
func (s *Store) record(ctx context.Context, service, kind string, values func() (old, new string), errp *error) {
	if s.audit == nil {
		return
	}
	old, new := values()
	e := audit.Entry{Action: string(authz.Config), Resource: service, Outcome: audit.OutcomeAllowed, Reason: kind, Old: old, New: new}
	if *errp != nil {
		e.Outcome, e.Reason = audit.OutcomeFailed, kind+": "+(*errp).Error()
	}
	s.audit.Record(ctx, e)
}

// Sweep removes the tombstones that have run out, so the defaults apply.
// Every replica may sweep; before deleting it reads the record again so a
// config set since is kept.
func (s *Store) Sweep(ctx context.Context) error {
	now := s.now()
	var errs []error
	for service, e := range s.recs.All {
		if !e.status.Deleted || now.Before(e.status.Until) {
			continue
		}
		if s.kv != nil {
			v, rev, err := s.kv.Get(ctx, KeyPrefix+service)
			if errors.Is(err, systemstore.ErrNotFound) {
				s.recs.Forget(service)
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			var rec record
			if json.Unmarshal(v, &rec) != nil || rec.DeletedAt == nil || rev != e.status.Version {
				continue
			}
		}
		if err := s.write(ctx, service, nil); err != nil {
			errs = append(errs, err)
			continue
		}
		s.log.Info("tombstone expired, defaults apply", "service", service)
	}
	return errors.Join(errs...)
}

// Init loads every record from the KV and returns the revision listed.
func (s *Store) Init(ctx context.Context) (int64, error) { return s.recs.Init(ctx) }

// Run watches the KV for other replicas' changes and sweeps expired
// tombstones every sweepEvery (zero: a minute), until ctx ends. Call Init
// first. A failed watch is followed by a new Init.
func (s *Store) Run(ctx context.Context, sweepEvery time.Duration) error {
	if sweepEvery <= 0 {
		sweepEvery = time.Minute
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
					s.log.Warn("sweep failed", "err", err)
				}
			}
		}
	})
	s.recs.Follow(ctx)
	return nil
}

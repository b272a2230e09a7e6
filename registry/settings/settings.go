package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spillway/spillway/registry/names"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authz"
)

// Sources of a record, for kinds with Kind.Sources.
const (
	SourceDir = "dir" // a file of the kind's directory (Dir)
	SourceAPI = "api" // the HTTP API
)

// Kind describes one kind of per-service setting; its package declares
// one, as a variable, and builds its Store from it.
type Kind[T any] struct {
	// Name starts the Store's errors and names its records, e.g.
	// "svcconfig". Required.
	Name string
	// Noun names one service's setting in logs, e.g. "service config".
	// Required.
	Noun string
	// Prefix is the KV key prefix of the records, e.g. "svcconfig/".
	// Required; a released kind's prefix never changes.
	Prefix string
	// Path is the HTTP API's collection, e.g. "/v1/config"; Handler
	// serves it and Path/{service}. Required for Handler.
	Path string
	// Parse reads a setting as written, strictly; file labels its errors
	// ("body" for the API, the file's name for Dir, the record's key for
	// a stored record). A refusal should be a *strictyaml.Error naming
	// the field and wrapping ErrInvalid: the API answers 400 with the
	// field. Required.
	Parse func(file string, data []byte) (T, error)
	// MaxBody bounds the body of a PUT; zero means 64 KiB.
	MaxBody int64
	// Action is what the authorizer is asked for a change (Store.PolicyAuth)
	// and the audit entries' Action. Required.
	Action authz.Action
	// ErrInvalid is wrapped by a bad service name (the API answers 400,
	// field "service"). Required.
	ErrInvalid error
	// ErrNotFound is wrapped when a service has no setting to delete or
	// undelete (404). Required.
	ErrNotFound error
	// ErrOwnedByFile, for kinds with Sources, is wrapped when the API
	// changes a service whose setting a file owns (409); nil otherwise.
	ErrOwnedByFile error
	// Tombstone is how long a deleted setting keeps applying, unless
	// Config.Tombstone says otherwise; zero means the kind has no
	// tombstones: Delete removes the record and Undelete finds nothing.
	Tombstone time.Duration
	// Sources: records say where they come from (SourceDir or SourceAPI,
	// and the file), a file wins over the API, and a Dir may feed the
	// Store. Without it records carry neither "source" nor "file".
	Sources bool
	// AuditNormalized: audit entries name the service normalised
	// (names.NormalizeService); false names it as the caller gave it.
	AuditNormalized bool
	// Disabled is the 403 message of a change when PolicyAuth has no
	// authorizer.
	Disabled string
	// HTTPError, or nil, answers the kind's own errors: the status and
	// field for err, ok false for the errors Store.Fail answers itself.
	HTTPError func(err error) (code int, field string, ok bool)
}

// check reports the first field of k that is missing.
func (k Kind[T]) check() error {
	switch {
	case k.Name == "":
		return errors.New("settings: Kind.Name is required")
	case k.Noun == "":
		return fmt.Errorf("%s: Kind.Noun is required", k.Name)
	case k.Prefix == "":
		return fmt.Errorf("%s: Kind.Prefix is required", k.Name)
	case k.Parse == nil:
		return fmt.Errorf("%s: Kind.Parse is required", k.Name)
	case k.Action == "":
		return fmt.Errorf("%s: Kind.Action is required", k.Name)
	case k.ErrInvalid == nil:
		return fmt.Errorf("%s: Kind.ErrInvalid is required", k.Name)
	case k.ErrNotFound == nil:
		return fmt.Errorf("%s: Kind.ErrNotFound is required", k.Name)
	case k.Tombstone < 0:
		return fmt.Errorf("%s: Kind.Tombstone: %v is negative", k.Name, k.Tombstone)
	case k.Sources != (k.ErrOwnedByFile != nil):
		return fmt.Errorf("%s: Kind.ErrOwnedByFile: set it exactly when Kind.Sources is", k.Name)
	}
	return nil
}

// ServiceFromFile returns the service a file of the kind's directory is
// for: its base name without ".yaml", validated as a service name; an
// error wraps ErrInvalid.
func (k Kind[T]) ServiceFromFile(path string) (string, error) {
	base := filepath.Base(path)
	svc, ok := strings.CutSuffix(base, ".yaml")
	if !ok {
		return "", fmt.Errorf("%s: file name: want SERVICE.yaml: %w", base, k.ErrInvalid)
	}
	if err := names.ValidateService("service", svc); err != nil {
		return "", fmt.Errorf("%s: file name: %v: %w", base, err, k.ErrInvalid)
	}
	return svc, nil
}

// Recorder receives an audit entry for every put, delete and undelete of
// a setting, and every refused or failed one. Record must not block for
// long and never fails the change. *audit.Log implements it.
type Recorder interface {
	Record(ctx context.Context, e audit.Entry)
}

var _ Recorder = (*audit.Log)(nil)

// Config configures a Store.
type Config[T any] struct {
	// KV holds the records, shared by every replica; nil keeps them in
	// memory only.
	KV systemstore.KV
	// Tombstone is how long a deleted setting keeps applying; zero means
	// Kind.Tombstone. Only for a kind with tombstones.
	Tombstone time.Duration
	// Check, or nil, refuses a parsed setting at Set and Validate (not
	// when a stored record is read again): e.g. a target that is not
	// registered. file labels the text as Parse was given it.
	Check func(service, file string, v T) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger, or nil to discard.
	Logger *slog.Logger
	// Audit records every change; nil records none.
	Audit Recorder
}

// Status says where a service's setting stands.
type Status struct {
	Source    string    // SourceDir or SourceAPI; "" for a kind without Sources
	File      string    // the file's name, for SourceDir
	YAML      string    // the setting as written
	Version   int64     // the KV revision of the record
	UpdatedAt time.Time // when it was last set
	// Deleted: the setting was deleted and still applies until Until.
	Deleted   bool
	DeletedAt time.Time
	Until     time.Time
}

// record is what the KV holds for one service: the text is kept as
// given and parsed again by every replica. Source is a pointer so that a
// kind without Sources writes no "source" while one with them always
// does, as the records of earlier releases were.
type record struct {
	YAML      string     `json:"yaml"`
	Source    *string    `json:"source,omitempty"`
	File      string     `json:"file,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}

type entry[T any] struct {
	v      T
	status Status
}

// Store is the in-memory view of every service's setting of one kind,
// kept in step with the KV. Get is lock-free; writes go to the KV and
// then to the view.
type Store[T any] struct {
	// Read-only after New.
	kind      Kind[T]
	kv        systemstore.KV // or nil
	tombstone time.Duration  // zero: no tombstones
	check     func(service, file string, v T) error
	now       func() time.Time
	log       *slog.Logger
	audit     Recorder // or nil

	// recs holds every service's setting, replicated through kv.
	recs *systemstore.Records[record, entry[T]]
}

// New validates k and cfg and returns an empty Store; call Init to load.
func New[T any](k Kind[T], cfg Config[T]) (*Store[T], error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Tombstone < 0:
		return nil, fmt.Errorf("%s: Tombstone: %v is negative", k.Name, cfg.Tombstone)
	case cfg.Tombstone > 0 && k.Tombstone == 0:
		return nil, fmt.Errorf("%s: Tombstone: %v, but %s has no tombstones", k.Name, cfg.Tombstone, k.Noun)
	case cfg.Tombstone == 0:
		cfg.Tombstone = k.Tombstone
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store[T]{kind: k, kv: cfg.KV, tombstone: cfg.Tombstone, check: cfg.Check, now: cfg.Now, log: cfg.Logger, audit: cfg.Audit}
	recs, err := systemstore.NewRecords(systemstore.RecordsConfig[record, entry[T]]{
		KV: cfg.KV, Prefix: k.Prefix, Name: k.Name, Logger: cfg.Logger,
		// Stored settings were checked when set; what Check looks at
		// may have changed since, so only the parse is redone.
		Decode: s.decode,
	})
	if err != nil {
		return nil, err
	}
	s.recs = recs
	return s, nil
}

// Kind returns the kind the Store was built for.
func (s *Store[T]) Kind() Kind[T] { return s.kind }

// decode turns a stored record into the view's entry.
func (s *Store[T]) decode(service string, rec *record, rev int64) (entry[T], error) {
	v, err := s.kind.Parse(s.kind.Prefix+service, []byte(rec.YAML))
	if err != nil {
		return entry[T]{}, err
	}
	st := Status{File: rec.File, YAML: rec.YAML, Version: rev, UpdatedAt: rec.UpdatedAt}
	if rec.Source != nil {
		st.Source = *rec.Source
	}
	if rec.DeletedAt != nil {
		st.Deleted, st.DeletedAt, st.Until = true, *rec.DeletedAt, rec.DeletedAt.Add(s.tombstone)
	}
	return entry[T]{v: v, status: st}, nil
}

// Get returns service's setting and status. Without one, or once its
// tombstone has run out, it returns the zero T and false. It takes no
// lock.
func (s *Store[T]) Get(service string) (T, Status, bool) {
	e, ok := s.current(names.NormalizeService(service))
	if !ok || (e.status.Deleted && !s.now().Before(e.status.Until)) {
		var zero T
		return zero, Status{}, false
	}
	return e.v, e.status, true
}

// current returns service's entry as the view holds it, a tombstone that
// has run out included; service is normalised.
func (s *Store[T]) current(service string) (entry[T], bool) {
	e, _, ok := s.recs.Get(service)
	return e, ok
}

// Services returns the services with a record (tombstones included),
// sorted.
func (s *Store[T]) Services() []string { return s.recs.Services() }

// Changed returns a channel that is closed at the next change of the view.
func (s *Store[T]) Changed() <-chan struct{} { return s.recs.Changed() }

// Version counts the changes of the view.
func (s *Store[T]) Version() uint64 { return s.recs.Version() }

// CheckService normalises service and validates it as a service name; an
// error wraps Kind.ErrInvalid.
func (s *Store[T]) CheckService(service string) (string, error) {
	service = names.NormalizeService(service)
	if err := names.ValidateService("service", service); err != nil {
		return "", fmt.Errorf("%w: %w", s.kind.ErrInvalid, err)
	}
	return service, nil
}

// parse reads text (Kind.Parse) and checks it (Config.Check).
func (s *Store[T]) parse(service, file string, text []byte) (T, error) {
	v, err := s.kind.Parse(file, text)
	if err != nil {
		return v, err
	}
	if s.check != nil {
		if err := s.check(service, file, v); err != nil {
			var zero T
			return zero, err
		}
	}
	return v, nil
}

// Validate is a dry run of an API Set: the parsed setting, or the error
// Set would refuse it with (but ErrOwnedByFile). Nothing changes.
func (s *Store[T]) Validate(service string, text []byte) (T, error) {
	service, err := s.CheckService(service)
	if err != nil {
		var zero T
		return zero, err
	}
	return s.parse(service, "body", text)
}

// Set parses and checks text and stores it as service's setting from
// source (file is the file's name, for SourceDir; both are kept only for
// a kind with Sources). The API (SourceAPI) may not set a service a file
// owns: Kind.ErrOwnedByFile. A refused Set changes nothing.
func (s *Store[T]) Set(ctx context.Context, service string, text []byte, source, file string) (Status, error) {
	return s.set(ctx, service, text, source, file, nil)
}

// SetIf is an API Set only while service's setting is at version (the
// Status.Version the caller read; 0: it has none): the check and the
// write are one store transaction, so of writers that read one version
// exactly one wins. Otherwise nothing changes and the error wraps
// systemstore.ErrConflict, naming the current version.
func (s *Store[T]) SetIf(ctx context.Context, service string, text []byte, version int64) (Status, error) {
	return s.set(ctx, service, text, SourceAPI, "", &version)
}

// set is Set, conditional on the record's version when cond is non-nil.
func (s *Store[T]) set(ctx context.Context, service string, text []byte, source, file string, cond *int64) (_ Status, err error) {
	old := s.render(service)
	defer s.record(ctx, service, "put", func() (string, string) { return old, string(text) }, &err)
	service, err = s.CheckService(service)
	if err != nil {
		return Status{}, err
	}
	label := "body"
	if file != "" {
		label = file
	}
	if _, err := s.parse(service, label, text); err != nil {
		return Status{}, err
	}
	if err := s.guard(service, source); err != nil {
		return Status{}, err
	}
	rec := &record{YAML: string(text), UpdatedAt: s.now().UTC()}
	if s.kind.Sources {
		rec.Source, rec.File = &source, file
	}
	if err := s.writeIf(ctx, service, rec, cond); err != nil {
		return Status{}, err
	}
	e, _ := s.current(service)
	return e.status, nil
}

// guard refuses an API change of a service whose setting a file owns.
func (s *Store[T]) guard(service, source string) error {
	if source != SourceAPI || !s.kind.Sources {
		return nil
	}
	if e, ok := s.current(service); ok && e.status.Source == SourceDir && !e.status.Deleted {
		return fmt.Errorf("service %s: %w (%s); edit the file instead", service, s.kind.ErrOwnedByFile, e.status.File)
	}
	return nil
}

// Delete deletes service's setting from source: with tombstones it keeps
// applying, shown as deleted, for the tombstone time (deleting a
// tombstone changes nothing); without, the record is removed and the
// returned Status is zero. No setting: Kind.ErrNotFound.
func (s *Store[T]) Delete(ctx context.Context, service, source string) (Status, error) {
	return s.delete(ctx, service, source, nil)
}

// DeleteIf is an API Delete only while service's setting is at version
// (the Status.Version the caller read), in one store transaction;
// otherwise nothing changes and the error wraps systemstore.ErrConflict.
func (s *Store[T]) DeleteIf(ctx context.Context, service string, version int64) (Status, error) {
	return s.delete(ctx, service, SourceAPI, &version)
}

// delete is Delete, conditional on the record's version when cond is
// non-nil.
func (s *Store[T]) delete(ctx context.Context, service, source string, cond *int64) (_ Status, err error) {
	old := s.render(service)
	defer s.record(ctx, service, "delete", func() (string, string) { return old, s.render(service) }, &err)
	service, err = s.CheckService(service)
	if err != nil {
		return Status{}, err
	}
	if err := s.guard(service, source); err != nil {
		return Status{}, err
	}
	e, ok := s.current(service)
	if !ok {
		return Status{}, fmt.Errorf("service %s: %w", service, s.kind.ErrNotFound)
	}
	if s.tombstone == 0 {
		return Status{}, s.writeIf(ctx, service, nil, cond)
	}
	if e.status.Deleted && (cond == nil || *cond == e.status.Version) {
		old = e.status.YAML + DeletedMark // no change: the entry shows old == new
		return e.status, nil
	}
	now := s.now().UTC()
	rec := s.recordOf(e.status)
	rec.DeletedAt = &now
	if err := s.writeIf(ctx, service, rec, cond); err != nil {
		return Status{}, err
	}
	e, _ = s.current(service)
	return e.status, nil
}

// recordOf returns the record of a live status.
func (s *Store[T]) recordOf(st Status) *record {
	rec := &record{YAML: st.YAML, UpdatedAt: st.UpdatedAt}
	if s.kind.Sources {
		rec.Source, rec.File = &st.Source, st.File
	}
	return rec
}

// Undelete brings back a tombstoned setting, owned by the API (its file,
// if any, is gone). No tombstone that still applies: Kind.ErrNotFound.
func (s *Store[T]) Undelete(ctx context.Context, service string) (_ Status, err error) {
	old := s.render(service)
	defer s.record(ctx, service, "undelete", func() (string, string) { return old, s.render(service) }, &err)
	service, err = s.CheckService(service)
	if err != nil {
		return Status{}, err
	}
	e, ok := s.current(service)
	if !ok || !e.status.Deleted || !s.now().Before(e.status.Until) {
		return Status{}, fmt.Errorf("service %s: %w deleted to bring back", service, s.kind.ErrNotFound)
	}
	rec := s.recordOf(Status{YAML: e.status.YAML, Source: SourceAPI, UpdatedAt: s.now().UTC()})
	if err := s.write(ctx, service, rec); err != nil {
		return Status{}, err
	}
	e, _ = s.current(service)
	return e.status, nil
}

// write stores rec (or deletes, rec nil) in the KV and then the view.
func (s *Store[T]) write(ctx context.Context, service string, rec *record) error {
	_, err := s.recs.Write(ctx, service, rec)
	return err
}

// writeIf is write, only while the record is at *cond when cond is
// non-nil.
func (s *Store[T]) writeIf(ctx context.Context, service string, rec *record, cond *int64) error {
	if cond == nil {
		return s.write(ctx, service, rec)
	}
	_, err := s.recs.WriteIf(ctx, service, rec, *cond)
	return err
}

// DeletedMark ends the audit rendering of a tombstone: its text, then
// this line.
const DeletedMark = "\n# (deleted)"

// render renders service's setting for an audit entry: its text, marked
// when it is a tombstone; "" when there is none.
func (s *Store[T]) render(service string) string {
	e, ok := s.current(names.NormalizeService(service))
	switch {
	case !ok:
		return ""
	case e.status.Deleted:
		return e.status.YAML + DeletedMark
	}
	return e.status.YAML
}

// record hands one change (*errp nil) or refused change to the audit
// recorder, if any; values gives the old and new rendering.
func (s *Store[T]) record(ctx context.Context, service, kind string, values func() (old, new string), errp *error) {
	if s.audit == nil {
		return
	}
	if s.kind.AuditNormalized {
		service = names.NormalizeService(service)
	}
	old, new := values()
	e := audit.Entry{Action: string(s.kind.Action), Resource: service, Outcome: audit.OutcomeAllowed, Reason: kind, Old: old, New: new}
	if *errp != nil {
		e.Outcome, e.Reason = audit.OutcomeFailed, kind+": "+(*errp).Error()
	}
	s.audit.Record(ctx, e)
}

// Sweep removes the tombstones that have run out. Every replica may
// sweep; before deleting it reads the record again so a setting set
// since is kept. Without tombstones there is nothing to sweep.
func (s *Store[T]) Sweep(ctx context.Context) error {
	now := s.now()
	var errs []error
	for service, e := range s.recs.All {
		if !e.status.Deleted || now.Before(e.status.Until) {
			continue
		}
		if s.kv != nil {
			v, rev, err := s.kv.Get(ctx, s.kind.Prefix+service)
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
func (s *Store[T]) Init(ctx context.Context) (int64, error) { return s.recs.Init(ctx) }

// Run watches the KV for other replicas' changes and, with tombstones,
// sweeps the expired ones every sweepEvery (zero: a minute), until ctx
// ends. Call Init first. A failed watch is followed by a new Init.
func (s *Store[T]) Run(ctx context.Context, sweepEvery time.Duration) error {
	if sweepEvery <= 0 {
		sweepEvery = time.Minute
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.tombstone > 0 {
		wg.Go(func() { s.sweepEvery(ctx, sweepEvery) })
	}
	s.recs.Follow(ctx)
	return nil
}

func (s *Store[T]) sweepEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
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
}

package static

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/spillway/spillway/registry"
)

// debounce is how long Run waits after the first change event of a burst
// before it reloads. Later events of the burst do not extend the wait, so a
// directory that never stops changing still gets reloaded.
const debounce = 100 * time.Millisecond

// Config configures a Source.
type Config struct {
	// Path is the YAML file to load. Required.
	Path string
	// Store receives the file's services and endpoints. Required.
	Store *registry.Store
	// Logger receives reload errors, or nil to discard them.
	Logger *slog.Logger
}

// Source loads a static file into a store and keeps it in step with the file.
type Source struct {
	// Read-only after New.
	path   string
	dir    string
	store  *registry.Store
	logger *slog.Logger
	now    func() time.Time
	// reloaded, if set, is called by Run after each reload attempt with its
	// outcome. A test seam; it runs on Run's goroutine.
	reloaded func(error)

	failures atomic.Uint64

	// mu serialises loads, which read the store, diff and apply; it guards
	// the state of the last successful load.
	mu sync.Mutex
	// declared is the set of services the last successful load listed.
	declared map[string]bool
	// applied is the SHA-256 of the content of the last successful load
	// (hasApplied: there was one). A digest, not the content: a file of a
	// million endpoints is about 110 MB, kept for good only to be compared.
	applied    [sha256.Size]byte
	hasApplied bool
}

// New validates cfg and returns a Source. It does not read the file.
func New(cfg Config) (*Source, error) {
	if cfg.Path == "" {
		return nil, errors.New("static: Config.Path is required")
	}
	if cfg.Store == nil {
		return nil, errors.New("static: Config.Store is required")
	}
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("static: Config.Path %q: %w", cfg.Path, err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{
		path:     path,
		dir:      filepath.Dir(path),
		store:    cfg.Store,
		logger:   logger.With("component", "static", "path", path),
		now:      time.Now,
		declared: map[string]bool{},
	}, nil
}

// Failures is the number of loads (by Load or by Run) that failed and left
// the store as it was.
func (s *Source) Failures() uint64 { return s.failures.Load() }

// Load reads the file once and applies it to the store as one batch. On any
// error (unreadable file, invalid content, an endpoint id owned by another
// source) the store is unchanged. Validation errors wrap
// registry.ErrInvalid and ownership clashes registry.ErrConflict.
func (s *Source) Load() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := os.ReadFile(s.path)
	if err != nil {
		s.failures.Add(1)
		return fmt.Errorf("static: %w", err)
	}
	if err := s.apply(data); err != nil {
		s.failures.Add(1)
		return fmt.Errorf("static: load %s: %w", s.path, err)
	}
	return nil
}

// reload is Load for Run: it skips content it has already applied, and logs
// instead of returning.
func (s *Source) reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := os.ReadFile(s.path)
	if err == nil {
		if s.hasApplied && sha256.Sum256(data) == s.applied {
			return nil
		}
		err = s.apply(data)
	}
	if err != nil {
		s.failures.Add(1)
		s.logger.Error("static file not loaded, keeping the previous state", "err", err)
		return err
	}
	s.logger.Info("static file loaded", "version", s.store.Snapshot().Version())
	return nil
}

// apply parses data and brings the store's static endpoints in line with
// it, with s.mu held.
func (s *Source) apply(data []byte) error {
	f, err := parse(data)
	if err != nil {
		return err
	}
	ops, err := s.diff(f, s.store.Snapshot())
	if err != nil {
		return err
	}
	if _, err := s.store.Apply(ops...); err != nil {
		return err
	}
	s.applied, s.hasApplied = sha256.Sum256(data), true
	s.declared = make(map[string]bool, len(f.services))
	for _, svc := range f.services {
		s.declared[svc.name] = true
	}
	return nil
}

// diff returns the ops that turn snap's static endpoints into f's:
// removals, then declarations and upserts, then forgets.
func (s *Source) diff(f *file, snap *registry.Snapshot) ([]registry.Op, error) {
	now := s.now()
	want := make(map[string]map[string]bool, len(f.services))
	var upserts []registry.Op
	for i, svc := range f.services {
		ids := make(map[string]bool, len(svc.endpoints))
		want[svc.name] = ids
		upserts = append(upserts, registry.Declare(svc.name))
		cur, _ := snap.Service(svc.name)
		for j, e := range svc.endpoints {
			ids[e.ID] = true
			e.Registered, e.LastSeen = now, now
			if cur != nil {
				if old, ok := cur.Endpoint(e.ID); ok {
					if old.Source != registry.SourceStatic {
						err := fmt.Errorf("services[%d].endpoints[%d]: endpoint %s/%s is %s's: %w", i, j, svc.name, e.ID, old.Source, registry.ErrConflict)
						return nil, &lineError{svc.lines[j], err}
					}
					// The same instance (id and address) keeps the time it
					// first registered, which slow start keys on; unchanged
					// endpoints then compare equal and cost no write.
					if old.Address == e.Address {
						e.Registered = old.Registered
						if e.Equal(old) {
							continue
						}
					}
				}
			}
			upserts = append(upserts, registry.Upsert(svc.name, e))
		}
	}

	var removes, forgets []registry.Op
	for _, name := range snap.Services() {
		cur, _ := snap.Service(name)
		left := 0
		for _, e := range cur.Endpoints {
			if e.Source == registry.SourceStatic && !want[name][e.ID] {
				removes = append(removes, registry.Remove(name, e.ID, registry.SourceStatic))
				continue
			}
			left++
		}
		if _, listed := want[name]; !listed && s.declared[name] && left == 0 {
			forgets = append(forgets, registry.Forget(name))
		}
	}
	return slices.Concat(removes, upserts, forgets), nil
}

// Run watches the file and reloads it whenever it changes, until ctx ends;
// then it returns nil. It reloads once when the watch is in place, so a
// change between Load and Run is not missed. It returns an error only if
// the watch cannot be set up or breaks.
//
// Run watches the file's directory rather than the file, so it sees files
// replaced by rename (editors, atomic writers) and Kubernetes ConfigMap
// volumes, whose "..data" symlink is swapped. A burst of events leads to
// one reload about 100ms after its first event. A file that fails to load
// is logged and counted in Failures; the store keeps its previous state.
func (s *Source) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("static: watch %s: %w", s.dir, err)
	}
	defer w.Close()
	if err := w.Add(s.dir); err != nil {
		return fmt.Errorf("static: watch %s: %w", s.dir, err)
	}
	return s.loop(ctx, w.Events, w.Errors)
}

// loop is Run after the watch is set up.
func (s *Source) loop(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error) error {
	s.reloadAndReport()
	// Go ≥1.23 timers: Reset and Stop leave no stale tick in t.C.
	t := time.NewTimer(debounce)
	t.Stop()
	defer t.Stop()
	pending := false
	arm := func() {
		if !pending {
			pending = true
			t.Reset(debounce)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("static: watch %s: event channel closed", s.dir)
			}
			// Any event in the directory may change what Path resolves
			// to; reload drops the ones that did not change the content.
			s.logger.Debug("watch event", "event", ev.String())
			arm()
		case err, ok := <-errs:
			if !ok {
				return fmt.Errorf("static: watch %s: error channel closed", s.dir)
			}
			// After an overflow, events were lost: reload to be sure.
			s.logger.Warn("watch error", "err", err)
			arm()
		case <-t.C:
			pending = false
			s.reloadAndReport()
		}
	}
}

func (s *Source) reloadAndReport() {
	err := s.reload()
	if s.reloaded != nil {
		s.reloaded(err)
	}
}

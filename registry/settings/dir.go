package settings

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
)

// debounce is how long Dir waits after a change before it reloads, so a
// burst of changes (an editor's save, a ConfigMap swap) is one reload.
const debounce = 100 * time.Millisecond

// DirConfig configures a Dir.
type DirConfig[T any] struct {
	// Path is the directory of SERVICE.yaml files. Required.
	Path string
	// Store receives the files' settings; its kind must have Sources.
	// Required.
	Store *Store[T]
	// Logger, or nil to discard.
	Logger *slog.Logger
	// Reloaded, or nil, is called after each reload of Run with its
	// error.
	Reloaded func(error)
}

// Dir keeps a Store in step with a directory of SERVICE.yaml files, one
// per service, owned by the service's team. A file wins over the API. A
// file that fails to parse is logged and counted, and the service's
// previous setting stays; a removed file deletes (tombstones) the
// service's setting. Every replica must mount the same directory: a
// replica whose directory lacks a file deletes it.
type Dir[T any] struct {
	// Read-only after NewDir.
	path     string
	store    *Store[T]
	log      *slog.Logger
	reloaded func(error) // or nil

	failures atomic.Uint64
}

// NewDir validates cfg.
func NewDir[T any](cfg DirConfig[T]) (*Dir[T], error) {
	if cfg.Store == nil {
		return nil, errors.New("settings: DirConfig.Store is required")
	}
	k := cfg.Store.kind
	if cfg.Path == "" {
		return nil, fmt.Errorf("%s: DirConfig.Path is required", k.Name)
	}
	if !k.Sources {
		return nil, fmt.Errorf("%s: DirConfig.Store: %s records have no source, so no directory can own them", k.Name, k.Noun)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dir[T]{path: cfg.Path, store: cfg.Store, log: cfg.Logger.With("dir", cfg.Path), reloaded: cfg.Reloaded}, nil
}

// Failures counts files refused (bad name, unreadable, bad content) and
// store writes that failed.
func (d *Dir[T]) Failures() uint64 { return d.failures.Load() }

// Load reads the directory once and applies it. It returns the errors of
// the files it refused, joined; the other files are applied.
func (d *Dir[T]) Load(ctx context.Context) error {
	k := d.store.kind
	ents, err := os.ReadDir(d.path)
	if err != nil {
		d.failures.Add(1)
		return fmt.Errorf("%s: read %s: %w", k.Name, d.path, err)
	}
	var errs []error
	fail := func(err error) {
		d.failures.Add(1)
		d.log.Error(k.Noun+" not applied, the previous one stays", "err", err)
		errs = append(errs, err)
	}
	present := map[string]bool{}
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(name, ".") || ent.IsDir() {
			continue // editor files, ConfigMap's ..data
		}
		service, err := k.ServiceFromFile(name)
		if err != nil {
			fail(err)
			continue
		}
		present[service] = true
		data, err := os.ReadFile(filepath.Join(d.path, name))
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
			continue
		}
		if e, ok := d.store.current(service); ok && e.status.Source == SourceDir && !e.status.Deleted && e.status.YAML == string(data) {
			continue
		}
		if _, err := d.store.Set(d.as(ctx, name), service, data, SourceDir, name); err != nil {
			fail(err)
			continue
		}
		d.log.Info(k.Noun+" applied", "service", service, "file", name)
	}
	for _, service := range d.store.Services() {
		e, _ := d.store.current(service)
		if present[service] || e.status.Source != SourceDir || e.status.Deleted {
			continue
		}
		if _, err := d.store.Delete(d.as(ctx, e.status.File), service, SourceDir); err != nil {
			fail(err)
			continue
		}
		d.log.Info(k.Noun+" file removed, tombstoned", "service", service, "file", e.status.File)
	}
	return errors.Join(errs...)
}

// as returns ctx with the identity of a change made by the file name:
// "file:PATH", for the audit entries.
func (d *Dir[T]) as(ctx context.Context, name string) context.Context {
	return authn.NewContext(ctx, authn.Identity{Name: "file:" + filepath.Join(d.path, name), Method: audit.MethodFile})
}

// Run watches the directory and reloads it after each burst of changes,
// until ctx ends. It loads once when the watch is in place.
func (d *Dir[T]) Run(ctx context.Context) error {
	name := d.store.kind.Name
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("%s: watch %s: %w", name, d.path, err)
	}
	defer w.Close()
	if err := w.Add(d.path); err != nil {
		return fmt.Errorf("%s: watch %s: %w", name, d.path, err)
	}
	d.reload(ctx)
	t := time.NewTimer(debounce)
	t.Stop()
	defer t.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("%s: watch %s: event channel closed", name, d.path)
			}
			if !pending {
				pending = true
				t.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("%s: watch %s: error channel closed", name, d.path)
			}
			d.log.Warn("watch error", "err", err)
			if !pending {
				pending = true
				t.Reset(debounce)
			}
		case <-t.C:
			pending = false
			d.reload(ctx)
		}
	}
}

func (d *Dir[T]) reload(ctx context.Context) {
	err := d.Load(ctx)
	if d.reloaded != nil {
		d.reloaded(err)
	}
}

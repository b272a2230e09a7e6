package svcconfig

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

const debounce = 100 * time.Millisecond

// DirConfig configures a Dir.
type DirConfig struct {
	// Path is the directory of SERVICE.yaml files. Required.
	Path string
	// Store receives the files' configs. Required.
	Store *Store
	// Logger, or nil to discard.
	Logger *slog.Logger
}

// Dir keeps a Store in step with a directory of SERVICE.yaml files, one
// per service, owned by the service's team. A file that fails to parse is
// logged and counted, and the service's previous config stays; a removed
// file tombstones the service's config.
type Dir struct {
	path     string
	store    *Store
	log      *slog.Logger
	failures atomic.Uint64
	// reloaded, if set, is called after each reload (a test seam).
	reloaded func(error)
}

// NewDir validates cfg.
func NewDir(cfg DirConfig) (*Dir, error) {
	if cfg.Path == "" {
		return nil, errors.New("svcconfig: DirConfig.Path is required")
	}
	if cfg.Store == nil {
		return nil, errors.New("svcconfig: DirConfig.Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dir{path: cfg.Path, store: cfg.Store, log: cfg.Logger.With("dir", cfg.Path)}, nil
}

// Failures counts files refused (bad name, unreadable, bad content) and
// store writes that failed.
func (d *Dir) Failures() uint64 { return d.failures.Load() }

// Load reads the directory once and applies it. It returns the errors of
// the files it refused, joined; the other files are applied.
func (d *Dir) Load(ctx context.Context) error {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		d.failures.Add(1)
		return fmt.Errorf("svcconfig: read %s: %w", d.path, err)
	}
	var errs []error
	fail := func(err error) {
		d.failures.Add(1)
		d.log.Error("service config not applied, the previous one stays", "err", err)
		errs = append(errs, err)
	}
	present := map[string]bool{}
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(name, ".") || ent.IsDir() {
			continue // editor files, ConfigMap's ..data
		}
		service, err := ServiceFromFile(name)
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
		d.log.Info("service config applied", "service", service, "file", name)
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
		d.log.Info("service config file removed, tombstoned", "service", service, "file", e.status.File)
	}
	return errors.Join(errs...)
}

// as returns ctx with the identity of a change made by the file name:
// "file:PATH", for the audit entries.
func (d *Dir) as(ctx context.Context, name string) context.Context {
	return authn.NewContext(ctx, authn.Identity{Name: "file:" + filepath.Join(d.path, name), Method: audit.MethodFile})
}

// Run watches the directory and reloads it after each burst of changes,
// until ctx ends. It loads once when the watch is in place.
func (d *Dir) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("svcconfig: watch %s: %w", d.path, err)
	}
	defer w.Close()
	if err := w.Add(d.path); err != nil {
		return fmt.Errorf("svcconfig: watch %s: %w", d.path, err)
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
				return fmt.Errorf("svcconfig: watch %s: event channel closed", d.path)
			}
			if !pending {
				pending = true
				t.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("svcconfig: watch %s: error channel closed", d.path)
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

func (d *Dir) reload(ctx context.Context) {
	err := d.Load(ctx)
	if d.reloaded != nil {
		d.reloaded(err)
	}
}

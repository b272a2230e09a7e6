package svcconfig

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spillway/spillway/registry/settings"
)

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
// per service, owned by the service's team (a settings.Dir). A file that
// fails to parse is logged and counted, and the service's previous config
// stays; a removed file tombstones the service's config.
type Dir struct {
	dir *settings.Dir[Config]
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
	d := &Dir{}
	var err error
	d.dir, err = settings.NewDir(settings.DirConfig[Config]{Path: cfg.Path, Store: cfg.Store.set, Logger: cfg.Logger, Reloaded: func(err error) {
		if d.reloaded != nil {
			d.reloaded(err)
		}
	}})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Failures counts files refused (bad name, unreadable, bad content) and
// store writes that failed.
func (d *Dir) Failures() uint64 { return d.dir.Failures() }

// Load reads the directory once and applies it. It returns the errors of
// the files it refused, joined; the other files are applied.
func (d *Dir) Load(ctx context.Context) error { return d.dir.Load(ctx) }

// Run watches the directory and reloads it after each burst of changes,
// until ctx ends. It loads once when the watch is in place.
func (d *Dir) Run(ctx context.Context) error { return d.dir.Run(ctx) }

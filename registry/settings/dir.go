package settings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/spillway/spillway/internal/strictyaml"
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
//
// A file must be a regular file, or a symlink that resolves to one inside
// the directory (a Kubernetes ConfigMap volume: SERVICE.yaml ->
// ..data/SERVICE.yaml, ..data -> ..2026_…); a symlink out of the
// directory, a directory, a device or a FIFO is refused, as is a file
// over Kind.MaxBody bytes (the bound of a PUT): logged, counted, and the
// service's previous setting stays. The file is opened through an
// os.Root of the directory, so a symlink swapped after the check still
// cannot lead out of it.
//
// No text of a file is ever logged, returned or audited unless it is a
// valid setting: a parse error keeps its file, line and field but loses
// every quoted value (contentFree), and the audit entry of a refused
// file has no new value.
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

// Failures counts files refused (bad name, not a regular file in the
// directory, too large, unreadable, bad content) and store writes that
// failed.
func (d *Dir[T]) Failures() uint64 { return d.failures.Load() }

// Load reads the directory once and applies it. It returns the errors of
// the files it refused, joined; the other files are applied.
func (d *Dir[T]) Load(ctx context.Context) error {
	k := d.store.kind
	real, err := filepath.EvalSymlinks(d.path)
	if err != nil {
		d.failures.Add(1)
		return fmt.Errorf("%s: read %s: %w", k.Name, d.path, err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		d.failures.Add(1)
		return fmt.Errorf("%s: read %s: %w", k.Name, d.path, err)
	}
	defer root.Close()
	ents, err := os.ReadDir(real)
	if err != nil {
		d.failures.Add(1)
		return fmt.Errorf("%s: read %s: %w", k.Name, d.path, err)
	}
	var errs []error
	fail := func(name string, err error) {
		d.failures.Add(1)
		d.log.Error(k.Noun+" not applied, the previous one stays", "file", name, "err", err)
		errs = append(errs, err)
	}
	present := map[string]bool{}
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(name, ".") {
			continue // editor files, ConfigMap's ..data
		}
		service, err := k.ServiceFromFile(name)
		if err != nil {
			fail(name, err)
			continue
		}
		present[service] = true
		data, err := d.read(root, real, name)
		if err != nil {
			fail(name, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if e, ok := d.store.current(service); ok && e.status.Source == SourceDir && !e.status.Deleted && e.status.YAML == string(data) {
			continue
		}
		// Parse before Set, so that a refused file's text reaches neither
		// the error nor the audit entry (Set records the text it is given).
		if _, err := d.store.parse(service, name, data); err != nil {
			err = contentFree(err)
			old := d.store.render(service)
			d.store.record(d.as(ctx, name), service, "put", func() (string, string) { return old, "" }, &err)
			fail(name, err)
			continue
		}
		if _, err := d.store.Set(d.as(ctx, name), service, data, SourceDir, name); err != nil {
			fail(name, err)
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
			fail(e.status.File, err)
			continue
		}
		d.log.Info(k.Noun+" file removed, tombstoned", "service", service, "file", e.status.File)
	}
	return errors.Join(errs...)
}

// Refusals of a file of the directory, before it is read.
var (
	errNotRegular = errors.New("not a regular file")
	errOutside    = errors.New("symlink out of the directory")
	errTooLarge   = errors.New("too large")
)

// read returns the text of the directory's file name: a regular file, or
// a symlink that resolves to one inside real (the directory, its symlinks
// resolved), of at most maxBody bytes. root is real opened: the file is
// opened through it with O_NOFOLLOW on the resolved name, so a symlink
// swapped in after the check can neither lead out of the directory nor be
// followed; the open file is checked again (fstat).
func (d *Dir[T]) read(root *os.Root, real, name string) ([]byte, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	open := name
	switch mode := fi.Mode(); {
	case mode.IsRegular():
	case mode&os.ModeSymlink != 0:
		target, err := filepath.EvalSymlinks(filepath.Join(real, name))
		if err != nil {
			return nil, fmt.Errorf("symlink: %w", err)
		}
		rel, err := filepath.Rel(real, target)
		if err != nil || !filepath.IsLocal(rel) {
			return nil, fmt.Errorf("%w (to %s)", errOutside, target)
		}
		open = rel
	default:
		return nil, fmt.Errorf("%w (%s)", errNotRegular, mode.Type())
	}
	// O_NONBLOCK: a FIFO swapped in does not block the open.
	f, err := root.OpenFile(open, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w (%s)", errNotRegular, fi.Mode().Type())
	}
	max := d.store.maxBody()
	if fi.Size() > max {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", errTooLarge, fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: over the limit of %d bytes", errTooLarge, max)
	}
	return data, nil
}

// contentFree returns err without the file's text: a *strictyaml.Error
// keeps its file, line, field and kind, and its message loses every
// quoted value (quotesRedacted), which is where the parsers (and
// yaml.v3's "unknown anchor 'x'") put what they read. Any other error
// (Config.Check's) loses its quoted values too and still unwraps to err,
// for errors.Is.
func contentFree(err error) error {
	if pe, ok := errors.AsType[*strictyaml.Error](err); ok {
		c := *pe
		c.Msg = quotesRedacted(c.Msg)
		return &c
	}
	return &redactedError{msg: quotesRedacted(err.Error()), err: err}
}

// redactedError is an error whose text is msg.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// quotesRedacted replaces each quoted part of s, "…" (Go quoting, with
// escapes), `…` or '…', by its quotes around "…"; an unclosed quote runs
// to the end.
func quotesRedacted(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		q := s[i]
		if q != '"' && q != '`' && q != '\'' {
			b.WriteByte(q)
			continue
		}
		j := i + 1
		for ; j < len(s) && s[j] != q; j++ {
			if q == '"' && s[j] == '\\' {
				j++
			}
		}
		b.WriteByte(q)
		b.WriteString("…")
		b.WriteByte(q)
		i = j
	}
	return b.String()
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

package svcconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/audit"
)

// marker stands for a secret in a file that is not a service config.
const marker = "zqxSECRETzqx"

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// leakRig is a directory with a Store, a Dir and the real audit log on
// a memory KV, all logging into one buffer.
type leakRig struct {
	dir   string
	store *Store
	d     *Dir
	audit *audit.Log
	logs  *lockedBuffer
}

func newLeakRig(t *testing.T) *leakRig {
	t.Helper()
	r := &leakRig{dir: t.TempDir(), logs: &lockedBuffer{}}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	if r.audit, err = audit.New(audit.Config{KV: systemstoretest.NewMemKV(), Replica: "r1", Logger: log}); err != nil {
		t.Fatal(err)
	}
	if r.store, err = NewStore(StoreConfig{Audit: r.audit, Logger: log}); err != nil {
		t.Fatal(err)
	}
	if r.d, err = NewDir(DirConfig{Path: r.dir, Store: r.store, Logger: log}); err != nil {
		t.Fatal(err)
	}
	return r
}

// noLeak fails t if secret is in err, the logs or an audit entry.
func (r *leakRig) noLeak(t *testing.T, secret string, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("error echoes the file: %v", err)
	}
	if l := r.logs.String(); strings.Contains(l, secret) {
		t.Errorf("logs echo the file:\n%s", l)
	}
	entries, lerr := r.audit.List(context.Background(), time.Time{}, 100)
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, e := range entries {
		if b, _ := json.Marshal(e); bytes.Contains(b, []byte(secret)) {
			t.Errorf("audit entry echoes the file: %s", b)
		}
	}
}

// TestDirRefusesUnsafeFiles is the attack of issue #28 item 7: a team
// that may write into the directory links SERVICE.yaml to a file outside
// it (evil.yaml -> /etc/passwd) or puts a non-regular file there. The
// file is refused (counted, logged naming it), the service's previous
// config stays, and nothing of the outside file reaches an error, a log
// line or an audit entry.
func TestDirRefusesUnsafeFiles(t *testing.T) {
	outside := t.TempDir()
	secretFile := filepath.Join(outside, "passwd")
	if err := os.WriteFile(secretFile, []byte("root:x:0:0:root:/root:/bin/bash\n"+marker+":x:1:1::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		secret string
		attack func(t *testing.T, dir string) // replaces dir/evil.yaml
		why    string
	}{
		{"absoluteSymlinkOut", marker, func(t *testing.T, dir string) { symlink(t, secretFile, filepath.Join(dir, "evil.yaml")) }, "symlink out of the directory"},
		{"relativeSymlinkOut", marker, func(t *testing.T, dir string) {
			rel, _ := filepath.Rel(dir, secretFile)
			symlink(t, rel, filepath.Join(dir, "evil.yaml"))
		}, "symlink out of the directory"},
		{"etcPasswd", "root:x", func(t *testing.T, dir string) {
			if _, err := os.Stat("/etc/passwd"); err != nil {
				t.Fatalf("the attack's target: %v", err)
			}
			symlink(t, "/etc/passwd", filepath.Join(dir, "evil.yaml"))
		}, "symlink out of the directory"},
		// A ConfigMap-like layout whose ..data leads out.
		{"dataSymlinkOut", marker, func(t *testing.T, dir string) {
			symlink(t, outside, filepath.Join(dir, "..data"))
			symlink(t, "..data/passwd", filepath.Join(dir, "evil.yaml"))
		}, "symlink out of the directory"},
		{"symlinkToDir", marker, func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			symlink(t, "sub", filepath.Join(dir, "evil.yaml"))
		}, "not a regular file"},
		{"fifo", marker, func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "evil.yaml"), 0o644); err != nil {
				t.Fatalf("mkfifo: %v", err)
			}
		}, "not a regular file"},
		{"symlinkToFifo", marker, func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, ".pipe"), 0o644); err != nil {
				t.Fatalf("mkfifo: %v", err)
			}
			symlink(t, ".pipe", filepath.Join(dir, "evil.yaml"))
		}, "not a regular file"},
		{"directory", marker, func(t *testing.T, dir string) { os.Mkdir(filepath.Join(dir, "evil.yaml"), 0o755) }, "not a regular file"},
		{"tooLarge", marker, func(t *testing.T, dir string) {
			write(t, dir, "evil.yaml", "# "+marker+"\n"+strings.Repeat("#", MaxBytes))
		}, "over the limit of 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newLeakRig(t)
			write(t, r.dir, "evil.yaml", "strategy: pid\n")
			if err := r.d.Load(ctx); err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(r.dir, "evil.yaml"))
			tc.attack(t, r.dir)

			done := make(chan error, 1)
			go func() { done <- r.d.Load(ctx) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Load blocks on the file") // a FIFO opened for reading
			}
			if err == nil || !strings.Contains(err.Error(), "evil.yaml") || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("Load = %v, want evil.yaml refused: %s", err, tc.why)
			}
			if n := r.d.Failures(); n != 1 {
				t.Errorf("Failures = %d, want 1", n)
			}
			if c, st, ok := r.store.Get("evil"); !ok || st.Deleted || c.Strategy != PID || st.File != "evil.yaml" {
				t.Errorf("Get(evil) = %s %+v %v, want the previous pid config from evil.yaml", c.Strategy, st, ok)
			}
			if l := r.logs.String(); !strings.Contains(l, "file=evil.yaml") || !strings.Contains(l, tc.why) {
				t.Errorf("logs name neither the file nor why:\n%s", l)
			}
			r.noLeak(t, tc.secret, err)
		})
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestDirConfigMapLayout: a Kubernetes ConfigMap volume, whose files are
// symlinks into ..data, itself a symlink to a timestamped directory,
// loads; kubelet's swap of ..data to a new directory applies the new
// text.
func TestDirConfigMapLayout(t *testing.T) {
	ctx := context.Background()
	r := newLeakRig(t)
	version := func(ts, text string) {
		t.Helper()
		sub := filepath.Join(r.dir, ts)
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, sub, "payments.yaml", text)
	}
	version("..2026_12_03_10_00_00.123456789", "strategy: pid\n")
	symlink(t, "..2026_12_03_10_00_00.123456789", filepath.Join(r.dir, "..data"))
	symlink(t, "..data/payments.yaml", filepath.Join(r.dir, "payments.yaml"))
	if err := r.d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if c, st, ok := r.store.Get("payments"); !ok || c.Strategy != PID || st.File != "payments.yaml" {
		t.Fatalf("Get(payments) = %s %+v %v, want pid from payments.yaml", c.Strategy, st, ok)
	}
	// kubelet: write the new directory, point ..data_tmp at it, rename
	// it over ..data, remove the old directory.
	version("..2026_12_04_10_00_00.987654321", "strategy: static\n")
	symlink(t, "..2026_12_04_10_00_00.987654321", filepath.Join(r.dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(r.dir, "..data_tmp"), filepath.Join(r.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(r.dir, "..2026_12_03_10_00_00.123456789"))
	if err := r.d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _, ok := r.store.Get("payments"); !ok || c.Strategy != Static {
		t.Fatalf("after the swap Get(payments) = %s %v, want static", c.Strategy, ok)
	}
	if n := r.d.Failures(); n != 0 {
		t.Errorf("Failures = %d, want 0", n)
	}
}

// TestDirInvalidFileNotEchoed: a file that is not a valid config is
// refused with its file, line and field named, but none of its text
// reaches the error, the logs or the audit entry (reason, old, new);
// the previous config stays.
func TestDirInvalidFileNotEchoed(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"enum", "strategy: " + marker + "\n", `payments.yaml:1: strategy: "…" is not one of`},
		{"notAMapping", "root:x:0:0:root:/root:/bin/bash\n" + marker + ":x:1:1::/:/bin/sh\n", `payments.yaml:1: want a mapping of`},
		{"json", `{"strategy": "` + marker + `"}`, `payments.yaml:1: strategy: "…" is not one of`},
		{"number", "strategy: pid\npid:\n  kp: " + marker + "\n", `payments.yaml:3: pid.kp: want a number, got "…"`},
		{"duration", "report_interval: " + marker + "\n", `payments.yaml:1: report_interval: want a duration`},
		{"region", "redirects:\n  - from: " + marker + "\n    to: eu\n", `payments.yaml:2: redirects[0].from: "…" is not a region name`},
		{"blockScalar", "strategy: |\n  " + marker + "\n  more\n", `payments.yaml:1: strategy: "…" is not one of`},
		{"unknownAnchor", "strategy: *" + marker + "\n", `payments.yaml: malformed YAML: unknown anchor '…' referenced`},
		{"malformed", "strategy: [" + marker + "\n", `payments.yaml: malformed YAML: line 1:`},
		{"list", "- " + marker + "\n", `payments.yaml:1: want a mapping of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newLeakRig(t)
			write(t, r.dir, "payments.yaml", "strategy: pid\n")
			if err := r.d.Load(ctx); err != nil {
				t.Fatal(err)
			}
			write(t, r.dir, "payments.yaml", tc.text)
			err := r.d.Load(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
				t.Errorf("Load = %v, want an ErrInvalid containing %s", err, tc.want)
			}
			if c, _, _ := r.store.Get("payments"); c.Strategy != PID || r.d.Failures() != 1 {
				t.Errorf("after a bad file: %s, failures %d; want pid kept, 1", c.Strategy, r.d.Failures())
			}
			entries, _ := r.audit.List(ctx, time.Time{}, 10)
			if len(entries) != 2 || entries[0].Outcome != audit.OutcomeFailed || entries[0].Old != "strategy: pid\n" || entries[0].New != "" ||
				!strings.Contains(entries[0].Reason, "payments.yaml") || entries[0].Identity != "file:"+filepath.Join(r.dir, "payments.yaml") {
				t.Errorf("audit = %+v, want a failed put by the file naming it, old the previous config, no new", entries)
			}
			r.noLeak(t, marker, err)
		})
	}
}

// FuzzDirContentFree: whatever a file holds, no value of it (a scalar
// that is not a mapping key, where the marker is) is in the error, the
// logs or the audit entry of its load. Keys may be named: they are the
// fields an error points at.
func FuzzDirContentFree(f *testing.F) {
	for _, s := range []string{
		"strategy: " + marker + "\n",
		"root:x:0:0:root:/root:/bin/bash\n" + marker + ":x:1:1::/:/bin/sh\n",
		`{"strategy": "` + marker + `"}`,
		"strategy: pid\npid:\n  kp: " + marker + "\n",
		"redirects:\n  - from: " + marker + "\n    to: eu\n",
		"exclude:\n  - region: '" + marker + "'\n",
		"blend:\n  from: pid\n  to: \"" + marker + "\\\"`'\"\n",
		"strategy: *" + marker + "\n",
		"a: &" + marker + " 1\n",
		"strategy: !" + marker + " pid\n",
		"strategy: [" + marker + "\n",
		"- " + marker + "\n",
		"slow_start:\n  ramp: " + marker + "\n",
		"# " + marker + "\nstrategy: static\n",
		"strategy: pid\n---\n" + marker + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !bytes.Contains(data, []byte(marker)) || inKey(data, marker) {
			return // no secret outside a key: nothing that could leak
		}
		r := newLeakRig(t)
		if err := os.WriteFile(filepath.Join(r.dir, "payments.yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := r.d.Load(context.Background())
		if err == nil {
			return // a valid config (the marker in a comment): its text is the config
		}
		r.noLeak(t, marker, err)
	})
}

// inKey reports whether s is in a mapping key of a document of data.
func inKey(data []byte, s string) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			return false
		}
		if keyHas(&n, s) {
			return true
		}
	}
}

func keyHas(n *yaml.Node, s string) bool {
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && strings.Contains(c.Value, s) {
			return true
		}
		if keyHas(c, s) {
			return true
		}
	}
	return false
}

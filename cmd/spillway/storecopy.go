package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
)

// copiedPrefixes are what `spillway store copy` moves: the durable state.
// Last-seen stamps and elections are live state of running replicas and
// are not copied.
var copiedPrefixes = []string{systemstore.RegistrationsPrefix, systemstore.SettingsPrefix}

// storeMain runs `spillway store <command>`; it returns the exit code.
func storeMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "copy" {
		fmt.Fprintln(stderr, "usage: spillway store copy --from bbolt://DIR|etcd://...|spanner://... --to etcd://...|spanner://...|bbolt://DIR [--overwrite] [--etcd-* flags]")
		return 2
	}
	fs := flag.NewFlagSet("spillway store copy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "source store: bbolt://DIR (a stopped single-replica server's --data-dir), etcd://... or spanner://...")
	to := fs.String("to", "", "target store, same forms")
	overwrite := fs.Bool("overwrite", false, "copy even if the target already holds registrations or settings (same keys are replaced)")
	var etcd EtcdFlagConfig
	fs.StringVar(&etcd.CA, "etcd-ca", "", "PEM CA `file` of the etcd servers (turns on TLS)")
	fs.StringVar(&etcd.Cert, "etcd-cert", "", "PEM client certificate `file` for etcd")
	fs.StringVar(&etcd.Key, "etcd-key", "", "PEM client key `file` for etcd")
	fs.StringVar(&etcd.Username, "etcd-username", "", "etcd user")
	fs.StringVar(&etcd.PasswordFile, "etcd-password-file", "", "`file` holding the etcd user's password")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	n, err := storeCopy(ctx, *from, *to, etcd, *overwrite)
	if err != nil {
		fmt.Fprintf(stderr, "spillway store copy: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "copied %d registrations and %d settings from %s to %s\n", n[systemstore.RegistrationsPrefix], n[systemstore.SettingsPrefix], *from, *to)
	return 0
}

// openKV opens one side of a copy; field names the flag in errors.
func openKV(ctx context.Context, field, url string, etcd EtcdFlagConfig) (systemstore.KV, error) {
	if dir, ok := strings.CutPrefix(url, "bbolt://"); ok || strings.HasPrefix(url, "bolt://") {
		if !ok {
			dir = strings.TrimPrefix(url, "bolt://")
		}
		if dir == "" {
			return nil, fmt.Errorf("%s %q: no directory", field, url)
		}
		kv, err := boltstore.Open(dir, boltstore.Options{})
		if err != nil {
			return nil, fmt.Errorf("%s %q (is a server still running on it?): %w", field, url, err)
		}
		return kv, nil
	}
	if url == "" {
		return nil, fmt.Errorf("%s: empty; want bbolt://DIR, etcd://host:port/prefix or spanner://...", field)
	}
	c := StoreConfig{URL: url, Etcd: etcd}
	if spec, err := parseStoreURL(url); err == nil && spec.Kind != "etcd" {
		c.Etcd = EtcdFlagConfig{}
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	st, err := openStorage(ctx, c, "", slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if st.kv == nil {
		return nil, fmt.Errorf("%s %q: not a shared store", field, url)
	}
	return st.kv, nil
}

// storeCopy copies every registration and setting of from into to, and
// reads them back. It refuses a target that already holds any, unless
// overwrite.
func storeCopy(ctx context.Context, from, to string, etcd EtcdFlagConfig, overwrite bool) (map[string]int, error) {
	if from == to {
		return nil, fmt.Errorf("--from and --to are both %q", from)
	}
	src, err := openKV(ctx, "--from", from, etcd)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := openKV(ctx, "--to", to, etcd)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	n := map[string]int{}
	for _, p := range copiedPrefixes {
		if !overwrite {
			have, _, err := dst.List(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("--to %s: list %s: %w", to, p, err)
			}
			if len(have) > 0 {
				return nil, fmt.Errorf("--to %s: already holds %d keys under %s; stop its servers and pass --overwrite to replace them", to, len(have), p)
			}
		}
	}
	for _, p := range copiedPrefixes {
		kvs, _, err := src.List(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("--from %s: list %s: %w", from, p, err)
		}
		for _, kv := range kvs {
			if _, err := dst.Put(ctx, kv.Key, kv.Value); err != nil {
				return nil, fmt.Errorf("--to %s: after %d keys: %w", to, n[p], err)
			}
			n[p]++
		}
		// Read back what was written.
		for _, kv := range kvs {
			v, _, err := dst.Get(ctx, kv.Key)
			if err != nil || !bytes.Equal(v, kv.Value) {
				return nil, fmt.Errorf("--to %s: key %s does not read back (err %v)", to, kv.Key, err)
			}
		}
	}
	return n, nil
}

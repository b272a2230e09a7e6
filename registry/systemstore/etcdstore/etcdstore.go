// Package etcdstore is the systemstore.KV of an etcd v3 cluster, for several
// spillway replicas that share one store.
//
// Keys live under Config.Prefix; revisions are etcd's (a Put returns the
// header revision of its write, Get and List the key's mod revision);
// Watch is an etcd watch from afterRev+1 and so delivers every change, in
// order. PutBatch (systemstore.BatchPutter) writes records in
// transactions within etcd's default limits (--max-txn-ops 128,
// --max-request-bytes 1.5 MiB), one revision each. Tested against
// Debian's etcd 3.4.23 with the v3.7 client.
//
// # Concurrency
//
// A KV is safe for concurrent use; it holds one etcd client. Close ends
// the watches.
package etcdstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/spillway/spillway/registry/systemstore"
)

// Defaults for Config's zero values.
const (
	DefaultPrefix         = "/spillway/"
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
)

// Config says how to reach etcd.
type Config struct {
	// Endpoints are the client URLs or host:port of the cluster; at least
	// one.
	Endpoints []string
	// Prefix namespaces every key; "" means DefaultPrefix. It must start
	// and end with "/".
	Prefix string
	// TLS, or nil for plain connections.
	TLS *tls.Config
	// Username and Password for etcd auth; "" means none.
	Username, Password string
	// DialTimeout bounds the first connection; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// RequestTimeout bounds each Put, Delete, Get and page of a List
	// (1,000 keys) whose context has no earlier deadline; zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger, or nil for none.
	Logger *slog.Logger
}

// KV is the etcd systemstore.KV.
type KV struct {
	// Read-only after Open.
	cli     *clientv3.Client
	prefix  string
	timeout time.Duration
	name    string // "etcd <endpoints>" in errors
	log     *slog.Logger
	ctx     context.Context // ends with Close
	cancel  context.CancelFunc

	closed atomic.Bool

	// listPage and listSplit replace listPage and listSplitAbove when
	// set (tests).
	listPage, listSplit int64
}

var _ systemstore.KV = (*KV)(nil)

// Open connects to etcd and checks that it answers.
func Open(ctx context.Context, cfg Config) (*KV, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: Endpoints: none")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("etcd: Prefix: %q must start and end with /", cfg.Prefix)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := "etcd " + strings.Join(cfg.Endpoints, ",")
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         cfg.TLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		Logger:      zap.NewNop(),
		Context:     ctx,
		// Reconnect within about a second of etcd coming back (gRPC's
		// default backoff grows to 2 minutes), and notice a dead
		// connection within seconds: replicas resync after an outage
		// without a restart.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		})},
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", name, err)
	}
	// clientv3.New does not wait for a connection: ask once, so a wrong
	// address or credentials fail here, naming the store.
	sctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(sctx, cfg.Prefix, clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%s: first request: %w", name, err)
	}
	kctx, kcancel := context.WithCancel(context.Background())
	return &KV{cli: cli, prefix: cfg.Prefix, timeout: cfg.RequestTimeout, name: name, log: log, ctx: kctx, cancel: kcancel}, nil
}

// LoadTLS builds the TLS config of --etcd-ca, --etcd-cert and --etcd-key;
// all empty means nil (plain). cert and key go together.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca: %s has no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "":
		return nil, errors.New("--etcd-key: empty, but --etcd-cert is set")
	case keyFile != "":
		return nil, errors.New("--etcd-cert: empty, but --etcd-key is set")
	}
	return cfg, nil
}

func (s *KV) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, systemstore.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return ctx, cancel, nil
}

// fail wraps err of what on key, naming the store.
func (s *KV) fail(what, key string, err error) error {
	if s.closed.Load() {
		err = errors.Join(systemstore.ErrClosed, err)
	}
	return fmt.Errorf("%s: %s %s: %w", s.name, what, key, err)
}

// Put implements systemstore.KV.
func (s *KV) Put(ctx context.Context, key string, value []byte) (int64, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, fmt.Errorf("put: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, s.fail("put", key, err)
	}
	defer cancel()
	resp, err := s.cli.Put(ctx, s.prefix+key, string(value))
	if err != nil {
		return 0, s.fail("put", key, err)
	}
	return resp.Header.Revision, nil
}

// Delete implements systemstore.KV.
func (s *KV) Delete(ctx context.Context, key string) (int64, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("delete: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, s.fail("delete", key, err)
	}
	defer cancel()
	resp, err := s.cli.Delete(ctx, s.prefix+key)
	if err != nil {
		return 0, s.fail("delete", key, err)
	}
	return resp.Header.Revision, nil
}

// Get implements systemstore.KV.
func (s *KV) Get(ctx context.Context, key string) ([]byte, int64, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return nil, 0, fmt.Errorf("get: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, 0, s.fail("get", key, err)
	}
	defer cancel()
	resp, err := s.cli.Get(ctx, s.prefix+key)
	if err != nil {
		return nil, 0, s.fail("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, fmt.Errorf("get %s: %w", key, systemstore.ErrNotFound)
	}
	kv := resp.Kvs[0]
	return kv.Value, kv.ModRevision, nil
}

// List implements systemstore.KV. It reads in pages of 1,000 keys, all at the
// revision of the first page. The request timeout bounds each page, not the
// whole List: 100,000 registrations are 100 pages (about 44 MB), which took
// 4.3 to more than 5 s on a busy 2-core machine, so one bound over all of
// them failed a replica's start and every resync after a store hiccup.
//
// A range request costs etcd (3.4, and 3.5 before its count fix) a walk
// of every key from the page's first key to the range end, whatever its
// limit: paging through N keys walks N²/2000 of them, which at 1,000,000
// registrations outlasted the request timeout. So a range that holds more
// than splitAbove keys (the Count of its first page) is not paged but
// split at the next key byte, into one range per key character (and the
// gaps between them, in case a key outside systemstore.ValidateKey is
// there), recursively; every page then walks at most splitAbove keys.
func (s *KV) List(ctx context.Context, prefix string) ([]systemstore.KeyValue, int64, error) {
	if err := systemstore.ValidatePrefix(prefix); err != nil {
		return nil, 0, fmt.Errorf("list: %w", err)
	}
	l := lister{s: s, ctx: ctx, prefix: prefix}
	start := s.prefix + prefix
	if err := l.list(start, clientv3.GetPrefixRangeEnd(start), 0); err != nil {
		return nil, 0, s.fail("list", prefix, err)
	}
	return l.out, l.rev, nil
}

// Limits of List: keys per page, and the keys in a range above which it
// is split rather than paged.
const (
	listPage       = 1000
	listSplitAbove = 20 * listPage
	// listMaxDepth bounds the splitting (keys are at most 512 bytes).
	listMaxDepth = systemstore.MaxKeyLen
)

// keyBytes are the bytes systemstore.ValidateKey allows, in order.
var keyBytes = func() []byte {
	var out []byte
	for c := 0; c < 256; c++ {
		if err := systemstore.ValidatePrefix("k" + string(rune(c))); err == nil && c < 0x80 {
			out = append(out, byte(c))
		}
	}
	return out
}()

// lister is one List: its revision (set by the first page) and what it
// has read.
type lister struct {
	s      *KV
	ctx    context.Context
	prefix string
	rev    int64
	out    []systemstore.KeyValue
}

// list appends every key in [from, end), in order.
func (l *lister) list(from, end string, depth int) error {
	page, split := cmp.Or(l.s.listPage, listPage), cmp.Or(l.s.listSplit, listSplitAbove)
	start := from
	for first := true; ; first = false {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if l.rev != 0 {
			opts = append(opts, clientv3.WithRev(l.rev))
		}
		pctx, cancel, err := l.s.op(l.ctx)
		if err != nil {
			return err
		}
		resp, err := l.s.cli.Get(pctx, start, opts...)
		cancel()
		if err != nil {
			return err
		}
		if l.rev == 0 {
			l.rev = resp.Header.Revision
		}
		if first && resp.More && resp.Count > split && depth < listMaxDepth && splittable(from, end) {
			return l.splitRange(from, end, depth)
		}
		for _, kv := range resp.Kvs {
			l.out = append(l.out, systemstore.KeyValue{Key: strings.TrimPrefix(string(kv.Key), l.s.prefix), Value: kv.Value, Rev: kv.ModRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// splittable tells whether splitRange can cut [from, end): it is from's
// prefix range, or from's prefix range ends inside it. The range before
// the first key byte, [P, P+"+"), is neither (it holds P itself and keys
// with bytes below '+', which ValidateKey refuses): it is paged.
func splittable(from, end string) bool {
	pe := clientv3.GetPrefixRangeEnd(from)
	return end == pe || (pe != "\x00" && pe <= end)
}

// splitRange lists [from, end) as smaller ranges, in order. A prefix range
// (end is from's PrefixEnd) is cut before each key byte after from; any
// other range [P+c, end) is P+c's prefix range and then the rest.
func (l *lister) splitRange(from, end string, depth int) error {
	if end != clientv3.GetPrefixRangeEnd(from) {
		mid := clientv3.GetPrefixRangeEnd(from)
		if err := l.list(from, mid, depth+1); err != nil {
			return err
		}
		return l.list(mid, end, depth+1)
	}
	lo := from
	for _, c := range keyBytes {
		hi := from + string(c)
		if err := l.list(lo, hi, depth+1); err != nil {
			return err
		}
		lo = hi
	}
	return l.list(lo, end, depth+1)
}

// Watch implements systemstore.KV.
func (s *KV) Watch(ctx context.Context, prefix string, afterRev int64) <-chan systemstore.WatchEvent {
	out := make(chan systemstore.WatchEvent, 1)
	if err := systemstore.ValidatePrefix(prefix); err != nil {
		out <- systemstore.WatchEvent{Err: fmt.Errorf("watch: %w", err)}
		close(out)
		return out
	}
	if s.closed.Load() {
		out <- systemstore.WatchEvent{Err: s.fail("watch", prefix, systemstore.ErrClosed)}
		close(out)
		return out
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel) // Close ends the watch
	wch := s.cli.Watch(clientv3.WithRequireLeader(wctx), s.prefix+prefix, clientv3.WithPrefix(), clientv3.WithRev(afterRev+1))
	go func() {
		defer close(out)
		defer stop()
		defer cancel()
		send := func(ev systemstore.WatchEvent) bool {
			select {
			case out <- ev:
				return true
			case <-wctx.Done():
				return false
			}
		}
		for resp := range wch {
			if resp.CompactRevision != 0 {
				send(systemstore.WatchEvent{Err: s.fail("watch", prefix, fmt.Errorf("after revision %d: compacted up to %d: %w", afterRev, resp.CompactRevision, systemstore.ErrCompacted))})
				return
			}
			if err := resp.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					err = errors.Join(systemstore.ErrCompacted, err)
				}
				if wctx.Err() == nil {
					send(systemstore.WatchEvent{Err: s.fail("watch", prefix, err)})
				}
				return
			}
			for _, e := range resp.Events {
				ev := systemstore.WatchEvent{Type: systemstore.EventPut, Key: strings.TrimPrefix(string(e.Kv.Key), s.prefix), Value: e.Kv.Value, Rev: e.Kv.ModRevision}
				if e.Type == clientv3.EventTypeDelete {
					ev.Type, ev.Value = systemstore.EventDelete, nil
				}
				if !send(ev) {
					return
				}
			}
		}
	}()
	return out
}

// Compact drops etcd's history up to rev (etcd's own compaction, which an
// operator usually runs with --auto-compaction-retention); a watch from
// before rev then fails with systemstore.ErrCompacted.
func (s *KV) Compact(ctx context.Context, rev int64) error {
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return s.fail("compact", fmt.Sprint(rev), err)
	}
	defer cancel()
	if _, err := s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return s.fail("compact", fmt.Sprint(rev), err)
	}
	return nil
}

// Close ends the watches and closes the client.
func (s *KV) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel()
	return s.cli.Close()
}

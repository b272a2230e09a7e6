// Package spannerstore is the systemstore.KV of a Cloud Spanner database, for
// several spillway replicas that share one store.
//
// Open creates the database and its tables when they are missing, through
// the database admin API. Every key is one row of SpillwayKV; a delete
// writes a tombstone (Deleted = true) so that watchers see it, and
// tombstones older than Config.TombstoneRetention are dropped. A revision
// is the commit timestamp of the write, in nanoseconds since 1970
// (spanner.CommitTimestamp); two writes of one commit timestamp share a
// revision. Watch polls every Config.PollInterval for rows whose commit
// timestamp is past the last one it delivered, through the index on it.
//
// Tested with the real client against spannertest over gRPC; see
// docs/replication.md for what only a real Spanner can test.
//
// # Concurrency
//
// A KV is safe for concurrent use. Each Watch runs one polling goroutine;
// one more drops tombstones every Config.GCInterval. Close ends them.
package spannerstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"

	"github.com/spillway/spillway/registry/systemstore"
)

// Defaults for Config's zero values.
const (
	DefaultPollInterval       = 500 * time.Millisecond
	DefaultTombstoneRetention = 24 * time.Hour
	DefaultGCInterval         = time.Hour
	DefaultRequestTimeout     = 10 * time.Second
)

// The schema Open creates when missing.
const (
	kvTable   = "SpillwayKV"
	metaTable = "SpillwayMeta"
	kvIndex   = "SpillwayKVByWritten"
)

var schema = []struct{ name, ddl string }{
	{kvTable, `CREATE TABLE SpillwayKV (
	Key STRING(1024) NOT NULL,
	Value BYTES(MAX),
	Deleted BOOL NOT NULL,
	Written TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (Key)`},
	{kvIndex, `CREATE INDEX SpillwayKVByWritten ON SpillwayKV(Written)`},
	{metaTable, `CREATE TABLE SpillwayMeta (
	Name STRING(256) NOT NULL,
	Rev INT64 NOT NULL,
) PRIMARY KEY (Name)`},
}

var kvCols = []string{"Key", "Value", "Deleted", "Written"}

// Config says which database to use and how.
type Config struct {
	// Database is projects/P/instances/I/databases/D.
	Database string
	// PollInterval is how often a Watch reads new rows; zero means
	// DefaultPollInterval.
	PollInterval time.Duration
	// TombstoneRetention is how long deletes are kept for watches that
	// lag or replay; zero means DefaultTombstoneRetention.
	TombstoneRetention time.Duration
	// GCInterval is how often tombstones past the retention are dropped;
	// zero means DefaultGCInterval, negative never (tests).
	GCInterval time.Duration
	// RequestTimeout bounds each Put, Delete, Get and List whose context
	// has no earlier deadline; zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// ClientOptions are passed to the Spanner and admin clients (an
	// endpoint and no auth for spannertest). The client also honours
	// SPANNER_EMULATOR_HOST.
	ClientOptions []option.ClientOption
	// Logger, or nil for none.
	Logger *slog.Logger
}

var dbRE = regexp.MustCompile(`^projects/([a-z][-a-z0-9.:]*[a-z0-9])/instances/([a-z][-a-z0-9]*[a-z0-9])/databases/([a-z][a-z0-9_-]*[a-z0-9])$`)

// ValidDatabase checks a database name; the error names the part.
func ValidDatabase(name string) error {
	if dbRE.MatchString(name) {
		return nil
	}
	parts := strings.Split(name, "/")
	if len(parts) != 6 || parts[0] != "projects" || parts[2] != "instances" || parts[4] != "databases" {
		return fmt.Errorf("database: %q is not projects/P/instances/I/databases/D", name)
	}
	for i, part := range []string{"project", "instance", "database"} {
		if !regexp.MustCompile(`^[a-z][-a-z0-9_.:]*[a-z0-9]$`).MatchString(parts[2*i+1]) {
			return fmt.Errorf("database: %s %q: lower-case letters, digits and - only, starting with a letter, at least 2 characters", part, parts[2*i+1])
		}
	}
	return fmt.Errorf("database: %q is not a valid Spanner database name", name)
}

// KV is the Spanner systemstore.KV.
type KV struct {
	// Read-only after Open.
	cfg    Config
	client *spanner.Client
	name   string // "spanner <database>" in errors
	log    *slog.Logger
	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closed atomic.Bool
}

var _ systemstore.KV = (*KV)(nil)

// Open connects, creates the database or the tables that are missing, and
// starts the tombstone collector.
func Open(ctx context.Context, cfg Config) (*KV, error) {
	if err := ValidDatabase(cfg.Database); err != nil {
		return nil, fmt.Errorf("spanner: %w", err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.TombstoneRetention <= 0 {
		cfg.TombstoneRetention = DefaultTombstoneRetention
	}
	if cfg.GCInterval == 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := "spanner " + cfg.Database
	if err := ensureSchema(ctx, cfg, log); err != nil {
		return nil, fmt.Errorf("%s: create schema: %w", name, err)
	}
	client, err := spanner.NewClientWithConfig(ctx, cfg.Database, spanner.ClientConfig{
		DisableNativeMetrics: true,
	}, cfg.ClientOptions...)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", name, err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	s := &KV{cfg: cfg, client: client, name: name, log: log, ctx: kctx, cancel: cancel}
	if cfg.GCInterval > 0 {
		s.wg.Add(1)
		go s.gcLoop()
	}
	return s, nil
}

// ensureSchema creates the database, or the tables and index it lacks.
func ensureSchema(ctx context.Context, cfg Config, log *slog.Logger) error {
	admin, err := database.NewDatabaseAdminClient(ctx, cfg.ClientOptions...)
	if err != nil {
		return err
	}
	defer admin.Close()
	var all []string
	for _, st := range schema {
		all = append(all, st.ddl)
	}
	if _, err := admin.GetDatabase(ctx, &databasepb.GetDatabaseRequest{Name: cfg.Database}); spanner.ErrCode(err) == codes.NotFound {
		i := strings.LastIndex(cfg.Database, "/databases/")
		op, err := admin.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{
			Parent:          cfg.Database[:i],
			CreateStatement: "CREATE DATABASE `" + cfg.Database[i+len("/databases/"):] + "`",
			ExtraStatements: all,
		})
		if err != nil {
			return fmt.Errorf("create database: %w", err)
		}
		if _, err := op.Wait(ctx); err != nil {
			return fmt.Errorf("create database: %w", err)
		}
		log.Info("created spanner database", "database", cfg.Database)
		return nil
	} else if err != nil {
		return fmt.Errorf("get database: %w", err)
	}
	ddl, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: cfg.Database})
	if err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	have := map[string]bool{}
	for _, st := range ddl.Statements {
		f := strings.Fields(st)
		switch {
		case len(f) >= 3 && strings.EqualFold(f[0], "CREATE") && strings.EqualFold(f[1], "TABLE"):
			have[strings.Trim(f[2], "`(")] = true
		case len(f) >= 3 && strings.EqualFold(f[0], "CREATE") && strings.EqualFold(f[1], "INDEX"):
			have[strings.Trim(f[2], "`")] = true
		}
	}
	// One statement at a time: a replica opening at the same moment may
	// create one first (AlreadyExists), and a schema listing may omit
	// indexes.
	created := 0
	for _, st := range schema {
		if have[st.name] {
			continue
		}
		op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: cfg.Database, Statements: []string{st.ddl}})
		if err == nil {
			err = op.Wait(ctx)
		}
		if spanner.ErrCode(err) == codes.AlreadyExists {
			continue
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", st.name, err)
		}
		created++
	}
	if created == 0 {
		return nil
	}
	log.Info("created spanner tables", "database", cfg.Database, "statements", created)
	return nil
}

func rev(t time.Time) int64 { return t.UnixNano() }

func (s *KV) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, systemstore.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	return ctx, cancel, nil
}

func (s *KV) fail(what, key string, err error) error {
	if s.closed.Load() && !errors.Is(err, systemstore.ErrClosed) {
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
	if value == nil {
		value = []byte{} // NULL is reserved for tombstones
	}
	ts, err := s.client.Apply(ctx, []*spanner.Mutation{
		spanner.InsertOrUpdate(kvTable, kvCols, []any{key, value, false, spanner.CommitTimestamp}),
	})
	if err != nil {
		return 0, s.fail("put", key, err)
	}
	return rev(ts), nil
}

// Delete implements systemstore.KV: a tombstone, written only when the key is
// there, in one read-write transaction.
func (s *KV) Delete(ctx context.Context, key string) (int64, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("delete: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, s.fail("delete", key, err)
	}
	defer cancel()
	ts, err := s.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.ReadRow(ctx, kvTable, spanner.Key{key}, []string{"Deleted"})
		if spanner.ErrCode(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		var deleted bool
		if err := row.Columns(&deleted); err != nil {
			return err
		}
		if deleted {
			return nil
		}
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.Update(kvTable, kvCols, []any{key, nil, true, spanner.CommitTimestamp}),
		})
	})
	if err != nil {
		return 0, s.fail("delete", key, err)
	}
	return rev(ts), nil
}

var (
	_ systemstore.CondPutter  = (*KV)(nil)
	_ systemstore.CondDeleter = (*KV)(nil)
)

// currentRev reads key's revision in tx: 0 when absent or a tombstone.
func currentRev(ctx context.Context, tx *spanner.ReadWriteTransaction, key string) (int64, error) {
	row, err := tx.ReadRow(ctx, kvTable, spanner.Key{key}, []string{"Deleted", "Written"})
	if spanner.ErrCode(err) == codes.NotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var deleted bool
	var written time.Time
	if err := row.Columns(&deleted, &written); err != nil {
		return 0, err
	}
	if deleted {
		return 0, nil
	}
	return rev(written), nil
}

// PutIf implements systemstore.CondPutter: the check and the write in
// one read-write transaction.
func (s *KV) PutIf(ctx context.Context, key string, value []byte, want int64) (int64, bool, error) {
	if err := systemstore.ValidatePut(key, value); err != nil {
		return 0, false, fmt.Errorf("put: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return 0, false, s.fail("put", key, err)
	}
	defer cancel()
	if value == nil {
		value = []byte{} // NULL is reserved for tombstones
	}
	var cur int64
	var ok bool
	ts, err := s.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		var err error
		if cur, err = currentRev(ctx, tx, key); err != nil {
			return err
		}
		if ok = cur == want; !ok {
			return nil
		}
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.InsertOrUpdate(kvTable, kvCols, []any{key, value, false, spanner.CommitTimestamp}),
		})
	})
	if err != nil {
		return 0, false, s.fail("put", key, err)
	}
	if !ok {
		return cur, false, nil
	}
	return rev(ts), true, nil
}

// DeleteIf implements systemstore.CondDeleter: a tombstone written only
// while key is at rev, in one read-write transaction.
func (s *KV) DeleteIf(ctx context.Context, key string, want int64) (bool, error) {
	if err := systemstore.ValidateKey(key); err != nil {
		return false, fmt.Errorf("delete: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return false, s.fail("delete", key, err)
	}
	defer cancel()
	var ok bool
	_, err = s.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		cur, err := currentRev(ctx, tx, key)
		if err != nil {
			return err
		}
		if ok = cur != 0 && cur == want; !ok {
			return nil
		}
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.Update(kvTable, kvCols, []any{key, nil, true, spanner.CommitTimestamp}),
		})
	})
	if err != nil {
		return false, s.fail("delete", key, err)
	}
	return ok, nil
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
	row, err := s.client.Single().ReadRow(ctx, kvTable, spanner.Key{key}, kvCols)
	if spanner.ErrCode(err) == codes.NotFound {
		return nil, 0, fmt.Errorf("get %s: %w", key, systemstore.ErrNotFound)
	}
	if err != nil {
		return nil, 0, s.fail("get", key, err)
	}
	kv, deleted, err := decode(row)
	if err != nil {
		return nil, 0, s.fail("get", key, err)
	}
	if deleted {
		return nil, 0, fmt.Errorf("get %s: %w", key, systemstore.ErrNotFound)
	}
	return kv.Value, kv.Rev, nil
}

func decode(row *spanner.Row) (systemstore.KeyValue, bool, error) {
	var kv systemstore.KeyValue
	var deleted bool
	var written time.Time
	if err := row.Columns(&kv.Key, &kv.Value, &deleted, &written); err != nil {
		return kv, false, err
	}
	kv.Rev = rev(written)
	return kv, deleted, nil
}

// rangeQuery is sel restricted to the rows whose col starts with prefix,
// and to where (a condition, then maybe ORDER BY; "" orders by col). It
// uses a key range, not STARTS_WITH, so Spanner reads only that range.
// (Queries rather than Read with a KeyRange: spannertest panics on a
// range before its first row.)
func rangeQuery(sel, col, prefix, where string, params map[string]any) spanner.Statement {
	if params == nil {
		params = map[string]any{}
	}
	var conds []string
	if prefix != "" {
		conds = append(conds, col+" >= @start")
		params["start"] = prefix
		if end := systemstore.PrefixEnd(prefix); end != "" {
			conds = append(conds, col+" < @end")
			params["end"] = end
		}
	}
	order := " ORDER BY " + col
	if where != "" {
		cond, ord, ok := strings.Cut(where, " ORDER BY ")
		conds = append(conds, cond)
		if ok {
			order = " ORDER BY " + ord
		}
	}
	sql := sel
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	return spanner.Statement{SQL: sql + order, Params: params}
}

// List implements systemstore.KV. Its revision is the latest write under
// prefix, tombstones included (or the read timestamp, when the server
// gives one): a Watch of the same prefix from it misses nothing.
func (s *KV) List(ctx context.Context, prefix string) ([]systemstore.KeyValue, int64, error) {
	if err := systemstore.ValidatePrefix(prefix); err != nil {
		return nil, 0, fmt.Errorf("list: %w", err)
	}
	ctx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, 0, s.fail("list", prefix, err)
	}
	defer cancel()
	var out []systemstore.KeyValue
	var last int64
	err = s.client.Single().Query(ctx, rangeQuery("SELECT Key, Value, Deleted, Written FROM SpillwayKV", "Key", prefix, "", nil)).Do(func(row *spanner.Row) error {
		kv, deleted, err := decode(row)
		if err != nil {
			return err
		}
		last = max(last, kv.Rev)
		if !deleted {
			out = append(out, kv)
		}
		return nil
	})
	if err != nil {
		return nil, 0, s.fail("list", prefix, err)
	}
	return out, last, nil
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
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		send := func(ev systemstore.WatchEvent) bool {
			select {
			case out <- ev:
				return true
			case <-wctx.Done():
				return false
			}
		}
		t := time.NewTicker(s.cfg.PollInterval)
		defer t.Stop()
		last := afterRev
		for {
			evs, err := s.poll(wctx, prefix, last)
			if wctx.Err() != nil {
				return
			}
			if err != nil {
				if !errors.Is(err, systemstore.ErrCompacted) {
					// A transient failure: log, poll again next tick.
					s.log.Warn("spanner watch poll failed", "prefix", prefix, "err", err)
				} else {
					send(systemstore.WatchEvent{Err: s.fail("watch", prefix, err)})
					return
				}
			}
			for _, ev := range evs {
				if !send(ev) {
					return
				}
				last = ev.Rev
			}
			select {
			case <-t.C:
			case <-wctx.Done():
				return
			}
		}
	}()
	return out
}

// horizonName is the meta row of the compaction horizon of the keys whose
// first segment is seg.
func horizonName(seg string) string { return "compacted/" + seg }

func firstSegment(key string) string {
	seg, _, _ := strings.Cut(key, "/")
	return seg
}

// poll reads the changes under prefix after rev, in revision order.
func (s *KV) poll(ctx context.Context, prefix string, after int64) ([]systemstore.WatchEvent, error) {
	ro := s.client.ReadOnlyTransaction()
	defer ro.Close()
	// The horizons that cover prefix: its first segment, or every segment
	// starting with prefix when prefix has no "/".
	var horizon int64
	err := ro.Query(ctx, rangeQuery("SELECT Name, Rev FROM SpillwayMeta", "Name", "compacted/", "", nil)).Do(func(row *spanner.Row) error {
		var name string
		var r int64
		if err := row.Columns(&name, &r); err != nil {
			return err
		}
		seg := strings.TrimPrefix(name, "compacted/")
		if (strings.Contains(prefix, "/") && seg == firstSegment(prefix)) || (!strings.Contains(prefix, "/") && strings.HasPrefix(seg, prefix)) {
			horizon = max(horizon, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if after < horizon {
		return nil, fmt.Errorf("after revision %d: tombstones up to %d are dropped: %w", after, horizon, systemstore.ErrCompacted)
	}
	stmt := rangeQuery("SELECT Key, Value, Deleted, Written FROM SpillwayKV", "Key", prefix, "Written > @after ORDER BY Written, Key",
		map[string]any{"after": time.Unix(0, after).UTC()})
	var out []systemstore.WatchEvent
	err = ro.Query(ctx, stmt).Do(func(row *spanner.Row) error {
		kv, deleted, err := decode(row)
		if err != nil {
			return err
		}
		ev := systemstore.WatchEvent{Type: systemstore.EventPut, Key: kv.Key, Value: kv.Value, Rev: kv.Rev}
		if deleted {
			ev.Type, ev.Value = systemstore.EventDelete, nil
		}
		if ev.Type == systemstore.EventPut && ev.Value == nil {
			ev.Value = []byte{}
		}
		out = append(out, ev)
		return nil
	})
	return out, err
}

// CompactTombstones drops the tombstones written before cutoff. It first
// moves the compaction horizon of each key segment past them, so a watch
// that had not delivered one fails with ErrCompacted instead of missing
// the delete. Open's collector calls it with now - TombstoneRetention.
func (s *KV) CompactTombstones(ctx context.Context, cutoff time.Time) error {
	if s.closed.Load() {
		return s.fail("compact", "", systemstore.ErrClosed)
	}
	stmt := spanner.Statement{
		SQL:    "SELECT Key, Written FROM SpillwayKV WHERE Deleted = true AND Written < @cutoff",
		Params: map[string]any{"cutoff": cutoff.UTC()},
	}
	horizons := map[string]int64{}
	var keys []spanner.Key
	err := s.client.Single().Query(ctx, stmt).Do(func(row *spanner.Row) error {
		var key string
		var written time.Time
		if err := row.Columns(&key, &written); err != nil {
			return err
		}
		seg := firstSegment(key)
		horizons[seg] = max(horizons[seg], rev(written))
		keys = append(keys, spanner.Key{key})
		return nil
	})
	if err != nil {
		return s.fail("compact", "", err)
	}
	if len(keys) == 0 {
		return nil
	}
	var ms []*spanner.Mutation
	for seg, h := range horizons {
		var old int64
		row, err := s.client.Single().ReadRow(ctx, metaTable, spanner.Key{horizonName(seg)}, []string{"Rev"})
		if err == nil {
			_ = row.Columns(&old)
		}
		ms = append(ms, spanner.InsertOrUpdate(metaTable, []string{"Name", "Rev"}, []any{horizonName(seg), max(old, h)}))
	}
	if _, err := s.client.Apply(ctx, ms); err != nil {
		return s.fail("compact", "", err)
	}
	// A key written again since the query is no tombstone any more: delete
	// only what is still a tombstone from before cutoff.
	for i := 0; i < len(keys); i += 500 {
		batch := keys[i:min(i+500, len(keys))]
		_, err := s.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			var del []*spanner.Mutation
			err := tx.Read(ctx, kvTable, spanner.KeySetFromKeys(batch...), []string{"Key", "Deleted", "Written"}).Do(func(row *spanner.Row) error {
				var key string
				var deleted bool
				var written time.Time
				if err := row.Columns(&key, &deleted, &written); err != nil {
					return err
				}
				if deleted && written.Before(cutoff) {
					del = append(del, spanner.Delete(kvTable, spanner.Key{key}))
				}
				return nil
			})
			if err != nil {
				return err
			}
			return tx.BufferWrite(del)
		})
		if err != nil {
			return s.fail("compact", "", err)
		}
	}
	s.log.Info("dropped spanner tombstones", "count", len(keys), "before", cutoff)
	return nil
}

func (s *KV) gcLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.CompactTombstones(s.ctx, time.Now().Add(-s.cfg.TombstoneRetention)); err != nil && s.ctx.Err() == nil {
				s.log.Warn("spanner tombstone collection failed", "err", err)
			}
		}
	}
}

// Close ends the watches and the collector and closes the client.
func (s *KV) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel()
	s.wg.Wait()
	s.client.Close()
	return nil
}

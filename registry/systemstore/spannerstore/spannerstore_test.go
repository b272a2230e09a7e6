package spannerstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner/spannertest"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/spannerstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
)

// fake starts spannertest on 127.0.0.1 and returns the client options
// that point the real Spanner client at it.
func fake(t *testing.T) []option.ClientOption {
	t.Helper()
	srv, err := spannertest.NewServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetLogger(func(string, ...any) {}) // it logs every request
	t.Cleanup(srv.Close)
	return []option.ClientOption{
		option.WithEndpoint(srv.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

var dbs atomic.Int64

func TestConformance(t *testing.T) {
	systemstoretest.RunConformance(t, systemstoretest.Backend{
		Fresh: func(t *testing.T) func(t *testing.T) systemstore.KV {
			opts := fake(t) // spannertest holds one database: one server per subtest
			db := fmt.Sprintf("projects/test-project/instances/test-instance/databases/db%d", dbs.Add(1))
			return func(t *testing.T) systemstore.KV {
				kv, err := spannerstore.Open(context.Background(), spannerstore.Config{
					Database: db, ClientOptions: opts, PollInterval: 20 * time.Millisecond, GCInterval: -1,
				})
				if err != nil {
					t.Fatal(err)
				}
				return kv
			}
		},
		Compact: func(t *testing.T, kv systemstore.KV, rev int64) {
			if err := kv.(*spannerstore.KV).CompactTombstones(context.Background(), time.Unix(0, rev+1)); err != nil {
				t.Fatal(err)
			}
		},
		NoIsolation: "spannertest runs a read-write transaction's reads outside any lock (its README lists transaction simulation as missing); real Spanner's read-write transactions are serializable, which PutIf and DeleteIf rely on",
	})
}

// TestMain checks for leaked goroutines; opencensus (pulled in by the
// Spanner client) starts one worker at init that never ends, and the
// client's credential lookup leaves idle keep-alive connections in
// http.DefaultTransport's pool (closed here before the check; a
// connection still closing is ignored by its read and write loops).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(&closeIdle{m},
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

// closeIdle runs the tests, then empties http.DefaultTransport's pool.
type closeIdle struct{ m *testing.M }

func (c *closeIdle) Run() int {
	code := c.m.Run()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return code
}

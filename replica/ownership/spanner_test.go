package ownership

import (
	"context"
	"net/http"
	"testing"
	"time"

	"cloud.google.com/go/spanner/spannertest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/spannerstore"
)

// TestSpanner: the same protocol on spannerstore's lease rows
// (spannertest on 127.0.0.1): two replicas end with one holder per shard
// and agreeing records; one killed (its client closed) loses its shards
// to the other once its rows expire. spannertest has no transaction
// isolation, so this shows the protocol, not the exclusion of two takes
// racing in one instant.
func TestSpanner(t *testing.T) {
	srv, err := spannertest.NewServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetLogger(func(string, ...any) {})
	t.Cleanup(srv.Close)
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	opts := []option.ClientOption{
		option.WithEndpoint(srv.Addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
	const ttl = 1500 * time.Millisecond
	h := &history{}
	var insts []*inst
	for _, id := range []string{"a", "b"} {
		kv, err := spannerstore.Open(context.Background(), spannerstore.Config{
			Database:      "projects/test-project/instances/test-instance/databases/mesh",
			ClientOptions: opts, PollInterval: 50 * time.Millisecond, GCInterval: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		in := newInstKV(t, kv, func(name string) (systemstore.Elector, error) { return kv.Election(name, ttl) }, id, DefaultShards, ttl, h)
		in.run()
		t.Cleanup(func() { in.stop(t) })
		insts = append(insts, in)
	}
	took := waitFor(t, 60*time.Second, "one holder per shard", func() string { return settledState(insts) })
	t.Logf("settled %v after start (TTL %v); %v", took.Round(time.Millisecond), ttl, counts(insts))
	if c := counts(insts); c["a"] == 0 || c["b"] == 0 {
		t.Errorf("spread %v, want shards on both", c)
	}
	done := insts[1].kill()
	took = waitFor(t, 60*time.Second, "b's shards moved to a", func() string { return settledState(insts[:1]) })
	t.Logf("b killed: a holds every shard %v after its client closed", took.Round(time.Millisecond))
	<-done
	h.check(t)
}

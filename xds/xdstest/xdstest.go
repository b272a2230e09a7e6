// Package xdstest runs spillway's xDS server in-process for tests of its
// clients: a real xds.Server (ADS, state of the world and delta, and LRS)
// on a real grpc.Server on 127.0.0.1, and real grpc-go xDS clients
// (xds:///) with bootstraps of their own. Everything it starts stops when
// the test ends.
//
// Tests inside package xds cannot use it (it imports xds); tests of
// package xds_test can.
package xdstest

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

// Server is an xds.Server serving on loopback.
type Server struct {
	// Addr is the gRPC address, host:port on 127.0.0.1.
	Addr string
	// XDS is the server.
	XDS *xds.Server
	// Store is the registry it serves (Config.Store).
	Store *registry.Store
}

// An Option changes how Start runs the server.
type Option func(*options)

type options struct {
	noRun    bool
	register []func(grpc.ServiceRegistrar, *xds.Server)
}

// WithoutRun does not Run the server: it answers the requests of its
// streams, but store changes reach no stream and there is no resync.
func WithoutRun() Option { return func(o *options) { o.noRun = true } }

// WithServices has f register more services, on the same gRPC server,
// before it serves (the Admin API, say, as cmd/spillway wires it); f is
// given the xds.Server and called on the test's goroutine, so it may
// t.Fatal.
func WithServices(f func(g grpc.ServiceRegistrar, x *xds.Server)) Option {
	return func(o *options) { o.register = append(o.register, f) }
}

// Start runs an xds.Server made from cfg until the test ends. For test
// speed, a zero cfg.Debounce is 10 ms here and a zero cfg.LRSInterval 1 s;
// a nil cfg.Store is a new store, marked synced. Every other field is
// passed to xds.New as it is. Unless WithoutRun, Start also Runs the
// server.
func Start(t testing.TB, cfg xds.Config, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Store == nil {
		cfg.Store = registry.NewStore()
		cfg.Store.MarkSynced()
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = 10 * time.Millisecond
	}
	if cfg.LRSInterval == 0 {
		cfg.LRSInterval = time.Second
	}
	x, err := xds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(xds.Codec()))
	x.Register(srv)
	for _, f := range o.register {
		f(srv, x)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	if !o.noRun {
		wg.Go(func() { x.Run(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		srv.Stop()
		wg.Wait()
	})
	return &Server{Addr: lis.Addr().String(), XDS: x, Store: cfg.Store}
}

// Node is who a client says it is, in its bootstrap's node.
type Node struct {
	ID, Cluster  string
	Region, Zone string // node.locality
}

// Dial dials xds:///service with grpc-go's xDS resolver and a bootstrap
// of its own naming server (insecure, xds_v3) and n, so that clients of
// several nodes live in one process; opts come after insecure transport
// credentials. The connection is closed when the test ends.
func Dial(t testing.TB, server, service string, n Node, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	builder, err := grpcxds.NewXDSResolverWithConfigForTesting(bootstrap(server, n))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]grpc.DialOption{grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient("xds:///"+service, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// bootstrap is the grpc-go xDS bootstrap of Dial: one xDS server, server,
// with insecure channel credentials and the xds_v3 feature, and node n.
func bootstrap(server string, n Node) []byte {
	b, err := json.Marshal(bootstrapJSON{
		Servers: []bootstrapServer{{URI: server, Creds: []bootstrapCreds{{Type: "insecure"}}, Features: []string{"xds_v3"}}},
		Node:    bootstrapNode{ID: n.ID, Cluster: n.Cluster, Locality: bootstrapLocality{Region: n.Region, Zone: n.Zone}},
	})
	if err != nil {
		panic(err) // only strings: it always marshals
	}
	return b
}

// The bootstrap's JSON (grpc-go's internal/xds/bootstrap), as much of it
// as Dial writes.
type (
	bootstrapJSON struct {
		Servers []bootstrapServer `json:"xds_servers"`
		Node    bootstrapNode     `json:"node"`
	}
	bootstrapServer struct {
		URI      string           `json:"server_uri"`
		Creds    []bootstrapCreds `json:"channel_creds"`
		Features []string         `json:"server_features"`
	}
	bootstrapCreds struct {
		Type string `json:"type"`
	}
	bootstrapNode struct {
		ID       string            `json:"id"`
		Cluster  string            `json:"cluster"`
		Locality bootstrapLocality `json:"locality"`
	}
	bootstrapLocality struct {
		Region string `json:"region"`
		Zone   string `json:"zone"`
	}
)

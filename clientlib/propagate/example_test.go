package propagate_test

import (
	"context"
	"log"
	"net"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/clientlib/propagate"
)

// The middle service of a chain chain-a → chain-b → chain-c: its server
// puts each request's x-traffic-class in the handler's context, and its
// Conn to chain-c sends it on. docs/routing.md shows this code
// (TestDocsRouting checks that it is this code). (Networked: compiled, not
// run.)
func Example_callChain() {
	ctx := context.Background()
	p, err := propagate.New(propagate.Config{Keys: []string{"x-traffic-class"}})
	if err != nil {
		log.Fatal(err) // a key is invalid; the error names it
	}
	// Calls to chain-c carry the class of the request that caused them.
	conn, err := clientlib.Dial(ctx, "chain-c",
		clientlib.WithService("chain-b"),
		clientlib.WithPropagation("x-traffic-class"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// The server lifts the class of each request into its handler's ctx.
	srv := grpc.NewServer(p.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(srv, &chainB{next: testgrpc.NewTestServiceClient(conn)})
	lis, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}

type chainB struct {
	testgrpc.UnimplementedTestServiceServer
	next testgrpc.TestServiceClient
}

// UnaryCall passes its own ctx to the call it makes: that is all a
// handler has to do.
func (b *chainB) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return b.next.UnaryCall(ctx, req)
}

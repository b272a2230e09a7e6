package propagate_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/spillway/spillway/clientlib/propagate"
)

// chainServer is one service of the chain: it records the traffic class
// each RPC came with, calls the next service (if any) with the handler's
// context, and answers with its own record followed by the next one's, in
// Username: "a=synthetic b=synthetic c=synthetic".
type chainServer struct {
	testgrpc.UnimplementedTestServiceServer
	name string
	next testgrpc.TestServiceClient // nil for the last
	// handle, if set, changes the handler's context before it calls next.
	handle func(context.Context) context.Context
}

func seen(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, tc); len(v) > 0 {
		return strings.Join(v, ",")
	}
	return "-"
}

// UnaryCall calls next with a server stream, to cover the stream
// interceptors on the next hop.
func (s *chainServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	me := s.name + "=" + seen(ctx)
	if s.next == nil {
		return &testpb.SimpleResponse{Username: me}, nil
	}
	if s.handle != nil {
		ctx = s.handle(ctx)
	}
	st, err := s.next.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		return nil, err
	}
	resp, err := st.Recv()
	if err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Username: me + " " + string(resp.GetPayload().GetBody())}, nil
}

// StreamingOutputCall calls next with a unary RPC.
func (s *chainServer) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	ctx := st.Context()
	me := s.name + "=" + seen(ctx)
	if s.next != nil {
		if s.handle != nil {
			ctx = s.handle(ctx)
		}
		resp, err := s.next.UnaryCall(ctx, &testpb.SimpleRequest{})
		if err != nil {
			return err
		}
		me += " " + resp.GetUsername()
	}
	return st.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(me)}})
}

// startChain starts services c, b, a on 127.0.0.1, each with the
// Propagator's server interceptors, each calling the next through a
// channel with its client interceptors, and returns a client of a
// (without interceptors: the test sets the edge's metadata itself).
func startChain(t *testing.T, p *propagate.Propagator, handleB func(context.Context) context.Context) testgrpc.TestServiceClient {
	t.Helper()
	var next testgrpc.TestServiceClient
	for _, name := range []string{"c", "b", "a"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(p.ServerOptions()...)
		s := &chainServer{name: name, next: next}
		if name == "b" {
			s.handle = handleB
		}
		testgrpc.RegisterTestServiceServer(srv, s)
		var wg sync.WaitGroup
		wg.Go(func() { srv.Serve(l) })
		t.Cleanup(func() {
			srv.Stop()
			wg.Wait()
		})
		cc, err := grpc.NewClient(l.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, p.DialOptions()...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		next = testgrpc.NewTestServiceClient(cc)
	}
	return next
}

// TestChain: real gRPC servers A → B → C on 127.0.0.1; a tag given to A
// reaches C through a unary hop and a streaming hop, an untagged call
// stays untagged everywhere, and B can change the class for its calls.
func TestChain(t *testing.T) {
	p := mustNew(t, tc)
	tests := []struct {
		name    string
		tag     string // "" for none
		handleB func(context.Context) context.Context
		want    string
	}{
		{name: "tagged", tag: "synthetic", want: "a=synthetic b=synthetic c=synthetic"},
		{name: "untagged", want: "a=- b=- c=-"},
		{name: "b-retags", tag: "synthetic", handleB: func(ctx context.Context) context.Context { return propagate.With(ctx, tc, "batch") }, want: "a=synthetic b=synthetic c=batch"},
		{name: "b-untags", tag: "synthetic", handleB: func(ctx context.Context) context.Context { return propagate.Without(ctx, tc) }, want: "a=synthetic b=synthetic c=-"},
		{name: "b-explicit", tag: "synthetic", handleB: func(ctx context.Context) context.Context { return metadata.AppendToOutgoingContext(ctx, tc, "prod") }, want: "a=synthetic b=synthetic c=prod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := startChain(t, p, tt.handleB)
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if tt.tag != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, tc, tt.tag)
				}
				resp, err := a.UnaryCall(ctx, &testpb.SimpleRequest{})
				cancel()
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if got := resp.GetUsername(); got != tt.want {
					t.Errorf("call %d: chain saw %q, want %q", i, got, tt.want)
				}
			}
		})
	}
}

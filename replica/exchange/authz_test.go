package exchange

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/security/authz"
)

// replicasOnly is a hand fake of a policy granting mesh to identity
// "replica" (named here by the "x-identity" metadata, as the authn
// interceptor would from the other replica's certificate).
type replicasOnly struct{}

func (replicasOnly) Authorize(ctx context.Context, a authz.Action, _ string) error {
	if v := metadata.ValueFromIncomingContext(ctx, "x-identity"); len(v) == 1 && v[0] == "replica" && a == authz.Mesh {
		return nil
	}
	return errors.New("permission denied: payments may not mesh")
}

// TestServerAsksTheAuthorizer: a stream the Authorizer refuses ends with
// PermissionDenied and its message, and nothing of it is merged; an
// allowed one is merged.
func TestServerAsksTheAuthorizer(t *testing.T) {
	m := NewMerged(MergedConfig{})
	srv, err := NewServer(ServerConfig{Merged: m, Authorizer: replicasOnly{}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	client := dial(t, lis.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	before := stateOf(m, now)

	st, err := client.Report(metadata.AppendToOutgoingContext(ctx, "x-identity", "payments"))
	must(t, err)
	_ = st.Send(ToProto(goodSummary("replica-1", now)))
	_, err = st.CloseAndRecv()
	if s := status.Convert(err); s.Code() != codes.PermissionDenied || s.Message() != "permission denied: payments may not mesh" {
		t.Errorf("Report as payments = %v %q, want PermissionDenied with the Authorizer's message", s.Code(), s.Message())
	}
	if diff := cmp.Diff(before, stateOf(m, now)); diff != "" {
		t.Errorf("a denied stream changed Merged (-before +after):\n%s", diff)
	}

	st, err = client.Report(metadata.AppendToOutgoingContext(ctx, "x-identity", "replica"))
	must(t, err)
	must(t, st.Send(ToProto(goodSummary("replica-1", now))))
	if ack, err := st.CloseAndRecv(); err != nil || ack.Summaries != 1 {
		t.Fatalf("Report as replica = %v, %v; want 1 summary accepted", ack, err)
	}
}

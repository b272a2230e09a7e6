package registryapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/registry/lease"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
)

// cutSharer is a lease.Sharer that a test cuts from its store.
type cutSharer struct{ cut atomic.Bool }

func (s *cutSharer) Sharing() error {
	if s.cut.Load() {
		return errors.New("store etcd://127.0.0.1:2379/x unreachable from this replica: context deadline exceeded")
	}
	return nil
}

// TestHeartbeatNotShared: on a replica cut from the store, every way of
// heartbeating renews the lease (its stamp is published when the store
// is back) but answers UNAVAILABLE naming the store, so that an agent
// moves to a replica whose heartbeats the expiry decider sees. A stream
// takes every heartbeat sent with the first, answers none, and ends
// UNAVAILABLE even when the client has closed its side. Back on the
// store, heartbeats are answered again.
func TestHeartbeatNotShared(t *testing.T) {
	st, err := boltstore.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sh := &cutSharer{}
	h := newHarnessLeases(t, lease.Config{Storage: st, Sharer: sh})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var leases []string
	for _, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		req := goodRequest()
		req.Endpoint.Address = addr
		resp, err := h.client.Register(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, resp.LeaseId)
	}
	lastSeen := func(i int) time.Time {
		t.Helper()
		seen, id, ok := h.leases.LastSeen("payments", fmt.Sprintf("10-0-0-%d-8080", i+1))
		if !ok || id != leases[i] {
			t.Fatalf("lease %d: LastSeen = %v %q %v, want lease %q", i, seen, id, ok, leases[i])
		}
		return seen
	}
	wantUnavailable := func(what string, err error) {
		t.Helper()
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.Unavailable || !strings.Contains(msg, "etcd://127.0.0.1:2379/x") || !strings.Contains(msg, "heartbeat another replica") {
			t.Errorf("%s on a cut replica = %v, want UNAVAILABLE naming the store and saying to heartbeat another replica", what, err)
		}
	}
	sh.cut.Store(true)

	before := lastSeen(0)
	_, err = h.client.Heartbeat(ctx, &pb.HeartbeatRequest{LeaseId: leases[0]})
	wantUnavailable("Heartbeat", err)
	if !lastSeen(0).After(before) {
		t.Errorf("Heartbeat on a cut replica did not renew the lease")
	}

	code, body := h.post(t, "/v1/heartbeat", `{"lease_id":"`+leases[0]+`"}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body["error"].(string), "heartbeat another replica") {
		t.Errorf("POST /v1/heartbeat on a cut replica = %d %v, want 503 saying to heartbeat another replica", code, body)
	}

	for _, closeSend := range []bool{false, true} {
		var seen []time.Time
		for i := range leases {
			seen = append(seen, lastSeen(i))
		}
		stream, err := h.client.HeartbeatStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range leases {
			if err := stream.Send(&pb.HeartbeatRequest{LeaseId: id}); err != nil {
				t.Fatal(err)
			}
		}
		if closeSend {
			stream.CloseSend()
		}
		resp, err := stream.Recv()
		if resp != nil {
			t.Errorf("stream on a cut replica answered %v, want no answer", resp)
		}
		wantUnavailable("HeartbeatStream", err)
		for i := range leases {
			if !lastSeen(i).After(seen[i]) {
				t.Errorf("closeSend=%v: heartbeat %d of a burst on a cut replica's stream did not renew the lease", closeSend, i)
			}
		}
	}

	sh.cut.Store(false)
	stream, err := h.client.HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.HeartbeatRequest{LeaseId: leases[1]}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || !resp.Found {
		t.Errorf("stream heartbeat back on the store = %v, %v; want found", resp, err)
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("after CloseSend back on the store: %v, want EOF", err)
	}
	if _, err := h.client.Heartbeat(ctx, &pb.HeartbeatRequest{LeaseId: leases[2]}); err != nil {
		t.Errorf("Heartbeat back on the store = %v", err)
	}
}

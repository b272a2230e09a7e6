package registryapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
)

// downKV is a KV whose writes and reads fail, naming the store, while down
// is set (an etcd cluster out of reach).
type downKV struct {
	systemstore.KV
	down atomic.Bool
}

var errDown = errors.New("etcd http://127.0.0.1:2379: put: context deadline exceeded")

func (k *downKV) Put(ctx context.Context, key string, v []byte) (int64, error) {
	if k.down.Load() {
		return 0, errDown
	}
	return k.KV.Put(ctx, key, v)
}

func (k *downKV) Delete(ctx context.Context, key string) (int64, error) {
	if k.down.Load() {
		return 0, errDown
	}
	return k.KV.Delete(ctx, key)
}

// TestStoreOutage: while the store is unreachable, a registration and a
// deregistration get UNAVAILABLE over gRPC and 503 over HTTP with a message
// naming the store and its error; the endpoint stays served and heartbeats
// (no store write) still succeed.
func TestStoreOutage(t *testing.T) {
	bkv, err := boltstore.Open(t.TempDir(), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv := &downKV{KV: bkv}
	st := systemstore.NewStore(kv)
	t.Cleanup(func() { st.Close() })
	h := newHarnessWith(t, st)
	ctx := context.Background()
	reg, err := h.client.Register(ctx, goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	kv.down.Store(true)

	other := goodRequest()
	other.Endpoint.Address = "10.0.0.2"
	_, err = h.client.Register(ctx, other)
	if got := status.Code(err); got != codes.Unavailable {
		t.Fatalf("Register code = %v (%v), want Unavailable", got, err)
	}
	for _, want := range []string{"store unavailable", "etcd http://127.0.0.1:2379", "context deadline exceeded"} {
		if !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("Register message = %q, want it to contain %q", status.Convert(err).Message(), want)
		}
	}
	if _, err := h.client.Deregister(ctx, &pb.DeregisterRequest{LeaseId: reg.GetLeaseId()}); status.Code(err) != codes.Unavailable {
		t.Errorf("Deregister code = %v (%v), want Unavailable", status.Code(err), err)
	}
	if _, err := h.client.Heartbeat(ctx, &pb.HeartbeatRequest{LeaseId: reg.GetLeaseId()}); err != nil {
		t.Errorf("Heartbeat during the outage = %v, want nil", err)
	}
	code, body := h.post(t, "/v1/register", `{"service":"payments","endpoint":{"address":"10.0.0.3","ports":[{"name":"grpc","number":8080}]}}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body["error"].(string), "etcd http://127.0.0.1:2379") {
		t.Errorf("HTTP register = %d %v, want 503 naming the store", code, body)
	}
	if got := len(endpointsOf(h, "payments")); got != 1 {
		t.Errorf("payments endpoints during the outage = %d, want 1 (nothing dropped)", got)
	}

	kv.down.Store(false)
	if _, err := h.client.Register(ctx, other); err != nil {
		t.Errorf("Register after the outage = %v, want nil", err)
	}
	if got := len(endpointsOf(h, "payments")); got != 2 {
		t.Errorf("payments endpoints after the outage = %d, want 2", got)
	}
}

func endpointsOf(h *harness, service string) []string {
	svc, ok := h.store.Snapshot().Service(service)
	if !ok {
		return nil
	}
	var ids []string
	for _, e := range svc.Endpoints {
		ids = append(ids, e.ID)
	}
	return ids
}

package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// readOwn is a hand fake of a policy: "admin" may read every load,
// identity S only S's (and not the graph of all services).
type readOwn struct{}

func (readOwn) Authorize(ctx context.Context, a authz.Action, resource string) error {
	id := authn.FromContext(ctx)
	if id.Name == "admin" || (!id.Anonymous() && id.Name == resource) {
		return nil
	}
	if resource == "" {
		return fmt.Errorf("permission denied: %s may not %s", id, a)
	}
	return fmt.Errorf("permission denied: %s may not %s %s", id, a, resource)
}

// TestReadsAskTheAuthorizer: Load, Weights and Graph, over gRPC methods
// and HTTP, ask for read_load; a denial is PermissionDenied / 403 with
// the Authorizer's message.
func TestReadsAskTheAuthorizer(t *testing.T) {
	f := newFake()
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: f, Authorizer: readOwn{}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handler()
	for _, tc := range []struct {
		name, path string
		grpc       func(ctx context.Context) error
		resource   string
	}{
		{"load", "/v1/load?service=payments", func(ctx context.Context) error {
			_, err := a.Load(ctx, &pb.LoadRequest{Service: "payments"})
			return err
		}, "payments"},
		{"weights", "/v1/weights?service=payments", func(ctx context.Context) error {
			_, err := a.Weights(ctx, &pb.WeightsRequest{Service: "payments"})
			return err
		}, "payments"},
		{"graph", "/v1/graph", func(ctx context.Context) error {
			_, err := a.Graph(ctx, &pb.GraphRequest{})
			return err
		}, ""},
	} {
		for _, id := range []string{"", "checkout", "payments", "admin"} {
			name := id
			if name == "" {
				name = "anonymous"
			}
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				ctx := context.Background()
				if id != "" {
					ctx = authn.NewContext(ctx, authn.Identity{Name: id, Method: authn.Token})
				}
				allowed := id == "admin" || (id != "" && id == tc.resource)
				want := "permission denied: " + name + " may not read_load"
				if tc.resource != "" {
					want += " " + tc.resource
				}
				err := tc.grpc(ctx)
				if allowed && err != nil {
					t.Errorf("gRPC %s as %s = %v, want allowed", tc.name, name, err)
				}
				if st := status.Convert(err); !allowed && (st.Code() != codes.PermissionDenied || st.Message() != want) {
					t.Errorf("gRPC %s as %s = %v %q, want PermissionDenied %q", tc.name, name, st.Code(), st.Message(), want)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", tc.path, nil))
				var e struct {
					Error string `json:"error"`
				}
				json.Unmarshal(rec.Body.Bytes(), &e)
				if allowed && rec.Code != http.StatusOK {
					t.Errorf("GET %s as %s = %d %s, want 200", tc.path, name, rec.Code, rec.Body)
				}
				if !allowed && (rec.Code != http.StatusForbidden || e.Error != want) {
					t.Errorf("GET %s as %s = %d %q, want 403 %q", tc.path, name, rec.Code, e.Error, want)
				}
			})
		}
	}
}

package migrationapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/migration/migrationv1"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// adminOnly is a hand fake of the default policy for the admin actions:
// only identity "admin" may change anything.
type adminOnly struct{}

func (adminOnly) Authorize(ctx context.Context, a authz.Action, resource string) error {
	if id := authn.FromContext(ctx); id.Name != "admin" {
		return fmt.Errorf("permission denied: %s may not %s", id, a)
	}
	return nil
}

func asIdentity(id string) context.Context {
	if id == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), "x-identity", id)
}

// TestChangesAskTheAuthorizer: with an Authorizer, the panic flag and the
// rollout change for exactly the identities it allows, over gRPC and
// HTTP; a denial is PermissionDenied / 403 with the Authorizer's message,
// counted as denied, and changes nothing. The admin token is not looked
// at: the authn layer has already turned it into an identity.
func TestChangesAskTheAuthorizer(t *testing.T) {
	const yaml = "rules:\n- name: all\n  match: {}\n  percent: 50\n"
	for _, tc := range []struct {
		id      string
		wantMsg string // "" allowed
	}{
		{"", "permission denied: anonymous may not %s"},
		{"payments", "permission denied: payments may not %s"},
		{"admin", ""},
	} {
		for _, what := range []string{"panic", "rollout"} {
			for _, via := range []string{"grpc", "http"} {
				name := tc.id
				if name == "" {
					name = "anonymous"
				}
				t.Run(what+"/"+via+"/"+name, func(t *testing.T) {
					s := startStackAuthz(t, token, adminOnly{})
					before := s.state()
					var code codes.Code
					var msg string
					switch via {
					case "grpc":
						// The admin token alone no longer opens changes.
						ctx := withAuth(asIdentity(tc.id), "Bearer "+token)
						var err error
						if what == "panic" {
							_, err = s.client.SetPanic(ctx, &pb.SetPanicRequest{Panic: true})
						} else {
							_, err = s.client.SetRollout(ctx, &pb.SetRolloutRequest{Yaml: yaml})
						}
						st := status.Convert(err)
						code, msg = st.Code(), st.Message()
					case "http":
						method, path, body := "POST", "/v1/panic", `{"panic": true}`
						if what == "rollout" {
							method, path, body = "PUT", "/v1/rollout", yaml
						}
						req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
						req.Header.Set("Authorization", "Bearer "+token)
						if tc.id != "" {
							req.Header.Set("X-Identity", tc.id)
						}
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						var e struct {
							Error string `json:"error"`
						}
						json.NewDecoder(resp.Body).Decode(&e)
						resp.Body.Close()
						code, msg = map[int]codes.Code{200: codes.OK, 403: codes.PermissionDenied}[resp.StatusCode], e.Error
						if resp.StatusCode != 200 && resp.StatusCode != 403 {
							code = codes.Unknown
						}
					}
					if tc.wantMsg == "" {
						if code != codes.OK {
							t.Fatalf("%s as %s over %s = %v %q, want OK", what, name, via, code, msg)
						}
						if s.state() == before {
							t.Errorf("an allowed %s changed nothing", what)
						}
						return
					}
					want := fmt.Sprintf(tc.wantMsg, what)
					if code != codes.PermissionDenied || msg != want {
						t.Errorf("%s as %s over %s = %v %q, want PermissionDenied %q", what, name, via, code, msg, want)
					}
					if got := s.state(); got != before {
						t.Errorf("a denied %s changed the state: %+v, want %+v", what, got, before)
					}
					if got := s.changes(what, resultDenied); got < 1 {
						t.Errorf("spillway_admin_changes_total{what=%q,result=denied} = %v, want >= 1", what, got)
					}
				})
			}
		}
	}
}

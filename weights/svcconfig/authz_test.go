package svcconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// ownConfig is a hand fake of a policy: "admin" may change every
// service's config, identity S only S's.
type ownConfig struct{}

func (ownConfig) Authorize(ctx context.Context, a authz.Action, resource string) error {
	id := authn.FromContext(ctx)
	if id.Name == "admin" || (!id.Anonymous() && id.Name == resource) {
		return nil
	}
	return fmt.Errorf("permission denied: %s may not %s %s", id, a, resource)
}

// TestAuthorizedHTTP: with an Authorizer, PUT, DELETE and undelete of a
// service's config succeed for exactly the identities it allows; a
// denial is 403 with its message and leaves the config as it was.
func TestAuthorizedHTTP(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		method, path, body string
	}{
		{"PUT", "/v1/config/cart", "strategy: static\n"},
		{"DELETE", "/v1/config/cart", ""},
		{"POST", "/v1/config/cart/undelete", ""},
	} {
		for _, id := range []string{"", "billing", "cart", "admin"} {
			name := id
			if name == "" {
				name = "anonymous"
			}
			t.Run(tc.method+"/"+name, func(t *testing.T) {
				s, _ := NewStore(StoreConfig{KV: openKV(t)})
				if _, err := s.Set(ctx, "cart", []byte("strategy: pid\n"), SourceAPI, ""); err != nil {
					t.Fatal(err)
				}
				if tc.method == "POST" {
					if _, err := s.Delete(ctx, "cart", SourceAPI); err != nil {
						t.Fatal(err)
					}
				}
				h := s.AuthorizedHandler(ownConfig{}, nil)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if id != "" {
						r = r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: id, Method: authn.Token}))
					}
					h.ServeHTTP(w, r)
				}))
				defer srv.Close()
				before, _ := json.Marshal(s.EntryOf("cart"))
				req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var e struct {
					Error string `json:"error"`
				}
				json.NewDecoder(resp.Body).Decode(&e)
				resp.Body.Close()
				if id == "cart" || id == "admin" {
					if resp.StatusCode != 200 {
						t.Fatalf("%s %s as %s = %d %q, want 200", tc.method, tc.path, name, resp.StatusCode, e.Error)
					}
					return
				}
				want := "permission denied: " + name + " may not config cart"
				if resp.StatusCode != 403 || e.Error != want {
					t.Errorf("%s %s as %s = %d %q, want 403 %q", tc.method, tc.path, name, resp.StatusCode, e.Error, want)
				}
				if after, _ := json.Marshal(s.EntryOf("cart")); string(after) != string(before) {
					t.Errorf("a denied %s changed the config:\n%s\nwant\n%s", tc.method, after, before)
				}
			})
		}
	}
}

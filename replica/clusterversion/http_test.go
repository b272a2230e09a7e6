package clusterversion

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// allowAdmin lets identity admin do HoldAction only.
type allowAdmin struct{}

func (allowAdmin) Authorize(ctx context.Context, a authz.Action, resource string) error {
	id := authn.FromContext(ctx)
	if id.Name == "admin" && a == HoldAction && resource == "" {
		return nil
	}
	return &authz.Denied{Identity: id, Action: a, Resource: resource}
}

// entries records audit entries.
type entries struct {
	mu sync.Mutex // guards es
	es []audit.Entry
}

func (e *entries) Record(_ context.Context, en audit.Entry) {
	e.mu.Lock()
	e.es = append(e.es, en)
	e.mu.Unlock()
}

func (e *entries) all() []audit.Entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]audit.Entry(nil), e.es...)
}

// do sends one request to h as identity who ("" anonymous).
func do(t *testing.T, h http.Handler, method, who, body string, header ...string) (*httptest.ResponseRecorder, View, httpjson.Error) {
	t.Helper()
	req := httptest.NewRequest(method, Path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if who != "" {
		req = req.WithContext(authn.NewContext(req.Context(), authn.Identity{Name: who, Method: authn.Token}))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var v View
	var e httpjson.Error
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s: decode %s: %v", method, rec.Body, err)
		}
	} else if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("%s: decode %s: %v", method, rec.Body, err)
	}
	return rec, v, e
}

func TestHandler(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	v := newVersions(t, kv, "a", nil)
	members := &fakeMembers{}
	members.set(member("a", 2), member("old", 0))
	rec := &entries{}
	h := v.Handler(HandlerConfig{Members: members, Authorizer: allowAdmin{}, Audit: rec})

	resp, view, _ := do(t, h, http.MethodGet, "", "")
	if resp.Code != http.StatusOK || view.Version != 1 || view.Supported != Current || !view.Shared || view.Hold || view.Revision != 0 || resp.Header().Get("ETag") != "" {
		t.Errorf("GET = %d %+v, want version 1 of a shared store, no record", resp.Code, view)
	}
	if len(view.Members) != 2 || view.Members[1].ID != "old" || view.Members[1].MaxVersion != 1 || view.Next != 0 || !strings.Contains(view.Waiting, "old (supports 1)") {
		t.Errorf("GET members = %+v next %d waiting %q, want old at 1 named as the blocker", view.Members, view.Next, view.Waiting)
	}

	// Bad input: 400 naming the field, nothing changes.
	for _, tc := range []struct {
		name, body, field string
		header            []string
	}{
		{"empty_object", `{}`, "hold", nil},
		{"not_a_bool", `{"hold": "yes"}`, "body", nil},
		{"unknown_field", `{"hold": true, "preserve": true}`, "body", nil},
		{"two_values", `{"hold": true} {"hold": false}`, "body", nil},
		{"not_json", `hold`, "body", nil},
		{"bad_if_match", `{"hold": true}`, "If-Match", []string{"If-Match", `"abc"`}},
		{"bad_if_none_match", `{"hold": true}`, "If-None-Match", []string{"If-None-Match", `"1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, e := do(t, h, http.MethodPost, "admin", tc.body, tc.header...)
			if resp.Code != http.StatusBadRequest || e.Field != tc.field {
				t.Errorf("POST %s = %d %+v, want 400 naming %s", tc.body, resp.Code, e, tc.field)
			}
		})
	}
	if st := v.State(); st.Rev != 0 || st.Hold {
		t.Fatalf("bad input changed the state: %+v", st)
	}

	// Refused: 403, nothing changes.
	if resp, _, e := do(t, h, http.MethodPost, "", `{"hold": true}`); resp.Code != http.StatusForbidden || !strings.Contains(e.Error, "anonymous may not panic") || !strings.Contains(e.Error, "the hold takes the panic right") {
		t.Errorf("anonymous POST = %d %+v, want 403 naming the right", resp.Code, e)
	}
	if _, _, err := kv.Get(context.Background(), Key); err == nil {
		t.Fatalf("a refused hold wrote %s", Key)
	}

	// Set: 200 with the view and the ETag, audited.
	resp, view, _ = do(t, h, http.MethodPost, "admin", `{"hold": true}`, "Content-Type", "application/json", "If-None-Match", "*")
	if resp.Code != http.StatusOK || !view.Hold || view.HoldBy != "admin" || view.Revision == 0 || resp.Header().Get("ETag") == "" || !strings.Contains(view.Waiting, "old (supports 1)") {
		t.Errorf("POST hold = %d %+v, want held by admin", resp.Code, view)
	}
	etag := resp.Header().Get("ETag")
	es := rec.all()
	if len(es) != 1 || es[0].Action != "cluster_version" || es[0].Reason != "hold" || es[0].Outcome != audit.OutcomeAllowed || es[0].Old != "version 1, hold off" || es[0].New != "version 1, hold on" {
		t.Errorf("audit = %+v, want one allowed hold", es)
	}

	// Conditional: a stale ETag is 412 and changes nothing.
	if resp, _, e := do(t, h, http.MethodPost, "admin", `{"hold": false}`, "If-Match", `"999"`); resp.Code != http.StatusPreconditionFailed || e.Field != "If-Match" {
		t.Errorf("POST with a stale If-Match = %d %+v, want 412", resp.Code, e)
	}
	if resp, _, _ := do(t, h, http.MethodPost, "admin", `{"hold": false}`, "If-None-Match", "*"); resp.Code != http.StatusPreconditionFailed {
		t.Errorf("POST with If-None-Match: * over a record = %d, want 412", resp.Code)
	}
	if !v.State().Hold {
		t.Fatalf("a refused release changed the state: %+v", v.State())
	}
	resp, view, _ = do(t, h, http.MethodPost, "admin", `{"hold": false}`, "If-Match", etag)
	if resp.Code != http.StatusOK || view.Hold {
		t.Errorf("POST release at the current ETag = %d %+v, want released", resp.Code, view)
	}

	if resp, _, _ := do(t, h, http.MethodPut, "admin", `{"hold": true}`); resp.Code != http.StatusMethodNotAllowed || resp.Header().Get("Allow") == "" {
		t.Errorf("PUT = %d, want 405 with Allow", resp.Code)
	}

	// A replica that just started says its list may be short.
	members.set(member("a", 2))
	members.settle(false)
	if _, view, _ := do(t, h, http.MethodGet, "", ""); view.Next != 0 || !strings.Contains(view.Waiting, "not yet seen every live member") {
		t.Errorf("GET before the view settled: next %d, waiting %q; want none, saying the list may be short", view.Next, view.Waiting)
	}
	members.settle(true)
	if _, view, _ := do(t, h, http.MethodGet, "", ""); view.Next != 2 || view.Waiting != "" {
		t.Errorf("GET with every member on this release: next %d, waiting %q; want 2", view.Next, view.Waiting)
	}
}

// TestHandlerSingleReplica: GET says there is no shared store; a hold
// is 409 and names why.
func TestHandlerSingleReplica(t *testing.T) {
	v, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.Handler(HandlerConfig{Authorizer: allowAdmin{}})
	resp, view, _ := do(t, h, http.MethodGet, "", "")
	if resp.Code != http.StatusOK || view.Shared || view.Version != Current {
		t.Errorf("GET = %d %+v, want version %d, not shared", resp.Code, view, Current)
	}
	resp, _, e := do(t, h, http.MethodPost, "admin", `{"hold": true}`)
	if resp.Code != http.StatusConflict || !strings.Contains(e.Error, "nothing to hold") {
		t.Errorf("POST = %d %+v, want 409 saying there is nothing to hold", resp.Code, e)
	}
}

// TestHandlerStoreDown: a hold while the store is unreachable is 503 and
// audited as failed.
func TestHandlerStoreDown(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	v := newVersions(t, kv, "a", nil)
	rec := &entries{}
	h := v.Handler(HandlerConfig{Authorizer: allowAdmin{}, Audit: rec})
	kv.Down.Store(true)
	resp, _, e := do(t, h, http.MethodPost, "admin", `{"hold": true}`)
	if resp.Code != http.StatusServiceUnavailable || !strings.Contains(e.Error, systemstoretest.ErrUnreachable.Error()) {
		t.Errorf("POST with the store down = %d %+v, want 503 naming the store", resp.Code, e)
	}
	if es := rec.all(); len(es) != 1 || es[0].Outcome != audit.OutcomeFailed {
		t.Errorf("audit = %+v, want one failed change", es)
	}
	if _, err := v.SetHold(context.Background(), true, "admin", nil); !errors.Is(err, systemstoretest.ErrUnreachable) {
		t.Errorf("SetHold = %v, want the store's error", err)
	}
}

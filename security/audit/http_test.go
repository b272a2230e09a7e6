package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// adminOnly allows read_audit to identity admin only.
type adminOnly struct{}

func (adminOnly) Authorize(ctx context.Context, a authz.Action, resource string) error {
	if id := authn.FromContext(ctx); id.Name != "admin" {
		return fmt.Errorf("permission denied: %s may not %s", id, a)
	}
	return nil
}

// withIdentity plays the authn middleware: the X-Test-Identity header
// becomes the identity.
func withIdentity(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := r.Header.Get("X-Test-Identity"); n != "" {
			r = r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: n, Method: authn.Token}))
		}
		h.ServeHTTP(w, r)
	})
}

func TestHandler(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	clk := &clock{t: t0}
	l := newLog(t, Config{KV: kv, Replica: "a", Now: clk.Now})
	for i := range 1500 {
		l.Record(context.Background(), Entry{Action: "config", Resource: "cart", New: fmt.Sprint(i)})
		clk.Add(time.Second)
	}
	srv := httptest.NewServer(withIdentity(HTTPPeer(l.Handler(adminOnly{}))))
	defer srv.Close()

	for _, tc := range []struct {
		name, method, query, identity string
		code                          int
		field                         string
		n                             int    // entries answered
		first                         string // New of the first
	}{
		{"default", "GET", "", "admin", 200, "", DefaultLimit, "1499"},
		{"limit", "GET", "limit=3", "admin", 200, "", 3, "1499"},
		{"limitMax", "GET", "limit=1000", "admin", 200, "", 1000, "1499"},
		{"since", "GET", "since=" + url.QueryEscape(t0.Add(1495*time.Second).Format(time.RFC3339)), "admin", 200, "", 5, "1499"},
		{"sinceOffset", "GET", "since=" + url.QueryEscape(t0.Add(1495*time.Second).In(time.FixedZone("x", 3600)).Format(time.RFC3339)), "admin", 200, "", 5, "1499"},
		{"limitOver", "GET", "limit=1001", "admin", 400, "limit", 0, ""},
		{"limitZero", "GET", "limit=0", "admin", 400, "limit", 0, ""},
		{"limitNaN", "GET", "limit=ten", "admin", 400, "limit", 0, ""},
		{"sinceBad", "GET", "since=yesterday", "admin", 400, "since", 0, ""},
		{"sinceTwice", "GET", "since=2025-01-01T00:00:00Z&since=2025-01-02T00:00:00Z", "admin", 400, "since", 0, ""},
		{"unknown", "GET", "limt=3", "admin", 400, "limt", 0, ""},
		{"denied", "GET", "", "spiffe://x/ns/a/sa/web", 403, "", 0, ""},
		{"anonymous", "GET", "", "", 403, "", 0, ""},
		{"post", "POST", "", "admin", 405, "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+Path+"?"+tc.query, nil)
			if tc.identity != "" {
				req.Header.Set("X-Test-Identity", tc.identity)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.code)
			}
			if tc.code != 200 {
				var eb struct {
					Error, Field string
					Code         int
				}
				json.NewDecoder(resp.Body).Decode(&eb)
				if eb.Field != tc.field || eb.Code != tc.code || eb.Error == "" {
					t.Errorf("error = %+v, want field %q, code %d", eb, tc.field, tc.code)
				}
				if tc.field != "" && !strings.HasPrefix(eb.Error, tc.field+":") {
					t.Errorf("error %q does not start with the field %q", eb.Error, tc.field)
				}
				return
			}
			var got []Entry
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n || got[0].New != tc.first {
				t.Errorf("%d entries, first %q; want %d, first %q", len(got), got[0].New, tc.n, tc.first)
			}
		})
	}
}

// TestHandlerStoreDown: an unreachable store is 503.
func TestHandlerStoreDown(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	l := newLog(t, Config{KV: kv, Replica: "a"})
	kv.Down.Store(true)
	rec := httptest.NewRecorder()
	l.Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", Path, nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status = %d, want 503", rec.Code)
	}
}

// TestHTTPPeer: the middleware puts RemoteAddr in the context.
func TestHTTPPeer(t *testing.T) {
	var got string
	h := HTTPPeer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = PeerFromContext(r.Context()) }))
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "127.0.0.3:999"
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got != "127.0.0.3:999" {
		t.Errorf("peer = %q, want 127.0.0.3:999", got)
	}
}

// FuzzParseQuery: any query either parses within bounds or names a field.
func FuzzParseQuery(f *testing.F) {
	f.Add("since=2025-06-01T12:00:00Z&limit=10")
	f.Add("limit=1001")
	f.Add("since=yesterday")
	f.Add("x=1")
	f.Fuzz(func(t *testing.T, q string) {
		r := httptest.NewRequest("GET", "/v1/audit", nil)
		r.URL.RawQuery = q
		_, limit, field, err := parseQuery(r)
		if err == nil && (limit < 1 || limit > MaxLimit) {
			t.Errorf("parseQuery(%q) limit %d out of range", q, limit)
		}
		if err != nil && field == "" && !errors.Is(err, ErrInvalid) {
			t.Errorf("parseQuery(%q) = %v naming no field", q, err)
		}
	})
}

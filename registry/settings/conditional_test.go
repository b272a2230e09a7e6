package settings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/authn"
)

// TestConditionalHTTP: a GET's ETag is the setting's version; a PUT or
// DELETE with If-Match of a version that is no longer current is 412
// naming the current one and changes nothing; If-None-Match: * creates
// only; a malformed condition is 400 naming the header. Over a KV and in
// memory, for a kind with tombstones and one without.
func TestConditionalHTTP(t *testing.T) {
	for _, kind := range []Kind[note]{filedKind(), plainKind()} {
		for _, withKV := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/kv=%v", kind.Name, withKV), func(t *testing.T) {
				var cfg Config[note]
				if withKV {
					cfg.KV = systemstoretest.NewMemKV()
				}
				s := mustNew(t, kind, cfg)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					r = r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: "cart", Method: authn.Token}))
					s.Handler(HandlerConfig{Auth: s.PolicyAuth(allowCart{}, nil), View: func(svc string) any {
						v, _, _ := s.Get(svc)
						return map[string]string{"text": v.Text}
					}}).ServeHTTP(w, r)
				}))
				defer srv.Close()
				path := "/v1/" + kind.Name + "/cart"
				do := func(method, body string, header ...string) (int, string, http.Header) {
					t.Helper()
					req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
					for i := 0; i+1 < len(header); i += 2 {
						req.Header.Set(header[i], header[i+1])
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					return resp.StatusCode, string(b), resp.Header
				}
				text := func() string { v, _, _ := s.Get("cart"); return v.Text }

				if code, body, _ := do("PUT", "one", "If-Match", `"7"`); code != 412 || !strings.Contains(body, `"field":"If-Match"`) || !strings.Contains(body, "there is none now") {
					t.Errorf("PUT If-Match 7 of nothing = %d %s, want 412 naming If-Match", code, body)
				}
				code, _, h := do("PUT", "one", "If-None-Match", "*")
				if code != 200 || h.Get("ETag") == "" {
					t.Fatalf("PUT If-None-Match * = %d, ETag %q; want 200 with an ETag", code, h.Get("ETag"))
				}
				v1 := h.Get("ETag")
				if code, body, _ := do("PUT", "again", "If-None-Match", "*"); code != 412 || !strings.Contains(body, "the current one is") {
					t.Errorf("PUT If-None-Match * of an existing setting = %d %s, want 412", code, body)
				}
				if _, _, h := do("GET", ""); h.Get("ETag") != v1 {
					t.Errorf("GET ETag = %q, want the PUT's %q", h.Get("ETag"), v1)
				}
				code, _, h = do("PUT", "two", "If-Match", v1)
				if code != 200 || h.Get("ETag") == v1 {
					t.Fatalf("PUT If-Match %s (current) = %d, ETag %q; want 200 with a new ETag", v1, code, h.Get("ETag"))
				}
				v2 := h.Get("ETag")
				n2, _ := strconv.Unquote(v2)
				for _, stale := range []string{v1, strings.Trim(v1, `"`), "W/" + v1} {
					if code, body, _ := do("PUT", "lost", "If-Match", stale); code != 412 || !strings.Contains(body, "the current one is "+n2) {
						t.Errorf("PUT If-Match %s (stale) = %d %s, want 412 naming %s", stale, code, body, n2)
					}
					if code, _, _ := do("DELETE", "", "If-Match", stale); code != 412 {
						t.Errorf("DELETE If-Match %s (stale) = %d, want 412", stale, code)
					}
				}
				if got := text(); got != "two" {
					t.Errorf("after refused writes the setting is %q, want two", got)
				}
				for _, bad := range []string{`"abc"`, "0", "-3", `"`} {
					if code, body, _ := do("PUT", "lost", "If-Match", bad); code != 400 || !strings.Contains(body, `"field":"If-Match"`) {
						t.Errorf("PUT If-Match %s = %d %s, want 400 naming If-Match", bad, code, body)
					}
				}
				if code, body, _ := do("PUT", "lost", "If-None-Match", v2); code != 400 || !strings.Contains(body, `"field":"If-None-Match"`) {
					t.Errorf("PUT If-None-Match %s = %d %s, want 400", v2, code, body)
				}
				if code, _, _ := do("PUT", "three", "If-Match", "*"); code != 200 || text() != "three" {
					t.Errorf("PUT If-Match * of an existing setting = %d (%q), want 200", code, text())
				}
				_, _, h = do("GET", "")
				if code, _, _ := do("DELETE", "", "If-Match", h.Get("ETag")); code != 200 {
					t.Errorf("DELETE If-Match current = %d, want 200", code)
				}
			})
		}
	}
}

// TestConditionalRace: writers that read one version race SetIf (half
// of them through a second Store on the same KV, as another replica);
// exactly one wins, the setting is the winner's, and the others' errors
// wrap systemstore.ErrConflict.
func TestConditionalRace(t *testing.T) {
	ctx := context.Background()
	kv := systemstoretest.NewMemKV()
	a := mustNew(t, plainKind(), Config[note]{KV: kv})
	b := mustNew(t, plainKind(), Config[note]{KV: kv})
	st, err := a.Set(ctx, "cart", []byte("start"), SourceAPI, "")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wins []string
	var wg sync.WaitGroup
	for i := range 20 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			text := fmt.Sprintf("w%02d", i)
			_, err := s.SetIf(ctx, "cart", []byte(text), st.Version)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins = append(wins, text)
			case !errors.Is(err, systemstore.ErrConflict):
				t.Errorf("SetIf %s = %v, want nil or a conflict", text, err)
			}
		})
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("SetIf winners = %v, want exactly one", wins)
	}
	if v, _, _ := kv.Get(ctx, plainKind().Prefix+"cart"); !strings.Contains(string(v), wins[0]) {
		t.Errorf("stored record %s, want the winner %s", v, wins[0])
	}
}

package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestAssetsServed(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(Prefix, Handler())
	mux.Handle("GET /{$}", Redirect())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	tests := []struct {
		path, wantType, wantBody string
		wantCode                 int
	}{
		{"/ui/", "text/html; charset=utf-8", `data-testid="confirm-yes"`, http.StatusOK},
		{"/ui/app.js", "text/javascript; charset=utf-8", "function measuredMatrix", http.StatusOK},
		{"/ui/style.css", "text/css; charset=utf-8", "--focus", http.StatusOK},
		{"/ui/nope.js", "text/plain; charset=utf-8", "404", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.path, "/ui/"), func(t *testing.T) {
			resp, err := noRedirect.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("GET %s: status = %d, want %d", tt.path, resp.StatusCode, tt.wantCode)
			}
			if got := resp.Header.Get("Content-Type"); got != tt.wantType {
				t.Errorf("GET %s: Content-Type = %q, want %q", tt.path, got, tt.wantType)
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("GET %s: body lacks %q", tt.path, tt.wantBody)
			}
			if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
				t.Errorf("GET %s: Content-Security-Policy = %q, want default-src 'self'", tt.path, got)
			}
		})
	}

	t.Run("root-redirects", func(t *testing.T) {
		resp, err := noRedirect.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != Prefix {
			t.Errorf("GET / = %d Location %q, want 302 to %s", resp.StatusCode, resp.Header.Get("Location"), Prefix)
		}
	})
	t.Run("post-refused", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/ui/", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST /ui/ = %d, want 405", resp.StatusCode)
		}
	})
}

// TestNoExternalURLs: the page loads nothing from elsewhere. Every URL in
// the assets is either relative, a data: URL, or one of the known
// non-fetched names (the SVG namespace).
func TestNoExternalURLs(t *testing.T) {
	allowed := map[string]bool{"http://www.w3.org/2000/svg": true}
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s"'<>)]*`)
	n := 0
	err := fs.WalkDir(Assets, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := fs.ReadFile(Assets, path)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(b), -1) {
			if !allowed[m] {
				t.Errorf("%s: external URL %q", path, m)
			}
		}
		for _, bad := range []string{"@import", "fetch('http", `fetch("http`, "<iframe", "new WebSocket"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s: contains %q", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Errorf("assets: %d files, want index.html, app.js, style.css", n)
	}
}

// TestTestIDs: every element id the browser tests rely on is in the page.
func TestTestIDs(t *testing.T) {
	var all strings.Builder
	for _, f := range []string{"index.html", "app.js"} {
		b, err := fs.ReadFile(Assets, f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	for _, id := range []string{"services-table", "service-row", "services-search", "service-title", "flow-measured", "flow-planned",
		"same-zone-chart", "explain", "graph", "migration-panel", "panic-state", "panic-toggle", "token-input", "confirm-yes",
		"subsets", "subsets-size", "subsets-slots", "subset-client-input", "subset-client-node", "subset-client-endpoints",
		"policies", "policy", "policies-none"} {
		// data-testid="id" in the HTML, 'data-testid': 'id' or a
		// matrixTable('id', ...) argument in the JS.
		if !regexp.MustCompile(`["']` + id + `["']`).MatchString(all.String()) {
			t.Errorf("data-testid %q not in the page", id)
		}
	}
}

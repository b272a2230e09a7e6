package webguard

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/internal/httpjson"
)

// request is one request of a case: a browser's (Origin, Sec-Fetch-Site)
// or a tool's (neither).
type request struct {
	method, host, contentType, body string
	origin, fetchSite               string
}

func (q request) build() *http.Request {
	r := httptest.NewRequest(q.method, "/v1/register", strings.NewReader(q.body))
	r.Host = q.host
	if q.body == "" {
		r.ContentLength = 0
	}
	for k, v := range map[string]string{"Content-Type": q.contentType, "Origin": q.origin, "Sec-Fetch-Site": q.fetchSite} {
		if v != "" {
			r.Header.Set(k, v)
		}
	}
	return r
}

const (
	self = "127.0.0.1:18080"
	body = `{"service":"payments"}`
)

// TestHandler: the attacks of issue #28 are refused before the API sees
// them, with the header at fault named; what spillwayctl, curl, JSON
// clients and spillway's own page send goes through.
func TestHandler(t *testing.T) {
	cfg := Config{Hosts: []string{"spillway.example.com."}, Hostname: func() (string, error) { return "vm-7", nil }}
	for _, tc := range []struct {
		name      string
		req       request
		wantCode  int    // 200: reached the API
		wantField string // of the refusal
	}{
		// Attacks.
		{"finding_cross_site_text_plain_rebound", request{method: "POST", host: "evil.example:18080", contentType: "text/plain", body: body, origin: "http://evil.example:18080"}, 421, "Host"},
		{"rebinding_read", request{method: "GET", host: "evil.example:18080", fetchSite: "same-origin"}, 421, "Host"},
		{"rebinding_page_load", request{method: "GET", host: "evil.example:18080", fetchSite: "none"}, 421, "Host"},
		{"rebinding_same_origin_write", request{method: "POST", host: "evil.example", contentType: "application/json", body: body, origin: "http://evil.example", fetchSite: "same-origin"}, 421, "Host"},
		{"rebinding_suffix_of_allowed", request{method: "GET", host: "evilspillway.example.com", fetchSite: "same-origin"}, 421, "Host"},
		{"rebinding_localhost_lookalike", request{method: "GET", host: "localhost.evil.example", fetchSite: "same-origin"}, 421, "Host"},
		{"foreign_origin_json", request{method: "POST", host: self, contentType: "application/json", body: body, origin: "http://evil.example"}, 403, "Origin"},
		{"foreign_origin_text_plain", request{method: "POST", host: self, contentType: "text/plain", body: body, origin: "https://evil.example"}, 403, "Origin"},
		{"foreign_origin_other_port", request{method: "PUT", host: self, contentType: "application/yaml", body: "strategy: pid", origin: "http://127.0.0.1:3000"}, 403, "Origin"},
		{"null_origin", request{method: "POST", host: self, contentType: "application/json", body: body, origin: "null"}, 403, "Origin"},
		{"foreign_origin_bodyless_delete", request{method: "DELETE", host: self, origin: "http://evil.example"}, 403, "Origin"},
		{"fetch_site_cross_site", request{method: "POST", host: self, contentType: "application/json", body: body, fetchSite: "cross-site"}, 403, "Sec-Fetch-Site"},
		{"fetch_site_same_site", request{method: "POST", host: "localhost:18080", contentType: "application/json", body: body, origin: "http://localhost:3000", fetchSite: "same-site"}, 403, "Origin"},
		{"text_plain", request{method: "POST", host: self, contentType: "text/plain;charset=UTF-8", body: body, fetchSite: "same-origin"}, 415, "Content-Type"},
		{"form", request{method: "POST", host: self, contentType: "application/x-www-form-urlencoded", body: body, fetchSite: "same-origin"}, 415, "Content-Type"},
		{"multipart", request{method: "POST", host: self, contentType: "multipart/form-data; boundary=x", body: body, fetchSite: "same-origin"}, 415, "Content-Type"},
		{"no_type_with_body", request{method: "POST", host: self, body: body, fetchSite: "same-origin"}, 415, "Content-Type"},
		{"empty_form", request{method: "POST", host: self, contentType: "application/x-www-form-urlencoded", fetchSite: "same-origin"}, 415, "Content-Type"},
		{"malformed_type", request{method: "POST", host: self, contentType: "text/plain; ;", body: body, fetchSite: "same-origin"}, 415, "Content-Type"},
		{"json_lookalike", request{method: "POST", host: self, contentType: "text/json", body: body, fetchSite: "same-origin"}, 415, "Content-Type"},
		{"patch_text_plain", request{method: "PATCH", host: self, contentType: "text/plain", body: body, fetchSite: "same-origin"}, 415, "Content-Type"},
		{"old_browser_same_origin_text_plain", request{method: "POST", host: self, contentType: "text/plain", body: body, origin: "http://" + self}, 415, "Content-Type"},

		// What works.
		{"json_client", request{method: "POST", host: self, contentType: "application/json", body: body}, 200, ""},
		{"json_charset", request{method: "POST", host: self, contentType: "application/json; charset=utf-8", body: body}, 200, ""},
		{"json_upper", request{method: "POST", host: self, contentType: "Application/JSON", body: body}, 200, ""},
		{"spillwayctl_yaml_put", request{method: "PUT", host: self, contentType: "application/yaml", body: "strategy: pid"}, 200, ""},
		{"spillwayctl_delete", request{method: "DELETE", host: self}, 200, ""},
		{"spillwayctl_undelete", request{method: "POST", host: self}, 200, ""},
		{"page_same_origin", request{method: "POST", host: self, contentType: "application/json", body: body, origin: "http://" + self, fetchSite: "same-origin"}, 200, ""},
		{"page_same_origin_old_browser", request{method: "POST", host: "localhost:18080", contentType: "application/json", body: body, origin: "http://localhost:18080"}, 200, ""},
		{"foreign_origin_read", request{method: "GET", host: self, origin: "http://evil.example"}, 200, ""},
		{"typed_url", request{method: "POST", host: self, contentType: "application/json", body: body, fetchSite: "none"}, 200, ""},
		{"localhost", request{method: "GET", host: "localhost:18080"}, 200, ""},
		{"localhost_dot", request{method: "GET", host: "LOCALHOST."}, 200, ""},
		{"dot_localhost", request{method: "GET", host: "spillway.localhost:18080"}, 200, ""},
		{"ipv4_no_port", request{method: "GET", host: "10.0.0.5"}, 200, ""},
		{"ipv6", request{method: "GET", host: "[::1]:18080"}, 200, ""},
		{"ipv6_no_port", request{method: "GET", host: "[fd00::5]"}, 200, ""},
		{"configured_name", request{method: "POST", host: "Spillway.Example.com:443", contentType: "application/json", body: body}, 200, ""},
		{"machine_hostname", request{method: "GET", host: "vm-7:18080"}, 200, ""},
		{"no_host", request{method: "GET", host: ""}, 200, ""},
		// Tools (no Origin, no Sec-Fetch-Site) are served as before the
		// guard: only a browser can be steered by a page.
		{"tool_curl_d_form", request{method: "POST", host: self, contentType: "application/x-www-form-urlencoded", body: body}, 200, ""},
		{"tool_text_plain", request{method: "POST", host: self, contentType: "text/plain", body: body}, 200, ""},
		{"tool_no_type_with_body", request{method: "POST", host: self, body: body}, 200, ""},
		{"tool_any_host_name", request{method: "GET", host: "spillway.prod.internal:18080"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reached := false
			h := Handler(cfg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				reached = true
				httpjson.Write(w, http.StatusOK, map[string]string{"ok": "yes"})
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tc.req.build())
			if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
			}
			if rec.Code != tc.wantCode || reached != (tc.wantCode == 200) {
				t.Fatalf("status = %d (API reached %v), want %d; body %s", rec.Code, reached, tc.wantCode, rec.Body)
			}
			if tc.wantCode == 200 {
				return
			}
			var e httpjson.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if e.Field != tc.wantField || e.Code != tc.wantCode || e.Error == "" {
				t.Errorf("error = %+v, want field %q code %d", e, tc.wantField, tc.wantCode)
			}
		})
	}
}

// TestHostDefaults: without Hosts a plaintext listener answers IP
// literals, localhost and the machine's name only; a TLS listener any
// name, until Hosts are given.
func TestHostDefaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		host     string
		wantCode int
	}{
		{"plaintext_ip", Config{}, self, 200},
		{"plaintext_lb_name", Config{}, "spillway.example.com", 421},
		{"plaintext_hostname_error", Config{Hostname: func() (string, error) { return "", errors.New("no name") }}, "vm-7", 421},
		{"plaintext_bad_hostname_ignored", Config{Hostname: func() (string, error) { return "vm 7", nil }}, "vm 7", 421},
		{"tls_any_name", Config{TLS: true}, "spillway.example.com", 200},
		{"tls_with_hosts_checks", Config{TLS: true, Hosts: []string{"spillway.example.com"}}, "evil.example", 421},
		{"tls_with_hosts_listed", Config{TLS: true, Hosts: []string{"spillway.example.com"}}, "spillway.example.com", 200},
		{"invalid_host_never_matches", Config{Hosts: []string{"spillway.example.com:443"}}, "spillway.example.com:443", 421},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Hostname == nil {
				tc.cfg.Hostname = func() (string, error) { return "vm-7", nil }
			}
			h := Handler(tc.cfg, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, request{method: "GET", host: tc.host, fetchSite: "same-origin"}.build())
			if rec.Code != tc.wantCode {
				t.Errorf("GET with Host %q = %d, want %d; body %s", tc.host, rec.Code, tc.wantCode, rec.Body)
			}
		})
	}
}

// TestNosniffOnEveryAnswer: the header is set before the API writes, so
// an API's own error (http.Error, a 404 of the mux) carries it too.
func TestNosniffOnEveryAnswer(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/fail", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })
	h := Handler(Config{}, mux)
	for _, path := range []string{"/v1/fail", "/v1/missing"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "http://"+self+path, nil))
		if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options = %q, want nosniff", path, got)
		}
	}
}

// TestRefusedCounted: each refusal counts under its check, and a second
// Handler on the same Registerer shares the counter.
func TestRefusedCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h1 := Handler(Config{Registerer: reg}, next)
	h2 := Handler(Config{Registerer: reg}, next)
	for _, q := range []request{
		{method: "GET", host: "evil.example", fetchSite: "same-origin"},
		{method: "POST", host: self, contentType: "application/json", body: body, origin: "http://evil.example"},
		{method: "POST", host: self, contentType: "text/plain", body: body, fetchSite: "same-origin"},
		{method: "POST", host: self, contentType: "text/plain", body: body},       // a tool's: served, counted below
		{method: "POST", host: self, contentType: "application/json", body: body}, // allowed
	} {
		h1.ServeHTTP(httptest.NewRecorder(), q.build())
		h2.ServeHTTP(httptest.NewRecorder(), q.build())
	}
	got := map[string]float64{}
	for _, check := range []string{checkHost, checkOrigin, checkContentType} {
		got[check] = testutil.ToFloat64(newRefused(reg).WithLabelValues(check))
	}
	if diff := cmp.Diff(map[string]float64{checkHost: 2, checkOrigin: 2, checkContentType: 2}, got); diff != "" {
		t.Errorf("spillway_http_refused_total (-want +got):\n%s", diff)
	}
	if n := testutil.ToFloat64(newToolWrites(reg)); n != 2 {
		t.Errorf("spillway_http_untyped_tool_writes_total = %v, want 2", n)
	}
}

func TestCheckHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"spillway.example.com", true},
		{"spillway.example.com.", true},
		{"spillway", true},
		{"spillway-0.spillway_headless.svc", true},
		{"", false},
		{".", false},
		{"spillway.example.com:18080", false},
		{"http://spillway.example.com", false},
		{"spillway.example.com/ui", false},
		{"a..b", false},
		{"*.example.com", false},
		{strings.Repeat("a", 64) + ".com", false},
	} {
		if err := CheckHost(tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckHost(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// FuzzGuard: for any Host, Origin, Sec-Fetch-Site and Content-Type a
// client sends, the guard answers without panicking, always sets nosniff,
// and lets a browser's write reach the API only from its own origin with
// a type a page cannot send cross-site.
func FuzzGuard(f *testing.F) {
	for _, s := range [][4]string{
		{self, "", "", "application/json"},
		{"evil.example:18080", "http://evil.example:18080", "same-origin", "text/plain"},
		{"[::1]:18080", "http://[::1]:18080", "same-origin", "application/json; charset=utf-8"},
		{"spillway.example.com.", "null", "cross-site", "multipart/form-data; boundary=x"},
		{"LOCALHOST.", "http://localhost", "none", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	h := Handler(Config{Hosts: []string{"spillway.example.com"}, Hostname: func() (string, error) { return "vm-7", nil }},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	f.Fuzz(func(t *testing.T, host, origin, fetchSite, contentType string) {
		r := httptest.NewRequest("POST", "/v1/register", strings.NewReader(body))
		r.Host = host
		for k, v := range map[string]string{"Origin": origin, "Sec-Fetch-Site": fetchSite, "Content-Type": contentType} {
			if v != "" {
				r.Header[k] = []string{v}
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("no nosniff: Host %q Origin %q", host, origin)
		}
		if rec.Code != http.StatusOK || (origin == "" && fetchSite == "") {
			return
		}
		if _, ok := contentTypeOK(r); !ok {
			t.Errorf("a browser's write with Content-Type %q reached the API (Host %q, Origin %q, Sec-Fetch-Site %q)", contentType, host, origin, fetchSite)
		}
		if fetchSite != "" && fetchSite != "same-origin" && fetchSite != "none" {
			t.Errorf("a browser's write with Sec-Fetch-Site %q reached the API", fetchSite)
		}
	})
}

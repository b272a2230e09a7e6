package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWebGuard runs issue #28's attacks on the HTTP port of a real
// server, as a web page in a browser would make them: each is refused
// before any API sees it (the service stays unregistered, the panic flag
// unchanged), with the header at fault named; what spillwayctl, curl
// with a JSON type, VMs and spillway's own page send still works. Every
// answer carries nosniff.
func TestWebGuard(t *testing.T) {
	admin := filepath.Join(t.TempDir(), "admin-token")
	os.WriteFile(admin, []byte("tok-admin\n"), 0o600)
	httpAddr, _ := startSecured(t, "--admin-token-file", admin, "--http-host", "spillway.example.com")
	_, port, _ := strings.Cut(httpAddr, ":")
	self := "http://" + httpAddr
	register := func(service string) string {
		return `{"service":"` + service + `","endpoint":{"address":"10.0.0.9","ports":[{"name":"grpc","number":8080}]},"ttl_seconds":30}`
	}
	for _, tc := range []struct {
		name, method, path, host, body string
		header                         map[string]string
		wantCode                       int
		wantField                      string // of the refusal; "" for an answer of the API
		registered                     string // a service the request must (200) or must not have registered
	}{
		// Attacks; before: 200, and the endpoint registered.
		{"finding_cross_site_rebound_register", "POST", "/v1/register", "evil.example:" + port, register("atk-finding"),
			map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example:" + port}, 421, "Host", "atk-finding"},
		{"cross_site_text_plain_register", "POST", "/v1/register", "", register("atk-text"),
			map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example"}, 403, "Origin", "atk-text"},
		{"cross_site_form_register", "POST", "/v1/register", "", register("atk-form"),
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"}, 403, "Sec-Fetch-Site", "atk-form"},
		{"page_text_plain_register", "POST", "/v1/register", "", register("atk-page-text"),
			map[string]string{"Content-Type": "text/plain", "Origin": self, "Sec-Fetch-Site": "same-origin"}, 415, "Content-Type", "atk-page-text"},
		{"foreign_origin_register", "POST", "/v1/register", "", register("atk-origin"),
			map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403, "Origin", "atk-origin"},
		{"cross_site_fetch_register", "POST", "/v1/register", "", register("atk-site"),
			map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403, "Sec-Fetch-Site", "atk-site"},
		{"foreign_origin_panic", "POST", "/v1/panic", "", `{"panic": true}`,
			map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", "Authorization": "Bearer tok-admin"}, 403, "Origin", ""},
		{"rebinding_read", "GET", "/v1/services", "evil.example:" + port, "", map[string]string{"Sec-Fetch-Site": "same-origin"}, 421, "Host", ""},
		{"rebinding_page", "GET", "/ui/", "evil.example:" + port, "", map[string]string{"Sec-Fetch-Site": "none"}, 421, "Host", ""},

		// What works.
		{"curl_d_script_register", "POST", "/v1/register", "", register("vm-curl"),
			map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 200, "", "vm-curl"},
		{"tool_by_dns_name", "GET", "/v1/services", "spillway.prod.internal:" + port, "", nil, 200, "", ""},
		{"json_client_register", "POST", "/v1/register", "", register("vm-json"),
			map[string]string{"Content-Type": "application/json"}, 200, "", "vm-json"},
		{"configured_name_register", "POST", "/v1/register", "spillway.example.com:" + port, register("vm-lb"),
			map[string]string{"Content-Type": "application/json; charset=utf-8"}, 200, "", "vm-lb"},
		{"localhost_read", "GET", "/v1/services", "localhost:" + port, "", nil, 200, "", ""},
		{"page", "GET", "/ui/", "", "", nil, 200, "", ""},
		{"page_panic_same_origin", "POST", "/v1/panic", "", `{"panic": false}`,
			map[string]string{"Content-Type": "application/json", "Origin": self, "Sec-Fetch-Site": "same-origin", "Authorization": "Bearer tok-admin"}, 200, "", ""},
		{"ctl_config_put", "PUT", "/v1/config/payments", "", "strategy: pid\n",
			map[string]string{"Content-Type": "application/yaml", "Authorization": "Bearer tok-admin"}, 200, "", ""},
		{"ctl_config_delete", "DELETE", "/v1/config/payments", "", "", map[string]string{"Authorization": "Bearer tok-admin"}, 200, "", ""},
		{"healthz", "GET", "/healthz", "", "", nil, 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, self+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
			}
			if resp.StatusCode != tc.wantCode {
				t.Errorf("%s %s = %d %s, want %d", tc.method, tc.path, resp.StatusCode, b, tc.wantCode)
			}
			if tc.wantField != "" {
				var e struct{ Field string }
				if json.Unmarshal(b, &e); e.Field != tc.wantField {
					t.Errorf("refusal %s names field %q, want %q", b, e.Field, tc.wantField)
				}
			}
			if tc.registered != "" {
				resp, err := http.Get(self + "/v1/services/" + tc.registered + "/endpoints")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got, want := strings.Contains(string(b), "10.0.0.9"), tc.wantCode == 200; got != want {
					t.Errorf("%s registered = %v, want %v (GET endpoints: %d %s)", tc.registered, got, want, resp.StatusCode, b)
				}
			}
		})
	}
	resp, err := http.Get(self + "/v1/panic")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), `"panic":true`) {
		t.Errorf("GET /v1/panic = %s: a refused request turned panic on", b)
	}
}

// TestParseHTTPHosts: --http-host is repeatable and replaces the file's
// http_hosts; a name with a port or scheme stops the start naming both.
func TestParseHTTPHosts(t *testing.T) {
	file := filepath.Join(t.TempDir(), "spillway.yaml")
	os.WriteFile(file, []byte("http_hosts: [spillway.example.com]\n"), 0o600)
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{"default", nil, nil, ""},
		{"yaml", []string{"--config", file}, []string{"spillway.example.com"}, ""},
		{"flags", []string{"--http-host", "a.example", "--http-host", "b.example"}, []string{"a.example", "b.example"}, ""},
		{"flag_beats_yaml", []string{"--config", file, "--http-host", "a.example"}, []string{"a.example"}, ""},
		{"port", []string{"--http-host", "a.example:18080"}, nil, "--http-host (http_hosts): "},
		{"scheme", []string{"--http-host", "https://a.example"}, nil, "--http-host (http_hosts): "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("parseConfig = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(c.HTTPHosts, ",") != strings.Join(tc.want, ",") {
				t.Errorf("HTTPHosts = %q, want %q", c.HTTPHosts, tc.want)
			}
		})
	}
}

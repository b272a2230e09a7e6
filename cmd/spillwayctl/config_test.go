package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/security/webguard"
	"github.com/spillway/spillway/weights/svcconfig"
)

// TestConfigCommand drives spillwayctl config against the real API
// handler: set, get, list, delete (tombstone), undelete, and the errors
// that name the field or the missing token.
func TestConfigCommand(t *testing.T) {
	store, err := svcconfig.NewStore(svcconfig.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(webguard.Handler(webguard.Config{}, store.Handler(testToken, nil))) // as spillway serves it
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("strategy: pid\npid:\n  kp: 0.7\n"), 0o644)
	os.WriteFile(bad, []byte("strategy: pid\nheadroom: 2\n"), 0o644)

	tests := []struct {
		name     string
		args     []string
		code     int
		want     string // in stdout (code 0) or stderr
		wantTrue func() bool
	}{
		{"setNoToken", []string{"set", "cart", good}, exitError, "(HTTP 401)", nil},
		{"setBadField", []string{"set", "--token", testToken, "cart", bad}, exitError, "body:2: headroom: 2 is out of range", nil},
		{"set", []string{"set", "--token", testToken, "cart", good}, exitOK, "service cart: active, from api",
			func() bool { c, _, ok := store.Get("cart"); return ok && c.PID.Kp == 0.7 }},
		{"getYAML", []string{"get", "-o", "yaml", "cart"}, exitOK, "kp: 0.7", nil},
		{"list", []string{"list"}, exitOK, "cart     pid", nil},
		{"delete", []string{"delete", "--token", testToken, "cart"}, exitOK, "deleted 20",
			func() bool { _, st, ok := store.Get("cart"); return ok && st.Deleted }},
		{"undelete", []string{"undelete", "--token", testToken, "cart"}, exitOK, "service cart: active",
			func() bool { _, st, ok := store.Get("cart"); return ok && !st.Deleted }},
		{"setIfVersionStale", []string{"set", "--token", testToken, "--if-version", "999999", "cart", good}, exitError, "version 999999 was read, the current one is",
			func() bool { _, st, ok := store.Get("cart"); return ok && st.Version != 999999 }},
		{"setIfNoneExisting", []string{"set", "--token", testToken, "--if-version", "-1", "cart", good}, exitError, "(HTTP 412)", nil},
		{"deleteIfVersionStale", []string{"delete", "--token", testToken, "--if-version", "999999", "cart"}, exitError, "(HTTP 412)",
			func() bool { _, st, ok := store.Get("cart"); return ok && !st.Deleted }},
		{"ifVersionOnGet", []string{"get", "--if-version", "3", "cart"}, exitUsage, "--if-version is for set and delete", nil},
		{"getUnknown", []string{"get", "search"}, exitOK, "no config, the defaults apply", nil},
		{"usage", []string{"get"}, exitUsage, "get wants 1 arguments", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"config", "--http", addr}, tt.args...)
			code := run(context.Background(), args, &stdout, &stderr)
			out := stdout.String()
			if code != exitOK {
				out = stderr.String()
			}
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Fatalf("spillwayctl %v = %d, stdout %q stderr %q; want %d with %q", args, code, stdout.String(), stderr.String(), tt.code, tt.want)
			}
			if tt.wantTrue != nil && !tt.wantTrue() {
				t.Fatalf("spillwayctl %v: the store did not change as expected", args)
			}
		})
	}

	// At the version get shows, a conditional set applies.
	_, st, _ := store.Get("cart")
	var stdout, stderr bytes.Buffer
	args := []string{"config", "--http", addr, "set", "--token", testToken, "--if-version", fmt.Sprint(st.Version), "cart", bad}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), "headroom") {
		t.Errorf("spillwayctl %v = %d %q, want the config's own error (the version matched)", args, code, stderr.String())
	}
	stderr.Reset()
	args[len(args)-1] = good
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Errorf("spillwayctl %v = %d %q, want applied at the current version", args, code, stderr.String())
	}
	if _, now, _ := store.Get("cart"); now.Version == st.Version {
		t.Errorf("version still %d after a conditional set", now.Version)
	}
}

// TestConfigPolicies: config list sums up each service's resilience
// policies in its POLICIES column and config get shows them one line per
// policy, the defaults Parse fills in included, every value with its
// unit; -o json stays the API's answer.
func TestConfigPolicies(t *testing.T) {
	tests := []struct {
		name    string // the service's too, lowercased
		yaml    string
		summary string // the POLICIES column
		get     string // config get's resilience section
	}{
		{
			name:    "none",
			yaml:    "strategy: pid\n",
			summary: "-",
			get:     "resilience: none (clients keep their own defaults)\n",
		},
		{
			name: "issueExample",
			yaml: `resilience:
  outlier_detection: {success_rate: {}, failure_percentage: {}}
  max_requests: 100
  timeout: 5s
  retry: {on: [unavailable, resource_exhausted], num_retries: 2}
  fault: {delay: {fixed: 100ms, percent: 20}, abort: {percent: 10}, header: x-chaos, max_active_faults: 100}
  lb: {ring_hash: {header: x-user}}
`,
			summary: "outlier(sr,fp) max_requests=100 timeout=5s retry(2×unavailable,resource-exhausted) fault(delay 20%,abort 10% if x-chaos) ring_hash(x-user)",
			get: `resilience:
  outlier_detection: every 10s, ejects for 30s × times ejected (at most 5m0s), at most 10% of endpoints at once
    success_rate: success rate more than 1.9 stdev below the mean; enforced 100%; judged when 5 endpoints have 100 RPCs or more in the interval
    failure_percentage: more than 85% of RPCs failed; enforced 100%; judged when 5 endpoints have 50 RPCs or more in the interval
  max_requests: 100 RPCs in flight per client process, then UNAVAILABLE
  timeout: 5s at most per RPC
  retry: up to 2 retries on unavailable, resource-exhausted; backoff 25ms, doubling, at most 250ms
  fault: delay 100ms on 20% of RPCs; abort 10% of RPCs with unavailable (14); only RPCs with header x-chaos; at most 100 faults at once
  lb: ring_hash on header x-user, a ring of 1024 to 4096 entries
`,
		},
		{
			name: "defaultsFilled",
			yaml: `resilience:
  outlier_detection: {failure_percentage: {threshold: 60}, max_ejection_percent: 0}
  retry: {}
  fault: {abort: {grpc_status: resource_exhausted, percent: 5}}
`,
			summary: "outlier(fp) retry(1×unavailable) fault(abort 5%)",
			get: `resilience:
  outlier_detection: every 10s, ejects for 30s × times ejected (at most 5m0s), at most 0% of endpoints at once
    failure_percentage: more than 60% of RPCs failed; enforced 100%; judged when 5 endpoints have 50 RPCs or more in the interval
  retry: up to 1 retry on unavailable; backoff 25ms, doubling, at most 250ms
  fault: abort 5% of RPCs with resource_exhausted (8); every RPC
`,
		},
		{
			name: "leastRequest",
			yaml: `resilience:
  timeout: 1500ms
  lb: {least_request: {choice_count: 3}}
`,
			summary: "timeout=1.5s least_request(3)",
			get: `resilience:
  timeout: 1.5s at most per RPC
  lb: least_request, the least loaded of 3 random endpoints
`,
		},
		{
			name: "clientWRR",
			yaml: `resilience:
  max_requests: 1
  fault: {delay: {fixed: 2s, percent: 0.5}, max_active_faults: 1}
  lb: {client_wrr: {oob_reporting_period: 30s, error_utilization_penalty: 0.25}}
`,
			summary: "max_requests=1 fault(delay 0.5%) client_wrr",
			get: `resilience:
  max_requests: 1 RPC in flight per client process, then UNAVAILABLE
  fault: delay 2s on 0.5% of RPCs; every RPC; at most 1 fault at once
  lb: client_wrr by the endpoints' load reports (out-of-band reports every 30s); blackout 10s, weights expire after 3m0s, updated every 1s, error penalty 0.25
`,
		},
	}
	store, err := svcconfig.NewStore(svcconfig.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(webguard.Handler(webguard.Config{}, store.Handler(testToken, nil)))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctl := func(t *testing.T, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args = append([]string{"config", "--http", addr}, args...)
		if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
			t.Fatalf("spillwayctl %v = %d, stderr %q; want 0", args, code, stderr.String())
		}
		return stdout.String()
	}
	for _, tt := range tests {
		if _, err := store.Set(context.Background(), strings.ToLower(tt.name), []byte(tt.yaml), "api", ""); err != nil {
			t.Fatalf("set %s: %v", tt.name, err)
		}
	}
	list := ctl(t, "list")
	rows := strings.Split(strings.TrimSuffix(list, "\n"), "\n")
	col := strings.Index(rows[0], "POLICIES")
	summaries := map[string]string{}
	for _, row := range rows[1:] {
		summaries[strings.Fields(row)[0]] = row[col:]
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := strings.ToLower(tt.name)
			if col < 0 || summaries[svc] != tt.summary {
				t.Errorf("config list: POLICIES of %s = %q, want %q; list:\n%s", svc, summaries[svc], tt.summary, list)
			}
			out := ctl(t, "get", svc)
			head, rest, _ := strings.Cut(out, "\n")
			section, _, _ := strings.Cut(rest, "{")
			if !strings.HasPrefix(head, "service "+svc+": active") || section != tt.get {
				t.Errorf("config get %s: before the JSON\n%s\nwant the service line, then\n%s", svc, head+"\n"+section, tt.get)
			}

			// -o json is the API's answer, untouched.
			out = ctl(t, "get", "-o", "json", svc)
			var ent svcconfig.Entry
			if err := json.Unmarshal([]byte(out), &ent); err != nil || !strings.HasPrefix(out, "{") {
				t.Fatalf("config get -o json %s = %q (%v); want the API's JSON only", svc, out, err)
			}
			want, _, _ := store.Get(svc)
			if diff := cmp.Diff(want.Resilience, ent.Config.Resilience); diff != "" {
				t.Errorf("config get -o json %s: resilience differs from the store's (-store +json):\n%s", svc, diff)
			}
		})
	}
}

// TestDocPolicies runs the example of docs/service-config.md, "Seeing a
// service's policies": its ```yaml config set for payments, each "$
// spillwayctl" line of the transcript prints what the doc shows after it
// (up to a line "  ...", where the doc stops showing).
func TestDocPolicies(t *testing.T) {
	doc, err := os.ReadFile("../../docs/service-config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n### Seeing a service's policies\n")
	if !ok {
		t.Fatal(`docs/service-config.md has no "### Seeing a service's policies" section`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	if i := strings.Index(sec, "\n### "); i >= 0 {
		sec = sec[:i]
	}
	_, rest, _ := strings.Cut(sec, "```yaml\n")
	cfg, rest, _ := strings.Cut(rest, "```")
	_, rest, _ = strings.Cut(rest, "```\n$ ")
	transcript, _, ok := strings.Cut(rest, "```")
	if cfg == "" || !ok {
		t.Fatal("the section lacks its ```yaml config or its ``` transcript")
	}

	store, err := svcconfig.NewStore(svcconfig.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Set(context.Background(), "payments", []byte(cfg), "api", ""); err != nil {
		t.Fatalf("the doc's config: %v", err)
	}
	srv := httptest.NewServer(webguard.Handler(webguard.Config{}, store.Handler(testToken, nil)))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	runs := 0
	for _, step := range strings.Split(transcript, "\n$ ") {
		cmdline, want, _ := strings.Cut(step, "\n")
		args := strings.Fields(cmdline)
		if len(args) < 2 || args[0] != "spillwayctl" {
			t.Fatalf("transcript line %q: want $ spillwayctl ...", cmdline)
		}
		args = append([]string{args[1], "--http", addr}, args[2:]...)
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
			t.Fatalf("%s = %d, stderr %q", cmdline, code, stderr.String())
		}
		got, want := stdout.String(), strings.TrimSuffix(want, "\n")+"\n"
		if shown, _, cut := strings.Cut(want, "\n  ...\n"); cut {
			want = shown + "\n"
			got = got[:min(len(got), len(want))]
		}
		if got != want {
			t.Errorf("%s prints\n%s\nthe doc shows\n%s", cmdline, got, want)
		}
		runs++
	}
	if runs != 2 {
		t.Errorf("the transcript runs %d commands, want config list and config get", runs)
	}
}

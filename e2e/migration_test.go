package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const e2eToken = "e2e-admin-t0ken"

// ctlResult is one spillwayctl run.
type ctlResult struct {
	code           int
	stdout, stderr string
}

// ctlEnv runs spillwayctl against s with extra environment variables
// (KEY=VALUE) and returns what it did, whatever the exit status.
func (s *server) ctlEnv(env []string, args ...string) ctlResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.spillwayctl, append(s.ctlGlobals(), args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		s.t.Fatalf("spillwayctl %v: %v", args, err)
	}
	return ctlResult{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// xdsTXT asks the real dig for TXT _xds.<domain> and returns the text.
func (s *server) xdsTXT() string {
	s.t.Helper()
	r, _ := digZone(s.t, s.flag("--dns-addr"), "_xds.spillway.internal.", "TXT")
	if r.Rcode != "NOERROR" || len(r.Answer) != 1 {
		s.t.Fatalf("dig TXT _xds: %s with %d answers, want NOERROR with 1", r.Rcode, len(r.Answer))
	}
	txt, ok := r.Answer[0].(*dns.TXT)
	if !ok {
		s.t.Fatalf("dig TXT _xds: answer %v is not TXT", r.Answer[0])
	}
	return strings.Join(txt.Txt, "")
}

func (s *server) httpGet(path string) string {
	s.t.Helper()
	resp, err := s.httpClient().Get(s.url(path))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
	}
	return strings.TrimSpace(string(b))
}

// TestPanicAndRolloutSurviveKill9: with --admin-token-file, `spillwayctl
// panic on` makes dig see xds=off; without the token nothing changes; an
// invalid rollout config is refused naming the field; and after kill -9 and
// a restart on the same data dir the flag and the config are still there.
func TestPanicAndRolloutSurviveKill9(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(e2eToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rollout := filepath.Join(dir, "rollout.yaml")
	if err := os.WriteFile(rollout, []byte("rules:\n  - name: half\n    match: {}\n    percent: 50\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - name: half\n    percent: 500\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withToken := []string{"SPILLWAY_ADMIN_TOKEN=" + e2eToken}
	noToken := []string{"SPILLWAY_ADMIN_TOKEN="}

	s := newServer(t, "--admin-token-file", tokenFile)
	s.start()
	if got := s.xdsTXT(); got != "xds=on" {
		t.Fatalf("TXT _xds on a fresh server = %q, want xds=on", got)
	}

	steps := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantErr  string // in stderr
		wantTXT  string
	}{
		{"panic_on_no_token", noToken, []string{"panic", "on"}, 1, "PermissionDenied", "xds=on"},
		{"panic_on_wrong_token", []string{"SPILLWAY_ADMIN_TOKEN=guess"}, []string{"panic", "on"}, 1, "authorization: unknown token (Unauthenticated)", "xds=on"},
		{"panic_on", withToken, []string{"panic", "on"}, 0, "", "xds=off"},
		{"rollout_set", withToken, []string{"rollout", "set", rollout}, 0, "", "xds=off"},
		{"rollout_set_invalid", withToken, []string{"rollout", "set", bad}, 1, "rules[0].percent: 500 is not in 0..100", "xds=off"},
		{"rollout_set_no_token", noToken, []string{"rollout", "set", bad}, 1, "PermissionDenied", "xds=off"},
	}
	for _, st := range steps {
		r := s.ctlEnv(st.env, st.args...)
		if r.code != st.wantCode || !strings.Contains(r.stderr, st.wantErr) {
			t.Errorf("%s: spillwayctl %v = exit %d, stderr %q; want exit %d with %q", st.name, st.args, r.code, r.stderr, st.wantCode, st.wantErr)
		}
		if got := s.xdsTXT(); got != st.wantTXT {
			t.Errorf("%s: TXT _xds = %q, want %q", st.name, got, st.wantTXT)
		}
	}
	wantJSON := `{"rules":[{"name":"half","percent":50}],"version":1}` // an empty match is left out
	if got := s.httpGet("/v1/rollout"); got != wantJSON {
		t.Errorf("GET /v1/rollout = %s, want %s", got, wantJSON)
	}
	for name, want := range map[string]string{"spillway_panic": "1", "spillway_rollout_version": "1",
		// The wrong token is refused by authentication, before the API
		// counts a change: only the call without a token is counted.
		`spillway_admin_changes_total{result="denied",what="panic"}`:    "1",
		`spillway_admin_changes_total{result="invalid",what="rollout"}`: "1"} {
		if got := s.metric(name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}

	s.kill()
	s.start()
	if got := s.xdsTXT(); got != "xds=off" {
		t.Errorf("TXT _xds after kill -9 and restart = %q, want xds=off", got)
	}
	if got := s.httpGet("/v1/rollout"); got != wantJSON {
		t.Errorf("GET /v1/rollout after restart = %s, want %s", got, wantJSON)
	}
	if r := s.ctlEnv(noToken, "panic", "status"); r.code != 0 || !strings.Contains(r.stdout, "panic on: TXT _xds says xds=off") {
		t.Errorf("panic status after restart = exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := s.ctlEnv(withToken, "panic", "off"); r.code != 0 {
		t.Errorf("panic off = exit %d %s", r.code, r.stderr)
	}
	if got := s.xdsTXT(); got != "xds=on" {
		t.Errorf("TXT _xds after panic off = %q, want xds=on", got)
	}
}

// TestChangesRefusedWithoutTokenFile: a server started without
// --admin-token-file refuses every change, saying how to allow them.
func TestChangesRefusedWithoutTokenFile(t *testing.T) {
	s := newServer(t)
	s.start()
	r := s.ctlEnv([]string{"SPILLWAY_ADMIN_TOKEN=anything"}, "panic", "on")
	if r.code != 1 || !strings.Contains(r.stderr, "--admin-token-file") || !strings.Contains(r.stderr, "Unauthenticated") {
		t.Errorf("panic on without a server token = exit %d, stderr %q; want exit 1, Unauthenticated naming --admin-token-file", r.code, r.stderr)
	}
	if got := s.xdsTXT(); got != "xds=on" {
		t.Errorf("TXT _xds = %q, want xds=on", got)
	}
}

// TestBadTokenFileStops: an empty or missing token file is a start error
// naming the flag.
func TestBadTokenFileStops(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"empty": empty, "missing": filepath.Join(t.TempDir(), "missing")} {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, "--admin-token-file", path)
			s.startNoWait()
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("spillway still running with a bad --admin-token-file:\n%s", s.logs)
			}
			if code := s.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(s.logs.String(), "--admin-token-file") {
				t.Errorf("exit %d, logs:\n%s\nwant a failure naming --admin-token-file", code, s.logs)
			}
		})
	}
}

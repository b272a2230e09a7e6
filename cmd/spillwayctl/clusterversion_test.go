package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/replica/clusterversion"
	"github.com/spillway/spillway/replica/ownership"
	"github.com/spillway/spillway/security/webguard"
)

// liveMembers is a clusterversion.Members the test sets.
type liveMembers struct {
	mu sync.Mutex // guards ms
	ms []ownership.Member
}

func (l *liveMembers) Members() []ownership.Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ms
}

func (l *liveMembers) Settled() bool { return true }

// TestClusterVersionCommand drives spillwayctl cluster-version against
// the real handler, as spillway serves it: show (the version, the hold,
// each live member's max version and what finalisation waits for), hold
// and release with the admin token, the refusals and usage errors.
func TestClusterVersionCommand(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	defer kv.Close()
	v, err := clusterversion.New(clusterversion.Config{KV: kv, ID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	members := &liveMembers{ms: []ownership.Member{{ID: "r1", MaxVersion: 2, Identity: "spiffe://test/r1"}, {ID: "r2"}}}
	h := v.Handler(clusterversion.HandlerConfig{Members: members, Authorizer: adminAuditor{}})
	srv := httptest.NewServer(webguard.Handler(webguard.Config{}, tokenIdentity(h)))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	tests := []struct {
		name string
		args []string
		code int
		want []string // in stdout (code 0) or stderr
	}{
		{"show", nil, exitOK, []string{"cluster version 1 (revision 0)", "hold: off", "supports up to 2",
			"MEMBER  SUPPORTS  IDENTITY", "r1      2         spiffe://test/r1", "r2      1", "not finalised: version 2 waits for live members whose binary supports only an older version: r2 (supports 1)"}},
		{"holdNoToken", []string{"hold"}, exitError, []string{"permission denied: anonymous may not panic", "(HTTP 403)"}},
		{"hold", []string{"hold", "--token", testToken}, exitOK, []string{"cluster version 1 (revision 1)", "hold: on (changed by admin at", "not finalised: held by admin"}},
		{"showJSON", []string{"show", "-o", "json"}, exitOK, []string{`"hold":true`, `"hold_by":"admin"`, `"max_version":1`}},
		{"releaseStale", []string{"release", "--token", testToken, "--if-version", "7"}, exitError, []string{"revision 7 was read, the current one is 1", "(HTTP 412)"}},
		{"release", []string{"release", "--token", testToken, "--if-version", "1"}, exitOK, []string{"hold: off (changed by admin at"}},
		{"ifVersionOnShow", []string{"--if-version", "1"}, exitUsage, []string{"--if-version is for hold and release"}},
		{"badSub", []string{"finalise"}, exitUsage, []string{`want show, hold or release, got "finalise"`}},
		{"twoArgs", []string{"hold", "release"}, exitUsage, []string{"want show, hold or release, got 2 arguments"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"cluster-version", "--http", addr}, tt.args...)
			code := run(context.Background(), args, &stdout, &stderr)
			out := stdout.String()
			if code != exitOK {
				out = stderr.String()
			}
			for _, w := range tt.want {
				if code != tt.code || !strings.Contains(out, w) {
					t.Fatalf("spillwayctl %v = %d, stdout %q stderr %q; want %d with %q", args, code, stdout.String(), stderr.String(), tt.code, w)
				}
			}
		})
	}
	if st := v.State(); st.Hold || st.Rev != 2 {
		t.Errorf("state after the commands = %+v, want released at revision 2", st)
	}

	// Every member on this release, no hold: show says it finalises.
	members.mu.Lock()
	members.ms = members.ms[:1]
	members.mu.Unlock()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"cluster-version", "--http", addr}, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "finalising: the replicas raise it to 2") {
		t.Errorf("show with every member on this release = %d %q %q, want finalising", code, stdout.String(), stderr.String())
	}
}

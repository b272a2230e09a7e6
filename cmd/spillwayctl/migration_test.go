package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/migration/migrationapi"
	migrationv1 "github.com/spillway/spillway/migration/migrationv1"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

const testToken = "ctl-t0ken"

type fakeClients []string

func (f fakeClients) ClientServices() []string { return f }

// migrationStack is the migration API as cmd/spillway wires it, on a
// loopback gRPC port, with the admin token testToken.
type migrationStack struct {
	addr  string
	store *registry.Store
	ctrl  *migration.Controller
}

func startMigrationStack(t *testing.T) *migrationStack {
	t.Helper()
	store := registry.NewStore()
	for _, svc := range []string{"payments", "inventory"} {
		if _, err := store.Apply(registry.Declare(svc)); err != nil {
			t.Fatal(err)
		}
	}
	ctrl, err := migration.NewController(migration.ControllerConfig{Store: store, Storage: systemstore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := migrationapi.New(migrationapi.Config{Panic: ctrl, Rollout: ctrl, Clients: fakeClients{"checkout"}, Registry: store, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	a.RegisterGRPC(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return &migrationStack{addr: lis.Addr().String(), store: store, ctrl: ctrl}
}

func (s *migrationStack) flag() string {
	v, _ := s.store.Snapshot().Flag(registry.FlagXDS)
	return v
}

// TestCLIPanic flips the flag with and without the token, the token from
// the environment or from --token.
func TestCLIPanic(t *testing.T) {
	s := startMigrationStack(t)
	steps := []struct {
		name      string
		env       string // $SPILLWAY_ADMIN_TOKEN
		args      []string
		wantCode  int
		wantOut   string // substring of stdout
		wantErr   string // substring of stderr
		wantFlag  string // in the store afterwards; "" unset
		wantPanic bool
	}{
		{name: "status_fresh", args: []string{"panic", "status"}, wantOut: "panic off: TXT _xds says xds=on, eligible clients may use xDS (never changed)"},
		{name: "on_without_token", args: []string{"panic", "on"}, wantCode: exitError, wantErr: "no admin token", wantFlag: ""},
		{name: "on_wrong_env_token", env: "nope", args: []string{"panic", "on"}, wantCode: exitError, wantErr: "wrong admin token (PermissionDenied)"},
		{name: "on_wrong_flag_token_beats_env", env: testToken, args: []string{"panic", "on", "--token", "nope"}, wantCode: exitError, wantErr: "wrong admin token"},
		{name: "on", env: testToken, args: []string{"panic", "on"}, wantOut: "panic on: TXT _xds says xds=off, every client uses DNS (since ", wantFlag: "off", wantPanic: true},
		{name: "status_on", args: []string{"panic", "status"}, wantOut: "panic on: TXT _xds says xds=off", wantFlag: "off", wantPanic: true},
		{name: "off_flag_token", args: []string{"panic", "off", "--token", testToken}, wantOut: "panic off: TXT _xds says xds=on", wantFlag: "on"},
		{name: "bad_arg", args: []string{"panic", "maybe"}, wantCode: exitUsage, wantErr: `want on, off or status, got "maybe"`, wantFlag: "on"},
		{name: "no_arg", args: []string{"panic"}, wantCode: exitUsage, wantErr: "want on|off|status", wantFlag: "on"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			t.Setenv(tokenEnv, st.env)
			r := ctl(t, s.addr, st.args...)
			if r.code != st.wantCode || !strings.Contains(r.stdout, st.wantOut) || !strings.Contains(r.stderr, st.wantErr) {
				t.Errorf("spillwayctl %s = exit %d\nstdout: %s\nstderr: %s\nwant exit %d, stdout with %q, stderr with %q",
					strings.Join(st.args, " "), r.code, r.stdout, r.stderr, st.wantCode, st.wantOut, st.wantErr)
			}
			if f := s.flag(); f != st.wantFlag || s.ctrl.Panic().Panic != st.wantPanic {
				t.Errorf("store flag %q, panic %v; want %q, %v", f, s.ctrl.Panic().Panic, st.wantFlag, st.wantPanic)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		out := mustCtl(t, s.addr, "panic", "status", "-o", "json")
		var got migrationv1.PanicState
		if err := protojson.Unmarshal([]byte(out), &got); err != nil || got.GetXds() != "on" || got.GetChanged() == nil {
			t.Errorf("panic status -o json = %s (%v), want xds on with a change time", out, err)
		}
	})
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCLIRollout sets, shows and dry-runs rollout configs; an invalid one
// is refused naming the field and the old one stays.
func TestCLIRollout(t *testing.T) {
	s := startMigrationStack(t)
	t.Setenv(tokenEnv, testToken)
	good := "rules:\n  - name: pay\n    match: {service: payments}\n    percent: 100\n  - match: {tier: \"3\", region: us-east1}\n    percent: 10\n"
	goodFile := writeTemp(t, "good.yaml", good)
	badFile := writeTemp(t, "bad.yaml", "rules:\n  - match: {}\n    percent: 150\n")
	unknownFile := writeTemp(t, "unknown.yaml", "rules:\n  - percnt: 10\n")

	if out := mustCtl(t, s.addr, "rollout", "show"); !strings.Contains(out, "no rollout config set (version 0)") {
		t.Errorf("rollout show before any set = %q", out)
	}
	if out := mustCtl(t, s.addr, "rollout", "set", goodFile); out != "rollout config version 1, changed "+s.ctrl.Rollout().Changed.Format("2006-01-02T15:04:05Z07:00")+"\n"+
		"#  NAME  MATCH                   PERCENT\n"+
		"0  pay   service=payments        100\n"+
		"1  -     region=us-east1,tier=3  10\n" {
		t.Errorf("rollout set output:\n%s", out)
	}
	if out := mustCtl(t, s.addr, "rollout", "show", "-o", "yaml"); out != good {
		t.Errorf("rollout show -o yaml = %q, want the file as set %q", out, good)
	}

	failing := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"bad_percent", []string{"rollout", "set", badFile}, exitError, "rules[0].percent: 150 is not in 0..100 (InvalidArgument)"},
		{"unknown_field", []string{"rollout", "set", unknownFile}, exitError, "field percnt not found"},
		{"validate_bad_percent", []string{"rollout", "validate", badFile}, exitError, "rules[0].percent"},
		{"no_token", []string{"rollout", "set", goodFile, "--token", "wrong"}, exitError, "PermissionDenied"},
		{"missing_file", []string{"rollout", "set", filepath.Join(t.TempDir(), "nope.yaml")}, exitError, "nope.yaml"},
		{"no_subcommand", []string{"rollout"}, exitUsage, "want show, set FILE or validate FILE"},
		{"unknown_subcommand", []string{"rollout", "apply", goodFile}, exitUsage, `got "apply"`},
		{"show_with_file", []string{"rollout", "show", goodFile}, exitUsage, "show takes no argument"},
		{"set_without_file", []string{"rollout", "set"}, exitUsage, "set wants one FILE, got 0 arguments"},
		{"validate_yaml_output", []string{"rollout", "validate", goodFile, "-o", "yaml"}, exitUsage, "-o yaml: only for show"},
	}
	for _, tc := range failing {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, s.addr, tc.args...)
			if r.code != tc.wantCode || !strings.Contains(r.stderr, tc.wantErr) {
				t.Errorf("spillwayctl %s = exit %d, stderr %q; want exit %d with %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.wantCode, tc.wantErr)
			}
			if v := s.ctrl.Rollout(); v.Version != 1 || v.YAML != good {
				t.Errorf("config in force: version %d; want version 1, the old config", v.Version)
			}
		})
	}

	t.Run("validate", func(t *testing.T) {
		out := mustCtl(t, s.addr, "rollout", "validate", goodFile)
		got := table(out)
		want := [][]string{
			{"SERVICE", "BUCKET", "RULE", "ELIGIBLE"},
			{"checkout", strconv.Itoa(migration.Bucket("checkout")), "-", "no"},
			{"inventory", strconv.Itoa(migration.Bucket("inventory")), "-", "no"},
			{"payments", strconv.Itoa(migration.Bucket("payments")), "pay", "yes"},
			{},
			strings.Fields("2 rules; 1 of 3 known client services would be eligible for xDS; 2 match no rule."),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("rollout validate (-want +got):\n%s\n%s", diff, out)
		}
		unnamed := writeTemp(t, "unnamed.yaml", "rules:\n  - match: {}\n    percent: 100\n")
		if rows := table(mustCtl(t, s.addr, "rollout", "validate", unnamed)); rows[1][2] != "#0" || rows[1][3] != "yes" {
			t.Errorf("an unnamed rule: row %v, want RULE #0, ELIGIBLE yes", rows[1])
		}
		var resp migrationv1.ValidateRolloutResponse
		if err := protojson.Unmarshal([]byte(mustCtl(t, s.addr, "rollout", "validate", goodFile, "-o", "json")), &resp); err != nil || len(resp.GetDecisions()) != 3 {
			t.Errorf("rollout validate -o json: %v, %d decisions; want 3", err, len(resp.GetDecisions()))
		}
	})
}

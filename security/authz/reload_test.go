package authz

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/security/authn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReloaderKeepsOldOnBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authz.yaml")
	v1 := "identities:\n  - match: alice\n    allow: {panic: true}\n"
	writeFile(t, path, v1)
	reg := prometheus.NewRegistry()
	type reload struct{ old, new string }
	var reloads []reload
	r, err := NewReloader(ReloaderConfig{Path: path, Registerer: reg, OnReload: func(o, n string) { reloads = append(reloads, reload{o, n}) }})
	if err != nil {
		t.Fatal(err)
	}
	alice := authn.Identity{Name: "alice", Method: authn.Token}
	bob := authn.Identity{Name: "bob", Method: authn.Token}
	check := func(step string, wantAlice, wantBob bool, wantFailures float64) {
		t.Helper()
		p := r.Policy()
		if got := p.Allowed(alice, Panic, ""); got != wantAlice {
			t.Errorf("%s: alice panic = %v, want %v", step, got, wantAlice)
		}
		if got := p.Allowed(bob, Panic, ""); got != wantBob {
			t.Errorf("%s: bob panic = %v, want %v", step, got, wantBob)
		}
		if got := testutil.ToFloat64(r.failures); got != wantFailures {
			t.Errorf("%s: spillway_authz_reload_failures_total = %v, want %v", step, got, wantFailures)
		}
	}
	check("first", true, false, 0)
	if r.Check() {
		t.Error("Check of an unchanged file = true, want false")
	}

	writeFile(t, path, "identities:\n  - match: bob\n    allow: {panic: [x]}\n") // bad: list for a global action
	if r.Check() {
		t.Error("Check of a bad file = true, want false")
	}
	check("bad", true, false, 1)
	r.Check() // the same bad content is counted once
	check("bad_again", true, false, 1)

	os.Remove(path)
	r.Check()
	check("missing", true, false, 2)

	v2 := "identities:\n  - match: bob\n    allow: {panic: true}\n"
	writeFile(t, path, v2)
	if !r.Check() {
		t.Error("Check of a good new file = false, want true")
	}
	check("good", false, true, 2)
	if len(reloads) != 1 || reloads[0].old != v1 || reloads[0].new != v2 {
		t.Errorf("OnReload calls = %q, want one (v1, v2)", reloads)
	}
	if n, err := testutil.GatherAndCount(reg, "spillway_authz_reload_failures_total"); err != nil || n != 1 {
		t.Errorf("registered spillway_authz_reload_failures_total: %d series (%v), want 1", n, err)
	}
}

func TestReloaderBadFirstFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authz.yaml")
	writeFile(t, path, "identities:\n  - match: a\n    allow: {nope: true}\n")
	_, err := NewReloader(ReloaderConfig{Path: path})
	if err == nil || !strings.Contains(err.Error(), path+":3: identities[0].allow.nope: unknown action") {
		t.Errorf("NewReloader = %v, want the bad line named", err)
	}
	if _, err := NewReloader(ReloaderConfig{Path: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("NewReloader of a missing file = nil error, want one")
	}
}

// TestReloaderRun: Run picks a change up within one interval, and stops
// with its context.
func TestReloaderRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authz.yaml")
	writeFile(t, path, "default: {panic: false}\n")
	synctest.Test(t, func(t *testing.T) {
		r, err := NewReloader(ReloaderConfig{Path: path, Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		writeFile(t, path, "default: {panic: true}\n")
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if !r.Policy().Allowed(authn.Identity{}, Panic, "") {
			t.Error("policy after one interval does not have the new file")
		}
		cancel()
		<-done
	})
}

func TestReloaderDefaultAndOnDeny(t *testing.T) {
	var denied []*Denied
	r, err := NewReloader(ReloaderConfig{OnDeny: func(_ context.Context, d *Denied) { denied = append(denied, d) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Policy().Source() != "default" {
		t.Errorf("Source = %q, want default", r.Policy().Source())
	}
	ctx := context.Background()
	if err := r.Authorize(ctx, Register, "payments"); err != nil {
		t.Errorf("anonymous register under the default policy = %v, want allowed", err)
	}
	err = r.Authorize(ctx, Panic, "")
	if err == nil || err.Error() != "permission denied: anonymous may not panic" {
		t.Errorf("anonymous panic = %v, want denied", err)
	}
	if len(denied) != 1 || denied[0].Action != Panic {
		t.Errorf("OnDeny calls = %v, want one for panic", denied)
	}
	if err := r.Authorize(authn.NewContext(ctx, authn.Identity{Name: "admin", Method: authn.Token}), Panic, ""); err != nil {
		t.Errorf("admin panic = %v, want allowed", err)
	}
	if r.Check() {
		t.Error("Check without a file = true")
	}
	r.Run(ctx) // returns at once without a file
}

func TestToStatus(t *testing.T) {
	denied := &Denied{Identity: authn.Identity{Name: "x"}, Action: Register, Resource: "s"}
	unauth := &authn.Error{Field: "authorization", Reason: "unknown token"}
	tests := []struct {
		name     string
		err      error
		wantCode codes.Code
		wantMsg  string
	}{
		{"denied", denied, codes.PermissionDenied, "permission denied: x may not register s"},
		{"unauthenticated", unauth, codes.Unauthenticated, "authorization: unknown token"},
		{"other", os.ErrNotExist, codes.Unknown, "file does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(ToStatus(tt.err))
			if st.Code() != tt.wantCode || st.Message() != tt.wantMsg {
				t.Errorf("ToStatus = %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.wantMsg)
			}
		})
	}
	if ToStatus(nil) != nil {
		t.Error("ToStatus(nil) != nil")
	}
}

func TestWriteHTTPError(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantOK   bool
		wantCode int
		wantBody string
	}{
		{"denied", &Denied{Identity: authn.Identity{Name: "x"}, Action: Panic}, true, 403, `{"error":"permission denied: x may not panic","code":403}`},
		{"unauthenticated", &authn.Error{Field: "authorization", Reason: "unknown token"}, true, 401, `{"error":"authorization: unknown token","field":"authorization","code":401}`},
		{"other", os.ErrNotExist, false, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			ok := WriteHTTPError(w, tt.err)
			if ok != tt.wantOK || w.Code != tt.wantCode || strings.TrimSpace(w.Body.String()) != tt.wantBody {
				t.Errorf("WriteHTTPError = %v, %d %s; want %v, %d %s", ok, w.Code, w.Body, tt.wantOK, tt.wantCode, tt.wantBody)
			}
			if ok {
				var body map[string]any
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Header().Get("Content-Type") != "application/json" {
					t.Errorf("body %s (%v), content type %q, want JSON", w.Body, err, w.Header().Get("Content-Type"))
				}
			}
		})
	}
}

package settings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway/spillway/internal/strictyaml"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// note is the setting of the test kinds: one line of text.
type note struct{ Text string }

var (
	errInvalid = errors.New("invalid note")
	errNone    = errors.New("no note")
	errOwned   = errors.New("owned by a file")
	errTaken   = errors.New("taken")
)

// parseNote refuses a text with "bad" in it, naming field "text", and
// more than one line, naming field "lines".
func parseNote(file string, data []byte) (note, error) {
	s := string(data)
	switch {
	case strings.Contains(s, "bad"):
		return note{}, &strictyaml.Error{File: file, Line: 1, Field: "text", Msg: "bad", Kind: errInvalid}
	case strings.Count(strings.TrimSuffix(s, "\n"), "\n") > 0:
		return note{}, &strictyaml.Error{File: file, Line: 2, Field: "lines", Msg: "one line", Kind: errInvalid}
	}
	return note{Text: strings.TrimSpace(s)}, nil
}

// takenError is a kind's own error, answered by Kind.HTTPError.
type takenError struct{ field string }

func (e *takenError) Error() string { return e.field + ": " + errTaken.Error() }
func (e *takenError) Unwrap() error { return errTaken }

// kinds: "filed" has tombstones and a directory, as the per-service
// config; "plain" neither, as the route rules.
func filedKind() Kind[note] {
	return Kind[note]{
		Name: "filed", Noun: "filed note", Prefix: "filed/", Path: "/v1/filed", Parse: parseNote,
		Action: authz.Config, ErrInvalid: errInvalid, ErrNotFound: errNone, ErrOwnedByFile: errOwned,
		Tombstone: time.Hour, Sources: true, Disabled: "filed changes are disabled",
	}
}

func plainKind() Kind[note] {
	return Kind[note]{
		Name: "plain", Noun: "plain note", Prefix: "plain/", Path: "/v1/plain", Parse: parseNote, MaxBody: 16,
		Action: authz.Routes, ErrInvalid: errInvalid, ErrNotFound: errNone, AuditNormalized: true,
		Disabled: "plain changes are disabled",
		HTTPError: func(err error) (int, string, bool) {
			if te, ok := errors.AsType[*takenError](err); ok {
				return http.StatusConflict, te.field, true
			}
			return 0, "", false
		},
	}
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestNewChecks: New refuses a kind or config missing what it needs,
// naming the field.
func TestNewChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Kind[note], *Config[note])
		want string
	}{
		{"ok", func(*Kind[note], *Config[note]) {}, ""},
		{"noName", func(k *Kind[note], _ *Config[note]) { k.Name = "" }, "settings: Kind.Name is required"},
		{"noNoun", func(k *Kind[note], _ *Config[note]) { k.Noun = "" }, "filed: Kind.Noun is required"},
		{"noParse", func(k *Kind[note], _ *Config[note]) { k.Parse = nil }, "filed: Kind.Parse is required"},
		{"noAction", func(k *Kind[note], _ *Config[note]) { k.Action = "" }, "filed: Kind.Action is required"},
		{"noInvalid", func(k *Kind[note], _ *Config[note]) { k.ErrInvalid = nil }, "filed: Kind.ErrInvalid is required"},
		{"noNotFound", func(k *Kind[note], _ *Config[note]) { k.ErrNotFound = nil }, "filed: Kind.ErrNotFound is required"},
		{"negativeKindTombstone", func(k *Kind[note], _ *Config[note]) { k.Tombstone = -1 }, "filed: Kind.Tombstone: -1ns is negative"},
		{"ownedWithoutSources", func(k *Kind[note], _ *Config[note]) { k.Sources = false }, "filed: Kind.ErrOwnedByFile:"},
		{"noPrefix", func(k *Kind[note], _ *Config[note]) { k.Prefix = "" }, "filed: Kind.Prefix is required"},
		{"badPrefix", func(k *Kind[note], _ *Config[note]) { k.Prefix = "a b/" }, "filed: prefix:"},
		{"negativeTombstone", func(_ *Kind[note], c *Config[note]) { c.Tombstone = -time.Second }, "filed: Tombstone: -1s is negative"},
		{"tombstoneWithoutTombstones", func(k *Kind[note], c *Config[note]) { k.Tombstone = 0; c.Tombstone = time.Second }, "filed: Tombstone: 1s, but filed note has no tombstones"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, c := filedKind(), Config[note]{}
			tc.edit(&k, &c)
			_, err := New(k, c)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error starting %q", err, tc.want)
			}
		})
	}
}

// TestLifecycle: set, delete, undelete and the end of a tombstone, for a
// kind with tombstones and one without.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	type step struct {
		name    string
		do      func(s *Store[note], c *clock) error
		wantErr error
		// what Get("cart") then says
		text    string
		ok      bool
		deleted bool
	}
	set := func(text string) func(*Store[note], *clock) error {
		return func(s *Store[note], _ *clock) error {
			_, err := s.Set(ctx, "Cart", []byte(text), SourceAPI, "")
			return err
		}
	}
	del := func(s *Store[note], _ *clock) error { _, err := s.Delete(ctx, "cart", SourceAPI); return err }
	undel := func(s *Store[note], _ *clock) error { _, err := s.Undelete(ctx, "cart"); return err }
	wait := func(d time.Duration) func(*Store[note], *clock) error {
		return func(_ *Store[note], c *clock) error { c.add(d); return nil }
	}
	sweep := func(s *Store[note], _ *clock) error { return s.Sweep(ctx) }
	for _, tc := range []struct {
		kind  Kind[note]
		steps []step
	}{
		{filedKind(), []step{
			{name: "set", do: set("hello"), text: "hello", ok: true},
			{name: "badName", do: func(s *Store[note], _ *clock) error {
				_, err := s.Set(ctx, "Bad_Name", []byte("x"), SourceAPI, "")
				return err
			}, wantErr: errInvalid, text: "hello", ok: true},
			{name: "badText", do: set("bad"), wantErr: errInvalid, text: "hello", ok: true},
			{name: "delete", do: del, text: "hello", ok: true, deleted: true},
			{name: "deleteAgain", do: del, text: "hello", ok: true, deleted: true},
			{name: "undelete", do: undel, text: "hello", ok: true},
			{name: "undeleteLive", do: undel, wantErr: errNone, text: "hello", ok: true},
			{name: "deleteToExpire", do: del, text: "hello", ok: true, deleted: true},
			{name: "expire", do: wait(time.Hour)},
			{name: "undeleteExpired", do: undel, wantErr: errNone},
			{name: "sweep", do: sweep},
			{name: "deleteNone", do: del, wantErr: errNone},
		}},
		{plainKind(), []step{
			{name: "set", do: set("hello"), text: "hello", ok: true},
			{name: "badText", do: set("bad"), wantErr: errInvalid, text: "hello", ok: true},
			{name: "delete", do: del},
			{name: "deleteAgain", do: del, wantErr: errNone},
			{name: "undelete", do: undel, wantErr: errNone},
			{name: "sweep", do: sweep},
		}},
	} {
		t.Run(tc.kind.Name, func(t *testing.T) {
			c := &clock{t: t0}
			s, err := New(tc.kind, Config[note]{KV: systemstoretest.NewMemKV(), Now: c.now})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range tc.steps {
				err := st.do(s, c)
				if !errors.Is(err, st.wantErr) || (err != nil) != (st.wantErr != nil) {
					t.Fatalf("%s: err = %v, want %v", st.name, err, st.wantErr)
				}
				v, status, ok := s.Get("cart")
				if v.Text != st.text || ok != st.ok || status.Deleted != st.deleted {
					t.Fatalf("%s: Get = %q %+v %v, want %q ok %v deleted %v", st.name, v.Text, status, ok, st.text, st.ok, st.deleted)
				}
			}
			if got := s.Services(); len(got) != 0 {
				t.Errorf("at the end Services = %v, want none", got)
			}
		})
	}
}

// TestRecords: what each kind writes to the KV, byte for byte: the
// source always with Sources (as the per-service config's records were),
// neither source nor file without (as the route rules' were), deleted_at
// only for a tombstone.
func TestRecords(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		kind   Kind[note]
		do     func(s *Store[note], c *clock) error
		record string // "" for no key
	}{
		{"filedAPI", filedKind(), func(s *Store[note], _ *clock) error {
			_, err := s.Set(ctx, "cart", []byte("hi"), SourceAPI, "")
			return err
		},
			`{"yaml":"hi","source":"api","updated_at":"2026-01-01T00:00:00Z"}`},
		{"filedNoSource", filedKind(), func(s *Store[note], _ *clock) error { _, err := s.Set(ctx, "cart", []byte("hi"), "", ""); return err },
			`{"yaml":"hi","source":"","updated_at":"2026-01-01T00:00:00Z"}`},
		{"filedTombstone", filedKind(), func(s *Store[note], c *clock) error {
			if _, err := s.Set(ctx, "cart", []byte("hi"), SourceDir, "cart.yaml"); err != nil {
				return err
			}
			c.add(time.Minute)
			_, err := s.Delete(ctx, "cart", SourceDir)
			return err
		}, `{"yaml":"hi","source":"dir","file":"cart.yaml","updated_at":"2026-01-01T00:00:00Z","deleted_at":"2026-01-01T00:01:00Z"}`},
		{"plain", plainKind(), func(s *Store[note], _ *clock) error {
			_, err := s.Set(ctx, "cart", []byte("hi"), SourceDir, "cart.yaml")
			return err
		},
			`{"yaml":"hi","updated_at":"2026-01-01T00:00:00Z"}`},
		{"plainDelete", plainKind(), func(s *Store[note], _ *clock) error {
			if _, err := s.Set(ctx, "cart", []byte("hi"), SourceAPI, ""); err != nil {
				return err
			}
			_, err := s.Delete(ctx, "cart", SourceAPI)
			return err
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := systemstoretest.NewMemKV()
			c := &clock{t: t0}
			s, _ := New(tc.kind, Config[note]{KV: kv, Now: c.now})
			if err := tc.do(s, c); err != nil {
				t.Fatal(err)
			}
			got, _, err := kv.Get(ctx, tc.kind.Prefix+"cart")
			if tc.record == "" {
				if !errors.Is(err, systemstore.ErrNotFound) {
					t.Fatalf("key: %s %v, want none", got, err)
				}
				return
			}
			if err != nil || string(got) != tc.record {
				t.Fatalf("record = %s %v, want %s", got, err, tc.record)
			}
			// Read back by a fresh store (another replica), unknown
			// fields ignored as every release does.
			extra := strings.Replace(tc.record, `{"yaml"`, `{"later":1,"yaml"`, 1)
			kv2 := systemstoretest.NewMemKV()
			kv2.Put(ctx, tc.kind.Prefix+"cart", []byte(extra))
			s2, _ := New(tc.kind, Config[note]{KV: kv2, Now: c.now})
			if _, err := s2.Init(ctx); err != nil {
				t.Fatal(err)
			}
			_, want, _ := s.Get("cart")
			_, back, ok := s2.Get("cart")
			if d := cmp.Diff(want, back, cmpopts.IgnoreFields(Status{}, "Version")); !ok || d != "" {
				t.Errorf("read back (-want +got) ok %v:\n%s", ok, d)
			}
		})
	}
}

type recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (r *recorder) Record(ctx context.Context, e audit.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Identity = authn.FromContext(ctx).Name
	r.entries = append(r.entries, e)
}

// TestAudit: every change and refused change is recorded with the kind's
// action, the old and new text (a tombstone marked), and the service as
// given or normalised as the kind says.
func TestAudit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		kind Kind[note]
		want []audit.Entry
	}{
		{filedKind(), []audit.Entry{
			{Action: "config", Resource: "Cart", Outcome: "allowed", Reason: "put", New: "one"},
			{Action: "config", Resource: "Cart", Outcome: "failed", Reason: "put: body:1: text: bad", Old: "one", New: "bad"},
			{Action: "config", Resource: "cart", Outcome: "allowed", Reason: "delete", Old: "one", New: "one" + DeletedMark},
			{Action: "config", Resource: "cart", Outcome: "allowed", Reason: "undelete", Old: "one" + DeletedMark, New: "one"},
			{Action: "config", Resource: "Bad_Name", Outcome: "failed", Reason: "delete: invalid note: service: " + badNameMsg(t)},
		}},
		{plainKind(), []audit.Entry{
			{Action: "routes", Resource: "cart", Outcome: "allowed", Reason: "put", New: "one"},
			{Action: "routes", Resource: "cart", Outcome: "failed", Reason: "put: body:1: text: bad", Old: "one", New: "bad"},
			{Action: "routes", Resource: "cart", Outcome: "allowed", Reason: "delete", Old: "one"},
			{Action: "routes", Resource: "cart", Outcome: "failed", Reason: "undelete: service cart: no note deleted to bring back"},
			{Action: "routes", Resource: "bad_name", Outcome: "failed", Reason: "delete: invalid note: service: " + badNameMsg(t)},
		}},
	} {
		t.Run(tc.kind.Name, func(t *testing.T) {
			rec := &recorder{}
			s, _ := New(tc.kind, Config[note]{Audit: rec})
			s.Set(ctx, "Cart", []byte("one"), SourceAPI, "")
			s.Set(ctx, "Cart", []byte("bad"), SourceAPI, "")
			s.Delete(ctx, "cart", SourceAPI)
			s.Undelete(ctx, "cart")
			s.Delete(ctx, "Bad_Name", SourceAPI)
			if d := cmp.Diff(tc.want, rec.entries); d != "" {
				t.Errorf("audit entries (-want +got):\n%s", d)
			}
		})
	}
}

func badNameMsg(t *testing.T) string {
	s, _ := New(plainKind(), Config[note]{})
	_, err := s.CheckService("Bad_Name")
	msg, ok := strings.CutPrefix(fmt.Sprint(err), "invalid note: service: ")
	if !ok {
		t.Fatalf("CheckService(Bad_Name) = %v", err)
	}
	return msg
}

// allowCart is a hand fake of a policy: only identity "cart" may change,
// and only its own setting.
type allowCart struct{}

func (allowCart) Authorize(ctx context.Context, a authz.Action, resource string) error {
	if id := authn.FromContext(ctx); id.Name == resource {
		return nil
	}
	return fmt.Errorf("permission denied: %s may not %s %s", authn.FromContext(ctx), a, resource)
}

// TestHandler: the API skeleton over both kinds: reads, changes and their
// refusals, each answered with the status and field the mechanism
// promises.
func TestHandler(t *testing.T) {
	ctx := context.Background()
	type req struct {
		name, method, path, as, body string
		code                         int
		want                         string // in the body
	}
	for _, tc := range []struct {
		kind Kind[note]
		reqs []req
	}{
		{filedKind(), []req{
			{"getNone", "GET", "/v1/filed/cart", "", "", 200, `{"service":"cart","text":""}`},
			{"putAnonymous", "PUT", "/v1/filed/cart", "", "hi", 403, `"error":"permission denied: anonymous may not config cart"`},
			{"putBadField", "PUT", "/v1/filed/cart", "cart", "bad", 400, `"field":"text"`},
			{"putBadName", "PUT", "/v1/filed/Bad_Name", "Bad_Name", "hi", 400, `"field":"service"`},
			{"put", "PUT", "/v1/filed/cart", "cart", "hi", 200, `{"service":"cart","text":"hi","put":true}`},
			{"putOwned", "PUT", "/v1/filed/owned", "owned", "hi", 409, "(owned.yaml); edit the file instead"},
			{"putTooBig", "PUT", "/v1/filed/cart", "cart", strings.Repeat("x", 64<<10+1), 400, "body: http: request body too large"},
			{"get", "GET", "/v1/filed/CART", "", "", 200, `{"service":"cart","text":"hi"}`},
			{"delete", "DELETE", "/v1/filed/cart", "cart", "", 200, `{"service":"cart","text":"hi"}`},
			{"undelete", "POST", "/v1/filed/cart/undelete", "cart", "", 200, `{"service":"cart","text":"hi"}`},
			{"undeleteLive", "POST", "/v1/filed/cart/undelete", "cart", "", 404, "service cart: no note deleted to bring back"},
			{"list", "GET", "/v1/filed", "", "", 200, `[{"service":"cart","text":"hi"},{"service":"owned","text":"file"}]`},
		}},
		{plainKind(), []req{
			{"putNoAuth", "PUT", "/v1/plain/cart", "nobody", "hi", 403, `"error":"plain changes are disabled"`},
			{"put", "PUT", "/v1/plain/cart", "cart", "hi", 200, `"text":"hi"`},
			{"putTaken", "PUT", "/v1/plain/cart", "cart", "taken", 409, `"field":"to"`},
			{"putTooBig", "PUT", "/v1/plain/cart", "cart", strings.Repeat("x", 17), 400, "request body too large"},
			{"undelete", "POST", "/v1/plain/cart/undelete", "cart", "", 404, "404 page not found"},
			{"delete", "DELETE", "/v1/plain/cart", "cart", "", 200, `{"service":"cart","text":""}`},
			{"deleteNone", "DELETE", "/v1/plain/cart", "cart", "", 404, "service cart: no note"},
			{"list", "GET", "/v1/plain", "", "", 200, `[]`},
			{"down", "PUT", "/v1/plain/cart", "cart", "hi", 503, "plain: store cart:"},
		}},
	} {
		t.Run(tc.kind.Name, func(t *testing.T) {
			kv := systemstoretest.NewMemKV()
			var check func(string, string, note) error
			if !tc.kind.Sources {
				check = func(_, _ string, n note) error {
					if n.Text == "taken" {
						return &takenError{field: "to"}
					}
					return nil
				}
			}
			s, _ := New(tc.kind, Config[note]{KV: kv, Check: check})
			if tc.kind.Sources {
				if _, err := s.Set(ctx, "owned", []byte("file"), SourceDir, "owned.yaml"); err != nil {
					t.Fatal(err)
				}
			}
			view := func(svc string) any {
				v, _, _ := s.Get(svc)
				return map[string]string{"service": svc, "text": v.Text}
			}
			hc := HandlerConfig{View: view, PutView: func(svc string) any {
				v, _, _ := s.Get(svc)
				return struct {
					Service string `json:"service"`
					Text    string `json:"text"`
					Put     bool   `json:"put"`
				}{svc, v.Text, true}
			}}
			serve := func(h http.Handler) *httptest.Server {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if id := r.Header.Get("X-As"); id != "" {
						r = r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: id, Method: authn.Token}))
					}
					h.ServeHTTP(w, r)
				}))
				t.Cleanup(srv.Close)
				return srv
			}
			closed := serve(s.Handler(hc)) // no Auth: every change refused
			hc.Auth = s.PolicyAuth(allowCart{}, nil)
			open := serve(s.Handler(hc))
			for _, r := range tc.reqs {
				srv := open
				switch r.name {
				case "putNoAuth":
					srv = closed
				case "down":
					kv.Down.Store(true)
				}
				code, body := call(t, srv.URL, r.method, r.path, r.as, r.body)
				if code != r.code || !strings.Contains(body, r.want) {
					t.Errorf("%s: %s %s = %d %s, want %d containing %s", r.name, r.method, r.path, code, body, r.code, r.want)
				}
			}
		})
	}
}

func call(t *testing.T, url, method, path, as, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	if as != "" {
		req.Header.Set("X-As", as)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestTokenAuth: without a token changes are disabled; without the
// header 401; a wrong token 403; the right one goes through and is
// logged.
func TestTokenAuth(t *testing.T) {
	s, _ := New(filedKind(), Config[note]{})
	var logged []string
	var mu sync.Mutex
	logf := func(msg string, _ ...any) { mu.Lock(); logged = append(logged, msg); mu.Unlock() }
	view := func(svc string) any { return svc }
	for _, tc := range []struct {
		name, token, header string
		code                int
		want                string
	}{
		{"disabled", "", "Bearer x", 403, "changes are disabled: start spillway with --admin-token-file FILE"},
		{"noHeader", "s3cret", "", 401, "no admin token"},
		{"notBearer", "s3cret", "Basic s3cret", 401, "no admin token"},
		{"wrong", "s3cret", "Bearer nope", 403, "wrong admin token"},
		{"right", "s3cret", "bearer s3cret", 200, `"cart"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(s.Handler(HandlerConfig{Auth: s.TokenAuth(tc.token, logf), View: view}))
			defer srv.Close()
			req, _ := http.NewRequest("PUT", srv.URL+"/v1/filed/cart", strings.NewReader("hi"))
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
				t.Fatalf("PUT = %d %s, want %d containing %s", resp.StatusCode, b, tc.code, tc.want)
			}
		})
	}
	if d := cmp.Diff([]string{"filed note change requested"}, logged); d != "" {
		t.Errorf("logged (-want +got):\n%s", d)
	}
}

// TestDir: a directory's files set their services (audited as the file),
// a bad file keeps the previous setting, a removed file tombstones it; a
// kind without sources takes no directory.
func TestDir(t *testing.T) {
	ctx := context.Background()
	if _, err := NewDir(DirConfig[note]{Path: t.TempDir(), Store: mustNew(t, plainKind(), Config[note]{})}); err == nil || !strings.Contains(err.Error(), "no source") {
		t.Errorf("NewDir over a kind without Sources = %v, want a refusal", err)
	}
	rec := &recorder{}
	s := mustNew(t, filedKind(), Config[note]{Audit: rec})
	dir := t.TempDir()
	d, err := NewDir(DirConfig[note]{Path: dir, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cart.yaml", "one")
	write("Bad_Name.yaml", "one")
	write(".hidden.yaml", "bad")
	write("notes.txt", "bad")
	err = d.Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "Bad_Name.yaml: file name") || !errors.Is(err, errInvalid) || d.Failures() != 1 {
		t.Fatalf("Load = %v, failures %d; want Bad_Name.yaml refused once", err, d.Failures())
	}
	os.Remove(filepath.Join(dir, "Bad_Name.yaml"))
	if _, err := s.Set(ctx, "cart", []byte("api"), SourceAPI, ""); !errors.Is(err, errOwned) {
		t.Errorf("API Set of a file's service = %v, want errOwned", err)
	}
	write("cart.yaml", "bad")
	if err := d.Load(ctx); err == nil || !strings.Contains(err.Error(), "cart.yaml:1: text: bad") {
		t.Errorf("Load of a bad file = %v, want cart.yaml:1: text: bad", err)
	}
	if v, st, _ := s.Get("cart"); v.Text != "one" || st.Source != SourceDir || st.File != "cart.yaml" {
		t.Errorf("after a bad file: %q %+v, want the previous one from cart.yaml", v.Text, st)
	}
	os.Remove(filepath.Join(dir, "cart.yaml"))
	if err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if v, st, ok := s.Get("cart"); !ok || !st.Deleted || v.Text != "one" {
		t.Errorf("after the file is removed: %q %+v %v, want a tombstone that applies", v.Text, st, ok)
	}
	file := "file:" + filepath.Join(dir, "cart.yaml")
	var who []string
	for _, e := range rec.entries {
		who = append(who, e.Identity+" "+e.Outcome+" "+e.Reason)
	}
	want := []string{file + " allowed put", " failed put: service cart: owned by a file (cart.yaml); edit the file instead", file + " failed put: cart.yaml:1: text: bad", file + " allowed delete"}
	if d := cmp.Diff(want, who); d != "" {
		t.Errorf("audit (-want +got):\n%s", d)
	}
}

func mustNew(t *testing.T, k Kind[note], c Config[note]) *Store[note] {
	t.Helper()
	s, err := New(k, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDirRun: a real fsnotify watch applies an edit in one reload.
func TestDirRun(t *testing.T) {
	s := mustNew(t, filedKind(), Config[note]{})
	dir := t.TempDir()
	reloads := make(chan error, 100)
	d, _ := NewDir(DirConfig[note]{Path: dir, Store: s, Reloaded: func(err error) { reloads <- err }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-reloads
	changed := s.Changed()
	os.WriteFile(filepath.Join(dir, "search.yaml"), []byte("found"), 0o644)
	<-changed
	if v, _, ok := s.Get("search"); !ok || v.Text != "found" {
		t.Fatalf("Get = %+v %v, want found", v, ok)
	}
}

// TestReplicas: two Stores on one KV see each other's changes through
// Run, tombstones included.
func TestReplicas(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	a := mustNew(t, filedKind(), Config[note]{KV: kv})
	b := mustNew(t, filedKind(), Config[note]{KV: kv})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range []*Store[note]{a, b} {
		if _, err := s.Init(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { s.Run(ctx, 0) })
	}
	defer func() { cancel(); wg.Wait() }()
	for _, step := range []struct {
		name  string
		from  *Store[note]
		do    func(*Store[note]) error
		check func(note, Status, bool) bool
	}{
		{"set", a, func(s *Store[note]) error { _, err := s.Set(ctx, "cart", []byte("x"), SourceAPI, ""); return err },
			func(v note, _ Status, ok bool) bool { return ok && v.Text == "x" }},
		{"delete", a, func(s *Store[note]) error { _, err := s.Delete(ctx, "cart", SourceAPI); return err },
			func(_ note, st Status, ok bool) bool { return ok && st.Deleted }},
		{"undelete", a, func(s *Store[note]) error { _, err := s.Undelete(ctx, "cart"); return err },
			func(_ note, st Status, ok bool) bool { return ok && !st.Deleted }},
	} {
		ch := b.Changed()
		if err := step.do(step.from); err != nil {
			t.Fatal(err)
		}
		// Liveness bound only: a broken watch fails instead of hanging.
		deadline := time.After(30 * time.Second)
		for !step.check(b.Get("cart")) {
			select {
			case <-ch:
				ch = b.Changed()
			case <-deadline:
				t.Fatalf("%s: the other store never saw it", step.name)
			}
		}
	}
}

// TestRunSweeps: Run sweeps a tombstone that ran out, on its own.
func TestRunSweeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustNew(t, filedKind(), Config[note]{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx, time.Minute); close(done) }()
		defer func() { cancel(); <-done }()
		s.Set(ctx, "cart", []byte("x"), SourceAPI, "")
		s.Delete(ctx, "cart", SourceAPI)
		time.Sleep(59 * time.Minute)
		synctest.Wait()
		if _, st, ok := s.Get("cart"); !ok || !st.Deleted {
			t.Fatalf("before expiry: %+v %v, want the tombstone", st, ok)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got := s.Services(); len(got) != 0 {
			t.Fatalf("after expiry Services = %v, want the record swept", got)
		}
	})
}

// TestServiceFromFile: a file names its service.
func TestServiceFromFile(t *testing.T) {
	k := filedKind()
	for _, tc := range []struct{ path, want, err string }{
		{"/etc/x/payments.prod.yaml", "payments.prod", ""},
		{"pay_ments.yaml", "", "pay_ments.yaml: file name: "},
		{"x.yml", "", "x.yml: file name: want SERVICE.yaml: invalid note"},
		{".yaml", "", ".yaml: file name: "},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got, err := k.ServiceFromFile(tc.path)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ServiceFromFile = %q, %v, want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) || !errors.Is(err, errInvalid) {
				t.Fatalf("ServiceFromFile = %q, %v, want an errInvalid starting %q", got, err, tc.err)
			}
		})
	}
}

// FuzzServiceFromFile: a name is taken only as SERVICE.yaml with a valid
// service; every refusal wraps ErrInvalid.
func FuzzServiceFromFile(f *testing.F) {
	for _, s := range []string{"payments.yaml", "a/b/payments.prod.yaml", "x.yml", ".yaml", "Bad_Name.yaml", "..data"} {
		f.Add(s)
	}
	k := filedKind()
	s := mustNewF(f)
	f.Fuzz(func(t *testing.T, path string) {
		svc, err := k.ServiceFromFile(path)
		if err != nil {
			if !errors.Is(err, errInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if filepath.Base(path) != svc+".yaml" {
			t.Fatalf("%q: service %q is not the base name", path, svc)
		}
		if _, err := s.CheckService(svc); err != nil {
			t.Fatalf("%q: service %q fails CheckService: %v", path, svc, err)
		}
	})
}

func mustNewF(f *testing.F) *Store[note] {
	s, err := New(filedKind(), Config[note]{})
	if err != nil {
		f.Fatal(err)
	}
	return s
}

package routing

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authz"
)

const example = `rules:
  - name: synthetic
    match:
      headers:
        - {name: x-traffic-class, exact: synthetic}
      path_prefix: /payments.v1.Payments/
    to: payments-synthetic
  - name: canary
    match: {}
    split:
      - {to: payments, weight: 90}
      - {to: payments-canary, weight: 10}
`

func TestParse(t *testing.T) {
	r, err := Parse("f.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	want := Rules{Rules: []Rule{
		{Name: "synthetic", Match: Match{Headers: []HeaderMatch{{Name: "x-traffic-class", Exact: "synthetic", kind: "exact"}}, PathPrefix: "/payments.v1.Payments/"}, To: "payments-synthetic"},
		{Name: "canary", Split: []Target{{To: "payments", Weight: 90}, {To: "payments-canary", Weight: 10}}},
	}}
	if d := cmp.Diff(want, r, cmp.AllowUnexported(HeaderMatch{}), cmpopts.IgnoreFields(HeaderMatch{}, "re")); d != "" {
		t.Errorf("Parse (-want +got):\n%s", d)
	}
	for _, empty := range []string{"", "\n", "~", "rules: []", "rules:"} {
		if r, err := Parse("f", []byte(empty)); err != nil || len(r.Rules) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no rules", empty, r, err)
		}
	}
}

// TestParseErrors: each bad input is refused with the file, the line and
// the field named.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"unknown_top", "rulez: []", "f:1: rulez: unknown field"},
		{"unknown_rule_field", "rules:\n  - to: a\n    weight: 3", "f:3: rules[0].weight: unknown field"},
		{"unknown_match_field", "rules:\n  - to: a\n    match: {method: x}", "f:3: rules[0].match.method: unknown field"},
		{"unknown_header_field", "rules:\n  - to: a\n    match:\n      headers: [{name: x, suffix: y}]", "rules[0].match.headers[0].suffix: unknown field"},
		{"missing_target", "rules:\n  - name: a\n    match: {}", "f:2: rules[0].to: missing"},
		{"both_targets", "rules:\n  - to: a\n    split: [{to: b, weight: 1}]", "rules[0].split: set with to"},
		{"split_sum_zero", "rules:\n  - split:\n      - {to: a, weight: 0}\n      - {to: b, weight: 0}", "f:3: rules[0].split: the weights sum to 0"},
		{"split_sum_overflow", "rules:\n  - split:\n      - {to: a, weight: 4294967295}\n      - {to: b, weight: 1}", "rules[0].split: the weights sum to 4294967296"},
		{"split_weight_negative", "rules:\n  - split: [{to: a, weight: -1}]", "rules[0].split[0].weight"},
		{"split_weight_float", "rules:\n  - split: [{to: a, weight: 1.5}]", "rules[0].split[0].weight: want an integer"},
		{"split_weight_missing", "rules:\n  - split: [{to: a}]", "rules[0].split[0].weight: missing"},
		{"split_to_missing", "rules:\n  - split: [{weight: 1}]", "rules[0].split[0].to: missing"},
		{"split_empty", "rules:\n  - split: []", "rules[0].split: empty"},
		{"split_dup", "rules:\n  - split: [{to: a, weight: 1}, {to: a, weight: 2}]", "rules[0].split[1].to: a is also"},
		{"bad_service", "rules:\n  - to: Not_A_Service!", "rules[0].to:"},
		{"bad_default", "default: -x-", "default:"},
		{"dup_name", "rules:\n  - {name: a, to: x}\n  - {name: a, to: y}", "f:3: rules[1].name: \"a\" is also rules[0]'s"},
		{"bad_name", "rules:\n  - {name: A B, to: x}", "rules[0].name:"},
		{"header_no_condition", "rules:\n  - to: a\n    match:\n      headers: [{name: x}]", "rules[0].match.headers[0]: no condition"},
		{"header_two_conditions", "rules:\n  - to: a\n    match:\n      headers: [{name: x, exact: a, prefix: b}]", "rules[0].match.headers[0].prefix: set with exact"},
		{"header_name_missing", "rules:\n  - to: a\n    match:\n      headers: [{exact: a}]", "rules[0].match.headers[0].name: missing"},
		{"header_uppercase", "rules:\n  - to: a\n    match:\n      headers: [{name: X-Class, exact: a}]", "rules[0].match.headers[0].name: \"X-Class\""},
		{"header_bin", "rules:\n  - to: a\n    match:\n      headers: [{name: x-bin, present: true}]", "never matches binary"},
		{"header_grpc", "rules:\n  - to: a\n    match:\n      headers: [{name: grpc-timeout, present: true}]", "reserved"},
		{"header_present_false", "rules:\n  - to: a\n    match:\n      headers: [{name: x, present: false}]", "rules[0].match.headers[0].present: want true"},
		{"header_prefix_empty", "rules:\n  - to: a\n    match:\n      headers: [{name: x, prefix: \"\"}]", "rules[0].match.headers[0].prefix: empty"},
		{"header_regex_bad", "rules:\n  - to: a\n    match:\n      headers: [{name: x, regex: \"([\"}]", "rules[0].match.headers[0].regex: \"([\" is not RE2"},
		{"header_regex_lookahead", "rules:\n  - to: a\n    match:\n      headers: [{name: x, regex: \"(?=a)\"}]", "is not RE2"},
		{"path_prefix_no_slash", "rules:\n  - to: a\n    match: {path_prefix: payments}", "rules[0].match.path_prefix:"},
		{"rules_not_list", "rules: {to: a}", "f:1: rules: want a list"},
		{"to_not_string", "rules:\n  - to: [a]", "rules[0].to: want a string"},
		{"two_documents", "rules: []\n---\nrules: []", "more than one YAML document"},
		{"malformed", "rules: [", "malformed YAML"},
		{"alias", "x: &a {to: b}\nrules: [*a]", "x: unknown field"},
		{"alias_value", "rules:\n  - &a {to: b}\n  - name: c\n    to: *a", "aliases are not supported"},
		{"too_big", "rules: []\n" + strings.Repeat("#", MaxBytes), "over the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f", []byte(tc.in))
			if err == nil {
				t.Fatalf("Parse accepted %q", tc.in)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want it to wrap ErrInvalid", err)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Errorf("err = %T, want *Error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPick(t *testing.T) {
	r, err := Parse("f", []byte(`rules:
  - name: synthetic
    match:
      headers: [{name: x-traffic-class, exact: synthetic}]
    to: a
  - name: team
    match:
      headers:
        - {name: x-team, prefix: ml-}
        - {name: x-shard, regex: "[0-9]+"}
      path_prefix: /pay.v1.Pay/
    to: b
  - name: traced
    match:
      headers: [{name: x-trace, present: true}]
    to: c
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  Request
		want int
	}{
		{"none", Request{Path: "/x.Y/Z"}, -1},
		{"exact", Request{Path: "/x.Y/Z", Headers: map[string]string{"x-traffic-class": "synthetic"}}, 0},
		{"exact_other_value", Request{Path: "/x.Y/Z", Headers: map[string]string{"x-traffic-class": "synthetic2"}}, -1},
		{"prefix_and_regex", Request{Path: "/pay.v1.Pay/Charge", Headers: map[string]string{"x-team": "ml-train", "x-shard": "12"}}, 1},
		{"regex_is_anchored", Request{Path: "/pay.v1.Pay/Charge", Headers: map[string]string{"x-team": "ml-train", "x-shard": "12a"}}, -1},
		{"wrong_path", Request{Path: "/other.v1.Pay/Charge", Headers: map[string]string{"x-team": "ml-train", "x-shard": "1"}}, -1},
		{"present_empty_value", Request{Path: "/", Headers: map[string]string{"x-trace": ""}}, 2},
		{"first_rule_wins", Request{Path: "/", Headers: map[string]string{"x-trace": "1", "x-traffic-class": "synthetic"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.Pick(tc.req); got != tc.want {
				t.Errorf("Pick = %d, want %d", got, tc.want)
			}
		})
	}
}

// fakeTargets is a settable registry view.
type fakeTargets struct {
	mu      sync.Mutex
	healthy map[string]int // absent: not registered
}

func (f *fakeTargets) Target(s string) (bool, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.healthy[s]
	return ok, n
}

func (f *fakeTargets) set(s string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n < 0 {
		delete(f.healthy, s)
		return
	}
	f.healthy[s] = n
}

type recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (r *recorder) Record(_ context.Context, e audit.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

func newTestStore(t *testing.T, kv systemstore.KV) (*Store, *fakeTargets, *recorder) {
	t.Helper()
	ft := &fakeTargets{healthy: map[string]int{"payments": 2, "payments-synthetic": 1, "payments-canary": 1, "empty": 0}}
	rec := &recorder{}
	s, err := NewStore(StoreConfig{KV: kv, Targets: ft, Audit: rec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, ft, rec
}

// TestSetRefusedChangesNothing is #15 acceptance 5 at the store: rules
// with an unknown field, a missing target, or weights that do not sum to
// a positive total are refused naming the field, and the stored rules,
// their revision and the store's version stay as they were.
func TestSetRefusedChangesNothing(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	s, _, rec := newTestStore(t, kv)
	ctx := context.Background()
	if _, err := s.Set(ctx, "payments", []byte(example)); err != nil {
		t.Fatal(err)
	}
	_, before, _ := s.Get("payments")
	version := s.Version()
	for _, tc := range []struct {
		name, yaml, field string
		is                error
	}{
		{"unknown_field", "rules:\n  - to: payments-canary\n    wieght: 3", "rules[0].wieght", ErrInvalid},
		{"missing_target", "rules:\n  - split:\n      - {to: payments, weight: 1}\n      - {to: payments-gone, weight: 1}", "rules[0].split[1].to", ErrNoTarget},
		{"missing_default", "default: nowhere", "default", ErrNoTarget},
		{"weights_zero", "rules:\n  - split: [{to: payments, weight: 0}]", "rules[0].split", ErrInvalid},
		{"unreachable_to", "rules:\n  - to: empty", "rules[0].to", ErrUnreachable},
		{"unreachable_split", "rules:\n  - split: [{to: empty, weight: 1}, {to: payments, weight: 0}]", "rules[0].split", ErrUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, op := range []string{"validate", "set"} {
				var err error
				if op == "set" {
					_, err = s.Set(ctx, "payments", []byte(tc.yaml))
				} else {
					_, err = s.Validate("payments", []byte(tc.yaml))
				}
				if !errors.Is(err, tc.is) {
					t.Errorf("%s: err = %v, want %v", op, err, tc.is)
				}
				if err == nil || !strings.Contains(err.Error(), tc.field+":") {
					t.Errorf("%s: err = %v, want it to name %s", op, err, tc.field)
				}
			}
			_, after, _ := s.Get("payments")
			if after != before || s.Version() != version {
				t.Errorf("after a refused set: status %+v version %d, want %+v version %d", after, s.Version(), before, version)
			}
			v, rev, err := kv.Get(ctx, KeyPrefix+"payments")
			if err != nil || rev != before.Version || !strings.Contains(string(v), "payments-synthetic") {
				t.Errorf("KV after a refused set: rev %d err %v, want rev %d and the old rules", rev, err, before.Version)
			}
		})
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := len(rec.entries); n != 7 {
		t.Fatalf("%d audit entries, want 7 (1 put, 6 refused)", n)
	}
	if e := rec.entries[0]; e.Action != "routes" || e.Outcome != audit.OutcomeAllowed || e.Resource != "payments" || e.New != example {
		t.Errorf("audit of the put = %+v", e)
	}
	if e := rec.entries[1]; e.Outcome != audit.OutcomeFailed || e.Old != example || !strings.Contains(e.Reason, "wieght") {
		t.Errorf("audit of a refused put = %+v", e)
	}
}

// TestBrokenAndReplicas: a second Store on the same KV sees a Set and a
// Delete through its watch; a target deregistered later is reported
// broken and by the metric; a target back is not.
func TestBrokenAndReplicas(t *testing.T) {
	kv := systemstoretest.NewMemKV()
	a, _, _ := newTestStore(t, kv)
	b, ft, _ := newTestStore(t, kv)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	changed := b.Changed()
	if _, err := a.Set(context.Background(), "payments", []byte(example)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica saw no change")
	}
	if r, _, ok := b.Rules("payments"); !ok || len(r.Rules) != 2 {
		t.Fatalf("other replica: rules %+v %v, want the 2 rules", r, ok)
	}
	if got := b.Broken("payments"); len(got) != 0 {
		t.Errorf("Broken = %+v, want none", got)
	}
	ft.set("payments-canary", -1)
	want := []BrokenRule{{Index: 1, Rule: "canary", Missing: []string{"payments-canary"}}}
	if d := cmp.Diff(want, b.Broken("payments")); d != "" {
		t.Errorf("Broken (-want +got):\n%s", d)
	}
	if e := b.EntryOf("payments"); len(e.Broken) != 1 || len(e.Rules) != 2 {
		t.Errorf("EntryOf: %+v, want the rules kept and 1 broken", e)
	}
	ft.set("payments-canary", 1)
	if got := b.Broken("payments"); len(got) != 0 {
		t.Errorf("Broken after the target came back = %+v, want none", got)
	}
	changed = b.Changed()
	if err := a.Delete(context.Background(), "payments"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica saw no delete")
	}
	if _, _, ok := b.Rules("payments"); ok {
		t.Error("other replica still has the deleted rules")
	}
	if err := a.Delete(context.Background(), "payments"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
}

type denyAll struct{}

func (denyAll) Authorize(_ context.Context, a authz.Action, svc string) error {
	return errors.New("permission denied: bob may not " + string(a) + " " + svc)
}

type allowAll struct{}

func (allowAll) Authorize(context.Context, authz.Action, string) error { return nil }

func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

func TestHTTP(t *testing.T) {
	s, _, _ := newTestStore(t, nil)
	open := httptest.NewServer(s.Handler(allowAll{}, nil))
	defer open.Close()
	denied := httptest.NewServer(s.Handler(denyAll{}, nil))
	defer denied.Close()
	off := httptest.NewServer(s.Handler(nil, nil))
	defer off.Close()

	if code, out := do(t, "GET", open.URL+"/v1/routes/payments", ""); code != 200 || out["configured"] != false || out["default"] != "payments" {
		t.Errorf("GET before: %d %v", code, out)
	}
	if code, out := do(t, "PUT", denied.URL+"/v1/routes/payments", example); code != 403 || !strings.Contains(out["error"].(string), "may not routes payments") {
		t.Errorf("denied PUT: %d %v, want 403", code, out)
	}
	if code, _ := do(t, "PUT", off.URL+"/v1/routes/payments", example); code != 403 {
		t.Errorf("PUT with no authorizer: %d, want 403", code)
	}
	if code, out := do(t, "PUT", open.URL+"/v1/routes/payments", example); code != 200 || out["configured"] != true {
		t.Fatalf("PUT: %d %v", code, out)
	}
	_, st, _ := s.Get("payments")
	for _, tc := range []struct {
		name, body string
		code       int
		field      string
	}{
		{"unknown_field", "rules:\n  - to: payments\n    bogus: 1", 400, "rules[0].bogus"},
		{"missing_target", "rules:\n  - split: [{to: payments, weight: 1}, {to: nope, weight: 1}]", 409, "rules[0].split[1].to"},
		{"weights_zero", "rules:\n  - split: [{to: payments, weight: 0}]", 400, "rules[0].split"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/routes/payments/validate", "/v1/routes/payments"} {
				method := "POST"
				if !strings.HasSuffix(path, "validate") {
					method = "PUT"
				}
				code, out := do(t, method, open.URL+path, tc.body)
				if code != tc.code || out["field"] != tc.field {
					t.Errorf("%s %s: %d field %v (%v), want %d field %s", method, path, code, out["field"], out["error"], tc.code, tc.field)
				}
			}
			if _, now, _ := s.Get("payments"); now != st {
				t.Errorf("status changed after a refusal: %+v, want %+v", now, st)
			}
		})
	}
	code, out := do(t, "POST", open.URL+"/v1/routes/payments/validate?path=/payments.v1.Payments/Pay&header=x-traffic-class:%20synthetic", example)
	if code != 200 {
		t.Fatalf("validate: %d %v", code, out)
	}
	samples := out["samples"].([]any)
	if m := samples[0].(map[string]any); m["rule"] != "synthetic" || m["targets"].([]any)[0] != "payments-synthetic" {
		t.Errorf("validate sample: %v, want rule synthetic → payments-synthetic", m)
	}
	code, out = do(t, "POST", open.URL+"/v1/routes/payments/validate?path=/x.Y/Z", example)
	if m := out["samples"].([]any)[0].(map[string]any); code != 200 || m["rule"] != "canary" {
		t.Errorf("validate untagged sample: %d %v, want rule canary", code, m)
	}
	if code, _ := do(t, "DELETE", denied.URL+"/v1/routes/payments", ""); code != 403 {
		t.Errorf("denied DELETE: %d", code)
	}
	if code, _ := do(t, "DELETE", open.URL+"/v1/routes/payments", ""); code != 200 {
		t.Errorf("DELETE: %d", code)
	}
	if code, _ := do(t, "DELETE", open.URL+"/v1/routes/payments", ""); code != 404 {
		t.Errorf("DELETE again: %d, want 404", code)
	}
	if code, _ := do(t, "GET", open.URL+"/v1/routes/Bad_Name!", ""); code != 400 {
		t.Errorf("GET of a bad name: %d, want 400", code)
	}
}

func FuzzParseRules(f *testing.F) {
	for _, s := range []string{example, "", "rules: []", "default: a", "rules:\n  - to: a\n    match:\n      headers: [{name: x, regex: \"a+\"}]", "rules:\n  - split: [{to: a, weight: 4294967295}]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse("fuzz", data)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not an *Error wrapping ErrInvalid", err)
			}
			return
		}
		// Accepted rules hold the invariants the server relies on.
		for i, rule := range r.Rules {
			if (rule.To == "") == (len(rule.Split) == 0) {
				t.Fatalf("rules[%d]: to %q and %d split members", i, rule.To, len(rule.Split))
			}
			var sum uint64
			for _, m := range rule.Split {
				sum += uint64(m.Weight)
			}
			if len(rule.Split) > 0 && (sum == 0 || sum > 1<<32-1) {
				t.Fatalf("rules[%d]: weights sum to %d", i, sum)
			}
			for _, h := range rule.Match.Headers {
				if h.Kind() == "" || h.Name == "" {
					t.Fatalf("rules[%d]: header %+v has no condition", i, h)
				}
			}
			rule.Match.takes(Request{Path: "/a/b", Headers: map[string]string{"x": "y"}})
		}
		// The JSON the API shows parses back to the same rules.
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse("json", b)
		if err != nil {
			t.Fatalf("the JSON of accepted rules does not parse: %v\n%s", err, b)
		}
		if d := cmp.Diff(r, back, cmp.AllowUnexported(HeaderMatch{}), cmpopts.IgnoreFields(HeaderMatch{}, "re")); d != "" {
			t.Fatalf("JSON round trip (-parsed +back):\n%s", d)
		}
	})
}

// TestDocExample: the example of "Routing rules" in docs/routing.md
// parses, and sends what the doc says where it says.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Routing rules\n")
	_, rest, ok2 := strings.Cut(section, "```yaml\n")
	example, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/routing.md has no ```yaml block under ## Routing rules")
	}
	r, err := Parse("payments-routes.yaml", []byte(example))
	if err != nil {
		t.Fatalf("the doc's example: %v", err)
	}
	synthetic := Request{Path: "/payments.v1.Payments/Pay", Headers: map[string]string{"x-traffic-class": "synthetic"}}
	if i := r.Pick(synthetic); i != 0 || r.Rules[0].To != "payments-synthetic" {
		t.Errorf("a synthetic RPC takes rule %d, want 0 (to payments-synthetic)", i)
	}
	if i := r.Pick(Request{Path: "/payments.v1.Payments/Pay"}); i != 1 || len(r.Rules[1].Split) != 2 || r.Rules[1].Split[1].Weight != 10 {
		t.Errorf("an untagged RPC takes rule %d, want 1 (the 90/10 split)", i)
	}
}

// fixedClients lists the same subscribed clients for every service.
type fixedClients []Client

func (c fixedClients) RouteClients(string) []Client { return c }

// TestDryRunClients: the dry run's answer lists the clients HandlerWith
// was given, and none without a lister.
func TestDryRunClients(t *testing.T) {
	s, _, _ := newTestStore(t, nil)
	with := httptest.NewServer(s.HandlerWith(HandlerConfig{Authorizer: allowAll{}, Clients: fixedClients{{Service: "checkout", Streams: 3}}}))
	defer with.Close()
	without := httptest.NewServer(s.Handler(allowAll{}, nil))
	defer without.Close()
	for _, tc := range []struct {
		name, url string
		want      []any
	}{
		{"lister", with.URL, []any{map[string]any{"service": "checkout", "streams": float64(3)}}},
		{"none", without.URL, []any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := do(t, "POST", tc.url+"/v1/routes/payments/validate", example)
			if code != 200 {
				t.Fatalf("validate: %d %v", code, out)
			}
			if got := out["clients"]; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("clients = %#v, want %#v", got, tc.want)
			}
		})
	}
}

package migrationapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/migration"
	pb "github.com/spillway/spillway/migration/migrationv1"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/security/authn"
)

const token = "s3cret-t0ken"

// fakeClients is a hand-written fake of ClientLister.
type fakeClients []string

func (f fakeClients) ClientServices() []string { return f }

var _ ClientLister = fakeClients(nil)

// stack is the migration API as cmd/spillway wires it, on real loopback
// gRPC and HTTP servers: a registry store, in-memory durable storage and a
// migration.Controller.
type stack struct {
	store   *registry.Store
	ctrl    *migration.Controller
	metrics *prometheus.Registry
	client  pb.MigrationClient
	url     string // base URL of the HTTP API
}

func startStack(t *testing.T, token string) *stack {
	t.Helper()
	return startStackAuthz(t, token, nil)
}

// startStackAuthz is startStack with an Authorizer; the servers take the
// caller's identity from the "x-identity" metadata and header, as the
// authn interceptors would from its certificate.
func startStackAuthz(t *testing.T, token string, az Authorizer) *stack {
	t.Helper()
	s := &stack{store: registry.NewStore(), metrics: prometheus.NewRegistry()}
	var err error
	s.ctrl, err = migration.NewController(migration.ControllerConfig{Store: s.store, Storage: systemstore.NewMemory(), Registerer: s.metrics})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ctrl.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"payments", "inventory"} {
		if _, err := s.store.Apply(registry.Declare(svc)); err != nil {
			t.Fatal(err)
		}
	}
	s.store.MarkSynced()
	clients := fakeClients{"checkout", "payments"}
	a, err := New(Config{Panic: s.ctrl, Rollout: s.ctrl, Clients: clients, Registry: s.store, Token: token, Authorizer: az, Registerer: s.metrics})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "x-identity"); len(v) == 1 {
			ctx = authn.NewContext(ctx, authn.Identity{Name: v[0], Method: authn.Certificate})
		}
		return h(ctx, req)
	}))
	a.RegisterGRPC(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", http.NotFoundHandler()) // the registry's, in cmd/spillway
	for _, p := range Paths {
		mux.Handle(p, a.Handler())
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Identity"); v != "" {
			r = r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: v, Method: authn.Certificate}))
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.Close()
		conn.Close()
		srv.Stop()
		<-done
	})
	s.client, s.url = pb.NewMigrationClient(conn), hs.URL
	return s
}

// state is what a refused change must leave as it was.
type state struct {
	storeVersion   uint64
	flag           string
	panic          migration.PanicState
	rolloutVersion uint64
	yaml           string
}

func (s *stack) state() state {
	f, _ := s.store.Snapshot().Flag(registry.FlagXDS)
	r := s.ctrl.Rollout()
	return state{s.store.Snapshot().Version(), f, s.ctrl.Panic(), r.Version, r.YAML}
}

func withAuth(ctx context.Context, vals ...string) context.Context {
	for _, v := range vals {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
	}
	return ctx
}

// httpDo sends a request and returns the status and body.
func (s *stack) httpDo(t *testing.T, method, path, authz, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *stack) changes(what, result string) float64 {
	mfs, _ := s.metrics.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "spillway_admin_changes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["what"] == what && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestChangesNeedTheToken: every change without the right token is
// refused over gRPC and HTTP, and nothing changes: not the store's version,
// not the flag, not the rollout config.
func TestChangesNeedTheToken(t *testing.T) {
	cases := []struct {
		name     string
		token    string   // the server's; "" for none configured
		authz    []string // what the caller sends
		wantCode codes.Code
		wantMsg  string
	}{
		{"missing", token, nil, codes.PermissionDenied, "no admin token"},
		{"wrong", token, []string{"Bearer nope"}, codes.PermissionDenied, "wrong admin token"},
		{"prefix_of_token", token, []string{"Bearer " + token[:4]}, codes.PermissionDenied, "wrong admin token"},
		{"token_and_more", token, []string{"Bearer " + token + "x"}, codes.PermissionDenied, "wrong admin token"},
		{"no_scheme", token, []string{token}, codes.PermissionDenied, "Bearer"},
		{"basic_scheme", token, []string{"Basic " + token}, codes.PermissionDenied, "Bearer"},
		{"two_values", token, []string{"Bearer " + token, "Bearer " + token}, codes.PermissionDenied, "2 authorization values"},
		{"not_configured", "", []string{"Bearer " + token}, codes.FailedPrecondition, "--admin-token-file"},
		{"not_configured_no_token", "", nil, codes.FailedPrecondition, "--admin-token-file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, tc.token)
			before := s.state()
			ctx := withAuth(context.Background(), tc.authz...)
			_, err := s.client.SetPanic(ctx, &pb.SetPanicRequest{Panic: true})
			if status.Code(err) != tc.wantCode || !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Errorf("SetPanic = %v, want %v mentioning %q", err, tc.wantCode, tc.wantMsg)
			}
			_, err = s.client.SetRollout(ctx, &pb.SetRolloutRequest{Yaml: "rules:\n  - match: {}\n    percent: 100\n"})
			if status.Code(err) != tc.wantCode || !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Errorf("SetRollout = %v, want %v mentioning %q", err, tc.wantCode, tc.wantMsg)
			}
			if len(tc.authz) <= 1 {
				authz := strings.Join(tc.authz, "")
				if code, body := s.httpDo(t, "POST", "/v1/panic", authz, `{"panic": true}`); code != http.StatusForbidden || !strings.Contains(body, tc.wantMsg) {
					t.Errorf("POST /v1/panic = %d %s, want 403 mentioning %q", code, body, tc.wantMsg)
				}
				if code, body := s.httpDo(t, "PUT", "/v1/rollout", authz, "rules: []\n"); code != http.StatusForbidden || !strings.Contains(body, tc.wantMsg) {
					t.Errorf("PUT /v1/rollout = %d %s, want 403 mentioning %q", code, body, tc.wantMsg)
				}
			}
			if diff := cmp.Diff(before, s.state(), cmp.AllowUnexported(state{})); diff != "" {
				t.Errorf("state changed by a refused change (-before +after):\n%s", diff)
			}
			result := "denied"
			if tc.token == "" {
				result = "disabled"
			}
			if n := s.changes("panic", result); n < 1 {
				t.Errorf(`spillway_admin_changes_total{what="panic",result=%q} = %v, want >= 1`, result, n)
			}
			if n := s.changes("panic", "ok"); n != 0 {
				t.Errorf(`spillway_admin_changes_total{what="panic",result="ok"} = %v, want 0`, n)
			}
		})
	}
}

// TestPanicFlag: with the token, SetPanic publishes the flag in the store
// and the DNS server answers TXT _xds with it.
func TestPanicFlag(t *testing.T) {
	s := startStack(t, token)
	dnsAddr := startDNS(t, s.store)
	ctx := withAuth(context.Background(), "Bearer "+token)
	steps := []struct {
		name     string
		set      func() (*pb.PanicState, error)
		wantFlag string
	}{
		{"grpc_on", func() (*pb.PanicState, error) { return s.client.SetPanic(ctx, &pb.SetPanicRequest{Panic: true}) }, "off"},
		{"grpc_off", func() (*pb.PanicState, error) { return s.client.SetPanic(ctx, &pb.SetPanicRequest{Panic: false}) }, "on"},
		{"http_on", func() (*pb.PanicState, error) { return s.httpPanic(t, `{"panic": true}`) }, "off"},
		{"http_on_lower_case_bearer", func() (*pb.PanicState, error) { return s.httpPanic(t, `{"panic":true}`) }, "off"},
		{"http_off", func() (*pb.PanicState, error) { return s.httpPanic(t, `{"panic": false}`) }, "on"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got, err := st.set()
			if err != nil {
				t.Fatal(err)
			}
			if got.GetXds() != st.wantFlag || got.GetPanic() != (st.wantFlag == "off") || got.GetChanged() == nil {
				t.Errorf("answer = %v, want xds=%s with a change time", got, st.wantFlag)
			}
			if f, _ := s.store.Snapshot().Flag(registry.FlagXDS); f != st.wantFlag {
				t.Errorf("store flag = %q, want %q", f, st.wantFlag)
			}
			if txt := queryTXT(t, dnsAddr, "_xds.spillway.internal."); txt != "xds="+st.wantFlag {
				t.Errorf("TXT _xds = %q, want xds=%s", txt, st.wantFlag)
			}
			g, err := s.client.GetPanic(context.Background(), &pb.GetPanicRequest{})
			if err != nil || !panicEqual(g, got) {
				t.Errorf("GetPanic = %v, %v; want %v", g, err, got)
			}
			code, body := s.httpDo(t, "GET", "/v1/panic", "", "")
			var j map[string]any
			if code != 200 || json.Unmarshal([]byte(body), &j) != nil || j["xds"] != st.wantFlag {
				t.Errorf("GET /v1/panic = %d %s, want xds %s", code, body, st.wantFlag)
			}
		})
	}
	if n := s.changes("panic", "ok"); n != 4 {
		t.Errorf(`changes{panic,ok} = %v, want 4 (one step repeats the value in force)`, n)
	}
	if n := s.changes("panic", "unchanged"); n != 1 {
		t.Errorf(`changes{panic,unchanged} = %v, want 1`, n)
	}
	t.Run("http_bad_body", func(t *testing.T) {
		before := s.state()
		for _, body := range []string{``, `{}`, `{"panik": true}`, `{"panic": "yes"}`, `{"panic": true} {}`} {
			code, resp := s.httpDo(t, "POST", "/v1/panic", "Bearer "+token, body)
			if code != http.StatusBadRequest {
				t.Errorf("POST /v1/panic %s = %d %s, want 400", body, code, resp)
			}
		}
		if code, resp := s.httpDo(t, "POST", "/v1/panic", "Bearer "+token, `{}`); !strings.Contains(resp, `"field":"panic"`) {
			t.Errorf("POST /v1/panic {} = %d %s, want the field panic named", code, resp)
		}
		if diff := cmp.Diff(before, s.state(), cmp.AllowUnexported(state{})); diff != "" {
			t.Errorf("state changed by a bad request (-before +after):\n%s", diff)
		}
	})
}

func panicEqual(a, b *pb.PanicState) bool { return cmp.Equal(a, b, protocmp.Transform()) }

func (s *stack) httpPanic(t *testing.T, body string) (*pb.PanicState, error) {
	t.Helper()
	code, resp := s.httpDo(t, "POST", "/v1/panic", "bearer "+token, body)
	if code != 200 {
		t.Fatalf("POST /v1/panic %s = %d %s", body, code, resp)
	}
	var j struct {
		Panic   bool   `json:"panic"`
		XDS     string `json:"xds"`
		Changed string `json:"changed"`
	}
	if err := json.Unmarshal([]byte(resp), &j); err != nil {
		t.Fatalf("POST /v1/panic answer %s: %v", resp, err)
	}
	g, err := s.client.GetPanic(context.Background(), &pb.GetPanicRequest{})
	if err == nil && (g.GetXds() != j.XDS || g.GetPanic() != j.Panic || j.Changed == "") {
		t.Errorf("POST /v1/panic answer %s, GetPanic %v: want the same", resp, g)
	}
	return g, err
}

// startDNS serves store as DNS on loopback UDP and TCP and returns the
// address.
func startDNS(t *testing.T, store *registry.Store) string {
	t.Helper()
	r, err := resolver.New(resolver.Config{Store: store, Domain: "spillway.internal."})
	if err != nil {
		t.Fatal(err)
	}
	// UDP and TCP on one port: the kernel picks a free UDP port, whose TCP
	// twin may be taken, so try a few.
	var pc net.PacketConn
	var l net.Listener
	for try := 0; ; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if try == 10 {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Serve(ctx, pc, l)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		pc.Close()
		l.Close()
	})
	return pc.LocalAddr().String()
}

func queryTXT(t *testing.T, addr, name string) string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeTXT)
	c := &dns.Client{Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("TXT %s: %v", name, err)
	}
	if len(r.Answer) != 1 {
		t.Fatalf("TXT %s: %d answers, want 1: %v", name, len(r.Answer), r)
	}
	return strings.Join(r.Answer[0].(*dns.TXT).Txt, "")
}

// TestSetRolloutInvalid: a bad config is InvalidArgument / 400 naming the
// field, and the old config stays in force.
func TestSetRolloutInvalid(t *testing.T) {
	s := startStack(t, token)
	ctx := withAuth(context.Background(), "Bearer "+token)
	good := "rules:\n  - name: t3\n    match: {tier: \"3\"}\n    percent: 10\n"
	if _, err := s.client.SetRollout(ctx, &pb.SetRolloutRequest{Yaml: good}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, yaml string
		field      string // the HTTP error's "field"
		msg        string // in the message: the field, or what is wrong
	}{
		{"percent_over_100", "rules:\n  - match: {}\n    percent: 150\n", "rules[0].percent", "rules[0].percent: 150 is not in 0..100"},
		{"percent_negative", "rules:\n  - match: {}\n    percent: 5\n  - percent: -1\n", "rules[1].percent", "rules[1].percent"},
		{"percent_not_a_number", "rules:\n  - percent: ten\n", "yaml", "ten"},
		{"unknown_field", "rules:\n  - percnt: 10\n", "percnt", "field percnt not found"},
		{"unknown_top_level_field", "rulez: []\n", "rulez", "field rulez not found"},
		{"unparsable", "rules: [\n", "yaml", "yaml: line"},
		{"empty", "", "yaml", "empty document"},
		{"too_big", "rules: []\n" + strings.Repeat("#", migration.MaxConfigBytes), "yaml", "yaml: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.state()
			_, err := s.client.SetRollout(ctx, &pb.SetRolloutRequest{Yaml: tc.yaml})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Errorf("SetRollout = %v, want InvalidArgument saying %q", err, tc.msg)
			}
			_, err = s.client.ValidateRollout(context.Background(), &pb.ValidateRolloutRequest{Yaml: tc.yaml})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Errorf("ValidateRollout = %v, want InvalidArgument saying %q", err, tc.msg)
			}
			for _, req := range []struct{ method, path string }{{"PUT", "/v1/rollout"}, {"POST", "/v1/rollout/validate"}} {
				code, body := s.httpDo(t, req.method, req.path, "Bearer "+token, tc.yaml)
				var e httpjson.Error
				json.Unmarshal([]byte(body), &e)
				if code != http.StatusBadRequest || e.Field != tc.field || !strings.Contains(e.Error, tc.msg) {
					t.Errorf("%s %s = %d %s, want 400 with field %q", req.method, req.path, code, body, tc.field)
				}
			}
			if diff := cmp.Diff(before, s.state(), cmp.AllowUnexported(state{})); diff != "" {
				t.Errorf("state changed by an invalid config (-before +after):\n%s", diff)
			}
			if got := s.ctrl.Rollout().YAML; got != good {
				t.Errorf("config in force = %q, want the old one", got)
			}
		})
	}
	if n := s.changes("rollout", "invalid"); n != float64(2*len(cases)) {
		t.Errorf(`changes{rollout,invalid} = %v, want %d`, n, 2*len(cases))
	}
}

// TestRolloutJSON: GET and PUT /v1/rollout answer exactly the shape the
// client library reads.
func TestRolloutJSON(t *testing.T) {
	s := startStack(t, token)
	steps := []struct {
		name, method, body string
		want               string
	}{
		{"never_set", "GET", "", `{"rules":[],"version":0}`},
		{"put", "PUT", "rules:\n  - name: t3\n    match: {tier: \"3\", region: us-east1}\n    percent: 12.5\n  - match: {}\n    percent: 0\n",
			`{"rules":[{"name":"t3","match":{"region":"us-east1","tier":"3"},"percent":12.5},{"percent":0}],"version":1}`},
		{"get", "GET", "", `{"rules":[{"name":"t3","match":{"region":"us-east1","tier":"3"},"percent":12.5},{"percent":0}],"version":1}`},
		{"put_empty", "PUT", "rules: []\n", `{"rules":[],"version":2}`},
		{"put_same", "PUT", "rules: []\n", `{"rules":[],"version":2}`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			code, body := s.httpDo(t, st.method, "/v1/rollout", "Bearer "+token, st.body)
			if code != 200 || strings.TrimSpace(body) != st.want {
				t.Errorf("%s /v1/rollout = %d\n%s\nwant 200\n%s", st.method, code, body, st.want)
			}
		})
	}
	r, err := s.client.GetRollout(context.Background(), &pb.GetRolloutRequest{})
	if err != nil || r.GetVersion() != 2 || r.GetYaml() != "rules: []\n" || r.GetChanged() == nil || len(r.GetRules()) != 0 {
		t.Errorf("GetRollout = %v, %v; want version 2, yaml as set, a change time, no rules", r, err)
	}
	if n := s.changes("rollout", "unchanged"); n != 1 {
		t.Errorf("changes{rollout,unchanged} = %v, want 1", n)
	}
	t.Run("methods", func(t *testing.T) {
		for _, m := range []struct{ method, path, allow string }{
			{"DELETE", "/v1/rollout", "GET, HEAD, PUT"},
			{"POST", "/v1/rollout", "GET, HEAD, PUT"},
			{"PUT", "/v1/panic", "GET, HEAD, POST"},
			{"GET", "/v1/rollout/validate", "POST"},
		} {
			if code, body := s.httpDo(t, m.method, m.path, "Bearer "+token, ""); code != http.StatusMethodNotAllowed || !strings.Contains(body, m.allow) {
				t.Errorf("%s %s = %d %s, want 405 allowing %s", m.method, m.path, code, body, m.allow)
			}
		}
	})
}

// TestSetRolloutGRPC: a change over gRPC, the structured rules back, and
// the version growing only with changes.
func TestSetRolloutGRPC(t *testing.T) {
	s := startStack(t, token)
	ctx := withAuth(context.Background(), "Bearer "+token)
	yaml := "rules:\n  - name: t3\n    match: {tier: \"3\"}\n    percent: 10\n"
	got, err := s.client.SetRollout(ctx, &pb.SetRolloutRequest{Yaml: yaml})
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.Rollout{Yaml: yaml, Version: 1, Rules: []*pb.Rule{{Name: "t3", Match: map[string]string{"tier": "3"}, Percent: 10}}}
	if diff := cmp.Diff(want, got, protocmp.Transform(), protocmp.IgnoreFields(&pb.Rollout{}, "changed")); diff != "" {
		t.Errorf("SetRollout (-want +got):\n%s", diff)
	}
	g, err := s.client.GetRollout(context.Background(), &pb.GetRolloutRequest{})
	if diff := cmp.Diff(got, g, protocmp.Transform()); err != nil || diff != "" {
		t.Errorf("GetRollout after SetRollout: %v (-set +get):\n%s", err, diff)
	}
	if v := s.changes("rollout", "ok"); v != 1 {
		t.Errorf("changes{rollout,ok} = %v, want 1", v)
	}
}

// TestValidateRollout: the dry run decides for every known client service
// (xDS node.cluster and registry services), changes nothing, needs no
// token.
func TestValidateRollout(t *testing.T) {
	s := startStack(t, token)
	before := s.state()
	yaml := "rules:\n  - name: pay\n    match: {service: payments}\n    percent: 100\n  - name: tier3\n    match: {tier: \"3\"}\n    percent: 100\n  - name: rest\n    match: {}\n    percent: 0\n"
	got, err := s.client.ValidateRollout(context.Background(), &pb.ValidateRolloutRequest{Yaml: yaml})
	if err != nil {
		t.Fatal(err)
	}
	d := func(service string, rule int32, name string, eligible bool, sources ...string) *pb.Decision {
		return &pb.Decision{Service: service, Bucket: uint32(migration.Bucket(service)), Rule: rule, RuleName: name, Eligible: eligible, Sources: sources}
	}
	want := &pb.ValidateRolloutResponse{
		Rules: []*pb.Rule{
			{Name: "pay", Match: map[string]string{"service": "payments"}, Percent: 100},
			{Name: "tier3", Match: map[string]string{"tier": "3"}, Percent: 100},
			{Name: "rest", Match: map[string]string{}, Percent: 0},
		},
		Decisions: []*pb.Decision{
			d("checkout", 2, "rest", false, "xds"),
			d("inventory", 2, "rest", false, "registry"),
			d("payments", 0, "pay", true, "xds", "registry"),
		},
		Eligible: 1,
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("ValidateRollout (-want +got):\n%s", diff)
	}
	code, body := s.httpDo(t, "POST", "/v1/rollout/validate", "", "rules:\n  - match: {service: checkout}\n    percent: 100\n")
	var j struct {
		Decisions []struct {
			Service  string `json:"service"`
			Rule     int    `json:"rule"`
			Eligible bool   `json:"eligible"`
		} `json:"decisions"`
		Eligible  int `json:"eligible"`
		Unmatched int `json:"unmatched"`
	}
	if err := json.Unmarshal([]byte(body), &j); code != 200 || err != nil || j.Eligible != 1 || j.Unmatched != 2 || len(j.Decisions) != 3 {
		t.Errorf("POST /v1/rollout/validate = %d %s, want 3 decisions, 1 eligible, 2 unmatched", code, body)
	}
	if diff := cmp.Diff(before, s.state(), cmp.AllowUnexported(state{})); diff != "" {
		t.Errorf("state changed by a dry run (-before +after):\n%s", diff)
	}
}

func TestNewValidates(t *testing.T) {
	ctrl, err := migration.NewController(migration.ControllerConfig{Store: registry.NewStore(), Storage: systemstore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no_panic", Config{Rollout: ctrl}, "Panic"},
		{"no_rollout", Config{Panic: ctrl}, "Rollout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, want, wantErr string
	}{
		{"trimmed", write("ok", "  "+token+"\n"), token, ""},
		{"empty", write("empty", " \n\t"), "", "empty"},
		{"inner_space", write("two", "a b\n"), "", "whitespace"},
		{"missing", dir + "/missing", "", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadTokenFile(tc.path)
			if got != tc.want || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ReadTokenFile = %q, %v; want %q, error mentioning %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

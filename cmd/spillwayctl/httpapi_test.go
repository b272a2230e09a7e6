package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/spillway/spillway/internal/serverinfo"
	"github.com/spillway/spillway/registry/systemstore/systemstoretest"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
	"github.com/spillway/spillway/weights/svcconfig"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/routing"
)

// apiServer is the part of spillway the HTTP commands reach, wired as
// cmd/spillway does: a gRPC port with the authentication interceptor and,
// unless old, ServerInfo; an HTTP port with the authentication middleware
// in front of the config, routes and audit APIs. The admin token is
// testToken.
type apiServer struct {
	grpcAddr, httpAddr string
	config             *svcconfig.Store
	routes             *routing.Store
}

type apiOptions struct {
	// old leaves ServerInfo out: a server of an older release.
	old bool
	// report turns the bound HTTP address into the one ServerInfo
	// reports (nil: as bound).
	report func(bound string) string
	// cert, if not nil, is the certificate of both ports (TLS).
	cert *tlstest.Cert
}

func startAPIServer(t *testing.T, o apiOptions) *apiServer {
	t.Helper()
	tokens, err := (*authn.TokenSet)(nil).WithAdmin(testToken)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.NewAuthenticator(tokens, nil)
	cfgStore, err := svcconfig.NewStore(svcconfig.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]int{"payments": 2, "payments-canary": 1}
	routeStore, err := routing.NewStore(routing.StoreConfig{
		Targets: routing.TargetsFunc(func(s string) (bool, int) { n, ok := targets[s]; return ok, n }),
		Check:   xds.CheckRules,
	})
	if err != nil {
		t.Fatal(err)
	}
	auditLog, err := audit.New(audit.Config{KV: systemstoretest.NewMemKV(), Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range svcconfig.Paths {
		mux.Handle(p, cfgStore.Handler(testToken, nil))
	}
	for _, p := range routing.Paths {
		mux.Handle(p, routeStore.Handler(tokenAuthz{}, nil))
	}
	mux.Handle(audit.Path, auditLog.Handler(adminAuditor{}))

	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		httpLis.Close()
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(auth.UnaryServerInterceptor())}
	httpSrv := &http.Server{Handler: auth.Middleware(mux)}
	if o.cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{o.cert.TLS}})))
		httpSrv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{o.cert.TLS}}
	}
	grpcSrv := grpc.NewServer(opts...)
	if !o.old {
		reported := httpLis.Addr().String()
		if o.report != nil {
			reported = o.report(reported)
		}
		serverinfo.Register(grpcSrv, serverinfo.Info{HTTPAddr: reported, TLS: o.cert != nil})
	}
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		grpcSrv.Serve(grpcLis)
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		if o.cert != nil {
			httpSrv.ServeTLS(httpLis, "", "")
		} else {
			httpSrv.Serve(httpLis)
		}
	}()
	t.Cleanup(func() {
		grpcSrv.Stop()
		httpSrv.Close()
		<-done
		<-done
	})
	return &apiServer{grpcAddr: grpcLis.Addr().String(), httpAddr: httpLis.Addr().String(), config: cfgStore, routes: routeStore}
}

// portOf keeps the port of a bound address and puts host before it.
func portOf(host string) func(string) string {
	return func(bound string) string {
		_, port, _ := net.SplitHostPort(bound)
		return net.JoinHostPort(host, port)
	}
}

func spillwayctl(globals []string, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append(append([]string{"--timeout", "5s"}, globals...), args...), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// TestHTTPCommandsFromServer: config, route and audit work with --server
// alone, whatever host the server reports for its HTTP listener (as
// bound, or a wildcard: the host of --server is used), and the changes
// reach the stores; the token goes to both ports.
func TestHTTPCommandsFromServer(t *testing.T) {
	cfgFile := writeTemp(t, "cfg.yaml", "strategy: pid\npid:\n  kp: 0.7\n")
	routeFile := writeTemp(t, "routes.yaml", "rules:\n  - name: canary\n    split:\n      - {to: payments, weight: 90}\n      - {to: payments-canary, weight: 10}\n")
	for _, tc := range []struct {
		name   string
		report func(string) string
	}{
		{"bound", nil},
		{"emptyHost", portOf("")},
		{"ipv4Wildcard", portOf("0.0.0.0")},
		{"ipv6Wildcard", portOf("::")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startAPIServer(t, apiOptions{report: tc.report})
			g := []string{"--server", s.grpcAddr}
			steps := []struct {
				args []string
				want string
			}{
				{[]string{"config", "set", "--token", testToken, "cart", cfgFile}, "service cart: active, from api"},
				{[]string{"config", "get", "-o", "yaml", "cart"}, "kp: 0.7"},
				{[]string{"config", "list"}, "cart     pid"},
				{[]string{"route", "set", "--token", testToken, "payments", routeFile}, "service payments: 1 rules, version 1"},
				{[]string{"route", "list"}, "payments  1      payments"},
				{[]string{"route", "validate", "payments", routeFile}, "the rules are valid"},
				{[]string{"audit", "--token", testToken}, "no audit entries"},
			}
			for _, st := range steps {
				r := spillwayctl(g, st.args...)
				if r.code != exitOK || !strings.Contains(r.stdout, st.want) {
					t.Fatalf("spillwayctl --server %s %v = %d, stdout %q stderr %q; want 0 with %q", s.grpcAddr, st.args, r.code, r.stdout, r.stderr, st.want)
				}
			}
			if c, _, ok := s.config.Get("cart"); !ok || c.PID.Kp != 0.7 {
				t.Errorf("config of cart after set = %+v, %v; want kp 0.7", c, ok)
			}
			if _, st, ok := s.routes.Get("payments"); !ok || st.Version != 1 {
				t.Errorf("routes of payments after set: ok %v, version %d; want version 1", ok, st.Version)
			}
		})
	}
}

// TestHTTPFlagWins: a given --http is used as before, without asking
// --server: it works with --server unreachable, and over a server that
// reports an address where nothing listens.
func TestHTTPFlagWins(t *testing.T) {
	lost := closedAddr(t)
	s := startAPIServer(t, apiOptions{report: func(string) string { return lost }})
	for _, g := range [][]string{{"--server", lost}, {"--server", s.grpcAddr}, nil} {
		for _, args := range [][]string{{"config", "list"}, {"route", "list"}, {"audit", "--token", testToken}} {
			r := spillwayctl(g, append(args, "--http", s.httpAddr)...)
			if r.code != exitOK {
				t.Errorf("spillwayctl %v %v --http %s = %d, stderr %q; want 0", g, args, s.httpAddr, r.code, r.stderr)
			}
		}
	}
	// Without --http the reported address is tried, and the error says so.
	r := spillwayctl([]string{"--server", s.grpcAddr}, "config", "list")
	for _, want := range []string{"--server " + s.grpcAddr + " says its HTTP port is " + lost, "pass --http ADDR"} {
		if r.code != exitError || !strings.Contains(r.stderr, want) {
			t.Errorf("config list with a wrong reported address = %d, stderr %q; want 1 with %q", r.code, r.stderr, want)
		}
	}
}

// TestHTTPOlderServer: against a server without ServerInfo every HTTP
// command fails, exit 1, asking for --http; so does an unreachable
// --server. An unknown token is refused by the gRPC port's
// authentication, as by the HTTP port's, without the hint.
func TestHTTPOlderServer(t *testing.T) {
	old := startAPIServer(t, apiOptions{old: true})
	current := startAPIServer(t, apiOptions{})
	lost := closedAddr(t)
	for _, tc := range []struct {
		name    string
		server  string
		args    []string
		want    []string
		notWant string
	}{
		{"configOld", old.grpcAddr, []string{"config", "list"}, []string{"--server " + old.grpcAddr + " does not say where its HTTP API is", "pass --http ADDR"}, ""},
		{"routeOld", old.grpcAddr, []string{"route", "get", "payments"}, []string{"does not say where its HTTP API is", "pass --http ADDR"}, ""},
		{"auditOld", old.grpcAddr, []string{"audit", "--token", testToken}, []string{"does not say where its HTTP API is", "pass --http ADDR"}, ""},
		{"unreachable", lost, []string{"config", "list"}, []string{"ask --server for its HTTP address", "Unavailable: is spillway running at --server " + lost, "or pass --http ADDR"}, ""},
		{"unknownToken", current.grpcAddr, []string{"config", "delete", "--token", "not-the-token", "cart"}, []string{"unknown token (Unauthenticated)"}, "pass --http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := spillwayctl([]string{"--server", tc.server}, tc.args...)
			if r.code != exitError {
				t.Fatalf("spillwayctl --server %s %v = %d, stdout %q stderr %q; want 1", tc.server, tc.args, r.code, r.stdout, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if tc.notWant != "" && strings.Contains(r.stderr, tc.notWant) {
				t.Errorf("stderr has %q:\n%s", tc.notWant, r.stderr)
			}
		})
	}
	// The same server with --http: the old way still works.
	if r := spillwayctl([]string{"--server", old.grpcAddr}, "config", "list", "--http", old.httpAddr); r.code != exitOK {
		t.Errorf("config list --http against the older server = %d, stderr %q; want 0", r.code, r.stderr)
	}
}

// TestHTTPFromServerTLS: with TLS on both ports the derived address is
// https, and the HTTP certificate is checked for the name --server was
// dialled by: the certificate names only localhost while the server
// reports 127.0.0.1. Plaintext gets nowhere.
func TestHTTPFromServerTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "spillway test CA")
	cert := ca.Issue(t, tlstest.Leaf{DNS: []string{"localhost"}})
	caFile := tlstest.WriteCA(t, filepath.Join(t.TempDir(), "ca.crt"), ca)
	s := startAPIServer(t, apiOptions{cert: cert})
	_, port, _ := net.SplitHostPort(s.grpcAddr)
	server := net.JoinHostPort("localhost", port)
	g := []string{"--server", server, "--tls-ca", caFile}
	cfgFile := writeTemp(t, "cfg.yaml", "strategy: pid\n")
	if r := spillwayctl(g, "config", "set", "--token", testToken, "cart", cfgFile); r.code != exitOK || !strings.Contains(r.stdout, "service cart: active") {
		t.Fatalf("config set over TLS with --server %s = %d, stdout %q stderr %q; want 0", server, r.code, r.stdout, r.stderr)
	}
	if r := spillwayctl(g, "route", "list"); r.code != exitOK {
		t.Errorf("route list over TLS = %d, stderr %q; want 0", r.code, r.stderr)
	}
	if r := spillwayctl([]string{"--server", server}, "config", "list"); r.code != exitError {
		t.Errorf("config list without --tls-ca against TLS = %d, stderr %q; want 1", r.code, r.stderr)
	}
}

// closedAddr is a loopback address where nothing listens (a port just
// freed).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
	return addr
}

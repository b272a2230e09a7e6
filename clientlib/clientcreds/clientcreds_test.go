package clientcreds_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/spillway/spillway/clientlib/clientcreds"
	"github.com/spillway/spillway/security/tlsconfig"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

// TestDialOptions: mTLS and a bearer token from a file reach a gRPC
// server; a rotated token file is read at the next call.
func TestDialOptions(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	srvFiles := ca.Issue(t, tlstest.Leaf{IPs: []netip.Addr{tlstest.Loopback}}).WriteFiles(t, dir, "srv", ca)
	cli := ca.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://example.org/ns/prod/sa/vm"}}).WriteFiles(t, dir, "cli", ca)
	r, err := tlsconfig.New(tlsconfig.Config{Files: srvFiles})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig(tlsconfig.ServerOptions{ClientAuth: tlsconfig.RequireClientCert, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ uri, auth string }
	got := make(chan seen, 4)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)), grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		var s seen
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
				s.uri = ti.State.PeerCertificates[0].URIs[0].String()
			}
		}
		md, _ := metadata.FromIncomingContext(ctx)
		s.auth = strings.Join(md.Get("authorization"), ",")
		got <- s
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	tokenFile := filepath.Join(dir, "token")
	tlstest.WriteFile(t, tokenFile, []byte("first-token\n"))
	opts, err := clientcreds.Config{CA: cli.CA, Cert: cli.Cert, Key: cli.Key, TokenFile: tokenFile}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(ln.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, tok := range []string{"first-token", "second-token"} {
		tlstest.WriteFile(t, tokenFile, []byte(tok+"\n"))
		if _, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		want := seen{uri: "spiffe://example.org/ns/prod/sa/vm", auth: "Bearer " + tok}
		if s := <-got; s != want {
			t.Errorf("server saw %+v, want %+v", s, want)
		}
	}

	// Without a client certificate the handshake is refused.
	opts, err = clientcreds.Config{CA: cli.CA}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	cc2, err := grpc.NewClient(ln.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if _, err := healthpb.NewHealthClient(cc2).Check(t.Context(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("a client without a certificate got through a server that requires one")
	}
}

func TestHTTPClient(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	leaf := ca.Issue(t, tlstest.Leaf{IPs: []netip.Addr{tlstest.Loopback}, URIs: []string{"spiffe://x/cli"}})
	files := leaf.WriteFiles(t, dir, "cli", ca)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].URIs[0].String()+" "+r.Header.Get("Authorization"))
	}))
	srv.TLS = r(t, files)
	srv.StartTLS()
	defer srv.Close()
	c, err := clientcreds.Config{CA: files.CA, Cert: files.Cert, Key: files.Key, Token: " tok "}.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	if got, want := string(b), "spiffe://x/cli Bearer tok"; got != want {
		t.Fatalf("server saw %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name string
		cfg  clientcreds.Config
		want string
	}{
		{"missing_token_file", clientcreds.Config{TokenFile: filepath.Join(dir, "nope")}, "token file: open"},
		{"missing_ca", clientcreds.Config{CA: filepath.Join(dir, "nope")}, "tls: ca file: open"},
		{"cert_without_key", clientcreds.Config{Cert: files.Cert}, "tls: files: certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.cfg.HTTPClient(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("HTTPClient error = %v, want %q", err, tc.want)
			}
			if _, err := tc.cfg.DialOptions(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DialOptions error = %v, want %q", err, tc.want)
			}
		})
	}
}

func r(t *testing.T, files tlsconfig.Files) *tls.Config {
	rl, err := tlsconfig.New(tlsconfig.Config{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rl.ServerConfig(tlsconfig.ServerOptions{ClientAuth: tlsconfig.RequireClientCert, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

package serverinfo_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/clientlib/clientcreds"
	"github.com/spillway/spillway/internal/serverinfo"
	"github.com/spillway/spillway/security/authn"
)

const adminToken = "info-t0ken"

// serve starts a gRPC server on loopback with spillway's authentication
// interceptor (admin: adminToken) in front of a recorder of the calls'
// methods and identities; register adds the services. It returns the
// address and the recorder.
func serve(t *testing.T, register func(*grpc.Server)) (string, *calls) {
	t.Helper()
	tokens, err := (*authn.TokenSet)(nil).WithAdmin(adminToken)
	if err != nil {
		t.Fatal(err)
	}
	rec := &calls{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authn.NewAuthenticator(tokens, nil).UnaryServerInterceptor(), rec.intercept))
	register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String(), rec
}

// calls records "method identity" of every call that got past
// authentication.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c.mu.Lock()
	c.got = append(c.got, info.FullMethod+" "+authn.FromContext(ctx).String())
	c.mu.Unlock()
	return h(ctx, req)
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func lookup(t *testing.T, addr string, creds clientcreds.Config) (serverinfo.Info, error) {
	t.Helper()
	opts, err := creds.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return serverinfo.Lookup(ctx, conn)
}

// TestRoundTrip: what Register is given, Lookup returns, to an anonymous
// caller and to one with a token, through the server's interceptors; an
// unknown token is refused by authentication like on any method.
func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		want serverinfo.Info
	}{
		{"wildcardTLS", serverinfo.Info{HTTPAddr: "[::]:18080", TLS: true}},
		{"loopbackPlaintext", serverinfo.Info{HTTPAddr: "127.0.0.1:18080"}},
	} {
		want := tc.want
		t.Run(tc.name, func(t *testing.T) {
			addr, rec := serve(t, func(s *grpc.Server) { serverinfo.Register(s, want) })
			for _, creds := range []clientcreds.Config{{}, {Token: adminToken}} {
				got, err := lookup(t, addr, creds)
				if err != nil {
					t.Fatalf("Lookup (token %q): %v", creds.Token, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Lookup (token %q) (-want +got):\n%s", creds.Token, diff)
				}
			}
			_, err := lookup(t, addr, clientcreds.Config{Token: "not-a-token"})
			if status.Code(err) != codes.Unauthenticated || errors.Is(err, serverinfo.ErrNotServed) {
				t.Errorf("Lookup with an unknown token = %v, want Unauthenticated", err)
			}
			wantCalls := []string{serverinfo.GetMethod + " anonymous", serverinfo.GetMethod + " admin"}
			if diff := cmp.Diff(wantCalls, rec.list()); diff != "" {
				t.Errorf("calls past the interceptors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLookupNotServed: a server without the service (an older release)
// is ErrNotServed, which keeps the gRPC status.
func TestLookupNotServed(t *testing.T) {
	addr, _ := serve(t, func(*grpc.Server) {})
	_, err := lookup(t, addr, clientcreds.Config{})
	if !errors.Is(err, serverinfo.ErrNotServed) || status.Code(err) != codes.Unimplemented {
		t.Fatalf("Lookup against a server without ServerInfo = %v, want ErrNotServed (Unimplemented)", err)
	}
}

func TestHTTPAddrFor(t *testing.T) {
	for _, tc := range []struct {
		name, http, target string
		want               string // "" : an error containing wantErr
		wantErr            string
	}{
		{"emptyHost", ":18080", "spillway.example.org:18000", "spillway.example.org:18080", ""},
		{"ipv4Wildcard", "0.0.0.0:18080", "10.0.0.5:18000", "10.0.0.5:18080", ""},
		{"ipv6Wildcard", "[::]:18080", "spillway.example.org:18000", "spillway.example.org:18080", ""},
		{"ipv6WildcardIPv6Target", "[::]:18080", "[2001:db8::1]:18000", "[2001:db8::1]:18080", ""},
		{"mappedWildcard", "[::ffff:0.0.0.0]:18080", "10.0.0.5:18000", "10.0.0.5:18080", ""},
		{"wildcardLoopbackTarget", "[::]:18080", "127.0.0.1:18000", "127.0.0.1:18080", ""},
		{"wildcardPortOnlyTarget", "[::]:18080", ":18000", "localhost:18080", ""},
		{"specificHost", "10.0.0.9:8080", "spillway.example.org:18000", "10.0.0.9:8080", ""},
		{"specificName", "admin.example.org:8080", "10.0.0.5:18000", "admin.example.org:8080", ""},
		{"loopbackLocalTarget", "127.0.0.1:18080", "localhost:18000", "127.0.0.1:18080", ""},
		{"ipv6LoopbackLocalTarget", "[::1]:18080", "127.0.0.1:18000", "[::1]:18080", ""},
		{"loopbackRemoteTarget", "127.0.0.1:18080", "spillway.example.org:18000", "spillway.example.org:18080", ""},
		{"dnsTarget", "[::]:18080", "dns:///spillway.example.org:18000", "spillway.example.org:18080", ""},
		{"dnsAuthorityTarget", "[::]:18080", "dns://8.8.8.8/spillway.example.org:18000", "spillway.example.org:18080", ""},
		{"passthroughTarget", "[::]:18080", "passthrough:///10.0.0.5:18000", "10.0.0.5:18080", ""},
		{"targetWithoutPort", "[::]:18080", "spillway.example.org", "spillway.example.org:18080", ""},
		{"unixTarget", "[::]:18080", "unix:///run/spillway.sock", "", "has no host"},
		{"unixRelativeTarget", "[::]:18080", "unix:spillway.sock", "", "has no host"},
		{"unixTargetSpecificHost", "10.0.0.9:8080", "unix:spillway.sock", "10.0.0.9:8080", ""},
		{"notReported", "", "10.0.0.5:18000", "", "reported no HTTP address"},
		{"noPort", "10.0.0.9", "10.0.0.5:18000", "", `"10.0.0.9", want host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serverinfo.Info{HTTPAddr: tc.http}.HTTPAddrFor(tc.target)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("HTTPAddrFor(%q) with HTTPAddr %q = %q, %v; want an error with %q", tc.target, tc.http, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("HTTPAddrFor(%q) with HTTPAddr %q = %q, %v; want %q", tc.target, tc.http, got, err, tc.want)
			}
		})
	}
}

package authn

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const spiffePayments = "spiffe://example.org/ns/prod/sa/payments"

func testTokens(t *testing.T) *TokenSet {
	t.Helper()
	set, err := ParseTokens("t.yaml", []byte(tokensYAML("vm-payments", "tok-vm")))
	if err != nil {
		t.Fatal(err)
	}
	set, err = set.WithAdmin("tok-admin")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestAuthenticate(t *testing.T) {
	a := NewAuthenticator(testTokens(t), nil)
	cert := chainOf([]string{spiffePayments})
	unverified := tls.ConnectionState{PeerCertificates: cert.PeerCertificates}
	noName := chainOf(nil)
	tests := []struct {
		name       string
		state      *tls.ConnectionState
		header     []string
		want       Identity
		wantErr    string
		wantErrSub bool
	}{
		{name: "plaintext_anonymous", want: Identity{Method: None}},
		{name: "tls_without_cert_anonymous", state: &tls.ConnectionState{}, want: Identity{Method: None}},
		{name: "certificate", state: &cert, want: Identity{Name: spiffePayments, Method: Certificate}},
		{name: "certificate_wins_over_token", state: &cert, header: []string{"Bearer tok-vm"}, want: Identity{Name: spiffePayments, Method: Certificate}},
		{name: "certificate_wins_over_bad_token", state: &cert, header: []string{"Bearer nope"}, want: Identity{Name: spiffePayments, Method: Certificate}},
		{name: "unverified_certificate_falls_to_token", state: &unverified, header: []string{"Bearer tok-vm"}, want: Identity{Name: "vm-payments", Method: Token}},
		{name: "unverified_certificate_anonymous", state: &unverified, want: Identity{Method: None}},
		{name: "verified_certificate_without_name", state: &noName, header: []string{"Bearer tok-vm"}, wantErr: "certificate: no URI or DNS SAN to take the identity from"},
		{name: "token", header: []string{"Bearer tok-vm"}, want: Identity{Name: "vm-payments", Method: Token}},
		{name: "token_scheme_any_case", header: []string{"bearer  tok-vm "}, want: Identity{Name: "vm-payments", Method: Token}},
		{name: "admin_token", header: []string{"Bearer tok-admin"}, want: Identity{Name: AdminIdentity, Method: Token}},
		{name: "unknown_token", header: []string{"Bearer nope"}, wantErr: "authorization: unknown token"},
		{name: "basic_scheme", header: []string{"Basic dXNlcjpwdw=="}, wantErr: `authorization: want "Bearer <token>"`},
		{name: "no_token", header: []string{"Bearer "}, wantErr: `authorization: want "Bearer <token>"`},
		{name: "two_words", header: []string{"Bearer a b"}, wantErr: "authorization: the token has whitespace inside"},
		{name: "twice", header: []string{"Bearer tok-vm", "Bearer tok-vm"}, wantErr: "authorization: given 2 times, want one"},
		{name: "huge", header: []string{"Bearer " + strings.Repeat("x", MaxTokenLen+1)}, wantErr: "authorization: token of 4097 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := a.Authenticate(tt.state, tt.header)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || !errors.Is(err, ErrUnauthenticated) {
					t.Fatalf("Authenticate = %v, %v; want error %q", id, err, tt.wantErr)
				}
				return
			}
			if err != nil || id != tt.want {
				t.Fatalf("Authenticate = %+v, %v; want %+v", id, err, tt.want)
			}
		})
	}
	// Without tokens every bearer token is unknown.
	// Without tokens every bearer token is unknown, and the error says how
	// to give the server some.
	for _, tokens := range []TokenLookup{nil, &TokenSet{}} {
		_, err := NewAuthenticator(tokens, nil).Authenticate(nil, []string{"Bearer tok-vm"})
		if err == nil || !strings.HasPrefix(err.Error(), "authorization: unknown token: this server has no tokens") || !strings.Contains(err.Error(), "--admin-token-file") {
			t.Errorf("no tokens (%T): Authenticate = %v, want unknown token naming --admin-token-file", tokens, err)
		}
	}
}

// whoService answers the caller's identity as "NAME|METHOD", unary and
// streaming, so the tests see what the interceptors put in the context.
var whoService = grpc.ServiceDesc{
	ServiceName: "test.Who",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Who",
		Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) { return whoAmI(ctx), nil }
			if interceptor == nil {
				return h(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Who/Who"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "WhoStream",
		ServerStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return ss.SendMsg(whoAmI(ss.Context()))
		},
	}},
}

func whoAmI(ctx context.Context) *wrapperspb.StringValue {
	id := FromContext(ctx)
	return wrapperspb.String(id.String() + "|" + string(id.Method))
}

// startWho serves whoService on 127.0.0.1 with a's interceptors, over
// TLS when tlsCfg is non-nil.
func startWho(t *testing.T, a *Authenticator, tlsCfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(a.StreamServerInterceptor())}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&whoService, struct{}{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// askWho calls Who and WhoStream and returns both answers (or the
// first error).
func askWho(t *testing.T, addr string, creds credentials.TransportCredentials, token string) (unary, stream string, err error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, "/test.Who/Who", wrapperspb.String("?"), out); err != nil {
		return "", "", err
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Who/WhoStream")
	if err != nil {
		return "", "", err
	}
	if err := s.SendMsg(wrapperspb.String("?")); err != nil {
		return "", "", err
	}
	s.CloseSend()
	sout := new(wrapperspb.StringValue)
	if err := s.RecvMsg(sout); err != nil {
		return out.Value, "", err
	}
	return out.Value, sout.Value, nil
}

func TestInterceptorsTLS(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	a := NewAuthenticator(testTokens(t), nil)
	// optional client certificates: token callers without one get in.
	addr := startWho(t, a, ca.serverTLS(t, tls.VerifyClientCertIfGiven))
	// RequestClientCert takes a certificate without verifying it: it must
	// not count.
	unverifiedAddr := startWho(t, a, ca.serverTLS(t, tls.RequestClientCert))
	uriCert := ca.leaf(t, []string{spiffePayments}, "payments.example.org")
	dnsCert := ca.leaf(t, nil, "payments.example.org")
	otherCert := other.leaf(t, []string{"spiffe://evil.org/sa/payments"})

	tests := []struct {
		name     string
		addr     string
		cert     *tls.Certificate
		token    string
		want     string
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "uri_san", addr: addr, cert: &uriCert, want: spiffePayments + "|certificate"},
		{name: "dns_san", addr: addr, cert: &dnsCert, want: "payments.example.org|certificate"},
		{name: "certificate_wins", addr: addr, cert: &uriCert, token: "nope", want: spiffePayments + "|certificate"},
		{name: "token", addr: addr, token: "tok-vm", want: "vm-payments|token"},
		{name: "admin_token", addr: addr, token: "tok-admin", want: "admin|token"},
		{name: "unknown_token", addr: addr, token: "nope", wantCode: codes.Unauthenticated, wantMsg: "authorization: unknown token"},
		{name: "anonymous", addr: addr, want: "anonymous|none"},
		{name: "unverified_certificate_is_anonymous", addr: unverifiedAddr, cert: &otherCert, want: "anonymous|none"},
		{name: "unverified_certificate_token", addr: unverifiedAddr, cert: &otherCert, token: "tok-vm", want: "vm-payments|token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, s, err := askWho(t, tt.addr, credentials.NewTLS(ca.clientTLS(tt.cert)), tt.token)
			if tt.wantCode != codes.OK {
				st := status.Convert(err)
				if st.Code() != tt.wantCode || st.Message() != tt.wantMsg {
					t.Fatalf("call = %v, want %v %q", err, tt.wantCode, tt.wantMsg)
				}
				return
			}
			if err != nil || u != tt.want || s != tt.want {
				t.Fatalf("unary %q, stream %q, err %v; want %q", u, s, err, tt.want)
			}
		})
	}
	t.Run("other_ca_refused_in_handshake", func(t *testing.T) {
		if _, _, err := askWho(t, addr, credentials.NewTLS(ca.clientTLS(&otherCert)), ""); status.Code(err) != codes.Unavailable {
			t.Errorf("certificate of another CA: %v, want Unavailable (handshake refused)", err)
		}
	})
}

func TestInterceptorsPlaintext(t *testing.T) {
	addr := startWho(t, NewAuthenticator(testTokens(t), nil), nil)
	if u, s, err := askWho(t, addr, insecure.NewCredentials(), "tok-vm"); err != nil || u != "vm-payments|token" || s != u {
		t.Errorf("token over plaintext = %q %q %v, want vm-payments|token", u, s, err)
	}
	_, _, err := askWho(t, addr, insecure.NewCredentials(), "nope")
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != "authorization: unknown token" {
		t.Errorf("unknown token = %v, want Unauthenticated", err)
	}
}

func TestMiddleware(t *testing.T) {
	ca := newTestCA(t)
	a := NewAuthenticator(testTokens(t), nil)
	h := a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := FromContext(r.Context())
		// The header stays for handlers that still check the admin
		// token themselves.
		io.WriteString(w, id.String()+"|"+string(id.Method)+"|"+r.Header.Get("Authorization"))
	}))
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = ca.serverTLS(t, tls.VerifyClientCertIfGiven)
	srv.StartTLS()
	defer srv.Close()
	plain := httptest.NewServer(h)
	defer plain.Close()
	uriCert := ca.leaf(t, []string{spiffePayments})

	tests := []struct {
		name     string
		url      string
		cert     *tls.Certificate
		header   string
		wantCode int
		wantBody string
	}{
		{"certificate", srv.URL, &uriCert, "", 200, spiffePayments + "|certificate|"},
		{"certificate_wins", srv.URL, &uriCert, "Bearer nope", 200, spiffePayments + "|certificate|Bearer nope"},
		{"token_over_tls", srv.URL, nil, "Bearer tok-vm", 200, "vm-payments|token|Bearer tok-vm"},
		{"admin_token_passes_through", plain.URL, nil, "Bearer tok-admin", 200, "admin|token|Bearer tok-admin"},
		{"anonymous", plain.URL, nil, "", 200, "anonymous|none|"},
		{"unknown_token", plain.URL, nil, "Bearer nope", 401, `{"error":"authorization: unknown token","field":"authorization","code":401}`},
		{"bad_scheme", plain.URL, nil, "Token x", 401, `{"error":"authorization: want \"Bearer \u003ctoken\u003e\"","field":"authorization","code":401}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := plain.Client()
			if tt.url == srv.URL {
				client = &http.Client{Transport: &http.Transport{TLSClientConfig: ca.clientTLS(tt.cert)}}
				defer client.CloseIdleConnections()
			}
			req, _ := http.NewRequest("GET", tt.url+"/v1/services", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode || strings.TrimSpace(string(body)) != tt.wantBody {
				t.Fatalf("GET = %d %s, want %d %s", resp.StatusCode, body, tt.wantCode, tt.wantBody)
			}
			if resp.StatusCode == 401 {
				var e struct{ Error string }
				if json.Unmarshal(body, &e) != nil || resp.Header.Get("WWW-Authenticate") != "Bearer" {
					t.Errorf("401 body %s, WWW-Authenticate %q; want JSON and Bearer", body, resp.Header.Get("WWW-Authenticate"))
				}
			}
		})
	}
}

// FuzzBearer: ParseBearer never panics; a token it returns is one
// bounded word, and an error names the authorization header.
func FuzzBearer(f *testing.F) {
	f.Add("Bearer tok-vm")
	f.Add("bearer   x  ")
	f.Add("Basic a")
	f.Add("Bearer a b")
	f.Add("")
	a := NewAuthenticator(nil, nil)
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := ParseBearer(h)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "authorization: ") || !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("ParseBearer(%q) error %q", h, err)
			}
			return
		}
		if tok == "" || len(tok) > MaxTokenLen || strings.ContainsAny(tok, " \t\r\n") {
			t.Fatalf("ParseBearer(%q) = %q", h, tok)
		}
		if _, err := a.Authenticate(nil, []string{h}); err == nil {
			t.Fatalf("Authenticate(%q) without tokens = nil error", h)
		}
	})
}

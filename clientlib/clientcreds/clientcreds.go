// Package clientcreds is how a client of spillway's gRPC and HTTP ports
// proves who it is and checks it talks to spillway: TLS with a CA bundle
// and an optional client certificate (mTLS), and/or a bearer token read
// from a file. The heartbeat agent, the utilization reporter and
// spillwayctl use it.
//
// # Usage
//
//	c := clientcreds.Config{CA: "spillway-ca.crt", Cert: "vm.crt", Key: "vm.key", TokenFile: ""}
//	opts, err := c.DialOptions()          // for grpc.NewClient, heartbeat.Config.DialOptions, utilization.Reporter.DialOptions
//	hc, err := c.HTTPClient()             // for https:// requests; adds "Authorization: Bearer" when a token is set
//
// The certificate files are read again before every new connection, so a
// rotated client certificate or CA bundle applies to the next one; the
// token file is read at every call. A token is sent in plaintext when TLS
// is off: use it over TLS unless on loopback.
//
// # Concurrency
//
// Config is a value; what it returns is safe for concurrent use.
package clientcreds

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/security/tlsconfig"
)

// Config says how to reach spillway. The zero value is plaintext without
// a token.
type Config struct {
	// TLS turns TLS on; it is implied by CA, Cert or Key.
	TLS bool
	// CA is the PEM bundle that signs spillway's server certificate; ""
	// trusts the system roots.
	CA string
	// Cert and Key are the PEM client certificate and key (both or
	// neither), for a spillway started with --client-ca.
	Cert, Key string
	// ServerName overrides the name the server certificate must hold;
	// "" means the host dialled.
	ServerName string
	// TokenFile holds a bearer token (surrounding whitespace ignored),
	// read at every call; "" sends Token instead.
	TokenFile string
	// Token is a bearer token given directly (e.g. from a flag or the
	// environment); ignored when TokenFile is set.
	Token string
}

// TLSOn reports whether connections use TLS.
func (c Config) TLSOn() bool { return c.TLS || c.CA != "" || c.Cert != "" || c.Key != "" }

// HasToken reports whether a bearer token is sent.
func (c Config) HasToken() bool { return c.TokenFile != "" || c.Token != "" }

func (c Config) reloader() (*tlsconfig.Reloader, error) {
	files := tlsconfig.Files{CA: c.CA, Cert: c.Cert, Key: c.Key}
	if files.Empty() {
		return nil, nil
	}
	r, err := tlsconfig.New(tlsconfig.Config{Files: files})
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return r, nil
}

// TransportCredentials are the gRPC credentials: TLS (reloading the
// files for each new connection) or insecure.
func (c Config) TransportCredentials() (credentials.TransportCredentials, error) {
	if !c.TLSOn() {
		return insecure.NewCredentials(), nil
	}
	r, err := c.reloader()
	if err != nil {
		return nil, err
	}
	if r == nil { // TLS with the system roots, no client certificate
		return credentials.NewTLS(tlsconfig.ClientOptions{ServerName: c.ServerName}.Config()), nil
	}
	return r.TransportCredentials(tlsconfig.ClientOptions{ServerName: c.ServerName}), nil
}

// DialOptions are the grpc.NewClient options: the transport credentials
// and, with a token, per-RPC "authorization: Bearer" credentials.
func (c Config) DialOptions() ([]grpc.DialOption, error) {
	tc, err := c.TransportCredentials()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(tc)}
	if c.HasToken() {
		if err := c.checkToken(); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{c}))
	}
	return opts, nil
}

// HTTPClient is an *http.Client that speaks TLS per c (when on) and adds
// "Authorization: Bearer" to every request when a token is set. Its CA
// roots are those of the files now; its client certificate is read at
// each handshake.
func (c Config) HTTPClient() (*http.Client, error) {
	t := &http.Transport{ForceAttemptHTTP2: true, Proxy: http.ProxyFromEnvironment}
	if c.TLSOn() {
		r, err := c.reloader()
		if err != nil {
			return nil, err
		}
		if r == nil {
			t.TLSClientConfig = tlsconfig.ClientOptions{ServerName: c.ServerName}.Config()
		} else {
			t.TLSClientConfig = r.ClientConfig(tlsconfig.ClientOptions{ServerName: c.ServerName})
		}
	}
	var rt http.RoundTripper = t
	if c.HasToken() {
		if err := c.checkToken(); err != nil {
			return nil, err
		}
		rt = bearerTransport{c: c, next: t}
	}
	return &http.Client{Transport: rt}, nil
}

// Scheme is "https" with TLS, else "http".
func (c Config) Scheme() string {
	if c.TLSOn() {
		return "https"
	}
	return "http"
}

var errEmptyToken = errors.New("token: empty")

func (c Config) checkToken() error {
	_, err := c.token()
	return err
}

// token is the bearer token to send.
func (c Config) token() (string, error) {
	if c.TokenFile == "" {
		if t := strings.TrimSpace(c.Token); t != "" {
			return t, nil
		}
		return "", errEmptyToken
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("token file %s: empty", c.TokenFile)
	}
	return t, nil
}

// bearer is per-RPC "authorization: Bearer TOKEN" credentials.
type bearer struct{ c Config }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	t, err := b.c.token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + t}, nil
}

// RequireTransportSecurity is false so a token also works on plaintext
// loopback (the legacy admin token did); see the package doc.
func (b bearer) RequireTransportSecurity() bool { return false }

type bearerTransport struct {
	c    Config
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t, err := b.c.token()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t)
	return b.next.RoundTrip(req)
}

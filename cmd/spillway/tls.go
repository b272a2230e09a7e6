package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/tlsconfig"
)

// TLSConfig is TLS on the gRPC and HTTP listeners (the same certificate
// for both); DNS stays plaintext. The zero value is plaintext.
type TLSConfig struct {
	// Cert and Key are the PEM server certificate and key files (both or
	// neither); set, both listeners speak only TLS.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ClientCA is the PEM bundle client certificates must chain to; it
	// is also the root pool this replica trusts when it dials other
	// replicas (the load exchange). "" asks for no client certificate.
	ClientCA string `yaml:"client_ca"`
	// ClientAuth is "require" (the default with ClientCA) or "optional"
	// (a caller may come without a certificate, e.g. with a token; one it
	// presents must chain to ClientCA).
	ClientAuth string `yaml:"client_auth"`
	// MinVersion is "1.2" (the default) or "1.3".
	MinVersion string `yaml:"min_version"`
	// Reload is how often the files are read again for a rotation
	// (default 2s): a new connection uses rotated files at most this long
	// after they are written.
	Reload time.Duration `yaml:"reload"`
}

func defaultTLSConfig() TLSConfig {
	return TLSConfig{MinVersion: "1.2", Reload: tlsconfig.DefaultInterval}
}

// on reports whether the listeners speak TLS.
func (t TLSConfig) on() bool { return t.Cert != "" }

// validate names the flag (and YAML key) of the first bad value.
func (t TLSConfig) validate() error {
	switch {
	case t.Cert != "" && t.Key == "":
		return errors.New("--tls-key (tls.key): needed with --tls-cert")
	case t.Key != "" && t.Cert == "":
		return errors.New("--tls-cert (tls.cert): needed with --tls-key")
	case t.ClientCA != "" && t.Cert == "":
		return errors.New("--client-ca (tls.client_ca): verifying client certificates needs --tls-cert and --tls-key")
	case t.ClientAuth != "" && t.ClientCA == "":
		return fmt.Errorf("--client-auth (tls.client_auth): %q needs --client-ca", t.ClientAuth)
	case t.Reload < 100*time.Millisecond:
		return fmt.Errorf("--tls-reload (tls.reload): %v, want at least 100ms", t.Reload)
	}
	if t.ClientAuth != "" {
		if _, err := tlsconfig.ParseClientAuth(t.ClientAuth); err != nil {
			return fmt.Errorf("--client-auth (tls.client_auth): %w", err)
		}
	}
	if _, err := tlsconfig.ParseVersion(t.MinVersion); err != nil {
		return fmt.Errorf("--tls-min-version (tls.min_version): %w", err)
	}
	for _, f := range []struct{ name, path string }{
		{"--tls-cert (tls.cert)", t.Cert}, {"--tls-key (tls.key)", t.Key}, {"--client-ca (tls.client_ca)", t.ClientCA},
	} {
		if f.path == "" {
			continue
		}
		fh, err := os.Open(f.path)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		fh.Close()
	}
	return nil
}

// serverTLS is the running TLS of the listeners; nil when plaintext.
type serverTLS struct {
	reloader *tlsconfig.Reloader
	grpc     *tls.Config
	http     *tls.Config
	min      uint16
}

// startTLS loads the files (validated by TLSConfig.validate); nil, nil
// when TLS is off.
func startTLS(t TLSConfig, reg prometheus.Registerer, log *slog.Logger) (*serverTLS, error) {
	if !t.on() {
		return nil, nil
	}
	r, err := tlsconfig.New(tlsconfig.Config{
		Files:    tlsconfig.Files{Cert: t.Cert, Key: t.Key, CA: t.ClientCA},
		Interval: t.Reload, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key, --client-ca (tls): %w", err)
	}
	min, _ := tlsconfig.ParseVersion(t.MinVersion)
	auth := tlsconfig.NoClientCert
	if t.ClientCA != "" {
		auth = tlsconfig.RequireClientCert
		if t.ClientAuth != "" {
			auth, _ = tlsconfig.ParseClientAuth(t.ClientAuth)
		}
	}
	s := &serverTLS{reloader: r, min: min}
	if s.grpc, err = r.ServerConfig(tlsconfig.ServerOptions{ClientAuth: auth, MinVersion: min, NextProtos: []string{"h2"}}); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if s.http, err = r.ServerConfig(tlsconfig.ServerOptions{ClientAuth: auth, MinVersion: min, NextProtos: []string{"h2", "http/1.1"}}); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	log.Info("tls on the grpc and http listeners", "cert", t.Cert, "client_ca", t.ClientCA, "client_auth", auth.String(), "min_version", t.MinVersion, "reload", t.Reload)
	return s, nil
}

// grpcOptions adds the server credentials (none when plaintext).
func (s *serverTLS) grpcOptions(opts []grpc.ServerOption) []grpc.ServerOption {
	if s == nil {
		return opts
	}
	return append(opts, grpc.Creds(credentials.NewTLS(s.grpc)))
}

// peerCreds are the credentials this replica dials other replicas with:
// its own certificate as client certificate and --client-ca as roots
// (the system roots without it); plaintext when TLS is off.
func (s *serverTLS) peerCreds() credentials.TransportCredentials {
	if s == nil {
		return insecure.NewCredentials()
	}
	return s.reloader.TransportCredentials(tlsconfig.ClientOptions{MinVersion: s.min})
}

// peerIdentity is the identity other replicas see when this one dials
// them (peerCreds): its certificate's, by authn.FromTLS's rule; "" when
// TLS is off or the certificate names none (then a verifying replica
// takes no load summaries from this one, and the log says so). A
// rotation to a certificate of another identity needs a restart.
func (s *serverTLS) peerIdentity(log *slog.Logger) string {
	if s == nil {
		return ""
	}
	c := s.reloader.Certificate()
	leaf := c.Leaf
	if leaf == nil && len(c.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	if leaf == nil {
		return ""
	}
	id, err := authn.FromCertificate(leaf)
	if err != nil {
		log.Warn("--tls-cert names no identity for the member record: replicas verifying client certificates will refuse this one's load summaries", "err", err)
		return ""
	}
	return id.Name
}

// warnPlaintext logs a warning for a plaintext listener on an address
// other machines can reach.
func warnPlaintext(log *slog.Logger, listener string, addr net.Addr) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return
	}
	log.Warn("plaintext listener on a non-loopback address: set --tls-cert and --tls-key", "listener", listener, "addr", addr.String())
}

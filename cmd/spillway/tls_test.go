package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/security/tlsconfig"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

// TestParseTLSConfig: the TLS flags and YAML keys, and validation errors
// that name the flag.
func TestParseTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	files := ca.Issue(t, tlstest.Leaf{IPs: []netip.Addr{tlstest.Loopback}}).WriteFiles(t, dir, "srv", ca)
	yml := filepath.Join(dir, "tls.yaml")
	if err := os.WriteFile(yml, []byte("tls:\n  cert: "+files.Cert+"\n  key: "+files.Key+"\n  client_ca: "+files.CA+"\n  client_auth: optional\n  min_version: \"1.3\"\n  reload: 500ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	pair := []string{"--tls-cert", files.Cert, "--tls-key", files.Key}
	for _, tc := range []struct {
		name    string
		args    []string
		want    TLSConfig
		wantErr string
	}{
		{name: "default_plaintext", want: TLSConfig{MinVersion: "1.2", Reload: 2 * time.Second}},
		{name: "flags", args: append(pair, "--client-ca", files.CA, "--client-auth", "require", "--tls-min-version", "1.3", "--tls-reload", "1s"),
			want: TLSConfig{Cert: files.Cert, Key: files.Key, ClientCA: files.CA, ClientAuth: "require", MinVersion: "1.3", Reload: time.Second}},
		{name: "yaml", args: []string{"--config", yml},
			want: TLSConfig{Cert: files.Cert, Key: files.Key, ClientCA: files.CA, ClientAuth: "optional", MinVersion: "1.3", Reload: 500 * time.Millisecond}},
		{name: "flag_beats_yaml", args: []string{"--config", yml, "--client-auth", "require"},
			want: TLSConfig{Cert: files.Cert, Key: files.Key, ClientCA: files.CA, ClientAuth: "require", MinVersion: "1.3", Reload: 500 * time.Millisecond}},
		{name: "cert_without_key", args: []string{"--tls-cert", files.Cert}, wantErr: "--tls-key (tls.key): needed with --tls-cert"},
		{name: "key_without_cert", args: []string{"--tls-key", files.Key}, wantErr: "--tls-cert (tls.cert): needed with --tls-key"},
		{name: "client_ca_without_cert", args: []string{"--client-ca", files.CA}, wantErr: "--client-ca (tls.client_ca): verifying client certificates needs --tls-cert"},
		{name: "client_auth_without_ca", args: append(pair, "--client-auth", "optional"), wantErr: "--client-auth (tls.client_auth): \"optional\" needs --client-ca"},
		{name: "bad_client_auth", args: append(pair, "--client-ca", files.CA, "--client-auth", "maybe"), wantErr: "--client-auth (tls.client_auth): \"maybe\": want require or optional"},
		{name: "bad_version", args: append(pair, "--tls-min-version", "1.1"), wantErr: "--tls-min-version (tls.min_version): \"1.1\": want 1.2 or 1.3"},
		{name: "bad_reload", args: append(pair, "--tls-reload", "1ms"), wantErr: "--tls-reload (tls.reload)"},
		{name: "unreadable_cert", args: []string{"--tls-cert", missing, "--tls-key", files.Key}, wantErr: "--tls-cert (tls.cert): open " + missing},
		{name: "unreadable_key", args: []string{"--tls-cert", files.Cert, "--tls-key", missing}, wantErr: "--tls-key (tls.key): open " + missing},
		{name: "unreadable_ca", args: append(pair, "--client-ca", missing), wantErr: "--client-ca (tls.client_ca): open " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseConfig error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.TLS != tc.want {
				t.Fatalf("TLS = %+v, want %+v", cfg.TLS, tc.want)
			}
		})
	}
}

// TestStartTLS: client authentication follows --client-ca and
// --client-auth; a key that does not match its certificate fails the
// start naming the flags.
func TestStartTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	files := ca.Issue(t, tlstest.Leaf{IPs: []netip.Addr{tlstest.Loopback}}).WriteFiles(t, dir, "srv", ca)
	other := ca.Issue(t, tlstest.Leaf{}).WriteFiles(t, dir, "other")
	for _, tc := range []struct {
		name     string
		cfg      TLSConfig
		wantAuth string // the tls.ClientAuthType a handshake uses
		wantErr  string
	}{
		{name: "off", cfg: TLSConfig{}},
		{name: "server_only", cfg: TLSConfig{Cert: files.Cert, Key: files.Key, MinVersion: "1.2"}, wantAuth: "NoClientCert"},
		{name: "mtls_default_require", cfg: TLSConfig{Cert: files.Cert, Key: files.Key, ClientCA: files.CA, MinVersion: "1.2"}, wantAuth: "RequireAndVerifyClientCert"},
		{name: "mtls_optional", cfg: TLSConfig{Cert: files.Cert, Key: files.Key, ClientCA: files.CA, ClientAuth: "optional", MinVersion: "1.3"}, wantAuth: "VerifyClientCertIfGiven"},
		{name: "mismatched_key", cfg: TLSConfig{Cert: files.Cert, Key: other.Key, MinVersion: "1.2"}, wantErr: "--tls-cert, --tls-key, --client-ca (tls): certificate file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := startTLS(tc.cfg, nil, slog.New(slog.DiscardHandler))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("startTLS error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantAuth == "" {
				if s != nil {
					t.Fatal("startTLS without files = non-nil")
				}
				return
			}
			for _, c := range []struct {
				name string
				cfg  *tls.Config
				alpn []string
			}{{"grpc", s.grpc, []string{"h2"}}, {"http", s.http, []string{"h2", "http/1.1"}}} {
				hs, err := c.cfg.GetConfigForClient(nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := hs.ClientAuth.String(); got != tc.wantAuth {
					t.Errorf("%s ClientAuth = %s, want %s", c.name, got, tc.wantAuth)
				}
				if got := strings.Join(hs.NextProtos, ","); got != strings.Join(c.alpn, ",") {
					t.Errorf("%s NextProtos = %s, want %v", c.name, got, c.alpn)
				}
				want, _ := tlsconfig.ParseVersion(tc.cfg.MinVersion)
				if hs.MinVersion != want {
					t.Errorf("%s MinVersion = %x, want %x", c.name, hs.MinVersion, want)
				}
			}
		})
	}
}

// TestWarnPlaintext: a plaintext listener on a non-loopback address is
// warned about, one on loopback is not.
func TestWarnPlaintext(t *testing.T) {
	for _, tc := range []struct {
		addr string
		warn bool
	}{
		{"127.0.0.1:18000", false},
		{"[::1]:18000", false},
		{"0.0.0.0:18000", true},
		{"10.1.2.3:18000", true},
	} {
		var buf bytes.Buffer
		ap := netip.MustParseAddrPort(tc.addr)
		warnPlaintext(slog.New(slog.NewTextHandler(&buf, nil)), "grpc", net.TCPAddrFromAddrPort(ap))
		if got := strings.Contains(buf.String(), "plaintext listener on a non-loopback address"); got != tc.warn {
			t.Errorf("%s: warned = %v, want %v (%q)", tc.addr, got, tc.warn, buf.String())
		}
	}
}

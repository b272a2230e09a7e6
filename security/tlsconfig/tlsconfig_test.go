package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spillway/spillway/security/tlsconfig"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

func serverLeaf(t *testing.T, ca *tlstest.CA) *tlstest.Cert {
	return ca.Issue(t, tlstest.Leaf{DNS: []string{"localhost"}, IPs: []netip.Addr{tlstest.Loopback}})
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	good := serverLeaf(t, ca).WriteFiles(t, dir, "good", ca)
	other := serverLeaf(t, ca).WriteFiles(t, dir, "other")
	garbage := filepath.Join(dir, "garbage.pem")
	tlstest.WriteFile(t, garbage, []byte("not a pem file\n"))
	missing := filepath.Join(dir, "missing.pem")

	for _, tc := range []struct {
		name  string
		files tlsconfig.Files
		want  string // substring of the error
	}{
		{"nothing", tlsconfig.Files{}, "files: no certificate"},
		{"cert_without_key", tlsconfig.Files{Cert: good.Cert}, "go together"},
		{"key_without_cert", tlsconfig.Files{Key: good.Key}, "go together"},
		{"missing_cert", tlsconfig.Files{Cert: missing, Key: good.Key}, "certificate file: open " + missing},
		{"missing_ca", tlsconfig.Files{CA: missing}, "ca file: open " + missing},
		{"garbage_cert", tlsconfig.Files{Cert: garbage, Key: good.Key}, "certificate file " + garbage},
		{"key_of_other_cert", tlsconfig.Files{Cert: good.Cert, Key: other.Key}, "private key does not match"},
		{"garbage_ca", tlsconfig.Files{CA: garbage}, "ca file " + garbage + ": no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsconfig.New(tlsconfig.Config{Files: tc.files})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := tlsconfig.New(tlsconfig.Config{Files: good}); err != nil {
		t.Fatalf("New(good files) = %v", err)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		auth    tlsconfig.ClientAuth
		version uint16
		authErr bool
		verErr  bool
	}{
		{in: "require", auth: tlsconfig.RequireClientCert, verErr: true},
		{in: "optional", auth: tlsconfig.VerifyClientCertIfGiven, verErr: true},
		{in: "1.2", version: tls.VersionTLS12, authErr: true},
		{in: "1.3", version: tls.VersionTLS13, authErr: true},
		{in: "1.1", authErr: true, verErr: true},
		{in: "", authErr: true, verErr: true},
	} {
		a, err := tlsconfig.ParseClientAuth(tc.in)
		if (err != nil) != tc.authErr || (err == nil && a != tc.auth) {
			t.Errorf("ParseClientAuth(%q) = %v, %v", tc.in, a, err)
		}
		v, err := tlsconfig.ParseVersion(tc.in)
		if (err != nil) != tc.verErr || (err == nil && v != tc.version) {
			t.Errorf("ParseVersion(%q) = %v, %v", tc.in, v, err)
		}
	}
}

// TestReloadBadFileKeepsOld: a broken rewrite keeps the old material, is
// counted once however often it is polled, and a good rewrite after it
// is loaded.
func TestReloadBadFileKeepsOld(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := serverLeaf(t, ca)
	files := first.WriteFiles(t, dir, "srv", ca)
	reg := prometheus.NewRegistry()
	r, err := tlsconfig.New(tlsconfig.Config{Files: files, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	failures := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "spillway_tls_reload_failures_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1
	}
	if changed, err := r.Check(); changed || err != nil {
		t.Fatalf("Check of unchanged files = %v, %v; want false, nil", changed, err)
	}

	second := serverLeaf(t, ca)
	for i, step := range []struct {
		name         string
		write        func()
		wantErr      string
		wantSerial   *tlstest.Cert
		wantFailures float64
	}{
		{"garbage_cert", func() { tlstest.WriteFile(t, files.Cert, []byte("garbage")) }, "certificate file", first, 1},
		{"same_garbage_again", func() {}, "certificate file", first, 1},
		{"new_cert_old_key", func() { tlstest.WriteFile(t, files.Cert, second.CertPEM) }, "private key does not match", first, 2},
		{"key_too", func() { tlstest.WriteFile(t, files.Key, second.KeyPEM) }, "", second, 2},
		{"ca_removed", func() { os.Remove(files.CA) }, "ca file: open", second, 3},
		{"ca_empty", func() { tlstest.WriteFile(t, files.CA, nil) }, "no PEM certificate", second, 4},
		{"ca_back", func() { tlstest.WriteCA(t, files.CA, ca) }, "", second, 4},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.write()
			changed, err := r.Check()
			if step.wantErr == "" {
				if err != nil || (i == 3 && !changed) {
					t.Fatalf("Check = %v, %v; want a reload", changed, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), step.wantErr) || changed {
				t.Fatalf("Check = %v, %v; want false and an error containing %q", changed, err, step.wantErr)
			}
			if got := r.Certificate().Leaf.SerialNumber; got.Cmp(step.wantSerial.Cert.SerialNumber) != 0 {
				t.Errorf("certificate serial = %v, want %v", got, step.wantSerial.Cert.SerialNumber)
			}
			if r.CAPool() == nil {
				t.Errorf("CA pool = nil, want the old pool kept")
			}
			if got := failures(); got != step.wantFailures {
				t.Errorf("spillway_tls_reload_failures_total = %v, want %v", got, step.wantFailures)
			}
		})
	}
}

// TestRunPollsEveryInterval: Run picks up a rotation one Interval after
// it is written, not before.
func TestRunPollsEveryInterval(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	files := serverLeaf(t, ca).WriteFiles(t, dir, "srv", ca)
	next := serverLeaf(t, ca)
	synctest.Test(t, func(t *testing.T) {
		r, err := tlsconfig.New(tlsconfig.Config{Files: files, Interval: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go r.Run(ctx)
		next.WriteFiles(t, dir, "srv", ca)
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if got := r.Generation(); got != 1 {
			t.Fatalf("generation after 4s = %d, want 1 (no poll yet)", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := r.Generation(); got != 2 {
			t.Fatalf("generation after 5s = %d, want 2", got)
		}
		if got := r.Certificate().Leaf.SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
			t.Fatalf("serial = %v, want the rotated %v", got, next.Cert.SerialNumber)
		}
	})
}

// TestServerRotation: after the server certificate and the client-CA
// bundle are rotated, a new connection sees the new certificate, a client
// certificate of the old CA is refused and one of the new CA accepted,
// while a keep-alive connection opened before the rotation keeps working.
func TestServerRotation(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := tlstest.NewCA(t, "old"), tlstest.NewCA(t, "new")
	oldSrv := serverLeaf(t, oldCA)
	files := oldSrv.WriteFiles(t, dir, "srv", oldCA)
	r, err := tlsconfig.New(tlsconfig.Config{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig(tlsconfig.ServerOptions{ClientAuth: tlsconfig.RequireClientCert, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			io.WriteString(w, req.TLS.PeerCertificates[0].URIs[0].String())
		}),
		TLSConfig: cfg,
	}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()
	url := "https://" + ln.Addr().String() + "/"

	client := func(roots *x509.CertPool, leaf *tlstest.Cert) *http.Client {
		return &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{leaf.TLS}},
			ForceAttemptHTTP2: true,
		}}
	}
	get := func(c *http.Client) (string, *tls.ConnectionState, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), resp.TLS, err
	}
	oldVM := oldCA.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://example.org/ns/prod/sa/old"}})
	newVM := newCA.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://example.org/ns/prod/sa/new"}})

	kept := client(tlstest.Pool(oldCA), oldVM)
	if body, st, err := get(kept); err != nil || body != "spiffe://example.org/ns/prod/sa/old" || st.NegotiatedProtocol != "h2" {
		t.Fatalf("before rotation: %q, %v (%+v)", body, err, st)
	}
	if _, _, err := get(client(tlstest.Pool(oldCA), newVM)); err == nil {
		t.Fatal("before rotation: a client of the new CA was accepted")
	}

	newSrv := serverLeaf(t, newCA)
	newSrv.WriteFiles(t, dir, "srv", newCA)
	if changed, err := r.Check(); !changed || err != nil {
		t.Fatalf("Check after rotation = %v, %v", changed, err)
	}

	body, st, err := get(client(tlstest.Pool(newCA), newVM))
	if err != nil || body != "spiffe://example.org/ns/prod/sa/new" {
		t.Fatalf("new CA client after rotation: %q, %v", body, err)
	}
	if got := st.PeerCertificates[0].SerialNumber; got.Cmp(newSrv.Cert.SerialNumber) != 0 {
		t.Errorf("new connection's server certificate serial = %v, want the rotated %v", got, newSrv.Cert.SerialNumber)
	}
	if _, _, err := get(client(tlstest.Pool(oldCA, newCA), oldVM)); err == nil {
		t.Error("after rotation: a client certificate of the old CA was accepted on a new connection")
	}
	// The connection opened before the rotation is still up and still
	// presents the old certificate.
	body, st, err = get(kept)
	if err != nil || body != "spiffe://example.org/ns/prod/sa/old" {
		t.Fatalf("kept connection after rotation: %q, %v", body, err)
	}
	if got := st.PeerCertificates[0].SerialNumber; got.Cmp(oldSrv.Cert.SerialNumber) != 0 {
		t.Errorf("kept connection's server certificate serial = %v, want the old %v (same connection)", got, oldSrv.Cert.SerialNumber)
	}
}

// TestClientConfigPresentsCurrentCert: a client's certificate is read at
// each handshake, so a rotated client certificate is used by the next
// connection.
func TestClientConfigPresentsCurrentCert(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	srvR, err := tlsconfig.New(tlsconfig.Config{Files: serverLeaf(t, ca).WriteFiles(t, dir, "srv", ca)})
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := srvR.ServerConfig(tlsconfig.ServerOptions{ClientAuth: tlsconfig.RequireClientCert})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() == nil {
					io.WriteString(tc, tc.ConnectionState().PeerCertificates[0].URIs[0].String())
				}
			}()
		}
	}()
	cliFiles := ca.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://a"}}).WriteFiles(t, dir, "cli", ca)
	cli, err := tlsconfig.New(tlsconfig.Config{Files: cliFiles})
	if err != nil {
		t.Fatal(err)
	}
	who := func() string {
		c, err := tls.Dial("tcp", ln.Addr().String(), cli.ClientConfig(tlsconfig.ClientOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := who(); got != "spiffe://a" {
		t.Fatalf("identity = %q, want spiffe://a", got)
	}
	ca.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://b"}}).WriteFiles(t, dir, "cli", ca)
	if _, err := cli.Check(); err != nil {
		t.Fatal(err)
	}
	if got := who(); got != "spiffe://b" {
		t.Fatalf("identity after rotation = %q, want spiffe://b", got)
	}
}

// FuzzCheck: whatever bytes land in the certificate, key and CA files, a
// reload either loads them or keeps the old material; it never panics
// and never leaves the Reloader without a certificate.
func FuzzCheck(f *testing.F) {
	ca := tlstest.NewCA(f, "ca")
	leaf := ca.Issue(f, tlstest.Leaf{DNS: []string{"localhost"}})
	f.Add(leaf.CertPEM, leaf.KeyPEM, ca.PEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n"), leaf.KeyPEM, []byte{})
	f.Add(leaf.KeyPEM, leaf.CertPEM, leaf.CertPEM)
	dir := f.TempDir()
	files := leaf.WriteFiles(f, dir, "srv", ca)
	r, err := tlsconfig.New(tlsconfig.Config{Files: files})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cert, key, caPEM []byte) {
		tlstest.WriteFile(t, files.Cert, cert)
		tlstest.WriteFile(t, files.Key, key)
		tlstest.WriteFile(t, files.CA, caPEM)
		changed, err := r.Check()
		if changed && err != nil {
			t.Fatalf("Check = true, %v", err)
		}
		if r.Certificate() == nil || r.CAPool() == nil {
			t.Fatal("no material after a reload")
		}
		if changed {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				t.Fatalf("loaded a pair tls.X509KeyPair refuses: %v", err)
			}
		}
	})
}

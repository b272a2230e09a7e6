// Package tlstest makes throwaway certificate authorities and leaf
// certificates for tests: an ECDSA P-256 CA, leaves with the URI SANs
// (SPIFFE IDs), DNS SANs and IP SANs a test asks for, expired leaves, a
// second unrelated CA, all written as PEM files a server or client loads
// with tlsconfig.
//
// # Usage
//
//	ca := tlstest.NewCA(t, "test CA")
//	srv := ca.Issue(t, tlstest.Leaf{DNS: []string{"localhost"}, IPs: []netip.Addr{tlstest.Loopback}})
//	files := srv.WriteFiles(t, t.TempDir(), "server", ca) // server.crt, server.key, server.ca.crt
//	vm := ca.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://example.org/ns/prod/sa/payments"}})
//	old := tlstest.NewCA(t, "other CA").Issue(t, tlstest.Leaf{URIs: ...}) // refused
//
// Every function fails the test (t.Fatal) instead of returning an error.
// Leaves are valid for both server and client authentication.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway/spillway/security/tlsconfig"
)

// Loopback is 127.0.0.1, the IP SAN a test server usually needs.
var Loopback = netip.MustParseAddr("127.0.0.1")

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is Cert PEM-encoded: the content of a CA bundle file.
	PEM []byte
}

// Leaf says what a leaf certificate holds. The zero value is a leaf with
// no SANs, valid from an hour ago for a day.
type Leaf struct {
	// CommonName is the subject CN; "" means "spillway test leaf".
	CommonName string
	// URIs are the URI SANs, e.g. "spiffe://example.org/ns/prod/sa/payments".
	URIs []string
	// DNS are the DNS SANs, e.g. "localhost".
	DNS []string
	// IPs are the IP SANs, e.g. Loopback.
	IPs []netip.Addr
	// NotBefore and NotAfter bound the validity; zero means an hour ago and
	// a day from now.
	NotBefore, NotAfter time.Time
	// Expired makes a leaf that expired an hour ago (it overrides NotBefore
	// and NotAfter).
	Expired bool
}

// Cert is a leaf certificate and its key.
type Cert struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
	// TLS is the pair as crypto/tls uses it.
	TLS tls.Certificate
}

var serial atomic.Int64

func init() { serial.Store(time.Now().UnixNano()) }

func nextSerial() *big.Int { return big.NewInt(serial.Add(1)) }

// NewCA makes a self-signed ECDSA P-256 CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"spillway tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parse CA certificate: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue makes a leaf certificate signed by ca.
func (ca *CA) Issue(t testing.TB, l Leaf) *Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: leaf key: %v", err)
	}
	cn := l.CommonName
	if cn == "" {
		cn = "spillway test leaf"
	}
	notBefore, notAfter := l.NotBefore, l.NotAfter
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	if l.Expired {
		notBefore, notAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     l.DNS,
	}
	for _, u := range l.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("tlstest: URI SAN %q: %v", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	for _, ip := range l.IPs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatalf("tlstest: leaf certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("tlstest: parse leaf certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: marshal leaf key: %v", err)
	}
	c := &Cert{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	c.TLS, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatalf("tlstest: key pair: %v", err)
	}
	return c
}

// ClientTLS is a client *tls.Config presenting c and trusting roots:
// what a test dials a TLS server with as this identity.
func (c *Cert) ClientTLS(roots ...*CA) *tls.Config {
	return &tls.Config{RootCAs: Pool(roots...), Certificates: []tls.Certificate{c.TLS}}
}

// Pool is a cert pool holding the given CAs.
func Pool(cas ...*CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

// Bundle is the concatenated PEM of cas: a CA file trusting all of them.
func Bundle(cas ...*CA) []byte {
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.PEM...)
	}
	return b
}

// WriteFiles writes c and the bundle of cas to dir as NAME.crt, NAME.key
// and NAME.ca.crt (no CA file when cas is empty) and returns their paths.
// Files are replaced atomically (write to a temporary file, rename), so a
// reloader polling them never reads half a file; calling WriteFiles again
// with the same dir and name is a rotation.
func (c *Cert) WriteFiles(t testing.TB, dir, name string, cas ...*CA) tlsconfig.Files {
	t.Helper()
	f := tlsconfig.Files{
		Cert: filepath.Join(dir, name+".crt"),
		Key:  filepath.Join(dir, name+".key"),
	}
	WriteFile(t, f.Cert, c.CertPEM)
	WriteFile(t, f.Key, c.KeyPEM)
	if len(cas) > 0 {
		f.CA = filepath.Join(dir, name+".ca.crt")
		WriteFile(t, f.CA, Bundle(cas...))
	}
	return f
}

// WriteCA writes the bundle of cas to path atomically and returns path.
func WriteCA(t testing.TB, path string, cas ...*CA) string {
	t.Helper()
	WriteFile(t, path, Bundle(cas...))
	return path
}

// WriteFile replaces path with data atomically (mode 0600).
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tlstest-*")
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		t.Fatalf("tlstest: write %s: %v", path, err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatalf("tlstest: write %s: %v", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
}

package e2e

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway/spillway/clientlib/clientcreds"
	"github.com/spillway/spillway/security/tlsconfig"
)

// TestSecurityDocSetup runs the openssl block of docs/security.md ("A
// worked setup") in an empty directory, starts spillway on mTLS with the
// files it made, and reads /readyz with the client certificate: the
// documented commands work as written.
func TestSecurityDocSetup(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- tls-setup -->\n```sh\n")
	if !ok {
		t.Fatal("docs/security.md: no <!-- tls-setup --> sh block")
	}
	script, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/security.md: the tls-setup block does not end")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the tls-setup commands failed: %v\n%s", err, out)
	}
	for _, want := range []string{"server.crt: OK", "payments.crt: OK", "URI:spiffe://example.org/ns/prod/sa/payments"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("tls-setup output lacks %q:\n%s", want, out)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	r, err := tlsconfig.New(tlsconfig.Config{Files: tlsconfig.Files{Cert: p("payments.crt"), Key: p("payments.key")}})
	if err != nil {
		t.Fatal(err)
	}
	if uris := r.Certificate().Leaf.URIs; len(uris) != 1 || uris[0].String() != "spiffe://example.org/ns/prod/sa/payments" {
		t.Errorf("payments.crt URI SANs = %v", uris)
	}

	s := newServer(t, "--tls-cert", p("server.crt"), "--tls-key", p("server.key"), "--client-ca", p("ca.crt"))
	s.tls = &e2eTLS{client: tlsconfig.Files{CA: p("ca.crt"), Cert: p("payments.crt"), Key: p("payments.key")}}
	s.start() // waits for /readyz over mTLS with payments.crt
	if !strings.Contains(s.logs.String(), "client_auth=require") {
		t.Errorf("server logs lack client_auth=require:\n%s", s.logs)
	}
	noCert, err := clientcreds.Config{CA: p("ca.crt")}.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.CloseIdleConnections()
	if resp, err := noCert.Get(s.url("/readyz")); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Errorf("GET /readyz without a client certificate = %d %s, want a refused handshake", resp.StatusCode, b)
	}
}

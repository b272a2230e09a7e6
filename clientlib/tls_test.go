package clientlib_test

import (
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/security/tlsconfig"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

// TestBootstrapJSONTLS: WithTLS gives the bootstrap grpc-go's "tls"
// channel credentials with the file_watcher fields; bad files and a
// plaintext rollout URL are refused naming the option.
func TestBootstrapJSONTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	files := ca.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://example.org/ns/prod/sa/caller"}}).WriteFiles(t, dir, "client", ca)
	type creds struct {
		Type   string         `json:"type"`
		Config map[string]any `json:"config"`
	}
	credsOf := func(t *testing.T, opts ...clientlib.Option) []creds {
		t.Helper()
		b, err := clientlib.BootstrapJSON(append([]clientlib.Option{clientlib.WithService("caller")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		var bs struct {
			XDSServers []struct {
				ChannelCreds []creds `json:"channel_creds"`
			} `json:"xds_servers"`
		}
		if err := json.Unmarshal(b, &bs); err != nil {
			t.Fatal(err)
		}
		return bs.XDSServers[0].ChannelCreds
	}
	if diff := cmp.Diff([]creds{{Type: "insecure"}}, credsOf(t)); diff != "" {
		t.Errorf("plaintext channel_creds (-want +got):\n%s", diff)
	}
	got := credsOf(t, clientlib.WithTLS(clientlib.TLS{CA: files.CA, Cert: files.Cert, Key: files.Key, Refresh: 2 * time.Second}))
	want := []creds{{Type: "tls", Config: map[string]any{
		"ca_certificate_file": files.CA, "certificate_file": files.Cert, "private_key_file": files.Key, "refresh_interval": "2s",
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tls channel_creds (-want +got):\n%s", diff)
	}
	got = credsOf(t, clientlib.WithTLS(clientlib.TLS{CA: files.CA}))
	want = []creds{{Type: "tls", Config: map[string]any{"ca_certificate_file": files.CA}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("server-only tls channel_creds (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name string
		opts []clientlib.Option
		want string
	}{
		{"missing_ca", []clientlib.Option{clientlib.WithTLS(clientlib.TLS{CA: filepath.Join(dir, "nope.crt")})}, "WithTLS: ca file: open"},
		{"cert_without_key", []clientlib.Option{clientlib.WithTLS(clientlib.TLS{Cert: files.Cert})}, "WithTLS: files: certificate"},
		{"negative_refresh", []clientlib.Option{clientlib.WithTLS(clientlib.TLS{CA: files.CA, Refresh: -time.Second})}, "WithTLS: Refresh -1s is negative"},
		{"plaintext_rollout", []clientlib.Option{clientlib.WithTLS(clientlib.TLS{CA: files.CA}), clientlib.WithRolloutURL("http://spillway.example:18080/v1/rollout")}, "WithRolloutURL: \"http://spillway.example:18080/v1/rollout\" is plaintext http with WithTLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := clientlib.BootstrapJSON(append([]clientlib.Option{clientlib.WithService("caller")}, tc.opts...)...)
			if !errors.Is(err, clientlib.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BootstrapJSON error = %v, want ErrInvalidOption containing %q", err, tc.want)
			}
		})
	}
}

// TestRolloutHTTPSReload: with WithTLS the rollout is read over HTTPS
// with the client certificate, and the files are read again before each
// poll: a certificate the server refuses makes the next read fail
// (Status.LastRolloutError; the last decision is kept), a good
// one after it makes the reads work again, without a new Conn.
func TestRolloutHTTPSReload(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	srvR, err := tlsconfig.New(tlsconfig.Config{Files: ca.Issue(t, tlstest.Leaf{IPs: []netip.Addr{tlstest.Loopback}}).WriteFiles(t, dir, "srv", ca)})
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := srvR.ServerConfig(tlsconfig.ServerOptions{ClientAuth: tlsconfig.RequireClientCert, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string // client URI SAN of each read
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.TLS.PeerCertificates[0].URIs[0].String())
		mu.Unlock()
		io.WriteString(w, `{"rules":[{"name":"none","match":{},"percent":0}],"version":7}`)
	}))
	srv.TLS = srvCfg
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	srv.StartTLS()
	defer srv.Close()

	files := ca.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://t/first"}}).WriteFiles(t, dir, "cli", ca)
	c := e.dial("https-reader", clientlib.WithRolloutURL(srv.URL+"/v1/rollout"), clientlib.WithTLS(clientlib.TLS{CA: files.CA, Cert: files.Cert, Key: files.Key}))
	lastSeen := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return ""
		}
		return seen[len(seen)-1]
	}
	if s := c.Status(); s.Eligibility.Err != nil || s.Eligibility.Version != 7 || lastSeen() != "spiffe://t/first" {
		t.Fatalf("first read: version %d, err %v, client %q", s.Eligibility.Version, s.Eligibility.Err, lastSeen())
	}
	// A certificate of a CA the server does not trust: the next read fails.
	other.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://t/other"}}).WriteFiles(t, dir, "cli")
	if _, ok := waitFor(10*time.Second, func() bool { return c.Status().LastRolloutError != nil }); !ok {
		t.Fatal("reads kept working after the client certificate was replaced by one the server refuses")
	}
	// A good one again: reads work, with the new identity.
	ca.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://t/second"}}).WriteFiles(t, dir, "cli")
	if _, ok := waitFor(10*time.Second, func() bool {
		return c.Status().LastRolloutError == nil && lastSeen() == "spiffe://t/second"
	}); !ok {
		t.Fatalf("reads did not recover with the new certificate: err %v, last client %q", c.Status().LastRolloutError, lastSeen())
	}
}

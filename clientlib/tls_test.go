package clientlib_test

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/clientlib"
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

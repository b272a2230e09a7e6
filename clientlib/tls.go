package clientlib

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/spillway/spillway/security/tlsconfig"
)

// TLS names the PEM files the library's connections to spillway use when
// its gRPC and HTTP ports speak TLS (spillway --tls-cert): the xDS
// channel's ADS and LRS stream and the rollout read. The panic flag is a
// DNS TXT record and stays plaintext DNS.
type TLS struct {
	// CA is the bundle that signs spillway's server certificate; "" trusts
	// the system roots.
	CA string
	// Cert and Key are the client certificate and its key (both or
	// neither), for a spillway that verifies clients (--client-ca).
	Cert, Key string
	// Refresh is how often grpc-go's file watcher re-reads the files for
	// the xDS channel; zero keeps grpc-go's default (10 minutes). The
	// rollout read checks the files before every read.
	Refresh time.Duration
}

// WithTLS makes the xDS channel's bootstrap use grpc-go's "tls" channel
// credentials with t's files (the file_watcher certificate provider, so
// rotated files are picked up without a restart) and reads the rollout
// config over HTTPS with t's client certificate; the default rollout URL
// becomes https://127.0.0.1:18080/v1/rollout. Without it (the default)
// both are plaintext. The DNS panic flag poll is DNS, never TLS.
func WithTLS(t TLS) Option { return func(o *options) { o.tls = &t } }

// DefaultRolloutURLTLS is the default rollout URL under WithTLS.
const DefaultRolloutURLTLS = "https://127.0.0.1:18080/v1/rollout"

// tlsCredsConfig is the config of grpc-go's "tls" channel credentials
// (internal/xds/bootstrap/tlscreds: the file_watcher provider's fields).
type tlsCredsConfig struct {
	CACertificateFile string `json:"ca_certificate_file,omitempty"`
	CertificateFile   string `json:"certificate_file,omitempty"`
	PrivateKeyFile    string `json:"private_key_file,omitempty"`
	RefreshInterval   string `json:"refresh_interval,omitempty"` // a protobuf Duration: "2s"
}

// channelCreds are the bootstrap's channel_creds for o.
func (o *options) channelCreds() ([]channelCred, error) {
	if o.tls == nil {
		return []channelCred{{Type: "insecure"}}, nil
	}
	c := tlsCredsConfig{CACertificateFile: o.tls.CA, CertificateFile: o.tls.Cert, PrivateKeyFile: o.tls.Key}
	if o.tls.Refresh > 0 {
		c.RefreshInterval = fmt.Sprintf("%gs", o.tls.Refresh.Seconds())
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return []channelCred{{Type: "tls", Config: b}}, nil
}

// validateTLS checks the WithTLS files by loading them once, and prepares
// the rollout read's HTTPS client.
func (o *options) validateTLS() error {
	if o.tls == nil {
		return nil
	}
	if o.tls.Refresh < 0 {
		return fmt.Errorf("%w: WithTLS: Refresh %v is negative", ErrInvalidOption, o.tls.Refresh)
	}
	if o.tls.CA == "" && o.tls.Cert == "" && o.tls.Key == "" {
		o.rolloutHTTP = &reloadingHTTP{}
		return nil
	}
	r, err := tlsconfig.New(tlsconfig.Config{Files: tlsconfig.Files{CA: o.tls.CA, Cert: o.tls.Cert, Key: o.tls.Key}, Logger: o.logger})
	if err != nil {
		return fmt.Errorf("%w: WithTLS: %v", ErrInvalidOption, err)
	}
	o.rolloutHTTP = &reloadingHTTP{r: r}
	return nil
}

// reloadingHTTP is the rollout read's HTTPS client: it re-reads the
// WithTLS files before each read and, when they changed, uses a new
// transport (the old one's idle connections are closed; a read in flight
// finishes on its connection).
type reloadingHTTP struct {
	r *tlsconfig.Reloader // nil: system roots, no client certificate

	mu     sync.Mutex
	gen    uint64
	client *http.Client
}

func (h *reloadingHTTP) get() *http.Client {
	var gen uint64
	if h.r != nil {
		h.r.Check() // a bad rewrite keeps the old files (and is logged)
		gen = h.r.Generation()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client != nil && gen == h.gen {
		return h.client
	}
	if h.client != nil {
		h.client.CloseIdleConnections()
	}
	t := &http.Transport{ForceAttemptHTTP2: true, IdleConnTimeout: time.Minute}
	if h.r != nil {
		t.TLSClientConfig = h.r.ClientConfig(tlsconfig.ClientOptions{})
	}
	h.client, h.gen = &http.Client{Transport: t}, gen
	return h.client
}

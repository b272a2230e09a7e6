package tlsconfig

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"
)

// DefaultInterval is how often Run polls the files when Config.Interval
// is zero.
const DefaultInterval = 2 * time.Second

// Files names the PEM files a Reloader keeps loaded. Cert and Key go
// together (both or neither); CA is a bundle of one or more CA
// certificates. Any may be "" when its role is not used (a server that
// does not verify clients has no CA; a client without a certificate has
// no Cert and Key).
type Files struct {
	Cert, Key, CA string
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// Config configures a Reloader.
type Config struct {
	// Files are the files to load; at least one must be named.
	Files Files
	// Interval is the poll period of Run; zero means DefaultInterval.
	Interval time.Duration
	// Logger receives reload logs (give it a "component"); nil discards
	// them.
	Logger *slog.Logger
	// Registerer registers the reload metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// ClientAuth is how a server treats client certificates.
type ClientAuth int

// Client authentication modes.
const (
	// NoClientCert: the server asks for no client certificate.
	NoClientCert ClientAuth = iota
	// VerifyClientCertIfGiven: a client may come without a certificate
	// (e.g. with a bearer token); one it presents must chain to the CA.
	VerifyClientCertIfGiven
	// RequireClientCert: every client must present a certificate that
	// chains to the CA.
	RequireClientCert
)

// String is the --client-auth spelling: "none", "optional" or "require".
func (a ClientAuth) String() string {
	switch a {
	case NoClientCert:
		return "none"
	case VerifyClientCertIfGiven:
		return "optional"
	case RequireClientCert:
		return "require"
	}
	return fmt.Sprintf("ClientAuth(%d)", int(a))
}

// ParseClientAuth parses the --client-auth flag: "require" or "optional".
func ParseClientAuth(s string) (ClientAuth, error) {
	switch s {
	case "require":
		return RequireClientCert, nil
	case "optional":
		return VerifyClientCertIfGiven, nil
	}
	return NoClientCert, fmt.Errorf("%q: want require or optional", s)
}

// ParseVersion parses a minimum TLS version: "1.2" or "1.3".
func ParseVersion(s string) (uint16, error) {
	switch s {
	case "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("%q: want 1.2 or 1.3", s)
}

// Reloader holds the current material loaded from Files and replaces it
// when the files change. Create it with New.
type Reloader struct {
	// read-only after New
	files    Files
	interval time.Duration
	logger   *slog.Logger
	metrics  *metrics

	cur atomic.Pointer[material]

	// mu serialises Check (Run and callers of Check).
	mu         sync.Mutex
	lastFailed [sha256.Size]byte // content hash of the last bad files, counted once
}

// material is one immutable load of the files.
type material struct {
	hash [sha256.Size]byte
	gen  uint64
	cert *tls.Certificate // nil without Files.Cert
	pool *x509.CertPool   // nil without Files.CA
}

// New loads the files once and returns a Reloader holding them; an error
// names the file that could not be loaded.
func New(cfg Config) (*Reloader, error) {
	if cfg.Files.Empty() {
		return nil, errors.New("files: no certificate, key or CA file named")
	}
	if (cfg.Files.Cert == "") != (cfg.Files.Key == "") {
		return nil, fmt.Errorf("files: certificate %q and key %q go together", cfg.Files.Cert, cfg.Files.Key)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("interval: %v is negative", cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{
		files:    cfg.Files,
		interval: cfg.Interval,
		logger:   logger,
		metrics:  newMetrics(cfg.Registerer),
	}
	hash, raw, err := r.read()
	if err != nil {
		return nil, err
	}
	m, err := r.parse(raw)
	if err != nil {
		return nil, err
	}
	m.hash, m.gen = hash, 1
	r.publish(m)
	return r, nil
}

// Files are the files r loads.
func (r *Reloader) Files() Files { return r.files }

// Interval is the poll period of Run.
func (r *Reloader) Interval() time.Duration { return r.interval }

// Run polls the files every Interval until ctx is done.
func (r *Reloader) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Check()
		}
	}
}

// Check reads the files now and loads them if their content changed. It
// reports whether new material is in use, and the error that kept the
// old material (nil when nothing changed or the load succeeded).
func (r *Reloader) Check() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	hash, raw, err := r.read()
	if err == nil && hash == old.hash {
		return false, nil
	}
	if err == nil {
		var m *material
		if m, err = r.parse(raw); err == nil {
			m.hash, m.gen = hash, old.gen+1
			r.publish(m)
			r.metrics.reloads.Inc()
			r.logger.Info("tls files reloaded", "cert", r.files.Cert, "ca", r.files.CA, "generation", m.gen)
			return true, nil
		}
	}
	// Count a bad content once, not once per poll. Unreadable files hash
	// their error text so a different error counts again.
	if hash == ([sha256.Size]byte{}) {
		hash = sha256.Sum256([]byte(err.Error()))
	}
	if hash != r.lastFailed {
		r.lastFailed = hash
		r.metrics.failures.Inc()
		r.logger.Error("tls reload failed, keeping the old material", "cert", r.files.Cert, "ca", r.files.CA, "err", err)
	}
	return false, err
}

type rawFiles struct{ cert, key, ca []byte }

func (r *Reloader) read() ([sha256.Size]byte, rawFiles, error) {
	var raw rawFiles
	h := sha256.New()
	for _, f := range []struct {
		what, path string
		dst        *[]byte
	}{
		{"certificate", r.files.Cert, &raw.cert},
		{"key", r.files.Key, &raw.key},
		{"ca", r.files.CA, &raw.ca},
	} {
		if f.path == "" {
			binary.Write(h, binary.BigEndian, int64(-1))
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			return [sha256.Size]byte{}, raw, fmt.Errorf("%s file: %w", f.what, err)
		}
		binary.Write(h, binary.BigEndian, int64(len(b)))
		h.Write(b)
		*f.dst = b
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, raw, nil
}

func (r *Reloader) parse(raw rawFiles) (*material, error) {
	m := &material{}
	if r.files.Cert != "" {
		pair, err := tls.X509KeyPair(raw.cert, raw.key)
		if err != nil {
			return nil, fmt.Errorf("certificate file %s, key file %s: %w", r.files.Cert, r.files.Key, err)
		}
		m.cert = &pair
	}
	if r.files.CA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw.ca) {
			return nil, fmt.Errorf("ca file %s: no PEM certificate in it", r.files.CA)
		}
		m.pool = pool
	}
	return m, nil
}

func (r *Reloader) publish(m *material) {
	r.cur.Store(m)
	if m.cert != nil && m.cert.Leaf != nil {
		r.metrics.notAfter.WithLabelValues(r.files.Cert).Set(float64(m.cert.Leaf.NotAfter.Unix()))
	}
}

// Certificate is the certificate in use, or nil without Files.Cert.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

// CAPool is the CA pool in use, or nil without Files.CA.
func (r *Reloader) CAPool() *x509.CertPool { return r.cur.Load().pool }

// Generation counts the loads that succeeded (1 after New).
func (r *Reloader) Generation() uint64 { return r.cur.Load().gen }

// ServerOptions are the knobs of a server config.
type ServerOptions struct {
	// ClientAuth is how client certificates are treated; anything but
	// NoClientCert needs Files.CA.
	ClientAuth ClientAuth
	// MinVersion is the lowest TLS version; zero means TLS 1.2.
	MinVersion uint16
	// NextProtos are the ALPN protocols offered: {"h2"} for gRPC,
	// {"h2", "http/1.1"} for HTTP. They are needed here because the
	// per-handshake config, not the one gRPC or net/http amend, decides
	// ALPN.
	NextProtos []string
}

// ServerConfig is a server *tls.Config whose every handshake uses the
// current certificate and client-CA pool. It needs Files.Cert.
func (r *Reloader) ServerConfig(o ServerOptions) (*tls.Config, error) {
	if r.files.Cert == "" {
		return nil, errors.New("files: a server needs a certificate and key")
	}
	if o.ClientAuth != NoClientCert && r.files.CA == "" {
		return nil, errors.New("files: verifying client certificates needs a CA file")
	}
	if o.MinVersion == 0 {
		o.MinVersion = tls.VersionTLS12
	}
	var auth tls.ClientAuthType
	switch o.ClientAuth {
	case NoClientCert:
		auth = tls.NoClientCert
	case VerifyClientCertIfGiven:
		auth = tls.VerifyClientCertIfGiven
	case RequireClientCert:
		auth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("client auth: unknown mode %d", o.ClientAuth)
	}
	type built struct {
		gen uint64
		cfg *tls.Config
	}
	var cache atomic.Pointer[built]
	perHandshake := func() *tls.Config {
		m := r.cur.Load()
		if b := cache.Load(); b != nil && b.gen == m.gen {
			return b.cfg
		}
		cfg := &tls.Config{
			MinVersion:   o.MinVersion,
			Certificates: []tls.Certificate{*m.cert},
			ClientAuth:   auth,
			ClientCAs:    m.pool,
			NextProtos:   append([]string(nil), o.NextProtos...),
		}
		cache.Store(&built{gen: m.gen, cfg: cfg})
		return cfg
	}
	base := perHandshake().Clone()
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return perHandshake(), nil }
	return base, nil
}

// ClientOptions are the knobs of a client config.
type ClientOptions struct {
	// MinVersion is the lowest TLS version; zero means TLS 1.2.
	MinVersion uint16
	// ServerName overrides the name the server's certificate is checked
	// against; "" means the host dialled.
	ServerName string
}

// Config is a client *tls.Config of o without files: system roots, no
// client certificate.
func (o ClientOptions) Config() *tls.Config {
	return &tls.Config{MinVersion: max(o.MinVersion, tls.VersionTLS12), ServerName: o.ServerName}
}

// ClientConfig is a client *tls.Config that presents the current
// certificate (when Files.Cert is set) at every handshake and trusts the
// CA pool current now (the system roots without Files.CA).
func (r *Reloader) ClientConfig(o ClientOptions) *tls.Config {
	if o.MinVersion == 0 {
		o.MinVersion = tls.VersionTLS12
	}
	cfg := &tls.Config{
		MinVersion: o.MinVersion,
		ServerName: o.ServerName,
		RootCAs:    r.CAPool(),
	}
	if r.files.Cert != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.Certificate(), nil
		}
	}
	return cfg
}

// TransportCredentials are gRPC client credentials that check the files
// and build a fresh ClientConfig for every new connection, so a rotated
// CA bundle or certificate applies to the next connection (with or
// without Run).
func (r *Reloader) TransportCredentials(o ClientOptions) credentials.TransportCredentials {
	return &reloadingCreds{r: r, o: o}
}

type reloadingCreds struct {
	r *Reloader
	o ClientOptions
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c.r.Check() // cheap (a few KB read); a client without Run still sees rotations
	return credentials.NewTLS(c.r.ClientConfig(c.o)).ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsconfig: client credentials used on a server")
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2", ServerName: c.o.ServerName}
}

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

//nolint:staticcheck // part of the interface
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.o.ServerName = name
	return nil
}

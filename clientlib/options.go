package clientlib

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/spillway/spillway/clientlib/propagate"
	"github.com/spillway/spillway/registry/names"
)

// Defaults of the options.
const (
	DefaultControlPlane      = "127.0.0.1:18000"
	DefaultDNSServer         = "127.0.0.1:8053"
	DefaultDomain            = "spillway.internal."
	DefaultRolloutURL        = "http://127.0.0.1:18080/v1/rollout"
	DefaultPanicPollInterval = 10 * time.Second
	DefaultXDSTimeout        = 10 * time.Second
	DefaultSwitchTimeout     = 5 * time.Second

	// EnvZone and EnvRegion give the caller's locality when WithZone and
	// WithRegion are not used.
	EnvZone   = "SPILLWAY_ZONE"
	EnvRegion = "SPILLWAY_REGION"
)

// ErrInvalidOption is wrapped by every error Dial returns for a bad option;
// the message names the option.
var ErrInvalidOption = errors.New("clientlib: invalid option")

// An Option configures Dial.
type Option func(*options)

// options is what the Options set; Dial validates it once.
type options struct {
	service       string
	metadata      map[string]string
	zone, region  *string // nil: from the environment
	controlPlane  string
	dnsServer     string
	domain        string
	rolloutURL    string
	rolloutFile   string
	pollInterval  time.Duration
	xdsTimeout    time.Duration
	switchTimeout time.Duration
	logger        *slog.Logger
	dialOptions   []grpc.DialOption
	propagation   []string // WithPropagation; nil: none
	registerer    prometheus.Registerer

	perConnBootstrap bool

	tls         *TLS           // WithTLS; nil: plaintext
	rolloutHTTP *reloadingHTTP // set by validate with WithTLS
}

func defaultOptions() options {
	return options{
		controlPlane:  DefaultControlPlane,
		dnsServer:     DefaultDNSServer,
		domain:        DefaultDomain,
		rolloutURL:    DefaultRolloutURL,
		pollInterval:  DefaultPanicPollInterval,
		xdsTimeout:    DefaultXDSTimeout,
		switchTimeout: DefaultSwitchTimeout,
	}
}

// WithService names the calling service (required). It is the subject of
// the rollout decision and the node.cluster of the xDS bootstrap, so the
// control plane knows who calls whom.
func WithService(name string) Option { return func(o *options) { o.service = name } }

// WithMetadata gives the calling service's metadata, matched by the rollout
// rules: e.g. {"region": "us-east1", "tier": "3", "team": "pay"}. Key
// "service" is set by WithService and may not be given here. The map is
// copied. Without it, the metadata holds only the service name and, unless
// set here, the region and zone.
func WithMetadata(md map[string]string) Option {
	return func(o *options) { o.metadata = maps.Clone(md) }
}

// WithZone sets the caller's zone (node.locality.zone in the xDS
// bootstrap, which drives zone-aware routing). Without it, $SPILLWAY_ZONE.
func WithZone(zone string) Option { return func(o *options) { o.zone = &zone } }

// WithRegion sets the caller's region (node.locality.region). Without it,
// $SPILLWAY_REGION.
func WithRegion(region string) Option { return func(o *options) { o.region = &region } }

// WithControlPlane sets the address (host:port) of spillway's gRPC port,
// where the xDS channel gets its resources. Default 127.0.0.1:18000.
func WithControlPlane(addr string) Option { return func(o *options) { o.controlPlane = addr } }

// WithDNSServer sets the DNS server (host:port) asked for SRV records and
// for the panic flag. Default spillway's, 127.0.0.1:8053; "" asks the name
// servers of /etc/resolv.conf (which must then forward the domain to
// spillway).
func WithDNSServer(addr string) Option { return func(o *options) { o.dnsServer = addr } }

// WithDomain sets spillway's DNS domain. Default spillway.internal.
func WithDomain(domain string) Option { return func(o *options) { o.domain = domain } }

// WithRolloutURL sets where the rollout config is read at Dial and at
// every poll: spillway's
// GET /v1/rollout. Default http://127.0.0.1:18080/v1/rollout; "" reads no
// config, so the caller is not eligible (unless WithRolloutFile is given).
func WithRolloutURL(u string) Option { return func(o *options) { o.rolloutURL = u } }

// WithRolloutFile reads the rollout config from a local YAML file (the
// format of rollout.Parse) instead of the rollout URL: an override for
// one host or for tests.
func WithRolloutFile(path string) Option { return func(o *options) { o.rolloutFile = path } }

// WithPanicPollInterval sets how often the rollout config and the panic
// flag (TXT _xds.<domain>) are read; each wait is jittered by ±10%.
// Default 10 s.
func WithPanicPollInterval(d time.Duration) Option {
	return func(o *options) { o.pollInterval = d }
}

// WithXDSTimeout bounds how long a move to the xDS channel waits for it to
// get its resources and a ready connection; after that the Conn stays on
// DNS, says why in Status, and tries again at the next poll. Default 10 s.
func WithXDSTimeout(d time.Duration) Option { return func(o *options) { o.xdsTimeout = d } }

// WithSwitchTimeout bounds how long a move back to the DNS channel waits
// for it to be ready; after that the Conn stays where it is, says why, and
// tries again at the next poll. Default 5 s.
func WithSwitchTimeout(d time.Duration) Option { return func(o *options) { o.switchTimeout = d } }

// WithPerConnBootstrap gives this Conn's xDS channel a bootstrap of its
// own, written by the library (see BootstrapJSON), instead of the
// process's ($GRPC_XDS_BOOTSTRAP or $GRPC_XDS_BOOTSTRAP_CONFIG), so that
// one process may hold Conns with different identities (calling service,
// zone, metadata). It uses grpc-go's NewXDSResolverWithConfigForTesting,
// which grpc-go documents as for tests (and as not working with CSDS):
// use it for tests, or when one process really calls as several
// services. See the package doc.
func WithPerConnBootstrap() Option { return func(o *options) { o.perConnBootstrap = true } }

// WithLogger sets the logger; nil (the default) discards.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDialOptions adds options to both channels' grpc.NewClient, after the
// library's own (insecure transport credentials, the resolver, and
// round_robin on the DNS channel), so they may override them.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithPropagation carries the given metadata keys (e.g.
// "x-traffic-class") from the context of each RPC to its outgoing
// metadata, on both channels: the client half of package propagate,
// whose server interceptors (propagate.Propagator.ServerOptions) put an
// incoming request's values in the handler's context. A value the caller
// set in the outgoing metadata itself wins. Keys must pass
// propagate.ValidateKey; repeated calls add keys. The interceptors run
// before those of WithDialOptions.
func WithPropagation(keys ...string) Option {
	return func(o *options) { o.propagation = append(o.propagation, keys...) }
}

// WithRegisterer registers the Conn's metrics (see the package doc) with
// r; Close unregisters them. Default: no metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// validate checks and completes o for target.
func (o *options) validate(target string) error {
	bad := func(opt, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidOption, opt, fmt.Sprintf(format, args...))
	}
	if err := names.ValidateService("target", target); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidOption, err)
	}
	if o.service == "" {
		return bad("WithService", "required: name the calling service")
	}
	if err := names.ValidateService("name", o.service); err != nil {
		return bad("WithService", "%v", err)
	}
	if _, ok := o.metadata["service"]; ok {
		return bad("WithMetadata", `key "service" is set by WithService`)
	}
	for _, k := range slices.Sorted(maps.Keys(o.metadata)) {
		if k == "" || len(k) > 63 {
			return bad("WithMetadata", "key %q must be 1..63 characters", k)
		}
	}
	if o.zone == nil {
		z := os.Getenv(EnvZone)
		o.zone = &z
	}
	if o.region == nil {
		r := os.Getenv(EnvRegion)
		o.region = &r
	}
	for _, f := range []struct{ opt, field, v string }{{"WithZone", "zone", *o.zone}, {"WithRegion", "region", *o.region}} {
		if f.v != "" {
			if err := names.ValidateLabel(f.field, f.v); err != nil {
				return bad(f.opt, "%v", err)
			}
		}
	}
	if _, _, err := net.SplitHostPort(o.controlPlane); err != nil {
		return bad("WithControlPlane", "%q: want host:port", o.controlPlane)
	}
	if o.dnsServer != "" {
		if _, _, err := net.SplitHostPort(o.dnsServer); err != nil {
			return bad("WithDNSServer", "%q: want host:port, or \"\" for the system resolver", o.dnsServer)
		}
	}
	d := strings.ToLower(strings.TrimSuffix(o.domain, "."))
	if err := names.ValidateService("domain", d); err != nil {
		return bad("WithDomain", "%v", err)
	}
	o.domain = dns.Fqdn(d)
	if o.tls != nil && o.rolloutURL == DefaultRolloutURL {
		o.rolloutURL = DefaultRolloutURLTLS
	}
	if o.rolloutURL != "" {
		u, err := url.Parse(o.rolloutURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("WithRolloutURL", "%q: want an http(s) URL such as %s", o.rolloutURL, DefaultRolloutURL)
		}
	}
	for _, f := range []struct {
		opt string
		v   time.Duration
	}{{"WithPanicPollInterval", o.pollInterval}, {"WithXDSTimeout", o.xdsTimeout}, {"WithSwitchTimeout", o.switchTimeout}} {
		if f.v <= 0 {
			return bad(f.opt, "%v: must be positive", f.v)
		}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.propagation != nil {
		p, err := propagate.New(propagate.Config{Keys: o.propagation, Logger: o.logger})
		if err != nil {
			return bad("WithPropagation", "%v", err)
		}
		o.dialOptions = append(p.DialOptions(), o.dialOptions...)
		o.propagation = nil // validated and installed: a second validate must not add them again
	}
	if o.tls != nil && strings.HasPrefix(o.rolloutURL, "http:") {
		return bad("WithRolloutURL", "%q is plaintext http with WithTLS; want https", o.rolloutURL)
	}
	return o.validateTLS()
}

// subject is the metadata the rollout rules are matched against.
func (o *options) subject() map[string]string {
	m := maps.Clone(o.metadata)
	if m == nil {
		m = map[string]string{}
	}
	m["service"] = o.service
	if _, ok := m["region"]; !ok && *o.region != "" {
		m["region"] = *o.region
	}
	if _, ok := m["zone"]; !ok && *o.zone != "" {
		m["zone"] = *o.zone
	}
	return m
}

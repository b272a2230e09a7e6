package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/security/webguard"
	"github.com/spillway/spillway/weights/regions"
)

// Config is the server configuration: YAML file first, then flags that were
// set on the command line.
type Config struct {
	DNSAddr  string `yaml:"dns_addr"`
	GRPCAddr string `yaml:"grpc_addr"`
	HTTPAddr string `yaml:"http_addr"`
	// HTTPHosts are the DNS names clients reach --http-addr by (a load
	// balancer's name): a request whose Host is none of them, nor an IP
	// address, localhost or the machine's host name, is refused (421),
	// which keeps a page rebinding its own name out. Empty: no other name,
	// but with TLS any name (package security/webguard).
	HTTPHosts []string `yaml:"http_hosts"`
	// DataDir holds the durable registrations; "" keeps them in memory only
	// (lost on restart).
	DataDir string `yaml:"data_dir"`
	// Store is where durable state lives: bbolt in DataDir by default,
	// etcd or Spanner for several replicas (store.go).
	Store      StoreConfig `yaml:"store"`
	Domain     string      `yaml:"domain"`
	LogLevel   string      `yaml:"log_level"`
	LogFormat  string      `yaml:"log_format"`
	StaticFile string      `yaml:"static_file"`
	// ServiceConfig is per-service weight strategy config (svcconfig.go).
	ServiceConfig ServiceConfigConfig `yaml:"service_config"`
	// RegionPreference lists, per client region, the other regions in
	// failover order (xDS priorities and SRV priorities,
	// docs/routing.md); unset: by name.
	RegionPreference regions.Preference `yaml:"region_preference"`
	// AdminTokenFile holds the token that changes of the panic flag and the
	// rollout config need; "" refuses every change.
	AdminTokenFile string `yaml:"admin_token_file"`
	// TokensFile is the bearer tokens of the identities that do not use
	// client certificates (a YAML list of {identity, sha256}), reloaded on
	// change; "" has none but the admin token (docs/security.md).
	TokensFile string `yaml:"tokens_file"`
	// AuthzFile is the policy of who may do what, reloaded on change; ""
	// keeps the default policy: anyone may register and read, only
	// identity admin may change the panic flag, rollout, routes and
	// config (docs/security.md).
	AuthzFile string `yaml:"authz_file"`
	// ShutdownGrace bounds the graceful drain on SIGTERM.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	Leases        LeaseConfig   `yaml:"leases"`
	DNS           DNSConfig     `yaml:"dns"`
	XDS           XDSConfig     `yaml:"xds"`
	GRPC          GRPCConfig    `yaml:"grpc"`
	// TLS is TLS and mTLS on the gRPC and HTTP listeners (tls.go);
	// plaintext by default.
	TLS TLSConfig `yaml:"tls"`
	// Pprof serves net/http/pprof under /debug/pprof/ on the HTTP address
	// (default false: profiles expose internals, and cost CPU while taken).
	Pprof bool `yaml:"pprof"`

	// Kubernetes configures the EndpointSlice source (kubernetes.go).
	Kubernetes KubernetesConfig `yaml:"kubernetes"`

	// hooks are the seams `spillway demo` (demo.go) uses; zero otherwise.
	hooks runHooks
}

// runHooks let `spillway demo` add its HTTP API and learn the bound
// addresses; nil funcs are skipped.
type runHooks struct {
	// mount adds handlers to the HTTP mux, before it serves.
	mount func(mux *http.ServeMux)
	// serving is called once every listener is bound and served.
	serving func(dns, grpc, http string)
	// slowStartRamp, when set, replaces zone-aware's SlowStartRamp (60 s)
	// so the demo's cold pod warms up while one watches.
	slowStartRamp time.Duration
}

// XDSConfig tunes the ADS and LRS server.
type XDSConfig struct {
	// PortName is the endpoint port xDS clients dial (default "grpc").
	PortName string        `yaml:"port_name"`
	Debounce time.Duration `yaml:"debounce"`
	// MaxDelay bounds how long a change waits in a burst (default 800ms).
	MaxDelay    time.Duration `yaml:"max_delay"`
	Resync      time.Duration `yaml:"resync"`
	LRSInterval time.Duration `yaml:"lrs_interval"`
	// ZoneAware turns on zone-aware, load-aware locality weights.
	ZoneAware       bool          `yaml:"zone_aware"`
	WeightsInterval time.Duration `yaml:"weights_interval"`
	ProbeShare      float64       `yaml:"probe_share"`
	// MaxZones caps the client zones that keep their own name in metrics,
	// the load table and zone-aware routes; later ones share "other" and
	// the zoneless route (xds.Config.MaxZones).
	MaxZones int `yaml:"max_zones"`
	// EndpointHostname is what an EDS endpoint's hostname holds: "id",
	// the endpoint's id (the default), or "none" (xds.Config.OmitHostnames).
	EndpointHostname string `yaml:"endpoint_hostname"`
}

// DNSConfig tunes the DNS server; zero values take the resolver's defaults.
type DNSConfig struct {
	// UDPSizeCap caps the EDNS0 UDP size a client may ask for (default 1232).
	UDPSizeCap int `yaml:"udp_size_cap"`
	TTL        struct {
		SRV      time.Duration `yaml:"srv"`
		A        time.Duration `yaml:"a"`
		TXT      time.Duration `yaml:"txt"`
		SOA      time.Duration `yaml:"soa"`
		Negative time.Duration `yaml:"negative"`
	} `yaml:"ttl"`
	// Zones maps querier subnets to zones (longest prefix wins): SRV
	// answers to a querier of a known zone, by its EDNS Client Subnet or
	// its source address, follow that zone's zone-aware split.
	Zones []ZoneSubnet `yaml:"zones"`
	// DNSAbuse: rate limiting and TCP caps (dnsabuse.go).
	DNSAbuse `yaml:",inline"`
}

// ZoneSubnet is one entry of dns.zones.
type ZoneSubnet struct {
	Prefix string `yaml:"prefix"` // e.g. 10.1.0.0/16
	Zone   string `yaml:"zone"`   // a zone of the endpoints' localities
	Region string `yaml:"region"` // the zone's region, optional: SRV priorities by region
}

// zones returns dns.zones for the resolver.
func (d *DNSConfig) zones() ([]resolver.ZoneSubnet, error) {
	var out []resolver.ZoneSubnet
	for i, z := range d.Zones {
		p, err := netip.ParsePrefix(z.Prefix)
		if err != nil {
			return nil, fmt.Errorf("dns.zones[%d].prefix: %q is not a prefix such as 10.1.0.0/16", i, z.Prefix)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("dns.zones[%d].prefix: %s has host bits set, want %s", i, p, p.Masked())
		}
		if err := registry.ValidateLabel(fmt.Sprintf("dns.zones[%d].zone", i), z.Zone); err != nil {
			return nil, err
		}
		if z.Region != "" {
			if err := registry.ValidateLabel(fmt.Sprintf("dns.zones[%d].region", i), z.Region); err != nil {
				return nil, err
			}
		}
		out = append(out, resolver.ZoneSubnet{Prefix: p, Zone: z.Zone, Region: z.Region})
	}
	return out, nil
}

// LeaseConfig configures VM leases and the mass-expiry guard.
type LeaseConfig struct {
	DefaultTTL    time.Duration `yaml:"default_ttl"`
	MinTTL        time.Duration `yaml:"min_ttl"`
	MaxTTL        time.Duration `yaml:"max_ttl"`
	Tick          time.Duration `yaml:"tick"`
	GuardShare    float64       `yaml:"guard_share"`
	GuardMinCount int           `yaml:"guard_min_count"`
}

func defaultConfig() Config {
	return Config{
		DNSAddr:       "127.0.0.1:8053",
		GRPCAddr:      "127.0.0.1:18000",
		HTTPAddr:      "127.0.0.1:18080",
		DataDir:       "./spillway-data",
		Domain:        "spillway.internal.",
		LogLevel:      "info",
		LogFormat:     "text",
		ShutdownGrace: 10 * time.Second,
		GRPC:          defaultGRPCConfig(),
		TLS:           defaultTLSConfig(),
		DNS:           DNSConfig{DNSAbuse: defaultDNSAbuse()},
		XDS: XDSConfig{
			PortName:        "grpc",
			Debounce:        100 * time.Millisecond,
			MaxDelay:        800 * time.Millisecond,
			Resync:          time.Minute,
			LRSInterval:     10 * time.Second,
			ZoneAware:       true,
			WeightsInterval: 10 * time.Second,
			ProbeShare:      0.01,
			MaxZones:        64,
			// The id, as every release before the option had.
			EndpointHostname: "id",
		},
		Store: StoreConfig{Replica: ReplicaConfig{Mesh: MeshConfig{Load: true}}},
		Leases: LeaseConfig{
			DefaultTTL:    30 * time.Second,
			MinTTL:        time.Second,
			MaxTTL:        time.Hour,
			Tick:          time.Second,
			GuardShare:    0.2,
			GuardMinCount: 10,
		},
	}
}

// parseConfig reads args (without the program name): the defaults, then
// the --config file over them, then the flags given on the command line
// over that.
func parseConfig(args []string, stderr io.Writer) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("spillway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file; flags given on the command line override it")
	set := configFlags(fs, cfg, &cfg)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if *configPath != "" {
		if err := readConfigFile(*configPath, &cfg); err != nil {
			return Config{}, err
		}
	}
	// Flags set on the command line win over the file.
	fs.Visit(func(fl *flag.Flag) {
		if apply := set[fl.Name]; apply != nil {
			apply()
		}
	})
	return cfg, cfg.validate()
}

// validate names the flag (and YAML key) of the first bad value.
func (c *Config) validate() error {
	if err := c.RegionPreference.Validate(); err != nil {
		return fmt.Errorf("--region-preference (region_preference): %w", err)
	}
	for _, a := range []struct{ name, v string }{
		{"--dns-addr (dns_addr)", c.DNSAddr}, {"--grpc-addr (grpc_addr)", c.GRPCAddr}, {"--http-addr (http_addr)", c.HTTPAddr},
	} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s: %q is not host:port: %v", a.name, a.v, err)
		}
	}
	for _, h := range c.HTTPHosts {
		if err := webguard.CheckHost(h); err != nil {
			return fmt.Errorf("--http-host (http_hosts): %w", err)
		}
	}
	if !strings.HasSuffix(c.Domain, ".") {
		c.Domain += "."
	}
	if c.Domain == "." || strings.Contains(c.Domain, "..") {
		return fmt.Errorf("--domain (domain): %q is not a domain name", c.Domain)
	}
	if _, err := c.level(); err != nil {
		return err
	}
	if err := c.Kubernetes.validate(); err != nil {
		return err
	}
	if err := c.ServiceConfig.validate(); err != nil {
		return err
	}
	if err := c.Store.validate(); err != nil {
		return err
	}
	if _, err := c.DNS.zones(); err != nil {
		return err
	}
	if err := c.DNS.DNSAbuse.validate(); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("--log-format (log_format): %q, want text or json", c.LogFormat)
	}
	if c.ShutdownGrace <= 0 {
		return fmt.Errorf("--shutdown-grace (shutdown_grace): %v, want > 0", c.ShutdownGrace)
	}
	switch x := c.XDS; {
	case registry.ValidateLabel("port", x.PortName) != nil:
		return fmt.Errorf("--xds-port-name (xds.port_name): %q is not a port name (a DNS label)", x.PortName)
	case x.Debounce < 0 || x.Debounce > time.Minute:
		return fmt.Errorf("--xds-debounce (xds.debounce): %v, want 0..1m", x.Debounce)
	case x.MaxDelay < 0 || x.MaxDelay > time.Minute:
		return fmt.Errorf("--xds-max-delay (xds.max_delay): %v, want 0..1m", x.MaxDelay)
	case x.Resync < time.Second:
		return fmt.Errorf("--xds-resync (xds.resync): %v, want at least 1s", x.Resync)
	case x.LRSInterval < time.Second:
		return fmt.Errorf("--lrs-interval (xds.lrs_interval): %v, want at least 1s", x.LRSInterval)
	case x.WeightsInterval < 100*time.Millisecond:
		return fmt.Errorf("--weights-interval (xds.weights_interval): %v, want at least 100ms", x.WeightsInterval)
	case x.ProbeShare < 0 || x.ProbeShare > 0.2:
		return fmt.Errorf("--probe-share (xds.probe_share): %v, want 0..0.2", x.ProbeShare)
	case x.MaxZones < 1 || x.MaxZones > 10000:
		return fmt.Errorf("--xds-max-zones (xds.max_zones): %d, want 1..10000", x.MaxZones)
	case x.EndpointHostname != "id" && x.EndpointHostname != "none":
		return fmt.Errorf("--xds-endpoint-hostname (xds.endpoint_hostname): %q, want id or none", x.EndpointHostname)
	}
	if err := c.GRPC.validate(); err != nil {
		return err
	}
	if err := c.TLS.validate(); err != nil {
		return err
	}
	l := c.Leases
	switch {
	case l.MinTTL <= 0:
		return fmt.Errorf("--lease-min-ttl (leases.min_ttl): %v, want > 0", l.MinTTL)
	case l.MaxTTL < l.MinTTL:
		return fmt.Errorf("--lease-max-ttl (leases.max_ttl): %v is below the min TTL %v", l.MaxTTL, l.MinTTL)
	case l.DefaultTTL < l.MinTTL || l.DefaultTTL > l.MaxTTL:
		return fmt.Errorf("--lease-ttl (leases.default_ttl): %v outside [%v, %v]", l.DefaultTTL, l.MinTTL, l.MaxTTL)
	case l.Tick <= 0:
		return fmt.Errorf("--lease-tick (leases.tick): %v, want > 0", l.Tick)
	case l.GuardShare <= 0:
		return fmt.Errorf("--guard-share (leases.guard_share): %v, want > 0 (1 disables the guard)", l.GuardShare)
	case l.GuardMinCount < 1:
		return fmt.Errorf("--guard-min-count (leases.guard_min_count): %d, want >= 1", l.GuardMinCount)
	}
	return nil
}

func (c *Config) level() (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return 0, fmt.Errorf("--log-level (log_level): %q, want debug, info, warn or error", c.LogLevel)
	}
	return lv, nil
}

func (c *Config) logger(w io.Writer) *slog.Logger {
	lv, _ := c.level()
	opts := &slog.HandlerOptions{Level: lv}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/weights/regions"
)

// Config is the server configuration: YAML file first, then flags that were
// set on the command line.
type Config struct {
	DNSAddr  string `yaml:"dns_addr"`
	GRPCAddr string `yaml:"grpc_addr"`
	HTTPAddr string `yaml:"http_addr"`
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
			Resync:          10 * time.Second,
			LRSInterval:     10 * time.Second,
			ZoneAware:       true,
			WeightsInterval: 10 * time.Second,
			ProbeShare:      0.01,
			MaxZones:        64,
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

// parseConfig reads args (without the program name).
func parseConfig(args []string, stderr io.Writer) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("spillway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file; flags given on the command line override it")
	var f Config
	fs.StringVar(&f.DNSAddr, "dns-addr", cfg.DNSAddr, "DNS listen address, UDP and TCP")
	fs.StringVar(&f.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC listen address (ADS, LRS, registry and admin APIs)")
	fs.StringVar(&f.HTTPAddr, "http-addr", cfg.HTTPAddr, "HTTP listen address (/healthz, /readyz, /metrics, JSON API)")
	fs.StringVar(&f.DataDir, "data-dir", cfg.DataDir, `directory for durable state; "" keeps registrations in memory only`)
	fs.StringVar(&f.Store.URL, "store", "", `durable state: "" is bbolt in --data-dir; etcd://host:2379[,host:2379...]/prefix or spanner://projects/P/instances/I/databases/D share it between replicas`)
	fs.StringVar(&f.Store.Etcd.CA, "etcd-ca", "", "PEM CA `file` that signs the etcd servers' certificates (turns on TLS)")
	fs.StringVar(&f.Store.Etcd.Cert, "etcd-cert", "", "PEM client certificate `file` for etcd (with --etcd-key)")
	fs.StringVar(&f.Store.Etcd.Key, "etcd-key", "", "PEM client key `file` for etcd (with --etcd-cert)")
	fs.StringVar(&f.Store.Etcd.Username, "etcd-username", "", "etcd user (with --etcd-password-file)")
	fs.StringVar(&f.Store.Etcd.PasswordFile, "etcd-password-file", "", "`file` holding the etcd user's password")
	fs.DurationVar(&f.Store.Etcd.DialTimeout, "etcd-dial-timeout", 0, "how long the first etcd connection may take (0: 5s)")
	fs.DurationVar(&f.Store.SpannerPoll, "spanner-poll", 0, "how often a replica reads what others wrote to Spanner (0: 500ms)")
	fs.StringVar(&f.Store.Replica.ID, "replica-id", "", "this replica's name in the shared store and the expiry election (\"\": host name and pid)")
	fs.DurationVar(&f.Store.Replica.LastSeenFlush, "lastseen-flush", 0, "how often a replica writes its heartbeats' last-seen stamps to the shared store (0: 10s)")
	fs.DurationVar(&f.Store.Replica.ElectionTTL, "election-ttl", 0, "how long the expiry election stays with a replica that stopped renewing it (0: 5s)")
	fs.BoolVar(&f.Store.Replica.Mesh.Load, "mesh-load", cfg.Store.Replica.Mesh.Load, "on a shared store: each service's weights come from every replica's load reports, computed by the service's owner replica and published through the store (false: each replica plans from its own reports)")
	fs.IntVar(&f.Store.Replica.Mesh.Shards, "mesh-shards", 0, "how many shards services are spread over for ownership; the same on every replica (0: 16)")
	fs.IntVar(&f.Store.Replica.Mesh.StaleCycles, "mesh-stale-cycles", 0, "weights cycles without a heartbeat from a service's owner before a replica falls back to its own view (0: 3)")
	fs.StringVar(&f.Store.Replica.Mesh.Addr, "mesh-addr", "", "host:port other replicas reach this replica's gRPC port on, for load summaries (\"\": --grpc-addr)")
	fs.Func("region-preference", "per client region, the other regions in failover order: `R1=R2,R3;R2=R1,R3` (xDS and SRV priorities; unset: by name)", func(v string) error {
		p, err := regions.ParsePreference(v)
		f.RegionPreference = p
		return err
	})
	fs.StringVar(&f.Domain, "domain", cfg.Domain, "DNS domain served")
	fs.StringVar(&f.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", cfg.LogFormat, "text or json")
	fs.StringVar(&f.StaticFile, "static-file", "", "YAML file of static services and endpoints, reloaded on change")
	fs.StringVar(&f.ServiceConfig.Dir, "service-config-dir", "", "directory of SERVICE.yaml weight strategy configs, one per service, watched and reloaded; a service with a file there cannot be changed through the API")
	fs.DurationVar(&f.ServiceConfig.Tombstone, "service-config-tombstone", 0, "how long a deleted service config keeps applying, shown as deleted, before the defaults apply (0: 168h)")
	fs.StringVar(&f.AdminTokenFile, "admin-token-file", "", `file holding the admin token that "spillwayctl panic" and "rollout set" need; without it they are refused`)
	fs.StringVar(&f.TokensFile, "tokens-file", "", "YAML `file` of bearer tokens, a list of {identity: NAME, sha256: HEX} (spillwayctl token new NAME), reloaded on change")
	fs.StringVar(&f.AuthzFile, "authz-file", "", "YAML policy `file` of which identity may do what, reloaded on change (\"\": anyone may register and read, only identity admin may change panic, rollout, routes and config)")
	fs.DurationVar(&f.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "how long SIGTERM waits for in-flight work")
	fs.DurationVar(&f.Leases.DefaultTTL, "lease-ttl", cfg.Leases.DefaultTTL, "default VM lease TTL")
	fs.DurationVar(&f.Leases.MinTTL, "lease-min-ttl", cfg.Leases.MinTTL, "smallest TTL a registration may ask for")
	fs.DurationVar(&f.Leases.MaxTTL, "lease-max-ttl", cfg.Leases.MaxTTL, "largest TTL a registration may ask for")
	fs.DurationVar(&f.Leases.Tick, "lease-tick", cfg.Leases.Tick, "how often leases are checked for expiry")
	fs.Float64Var(&f.Leases.GuardShare, "guard-share", cfg.Leases.GuardShare, "share of VM leases at risk above which expiry pauses (1 disables)")
	fs.IntVar(&f.Leases.GuardMinCount, "guard-min-count", cfg.Leases.GuardMinCount, "least number of leases at risk that can pause expiry")
	fs.StringVar(&f.XDS.PortName, "xds-port-name", cfg.XDS.PortName, "endpoint port that xDS clients dial")
	fs.DurationVar(&f.XDS.Debounce, "xds-debounce", cfg.XDS.Debounce, "the first coalescing window: a lone change is pushed at once, the changes that follow within this window are pushed together")
	fs.DurationVar(&f.XDS.MaxDelay, "xds-max-delay", cfg.XDS.MaxDelay, "the longest a change waits while a burst goes on (the coalescing window doubles up to it)")
	fs.DurationVar(&f.XDS.Resync, "xds-resync", cfg.XDS.Resync, "period of a full xDS re-evaluation")
	fs.DurationVar(&f.XDS.LRSInterval, "lrs-interval", cfg.XDS.LRSInterval, "load reporting interval asked of xDS clients")
	fs.BoolVar(&f.XDS.ZoneAware, "zone-aware", cfg.XDS.ZoneAware, "zone-aware, load-aware locality weights (false: weights follow healthy endpoint counts)")
	fs.DurationVar(&f.XDS.WeightsInterval, "weights-interval", cfg.XDS.WeightsInterval, "how often zone-aware weights are recomputed")
	fs.Float64Var(&f.XDS.ProbeShare, "probe-share", cfg.XDS.ProbeShare, "share of each client zone's traffic kept on the other healthy zones so they stay measured")
	fs.IntVar(&f.XDS.MaxZones, "xds-max-zones", cfg.XDS.MaxZones, "client zones that keep their own name in metrics and zone-aware routes; later ones share \"other\" and the zoneless route")
	fs.BoolVar(&f.Pprof, "pprof", false, "serve /debug/pprof/ (net/http/pprof) on the HTTP address")
	fs.BoolVar(&f.GRPC.SharedWriteBuffer, "grpc-shared-write-buffer", cfg.GRPC.SharedWriteBuffer, "return a gRPC connection's write buffer to a shared pool after each flush, so an idle connection holds none")
	fs.IntVar(&f.GRPC.WriteBufferSize, "grpc-write-buffer-size", cfg.GRPC.WriteBufferSize, "bytes a gRPC connection batches before writing to the socket (0: write each frame at once)")
	fs.IntVar(&f.GRPC.ReadBufferSize, "grpc-read-buffer-size", cfg.GRPC.ReadBufferSize, "most bytes one socket read of a gRPC connection takes; 0 has no read buffer (the HTTP/2 framer reads the socket itself, two reads per frame)")
	fs.IntVar(&f.GRPC.HeaderTableSize, "grpc-header-table-size", cfg.GRPC.HeaderTableSize, "HPACK dynamic table in bytes a client may fill with its headers on a gRPC connection (0: none kept; clients send full headers once per RPC)")
	var win, connWin int
	fs.IntVar(&win, "grpc-initial-window-size", 0, "fixed HTTP/2 stream window in bytes, at least 65536 (0: grpc-go's dynamic window)")
	fs.IntVar(&connWin, "grpc-initial-conn-window-size", 0, "fixed HTTP/2 connection window in bytes, at least 65536 (0: grpc-go's dynamic window)")
	fs.DurationVar(&f.GRPC.KeepaliveTime, "grpc-keepalive-time", cfg.GRPC.KeepaliveTime, "ping a gRPC connection silent for this long")
	fs.DurationVar(&f.GRPC.KeepaliveTimeout, "grpc-keepalive-timeout", cfg.GRPC.KeepaliveTimeout, "close a gRPC connection whose ping is not acknowledged within this")
	fs.DurationVar(&f.GRPC.KeepaliveMinTime, "grpc-keepalive-min-time", cfg.GRPC.KeepaliveMinTime, "shortest ping interval a client may use before it is told too_many_pings")
	fs.IntVar(&f.GRPC.AdmitInSetup, "grpc-admit-in-setup", cfg.GRPC.AdmitInSetup, "most new gRPC connections set up at once (handshake to first answer); the rest wait accepted (0: no limit)")
	fs.IntVar(&f.GRPC.AdmitQueue, "grpc-admit-queue", cfg.GRPC.AdmitQueue, "most accepted gRPC connections waiting for a place in setup; one more is closed")
	fs.DurationVar(&f.GRPC.AdmitSetupTimeout, "grpc-admit-setup-timeout", cfg.GRPC.AdmitSetupTimeout, "longest a new gRPC connection holds its place in setup before its first answer")
	fs.StringVar(&f.TLS.Cert, "tls-cert", "", "PEM certificate `file` of the gRPC and HTTP listeners (with --tls-key; turns on TLS, reloaded when it changes)")
	fs.StringVar(&f.TLS.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.StringVar(&f.TLS.ClientCA, "client-ca", "", "PEM CA bundle `file` client certificates must chain to (mTLS; also the roots for dialling other replicas)")
	fs.StringVar(&f.TLS.ClientAuth, "client-auth", "", "with --client-ca: require (the default) or optional (callers without a certificate, e.g. with a token, get in)")
	fs.StringVar(&f.TLS.MinVersion, "tls-min-version", cfg.TLS.MinVersion, "lowest TLS version: 1.2 or 1.3")
	fs.DurationVar(&f.TLS.Reload, "tls-reload", cfg.TLS.Reload, "how often the certificate, key and CA files are read again; a rotation reaches new connections within this")
	dnsAbuseSet := dnsAbuseFlags(fs, &f.DNS.DNSAbuse, cfg.DNS.DNSAbuse, &cfg)
	var kubeconfigs kubeconfigFlag
	fs.Var(&kubeconfigs, "kubeconfig", "kubeconfig `PATH` of a cluster whose EndpointSlices to watch, named after the file; repeat for more clusters (replaces kubernetes.clusters)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if *configPath != "" {
		b, err := os.ReadFile(*configPath)
		if err != nil {
			return Config{}, fmt.Errorf("--config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("--config %s: %w", *configPath, err)
		}
	}
	// Flags set on the command line win over the file.
	set := map[string]func(){
		"dns-addr":           func() { cfg.DNSAddr = f.DNSAddr },
		"grpc-addr":          func() { cfg.GRPCAddr = f.GRPCAddr },
		"http-addr":          func() { cfg.HTTPAddr = f.HTTPAddr },
		"data-dir":           func() { cfg.DataDir = f.DataDir },
		"domain":             func() { cfg.Domain = f.Domain },
		"store":              func() { cfg.Store.URL = f.Store.URL },
		"etcd-ca":            func() { cfg.Store.Etcd.CA = f.Store.Etcd.CA },
		"etcd-cert":          func() { cfg.Store.Etcd.Cert = f.Store.Etcd.Cert },
		"etcd-key":           func() { cfg.Store.Etcd.Key = f.Store.Etcd.Key },
		"etcd-username":      func() { cfg.Store.Etcd.Username = f.Store.Etcd.Username },
		"etcd-password-file": func() { cfg.Store.Etcd.PasswordFile = f.Store.Etcd.PasswordFile },
		"etcd-dial-timeout":  func() { cfg.Store.Etcd.DialTimeout = f.Store.Etcd.DialTimeout },
		"spanner-poll":       func() { cfg.Store.SpannerPoll = f.Store.SpannerPoll },
		"replica-id":         func() { cfg.Store.Replica.ID = f.Store.Replica.ID },
		"lastseen-flush":     func() { cfg.Store.Replica.LastSeenFlush = f.Store.Replica.LastSeenFlush },
		"election-ttl":       func() { cfg.Store.Replica.ElectionTTL = f.Store.Replica.ElectionTTL },
		"mesh-load":          func() { cfg.Store.Replica.Mesh.Load = f.Store.Replica.Mesh.Load },
		"mesh-shards":        func() { cfg.Store.Replica.Mesh.Shards = f.Store.Replica.Mesh.Shards },
		"mesh-stale-cycles":  func() { cfg.Store.Replica.Mesh.StaleCycles = f.Store.Replica.Mesh.StaleCycles },
		"mesh-addr":          func() { cfg.Store.Replica.Mesh.Addr = f.Store.Replica.Mesh.Addr },
		"log-level":          func() { cfg.LogLevel = f.LogLevel },
		"log-format":         func() { cfg.LogFormat = f.LogFormat },
		"static-file":        func() { cfg.StaticFile = f.StaticFile },
		"region-preference":  func() { cfg.RegionPreference = f.RegionPreference },
		"admin-token-file":   func() { cfg.AdminTokenFile = f.AdminTokenFile },
		"tokens-file":        func() { cfg.TokensFile = f.TokensFile },
		"authz-file":         func() { cfg.AuthzFile = f.AuthzFile },
		"shutdown-grace":     func() { cfg.ShutdownGrace = f.ShutdownGrace },
		"lease-ttl":          func() { cfg.Leases.DefaultTTL = f.Leases.DefaultTTL },
		"lease-min-ttl":      func() { cfg.Leases.MinTTL = f.Leases.MinTTL },
		"lease-max-ttl":      func() { cfg.Leases.MaxTTL = f.Leases.MaxTTL },
		"lease-tick":         func() { cfg.Leases.Tick = f.Leases.Tick },
		"guard-share":        func() { cfg.Leases.GuardShare = f.Leases.GuardShare },
		"guard-min-count":    func() { cfg.Leases.GuardMinCount = f.Leases.GuardMinCount },
		"xds-port-name":      func() { cfg.XDS.PortName = f.XDS.PortName },
		"xds-debounce":       func() { cfg.XDS.Debounce = f.XDS.Debounce },
		"xds-max-delay":      func() { cfg.XDS.MaxDelay = f.XDS.MaxDelay },
		"xds-resync":         func() { cfg.XDS.Resync = f.XDS.Resync },
		"lrs-interval":       func() { cfg.XDS.LRSInterval = f.XDS.LRSInterval },
		"zone-aware":         func() { cfg.XDS.ZoneAware = f.XDS.ZoneAware },
		"weights-interval":   func() { cfg.XDS.WeightsInterval = f.XDS.WeightsInterval },
		"probe-share":        func() { cfg.XDS.ProbeShare = f.XDS.ProbeShare },
		"xds-max-zones":      func() { cfg.XDS.MaxZones = f.XDS.MaxZones },
		"kubeconfig":         func() { cfg.Kubernetes.Clusters = kubeconfigs.clusters() },
		"pprof":              func() { cfg.Pprof = f.Pprof },
		"tls-cert":           func() { cfg.TLS.Cert = f.TLS.Cert },
		"tls-key":            func() { cfg.TLS.Key = f.TLS.Key },
		"client-ca":          func() { cfg.TLS.ClientCA = f.TLS.ClientCA },
		"client-auth":        func() { cfg.TLS.ClientAuth = f.TLS.ClientAuth },
		"tls-min-version":    func() { cfg.TLS.MinVersion = f.TLS.MinVersion },
		"tls-reload":         func() { cfg.TLS.Reload = f.TLS.Reload },

		"service-config-dir":       func() { cfg.ServiceConfig.Dir = f.ServiceConfig.Dir },
		"service-config-tombstone": func() { cfg.ServiceConfig.Tombstone = f.ServiceConfig.Tombstone },

		"grpc-shared-write-buffer":      func() { cfg.GRPC.SharedWriteBuffer = f.GRPC.SharedWriteBuffer },
		"grpc-write-buffer-size":        func() { cfg.GRPC.WriteBufferSize = f.GRPC.WriteBufferSize },
		"grpc-read-buffer-size":         func() { cfg.GRPC.ReadBufferSize = f.GRPC.ReadBufferSize },
		"grpc-header-table-size":        func() { cfg.GRPC.HeaderTableSize = f.GRPC.HeaderTableSize },
		"grpc-initial-window-size":      func() { cfg.GRPC.InitialWindowSize = clampInt32(win) },
		"grpc-initial-conn-window-size": func() { cfg.GRPC.InitialConnWindowSize = clampInt32(connWin) },
		"grpc-keepalive-time":           func() { cfg.GRPC.KeepaliveTime = f.GRPC.KeepaliveTime },
		"grpc-keepalive-timeout":        func() { cfg.GRPC.KeepaliveTimeout = f.GRPC.KeepaliveTimeout },
		"grpc-keepalive-min-time":       func() { cfg.GRPC.KeepaliveMinTime = f.GRPC.KeepaliveMinTime },
		"grpc-admit-in-setup":           func() { cfg.GRPC.AdmitInSetup = f.GRPC.AdmitInSetup },
		"grpc-admit-queue":              func() { cfg.GRPC.AdmitQueue = f.GRPC.AdmitQueue },
		"grpc-admit-setup-timeout":      func() { cfg.GRPC.AdmitSetupTimeout = f.GRPC.AdmitSetupTimeout },
	}
	maps.Copy(set, dnsAbuseSet)
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

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/weights/regions"
)

// configFlags registers every flag of the server but --config on fs,
// with the values of def (the defaults) as flag defaults, and returns, by
// flag name, how each flag given on the command line is applied over cfg
// once the config file is read. The flag values themselves live apart
// from cfg, so that a flag left out does not override the file.
func configFlags(fs *flag.FlagSet, def Config, cfg *Config) map[string]func() {
	var f Config
	set := serverFlags(fs, &f, &def, cfg)
	maps.Copy(set, storeFlags(fs, &f.Store, def.Store, &cfg.Store))
	maps.Copy(set, leaseFlags(fs, &f.Leases, def.Leases, &cfg.Leases))
	maps.Copy(set, xdsFlags(fs, &f.XDS, def.XDS, &cfg.XDS))
	maps.Copy(set, grpcFlags(fs, &f.GRPC, def.GRPC, &cfg.GRPC))
	maps.Copy(set, tlsFlags(fs, &f.TLS, def.TLS, &cfg.TLS))
	maps.Copy(set, dnsAbuseFlags(fs, &f.DNS.DNSAbuse, def.DNS.DNSAbuse, cfg))
	return set
}

// serverFlags registers the flags of the top-level fields (listen
// addresses, data directory, domain, logs, the files the server reads,
// shutdown, pprof, region preference, kubeconfigs), writing their values
// into f, and returns how each is applied over cfg.
func serverFlags(fs *flag.FlagSet, f, def, cfg *Config) map[string]func() {
	fs.StringVar(&f.DNSAddr, "dns-addr", def.DNSAddr, "DNS listen address, UDP and TCP")
	fs.StringVar(&f.GRPCAddr, "grpc-addr", def.GRPCAddr, "gRPC listen address (ADS, LRS, registry and admin APIs)")
	fs.StringVar(&f.HTTPAddr, "http-addr", def.HTTPAddr, "HTTP listen address (/healthz, /readyz, /metrics, JSON API)")
	fs.Func("http-host", "a DNS `name` clients reach --http-addr by, e.g. a load balancer's (repeatable; replaces http_hosts): requests for other names but IP addresses, localhost and the host name are refused, against DNS rebinding (none: with TLS, any name)", func(v string) error {
		f.HTTPHosts = append(f.HTTPHosts, v)
		return nil
	})
	fs.StringVar(&f.DataDir, "data-dir", def.DataDir, `directory for durable state; "" keeps registrations in memory only`)
	fs.Func("region-preference", "per client region, the other regions in failover order: `R1=R2,R3;R2=R1,R3` (xDS and SRV priorities; unset: by name)", func(v string) error {
		p, err := regions.ParsePreference(v)
		f.RegionPreference = p
		return err
	})
	fs.StringVar(&f.Domain, "domain", def.Domain, "DNS domain served")
	fs.StringVar(&f.LogLevel, "log-level", def.LogLevel, "debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", def.LogFormat, "text or json")
	fs.StringVar(&f.StaticFile, "static-file", "", "YAML file of static services and endpoints, reloaded on change")
	fs.StringVar(&f.ServiceConfig.Dir, "service-config-dir", "", "directory of SERVICE.yaml weight strategy configs, one per service, watched and reloaded; a service with a file there cannot be changed through the API")
	fs.DurationVar(&f.ServiceConfig.Tombstone, "service-config-tombstone", 0, "how long a deleted service config keeps applying, shown as deleted, before the defaults apply (0: 168h)")
	fs.StringVar(&f.AdminTokenFile, "admin-token-file", "", `file holding the admin token that "spillwayctl panic" and "rollout set" need; without it they are refused`)
	fs.StringVar(&f.TokensFile, "tokens-file", "", "YAML `file` of bearer tokens, a list of {identity: NAME, sha256: HEX} (spillwayctl token new NAME), reloaded on change")
	fs.StringVar(&f.AuthzFile, "authz-file", "", "YAML policy `file` of which identity may do what, reloaded on change (\"\": anyone may register and read, only identity admin may change panic, rollout, routes and config)")
	fs.DurationVar(&f.ShutdownGrace, "shutdown-grace", def.ShutdownGrace, "how long SIGTERM waits for in-flight work")
	fs.BoolVar(&f.Pprof, "pprof", false, "serve /debug/pprof/ (net/http/pprof) on the HTTP address")
	var kubeconfigs kubeconfigFlag
	fs.Var(&kubeconfigs, "kubeconfig", "kubeconfig `PATH` of a cluster whose EndpointSlices to watch, named after the file; repeat for more clusters (replaces kubernetes.clusters)")
	return map[string]func(){
		"dns-addr":                 func() { cfg.DNSAddr = f.DNSAddr },
		"grpc-addr":                func() { cfg.GRPCAddr = f.GRPCAddr },
		"http-addr":                func() { cfg.HTTPAddr = f.HTTPAddr },
		"http-host":                func() { cfg.HTTPHosts = f.HTTPHosts },
		"data-dir":                 func() { cfg.DataDir = f.DataDir },
		"domain":                   func() { cfg.Domain = f.Domain },
		"log-level":                func() { cfg.LogLevel = f.LogLevel },
		"log-format":               func() { cfg.LogFormat = f.LogFormat },
		"static-file":              func() { cfg.StaticFile = f.StaticFile },
		"region-preference":        func() { cfg.RegionPreference = f.RegionPreference },
		"admin-token-file":         func() { cfg.AdminTokenFile = f.AdminTokenFile },
		"tokens-file":              func() { cfg.TokensFile = f.TokensFile },
		"authz-file":               func() { cfg.AuthzFile = f.AuthzFile },
		"shutdown-grace":           func() { cfg.ShutdownGrace = f.ShutdownGrace },
		"kubeconfig":               func() { cfg.Kubernetes.Clusters = kubeconfigs.clusters() },
		"pprof":                    func() { cfg.Pprof = f.Pprof },
		"service-config-dir":       func() { cfg.ServiceConfig.Dir = f.ServiceConfig.Dir },
		"service-config-tombstone": func() { cfg.ServiceConfig.Tombstone = f.ServiceConfig.Tombstone },
	}
}

// storeFlags registers the flags of store (the shared store, etcd,
// Spanner, replication and mesh-wide load), writing their values into f,
// and returns how each is applied over dst.
func storeFlags(fs *flag.FlagSet, f *StoreConfig, def StoreConfig, dst *StoreConfig) map[string]func() {
	fs.StringVar(&f.URL, "store", "", `durable state: "" is bbolt in --data-dir; etcd://host:2379[,host:2379...]/prefix or spanner://projects/P/instances/I/databases/D share it between replicas`)
	fs.StringVar(&f.Etcd.CA, "etcd-ca", "", "PEM CA `file` that signs the etcd servers' certificates (turns on TLS)")
	fs.StringVar(&f.Etcd.Cert, "etcd-cert", "", "PEM client certificate `file` for etcd (with --etcd-key)")
	fs.StringVar(&f.Etcd.Key, "etcd-key", "", "PEM client key `file` for etcd (with --etcd-cert)")
	fs.StringVar(&f.Etcd.Username, "etcd-username", "", "etcd user (with --etcd-password-file)")
	fs.StringVar(&f.Etcd.PasswordFile, "etcd-password-file", "", "`file` holding the etcd user's password")
	fs.DurationVar(&f.Etcd.DialTimeout, "etcd-dial-timeout", 0, "how long the first etcd connection may take (0: 5s)")
	fs.DurationVar(&f.SpannerPoll, "spanner-poll", 0, "how often a replica reads what others wrote to Spanner (0: 500ms)")
	fs.StringVar(&f.Replica.ID, "replica-id", "", "this replica's name in the shared store and the expiry election (\"\": host name and pid)")
	fs.DurationVar(&f.Replica.LastSeenFlush, "lastseen-flush", 0, "how often a replica writes its heartbeats' last-seen stamps to the shared store (0: 10s)")
	fs.DurationVar(&f.Replica.ElectionTTL, "election-ttl", 0, "how long the expiry election stays with a replica that stopped renewing it (0: 5s)")
	fs.BoolVar(&f.Replica.Mesh.Load, "mesh-load", def.Replica.Mesh.Load, "on a shared store: each service's weights come from every replica's load reports, computed by the service's owner replica and published through the store (false: each replica plans from its own reports)")
	fs.IntVar(&f.Replica.Mesh.Shards, "mesh-shards", 0, "how many shards services are spread over for ownership; the same on every replica (0: 16)")
	fs.IntVar(&f.Replica.Mesh.StaleCycles, "mesh-stale-cycles", 0, "weights cycles without a heartbeat from a service's owner before a replica falls back to its own view (0: 3)")
	fs.StringVar(&f.Replica.Mesh.Addr, "mesh-addr", "", "host:port other replicas reach this replica's gRPC port on, for load summaries (\"\": --grpc-addr)")
	return map[string]func(){
		"store":              func() { dst.URL = f.URL },
		"etcd-ca":            func() { dst.Etcd.CA = f.Etcd.CA },
		"etcd-cert":          func() { dst.Etcd.Cert = f.Etcd.Cert },
		"etcd-key":           func() { dst.Etcd.Key = f.Etcd.Key },
		"etcd-username":      func() { dst.Etcd.Username = f.Etcd.Username },
		"etcd-password-file": func() { dst.Etcd.PasswordFile = f.Etcd.PasswordFile },
		"etcd-dial-timeout":  func() { dst.Etcd.DialTimeout = f.Etcd.DialTimeout },
		"spanner-poll":       func() { dst.SpannerPoll = f.SpannerPoll },
		"replica-id":         func() { dst.Replica.ID = f.Replica.ID },
		"lastseen-flush":     func() { dst.Replica.LastSeenFlush = f.Replica.LastSeenFlush },
		"election-ttl":       func() { dst.Replica.ElectionTTL = f.Replica.ElectionTTL },
		"mesh-load":          func() { dst.Replica.Mesh.Load = f.Replica.Mesh.Load },
		"mesh-shards":        func() { dst.Replica.Mesh.Shards = f.Replica.Mesh.Shards },
		"mesh-stale-cycles":  func() { dst.Replica.Mesh.StaleCycles = f.Replica.Mesh.StaleCycles },
		"mesh-addr":          func() { dst.Replica.Mesh.Addr = f.Replica.Mesh.Addr },
	}
}

// leaseFlags registers the flags of leases (VM lease TTLs and the
// mass-expiry guard), writing their values into f, and returns how each
// is applied over dst.
func leaseFlags(fs *flag.FlagSet, f *LeaseConfig, def LeaseConfig, dst *LeaseConfig) map[string]func() {
	fs.DurationVar(&f.DefaultTTL, "lease-ttl", def.DefaultTTL, "default VM lease TTL")
	fs.DurationVar(&f.MinTTL, "lease-min-ttl", def.MinTTL, "smallest TTL a registration may ask for")
	fs.DurationVar(&f.MaxTTL, "lease-max-ttl", def.MaxTTL, "largest TTL a registration may ask for")
	fs.DurationVar(&f.Tick, "lease-tick", def.Tick, "how often leases are checked for expiry")
	fs.Float64Var(&f.GuardShare, "guard-share", def.GuardShare, "share of VM leases at risk above which expiry pauses (1 disables)")
	fs.IntVar(&f.GuardMinCount, "guard-min-count", def.GuardMinCount, "least number of leases at risk that can pause expiry")
	return map[string]func(){
		"lease-ttl":       func() { dst.DefaultTTL = f.DefaultTTL },
		"lease-min-ttl":   func() { dst.MinTTL = f.MinTTL },
		"lease-max-ttl":   func() { dst.MaxTTL = f.MaxTTL },
		"lease-tick":      func() { dst.Tick = f.Tick },
		"guard-share":     func() { dst.GuardShare = f.GuardShare },
		"guard-min-count": func() { dst.GuardMinCount = f.GuardMinCount },
	}
}

// xdsFlags registers the flags of xds (pushes, load reporting and
// zone-aware weights), writing their values into f, and returns how each
// is applied over dst.
func xdsFlags(fs *flag.FlagSet, f *XDSConfig, def XDSConfig, dst *XDSConfig) map[string]func() {
	fs.StringVar(&f.PortName, "xds-port-name", def.PortName, "endpoint port that xDS clients dial")
	fs.DurationVar(&f.Debounce, "xds-debounce", def.Debounce, "a service's first coalescing window: a change to a quiet service is pushed at once, the changes to it that follow within this window are pushed together")
	fs.DurationVar(&f.MaxDelay, "xds-max-delay", def.MaxDelay, "the longest a change waits while its service keeps changing (the service's coalescing window doubles up to it)")
	fs.DurationVar(&f.Resync, "xds-resync", def.Resync, "period of a full xDS re-evaluation")
	fs.DurationVar(&f.LRSInterval, "lrs-interval", def.LRSInterval, "load reporting interval asked of xDS clients")
	fs.BoolVar(&f.ZoneAware, "zone-aware", def.ZoneAware, "zone-aware, load-aware locality weights (false: weights follow healthy endpoint counts)")
	fs.DurationVar(&f.WeightsInterval, "weights-interval", def.WeightsInterval, "how often zone-aware weights are recomputed")
	fs.Float64Var(&f.ProbeShare, "probe-share", def.ProbeShare, "share of each client zone's traffic kept on the other healthy zones so they stay measured")
	fs.IntVar(&f.MaxZones, "xds-max-zones", def.MaxZones, "client zones that keep their own name in metrics and zone-aware routes; later ones share \"other\" and the zoneless route")
	fs.StringVar(&f.EndpointHostname, "xds-endpoint-hostname", def.EndpointHostname, "what an EDS endpoint's hostname holds: id (the endpoint's id) or none (about a third fewer bytes per endpoint; Envoy then shows and rewrites no hostname)")
	return map[string]func(){
		"xds-endpoint-hostname": func() { dst.EndpointHostname = f.EndpointHostname },
		"xds-port-name":         func() { dst.PortName = f.PortName },
		"xds-debounce":          func() { dst.Debounce = f.Debounce },
		"xds-max-delay":         func() { dst.MaxDelay = f.MaxDelay },
		"xds-resync":            func() { dst.Resync = f.Resync },
		"lrs-interval":          func() { dst.LRSInterval = f.LRSInterval },
		"zone-aware":            func() { dst.ZoneAware = f.ZoneAware },
		"weights-interval":      func() { dst.WeightsInterval = f.WeightsInterval },
		"probe-share":           func() { dst.ProbeShare = f.ProbeShare },
		"xds-max-zones":         func() { dst.MaxZones = f.MaxZones },
	}
}

// grpcFlags registers the flags of grpc (connection buffers, HTTP/2
// windows, keepalive, admission and stream limits), writing their values into f, and
// returns how each is applied over dst. The window flags take an int and
// are clamped to int32 when applied.
func grpcFlags(fs *flag.FlagSet, f *GRPCConfig, def GRPCConfig, dst *GRPCConfig) map[string]func() {
	fs.BoolVar(&f.SharedWriteBuffer, "grpc-shared-write-buffer", def.SharedWriteBuffer, "return a gRPC connection's write buffer to a shared pool after each flush, so an idle connection holds none")
	fs.IntVar(&f.WriteBufferSize, "grpc-write-buffer-size", def.WriteBufferSize, "bytes a gRPC connection batches before writing to the socket (0: write each frame at once)")
	fs.IntVar(&f.ReadBufferSize, "grpc-read-buffer-size", def.ReadBufferSize, "most bytes one socket read of a gRPC connection takes; 0 has no read buffer (the HTTP/2 framer reads the socket itself, two reads per frame)")
	fs.IntVar(&f.HeaderTableSize, "grpc-header-table-size", def.HeaderTableSize, "HPACK dynamic table in bytes a client may fill with its headers on a gRPC connection (0: none kept; clients send full headers once per RPC)")
	var win, connWin int
	fs.IntVar(&win, "grpc-initial-window-size", 0, "fixed HTTP/2 stream window in bytes, at least 65536 (0: grpc-go's dynamic window)")
	fs.IntVar(&connWin, "grpc-initial-conn-window-size", 0, "fixed HTTP/2 connection window in bytes, at least 65536 (0: grpc-go's dynamic window)")
	fs.DurationVar(&f.KeepaliveTime, "grpc-keepalive-time", def.KeepaliveTime, "ping a gRPC connection silent for this long")
	fs.DurationVar(&f.KeepaliveTimeout, "grpc-keepalive-timeout", def.KeepaliveTimeout, "close a gRPC connection whose ping is not acknowledged within this")
	fs.DurationVar(&f.KeepaliveMinTime, "grpc-keepalive-min-time", def.KeepaliveMinTime, "shortest ping interval a client may use before it is told too_many_pings")
	fs.IntVar(&f.AdmitInSetup, "grpc-admit-in-setup", def.AdmitInSetup, "most new gRPC connections set up at once (handshake to first answer); the rest wait accepted (0: no limit)")
	fs.IntVar(&f.AdmitQueue, "grpc-admit-queue", def.AdmitQueue, "most accepted gRPC connections waiting for a place in setup; one more is closed")
	fs.DurationVar(&f.AdmitSetupTimeout, "grpc-admit-setup-timeout", def.AdmitSetupTimeout, "longest a new gRPC connection holds its place in setup before its first answer")
	fs.IntVar(&f.MaxStreamsPerConn, "grpc-max-streams-per-conn", def.MaxStreamsPerConn, "most streams open at once on one gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; grpc-go clients queue the rest; 0: no limit)")
	fs.IntVar(&f.MaxStreamsPerIdentity, "grpc-max-streams-per-identity", def.MaxStreamsPerIdentity, "most gRPC streams one identity (anonymous callers: one peer IP) holds open across its connections; one more is refused with RESOURCE_EXHAUSTED (0: no limit)")
	return map[string]func(){
		"grpc-shared-write-buffer":      func() { dst.SharedWriteBuffer = f.SharedWriteBuffer },
		"grpc-write-buffer-size":        func() { dst.WriteBufferSize = f.WriteBufferSize },
		"grpc-read-buffer-size":         func() { dst.ReadBufferSize = f.ReadBufferSize },
		"grpc-header-table-size":        func() { dst.HeaderTableSize = f.HeaderTableSize },
		"grpc-initial-window-size":      func() { dst.InitialWindowSize = clampInt32(win) },
		"grpc-initial-conn-window-size": func() { dst.InitialConnWindowSize = clampInt32(connWin) },
		"grpc-keepalive-time":           func() { dst.KeepaliveTime = f.KeepaliveTime },
		"grpc-keepalive-timeout":        func() { dst.KeepaliveTimeout = f.KeepaliveTimeout },
		"grpc-keepalive-min-time":       func() { dst.KeepaliveMinTime = f.KeepaliveMinTime },
		"grpc-admit-in-setup":           func() { dst.AdmitInSetup = f.AdmitInSetup },
		"grpc-admit-queue":              func() { dst.AdmitQueue = f.AdmitQueue },
		"grpc-admit-setup-timeout":      func() { dst.AdmitSetupTimeout = f.AdmitSetupTimeout },
		"grpc-max-streams-per-conn":     func() { dst.MaxStreamsPerConn = f.MaxStreamsPerConn },
		"grpc-max-streams-per-identity": func() { dst.MaxStreamsPerIdentity = f.MaxStreamsPerIdentity },
	}
}

// tlsFlags registers the flags of tls (the listeners' certificate, mTLS
// and reloading), writing their values into f, and returns how each is
// applied over dst.
func tlsFlags(fs *flag.FlagSet, f *TLSConfig, def TLSConfig, dst *TLSConfig) map[string]func() {
	fs.StringVar(&f.Cert, "tls-cert", "", "PEM certificate `file` of the gRPC and HTTP listeners (with --tls-key; turns on TLS, reloaded when it changes)")
	fs.StringVar(&f.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.StringVar(&f.ClientCA, "client-ca", "", "PEM CA bundle `file` client certificates must chain to (mTLS; also the roots for dialling other replicas)")
	fs.StringVar(&f.ClientAuth, "client-auth", "", "with --client-ca: require (the default) or optional (callers without a certificate, e.g. with a token, get in)")
	fs.StringVar(&f.MinVersion, "tls-min-version", def.MinVersion, "lowest TLS version: 1.2 or 1.3")
	fs.DurationVar(&f.Reload, "tls-reload", def.Reload, "how often the certificate, key and CA files are read again; a rotation reaches new connections within this")
	return map[string]func(){
		"tls-cert":        func() { dst.Cert = f.Cert },
		"tls-key":         func() { dst.Key = f.Key },
		"client-ca":       func() { dst.ClientCA = f.ClientCA },
		"client-auth":     func() { dst.ClientAuth = f.ClientAuth },
		"tls-min-version": func() { dst.MinVersion = f.MinVersion },
		"tls-reload":      func() { dst.Reload = f.Reload },
	}
}

// readConfigFile decodes the YAML file at path over cfg, refusing
// unknown fields; an empty file leaves cfg as it is.
func readConfigFile(path string, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}

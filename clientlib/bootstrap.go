package clientlib

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc/resolver"
	grpcxds "google.golang.org/grpc/xds"
)

// bootstrap is the xDS bootstrap (gRFC A27) the library writes for its
// xDS channel.
type bootstrap struct {
	XDSServers []xdsServer `json:"xds_servers"`
	Node       node        `json:"node"`
}

type xdsServer struct {
	ServerURI      string        `json:"server_uri"`
	ChannelCreds   []channelCred `json:"channel_creds"`
	ServerFeatures []string      `json:"server_features"`
}

type channelCred struct {
	Type   string          `json:"type"`
	Config json.RawMessage `json:"config,omitempty"`
}

type node struct {
	ID       string            `json:"id"`
	Cluster  string            `json:"cluster"`
	Locality locality          `json:"locality"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type locality struct {
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

// nodeID is "<service>~<hostname>~<8 random hex bytes>": readable in the
// control plane's views, and unique per Conn.
func nodeID(service string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [8]byte
	rand.Read(b[:])
	return service + "~" + strings.ToLower(host) + "~" + hex.EncodeToString(b[:])
}

// bootstrapJSON is the bootstrap for a Conn with options o.
//
// "ignore_resource_deletion" (gRFC A53) keeps the last Listener and
// Cluster when a restarted control plane does not send them at once, so a
// control plane restart does not take the channel down.
func (o *options) bootstrapJSON(id string) ([]byte, error) {
	md := o.subject()
	creds, err := o.channelCreds()
	if err != nil {
		return nil, err
	}
	return json.Marshal(bootstrap{
		XDSServers: []xdsServer{{
			ServerURI:      o.controlPlane,
			ChannelCreds:   creds,
			ServerFeatures: []string{"xds_v3", "ignore_resource_deletion"},
		}},
		Node: node{
			ID:       id,
			Cluster:  o.service,
			Locality: locality{Region: *o.region, Zone: *o.zone},
			Metadata: md,
		},
	})
}

// The xDS channel's bootstrap: the process's, or one per Conn.
//
// grpc-go's supported way is one bootstrap per process, read by its
// default "xds" resolver from GRPC_XDS_BOOTSTRAP (a file) or
// GRPC_XDS_BOOTSTRAP_CONFIG (the JSON). grpc-go reads both variables when
// the process starts (package initialisation of its internal/envconfig),
// so setting them later, as a library could, has no effect: the library
// cannot write the process bootstrap for its caller. These variables are
// read at the same moment, to report what grpc-go will use.
var (
	envBootstrapFile   = os.Getenv(EnvBootstrapFile)
	envBootstrapConfig = os.Getenv(EnvBootstrapConfig)
)

// The environment variables of grpc-go's process-wide xDS bootstrap.
const (
	EnvBootstrapFile   = "GRPC_XDS_BOOTSTRAP"
	EnvBootstrapConfig = "GRPC_XDS_BOOTSTRAP_CONFIG"
)

// bootstrapInfo is what Status shows of the bootstrap in use.
type bootstrapInfo struct {
	source string // "env:<variable>" or "per-conn"
	nodeID string
}

// processBootstrap reads the process bootstrap once, as grpc-go does (a
// file when both variables are set).
var processBootstrap = sync.OnceValues(func() (bootstrap, error) {
	var (
		b   []byte
		err error
	)
	switch {
	case envBootstrapFile != "":
		if b, err = os.ReadFile(envBootstrapFile); err != nil {
			return bootstrap{}, fmt.Errorf("xds bootstrap: $%s: %w", EnvBootstrapFile, err)
		}
	case envBootstrapConfig != "":
		b = []byte(envBootstrapConfig)
	default:
		return bootstrap{}, errNoProcessBootstrap
	}
	var bs bootstrap
	if err := json.Unmarshal(b, &bs); err != nil {
		return bootstrap{}, fmt.Errorf("xds bootstrap from $%s: %w", processBootstrapVar(), err)
	}
	return bs, nil
})

func processBootstrapVar() string {
	if envBootstrapFile != "" {
		return EnvBootstrapFile
	}
	return EnvBootstrapConfig
}

// errNoProcessBootstrap is the xDS channel's error without a process
// bootstrap or WithPerConnBootstrap.
var errNoProcessBootstrap = errors.New("xds bootstrap: neither $" + EnvBootstrapFile + " nor $" + EnvBootstrapConfig +
	" was set when the process started (clientlib.BootstrapJSON writes one), and no WithPerConnBootstrap")

// xdsBootstrap returns the bootstrap of a new xDS channel and, for a
// per-Conn bootstrap, the resolver builder that carries it (nil: grpc-go's
// default "xds" resolver with the process bootstrap).
func (o *options) xdsBootstrap(log *slog.Logger) (bootstrapInfo, resolver.Builder, error) {
	if !o.perConnBootstrap {
		bs, err := processBootstrap()
		if err != nil {
			return bootstrapInfo{}, nil, err
		}
		if bs.Node.Cluster != o.service {
			log.Warn("the process xds bootstrap names another calling service", "node_cluster", bs.Node.Cluster)
		}
		if *o.zone != "" && bs.Node.Locality.Zone != *o.zone {
			log.Warn("the process xds bootstrap gives another zone", "bootstrap_zone", bs.Node.Locality.Zone, "zone", *o.zone)
		}
		if len(bs.XDSServers) > 0 && bs.XDSServers[0].ServerURI != o.controlPlane {
			log.Warn("the process xds bootstrap names another control plane", "server_uri", bs.XDSServers[0].ServerURI, "control_plane", o.controlPlane)
		}
		return bootstrapInfo{source: "env:" + processBootstrapVar(), nodeID: bs.Node.ID}, nil, nil
	}
	id := nodeID(o.service)
	b, err := o.bootstrapJSON(id)
	if err != nil {
		return bootstrapInfo{}, nil, fmt.Errorf("xds bootstrap: %w", err)
	}
	// grpc-go has no supported way to give one channel a bootstrap of its
	// own; this builder is documented upstream as for tests, and is pinned
	// by TestPerConnBootstrapPin.
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting(b)
	if err != nil {
		return bootstrapInfo{}, nil, fmt.Errorf("xds bootstrap: %w", err)
	}
	return bootstrapInfo{source: "per-conn", nodeID: id}, rb, nil
}

// BootstrapJSON returns the xDS bootstrap (gRFC A27) that WithPerConnBootstrap
// would give a Conn dialled with opts: the control plane at
// WithControlPlane, a fresh node id "<service>~<host>~<random>",
// node.cluster = WithService, node.locality from WithRegion and WithZone
// (or the environment), node.metadata from the caller's metadata, and the
// server features xds_v3 and ignore_resource_deletion; channel_creds
// "insecure", or "tls" with the files of WithTLS. Give it to the
// process as $GRPC_XDS_BOOTSTRAP_CONFIG, or write it to the file named by
// $GRPC_XDS_BOOTSTRAP, before the process starts. Errors are those of
// Dial for invalid options.
func BootstrapJSON(opts ...Option) ([]byte, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate("bootstrap"); err != nil { // any valid target
		return nil, err
	}
	return o.bootstrapJSON(nodeID(o.service))
}

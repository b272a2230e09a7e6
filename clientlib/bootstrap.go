package clientlib

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
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
	Type string `json:"type"`
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
	return json.Marshal(bootstrap{
		XDSServers: []xdsServer{{
			ServerURI:      o.controlPlane,
			ChannelCreds:   []channelCred{{Type: "insecure"}},
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

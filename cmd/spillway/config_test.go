package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/ownership"
)

func TestParseConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "spillway.yaml")
	if err := os.WriteFile(file, []byte("grpc_addr: 127.0.0.1:19000\ndata_dir: /var/lib/spillway\nleases:\n  default_ttl: 45s\n  guard_share: 0.5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("grpc_adr: 127.0.0.1:19000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	zonesFile := filepath.Join(dir, "zones.yaml")
	if err := os.WriteFile(zonesFile, []byte("xds:\n  max_zones: 12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hostnameFile := filepath.Join(dir, "hostname.yaml")
	if err := os.WriteFile(hostnameFile, []byte("xds:\n  endpoint_hostname: none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badHostnameFile := filepath.Join(dir, "bad-hostname.yaml")
	if err := os.WriteFile(badHostnameFile, []byte("xds:\n  endpoint_hostname: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		check   func(c Config) bool
		wantErr string
	}{
		{name: "defaults", args: nil, check: func(c Config) bool {
			return c.DNSAddr == "127.0.0.1:8053" && c.GRPCAddr == "127.0.0.1:18000" && c.HTTPAddr == "127.0.0.1:18080" &&
				c.DataDir == "./spillway-data" && c.Domain == "spillway.internal." && c.Leases.DefaultTTL == 30*time.Second &&
				c.Leases.GuardShare == 0.2 && c.Leases.GuardMinCount == 10
		}},
		{name: "file", args: []string{"--config", file}, check: func(c Config) bool {
			return c.GRPCAddr == "127.0.0.1:19000" && c.DataDir == "/var/lib/spillway" && c.Leases.DefaultTTL == 45*time.Second &&
				c.Leases.GuardShare == 0.5 && c.HTTPAddr == "127.0.0.1:18080"
		}},
		{name: "flag_beats_file", args: []string{"--config", file, "--grpc-addr", "127.0.0.1:20000", "--lease-ttl", "10s"}, check: func(c Config) bool {
			return c.GRPCAddr == "127.0.0.1:20000" && c.Leases.DefaultTTL == 10*time.Second && c.DataDir == "/var/lib/spillway"
		}},
		{name: "domain_gets_dot", args: []string{"--domain", "svc.example"}, check: func(c Config) bool { return c.Domain == "svc.example." }},
		{name: "empty_data_dir", args: []string{"--data-dir", ""}, check: func(c Config) bool { return c.DataDir == "" }},
		{name: "unknown_yaml_key", args: []string{"--config", bad}, wantErr: "grpc_adr"},
		{name: "missing_file", args: []string{"--config", filepath.Join(dir, "nope.yaml")}, wantErr: "--config"},
		{name: "bad_addr", args: []string{"--grpc-addr", "localhost"}, wantErr: "--grpc-addr"},
		{name: "bad_ttl", args: []string{"--lease-ttl", "2h"}, wantErr: "--lease-ttl"},
		{name: "bad_share", args: []string{"--guard-share", "0"}, wantErr: "--guard-share"},
		{name: "bad_min_count", args: []string{"--guard-min-count", "0"}, wantErr: "--guard-min-count"},
		{name: "bad_level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "bad_domain", args: []string{"--domain", "a..b"}, wantErr: "--domain"},
		{name: "max_zones_default", args: nil, check: func(c Config) bool { return c.XDS.MaxZones == 64 }},
		{name: "max_zones_flag", args: []string{"--xds-max-zones", "8"}, check: func(c Config) bool { return c.XDS.MaxZones == 8 }},
		{name: "max_zones_file", args: []string{"--config", zonesFile}, check: func(c Config) bool { return c.XDS.MaxZones == 12 }},
		{name: "bad_max_zones", args: []string{"--xds-max-zones", "0"}, wantErr: "--xds-max-zones (xds.max_zones)"},
		{name: "endpoint_hostname_default", args: nil, check: func(c Config) bool { return c.XDS.EndpointHostname == "id" }},
		{name: "endpoint_hostname_flag", args: []string{"--xds-endpoint-hostname", "none"}, check: func(c Config) bool { return c.XDS.EndpointHostname == "none" }},
		{name: "endpoint_hostname_file", args: []string{"--config", hostnameFile}, check: func(c Config) bool { return c.XDS.EndpointHostname == "none" }},
		{name: "bad_endpoint_hostname", args: []string{"--xds-endpoint-hostname", "address"}, wantErr: "--xds-endpoint-hostname (xds.endpoint_hostname)"},
		{name: "bad_endpoint_hostname_file", args: []string{"--config", badHostnameFile}, wantErr: "--xds-endpoint-hostname (xds.endpoint_hostname)"},
		{name: "stray_argument", args: []string{"serve"}, wantErr: "serve"},
		{name: "unknown_flag", args: []string{"--grpc-port", "1"}, wantErr: "grpc-port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseConfig(%q) = %v, want an error naming %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig(%q): %v", tt.args, err)
			}
			if !tt.check(c) {
				t.Errorf("parseConfig(%q) = %+v", tt.args, c)
			}
		})
	}
}

// TestMaxShardsAgree: the load exchange bounds the shards a summary
// lists by the ownership's shard bound.
func TestMaxShardsAgree(t *testing.T) {
	if exchange.MaxShards != ownership.MaxShards {
		t.Errorf("exchange.MaxShards = %d, want ownership.MaxShards %d", exchange.MaxShards, ownership.MaxShards)
	}
}

package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDNSAbuseConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("dns:\n  udp_size_cap: 1232\n  rrl: {rate: 50, burst: 100, slip: 3, ipv4_prefix_len: 16, ipv6_prefix_len: 48, table_size: 500}\n  tcp_max_conns: 10\n  tcp_max_queries: 5\n  tcp_idle_timeout: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		args    []string
		want    DNSAbuse
		wantErr string
	}{
		{"defaults", nil, DNSAbuse{RRL: DNSRRL{Slip: 2, IPv4PrefixLen: 24, IPv6PrefixLen: 56, TableSize: 100000}, TCPMaxConns: 1000, TCPMaxQueries: 100, TCPIdleTimeout: 10 * time.Second}, ""},
		{"flags", []string{"--dns-rrl-rate", "20", "--dns-rrl-burst", "40", "--dns-rrl-slip", "0", "--dns-rrl-ipv4-prefix", "32", "--dns-rrl-ipv6-prefix", "64", "--dns-rrl-table-size", "7", "--dns-tcp-max-conns", "-1", "--dns-tcp-max-queries", "-1", "--dns-tcp-idle-timeout", "1s"},
			DNSAbuse{RRL: DNSRRL{Rate: 20, Burst: 40, IPv4PrefixLen: 32, IPv6PrefixLen: 64, TableSize: 7}, TCPMaxConns: -1, TCPMaxQueries: -1, TCPIdleTimeout: time.Second}, ""},
		{"yaml", []string{"--config", file}, DNSAbuse{RRL: DNSRRL{Rate: 50, Burst: 100, Slip: 3, IPv4PrefixLen: 16, IPv6PrefixLen: 48, TableSize: 500}, TCPMaxConns: 10, TCPMaxQueries: 5, TCPIdleTimeout: 3 * time.Second}, ""},
		{"flag_over_yaml", []string{"--config", file, "--dns-rrl-rate", "0"}, DNSAbuse{RRL: DNSRRL{Burst: 100, Slip: 3, IPv4PrefixLen: 16, IPv6PrefixLen: 48, TableSize: 500}, TCPMaxConns: 10, TCPMaxQueries: 5, TCPIdleTimeout: 3 * time.Second}, ""},
		{"bad_rate", []string{"--dns-rrl-rate", "-1"}, DNSAbuse{}, "--dns-rrl-rate (dns.rrl.rate): -1"},
		{"bad_slip", []string{"--dns-rrl-slip", "-2"}, DNSAbuse{}, "--dns-rrl-slip (dns.rrl.slip): -2"},
		{"bad_v4", []string{"--dns-rrl-ipv4-prefix", "33"}, DNSAbuse{}, "--dns-rrl-ipv4-prefix (dns.rrl.ipv4_prefix_len): 33"},
		{"bad_v6", []string{"--dns-rrl-ipv6-prefix", "0"}, DNSAbuse{}, "--dns-rrl-ipv6-prefix (dns.rrl.ipv6_prefix_len): 0"},
		{"bad_table", []string{"--dns-rrl-table-size", "0"}, DNSAbuse{}, "--dns-rrl-table-size (dns.rrl.table_size): 0"},
		{"bad_conns", []string{"--dns-tcp-max-conns", "0"}, DNSAbuse{}, "--dns-tcp-max-conns (dns.tcp_max_conns): 0"},
		{"bad_queries", []string{"--dns-tcp-max-queries", "-5"}, DNSAbuse{}, "--dns-tcp-max-queries (dns.tcp_max_queries): -5"},
		{"bad_idle", []string{"--dns-tcp-idle-timeout", "0s"}, DNSAbuse{}, "--dns-tcp-idle-timeout (dns.tcp_idle_timeout): 0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig(c.args, io.Discard)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, cfg.DNS.DNSAbuse); diff != "" {
				t.Errorf("DNSAbuse (-want +got):\n%s", diff)
			}
		})
	}
}

package main

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/resolver"
)

func TestDNSAbuseConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secretFile := write("cookie.secret", "000102030405060708090a0b0c0d0e0f\n")
	secret := [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	file := write("c.yaml", "dns:\n  udp_size_cap: 1232\n  rrl: {rate: 50, burst: 100, slip: 3, ipv4_prefix_len: 16, ipv6_prefix_len: 48, table_size: 500, exempt: [10.0.0.0/8, \"2001:db8::/32\"]}\n  cookies: false\n  cookie_secret_file: "+secretFile+"\n  tcp_max_conns: 10\n  tcp_max_queries: 5\n  tcp_idle_timeout: 3s\n")
	yamlRRL := DNSRRL{Rate: 50, Burst: 100, Slip: 3, IPv4PrefixLen: 16, IPv6PrefixLen: 48, TableSize: 500, Exempt: []string{"10.0.0.0/8", "2001:db8::/32"}}
	cases := []struct {
		name    string
		args    []string
		want    DNSAbuse
		wantErr string
	}{
		// On by default: 1,000 responses a second per prefix, every
		// refused one slipped; cookies on with a random secret.
		{"defaults", nil, DNSAbuse{RRL: DNSRRL{Rate: 1000, Slip: 1, IPv4PrefixLen: 24, IPv6PrefixLen: 56, TableSize: 100000}, Cookies: true, TCPMaxConns: 1000, TCPMaxQueries: 100, TCPIdleTimeout: 10 * time.Second}, ""},
		{"flags", []string{"--dns-rrl-rate", "20", "--dns-rrl-burst", "40", "--dns-rrl-slip", "0", "--dns-rrl-ipv4-prefix", "32", "--dns-rrl-ipv6-prefix", "64", "--dns-rrl-table-size", "7", "--dns-rrl-exempt", " 10.1.0.0/16, fd00::/8,,", "--dns-cookies=false", "--dns-cookie-secret-file", secretFile, "--dns-tcp-max-conns", "-1", "--dns-tcp-max-queries", "-1", "--dns-tcp-idle-timeout", "1s"},
			DNSAbuse{RRL: DNSRRL{Rate: 20, Burst: 40, IPv4PrefixLen: 32, IPv6PrefixLen: 64, TableSize: 7, Exempt: []string{"10.1.0.0/16", "fd00::/8"}}, CookieSecretFile: secretFile, CookieSecret: secret, TCPMaxConns: -1, TCPMaxQueries: -1, TCPIdleTimeout: time.Second}, ""},
		{"yaml", []string{"--config", file}, DNSAbuse{RRL: yamlRRL, CookieSecretFile: secretFile, CookieSecret: secret, TCPMaxConns: 10, TCPMaxQueries: 5, TCPIdleTimeout: 3 * time.Second}, ""},
		{"flag_over_yaml", []string{"--config", file, "--dns-rrl-rate", "0", "--dns-cookies", "--dns-rrl-exempt", "192.0.2.0/24", "--dns-cookie-secret-file", ""},
			DNSAbuse{RRL: DNSRRL{Burst: 100, Slip: 3, IPv4PrefixLen: 16, IPv6PrefixLen: 48, TableSize: 500, Exempt: []string{"192.0.2.0/24"}}, Cookies: true, TCPMaxConns: 10, TCPMaxQueries: 5, TCPIdleTimeout: 3 * time.Second}, ""},
		{"exempt_emptied", []string{"--config", file, "--dns-rrl-exempt", ""},
			DNSAbuse{RRL: DNSRRL{Rate: 50, Burst: 100, Slip: 3, IPv4PrefixLen: 16, IPv6PrefixLen: 48, TableSize: 500}, CookieSecretFile: secretFile, CookieSecret: secret, TCPMaxConns: 10, TCPMaxQueries: 5, TCPIdleTimeout: 3 * time.Second}, ""},
		{"bad_exempt", []string{"--dns-rrl-exempt", "10.0.0.0/8,10.1.2.3"}, DNSAbuse{}, `--dns-rrl-exempt (dns.rrl.exempt): "10.1.2.3" is not a CIDR prefix`},
		{"bad_exempt_host_bits", []string{"--dns-rrl-exempt", "10.1.2.3/16"}, DNSAbuse{}, `--dns-rrl-exempt (dns.rrl.exempt): "10.1.2.3/16" has host bits set, want 10.1.0.0/16`},
		{"bad_exempt_mapped", []string{"--dns-rrl-exempt", "::ffff:10.0.0.0/104"}, DNSAbuse{}, `--dns-rrl-exempt (dns.rrl.exempt): "::ffff:10.0.0.0/104": want a plain`},
		{"missing_secret_file", []string{"--dns-cookie-secret-file", filepath.Join(dir, "nope")}, DNSAbuse{}, "--dns-cookie-secret-file (dns.cookie_secret_file) " + filepath.Join(dir, "nope")},
		{"short_secret", []string{"--dns-cookie-secret-file", write("short", "0011")}, DNSAbuse{}, "--dns-cookie-secret-file (dns.cookie_secret_file) " + filepath.Join(dir, "short") + ": holds 4 characters, want 32 hex characters"},
		{"not_hex_secret", []string{"--dns-cookie-secret-file", write("nothex", "zz0102030405060708090a0b0c0d0e0f")}, DNSAbuse{}, "--dns-cookie-secret-file (dns.cookie_secret_file) " + filepath.Join(dir, "nothex") + ": want 32 hex characters"},
		{"zero_secret", []string{"--dns-cookie-secret-file", write("zero", "00000000000000000000000000000000")}, DNSAbuse{}, "all zeros"},
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

// TestDNSAbuseResolverConfig: what the resolver is given from the
// defaults and from a file with every knob set.
func TestDNSAbuseResolverConfig(t *testing.T) {
	def, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := def.DNS.rrl(); got.Rate != 1000 || got.Burst != 0 || got.Slip != 1 || got.Exempt != nil {
		t.Errorf("default rrl() = %+v, want rate 1000, burst 0 (the rate), slip 1, nothing exempt", got)
	}
	if got := def.DNS.cookies(); got != (resolver.Cookies{}) {
		t.Errorf("default cookies() = %+v, want on with a random secret (the zero Cookies)", got)
	}
	secretFile := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(secretFile, []byte("  ffeeddccbbaa99887766554433221100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig([]string{"--dns-rrl-exempt", "10.0.0.0/8,2001:db8::/32", "--dns-cookies=false", "--dns-cookie-secret-file", secretFile}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	if got := cfg.DNS.rrl().Exempt; !slices.Equal(got, want) {
		t.Errorf("rrl().Exempt = %v, want %v", got, want)
	}
	if got, want := cfg.DNS.cookies(), (resolver.Cookies{Off: true, Secret: [16]byte{0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00}}); got != want {
		t.Errorf("cookies() = %+v, want %+v", got, want)
	}
}

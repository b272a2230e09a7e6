package main

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/resolver/rrl"
)

// DNSAbuse is the DNS server's defence against floods: response rate
// limiting of UDP answers per source prefix, DNS cookies (which exempt a
// querier that proved its address from the rate limit), and caps on TCP.
// Its YAML keys sit in the dns section (dns.rrl.rate, dns.cookies,
// dns.tcp_max_conns, ...).
type DNSAbuse struct {
	RRL DNSRRL `yaml:"rrl"`
	// Cookies answers DNS cookies (RFC 7873, RFC 9018 server cookies);
	// on by default.
	Cookies bool `yaml:"cookies"`
	// CookieSecretFile holds the cookie secret, 32 hex characters, for
	// replicas behind one address to accept each other's cookies; "":
	// a random secret per start.
	CookieSecretFile string `yaml:"cookie_secret_file"`
	// CookieSecret is CookieSecretFile's secret, read by validate; zero
	// without a file.
	CookieSecret [16]byte `yaml:"-"`
	// TCPMaxConns caps concurrent TCP connections (-1: no cap).
	TCPMaxConns int `yaml:"tcp_max_conns"`
	// TCPMaxQueries caps the queries of one TCP connection (-1: no cap).
	TCPMaxQueries int `yaml:"tcp_max_queries"`
	// TCPIdleTimeout closes a TCP connection idle this long.
	TCPIdleTimeout time.Duration `yaml:"tcp_idle_timeout"`
}

// DNSRRL is dns.rrl: responses per second per source prefix (rate 0: off).
type DNSRRL struct {
	Rate          int `yaml:"rate"`
	Burst         int `yaml:"burst"`
	Slip          int `yaml:"slip"`
	IPv4PrefixLen int `yaml:"ipv4_prefix_len"`
	IPv6PrefixLen int `yaml:"ipv6_prefix_len"`
	TableSize     int `yaml:"table_size"`
	// Exempt lists CIDR prefixes never rate limited (sources that cannot
	// be forged, such as node subnets behind anti-spoofing filters).
	Exempt []string `yaml:"exempt"`
}

// Defaults of dns.rrl: on, 1,000 responses a second per prefix with a
// burst of as many, and every refused response slipped (an empty TC
// reply, never larger than the query, which sends a real client to TCP).
const (
	defaultRRLRate = 1000
	defaultRRLSlip = 1
)

func defaultDNSAbuse() DNSAbuse {
	return DNSAbuse{
		RRL: DNSRRL{
			Rate: defaultRRLRate, Slip: defaultRRLSlip, IPv4PrefixLen: rrl.DefaultIPv4PrefixLen, IPv6PrefixLen: rrl.DefaultIPv6PrefixLen,
			TableSize: rrl.DefaultTableSize,
		},
		Cookies:        true,
		TCPMaxConns:    resolver.DefaultTCPMaxConns,
		TCPMaxQueries:  resolver.DefaultTCPMaxQueries,
		TCPIdleTimeout: resolver.DefaultTCPIdleTimeout,
	}
}

// dnsAbuseFlags defines the flags of DNSAbuse into f, with def's values
// as defaults, and returns what applies each one to cfg when it was set.
func dnsAbuseFlags(fs *flag.FlagSet, f *DNSAbuse, def DNSAbuse, cfg *Config) map[string]func() {
	fs.IntVar(&f.RRL.Rate, "dns-rrl-rate", def.RRL.Rate, "UDP responses per second per source prefix; past it (and the burst) responses are dropped or slipped; queries with a valid DNS cookie and --dns-rrl-exempt sources are not limited (0: no rate limit)")
	fs.IntVar(&f.RRL.Burst, "dns-rrl-burst", def.RRL.Burst, "responses a quiet source prefix gets at once before the rate applies (0: the rate)")
	fs.IntVar(&f.RRL.Slip, "dns-rrl-slip", def.RRL.Slip, "every Nth response past the rate is sent empty with TC set, so a real client retries over TCP (0: drop all, 1: slip all)")
	fs.IntVar(&f.RRL.IPv4PrefixLen, "dns-rrl-ipv4-prefix", def.RRL.IPv4PrefixLen, "IPv4 source prefix length that shares one rate")
	fs.IntVar(&f.RRL.IPv6PrefixLen, "dns-rrl-ipv6-prefix", def.RRL.IPv6PrefixLen, "IPv6 source prefix length that shares one rate")
	fs.IntVar(&f.RRL.TableSize, "dns-rrl-table-size", def.RRL.TableSize, "source prefixes the rate limiter remembers; the least recently seen is forgotten first")
	fs.Func("dns-rrl-exempt", "comma-separated `CIDRs` never rate limited, for sources that cannot be forged, e.g. node subnets behind anti-spoofing filters (replaces dns.rrl.exempt)", func(v string) error {
		f.RRL.Exempt = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				f.RRL.Exempt = append(f.RRL.Exempt, p)
			}
		}
		return nil
	})
	fs.BoolVar(&f.Cookies, "dns-cookies", def.Cookies, "answer DNS cookies (RFC 7873, RFC 9018 server cookies); a UDP query with a valid server cookie is not rate limited")
	fs.StringVar(&f.CookieSecretFile, "dns-cookie-secret-file", "", "`file` of the DNS cookie secret, 32 hex characters (openssl rand -hex 16), shared by replicas behind one address so each accepts the others' cookies (\"\": random per start)")
	fs.IntVar(&f.TCPMaxConns, "dns-tcp-max-conns", def.TCPMaxConns, "concurrent DNS TCP connections; more are closed on accept (-1: no cap)")
	fs.IntVar(&f.TCPMaxQueries, "dns-tcp-max-queries", def.TCPMaxQueries, "queries one DNS TCP connection may send before it is closed (-1: no cap)")
	fs.DurationVar(&f.TCPIdleTimeout, "dns-tcp-idle-timeout", def.TCPIdleTimeout, "close a DNS TCP connection that sends no query for this long")
	d := &cfg.DNS.DNSAbuse
	return map[string]func(){
		"dns-rrl-rate":           func() { d.RRL.Rate = f.RRL.Rate },
		"dns-rrl-burst":          func() { d.RRL.Burst = f.RRL.Burst },
		"dns-rrl-slip":           func() { d.RRL.Slip = f.RRL.Slip },
		"dns-rrl-ipv4-prefix":    func() { d.RRL.IPv4PrefixLen = f.RRL.IPv4PrefixLen },
		"dns-rrl-ipv6-prefix":    func() { d.RRL.IPv6PrefixLen = f.RRL.IPv6PrefixLen },
		"dns-rrl-table-size":     func() { d.RRL.TableSize = f.RRL.TableSize },
		"dns-rrl-exempt":         func() { d.RRL.Exempt = f.RRL.Exempt },
		"dns-cookies":            func() { d.Cookies = f.Cookies },
		"dns-cookie-secret-file": func() { d.CookieSecretFile = f.CookieSecretFile },
		"dns-tcp-max-conns":      func() { d.TCPMaxConns = f.TCPMaxConns },
		"dns-tcp-max-queries":    func() { d.TCPMaxQueries = f.TCPMaxQueries },
		"dns-tcp-idle-timeout":   func() { d.TCPIdleTimeout = f.TCPIdleTimeout },
	}
}

// validate names the flag (and YAML key) of the first bad value.
func (d *DNSAbuse) validate() error {
	for _, c := range []struct {
		name      string
		v, lo, hi int
	}{
		{"--dns-rrl-rate (dns.rrl.rate)", d.RRL.Rate, 0, 1_000_000_000},
		{"--dns-rrl-burst (dns.rrl.burst)", d.RRL.Burst, 0, 1_000_000_000},
		{"--dns-rrl-slip (dns.rrl.slip)", d.RRL.Slip, 0, 1 << 16},
		{"--dns-rrl-ipv4-prefix (dns.rrl.ipv4_prefix_len)", d.RRL.IPv4PrefixLen, 1, 32},
		{"--dns-rrl-ipv6-prefix (dns.rrl.ipv6_prefix_len)", d.RRL.IPv6PrefixLen, 1, 128},
		{"--dns-rrl-table-size (dns.rrl.table_size)", d.RRL.TableSize, 1, 1 << 24},
	} {
		if c.v < c.lo || c.v > c.hi {
			return fmt.Errorf("%s: %d, want %d..%d", c.name, c.v, c.lo, c.hi)
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{
		{"--dns-tcp-max-conns (dns.tcp_max_conns)", d.TCPMaxConns},
		{"--dns-tcp-max-queries (dns.tcp_max_queries)", d.TCPMaxQueries},
	} {
		if c.v < 1 && c.v != -1 {
			return fmt.Errorf("%s: %d, want at least 1, or -1 for no cap", c.name, c.v)
		}
	}
	if d.TCPIdleTimeout <= 0 {
		return fmt.Errorf("--dns-tcp-idle-timeout (dns.tcp_idle_timeout): %v, want > 0", d.TCPIdleTimeout)
	}
	if _, err := d.exempt(); err != nil {
		return err
	}
	d.CookieSecret = [16]byte{}
	if d.CookieSecretFile != "" {
		sec, err := readCookieSecret(d.CookieSecretFile)
		if err != nil {
			return fmt.Errorf("--dns-cookie-secret-file (dns.cookie_secret_file) %s: %w", d.CookieSecretFile, err)
		}
		d.CookieSecret = sec
	}
	return nil
}

// exempt parses dns.rrl.exempt.
func (d *DNSAbuse) exempt() ([]netip.Prefix, error) {
	const name = "--dns-rrl-exempt (dns.rrl.exempt)"
	if len(d.RRL.Exempt) > rrl.MaxExempt {
		return nil, fmt.Errorf("%s: %d prefixes, want at most %d", name, len(d.RRL.Exempt), rrl.MaxExempt)
	}
	var out []netip.Prefix
	for _, s := range d.RRL.Exempt {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: %q is not a CIDR prefix such as 10.0.0.0/8: %v", name, s, err)
		case p.Addr().Is4In6() || p.Addr().Zone() != "":
			return nil, fmt.Errorf("%s: %q: want a plain IPv4 or IPv6 prefix", name, s)
		case p != p.Masked():
			return nil, fmt.Errorf("%s: %q has host bits set, want %s", name, s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// readCookieSecret reads a cookie secret file: 32 hex characters, with
// surrounding white space.
func readCookieSecret(path string) ([16]byte, error) {
	var sec [16]byte
	b, err := os.ReadFile(path)
	if err != nil {
		return sec, err
	}
	b = bytes.TrimSpace(b)
	if len(b) != 2*len(sec) {
		return sec, fmt.Errorf("holds %d characters, want 32 hex characters (16 bytes; openssl rand -hex 16 makes one)", len(b))
	}
	if _, err := hex.Decode(sec[:], b); err != nil {
		return sec, fmt.Errorf("want 32 hex characters (16 bytes; openssl rand -hex 16 makes one): %v", err)
	}
	if sec == [16]byte{} {
		return sec, fmt.Errorf("the secret is all zeros; make a random one (openssl rand -hex 16)")
	}
	return sec, nil
}

// rrl is the resolver's RRL config; Rate 0 is off. validate has checked
// the exempt prefixes.
func (d *DNSAbuse) rrl() rrl.Config {
	r := d.RRL
	exempt, _ := d.exempt()
	return rrl.Config{Rate: r.Rate, Burst: r.Burst, Slip: r.Slip, IPv4PrefixLen: r.IPv4PrefixLen, IPv6PrefixLen: r.IPv6PrefixLen, TableSize: r.TableSize, Exempt: exempt}
}

// cookies is the resolver's cookie config; validate has read the secret
// file (a zero secret: the resolver draws a random one).
func (d *DNSAbuse) cookies() resolver.Cookies {
	return resolver.Cookies{Off: !d.Cookies, Secret: d.CookieSecret}
}

// Package dnsquery sends one DNS question to a configured server, or to the
// servers of /etc/resolv.conf, over UDP with a retry over TCP when the
// answer is truncated. It is the wire client shared by clientlib's SRV
// resolver and its panic-flag poller.
package dnsquery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ResolvConf is the file read when no server is configured.
const ResolvConf = "/etc/resolv.conf"

// udpSize is the EDNS0 buffer size advertised (the DNS flag day 2020 value).
const udpSize = 1232

// ErrNoRecords is wrapped when the server says the name has no records of
// the asked type (NXDOMAIN or NODATA).
var ErrNoRecords = errors.New("no records")

// Client asks one question at a time; it is safe for concurrent use.
type Client struct {
	// read-only after New
	servers []string // host:port, tried in order
	timeout time.Duration
}

// New returns a Client for server (host:port), or for the name servers of
// /etc/resolv.conf when server is "". timeout bounds each attempt; zero
// means 2 s.
func New(server string, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	c := &Client{timeout: timeout}
	if server != "" {
		if _, _, err := net.SplitHostPort(server); err != nil {
			return nil, fmt.Errorf("dns server %q: want host:port: %w", server, err)
		}
		c.servers = []string{server}
		return c, nil
	}
	cc, err := dns.ClientConfigFromFile(ResolvConf)
	if err != nil {
		return nil, fmt.Errorf("system resolver: %w", err)
	}
	for _, s := range cc.Servers {
		c.servers = append(c.servers, net.JoinHostPort(s, cc.Port))
	}
	if len(c.servers) == 0 {
		return nil, fmt.Errorf("system resolver: no nameserver in %s", ResolvConf)
	}
	return c, nil
}

// Servers returns the servers asked, in order.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// Query asks for name (made fully qualified) of type qtype. It returns the
// first answer with rcode NOERROR from the servers in order; NXDOMAIN, or
// NOERROR without a record of qtype in the answer section, is an error
// wrapping ErrNoRecords.
func (c *Client) Query(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(udpSize, false)
	var errs []error
	for _, s := range c.servers {
		in, err := c.exchange(ctx, m, s)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		switch in.Rcode {
		case dns.RcodeSuccess:
			for _, rr := range in.Answer {
				if rr.Header().Rrtype == qtype {
					return in, nil
				}
			}
			return nil, fmt.Errorf("%s %s from %s: %w (NODATA)", strings.TrimSuffix(dns.Fqdn(name), "."), dns.TypeToString[qtype], s, ErrNoRecords)
		case dns.RcodeNameError:
			return nil, fmt.Errorf("%s %s from %s: %w (NXDOMAIN)", strings.TrimSuffix(dns.Fqdn(name), "."), dns.TypeToString[qtype], s, ErrNoRecords)
		default:
			errs = append(errs, fmt.Errorf("%s %s from %s: rcode %s", strings.TrimSuffix(dns.Fqdn(name), "."), dns.TypeToString[qtype], s, dns.RcodeToString[in.Rcode]))
		}
	}
	return nil, errors.Join(errs...)
}

// exchange asks server over UDP and again over TCP if the answer is
// truncated.
func (c *Client) exchange(ctx context.Context, m *dns.Msg, server string) (*dns.Msg, error) {
	in, err := c.exchangeNet(ctx, m, server, "udp")
	if err == nil && !in.Truncated {
		return in, nil
	}
	if err != nil && (in == nil || !in.Truncated) {
		return nil, fmt.Errorf("query %s: %w", server, err)
	}
	in, err = c.exchangeNet(ctx, m, server, "tcp")
	if err != nil {
		return nil, fmt.Errorf("query %s over tcp: %w", server, err)
	}
	return in, nil
}

// exchangeNet is one exchange over network; cancelling ctx closes the
// connection, so a cancelled query returns at once.
func (c *Client) exchangeNet(ctx context.Context, m *dns.Msg, server, network string) (*dns.Msg, error) {
	dc := &dns.Client{Net: network, Timeout: c.timeout, UDPSize: udpSize}
	co, err := dc.DialContext(ctx, server)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	stop := context.AfterFunc(ctx, func() { co.Close() })
	defer stop()
	in, _, err := dc.ExchangeWithConnContext(ctx, m, co)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return in, err
}

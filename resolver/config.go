package resolver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver/rrl"
	"github.com/spillway/spillway/weights/regions"
)

// TTLs are the record TTLs, per kind of record.
type TTLs struct {
	// SRV, A (A and AAAA), TXT: zero means 5 s, short so that changes and the
	// panic flag reach clients in seconds.
	SRV, A, TXT time.Duration
	// SOA and NS at the apex; zero means 60 s.
	SOA time.Duration
	// Negative is the TTL of NXDOMAIN and NODATA answers (the SOA minimum,
	// RFC 2308); zero means 5 s.
	Negative time.Duration
}

// Config configures a Server.
type Config struct {
	// Store is the registry read for every answer; non-nil.
	Store *registry.Store
	// Domain is the zone served, e.g. "spillway.internal." (a trailing dot
	// is added if missing); required.
	Domain string
	// UDPSizeCap caps the UDP payload size a client may advertise with
	// EDNS0; zero means 1232 (the DNS flag day 2020 value). Clients without
	// EDNS0 get 512.
	UDPSizeCap int
	// TTL holds the record TTLs; zero fields take their defaults.
	TTL TTLs
	// NSAddr is the address given for ns.<domain>, the name in the apex NS
	// record; the zero Addr gives no address record.
	NSAddr netip.Addr
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer

	// Zones maps querier subnets to zones: a querier whose EDNS Client
	// Subnet, or else whose source address, falls in Prefix is in Zone. The
	// longest matching prefix wins. Prefixes must be valid, in canonical
	// form (no host bits set) and distinct; a zone is a DNS label, as in
	// registry.Locality. Nil knows no zone: every querier gets the endpoint
	// weights, and EDNS Client Subnet options are ignored (not echoed).
	Zones []ZoneSubnet
	// Weights gives the zone-aware split of a service's traffic per client
	// zone. When it is non-nil and a querier's zone is known, that zone's
	// SRV weights follow the split (see the package doc). Nil, or a querier
	// of no known zone, gives SRV weights from the endpoint weights.
	Weights Weights
	// RegionPreference orders, per querier region, the other regions in
	// SRV priority order (package regions); nil orders them by name.
	RegionPreference regions.Preference
	// RegionRules gives each service's regional redirects and exclusions;
	// nil: none.
	RegionRules RegionRules

	// RRL limits the UDP responses per source prefix (package rrl): a
	// prefix past its rate gets nothing, or every RRL.Slip-th time an
	// empty response with TC set, so a real client retries over TCP,
	// which is never limited. Queries with a valid server cookie (see
	// Cookies) and sources in RRL.Exempt are not limited. A zero RRL.Rate
	// turns it off.
	RRL rrl.Config
	// Cookies configures DNS Cookies (RFC 7873, server cookies as in RFC
	// 9018); the zero value has them on, with a random secret.
	Cookies Cookies
	// TCPMaxConns caps the concurrent TCP connections; one accepted past
	// it is closed at once (spillway_dns_tcp_refused_total). Zero means
	// DefaultTCPMaxConns; -1 is no cap.
	TCPMaxConns int
	// TCPMaxQueries is how many queries one TCP connection may send
	// before the server closes it (miekg/dns's Server.MaxTCPQueries).
	// Zero means DefaultTCPMaxQueries; -1 is no cap.
	TCPMaxQueries int
	// TCPIdleTimeout closes a TCP connection that sends no further query
	// for this long (the first query may take TCPReadTimeout); zero means
	// 10 s.
	TCPIdleTimeout time.Duration
}

// Cookies configures DNS Cookies: a query with a COOKIE option gets one
// back, its client cookie and a fresh server cookie, and a query whose
// server cookie is valid (it proves the querier received an earlier reply
// at its address) is not rate limited. A malformed COOKIE option gets
// FORMERR. Cookies are never required: a query without one, or with an
// invalid one, is answered as usual (no BADCOOKIE).
type Cookies struct {
	// Off ignores COOKIE options: replies carry none, a malformed one
	// gets no FORMERR, and no query is exempt from RRL by its cookie.
	Off bool
	// Secret is the server secret, the SipHash-2-4 key of the server
	// cookies. Servers that answer behind one address need the same
	// secret to accept each other's cookies. The zero value: 16 random
	// bytes drawn in New (cookies then last as long as the Server).
	Secret [16]byte
}

// ZoneSubnet places the queriers of one subnet in a zone, and the zone in
// a region.
type ZoneSubnet struct {
	Prefix netip.Prefix
	Zone   string
	// Region is the zone's region: a querier of a known region gets SRV
	// priority 0 for its region's targets and higher ones for the others
	// (see the package doc). "" leaves it to another entry of the same
	// zone, or unknown; entries of one zone must not disagree.
	Region string
}

// RegionRules gives a service's regional redirects and exclusions (a
// *regions.Table implements it), with a version that changes whenever the
// rules in force change. It is called from many goroutines at once.
type RegionRules interface {
	Rules(service string) (regions.Rules, uint64)
}

// ZoneWeight is the weight of one upstream zone in a split: clients send
// the zone Weight / (sum of the split's weights) of their traffic.
type ZoneWeight struct {
	Zone   string
	Weight uint32
}

// Weights is the source of zone-aware splits, such as the xDS server's
// plans.
type Weights interface {
	// ZoneWeights appends to dst the split of service's traffic for
	// clients in clientZone, one entry per upstream zone, and returns the
	// extended slice; ok is false when there is none (the service has no
	// plan, or no healthy endpoint), and the resolver then uses the
	// endpoint weights. It is called on the query path of SRV answers,
	// concurrently from many goroutines: it must not block, and should not
	// allocate when dst has room. An entry's Weight of 0 sends nothing to
	// that zone (its SRV records still get the least weight, 1).
	ZoneWeights(dst []ZoneWeight, service, clientZone string) (split []ZoneWeight, ok bool)
}

// EndpointWeights is an optional interface of a Weights: per-endpoint
// weights (the PID weights of weights.Plan.Endpoints) that replace the
// registry weights in SRV answers, inside the zone split as well as
// without one. Both methods are called on the query path, concurrently:
// they must not block.
type EndpointWeights interface {
	// EndpointGen returns a generation of service's endpoint weights that
	// changes whenever any of them changes (such as the plan's Gen); 0
	// means none: every endpoint weighs its registry weight.
	EndpointGen(service string) uint64
	// EndpointWeight returns endpoint id's weight, >= 1; ok false: the
	// endpoint's registry weight applies.
	EndpointWeight(service, id string) (weight uint32, ok bool)
}

// Limits of Config values.
const (
	DefaultUDPSizeCap = 1232
	minUDPSize        = 512
	maxUDPSize        = 4096
	maxTCPSize        = 65535

	DefaultTCPMaxConns    = 1000
	DefaultTCPMaxQueries  = 100
	DefaultTCPIdleTimeout = 10 * time.Second
	// tcpReadTimeout bounds the wait for a new connection's first query.
	tcpReadTimeout = 5 * time.Second
)

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("resolver config: Store is nil")
	}
	d := strings.ToLower(c.Domain)
	if d != "" && !strings.HasSuffix(d, ".") {
		d += "."
	}
	if d == "" || d == "." {
		return fmt.Errorf("resolver config: Domain %q: want a domain such as spillway.internal", c.Domain)
	}
	for _, l := range strings.Split(strings.TrimSuffix(d, "."), ".") {
		if err := registry.ValidateLabel("Domain", l); err != nil {
			return fmt.Errorf("resolver config: %w", err)
		}
	}
	if len(d) > 200 {
		return fmt.Errorf("resolver config: Domain %q is %d characters, at most 200 leave room for names in it", c.Domain, len(d))
	}
	c.Domain = d
	if c.UDPSizeCap == 0 {
		c.UDPSizeCap = DefaultUDPSizeCap
	}
	if c.UDPSizeCap < minUDPSize || c.UDPSizeCap > maxUDPSize {
		return fmt.Errorf("resolver config: UDPSizeCap %d: want %d..%d", c.UDPSizeCap, minUDPSize, maxUDPSize)
	}
	for _, t := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"TTL.SRV", &c.TTL.SRV, 5 * time.Second},
		{"TTL.A", &c.TTL.A, 5 * time.Second},
		{"TTL.TXT", &c.TTL.TXT, 5 * time.Second},
		{"TTL.SOA", &c.TTL.SOA, 60 * time.Second},
		{"TTL.Negative", &c.TTL.Negative, 5 * time.Second},
	} {
		if *t.v == 0 {
			*t.v = t.def
		}
		if *t.v < time.Second || *t.v > 24*time.Hour || *t.v%time.Second != 0 {
			return fmt.Errorf("resolver config: %s %v: want whole seconds in 1s..24h", t.name, *t.v)
		}
	}
	seen := make(map[netip.Prefix]int, len(c.Zones))
	zoneRegion := map[string]struct {
		region string
		at     int
	}{}
	if err := c.RegionPreference.Validate(); err != nil {
		return fmt.Errorf("resolver config: RegionPreference: %w", err)
	}
	for i, z := range c.Zones {
		field := fmt.Sprintf("Zones[%d]", i)
		switch p := z.Prefix; {
		case !p.IsValid():
			return fmt.Errorf("resolver config: %s.Prefix: not a valid prefix", field)
		case p.Addr().Is4In6() || p.Addr().Zone() != "":
			return fmt.Errorf("resolver config: %s.Prefix %s: want a plain IPv4 or IPv6 prefix", field, p)
		case p != p.Masked():
			return fmt.Errorf("resolver config: %s.Prefix %s has host bits set, want %s", field, p, p.Masked())
		}
		if err := registry.ValidateLabel(field+".Zone", z.Zone); err != nil {
			return fmt.Errorf("resolver config: %w", err)
		}
		if z.Region != "" {
			if err := registry.ValidateLabel(field+".Region", z.Region); err != nil {
				return fmt.Errorf("resolver config: %w", err)
			}
			if r, ok := zoneRegion[z.Zone]; ok && r.region != z.Region {
				return fmt.Errorf("resolver config: %s.Region %q: zone %s is in region %q at Zones[%d]", field, z.Region, z.Zone, r.region, r.at)
			}
			zoneRegion[z.Zone] = struct {
				region string
				at     int
			}{z.Region, i}
		}
		if j, dup := seen[z.Prefix]; dup {
			return fmt.Errorf("resolver config: %s.Prefix %s is also Zones[%d].Prefix", field, z.Prefix, j)
		}
		seen[z.Prefix] = i
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"TCPMaxConns", &c.TCPMaxConns, DefaultTCPMaxConns},
		{"TCPMaxQueries", &c.TCPMaxQueries, DefaultTCPMaxQueries},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < -1 {
			return fmt.Errorf("resolver config: %s %d: want at least 1, or 0 for %d, or -1 for no cap", f.name, *f.v, f.def)
		}
	}
	if c.TCPIdleTimeout == 0 {
		c.TCPIdleTimeout = DefaultTCPIdleTimeout
	}
	if c.TCPIdleTimeout < 0 {
		return fmt.Errorf("resolver config: TCPIdleTimeout %v: want a positive duration, or 0 for %v", c.TCPIdleTimeout, DefaultTCPIdleTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

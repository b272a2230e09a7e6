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
}

// Limits of Config values.
const (
	DefaultUDPSizeCap = 1232
	minUDPSize        = 512
	maxUDPSize        = 4096
	maxTCPSize        = 65535
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

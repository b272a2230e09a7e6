package rrl

import (
	"fmt"
	"net/netip"
	"time"
)

// Config configures a Limiter. The zero Config is invalid: Rate must be
// set (a server without rate limiting has no Limiter).
type Config struct {
	// Rate is the responses per second each source prefix is answered
	// at, once its burst is spent; at least 1.
	Rate int
	// Burst is how many responses a source prefix that has been quiet gets
	// at once, on top of nothing; zero means Rate (one second's worth).
	Burst int
	// Slip: every Slip-th response a prefix is refused is sent truncated
	// (TC set, no records) instead of dropped, so a real client behind a
	// spoofed prefix retries over TCP, which is not limited. 0 never slips
	// (every refused response is dropped), 1 slips every one.
	Slip int
	// IPv4PrefixLen and IPv6PrefixLen are the source prefixes that share
	// one allowance; zero means 24 and 56 (BIND's defaults). IPv4-mapped
	// IPv6 sources count as IPv4.
	IPv4PrefixLen, IPv6PrefixLen int
	// TableSize bounds the prefixes tracked; when it is full the prefix
	// seen least recently is forgotten (it starts again with a full
	// burst). Zero means DefaultTableSize.
	TableSize int
	// Exempt lists source prefixes that are never limited (Allow says
	// Exempt and tracks nothing): networks whose source addresses cannot
	// be forged, such as node subnets behind anti-spoofing filters, where
	// busy cookie-less caches sit. Prefixes must be valid and in canonical
	// form (no host bits set); IPv4-mapped IPv6 sources match IPv4
	// prefixes. Nil exempts nothing. Allow checks them in order, so keep
	// the list short (at most MaxExempt).
	Exempt []netip.Prefix
}

// Defaults and limits of Config values.
const (
	DefaultIPv4PrefixLen = 24
	DefaultIPv6PrefixLen = 56
	// DefaultTableSize is about 6 MB of entries and index.
	DefaultTableSize = 100_000
	maxTableSize     = 1 << 24
	maxRate          = 1_000_000_000 // one response per nanosecond
	maxSlip          = 1 << 16
	// MaxExempt is the longest Config.Exempt list.
	MaxExempt = 1024
)

// validate fills defaults and names the first bad field.
func (c *Config) validate() error {
	if c.Rate < 1 || c.Rate > maxRate {
		return fmt.Errorf("rrl config: Rate %d: want 1..%d responses per second", c.Rate, maxRate)
	}
	if c.Burst == 0 {
		c.Burst = c.Rate
	}
	if c.Burst < 1 || c.Burst > maxRate {
		return fmt.Errorf("rrl config: Burst %d: want 1..%d, or 0 for Rate", c.Burst, maxRate)
	}
	if c.Slip < 0 || c.Slip > maxSlip {
		return fmt.Errorf("rrl config: Slip %d: want 0 (never) .. %d", c.Slip, maxSlip)
	}
	if c.IPv4PrefixLen == 0 {
		c.IPv4PrefixLen = DefaultIPv4PrefixLen
	}
	if c.IPv4PrefixLen < 1 || c.IPv4PrefixLen > 32 {
		return fmt.Errorf("rrl config: IPv4PrefixLen %d: want 1..32", c.IPv4PrefixLen)
	}
	if c.IPv6PrefixLen == 0 {
		c.IPv6PrefixLen = DefaultIPv6PrefixLen
	}
	if c.IPv6PrefixLen < 1 || c.IPv6PrefixLen > 128 {
		return fmt.Errorf("rrl config: IPv6PrefixLen %d: want 1..128", c.IPv6PrefixLen)
	}
	if c.TableSize == 0 {
		c.TableSize = DefaultTableSize
	}
	if c.TableSize < 1 || c.TableSize > maxTableSize {
		return fmt.Errorf("rrl config: TableSize %d: want 1..%d", c.TableSize, maxTableSize)
	}
	if len(c.Exempt) > MaxExempt {
		return fmt.Errorf("rrl config: Exempt has %d prefixes, want at most %d", len(c.Exempt), MaxExempt)
	}
	for i, p := range c.Exempt {
		switch {
		case !p.IsValid():
			return fmt.Errorf("rrl config: Exempt[%d]: not a valid prefix", i)
		case p.Addr().Is4In6() || p.Addr().Zone() != "":
			return fmt.Errorf("rrl config: Exempt[%d] %s: want a plain IPv4 or IPv6 prefix", i, p)
		case p != p.Masked():
			return fmt.Errorf("rrl config: Exempt[%d] %s has host bits set, want %s", i, p, p.Masked())
		}
	}
	return nil
}

// interval is the time one response costs.
func (c *Config) interval() time.Duration { return time.Second / time.Duration(c.Rate) }

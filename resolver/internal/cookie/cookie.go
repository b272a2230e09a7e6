package cookie

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/spillway/spillway/resolver/internal/siphash"
)

// Lengths in bytes (RFC 7873 4, RFC 9018 4).
const (
	// ClientLen is the length of a client cookie.
	ClientLen = 8
	// ServerLen is the length of the server cookies made here.
	ServerLen = 16
	// Len is the length of the COOKIE data a reply carries: the client
	// cookie and a fresh server cookie.
	Len = ClientLen + ServerLen
	// MaxLen is the longest COOKIE data a query may carry.
	MaxLen = ClientLen + 32

	minWithServer = ClientLen + 8
	version       = 1
	// The window of valid timestamps (RFC 9018 4.3).
	maxAge    = 3600
	maxFuture = 300
)

// ErrMalformed is a COOKIE option of a length other than 8 or 16..40
// bytes, or not hex (from ParseHex).
var ErrMalformed = errors.New("malformed COOKIE option")

// Secret is the server secret, the SipHash key of the server cookies.
type Secret [16]byte

// Cookie is the data of a query's COOKIE option.
type Cookie struct {
	b [MaxLen]byte
	n uint8 // ClientLen, or minWithServer..MaxLen
}

// Result is what a query's cookie proves.
type Result uint8

const (
	// ClientOnly: the query has a client cookie and no server cookie.
	ClientOnly Result = iota
	// Valid: the server cookie is one of ours for the querier's address,
	// within its lifetime.
	Valid
	// Invalid: a server cookie that is not Valid (another secret or
	// address, too old, from the future, or not RFC 9018's form).
	Invalid
)

func (r Result) String() string {
	switch r {
	case ClientOnly:
		return "client_only"
	case Valid:
		return "valid"
	case Invalid:
		return "invalid"
	}
	return "result(?)"
}

// Parse reads COOKIE option data.
func Parse(b []byte) (Cookie, error) {
	var c Cookie
	if !okLen(len(b)) {
		return c, ErrMalformed
	}
	c.n = uint8(copy(c.b[:], b))
	return c, nil
}

// ParseHex reads COOKIE option data in hex, as miekg/dns's EDNS0_COOKIE
// holds it, without allocating.
func ParseHex(s string) (Cookie, error) {
	var c Cookie
	if len(s)%2 != 0 || !okLen(len(s)/2) {
		return c, ErrMalformed
	}
	for i := 0; i < len(s); i += 2 {
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return Cookie{}, ErrMalformed
		}
		c.b[i/2] = hi<<4 | lo
	}
	c.n = uint8(len(s) / 2)
	return c, nil
}

func okLen(n int) bool { return n == ClientLen || (n >= minWithServer && n <= MaxLen) }

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Bytes returns the option data (a view of c, not a copy).
func (c *Cookie) Bytes() []byte { return c.b[:c.n] }

// Client returns the client cookie.
func (c *Cookie) Client() [ClientLen]byte { return [ClientLen]byte(c.b[:ClientLen]) }

// Server returns the server cookie, empty when the query has none (a view
// of c, not a copy).
func (c *Cookie) Server() []byte { return c.b[ClientLen:c.n] }

// Check tells whether c's server cookie is Valid for a querier at ip at
// now (seconds since the Unix epoch, modulo 2^32).
func (s *Secret) Check(c *Cookie, ip netip.Addr, now uint32) Result {
	switch {
	case c.n == ClientLen:
		return ClientOnly
	case c.n != Len || c.b[ClientLen] != version:
		return Invalid
	}
	ts := binary.BigEndian.Uint32(c.b[ClientLen+4:])
	// Serial number arithmetic: the age in seconds, negative for a
	// timestamp ahead of ours.
	if age := int32(now - ts); age > maxAge || age < -maxFuture {
		return Invalid
	}
	want := s.hash(c.b[:ClientLen+8], ip)
	if binary.LittleEndian.Uint64(c.b[ClientLen+8:])^want != 0 {
		return Invalid
	}
	return Valid
}

// Fresh returns the COOKIE data of a reply to c from ip at now: c's
// client cookie and a new server cookie (version 1, reserved zero,
// timestamp now).
func (s *Secret) Fresh(c *Cookie, ip netip.Addr, now uint32) [Len]byte {
	var out [Len]byte
	copy(out[:ClientLen], c.b[:ClientLen])
	out[ClientLen] = version
	binary.BigEndian.PutUint32(out[ClientLen+4:], now)
	binary.LittleEndian.PutUint64(out[ClientLen+8:], s.hash(out[:ClientLen+8], ip))
	return out
}

// hash is SipHash-2-4 of head (client cookie, version, reserved,
// timestamp) and ip.
func (s *Secret) hash(head []byte, ip netip.Addr) uint64 {
	var msg [ClientLen + 8 + 16]byte
	n := copy(msg[:], head)
	switch ip = ip.Unmap(); {
	case ip.Is4():
		a := ip.As4()
		n += copy(msg[n:], a[:])
	case ip.Is6():
		a := ip.As16()
		n += copy(msg[n:], a[:])
	}
	return siphash.Sum64((*[16]byte)(s), msg[:n])
}

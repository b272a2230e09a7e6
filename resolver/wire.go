package resolver

import (
	"encoding/binary"
	"net/netip"

	"github.com/spillway/spillway/resolver/internal/cookie"
)

// Wire-format building blocks. Answers are assembled from bytes, not packed
// with dns.Msg, so the hot path does not allocate: a response is the header,
// the client's question echoed, and pre-built sections whose owner names are
// compression pointers into that question.

const (
	headerLen = 12
	typeA     = 1
	typeNS    = 2
	typeSOA   = 6
	typeHINFO = 13
	typeTXT   = 16
	typeAAAA  = 28
	typeSRV   = 33
	typeOPT   = 41
	classIN   = 1
	// ptrQName points at the question name, always at offset 12.
	ptrQName = 0xC000 | headerLen
	// maxPtr is the largest offset a compression pointer can reach.
	maxPtr = 0x3FFF
)

func appendU16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

// wireLen is the wire length of a lower-case FQDN in presentation form with
// no escapes ("a.b." is 5 bytes: 1 a 1 b 0).
func wireLen(fqdn string) int { return len(fqdn) + 1 }

// appendName writes fqdn (no escapes, trailing dot) uncompressed.
func appendName(b []byte, fqdn string) []byte {
	start := 0
	for i := 0; i < len(fqdn); i++ {
		if fqdn[i] == '.' {
			b = append(b, byte(i-start))
			b = append(b, fqdn[start:i]...)
			start = i + 1
		}
	}
	return append(b, 0)
}

// plainName reports whether a name from a question can be written by
// appendName and matched against our names: letters, digits, '-', '_',
// non-empty labels of at most 63, a trailing dot.
func plainName(name string) bool {
	if len(name) < 2 || len(name) > 254 || name[len(name)-1] != '.' {
		return false
	}
	label := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			label++
			if label > 63 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// appendRRHeader writes an RR header whose owner is a compression pointer.
func appendRRHeader(b []byte, ptr uint16, rtype uint16, ttl uint32, rdlen int) []byte {
	b = appendU16(b, ptr)
	return appendRRRest(b, rtype, ttl, rdlen)
}

// appendRRRest writes an RR header after its owner name.
func appendRRRest(b []byte, rtype uint16, ttl uint32, rdlen int) []byte {
	b = appendU16(b, rtype)
	b = appendU16(b, classIN)
	b = appendU32(b, ttl)
	return appendU16(b, uint16(rdlen))
}

// appendAddr writes an A or AAAA record for addr owned by ptr.
func appendAddr(b []byte, ptr uint16, ttl uint32, addr netip.Addr) []byte {
	return appendAddrRest(appendU16(b, ptr), ttl, addr)
}

// appendAddrRest writes an A or AAAA record after its owner name.
func appendAddrRest(b []byte, ttl uint32, addr netip.Addr) []byte {
	if addr.Is4() {
		a := addr.As4()
		b = appendRRRest(b, typeA, ttl, 4)
		return append(b, a[:]...)
	}
	a := addr.As16()
	b = appendRRRest(b, typeAAAA, ttl, 16)
	return append(b, a[:]...)
}

// addrLen is the wire size of appendAddr's record.
func addrLen(addr netip.Addr) int {
	if addr.Is4() {
		return 2 + 10 + 4
	}
	return 2 + 10 + 16
}

// optLen is the size of our OPT record without options; optCookieLen is
// that of the COOKIE option of a reply (client and server cookie);
// optMaxLen with the largest ECS option we echo (an IPv6 /128) and a
// COOKIE.
const (
	optLen       = 11
	optCookieLen = 4 + cookie.Len
	optMaxLen    = optLen + 4 + 4 + 16 + optCookieLen
)

// Option codes: EDNS Client Subnet (RFC 7871) and COOKIE (RFC 7873).
const (
	ednsSubnet = 8
	ednsCookie = 10
)

// appendOPT writes our OPT record: root owner, our UDP size, the extended
// rcode's upper bits and the DO bit echoed, the client's ECS option echoed
// with our scope when it sent one, and a COOKIE option with ck when it is
// not empty.
func appendOPT(b []byte, udpSize uint16, extRcode uint8, do bool, ecs *clientSubnet, scope uint8, ck []byte) []byte {
	b = append(b, 0)
	b = appendU16(b, typeOPT)
	b = appendU16(b, udpSize)
	flags := uint16(0)
	if do {
		flags = 0x8000
	}
	b = append(b, extRcode, 0) // extended rcode, version 0
	b = appendU16(b, flags)
	rdlen := ecs.optECSLen()
	if len(ck) > 0 {
		rdlen += 4 + len(ck)
	}
	b = appendU16(b, uint16(rdlen))
	if ecs.present {
		// RFC 7871 section 7.2.1: FAMILY, SOURCE PREFIX-LENGTH and
		// ADDRESS as in the query, SCOPE PREFIX-LENGTH ours.
		n := (int(ecs.source) + 7) / 8
		b = appendU16(b, ednsSubnet)
		b = appendU16(b, uint16(4+n))
		b = appendU16(b, ecs.family)
		b = append(b, ecs.source, scope)
		if n > 0 {
			if ecs.addr.Is4() {
				a := ecs.addr.As4()
				b = append(b, a[:n]...)
			} else {
				a := ecs.addr.As16()
				b = append(b, a[:n]...)
			}
		}
	}
	if len(ck) > 0 {
		b = appendU16(b, ednsCookie)
		b = appendU16(b, uint16(len(ck)))
		b = append(b, ck...)
	}
	return b
}

// Package cookie is the server side of DNS Cookies (RFC 7873) with the
// interoperable server cookies of RFC 9018: it reads the COOKIE option of
// a query (EDNS option 10), tells whether its server cookie is one this
// server (or a replica sharing its Secret) made for the querier's address,
// and makes the fresh server cookie a reply carries.
//
// # Format
//
// A COOKIE option holds an 8-byte client cookie, alone or followed by a
// server cookie of 8 to 32 bytes: 8 or 16 to 40 bytes in all. Any other
// length is malformed, which RFC 7873 5.2.2 answers with FORMERR. The
// server cookies made here are RFC 9018's 16 bytes:
//
//	version (1) | reserved (3 zero bytes) | timestamp (4, seconds) | hash (8)
//
// where hash is SipHash-2-4, keyed with the Secret, of the client cookie,
// the version, reserved and timestamp bytes as sent, and the querier's
// address (4 bytes for IPv4, IPv4-mapped IPv6 included, 16 for IPv6). A
// server cookie is Valid when it is of that form, version 1, its hash is
// the one this Secret gives for the querier's address, and its timestamp
// is no more than an hour in the past and no more than five minutes in
// the future (RFC 9018 4.3, in serial number arithmetic). Valid proves
// that the querier received an earlier reply at its address: an off-path
// forger cannot make one.
//
// # Usage
//
//	c, err := cookie.ParseHex(opt.Cookie) // *dns.EDNS0_COOKIE's hex text
//	if err != nil { /* FORMERR */ }
//	switch secret.Check(&c, querier, uint32(now.Unix())) {
//	case cookie.Valid:      // the querier proved its address
//	case cookie.Invalid:    // a server cookie, but not a valid one of ours
//	case cookie.ClientOnly: // no server cookie yet
//	}
//	reply := secret.Fresh(&c, querier, uint32(now.Unix())) // the reply's COOKIE data
//
// # Concurrency and cost
//
// Everything here is a function of its arguments: safe for concurrent
// use, and allocation-free (one SipHash of at most 32 bytes for Check,
// one for Fresh). There is one Secret at a time: a server whose secret
// changes invalidates the cookies it gave out, and its clients learn new
// ones from the next reply.
package cookie

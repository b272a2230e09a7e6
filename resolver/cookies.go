package resolver

import (
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/spillway/spillway/resolver/internal/cookie"
)

// cookieState is what a query's COOKIE option (RFC 7873) said, and the
// COOKIE data of its reply.
type cookieState struct {
	present   bool // a well-formed option: the reply carries reply
	malformed bool // FORMERR
	valid     bool // a valid server cookie of ours: not rate limited
	reply     [cookie.Len]byte
}

// cookieQuery is a query's well-formed COOKIE and what its reply's server
// cookie is made of, kept until the reply is known to be sent.
type cookieQuery struct {
	c  cookie.Cookie
	ip netip.Addr
	t  uint32
}

// Cookie results, the label values of spillway_dns_cookies_total.
const (
	cookieValid = iota
	cookieInvalid
	cookieClientOnly
	cookieMalformed
)

var cookieLabels = [...]string{cookieValid: "valid", cookieInvalid: "invalid", cookieClientOnly: "client_only", cookieMalformed: "malformed"}

// Why a UDP response was not rate limited, the label values of
// spillway_dns_rrl_exempt_total.
const (
	exemptCookie = iota
	exemptPrefix
)

var exemptLabels = [...]string{exemptCookie: "cookie", exemptPrefix: "prefix"}

// readCookie fills ck and cq from the first COOKIE option of opt, if
// any: whether it is malformed, and the validity of its server cookie
// for the querier at now. freshCookie then makes the reply's. It does not
// allocate.
func (s *Server) readCookie(ck *cookieState, cq *cookieQuery, opt *dns.OPT, from net.Addr, now time.Time) {
	for _, o := range opt.Option {
		e, ok := o.(*dns.EDNS0_COOKIE)
		if !ok {
			continue
		}
		c, err := cookie.ParseHex(e.Cookie)
		if err != nil {
			ck.malformed = true
			s.metrics.cookies[cookieMalformed].Inc()
			return
		}
		ip, t := remoteAddr(from), uint32(now.Unix())
		*cq = cookieQuery{c: c, ip: ip, t: t}
		switch s.secret.Check(&c, ip, t) {
		case cookie.Valid:
			ck.valid = true
			s.metrics.cookies[cookieValid].Inc()
		case cookie.Invalid:
			s.metrics.cookies[cookieInvalid].Inc()
		default:
			s.metrics.cookies[cookieClientOnly].Inc()
		}
		ck.present = true
		return
	}
}

// freshCookie makes the reply's COOKIE data, when the query had one: its
// client cookie and a fresh server cookie (one SipHash, left out of the
// responses RRL refuses).
func (s *Server) freshCookie(ck *cookieState, cq *cookieQuery) {
	if ck.present {
		ck.reply = s.secret.Fresh(&cq.c, cq.ip, cq.t)
	}
}

// replyData is the COOKIE data the reply carries, nil for none.
func (ck *cookieState) replyData() []byte {
	if ck == nil || !ck.present {
		return nil
	}
	return ck.reply[:]
}

// optLen is the size of the COOKIE option in the reply's OPT record.
func (ck *cookieState) optLen() int {
	if ck == nil || !ck.present {
		return 0
	}
	return optCookieLen
}

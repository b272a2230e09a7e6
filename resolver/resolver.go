package resolver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver/internal/cookie"
	"github.com/spillway/spillway/resolver/rrl"
)

// Server answers DNS queries for one domain from the registry store.
type Server struct {
	// Read-only after New.
	cfg     Config
	store   *registry.Store
	log     *slog.Logger
	domain  string // lower case, trailing dot
	nsName  string // ns.<domain>
	metrics *metrics
	ttl     struct{ srv, a, txt, soa, neg uint32 }
	zones   *zoneTable      // nil: no Config.Zones
	epw     EndpointWeights // Config.Weights when it implements it, else nil
	rrl     *rrl.Limiter    // nil: Config.RRL.Rate is 0
	secret  *cookie.Secret  // nil: Config.Cookies.Off

	cache cache
	ents  atomic.Pointer[entSet]
	bufs  sync.Pool
}

// entSet holds the empty non-terminals of one set of service names: for
// "web.prod", the name "prod" exists (NODATA) even though no service has it.
type entSet struct {
	namesVersion uint64
	names        map[string]struct{}
}

// New validates cfg and returns a Server. Serve it with Serve, or call
// ServeDNS from a miekg/dns server of your own.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, store: cfg.Store, log: cfg.Logger, domain: cfg.Domain, nsName: "ns." + cfg.Domain}
	if ew, ok := cfg.Weights.(EndpointWeights); ok {
		s.epw = ew
	}
	s.ttl.srv = uint32(cfg.TTL.SRV / time.Second)
	s.ttl.a = uint32(cfg.TTL.A / time.Second)
	s.ttl.txt = uint32(cfg.TTL.TXT / time.Second)
	s.ttl.soa = uint32(cfg.TTL.SOA / time.Second)
	s.ttl.neg = uint32(cfg.TTL.Negative / time.Second)
	s.zones = newZoneTable(cfg.Zones)
	if s.zones != nil {
		s.cache.zones = len(s.zones.names)
	}
	s.bufs.New = func() any {
		return &scratch{b: make([]byte, 0, maxTCPSize), split: make([]ZoneWeight, 0, 8)}
	}
	if !cfg.Cookies.Off {
		sec := cookie.Secret(cfg.Cookies.Secret)
		if sec == (cookie.Secret{}) {
			rand.Read(sec[:]) // never fails (crypto/rand)
		}
		s.secret = &sec
	}
	if cfg.RRL.Rate != 0 {
		l, err := rrl.New(cfg.RRL, time.Now())
		if err != nil {
			return nil, fmt.Errorf("resolver config: RRL: %w", err)
		}
		s.rrl = l
	}
	s.metrics = newMetrics()
	if cfg.Registerer != nil {
		if err := s.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("resolver metrics: %w", err)
		}
		if s.rrl != nil {
			g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "spillway_dns_rrl_table_entries", Help: "Source prefixes the response rate limiter tracks (at most --dns-rrl-table-size).",
			}, func() float64 { return float64(s.rrl.Len()) })
			if err := cfg.Registerer.Register(g); err != nil {
				return nil, fmt.Errorf("resolver metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Serve answers on pc (UDP) and l (TCP) until ctx ends, then shuts both
// down. Either may be nil. It returns nil after a shutdown caused by ctx.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, l net.Listener) error {
	var servers []*dns.Server
	if pc != nil {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: s, UDPSize: 65535, MsgAcceptFunc: acceptQuery})
	}
	if l != nil {
		if s.cfg.TCPMaxConns > 0 {
			l = &limitListener{Listener: l, free: make(chan struct{}, s.cfg.TCPMaxConns), refused: s.metrics.tcpRefused, log: s.log}
		}
		idle := s.cfg.TCPIdleTimeout
		servers = append(servers, &dns.Server{
			Listener: l, Handler: s, MsgAcceptFunc: acceptQuery,
			ReadTimeout: tcpReadTimeout, IdleTimeout: func() time.Duration { return idle },
			MaxTCPQueries: s.cfg.TCPMaxQueries,
		})
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errc <- srv.ActivateAndServe() }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("dns server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.ShutdownContext(sctx); serr != nil && !strings.Contains(serr.Error(), "not started") {
			s.log.Warn("dns shutdown", "err", serr)
		}
	}
	return err
}

// scratch is the pooled memory of one query.
type scratch struct {
	b     []byte       // the response
	split []ZoneWeight // Config.Weights' answer
}

// reply is one response being assembled in a pooled buffer.
type reply struct {
	b          []byte
	qlen       int // wire length of the question name
	an, ns, ar uint16
	rcode      int
	tc         bool
	qtype      uint16
	edns       bool        // the query had an OPT record, so the reply gets one
	ck         cookieState // (a copy: a pointer in reply would escape)

	// The querier, for zone-aware SRV weights.
	w         dns.ResponseWriter
	sc        *scratch
	ecs       clientSubnet // echoed when present and zones are configured
	scope     uint8        // ECS SCOPE PREFIX-LENGTH of the answer
	zoneByECS bool
}

// ServeDNS implements dns.Handler. The common path (a plain name in our
// domain) writes the response from pre-built bytes without allocating.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	rcode, qtype := s.serve(w, r, start)
	s.metrics.observe(qtype, rcode, time.Since(start))
}

func (s *Server) serve(w dns.ResponseWriter, r *dns.Msg, now time.Time) (rcode int, qtype uint16) {
	if r.Response {
		return -1, 0 // never answer a response
	}
	opt := r.IsEdns0()
	var (
		ck cookieState
		cq cookieQuery
	)
	if opt != nil && s.secret != nil {
		s.readCookie(&ck, &cq, opt, w.RemoteAddr(), now)
	}
	if s.rrl != nil {
		if ua, ok := w.RemoteAddr().(*net.UDPAddr); ok {
			if ck.valid {
				// The querier received our earlier reply at this address:
				// not a forged source.
				s.metrics.rrlExempt[exemptCookie].Inc()
			} else {
				switch s.rrl.Allow(ua.AddrPort().Addr(), now) {
				case rrl.Exempt:
					s.metrics.rrlExempt[exemptPrefix].Inc()
				case rrl.Drop:
					s.metrics.rrlDropped.Inc()
					return -1, 0
				case rrl.Slip:
					s.metrics.rrlSlipped.Inc()
					s.slip(w, r)
					return -1, 0
				}
			}
		}
	}
	if ck.malformed {
		// RFC 7873 5.2.2; the reply carries no COOKIE.
		return s.slowReply(w, r, dns.RcodeFormatError, nil), 0
	}
	s.freshCookie(&ck, &cq)
	if r.Opcode != dns.OpcodeQuery {
		return s.slowReply(w, r, dns.RcodeNotImplemented, &ck), 0
	}
	if len(r.Question) != 1 || len(r.Answer) > 1 || len(r.Ns) > 1 || len(r.Extra) > 2 || manyOPT(r.Extra) {
		// miekg/dns's default checks (see acceptQuery), and RFC 6891
		// 6.1.1: more than one OPT record is FORMERR.
		return s.slowReply(w, r, dns.RcodeFormatError, &ck), 0
	}
	q := r.Question[0]
	var ecs clientSubnet
	if opt != nil && s.zones != nil {
		var ok bool
		if ecs, ok = readClientSubnet(opt); !ok {
			return s.slowReply(w, r, dns.RcodeFormatError, &ck), q.Qtype
		}
	}
	if !plainName(q.Name) {
		// Escapes or unusual bytes: never one of our names.
		rc := dns.RcodeRefused
		if dns.IsSubDomain(s.domain, strings.ToLower(q.Name)) {
			rc = dns.RcodeNameError
		}
		return s.slowReply(w, r, rc, &ck), q.Qtype
	}

	sc := s.bufs.Get().(*scratch)
	defer s.bufs.Put(sc)
	rp := reply{b: sc.b[:headerLen], qlen: wireLen(q.Name), qtype: q.Qtype, edns: opt != nil, ck: ck, w: w, sc: sc, ecs: ecs}
	rp.b = appendName(rp.b, q.Name) // echoes the client's case
	rp.b = appendU16(rp.b, q.Qtype)
	rp.b = appendU16(rp.b, q.Qclass)

	_, tcp := w.LocalAddr().(*net.TCPAddr)
	limit := maxTCPSize
	if !tcp {
		limit = minUDPSize
		if opt != nil {
			limit = min(max(int(opt.UDPSize()), minUDPSize), s.cfg.UDPSizeCap)
		}
	}
	extRcode := uint8(0)
	switch {
	case opt != nil && opt.Version() != 0:
		rp.rcode = dns.RcodeBadVers
		extRcode = uint8(dns.RcodeBadVers >> 4)
	case q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY:
		rp.rcode = dns.RcodeRefused
	default:
		name := strings.ToLower(q.Name)
		s.resolve(&rp, name, q.Qtype, tcp, limit)
	}

	if opt != nil {
		rp.ar++
		rp.b = appendOPT(rp.b, uint16(s.cfg.UDPSizeCap), extRcode, opt.Do(), &rp.ecs, rp.scope, rp.ck.replyData())
	}
	h := rp.b[:headerLen]
	h[0], h[1] = byte(r.Id>>8), byte(r.Id)
	flags := uint16(0x8000) // QR
	if rp.rcode != dns.RcodeRefused {
		flags |= 0x0400 // AA: every name we answer is in our zone
	}
	if r.RecursionDesired {
		flags |= 0x0100
	}
	if rp.tc {
		flags |= 0x0200
	}
	flags |= uint16(rp.rcode & 0xF)
	h[2], h[3] = byte(flags>>8), byte(flags)
	h[4], h[5] = 0, 1
	h[6], h[7] = byte(rp.an>>8), byte(rp.an)
	h[8], h[9] = byte(rp.ns>>8), byte(rp.ns)
	h[10], h[11] = byte(rp.ar>>8), byte(rp.ar)
	if _, err := w.Write(rp.b); err != nil {
		s.log.Debug("dns write", "err", err)
	}
	sc.b = rp.b[:0]
	return rp.rcode, q.Qtype
}

// resolve fills rp with the answer to name (lower case, in any domain).
func (s *Server) resolve(rp *reply, name string, qtype uint16, tcp bool, limit int) {
	var rel string
	switch {
	case name == s.domain:
		rel = ""
	case len(name) > len(s.domain) && name[len(name)-len(s.domain)-1] == '.' && name[len(name)-len(s.domain):] == s.domain:
		rel = name[:len(name)-len(s.domain)-1]
	default:
		rp.rcode = dns.RcodeRefused // not our zone; we do not recurse
		return
	}
	if !s.store.Synced() {
		// The registry has not loaded: "does not exist" would be a lie.
		rp.rcode = dns.RcodeServerFailure
		return
	}
	snap := s.store.Snapshot()
	switch {
	case rel == "":
		s.apex(rp, snap, qtype)
	case rel == "_xds":
		if qtype != dns.TypeTXT && qtype != dns.TypeANY {
			s.nodata(rp, snap, dns.RcodeSuccess)
			return
		}
		v, ok := snap.Flag(registry.FlagXDS)
		if !ok {
			v = "on"
		}
		txt := "xds=" + v
		rp.b = appendRRHeader(rp.b, ptrQName, typeTXT, s.ttl.txt, 1+len(txt))
		rp.b = append(rp.b, byte(len(txt)))
		rp.b = append(rp.b, txt...)
		rp.an = 1
	case rel[0] == '_':
		s.srv(rp, snap, rel, qtype, tcp, limit)
	default:
		s.host(rp, snap, rel, qtype, tcp, limit)
	}
}

// srv answers _<port>._<proto>.<service>.
func (s *Server) srv(rp *reply, snap *registry.Snapshot, rel string, qtype uint16, tcp bool, limit int) {
	i := strings.IndexByte(rel, '.')
	if i < 0 {
		s.nodata(rp, snap, dns.RcodeNameError)
		return
	}
	port, rest := rel[1:i], rel[i+1:]
	j := strings.IndexByte(rest, '.')
	if j < 0 || (rest[:j] != "_tcp" && rest[:j] != "_udp") {
		// "_tcp.<service>" alone is an empty non-terminal when the
		// service exists.
		if (strings.HasPrefix(rel, "_tcp.") || strings.HasPrefix(rel, "_udp.")) && s.known(snap, rel[5:]) {
			s.nodata(rp, snap, dns.RcodeSuccess)
			return
		}
		s.nodata(rp, snap, dns.RcodeNameError)
		return
	}
	proto, service := registry.Protocol(rest[1:j]), rest[j+1:]
	svc, ok := snap.Service(service)
	if !ok {
		s.nodata(rp, snap, dns.RcodeNameError)
		return
	}
	if qtype != dns.TypeSRV && qtype != dns.TypeANY {
		s.nodata(rp, snap, dns.RcodeSuccess)
		return
	}
	if qtype == dns.TypeANY {
		s.rfc8482(rp)
		return
	}
	a := s.srvAnswers(rp, svc).srvFor(port, proto)
	if a == nil {
		// A known service without healthy endpoints on that port: the
		// name exists, the records do not (yet).
		s.nodata(rp, snap, dns.RcodeSuccess)
		return
	}
	s.send(rp, a, tcp, limit)
}

// host answers <service> (A/AAAA of its healthy endpoints),
// <endpoint-id>.<service> (that endpoint's address), ns, and empty
// non-terminals. A service name shadows an endpoint name of the same
// spelling.
func (s *Server) host(rp *reply, snap *registry.Snapshot, rel string, qtype uint16, tcp bool, limit int) {
	if svc, ok := snap.Service(rel); ok {
		switch qtype {
		case dns.TypeA, dns.TypeAAAA:
			as := s.answers(svc)
			a := as.a
			if qtype == dns.TypeAAAA {
				a = as.aaaa
			}
			if a == nil {
				s.nodata(rp, snap, dns.RcodeSuccess)
				return
			}
			s.send(rp, a, tcp, limit)
		case dns.TypeANY:
			s.rfc8482(rp)
		default:
			s.nodata(rp, snap, dns.RcodeSuccess)
		}
		return
	}
	if rel == "ns" && s.cfg.NSAddr.IsValid() {
		s.addrRecord(rp, snap, s.cfg.NSAddr, qtype)
		return
	}
	if i := strings.IndexByte(rel, '.'); i > 0 {
		if svc, ok := snap.Service(rel[i+1:]); ok {
			if e, ok := svc.Endpoint(rel[:i]); ok {
				s.addrRecord(rp, snap, e.Address, qtype)
				return
			}
		}
	}
	if s.isENT(snap, rel) {
		s.nodata(rp, snap, dns.RcodeSuccess)
		return
	}
	s.nodata(rp, snap, dns.RcodeNameError)
}

// addrRecord answers a name that holds one address; ANY gets the address.
func (s *Server) addrRecord(rp *reply, snap *registry.Snapshot, addr netip.Addr, qtype uint16) {
	if qtype == dns.TypeANY || (qtype == dns.TypeA && addr.Is4()) || (qtype == dns.TypeAAAA && addr.Is6()) {
		rp.b = appendAddr(rp.b, ptrQName, s.ttl.a, addr)
		rp.an = 1
		return
	}
	s.nodata(rp, snap, dns.RcodeSuccess)
}

func (s *Server) known(snap *registry.Snapshot, service string) bool {
	_, ok := snap.Service(service)
	return ok
}

// isENT reports whether rel is a proper suffix of a service name.
func (s *Server) isENT(snap *registry.Snapshot, rel string) bool {
	e := s.ents.Load()
	if e == nil || e.namesVersion != snap.NamesVersion() {
		e = &entSet{namesVersion: snap.NamesVersion(), names: map[string]struct{}{}}
		for _, n := range snap.Services() {
			for i := strings.IndexByte(n, '.'); i >= 0; i = strings.IndexByte(n, '.') {
				n = n[i+1:]
				e.names[n] = struct{}{}
			}
		}
		s.ents.Store(e)
	}
	_, ok := e.names[rel]
	return ok
}

// send writes a positive answer, or TC when it does not fit over UDP.
func (s *Server) send(rp *reply, a *answer, tcp bool, limit int) {
	sec := a.full
	if tcp {
		var subset bool
		sec, subset = a.pick()
		if subset {
			s.metrics.subsets.Inc()
		}
	} else if room := limit - len(rp.b) - rp.optLen(); a.tooBig || len(sec.body) > room {
		if a.tooBig || sec.anLen > room {
			rp.tc = true
			s.metrics.truncated.Inc()
			return
		}
		// The answer records fit, the glue does not: the glue is extra
		// (RFC 2181 9), so send what fits of it and no TC.
		n, ar := glueThatFits(sec.body[sec.anLen:], room-sec.anLen)
		rp.b = append(rp.b, sec.body[:sec.anLen+n]...)
		rp.an, rp.ar = sec.an, ar
		s.metrics.glueCut.Inc()
		return
	}
	rp.b = append(rp.b, sec.body...)
	rp.an, rp.ar = sec.an, sec.ar
}

// optLen is the size of the OPT record the reply will carry, 0 without.
func (rp *reply) optLen() int {
	if !rp.edns {
		return 0
	}
	return optLen + rp.ecs.optECSLen() + rp.ck.optLen()
}

// rfc8482 answers ANY minimally with one synthesized HINFO (RFC 8482 4.2).
func (s *Server) rfc8482(rp *reply) {
	const cpu = "RFC8482"
	rp.b = appendRRHeader(rp.b, ptrQName, typeHINFO, s.ttl.a, 1+len(cpu)+1)
	rp.b = append(rp.b, byte(len(cpu)))
	rp.b = append(rp.b, cpu...)
	rp.b = append(rp.b, 0)
	rp.an = 1
}

// domainPtr points at the domain inside the question name.
func (s *Server) domainPtr(rp *reply) uint16 {
	return 0xC000 | uint16(headerLen+rp.qlen-wireLen(s.domain))
}

// appendSOA writes the zone's SOA record, owner and names compressed to the
// domain in the question.
func (s *Server) appendSOA(rp *reply, snap *registry.Snapshot, ttl uint32) {
	dp := s.domainPtr(rp)
	const host, mbox = "ns", "hostmaster"
	rdlen := (1 + len(host) + 2) + (1 + len(mbox) + 2) + 20
	rp.b = appendRRHeader(rp.b, dp, typeSOA, ttl, rdlen)
	rp.b = append(rp.b, byte(len(host)))
	rp.b = append(rp.b, host...)
	rp.b = appendU16(rp.b, dp)
	rp.b = append(rp.b, byte(len(mbox)))
	rp.b = append(rp.b, mbox...)
	rp.b = appendU16(rp.b, dp)
	rp.b = appendU32(rp.b, uint32(snap.Version())) // serial
	rp.b = appendU32(rp.b, 3600)                   // refresh
	rp.b = appendU32(rp.b, 600)                    // retry
	rp.b = appendU32(rp.b, 86400)                  // expire
	rp.b = appendU32(rp.b, s.ttl.neg)              // minimum: negative TTL
}

// nodata writes a negative answer: rcode NOERROR (NODATA) or NXDOMAIN, the
// SOA in the authority section.
func (s *Server) nodata(rp *reply, snap *registry.Snapshot, rcode int) {
	rp.rcode = rcode
	s.appendSOA(rp, snap, s.ttl.neg)
	rp.ns = 1
}

// apex answers the zone's own name.
func (s *Server) apex(rp *reply, snap *registry.Snapshot, qtype uint16) {
	switch qtype {
	case dns.TypeSOA, dns.TypeANY:
		s.appendSOA(rp, snap, s.ttl.soa)
		rp.an = 1
	case dns.TypeNS:
		dp := s.domainPtr(rp)
		rp.b = appendRRHeader(rp.b, ptrQName, typeNS, s.ttl.soa, 1+2+2)
		nsAt := len(rp.b)
		rp.b = append(rp.b, 2, 'n', 's')
		rp.b = appendU16(rp.b, dp)
		rp.an = 1
		if a := s.cfg.NSAddr; a.IsValid() {
			rp.b = appendAddr(rp.b, 0xC000|uint16(nsAt), s.ttl.soa, a)
			rp.ar = 1
		}
	default:
		s.nodata(rp, snap, dns.RcodeSuccess)
	}
}

// manyOPT reports whether extra holds more than one OPT record.
func manyOPT(extra []dns.RR) bool {
	n := 0
	for _, rr := range extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n > 1
}

// acceptQuery is the dns.Server's MsgAcceptFunc: it drops responses and
// passes every other message to ServeDNS, which answers what miekg/dns's
// default would reject (other opcodes, question counts other than one,
// too many records) itself, so that the reply carries an OPT record when
// the query had one.
func acceptQuery(dh dns.Header) dns.MsgAcceptAction {
	if dh.Bits&(1<<15) != 0 { // QR: a response
		return dns.MsgIgnore
	}
	return dns.MsgAccept
}

// slowReply answers the unusual cases with a packed dns.Msg; its OPT
// record carries ck's COOKIE when ck is non-nil and has one.
func (s *Server) slowReply(w dns.ResponseWriter, r *dns.Msg, rcode int, ck *cookieState) int {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	m.Authoritative = rcode != dns.RcodeRefused && rcode != dns.RcodeNotImplemented && rcode != dns.RcodeFormatError
	if rcode == dns.RcodeNameError {
		snap := s.store.Snapshot()
		m.Ns = []dns.RR{&dns.SOA{
			Hdr: dns.RR_Header{Name: s.domain, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: s.ttl.neg},
			Ns:  s.nsName, Mbox: "hostmaster." + s.domain, Serial: uint32(snap.Version()),
			Refresh: 3600, Retry: 600, Expire: 86400, Minttl: s.ttl.neg,
		}}
	}
	// Every reply to a query with an OPT record carries one (RFC 6891 7),
	// FORMERR and NOTIMP included. A FORMERR does not echo the client
	// subnet: it may be what was malformed.
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(uint16(s.cfg.UDPSizeCap), opt.Do())
		if s.zones != nil && rcode != dns.RcodeFormatError {
			// RFC 7871: echo the client subnet, scope 0 (not tailored).
			if cs, _ := readClientSubnet(opt); cs.present {
				e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: cs.family, SourceNetmask: cs.source, Address: net.IP(cs.addr.AsSlice())}
				if cs.family == 0 {
					e.Address = net.IPv4zero
				}
				m.IsEdns0().Option = append(m.IsEdns0().Option, e)
			}
		}
		if d := ck.replyData(); d != nil {
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: hex.EncodeToString(d)})
		}
	}
	if err := w.WriteMsg(m); err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("dns write", "err", err)
	}
	return rcode
}

// slip sends the response RRL sends in place of one past the rate: the
// header with TC set, the question (when it is one plain name), no
// records, and an OPT record without options when the query had one (no
// COOKIE: a client cookie alone would be discarded by the client, RFC
// 7873 5.3, and with a server cookie the reply would outgrow a query that
// carried only a client cookie). It is never larger than the query, so it
// amplifies nothing, and it tells a real client to ask again over TCP.
func (s *Server) slip(w dns.ResponseWriter, r *dns.Msg) {
	sc := s.bufs.Get().(*scratch)
	defer s.bufs.Put(sc)
	b := sc.b[:headerLen]
	clear(b)
	flags := uint16(0x8000|0x0200) | uint16(r.Opcode&0xF)<<11 // QR, TC
	if r.RecursionDesired {
		flags |= 0x0100
	}
	b[0], b[1] = byte(r.Id>>8), byte(r.Id)
	b[2], b[3] = byte(flags>>8), byte(flags)
	if len(r.Question) == 1 && plainName(r.Question[0].Name) {
		q := r.Question[0]
		b = appendName(b, q.Name)
		b = appendU16(b, q.Qtype)
		b = appendU16(b, q.Qclass)
		b[5] = 1
	}
	if opt := r.IsEdns0(); opt != nil {
		b = appendOPT(b, uint16(s.cfg.UDPSizeCap), 0, opt.Do(), &clientSubnet{}, 0, nil)
		b[11] = 1
	}
	if _, err := w.Write(b); err != nil {
		s.log.Debug("dns write", "err", err)
	}
	sc.b = b[:0]
}

// limitListener closes the connections it accepts past cap(free) open
// ones, at once, rather than leaving them in the kernel's queue: a client
// told no retries elsewhere; one left waiting holds its query.
type limitListener struct {
	net.Listener
	free    chan struct{} // one token per open connection
	refused prometheus.Counter
	log     *slog.Logger
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.free <- struct{}{}:
			return &limitConn{Conn: c, free: l.free}, nil
		default:
			l.refused.Inc()
			l.log.Debug("dns tcp connection refused", "peer", c.RemoteAddr().String(), "open", cap(l.free))
			c.Close()
		}
	}
}

// limitConn gives its token back when first closed.
type limitConn struct {
	net.Conn
	free   chan struct{}
	closed atomic.Bool
}

func (c *limitConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		<-c.free
	}
	return c.Conn.Close()
}

// Package resolver is spillway's authoritative DNS server: it answers one
// domain (spillway.internal. by default) from the registry store over UDP
// and TCP, on github.com/miekg/dns.
//
// # Names
//
//	_<port>._<proto>.<service>.<domain>  SRV: one record per healthy endpoint
//	                                     with that port, target
//	                                     <id>.<service>.<domain>, addresses in
//	                                     the additional section
//	<service>.<domain>                   A / AAAA of the healthy endpoints
//	<id>.<service>.<domain>              A or AAAA of one endpoint (any health,
//	                                     so a draining target still resolves)
//	_xds.<domain>                        TXT "xds=on" or "xds=off": the panic flag
//	<domain>                             SOA, NS (ns.<domain>)
//
// The registry store keeps these names apart and within DNS's limits: it
// refuses a service "a.b" next to endpoint "a" of service "b" (both would
// be a.b.<domain>), whichever comes second, and any name whose SRV target
// <id>.<service>.<domain> or SRV name would pass 255 octets on the wire
// under the domain (registry.StoreConfig.Domain, which must be this
// Config.Domain). Should such a pair exist anyway, the service wins.
//
// # Answers
//
// The server is authoritative (AA set) and does not recurse: names outside
// the domain get REFUSED. An unknown name gets NXDOMAIN and a known name
// without records of the asked type gets NODATA (NOERROR, empty answer),
// both with the SOA in the authority section, whose minimum is the negative
// TTL. Empty non-terminals ("prod" when "web.prod" exists, "_tcp.web") are
// NODATA. ANY is answered minimally (RFC 8482): with the name's one
// record where it has exactly one (the apex SOA, the _xds TXT, an endpoint's
// address), else with one synthesized HINFO "RFC8482". A query whose EDNS
// version is not 0 gets BADVERS. Every reply to a query with an OPT
// record carries one (RFC 6891 7), whatever its rcode: FORMERR (no
// question or several, more than one OPT record, a malformed client
// subnet), NOTIMP (an opcode other than QUERY), REFUSED, SERVFAIL and
// BADVERS included; a reply to a query without one carries none. A
// message miekg/dns cannot parse at all gets its FORMERR, without OPT.
// Until the store is synced (every source has
// delivered its initial state) every name in the domain gets SERVFAIL: a
// restarting server must never tell the fleet that services do not exist.
//
// SRV weights carry the endpoint weights scaled to 1..65535. SRV
// priorities are 0 unless regions apply (below): strict priorities by
// zone would send a whole zone's traffic to one place.
//
// # Regions
//
// A ZoneSubnet may name its zone's Region. For a querier whose region is
// known, of a service with endpoints in more than one region or with
// RegionRules, the SRV priority of a target is its region's priority for
// that region (package regions: 0 for the querier's own region, then
// Config.RegionPreference's order, then by name), the same order xDS
// gives a client of that region. Queriers of unknown region get every
// target at priority 0. A region excluded by RegionRules is left out of
// every SRV and A/AAAA answer (unless that would leave none); a redirect
// of the querier's region puts the target region first. The answer then
// depends on the querier's subnet and carries its ECS scope.
//
// # Zones
//
// With Config.Zones and Config.Weights, a querier whose zone is known gets
// SRV weights that follow the zone-aware split xDS gives that zone: an
// endpoint e of upstream zone y weighs split[y] × e.Weight / (the sum of
// the weights of y's endpoints in the answer), so that each zone's records
// add up to its share of the split and, inside a zone, the endpoint
// weights still hold. They are scaled so the largest is 65535, and none is
// 0: a zone the split leaves out, or one whose share rounds to nothing,
// gets weight 1 (16 bits cannot say less). A subset answer is weighted
// over its own records, so it follows the split too. Priorities are by
// region only.
// A querier of no known zone, or a service without a split, gets the
// endpoint weights.
//
// When Config.Weights also implements EndpointWeights (the planner's PID
// weights), those weights replace e.Weight above, with or without a
// split: an SRV record weighs split[y] × its endpoint's share of zone y by
// PID weight, the product xDS clients compute from the locality and
// endpoint weights. An endpoint without one keeps its registry weight.
//
// The querier's zone comes from the longest Config.Zones prefix that holds
// its EDNS Client Subnet (RFC 7871) and is no longer than the subnet's
// source prefix length, else from the longest prefix that holds its
// source address. With Config.Zones set, a query's client subnet option is
// echoed in the reply (family, source prefix length and address as sent)
// with the scope the answer holds for: 0 when it is the same for every
// zone (A, AAAA, TXT, negative answers, services without a split); the
// matched prefix length when the answer was chosen by the client subnet
// and no longer zone prefix lies inside the matched one; otherwise the
// source prefix length, so a caching resolver never gives one zone's
// answer to another zone. A client subnet with address bits past its
// source prefix length gets FORMERR. Without Config.Zones the option is
// ignored.
//
// Behind a shared cache that neither sends client subnets nor keeps
// answers apart by scope (CoreDNS's cache, for one), the querier is the
// cache: map its subnets to a zone only if it serves that zone alone.
//
// # Size
//
// Over UDP the limit is 512 bytes, or the client's EDNS0 size capped at
// Config.UDPSizeCap (1232). An answer that does not fit is sent with TC set
// and no records, never a partial record set, unless only its glue does
// not fit: the additional section is optional (RFC 2181 9), so the SRV
// records are sent whole with as many whole glue records as fit, and no
// TC. Over TCP a message never
// passes 65,535 bytes: a service whose whole answer would not fit gets a
// subset that fits, taking from every zone in proportion to its endpoints,
// and successive queries rotate through subsets that together cover every
// endpoint. Unhealthy and draining endpoints are never in SRV or service
// A/AAAA answers.
//
// # Cookies
//
// DNS Cookies (RFC 7873) are on unless Config.Cookies.Off. A query whose
// OPT record has a COOKIE option gets one back: its client cookie and a
// fresh 16-byte server cookie of RFC 9018's form (version 1, three
// reserved zero bytes, the time in seconds, and a SipHash-2-4, keyed with
// Config.Cookies.Secret, of the client cookie, those eight bytes and the
// querier's address), in every reply but a slipped one (below). A server
// cookie is valid when it is of that form for this querier and secret and
// its time is at most an hour past and five minutes ahead; a valid one
// proves that the querier received an earlier reply at its address. A
// COOKIE option of a length other than 8 or 16 to 40 bytes gets FORMERR
// (with an OPT record, without a COOKIE); only the first COOKIE option of
// a query is read. Cookies are never required: a query without one, or
// with an invalid or stale one, is answered as any other (no BADCOOKIE),
// with a fresh cookie when it sent one. Each query with a COOKIE is
// counted in spillway_dns_cookies_total{result="valid", "invalid",
// "client_only" or "malformed"}. The 28 bytes of the option count
// towards the UDP size limit like any other part of the reply.
//
// # Abuse
//
// With Config.RRL.Rate set, UDP responses are rate limited per source
// prefix (package rrl; IPv4 /24 and IPv6 /56 by default) before any
// answer is built: a prefix past its rate and burst gets nothing, except
// every RRL.Slip-th such response, which is sent as the header with TC
// set, the question and (when the query had one) an OPT record without
// options, no records, so that a real client asks again over TCP. A
// slipped reply is never larger than the query: it carries no COOKIE
// (with a server cookie it would outgrow a query that had only a client
// cookie, and a client cookie alone is a malformed reply, RFC 7873 5.3).
// Every UDP response counts, NXDOMAIN and errors (the FORMERR of a
// malformed COOKIE included) alike; dropped and slipped ones are counted
// in spillway_dns_rrl_dropped_total and spillway_dns_rrl_slipped_total,
// not in spillway_dns_queries_total. Not limited, and not counted
// against their prefix: a UDP query with a valid server cookie (its
// source is not forged), one from a prefix of RRL.Exempt, both counted in
// spillway_dns_rrl_exempt_total{reason="cookie" or "prefix"}; the
// FORMERR that miekg/dns itself sends to a message it cannot parse (the
// 12-byte header, no larger than the query); and TCP, whose handshake
// proves the source address. The zero Config has no rate limit; the
// spillway command's default is 1,000 responses a second, a burst of as
// many, and slip 1.
//
// TCP is bounded instead: at most Config.TCPMaxConns connections are
// open at once (one accepted past it is closed at once and counted in
// spillway_dns_tcp_refused_total), each serves at most
// Config.TCPMaxQueries queries, and one idle for Config.TCPIdleTimeout is
// closed (a new connection gets 5 s for its first query).
//
// # Concurrency and cost
//
// ServeDNS is safe for concurrent use and takes no lock on the common path:
// it reads the store's current snapshot and, per service version, answers
// pre-built as wire bytes whose owner names are compression pointers into
// the echoed question. A response is the header, the client's question (so
// its case is echoed), those bytes and an OPT record, written from a pooled
// buffer. Answers are rebuilt the first time a service is queried after it
// changed, so a query that follows a registry write sees that write. SRV
// answers with zone weights are cached per service and configured zone,
// and rebuilt when the service or that zone's split changes; Config.Weights
// is asked for the split on every SRV query from a known zone (and from
// any querier that sends a client subnet), so a new split is seen at once.
package resolver

package exchange

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"

	"github.com/spillway/spillway/replica/clusterversion"
	"github.com/spillway/spillway/replica/ownership"
	"github.com/spillway/spillway/security/authn"
)

// sender is what a stream's peer proved about itself when it opened:
// the identity of its verified client certificate, or else its IP
// address. Each summary's replica id is checked against it (bind).
type sender struct {
	cert string     // the certificate identity; "" without one
	ip   netip.Addr // the peer's address, unmapped; judged when cert is ""
}

// admitPeer reads a stream's peer. One with a verified client
// certificate is known by the certificate's identity (authn.FromTLS),
// and some live member's record must name that identity; any other
// (plaintext, or TLS without a client certificate) must come from the
// IP address of some live member's GRPCAddr.
// The error's reason is reasonPeerIdentity or reasonPeerAddress.
func (s *Server) admitPeer(ctx context.Context) (sender, string, error) {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return sender{}, reasonPeerAddress, errors.New("no peer address")
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
		id, ok := authn.FromTLS(ti.State)
		if !ok {
			return sender{}, reasonPeerIdentity, errors.New("the client certificate has no usable URI or DNS SAN to name a replica")
		}
		from := sender{cert: id.Name}
		var unnamed []string
		for _, m := range s.members.Members() {
			if s.bound(ctx, from, m) {
				return from, "", nil
			}
			if s.identityMissing(from, m) {
				unnamed = append(unnamed, strconv.Quote(m.ID))
			}
		}
		if len(unnamed) > 0 {
			return sender{}, reasonIdentityMissing, fmt.Errorf("certificate identity %s is no live member's, and the member records of %s name no identity: cluster version %d binds a certificate only to the identity a member record names (those members run a release before identities were recorded, or no --tls-cert)",
				id.Name, strings.Join(unnamed, ", "), clusterversion.StrictSenderBinding)
		}
		return sender{}, reasonPeerIdentity, fmt.Errorf("certificate identity %s is no live member's (member records name the identity of each replica's --tls-cert)", id.Name)
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return sender{}, reasonPeerAddress, fmt.Errorf("peer address %s is not a live member's", p.Addr)
	}
	from := sender{ip: ap.Addr().Unmap()}
	for _, m := range s.members.Members() {
		if s.bound(ctx, from, m) {
			return from, "", nil
		}
	}
	return sender{}, reasonPeerAddress, fmt.Errorf("peer address %s is not a live member's", from.ip)
}

// bound reports whether from may speak for member m: its certificate
// identity is the one m's record names, or, without a certificate, its
// IP address is one of m's GRPCAddr host's.
//
// A member record without an identity is of a release before identities
// were recorded (or of a replica without --tls-cert). Before cluster
// version 2, over a certificate it is taken as that release took it, on
// the Authorizer's mesh grant alone, so that a rolling upgrade under
// mTLS keeps every member's load (and acknowledgements) flowing. From
// version 2 on (every live member of a release that records its
// identity when it was finalised) it binds no certificate.
func (s *Server) bound(ctx context.Context, from sender, m ownership.Member) bool {
	if from.cert != "" {
		if m.Identity == "" {
			return !s.strict()
		}
		return m.Identity == from.cert
	}
	host, _, err := net.SplitHostPort(m.GRPCAddr)
	if err != nil {
		return false
	}
	for _, a := range s.hosts.addrs(ctx, host) {
		if a == from.ip {
			return true
		}
	}
	return false
}

// strict reports whether cluster version 2 is in force: a member
// record without an identity binds no certificate.
func (s *Server) strict() bool {
	return s.versions != nil && s.versions.Active(clusterversion.StrictSenderBinding)
}

// identityMissing reports whether from, over a certificate, is refused
// for m only because m's record names no identity (version 2).
func (s *Server) identityMissing(from sender, m ownership.Member) bool {
	return from.cert != "" && m.Identity == "" && s.strict()
}

// RefusesCertificates reports whether every summary for member m that
// comes over a verified client certificate is refused, whatever the
// certificate: cluster version 2 is in force and m's record names no
// identity. Such a member never acknowledges a new owner over mTLS, so
// an owner whose peers present certificates must not wait for it (the
// member runs a release the cluster has been finalised past, which is
// unsupported; its load is lost, the handover is not). Self is never
// refused: its summaries reach its Merged without the network.
func (s *Server) RefusesCertificates(m ownership.Member) bool {
	return m.Identity == "" && m.ID != s.self && s.strict()
}

// identityMissing says why from may not speak for member m, a record
// without identity, at version 2.
func identityMissing(from sender, m ownership.Member) error {
	return fmt.Errorf("replica %q's member record names no identity, so certificate %s cannot speak for it: cluster version %d takes summaries over a certificate only for the identity a member record names (the member runs a release before identities were recorded, or no --tls-cert)",
		m.ID, from.cert, clusterversion.StrictSenderBinding)
}

// notBound says why from may not speak for member m.
func notBound(from sender, m ownership.Member) error {
	switch {
	case from.cert == "":
		return fmt.Errorf("replica %q is at %s, not at the peer address %s", m.ID, m.GRPCAddr, from.ip)
	default:
		return fmt.Errorf("replica %q is certificate identity %s, not %s", m.ID, m.Identity, from.cert)
	}
}

// lookupHost resolves a member's host name.
func lookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// Host cache bounds: a name's addresses are kept 30 s (a failed lookup
// 5 s); each lookup has 2 s.
const (
	hostTTL        = 30 * time.Second
	hostFailTTL    = 5 * time.Second
	hostLookupTime = 2 * time.Second
	hostCacheMax   = 1024
)

// hostCache resolves member host names, caching the answers. Hosts
// come from member records, so it holds about as many as there are
// members; past hostCacheMax it drops expired ones.
type hostCache struct {
	// Read-only after newHostCache.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	now    func() time.Time

	mu    sync.Mutex // guards hosts
	hosts map[string]hostEntry
}

type hostEntry struct {
	addrs   []netip.Addr // unmapped
	expires time.Time
}

func newHostCache(lookup func(context.Context, string) ([]netip.Addr, error), now func() time.Time) *hostCache {
	return &hostCache{lookup: lookup, now: now, hosts: map[string]hostEntry{}}
}

// addrs returns host's addresses: host itself when it is an IP
// address, else its cached or resolved addresses (none when the lookup
// fails).
func (c *hostCache) addrs(ctx context.Context, host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.hosts[host]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.addrs
	}
	lctx, cancel := context.WithTimeout(ctx, hostLookupTime)
	defer cancel()
	addrs, err := c.lookup(lctx, host)
	e = hostEntry{expires: now.Add(hostTTL)}
	if err != nil {
		e.expires = now.Add(hostFailTTL)
	}
	for _, a := range addrs {
		e.addrs = append(e.addrs, a.Unmap())
	}
	c.mu.Lock()
	if len(c.hosts) >= hostCacheMax {
		for h, old := range c.hosts {
			if !now.Before(old.expires) {
				delete(c.hosts, h)
			}
		}
	}
	if len(c.hosts) < hostCacheMax {
		c.hosts[host] = e
	}
	c.mu.Unlock()
	return e.addrs
}

// logLimiter lets one message per reason through each period and counts
// the others.
type logLimiter struct {
	every time.Duration // read-only

	mu         sync.Mutex // guards the fields below
	last       map[string]time.Time
	suppressed map[string]int
}

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether a message of reason may be logged at now, and
// how many were held back since the last one.
func (l *logLimiter) allow(reason string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, seen := l.last[reason]; seen && now.Sub(last) < l.every {
		l.suppressed[reason]++
		return false, 0
	}
	l.last[reason] = now
	suppressed = l.suppressed[reason]
	l.suppressed[reason] = 0
	return true, suppressed
}

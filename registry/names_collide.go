package registry

import (
	"errors"
	"fmt"
	"strings"
)

// The DNS edges of the store's names. The resolver serves
//
//	<service>.<domain>                  A/AAAA
//	<id>.<service>.<domain>             the endpoint's address, and SRV target
//	_<port>._<proto>.<service>.<domain> SRV
//
// so a name the store accepts must fit in a DNS name (255 octets on the
// wire, RFC 1035 2.3.4) under the configured domain, and no two of these
// names may be spelled the same: service "a.b" and endpoint "a" of service
// "b" would both be a.b.<domain>, and a resolver that re-resolves the SRV
// target of b's endpoint would get a.b's addresses.

// MaxWireName is the longest a DNS name may be on the wire: each label's
// length byte and characters, and the root's zero byte.
const MaxWireName = 255

// DefaultDomain is the domain a Store's names are checked against when
// StoreConfig.Domain is empty; the resolver's default too.
const DefaultDomain = "spillway.internal."

// ErrNameTaken is wrapped, next to a *FieldError, by the error of a write
// that would give two things one DNS name: an endpoint <id> of service
// <s> and a service named "<id>.<s>". Whichever came first keeps the name.
var ErrNameTaken = errors.New("DNS name taken")

// dnsNames holds what the name checks need of the domain. Read-only after
// NewStoreWith.
type dnsNames struct {
	domain string // lower case, trailing dot
	wire   int    // wire length of domain
}

func newDNSNames(domain string) (dnsNames, error) {
	d := strings.ToLower(domain)
	if d == "" {
		d = DefaultDomain
	}
	if !strings.HasSuffix(d, ".") {
		d += "."
	}
	if d == "." {
		return dnsNames{}, fieldErr("Domain", "%q: want a domain such as %s", domain, DefaultDomain)
	}
	for _, l := range strings.Split(strings.TrimSuffix(d, "."), ".") {
		if err := ValidateLabel("Domain", l); err != nil {
			return dnsNames{}, err
		}
	}
	// The shortest SRV target, x.y.<domain>, must fit.
	n := dnsNames{domain: d, wire: len(d) + 1}
	if n.wire+4 > MaxWireName {
		return dnsNames{}, fieldErr("Domain", "%q is %d octets on the wire: no name <id>.<service> fits under it in %d", domain, n.wire, MaxWireName)
	}
	return n, nil
}

// under is the wire length of "<rel>.<domain>" for a relative name of
// relLen characters in presentation form without escapes: its labels and
// dots become length bytes, plus one for the first label.
func (n *dnsNames) under(relLen int) int { return relLen + 1 + n.wire }

// checkService checks that service leaves room under the domain for its
// endpoints' names: at least a one-character id.
func (n *dnsNames) checkService(service string) error {
	if w := 2 + n.under(len(service)); w > MaxWireName {
		return fieldErr("service", "%q is %d characters: even a one-character endpoint id would make its SRV target x.%s.%s %d octets on the wire, over DNS's %d; in domain %s a service name has at most %d characters",
			service, len(service), service, n.domain, w, MaxWireName, n.domain, MaxWireName-2-1-n.wire)
	}
	return nil
}

// checkEndpoint checks that e's SRV target <id>.<service>.<domain> and its
// SRV names _<port>._<proto>.<service>.<domain> fit in a DNS name. e is
// normalised and valid.
func (n *dnsNames) checkEndpoint(service string, e *Endpoint) error {
	svc := n.under(len(service))
	if w := 1 + len(e.ID) + svc; w > MaxWireName {
		return fieldErr("endpoint.id", "%q is %d characters: the SRV target %s.%s.%s would be %d octets on the wire, over DNS's %d; with service %q in domain %s an id has at most %d characters",
			e.ID, len(e.ID), e.ID, service, n.domain, w, MaxWireName, service, n.domain, MaxWireName-1-svc)
	}
	for i, p := range e.Ports {
		if w := 2 + len(p.Name) + 2 + len(p.Protocol) + svc; w > MaxWireName {
			return fieldErr(fmt.Sprintf("endpoint.ports[%d].name", i), "%q is %d characters: the SRV name _%s._%s.%s.%s would be %d octets on the wire, over DNS's %d; with service %q in domain %s a port name has at most %d characters",
				p.Name, len(p.Name), p.Name, p.Protocol, service, n.domain, w, MaxWireName, service, n.domain, MaxWireName-2-2-len(p.Protocol)-svc)
		}
	}
	return nil
}

// CheckNames reports whether the store would accept the names of endpoint
// e of service under its domain, as Apply checks them: a *FieldError naming
// "service", "endpoint.id" or "endpoint.ports[i].name" when a DNS name
// would pass 255 octets. e must be normalised and valid. It does not check
// collisions, which depend on the store's content. Sources use it to skip
// one bad endpoint instead of failing a whole batch.
func (s *Store) CheckNames(service string, e *Endpoint) error {
	if err := s.names.checkService(service); err != nil {
		return err
	}
	return s.names.checkEndpoint(service, e)
}

// Domain is the domain the store checks its names against, lower case
// with a trailing dot.
func (s *Store) Domain() string { return s.names.domain }

// checkNewEndpoint rejects endpoint id of service when a service is named
// "<id>.<service>": both would be <id>.<service>.<domain>. One map lookup
// (and one concatenation), only when an id is new to its service.
func (b *builder) checkNewEndpoint(service, id string) error {
	host := id + "." + service
	if _, ok := b.lookup(host); !ok {
		return nil
	}
	fe := fieldErr("endpoint.id", "%q: endpoint %s of service %q and service %q would both be named %s.%s; the service was there first, pick another id",
		id, id, service, host, host, b.dns.domain)
	return fmt.Errorf("upsert %s/%s: %w (%w)", service, id, fe, ErrNameTaken)
}

// checkNewService rejects a new service "<id>.<parent>" when service
// parent has an endpoint id: both would be <id>.<parent>.<domain>. Split
// at the first dot, because endpoint ids are single labels: one lookup of
// the parent and a binary search of its endpoints, whatever the depth
// ("x.a.b" is checked against endpoint "x" of "a.b").
func (b *builder) checkNewService(service string) error {
	i := strings.IndexByte(service, '.')
	if i < 0 {
		return nil
	}
	id, parent := service[:i], service[i+1:]
	p, ok := b.lookup(parent)
	if !ok {
		return nil
	}
	if _, ok := p.Endpoint(id); !ok {
		return nil
	}
	fe := fieldErr("service", "%q: service %q and endpoint %s of service %q would both be named %s.%s; the endpoint was there first, pick another service name",
		service, service, id, parent, service, b.dns.domain)
	return fmt.Errorf("declare %s: %w (%w)", service, fe, ErrNameTaken)
}

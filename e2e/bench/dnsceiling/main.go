// Command dnsceiling is the ceiling of the DNS benchmark (e2e/bench/dnsperf.sh):
// the minimal authoritative server a reasonable engineer would write on
// miekg/dns, answering the same records as spillway's resolver from a map
// built once at start.
//
// It loads a static services file with the project's own loader
// (registry/static), then builds:
//
//   - _<port>._<proto>.<service>.<domain> SRV: one record per healthy
//     endpoint (priority 0, the endpoint's weight unscaled, the port,
//     target <endpoint-id>.<service>.<domain>), with the targets' A/AAAA
//     records in the additional section;
//   - <service>.<domain> A/AAAA: the healthy endpoints' addresses;
//   - <endpoint-id>.<service>.<domain> A/AAAA: the endpoint's address,
//     whatever its health (as spillway does).
//
// Every record has TTL 5. A name it holds with another type gets NODATA, any
// other name under the domain NXDOMAIN, both with the SOA in the authority
// section; names outside the domain are REFUSED. EDNS0 is honoured: the
// reply carries an OPT of 1232 bytes, the client's UDP size is capped at
// 1232 (512 without EDNS), and UDP replies go through Msg.Truncate; a reply
// it truncates is sent, like spillway's, with TC set and no records
// (--partial-tc keeps what Truncate left). Replies are always compressed. The file is read once; there is
// no reload and no cache of packed replies.
//
// Usage:
//
//	dnsceiling --addr 127.0.0.1:8054 --static-file services.yaml
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/static"
)

const (
	ttl = 5
	// maxUDPSize is the largest UDP reply sent, and the size advertised in
	// the reply's OPT (the DNS flag day 2020 value).
	maxUDPSize = 1232
)

// key is a lower-cased, fully qualified name and a query type.
type key struct {
	name  string
	qtype uint16
}

// zone is every answer the server gives, built once.
type zone struct {
	domain string
	soa    []dns.RR
	answer map[key][]dns.RR
	extra  map[key][]dns.RR // SRV glue, by the SRV's key
	names  map[string]bool  // every name that has some record: NODATA, not NXDOMAIN
	// partialTC keeps the records Msg.Truncate leaves in a truncated UDP
	// reply, instead of sending none.
	partialTC bool
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8054", "listen address, UDP and TCP")
	staticFile := flag.String("static-file", "", "YAML file of services and endpoints (registry/static format), read once")
	domain := flag.String("domain", "spillway.internal.", "DNS domain served")
	partialTC := flag.Bool("partial-tc", false, "send the records Msg.Truncate keeps in a truncated UDP reply (default: none, like spillway)")
	flag.Parse()
	if err := run(*addr, *staticFile, *domain, *partialTC); err != nil {
		fmt.Fprintln(os.Stderr, "dnsceiling:", err)
		os.Exit(1)
	}
}

func run(addr, staticFile, domain string, partialTC bool) error {
	if staticFile == "" {
		return errors.New("--static-file is required")
	}
	if _, ok := dns.IsDomainName(domain); !ok || domain == "." {
		return fmt.Errorf("--domain %q is not a domain name", domain)
	}
	store := registry.NewStore()
	src, err := static.New(static.Config{Path: staticFile, Store: store})
	if err != nil {
		return err
	}
	if err := src.Load(); err != nil {
		return err
	}
	z := build(store.Snapshot(), dns.CanonicalName(domain))
	z.partialTC = partialTC

	handler := dns.HandlerFunc(z.serve)
	servers := []*dns.Server{
		{Addr: addr, Net: "udp", Handler: handler},
		{Addr: addr, Net: "tcp", Handler: handler},
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { errc <- s.ListenAndServe() }()
		select {
		case <-started:
		case err := <-errc:
			return fmt.Errorf("listen %s/%s: %w", s.Net, addr, err)
		}
	}
	fmt.Fprintf(os.Stderr, "dnsceiling: serving %s on %s (udp+tcp): %d services, %d names\n",
		z.domain, addr, store.Snapshot().Len(), len(z.answer))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.ShutdownContext(shutdown)
	}
	return nil
}

// build turns a snapshot into the zone's answer maps.
func build(snap *registry.Snapshot, domain string) *zone {
	z := &zone{
		domain: domain,
		answer: map[key][]dns.RR{},
		extra:  map[key][]dns.RR{},
		names:  map[string]bool{domain: true},
	}
	z.soa = []dns.RR{&dns.SOA{
		Hdr:     dns.RR_Header{Name: domain, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      "ns." + domain,
		Mbox:    "hostmaster." + domain,
		Serial:  uint32(snap.Version()),
		Refresh: 3600, Retry: 600, Expire: 86400, Minttl: ttl,
	}}
	z.answer[key{domain, dns.TypeSOA}] = z.soa

	add := func(m map[key][]dns.RR, name string, rr dns.RR) {
		k := key{name, rr.Header().Rrtype}
		m[k] = append(m[k], rr)
	}
	for _, name := range snap.Services() {
		svc, _ := snap.Service(name)
		svcName := dns.CanonicalName(name + "." + domain)
		for _, e := range svc.Endpoints {
			host := dns.CanonicalName(e.ID + "." + svcName)
			addr := addrRR(host, e)
			// Like spillway, an endpoint's own name resolves whatever its
			// health, so a draining SRV target a client holds still resolves.
			add(z.answer, host, addr)
			if e.Health != registry.Healthy {
				continue
			}
			add(z.answer, svcName, addrRR(svcName, e))
			for _, p := range e.Ports {
				srvName := dns.CanonicalName("_" + p.Name + "._" + string(p.Protocol) + "." + svcName)
				add(z.answer, srvName, &dns.SRV{
					Hdr:      dns.RR_Header{Name: srvName, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl},
					Priority: 0,
					Weight:   uint16(e.Weight),
					Port:     p.Number,
					Target:   host,
				})
				k := key{srvName, dns.TypeSRV}
				z.extra[k] = append(z.extra[k], addr)
			}
		}
	}
	// Clip every slice so that appending to a reply's sections (the OPT)
	// copies instead of writing into the shared backing array.
	for k, rrs := range z.answer {
		z.answer[k] = slices.Clip(rrs)
		z.names[k.name] = true
	}
	for k, rrs := range z.extra {
		z.extra[k] = slices.Clip(rrs)
	}
	return z
}

// addrRR is e's A or AAAA record under name.
func addrRR(name string, e *registry.Endpoint) dns.RR {
	if e.Address.Is4() {
		return &dns.A{
			Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
			A:   net.IP(e.Address.AsSlice()),
		}
	}
	return &dns.AAAA{
		Hdr:  dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl},
		AAAA: net.IP(e.Address.AsSlice()),
	}
}

// serve answers one query from the maps.
func (z *zone) serve(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Compress = true
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	k := key{strings.ToLower(q.Name), q.Qtype}
	switch {
	case z.answer[k] != nil:
		m.Answer = z.answer[k]
		m.Extra = z.extra[k]
	case z.names[k.name]:
		m.Ns = z.soa
	case dns.IsSubDomain(z.domain, k.name):
		m.Rcode = dns.RcodeNameError
		m.Ns = z.soa
	default:
		m.Authoritative = false
		m.Rcode = dns.RcodeRefused
	}

	size := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		size = min(max(int(opt.UDPSize()), dns.MinMsgSize), maxUDPSize)
		m.SetEdns0(maxUDPSize, false)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		m.Truncate(size)
		// Truncate turns compression off when the uncompressed reply fits;
		// turn it back on so both servers send the same bytes (it costs
		// no measurable QPS).
		m.Compress = true
		if m.Truncated && !z.partialTC {
			// Like spillway: a reply that does not fit carries no records.
			// (Not slices.DeleteFunc: m.Extra may share the zone's array.)
			opt := m.IsEdns0()
			m.Answer, m.Ns, m.Extra = nil, nil, nil
			if opt != nil {
				m.Extra = []dns.RR{opt}
			}
		}
	}
	_ = w.WriteMsg(m)
}

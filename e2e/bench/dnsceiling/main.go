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
// 1232 (512 without EDNS), and UDP replies go through Msg.Truncate. Like
// spillway's, a reply whose answer does not fit is sent with TC set and no
// records (--partial-tc keeps what Truncate left), and a reply of which
// only some glue does not fit is sent with the glue that fits and no TC. Names are compressed only when a
// reply needs it, as in a plain miekg/dns server: Msg.Compress stays false,
// and Msg.Truncate (to the UDP size, or to 65,535 bytes over TCP) turns it
// on only when the uncompressed reply does not fit. The file is read once;
// there is no reload and no cache of packed replies.
//
// With --write-zone FILE it writes the same records as an RFC 1035 zone
// file (with an NS record for the SOA's ns.<domain>, which CoreDNS's file
// plugin wants) and exits; the benchmark serves that file with CoreDNS.
//
// Usage:
//
//	dnsceiling --addr 127.0.0.1:8054 --static-file services.yaml
//	dnsceiling --static-file services.yaml --write-zone zone.db
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
	writeZone := flag.String("write-zone", "", "write the records as a zone file to this path and exit")
	flag.Parse()
	if err := run(*addr, *staticFile, *domain, *partialTC, *writeZone); err != nil {
		fmt.Fprintln(os.Stderr, "dnsceiling:", err)
		os.Exit(1)
	}
}

func run(addr, staticFile, domain string, partialTC bool, writeZone string) error {
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
	if writeZone != "" {
		return z.writeZone(writeZone)
	}

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
	if _, udp := w.RemoteAddr().(*net.UDPAddr); !udp {
		// Compresses only if the uncompressed reply passes 64 KB.
		m.Truncate(dns.MaxMsgSize)
	} else {
		// Compresses only if the uncompressed reply does not fit.
		nAnswer, nNs := len(m.Answer), len(m.Ns)
		m.Truncate(size)
		if m.Truncated && len(m.Answer) == nAnswer && len(m.Ns) == nNs {
			// Like spillway: only glue was left out, which is optional
			// (RFC 2181 9), so no TC.
			m.Truncated = false
		}
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

// writeZone writes every record of z as a zone file, each once, sorted.
func (z *zone) writeZone(path string) error {
	seen := map[string]bool{}
	var lines []string
	addLine := func(rr dns.RR) {
		l := rr.String()
		if !seen[l] {
			seen[l] = true
			lines = append(lines, l)
		}
	}
	for _, rrs := range z.answer {
		for _, rr := range rrs {
			if rr.Header().Rrtype != dns.TypeSOA {
				addLine(rr)
			}
		}
	}
	slices.Sort(lines)
	ns := &dns.NS{Hdr: dns.RR_Header{Name: z.domain, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: ttl}, Ns: "ns." + z.domain}
	glue := &dns.A{Hdr: dns.RR_Header{Name: "ns." + z.domain, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.IPv4(127, 0, 0, 1)}
	head := []string{"$ORIGIN " + z.domain, z.soa[0].String(), ns.String(), glue.String()}
	return os.WriteFile(path, []byte(strings.Join(append(head, lines...), "\n")+"\n"), 0o644)
}

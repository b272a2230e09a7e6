// Command gendns writes the data of the DNS benchmark (e2e/bench/dnsperf.sh):
// a static services file and the query mix dnsperf replays.
//
// The services file (registry/static format) lists 100 services, svc-000 to
// svc-099, with 3 to 20 endpoints each spread over three zones: IPv4
// addresses in 10.0.0.0/8 (only data in the answers; nothing is ever sent to
// them), one port named grpc, ids left to the loader's default
// (<address>-<port>), weights 50, 100 or 200, and about one endpoint in 20
// draining or unhealthy so the healthy-only filter is exercised. Every
// service keeps at least one healthy endpoint.
//
// The query mix is 70% SRV _grpc._tcp.svc-NNN.<domain>, 25% A
// svc-NNN.<domain> and 5% A nope-NNN.<domain> (NXDOMAIN), services drawn
// uniformly, shuffled. It is written twice: as dnsperf's text data file
// ("name type" per line) and as a dnsperf -B binary file (RFC 1035
// TCP-framed wire queries, RD set, with an EDNS0 OPT advertising --bufsize
// bytes), because dnsperf's -e always advertises 4096 and has no flag for
// the size. Everything is drawn from --seed, so a run is reproducible.
//
// Usage:
//
//	gendns --services services.yaml --queries queries.txt --queries-bin queries.bin
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"

	"github.com/miekg/dns"
)

type config struct {
	services   string
	queries    string
	queriesBin string
	domain     string
	seed       uint64
	count      int // services
	lines      int
	bufsize    int
}

func main() {
	var c config
	flag.StringVar(&c.services, "services", "services.yaml", "services file to write")
	flag.StringVar(&c.queries, "queries", "queries.txt", `dnsperf text query file to write ("" skips it)`)
	flag.StringVar(&c.queriesBin, "queries-bin", "", `dnsperf -B binary query file to write ("" skips it)`)
	flag.StringVar(&c.domain, "domain", "spillway.internal.", "DNS domain of the query names")
	flag.Uint64Var(&c.seed, "seed", 1, "random seed for the services and the query mix")
	flag.IntVar(&c.count, "count", 100, "number of services")
	flag.IntVar(&c.lines, "lines", 5000, "number of queries in the query files")
	flag.IntVar(&c.bufsize, "bufsize", 1232, "EDNS0 UDP size advertised by the binary queries (0: no EDNS)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "gendns:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.count < 1 || c.count > 1000 {
		return fmt.Errorf("--count %d, want 1..1000", c.count)
	}
	if c.lines < 20 {
		return fmt.Errorf("--lines %d, want at least 20", c.lines)
	}
	if c.bufsize != 0 && (c.bufsize < 512 || c.bufsize > 65535) {
		return fmt.Errorf("--bufsize %d, want 0 or 512..65535", c.bufsize)
	}
	c.domain = dns.Fqdn(c.domain)
	// Two streams from one seed: adding queries does not change the services.
	if err := writeFile(c.services, services(c, rand.New(rand.NewPCG(c.seed, 1)))); err != nil {
		return err
	}
	qs := queries(c, rand.New(rand.NewPCG(c.seed, 2)))
	if c.queries != "" {
		var b strings.Builder
		for _, q := range qs {
			fmt.Fprintf(&b, "%s %s\n", q.Name, dns.TypeToString[q.Qtype])
		}
		if err := writeFile(c.queries, []byte(b.String())); err != nil {
			return err
		}
	}
	if c.queriesBin != "" {
		var out []byte
		for i, q := range qs {
			m := new(dns.Msg)
			m.Id = uint16(i) // dnsperf overwrites it
			m.RecursionDesired = true
			m.Question = []dns.Question{q}
			if c.bufsize > 0 {
				m.SetEdns0(uint16(c.bufsize), false)
			}
			wire, err := m.Pack()
			if err != nil {
				return fmt.Errorf("pack %s: %w", q.Name, err)
			}
			out = binary.BigEndian.AppendUint16(out, uint16(len(wire)))
			out = append(out, wire...)
		}
		if err := writeFile(c.queriesBin, out); err != nil {
			return err
		}
	}
	return nil
}

// services returns the YAML services file.
func services(c config, rng *rand.Rand) []byte {
	zones := []string{"us-east1-a", "us-east1-b", "us-east1-c"}
	weights := []int{50, 100, 100, 100, 200}
	used := map[netip.Addr]bool{}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by e2e/bench/gendns --seed %d: %d services for the DNS benchmark.\n", c.seed, c.count)
	b.WriteString("services:\n")
	for s := range c.count {
		fmt.Fprintf(&b, "  - name: svc-%03d\n    endpoints:\n", s)
		n := 3 + rng.IntN(18) // 3..20
		for i := range n {
			var addr netip.Addr
			for {
				addr = netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(1 + rng.IntN(254))})
				if !used[addr] {
					break
				}
			}
			used[addr] = true
			health := "healthy"
			if i > 0 && rng.IntN(20) == 0 {
				health = []string{"draining", "unhealthy"}[rng.IntN(2)]
			}
			fmt.Fprintf(&b, "      - {address: %s, ports: [\"grpc=8080/tcp\"], region: us-east1, zone: %s, health: %s, weight: %d}\n",
				addr, zones[i%len(zones)], health, weights[rng.IntN(len(weights))])
		}
	}
	return []byte(b.String())
}

// queries returns the shuffled query mix: exactly 5% NXDOMAIN, 25% A, the
// rest SRV.
func queries(c config, rng *rand.Rand) []dns.Question {
	nx := c.lines * 5 / 100
	a := c.lines * 25 / 100
	qs := make([]dns.Question, 0, c.lines)
	for i := range c.lines {
		svc := fmt.Sprintf("svc-%03d.%s", rng.IntN(c.count), c.domain)
		var q dns.Question
		switch {
		case i < nx:
			q = dns.Question{Name: fmt.Sprintf("nope-%03d.%s", rng.IntN(1000), c.domain), Qtype: dns.TypeA}
		case i < nx+a:
			q = dns.Question{Name: svc, Qtype: dns.TypeA}
		default:
			q = dns.Question{Name: "_grpc._tcp." + svc, Qtype: dns.TypeSRV}
		}
		q.Qclass = dns.ClassINET
		qs = append(qs, q)
	}
	rng.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })
	return qs
}

func writeFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o644)
}

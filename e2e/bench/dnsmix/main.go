// Command dnsmix checks that the servers of the DNS benchmark
// (e2e/bench/dnsperf.sh) answer the query mix alike, which dnsperf's
// summary cannot show: dnsperf counts response codes but not truncation,
// and not what the answers hold.
//
// It reads a dnsperf text query file ("name type" per line) and asks every
// distinct query once of each server: over UDP with an EDNS0 OPT of
// --bufsize bytes, like the benchmark's queries, to count response codes,
// truncated replies and reply sizes (each weighted by how often the query
// appears in the file); and over TCP, to compare the full answers across
// servers: the response code, the answer and additional records (TTLs
// ignored, order ignored, OPT left out; SRV weights ignored unless
// --srv-weights, since spillway scales them to 1..65535 and the ceiling
// does not) and the types in the authority section. Every exchange has a
// timeout, so it never hangs.
//
// Usage:
//
//	dnsmix --queries queries.txt --server ceiling=127.0.0.1:8054 --server spillway=127.0.0.1:8053
//
// It exits 1 when a server failed to answer a query or the servers' TCP
// answers differ.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

type server struct{ name, addr string }

type serverFlag []server

func (f *serverFlag) String() string { return fmt.Sprint(*f) }

func (f *serverFlag) Set(v string) error {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" || addr == "" {
		return errors.New("want name=host:port")
	}
	*f = append(*f, server{name, addr})
	return nil
}

// query is one distinct query of the file and how often it appears.
type query struct {
	q     dns.Question
	count int
}

// tally is one server's UDP results, weighted by the query counts.
type tally struct {
	rcodes   map[string]int
	failed   int // no usable reply
	tc       int
	bytes    int
	replies  int
	firstErr error
}

func main() {
	var servers serverFlag
	queriesPath := flag.String("queries", "", "dnsperf text query file (required)")
	bufsize := flag.Int("bufsize", 1232, "EDNS0 UDP size of the UDP queries (0: no EDNS)")
	timeout := flag.Duration("timeout", time.Second, "timeout of one exchange")
	srvWeights := flag.Bool("srv-weights", false, "compare SRV weights too")
	flag.Var(&servers, "server", "name=host:port of a server to ask; repeat for each server")
	flag.Parse()
	if err := run(*queriesPath, servers, *bufsize, *timeout, *srvWeights); err != nil {
		fmt.Fprintln(os.Stderr, "dnsmix:", err)
		os.Exit(1)
	}
}

func run(path string, servers []server, bufsize int, timeout time.Duration, srvWeights bool) error {
	if path == "" || len(servers) == 0 {
		return errors.New("--queries and at least one --server are required")
	}
	qs, total, err := readQueries(path)
	if err != nil {
		return err
	}
	fmt.Printf("dnsmix: %d queries (%d distinct) from %s; UDP with EDNS0 size %d, counts weighted by the file\n",
		total, len(qs), path, bufsize)
	fmt.Printf("%-10s %9s %9s %7s %7s %9s %9s\n", "server", "NOERROR", "NXDOMAIN", "other", "failed", "TC", "avg-bytes")
	var bad error
	answers := make([][]string, len(servers)) // per server, per distinct query
	for i, s := range servers {
		t := tally{rcodes: map[string]int{}}
		answers[i] = make([]string, len(qs))
		for j, q := range qs {
			t.udp(s.addr, q, bufsize, timeout)
			answers[i][j] = tcpAnswer(s.addr, q.q, timeout, srvWeights)
		}
		other := t.replies - t.rcodes["NOERROR"] - t.rcodes["NXDOMAIN"]
		avg := 0.0
		if t.replies > 0 {
			avg = float64(t.bytes) / float64(t.replies)
		}
		fmt.Printf("%-10s %9d %9d %7d %7d %9s %9.0f\n", s.name, t.rcodes["NOERROR"], t.rcodes["NXDOMAIN"], other, t.failed,
			fmt.Sprintf("%d(%.0f%%)", t.tc, 100*float64(t.tc)/float64(total)), avg)
		if t.failed > 0 {
			fmt.Printf("  %s: %d queries without a usable UDP reply, first error: %v\n", s.name, t.failed, t.firstErr)
			bad = errors.New("a server failed to answer")
		}
	}
	for i := 1; i < len(servers); i++ {
		diff := 0
		for j := range qs {
			if answers[i][j] == answers[0][j] {
				continue
			}
			diff++
			if diff <= 3 {
				fmt.Printf("  differ on %s %s:\n    %s: %s\n    %s: %s\n", qs[j].q.Name, dns.TypeToString[qs[j].q.Qtype],
					servers[0].name, answers[0][j], servers[i].name, answers[i][j])
			}
		}
		ignored := "TTLs, order and SRV weights ignored"
		if srvWeights {
			ignored = "TTLs and order ignored"
		}
		fmt.Printf("TCP answers: %s and %s differ on %d of %d distinct queries (%s)\n",
			servers[0].name, servers[i].name, diff, len(qs), ignored)
		if diff > 0 {
			bad = errors.New("the servers' answers differ")
		}
	}
	return bad
}

// readQueries returns the distinct queries of a dnsperf text file in order
// of first appearance, and the number of queries in the file.
func readQueries(path string) ([]query, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	index := map[dns.Question]int{}
	var qs []query
	total := 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], ";") {
			continue
		}
		if len(fields) != 2 {
			return nil, 0, fmt.Errorf("%s:%d: want \"name type\"", path, line)
		}
		qtype, ok := dns.StringToType[strings.ToUpper(fields[1])]
		if !ok {
			return nil, 0, fmt.Errorf("%s:%d: unknown type %q", path, line, fields[1])
		}
		q := dns.Question{Name: dns.Fqdn(fields[0]), Qtype: qtype, Qclass: dns.ClassINET}
		i, seen := index[q]
		if !seen {
			i = len(qs)
			index[q] = i
			qs = append(qs, query{q: q})
		}
		qs[i].count++
		total++
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("%s: no queries", path)
	}
	return qs, total, nil
}

// udp asks q once over UDP and adds the reply to t, q.count times.
func (t *tally) udp(addr string, q query, bufsize int, timeout time.Duration) {
	fail := func(err error) {
		t.failed += q.count
		if t.firstErr == nil {
			t.firstErr = fmt.Errorf("%s %s: %w", q.q.Name, dns.TypeToString[q.q.Qtype], err)
		}
	}
	m := new(dns.Msg)
	m.Id = dns.Id()
	m.Question = []dns.Question{q.q}
	if bufsize > 0 {
		m.SetEdns0(uint16(bufsize), false)
	}
	wire, err := m.Pack()
	if err != nil {
		fail(err)
		return
	}
	conn, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		fail(err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(wire); err != nil {
		fail(err)
		return
	}
	buf := make([]byte, 65535)
	n, err := conn.Read(buf)
	if err != nil {
		fail(err)
		return
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		fail(err)
		return
	}
	if r.Id != m.Id {
		fail(fmt.Errorf("reply id %d, want %d", r.Id, m.Id))
		return
	}
	t.replies += q.count
	t.bytes += n * q.count
	t.rcodes[dns.RcodeToString[r.Rcode]] += q.count
	if r.Truncated {
		t.tc += q.count
	}
}

// tcpAnswer asks q over TCP and returns the reply in a canonical form.
func tcpAnswer(addr string, q dns.Question, timeout time.Duration, srvWeights bool) string {
	c := &dns.Client{Net: "tcp", Timeout: timeout}
	m := new(dns.Msg)
	m.Question = []dns.Question{q}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return "error: " + err.Error()
	}
	records := func(rrs []dns.RR) string {
		var out []string
		for _, rr := range rrs {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			rr = dns.Copy(rr)
			rr.Header().Ttl = 0
			if srv, ok := rr.(*dns.SRV); ok && !srvWeights {
				srv.Weight = 0
			}
			out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
		}
		slices.Sort(out)
		return strings.Join(out, "; ")
	}
	var ns []string
	for _, rr := range r.Ns {
		ns = append(ns, dns.TypeToString[rr.Header().Rrtype])
	}
	slices.Sort(ns)
	return fmt.Sprintf("%s tc=%t answer=[%s] authority=%v additional=[%s]",
		dns.RcodeToString[r.Rcode], r.Truncated, records(r.Answer), ns, records(r.Extra))
}

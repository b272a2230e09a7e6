package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// This file runs the real dig (BIND 9.18, text output) and kdig (Knot 3.2,
// `+json`, RFC 8427) against a spillway subprocess and parses what they
// print into one dnsReply, so the tests assert on what a DNS client
// understood of the bytes on the wire, not on our own decoder. Records come
// out of both tools in presentation (zone-file) form and are parsed with
// dns.NewRR, the same way the want records of a case are.

// dnsTools are the command-line clients the DNS tests drive, with the
// Debian package that brings each (scripts/test-deps.sh installs them).
var dnsTools = map[string]string{"dig": "bind9-dnsutils", "kdig": "knot-dnsutils"}

// noEDNS as a dnsQuery bufsize sends the query without an OPT record.
const noEDNS = -1

// dnsQuery is one query as a client sends it.
type dnsQuery struct {
	name, qtype string
	tcp         bool
	// bufsize is the EDNS0 UDP size advertised: 0 means 1232 (dig's
	// default), noEDNS sends no OPT record.
	bufsize int
	// args are more tool arguments, e.g. "+header-only" (dig only).
	args []string
}

func (q dnsQuery) String() string {
	s := q.name + " " + q.qtype
	if q.tcp {
		s += " +tcp"
	}
	switch q.bufsize {
	case 0:
	case noEDNS:
		s += " +noedns"
	default:
		s += fmt.Sprintf(" +bufsize=%d", q.bufsize)
	}
	return s
}

// dnsReply is a response as dig or kdig parsed it. The OPT record is in
// EDNS, not in Additional.
type dnsReply struct {
	Opcode                        string // "QUERY", …; "" from kdig
	Rcode                         string // "NOERROR", "NXDOMAIN", …
	Flags                         string // header flags set, in the order "qr aa tc rd ra ad cd"
	Question                      []dnsQuestion
	Answer, Authority, Additional []dns.RR
	EDNS                          *ednsInfo // nil when the reply has no OPT record
	Size                          int       // bytes of the DNS message received
	Proto                         string    // "UDP" or "TCP" as dig reports it; "" from kdig

	// qnameFolded: the tool prints the question name lower-cased, so its
	// case says nothing (kdig +json prints Knot's lower-cased copy of the
	// QNAME; its text output and the records' owners keep the case).
	qnameFolded bool
	raw         string // the tool's output, for failure messages
}

type dnsQuestion struct{ Name, Class, Type string }

type ednsInfo struct {
	Version int
	UDP     int // the responder's UDP payload size
}

// tc reports whether the TC flag is set.
func (r *dnsReply) tc() bool { return slices.Contains(strings.Fields(r.Flags), "tc") }

// flagOrder is the order in which dnsReply.Flags lists header flags.
var flagOrder = []string{"qr", "aa", "tc", "rd", "ra", "ad", "cd"}

func canonFlags(set map[string]bool) (string, error) {
	var out []string
	for _, f := range flagOrder {
		if set[f] {
			out = append(out, f)
		}
		delete(set, f)
	}
	for f, on := range set {
		if on {
			return "", fmt.Errorf("unknown header flag %q", f)
		}
	}
	return strings.Join(out, " "), nil
}

// lookTool finds tool or fails the test: CI installs it, so a missing one
// is a broken environment, not a reason to skip.
func lookTool(t *testing.T, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s not found in PATH: install the Debian package %s (scripts/test-deps.sh does): %v", tool, dnsTools[tool], err)
	}
	return path
}

// askDNS runs tool ("dig" or "kdig") for q against addr and returns the
// parsed reply. A tool that fails or prints something unparsable fails the
// test.
func askDNS(t *testing.T, tool, addr string, q dnsQuery) *dnsReply {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"@" + host, "-p", port}
	switch tool {
	case "dig":
		// +ignore: a truncated reply is reported, not retried over TCP.
		args = append(args, digArgs...)
		args = append(args, "+time=2", "+tries=1", "+norec", "+ignore")
		if q.tcp {
			args = append(args, "+tcp")
		} else {
			args = append(args, "+notcp") // dig 9.18 sends ANY over TCP unless told
		}
		switch q.bufsize {
		case 0:
			args = append(args, "+bufsize=1232")
		case noEDNS:
			args = append(args, "+noedns")
		default:
			args = append(args, fmt.Sprintf("+bufsize=%d", q.bufsize))
		}
	case "kdig":
		// +noidn: without it kdig lower-cases the name it sends (IDN
		// transformation), and the case-echo cases would ask something else.
		args = append(args, "+json", "+noidn", "+timeout=2", "+retry=0", "+norec", "+ignore")
		if q.tcp {
			args = append(args, "+tcp")
		}
		switch q.bufsize {
		case 0:
			args = append(args, "+edns=0", "+bufsize=1232")
		case noEDNS:
			args = append(args, "+noedns")
		default:
			args = append(args, "+edns=0", fmt.Sprintf("+bufsize=%d", q.bufsize))
		}
	default:
		t.Fatalf("unknown DNS tool %q", tool)
	}
	args = append(args, q.args...)
	args = append(args, q.name, q.qtype)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, lookTool(t, tool), args...)
	// dig reads $HOME/.digrc; keep the developer's out of the test.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", tool, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	var r *dnsReply
	if tool == "dig" {
		r, err = parseDig(stdout.String())
	} else {
		r, err = parseKdigJSON(stdout.Bytes())
	}
	if err != nil {
		t.Fatalf("%s %s: parse output: %v\nstdout:\n%s\nstderr:\n%s", tool, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return r
}

// dig's text output, as printed with digArgs: the header comments, the
// sections, and the stats lines.
var (
	digHeaderRE = regexp.MustCompile(`^;; ->>HEADER<<- opcode: (\S+), status: (\S+), id: \d+$`)
	digFlagsRE  = regexp.MustCompile(`^;; flags:([^;]*); QUERY: (\d+), ANSWER: (\d+), AUTHORITY: (\d+), ADDITIONAL: (\d+)$`)
	digEDNSRE   = regexp.MustCompile(`^; EDNS: version: (\d+), flags:[^;]*; udp: (\d+)$`)
	digServerRE = regexp.MustCompile(`^;; SERVER: .*\((UDP|TCP)\)$`)
	digSizeRE   = regexp.MustCompile(`^;; MSG SIZE\s+rcvd: (\d+)$`)
)

// digArgs select what dig prints: comments (header, OPT), the four
// sections, and the stats (protocol, "MSG SIZE rcvd").
var digArgs = []string{"+noall", "+comments", "+question", "+answer", "+authority", "+additional", "+stats"}

// parseDig parses the output of one dig query printed with digArgs. A
// warning from dig's message parser, a second message or a missing header
// is an error.
func parseDig(b string) (*dnsReply, error) {
	r := &dnsReply{raw: b}
	var counts [4]int
	headers, sizes := 0, 0
	section := ""
	for _, line := range strings.Split(b, "\n") {
		line = strings.TrimRight(line, " \t\r")
		if line == "" {
			continue
		}
		if m := digHeaderRE.FindStringSubmatch(line); m != nil {
			headers++
			r.Opcode, r.Rcode = m[1], m[2]
			continue
		}
		if m := digFlagsRE.FindStringSubmatch(line); m != nil {
			set := map[string]bool{}
			for _, f := range strings.Fields(m[1]) {
				set[f] = true
			}
			var err error
			if r.Flags, err = canonFlags(set); err != nil {
				return nil, err
			}
			for i := range counts {
				counts[i], _ = strconv.Atoi(m[2+i])
			}
			continue
		}
		switch line {
		case ";; OPT PSEUDOSECTION:":
			section = "opt"
			continue
		case ";; QUESTION SECTION:":
			section = "question"
			continue
		case ";; ANSWER SECTION:":
			section = "answer"
			continue
		case ";; AUTHORITY SECTION:":
			section = "authority"
			continue
		case ";; ADDITIONAL SECTION:":
			section = "additional"
			continue
		}
		if m := digServerRE.FindStringSubmatch(line); m != nil {
			r.Proto = m[1]
			continue
		}
		if m := digSizeRE.FindStringSubmatch(line); m != nil {
			r.Size, _ = strconv.Atoi(m[1])
			sizes++
			continue
		}
		if strings.HasPrefix(line, ";;") && strings.Contains(strings.ToLower(line), "warning") {
			// e.g. ";; Warning: Message parser reports malformed message packet."
			return nil, fmt.Errorf("dig warns: %s", line)
		}
		if strings.HasPrefix(line, ";;") {
			section = "" // ";; Got answer:", ";; Query time: …", ";; WHEN: …"
			continue
		}
		switch section {
		case "opt":
			if m := digEDNSRE.FindStringSubmatch(line); m != nil {
				v, _ := strconv.Atoi(m[1])
				udp, _ := strconv.Atoi(m[2])
				r.EDNS = &ednsInfo{Version: v, UDP: udp}
			}
			// Other lines are EDNS options (COOKIE, NSID, …).
		case "question":
			f := strings.Fields(strings.TrimPrefix(line, ";"))
			if !strings.HasPrefix(line, ";") || len(f) != 3 {
				return nil, fmt.Errorf("question line %q: want ;name class type", line)
			}
			r.Question = append(r.Question, dnsQuestion{f[0], f[1], f[2]})
		case "answer", "authority", "additional":
			rr, err := dns.NewRR(line)
			if err != nil || rr == nil {
				return nil, fmt.Errorf("%s record %q: %v", section, line, err)
			}
			switch section {
			case "answer":
				r.Answer = append(r.Answer, rr)
			case "authority":
				r.Authority = append(r.Authority, rr)
			default:
				r.Additional = append(r.Additional, rr)
			}
		default:
			return nil, fmt.Errorf("unexpected line %q", line)
		}
	}
	if headers != 1 || sizes != 1 || r.Proto == "" {
		return nil, fmt.Errorf("want one message with a header, a SERVER and a MSG SIZE line; got %d headers, %d sizes", headers, sizes)
	}
	ar := len(r.Additional)
	if r.EDNS != nil {
		ar++
	}
	// The header counts and the sections dig printed must agree, or the
	// parse above missed something.
	if got := [4]int{len(r.Question), len(r.Answer), len(r.Authority), ar}; got != counts {
		return nil, fmt.Errorf("parsed section sizes %v, header counts %v", got, counts)
	}
	return r, nil
}

// kdigOutput is what `kdig +json` prints (RFC 8427, Knot 3.2).
type kdigOutput struct {
	MsgLength  int      `json:"msgLength"`
	QR         int      `json:"QR"`
	Opcode     int      `json:"Opcode"`
	AA         int      `json:"AA"`
	TC         int      `json:"TC"`
	RD         int      `json:"RD"`
	RA         int      `json:"RA"`
	AD         int      `json:"AD"`
	CD         int      `json:"CD"`
	RCODE      int      `json:"RCODE"`
	QD         int      `json:"QDCOUNT"`
	AN         int      `json:"ANCOUNT"`
	NS         int      `json:"NSCOUNT"`
	AR         int      `json:"ARCOUNT"`
	QName      string   `json:"QNAME"`
	QTypeName  string   `json:"QTYPEname"`
	QClassName string   `json:"QCLASSname"`
	Answer     []kdigRR `json:"answerRRs"`
	Authority  []kdigRR `json:"authorityRRs"`
	Additional []kdigRR `json:"additionalRRs"`
}

// kdigRR is one record; its presentation rdata is in the key
// "rdata<TYPEname>", e.g. "rdataSRV".
type kdigRR map[string]any

func (k kdigRR) str(key string) string { s, _ := k[key].(string); return s }
func (k kdigRR) num(key string) int    { n, _ := k[key].(float64); return int(n) }

func parseKdigJSON(b []byte) (*dnsReply, error) {
	var k kdigOutput
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&k); err != nil {
		return nil, fmt.Errorf("kdig +json: %w", err)
	}
	if k.Opcode != 0 {
		return nil, fmt.Errorf("opcode %d, want 0 (QUERY)", k.Opcode)
	}
	r := &dnsReply{Size: k.MsgLength, qnameFolded: true, raw: string(b)}
	// The extended rcode bits of the OPT record are not used by these
	// tests (no BADVERS case), so the header rcode is the rcode.
	rc, ok := dns.RcodeToString[k.RCODE]
	if !ok {
		return nil, fmt.Errorf("unknown RCODE %d", k.RCODE)
	}
	r.Rcode = rc
	var err error
	if r.Flags, err = canonFlags(map[string]bool{
		"qr": k.QR == 1, "aa": k.AA == 1, "tc": k.TC == 1, "rd": k.RD == 1,
		"ra": k.RA == 1, "ad": k.AD == 1, "cd": k.CD == 1,
	}); err != nil {
		return nil, err
	}
	if k.QD == 1 {
		r.Question = []dnsQuestion{{k.QName, k.QClassName, k.QTypeName}}
	}
	for _, sec := range []struct {
		name string
		in   []kdigRR
		out  *[]dns.RR
	}{{"answer", k.Answer, &r.Answer}, {"authority", k.Authority, &r.Authority}, {"additional", k.Additional, &r.Additional}} {
		for _, x := range sec.in {
			if x.num("TYPE") == int(dns.TypeOPT) {
				if sec.name != "additional" || r.EDNS != nil {
					return nil, fmt.Errorf("OPT record in %s section, or twice", sec.name)
				}
				// OPT: CLASS is the UDP size, TTL holds the version.
				r.EDNS = &ednsInfo{Version: x.num("TTL") >> 16 & 0xFF, UDP: x.num("CLASS")}
				continue
			}
			typ := x.str("TYPEname")
			rdata, ok := x["rdata"+typ].(string)
			if !ok {
				return nil, fmt.Errorf("%s record %v: no rdata%s", sec.name, x, typ)
			}
			s := fmt.Sprintf("%s %d %s %s %s", x.str("NAME"), x.num("TTL"), x.str("CLASSname"), typ, rdata)
			rr, err := dns.NewRR(s)
			if err != nil {
				return nil, fmt.Errorf("%s record %q: %w", sec.name, s, err)
			}
			*sec.out = append(*sec.out, rr)
		}
	}
	ar := len(r.Additional)
	if r.EDNS != nil {
		ar++
	}
	if got, want := [4]int{len(r.Question), len(r.Answer), len(r.Authority), ar}, [4]int{k.QD, k.AN, k.NS, k.AR}; got != want {
		return nil, fmt.Errorf("parsed section sizes %v, header counts %v", got, want)
	}
	return r, nil
}

// rrStrings renders records for comparison: one zone-file line each, in
// miekg/dns's canonical spacing, sorted (DNS sections are sets), with the
// SOA serial (the store version, which moves with every write) set to 0.
func rrStrings(rrs []dns.RR) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		if soa, ok := rr.(*dns.SOA); ok {
			c := *soa
			c.Serial = 0
			rr = &c
		}
		out = append(out, rr.String())
	}
	slices.Sort(out)
	return out
}

// zoneRRs parses records written in zone-file form (CoreDNS test style) into
// the same canonical strings as rrStrings.
func zoneRRs(t *testing.T, lines []string) []string {
	t.Helper()
	rrs := make([]dns.RR, 0, len(lines))
	for _, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil || rr == nil {
			t.Fatalf("bad want record %q: %v", l, err)
		}
		rrs = append(rrs, rr)
	}
	return rrStrings(rrs)
}

// digSRVOutput is dig 9.18's output (with digArgs) for an SRV query to
// spillway, captured verbatim.
const digSRVOutput = `;; Got answer:
;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 29654
;; flags: qr aa; QUERY: 1, ANSWER: 2, AUTHORITY: 0, ADDITIONAL: 3

;; OPT PSEUDOSECTION:
; EDNS: version: 0, flags:; udp: 1232
;; QUESTION SECTION:
;_grpc._tcp.mysvc.spillway.internal. IN	SRV

;; ANSWER SECTION:
_grpc._tcp.mysvc.spillway.internal. 5 IN SRV	0 65535 8080 a1.mysvc.spillway.internal.
_grpc._tcp.mysvc.spillway.internal. 5 IN SRV	0 65535 8080 a2.mysvc.spillway.internal.

;; ADDITIONAL SECTION:
a1.mysvc.spillway.internal. 5	IN	A	10.0.0.1
a2.mysvc.spillway.internal. 5	IN	AAAA	2001:db8::2

;; Query time: 4 msec
;; SERVER: 127.0.0.1#18653(127.0.0.1) (UDP)
;; WHEN: Mon Nov 30 02:06:16 UTC 2026
;; MSG SIZE  rcvd: 199
`

// TestParseDig pins the dig output parser to real output, so a change of
// dig's format shows up here rather than as a confusing DNS test failure.
func TestParseDig(t *testing.T) {
	r, err := parseDig(digSRVOutput)
	if err != nil {
		t.Fatal(err)
	}
	got := struct {
		Rcode, Flags, Proto string
		Size                int
		EDNS                ednsInfo
		Question            []dnsQuestion
		Answer, Additional  []string
	}{r.Rcode, r.Flags, r.Proto, r.Size, *r.EDNS, r.Question, rrStrings(r.Answer), rrStrings(r.Additional)}
	want := got
	want.Rcode, want.Flags, want.Proto, want.Size = "NOERROR", "qr aa", "UDP", 199
	want.EDNS = ednsInfo{Version: 0, UDP: 1232}
	want.Question = []dnsQuestion{{"_grpc._tcp.mysvc.spillway.internal.", "IN", "SRV"}}
	want.Answer = zoneRRs(t, []string{
		"_grpc._tcp.mysvc.spillway.internal. 5 IN SRV 0 65535 8080 a1.mysvc.spillway.internal.",
		"_grpc._tcp.mysvc.spillway.internal. 5 IN SRV 0 65535 8080 a2.mysvc.spillway.internal.",
	})
	want.Additional = zoneRRs(t, []string{
		"a1.mysvc.spillway.internal. 5 IN A 10.0.0.1",
		"a2.mysvc.spillway.internal. 5 IN AAAA 2001:db8::2",
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseDig (-want +got):\n%s", diff)
	}

	for name, out := range map[string]string{
		"count-mismatch": strings.Replace(digSRVOutput, "ANSWER: 2", "ANSWER: 3", 1),
		"parser-warning": strings.Replace(digSRVOutput, ";; Query time", ";; Warning: Message parser reports malformed message packet.\n;; Query time", 1),
		"two-messages":   digSRVOutput + digSRVOutput,
		"no-size":        strings.Replace(digSRVOutput, ";; MSG SIZE  rcvd: 199", "", 1),
		"bad-record":     strings.Replace(digSRVOutput, "10.0.0.1", "10.0.0.x", 1),
	} {
		if _, err := parseDig(out); err == nil {
			t.Errorf("%s: parseDig accepted it, want an error", name)
		}
	}
}

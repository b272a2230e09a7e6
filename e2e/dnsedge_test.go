package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// glueEndpoints is the size of service g of TestDNSEdges: its 24 SRV
// records fit in 1232 bytes, the records with their glue do not.
const glueEndpoints = 24

// TestDNSEdges (issue 10, point 5) drives dig and kdig against a spillway:
// glue is dropped rather than TC set when the SRV records fit over UDP;
// every reply to an EDNS query carries an OPT record, FORMERR, NOTIMP,
// BADVERS and REFUSED included, and none to a query without one; a name
// that would pass 255 octets, or that a service and an endpoint would
// share, is refused at registration (gRPC InvalidArgument, HTTP 400, the
// field named) and DNS serves what it served before.
func TestDNSEdges(t *testing.T) {
	for tool := range dnsTools {
		lookTool(t, tool)
	}
	var b strings.Builder
	b.WriteString("services:\n  - name: g\n    endpoints:\n")
	addrOf := map[string]string{}
	for i := range glueEndpoints {
		id, a := fmt.Sprintf("e%02d", i), fmt.Sprintf("10.4.0.%d", i+1)
		fmt.Fprintf(&b, "      - {id: %s, address: %s, ports: [\"grpc=8080\"], zone: zone-a}\n", id, a)
		addrOf[id+".g.spillway.internal."] = a
	}
	b.WriteString("  - name: web\n    endpoints:\n      - {id: a, address: 10.0.0.1, ports: [\"grpc=8080\"]}\n")
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--static-file", file)
	s.start()
	addr := s.flag("--dns-addr")

	const srvName = "_grpc._tcp.g.spillway.internal."
	t.Run("glue-dropped-not-tc", func(t *testing.T) {
		full := askDNS(t, "dig", addr, dnsQuery{name: srvName, qtype: "SRV", tcp: true})
		if len(full.Answer) != glueEndpoints || len(full.Additional) != glueEndpoints || full.Size <= 1232 {
			t.Fatalf("premise: over TCP %d SRV + %d glue in %d bytes, want %d + %d in more than 1232", len(full.Answer), len(full.Additional), full.Size, glueEndpoints, glueEndpoints)
		}
		for _, c := range []struct {
			tool  string
			q     dnsQuery
			limit int
		}{
			{"dig", dnsQuery{name: srvName, qtype: "SRV", bufsize: 1232}, 1232},
			{"dig", dnsQuery{name: srvName, qtype: "SRV", bufsize: 4096}, 1232}, // capped at 1232
			{"dig", dnsQuery{name: srvName, qtype: "SRV", bufsize: 1150}, 1150},
			{"kdig", dnsQuery{name: srvName, qtype: "SRV", bufsize: 1232}, 1232},
		} {
			r := askDNS(t, c.tool, addr, c.q)
			if r.Rcode != "NOERROR" || r.Flags != "qr aa" {
				t.Errorf("%s %s: rcode %s flags %q, want NOERROR \"qr aa\" (no tc)\n%s", c.tool, c.q, r.Rcode, r.Flags, r.raw)
				continue
			}
			if len(r.Answer) != glueEndpoints {
				t.Errorf("%s %s: %d SRV records, want all %d", c.tool, c.q, len(r.Answer), glueEndpoints)
			}
			if len(r.Additional) == 0 || len(r.Additional) >= glueEndpoints {
				t.Errorf("%s %s: %d glue records, want some, not all %d", c.tool, c.q, len(r.Additional), glueEndpoints)
			}
			if r.EDNS == nil {
				t.Errorf("%s %s: no OPT record", c.tool, c.q)
			}
			for _, rr := range r.Additional {
				f := strings.Fields(rr.String())
				if len(f) != 5 || f[3] != "A" || addrOf[f[0]] != f[4] {
					t.Errorf("%s %s: glue %s is not the A of an SRV target", c.tool, c.q, rr)
				}
			}
			if c.tool == "dig" {
				// As much glue as fits: one more A record (16 bytes) would not.
				if r.Size > c.limit || r.Size+16 <= c.limit {
					t.Errorf("%s %s: %d bytes with %d glue records, want at most %d and no room for another", c.tool, c.q, r.Size, len(r.Additional), c.limit)
				}
			}
		}
		// Without EDNS the 512-byte limit does not hold the SRV records:
		// TC, as before.
		q := dnsQuery{name: srvName, qtype: "SRV", bufsize: noEDNS}
		checkDNSReply(t, q, askDNS(t, "dig", addr, q), dnsCase{qname: srvName, qtype: "SRV", rcode: "NOERROR", flags: "qr aa tc"})
		if got := s.metric("spillway_dns_glue_dropped_total"); got == "" || got == "0" {
			t.Errorf("spillway_dns_glue_dropped_total = %q, want the drops counted", got)
		}
	})

	t.Run("opt-on-every-reply", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			tool   string
			q      dnsQuery
			rcode  string
			opcode string
		}{
			// No question (QDCOUNT 0): FORMERR.
			{"formerr-no-question", "dig", dnsQuery{name: "web.spillway.internal.", qtype: "A", args: []string{"+header-only"}}, "FORMERR", "QUERY"},
			// Opcode STATUS: NOTIMP, opcode echoed.
			{"notimp-status", "dig", dnsQuery{name: "web.spillway.internal.", qtype: "A", args: []string{"+opcode=2"}}, "NOTIMP", "STATUS"},
			{"notimp-notify", "dig", dnsQuery{name: "web.spillway.internal.", qtype: "A", args: []string{"+opcode=4"}}, "NOTIMP", "NOTIFY"},
			{"badvers", "dig", dnsQuery{name: "web.spillway.internal.", qtype: "A", args: []string{"+edns=1", "+noednsnegotiation"}}, "BADVERS", "QUERY"},
			{"refused", "dig", dnsQuery{name: "example.com.", qtype: "A"}, "REFUSED", "QUERY"},
			{"refused-kdig", "kdig", dnsQuery{name: "example.com.", qtype: "A"}, "REFUSED", ""},
			{"nxdomain", "dig", dnsQuery{name: "nope.spillway.internal.", qtype: "A"}, "NXDOMAIN", "QUERY"},
			{"refused-tcp", "dig", dnsQuery{name: "example.com.", qtype: "A", tcp: true}, "REFUSED", "QUERY"},
			{"formerr-no-question-tcp", "dig", dnsQuery{name: "web.spillway.internal.", qtype: "A", tcp: true, args: []string{"+header-only"}}, "FORMERR", "QUERY"},
		} {
			for _, edns := range []bool{true, false} {
				q := c.q
				if !edns {
					if c.rcode == "BADVERS" {
						continue // needs an OPT record to exist
					}
					q.bufsize = noEDNS
				}
				r := askDNS(t, c.tool, addr, q)
				if r.Rcode != c.rcode || r.Opcode != c.opcode {
					t.Errorf("%s %s %s: opcode %s rcode %s, want %s %s\n%s", c.name, c.tool, q, r.Opcode, r.Rcode, c.opcode, c.rcode, r.raw)
				}
				switch {
				case edns && r.EDNS == nil:
					t.Errorf("%s %s %s: %s reply without an OPT record\n%s", c.name, c.tool, q, r.Rcode, r.raw)
				case edns && (r.EDNS.Version != 0 || r.EDNS.UDP != 1232):
					t.Errorf("%s %s %s: OPT version %d udp %d, want 0 and 1232", c.name, c.tool, q, r.EDNS.Version, r.EDNS.UDP)
				case !edns && r.EDNS != nil:
					t.Errorf("%s %s %s: OPT record in a reply to a query without one", c.name, c.tool, q)
				}
			}
		}
	})

	t.Run("registration-errors", func(t *testing.T) {
		c := s.client()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reg := func(service, id, port string) *pb.RegisterRequest {
			return &pb.RegisterRequest{Service: service, TtlSeconds: 600, Endpoint: &pb.Endpoint{
				Id: id, Address: "10.9.0.1", Ports: []*pb.Port{{Name: port, Number: 8080}}}}
		}
		// A 180-character service in spillway.internal. leaves room for
		// ids of 54 characters and port names of 48.
		svc180 := strings.Repeat("s", 59) + "." + strings.Repeat("s", 60) + "." + strings.Repeat("s", 59)
		if _, err := c.Register(ctx, reg(svc180, strings.Repeat("i", 54), strings.Repeat("p", 48))); err != nil {
			t.Fatalf("register a name of exactly 255 octets: %v", err)
		}
		before := s.metric("spillway_registry_writes_total")
		for _, tc := range []struct {
			name  string
			req   *pb.RegisterRequest
			field string
			says  []string // the error names these
		}{
			{"srv-target-256-octets", reg(svc180, strings.Repeat("i", 55), "grpc"), "endpoint.id", []string{"255", "spillway.internal."}},
			{"srv-name-256-octets", reg(svc180, "x", strings.Repeat("p", 49)), "endpoint.ports[0].name", []string{"255", "spillway.internal."}},
			{"service-after-endpoint", reg("a.web", "x", "grpc"), "service", []string{`"a.web"`, "endpoint a", `service "web"`}},
			{"endpoint-after-service", reg("g", "x", "grpc"), "", nil}, // set up below
		} {
			if tc.field == "" {
				// Service "x.g" first, then endpoint x of g.
				if _, err := c.Register(ctx, reg("x.g", "y", "grpc")); err != nil {
					t.Fatalf("register x.g: %v", err)
				}
				tc.field, tc.says = "endpoint.id", []string{`service "x.g"`, "endpoint x", `service "g"`}
				before = s.metric("spillway_registry_writes_total")
			}
			t.Run(tc.name, func(t *testing.T) {
				_, err := c.Register(ctx, tc.req)
				st := status.Convert(err)
				if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field+": ") {
					t.Errorf("gRPC Register = %v, want InvalidArgument naming %s", err, tc.field)
				}
				for _, w := range tc.says {
					if !strings.Contains(st.Message(), w) {
						t.Errorf("gRPC error %q does not name %s", st.Message(), w)
					}
				}
				body, _ := json.Marshal(map[string]any{"service": tc.req.Service, "ttl_seconds": 600, "endpoint": map[string]any{
					"id": tc.req.Endpoint.Id, "address": "10.9.0.1", "ports": []map[string]any{{"name": tc.req.Endpoint.Ports[0].Name, "number": 8080}}}})
				resp, err := http.Post("http://"+s.httpAddr+"/v1/register", "application/json", strings.NewReader(string(body)))
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var got map[string]any
				_ = json.Unmarshal(raw, &got)
				if resp.StatusCode != http.StatusBadRequest || got["field"] != tc.field {
					t.Errorf("HTTP /v1/register = %d %s, want 400 naming %s", resp.StatusCode, raw, tc.field)
				}
				if after := s.metric("spillway_registry_writes_total"); after != before {
					t.Errorf("store writes %s -> %s: a refused registration changed the store", before, after)
				}
			})
		}
		// DNS serves what it did: a.web is still endpoint a of web, x.g
		// is the service, and g's SRV answer has no endpoint x.
		for _, c := range []dnsCase{
			{qname: "a.web.spillway.internal.", qtype: "A", rcode: "NOERROR", flags: "qr aa", answer: []string{"a.web.spillway.internal. 5 IN A 10.0.0.1"}},
			{qname: "x.g.spillway.internal.", qtype: "A", rcode: "NOERROR", flags: "qr aa", answer: []string{"x.g.spillway.internal. 5 IN A 10.9.0.1"}},
		} {
			q := dnsQuery{name: c.qname, qtype: c.qtype}
			checkDNSReply(t, q, askDNS(t, "dig", addr, q), c)
		}
		r := askDNS(t, "dig", addr, dnsQuery{name: srvName, qtype: "SRV", tcp: true})
		if len(r.Answer) != glueEndpoints {
			t.Errorf("g has %d SRV records after the refused registrations, want %d", len(r.Answer), glueEndpoints)
		}
	})
}

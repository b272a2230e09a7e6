package heartbeat

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// parseCases are ParseServers' accepted and refused forms, also the fuzz
// seeds.
var parseCases = []struct {
	in      string
	want    []string
	wantErr string // a substring of the error; "" means valid
}{
	// host:port, as it always was.
	{in: "127.0.0.1:18000", want: []string{"127.0.0.1:18000"}},
	{in: "a:18000,b:18000,c:18000", want: []string{"a:18000", "b:18000", "c:18000"}},
	{in: " a:1 , b:2 ", want: []string{"a:1", "b:2"}},
	{in: "spillway.example.com:18000", want: []string{"spillway.example.com:18000"}},
	{in: "[::1]:18000,10.0.0.1:18000", want: []string{"[::1]:18000", "10.0.0.1:18000"}},
	// A known scheme before a port number is a host named like it.
	{in: "unix:18000", want: []string{"unix:18000"}},
	{in: "dns:53,xds:18000", want: []string{"dns:53", "xds:18000"}},
	// dns: the agent resolves the name, as for host:port.
	{in: "dns:///spillway.prod:18000", want: []string{"dns:///spillway.prod:18000"}},
	{in: "dns:spillway.prod:18000", want: []string{"dns:spillway.prod:18000"}},
	{in: "DNS:///spillway.prod:18000", want: []string{"DNS:///spillway.prod:18000"}},
	{in: "dns:///10.0.0.1:18000,dns:///[::1]:18000", want: []string{"dns:///10.0.0.1:18000", "dns:///[::1]:18000"}},
	{in: "dns://10.0.0.53/spillway.prod:18000", want: []string{"dns://10.0.0.53/spillway.prod:18000"}},
	{in: "dns://10.0.0.53:5353/spillway.prod:18000", want: []string{"dns://10.0.0.53:5353/spillway.prod:18000"}},
	{in: "dns://[fd00::53]/spillway.prod:18000", want: []string{"dns://[fd00::53]/spillway.prod:18000"}},
	{in: "dns://ns.corp/spillway.prod:18000", want: []string{"dns://ns.corp/spillway.prod:18000"}},
	// Dialed as they are.
	{in: "passthrough:///spillway.prod:18000", want: []string{"passthrough:///spillway.prod:18000"}},
	{in: "passthrough:spillway.prod:18000", want: []string{"passthrough:spillway.prod:18000"}},
	{in: "unix:///run/spillway/grpc.sock", want: []string{"unix:///run/spillway/grpc.sock"}},
	{in: "unix:/run/spillway/grpc.sock", want: []string{"unix:/run/spillway/grpc.sock"}},
	{in: "unix:grpc.sock", want: []string{"unix:grpc.sock"}},
	{in: "unix:./18000", want: []string{"unix:./18000"}},
	{in: "unix-abstract:spillway", want: []string{"unix-abstract:spillway"}},
	{in: "a:1, dns:///b:2 ,unix:///s", want: []string{"a:1", "dns:///b:2", "unix:///s"}},

	{in: "", wantErr: `servers[0] "": is empty`},
	{in: "a:1,", wantErr: `servers[1] "": is empty`},
	{in: "a:1,,b:2", wantErr: `servers[1] "": is empty`},
	{in: "a", wantErr: `servers[0] "a": address a: missing port`},
	{in: "a:1,b", wantErr: `servers[1] "b"`},
	{in: ":18000", wantErr: "host is empty"},
	{in: "a:0", wantErr: `port "0"`},
	{in: "a:65536", wantErr: `port "65536"`},
	{in: "a:grpc", wantErr: `port "grpc"`},
	{in: "::1:18000", wantErr: "too many colons"},
	{in: "a b:1", wantErr: "not an IP address or a DNS name"},
	{in: "a:1,a:1", wantErr: `servers[1] "a:1": listed twice`},
	{in: "dns:///a:1,dns:///a:1", wantErr: `servers[1] "dns:///a:1": listed twice`},
	// Schemes the agent cannot use.
	{in: "a:1,xds:///x", wantErr: `servers[1] "xds:///x": scheme xds is not supported here: use dns:///host:port or host:port`},
	{in: "xds:payments", wantErr: "scheme xds is not supported here"},
	{in: "google-c2p:///spillway", wantErr: "scheme google-c2p is not supported here"},
	{in: "http://spillway:18080", wantErr: "scheme http is not supported here"},
	{in: "ipv4:10.0.0.1:18000", wantErr: "scheme ipv4 is not supported here (grpc-go has no ipv4 resolver): give each address as its own host:port entry"},
	{in: "ipv6:[::1]:18000", wantErr: "scheme ipv6 is not supported here"},
	// Malformed targets.
	{in: "dns:///spillway.prod", wantErr: `servers[0] "dns:///spillway.prod": endpoint "spillway.prod": address spillway.prod: missing port in address (a dns target needs host:port here: no default port)`},
	{in: "dns:///", wantErr: `endpoint ""`},
	{in: "dns:///a:0", wantErr: `port "0"`},
	{in: "dns:///a b:1", wantErr: "not an IP address or a DNS name"},
	{in: "dns:///a:1/b", wantErr: `endpoint "a:1/b"`},
	{in: "dns://10.0.0.53:dns/a:1", wantErr: `is not a gRPC target: invalid port ":dns" after host`},
	{in: "dns://10.0.0.53:0/a:1", wantErr: `DNS server "10.0.0.53:0": port "0" is not a number from 1 to 65535`},
	{in: "dns://[fd00::53/a:1", wantErr: "is not a gRPC target: missing ']' in host"},
	{in: "dns:///a:1?x=1", wantErr: "a dns target here has no user, query or fragment"},
	{in: "dns:///a:1#f", wantErr: "no user, query or fragment"},
	{in: "dns://u@10.0.0.53/a:1", wantErr: "no user, query or fragment"},
	{in: "passthrough://auth/a:1", wantErr: `passthrough takes no authority "auth": use passthrough:///host:port`},
	{in: "passthrough:///a", wantErr: `endpoint "a": address a: missing port`},
	{in: "unix://host/run/s.sock", wantErr: `unix takes no authority "host": use unix:///ABSOLUTE-PATH or unix:RELATIVE-PATH`},
	{in: "unix://", wantErr: "unix target has no socket path"},
	{in: "unix:///", wantErr: "unix target has no socket path"},
	{in: "unix:", wantErr: "unix target has no socket path"},
	{in: "unix-abstract:", wantErr: "unix-abstract target has no socket path"},
}

func TestParseServers(t *testing.T) {
	for _, tt := range parseCases {
		name := strings.NewReplacer(" ", "_", ",", "+", "/", "_").Replace(tt.in)
		if name == "" {
			name = "empty"
		}
		t.Run(name, func(t *testing.T) {
			got, err := ParseServers(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseServers(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseServers(%q) = %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseServers(%q) (-want +got):\n%s", tt.in, diff)
			}
			if _, err := New(Config{Servers: got, Service: service, Endpoint: testEndpoint()}); err != nil {
				t.Errorf("New(Servers: %q) = %v, want nil: New accepts what ParseServers does", got, err)
			}
		})
	}
}

// TestParseServerForms: what each accepted form becomes: a name the agent
// resolves (with which DNS server), an address of its own, or a target
// dialed as it is.
func TestParseServerForms(t *testing.T) {
	tests := []struct {
		in   string
		want server
	}{
		{"spillway.prod:18000", server{host: "spillway.prod", port: "18000"}},
		{"10.0.0.1:18000", server{host: "10.0.0.1", port: "18000", literal: "10.0.0.1:18000"}},
		{"[::1]:18000", server{host: "::1", port: "18000", literal: "[::1]:18000"}},
		{"unix:18000", server{host: "unix", port: "18000"}},
		{"dns:///spillway.prod:18000", server{host: "spillway.prod", port: "18000"}},
		{"dns:spillway.prod:18000", server{host: "spillway.prod", port: "18000"}},
		{"dns:///[::1]:18000", server{host: "::1", port: "18000", literal: "[::1]:18000"}},
		{"dns://10.0.0.53/spillway.prod:18000", server{host: "spillway.prod", port: "18000", dnsServer: "10.0.0.53:53"}},
		{"dns://10.0.0.53:5353/spillway.prod:18000", server{host: "spillway.prod", port: "18000", dnsServer: "10.0.0.53:5353"}},
		{"dns://[fd00::53]/spillway.prod:18000", server{host: "spillway.prod", port: "18000", dnsServer: "[fd00::53]:53"}},
		{"dns://ns.corp/spillway.prod:18000", server{host: "spillway.prod", port: "18000", dnsServer: "ns.corp:53"}},
		{"passthrough:///spillway.prod:18000", server{target: "passthrough:///spillway.prod:18000"}},
		{"Passthrough:///spillway.prod:18000", server{target: "passthrough:///spillway.prod:18000"}},
		{"unix:///run/grpc.sock", server{target: "unix:///run/grpc.sock"}},
		{"unix:grpc.sock", server{target: "unix:grpc.sock"}},
		{"unix-abstract:spillway", server{target: "unix-abstract:spillway"}},
	}
	for _, tt := range tests {
		got, err := parseServer(tt.in)
		if err != nil {
			t.Errorf("parseServer(%q) = %v", tt.in, err)
			continue
		}
		tt.want.entry = tt.in
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(server{})); diff != "" {
			t.Errorf("parseServer(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

// FuzzParseServers: no input panics the parser; whatever it accepts is a
// list of distinct, trimmed, non-empty entries that New accepts and that
// parse again to themselves, each a name to resolve with a valid port or a
// target the dial passes on as it is.
func FuzzParseServers(f *testing.F) {
	for _, tt := range parseCases {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseServers(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "servers[") {
				t.Fatalf("ParseServers(%q) error %q does not name the entry", s, err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatalf("ParseServers(%q) = no entries, no error", s)
		}
		for i, e := range got {
			if e == "" || e != strings.TrimSpace(e) || strings.Contains(e, ",") || slices.Contains(got[:i], e) {
				t.Fatalf("ParseServers(%q)[%d] = %q: empty, untrimmed, with a comma or listed twice", s, i, e)
			}
			srv, err := parseServer(e)
			if err != nil {
				t.Fatalf("parseServer(%q) = %v after ParseServers accepted it", e, err)
			}
			switch {
			case srv.target != "":
				if dialTarget(srv.target) != srv.target {
					t.Fatalf("entry %q: target %q would be dialed as %q", e, srv.target, dialTarget(srv.target))
				}
			case srv.host == "" || srv.port == "":
				t.Fatalf("entry %q: neither a target nor host:port: %+v", e, srv)
			case srv.literal != "" && dialTarget(srv.literal) != "passthrough:///"+srv.literal:
				t.Fatalf("entry %q: address %q would be dialed as %q", e, srv.literal, dialTarget(srv.literal))
			}
		}
		again, err := ParseServers(strings.Join(got, ","))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("ParseServers(%q) = %q, but the joined list parses to %q, %v", s, got, again, err)
		}
		if _, err := New(Config{Servers: got, Service: service, Endpoint: testEndpoint()}); err != nil {
			t.Fatalf("New(Servers: %q) = %v after ParseServers accepted them", got, err)
		}
	})
}

// TestResolveTargets: dns: entries resolve as names do (with their DNS
// server), IP addresses stand for themselves, passthrough and unix entries
// are one address each, their target, never looked up.
func TestResolveTargets(t *testing.T) {
	type query struct{ dnsServer, host string }
	var asked []query
	a, err := New(Config{Servers: []string{
		"reg.test:18000",
		"dns:///reg.test:18000", // the same addresses: listed once
		"dns://127.0.0.1:5353/other.test:18000",
		"dns:///10.0.0.9:7",
		"passthrough:///reg.test:18000",
		"unix:///run/spillway.sock",
		"unix-abstract:spillway",
	}, Service: service, Endpoint: testEndpoint()})
	if err != nil {
		t.Fatal(err)
	}
	a.lookupHost = func(_ context.Context, dnsServer, host string) ([]string, error) {
		asked = append(asked, query{dnsServer, host})
		switch {
		case host == "reg.test" && dnsServer == "":
			return []string{"10.0.0.1", "10.0.0.2"}, nil
		case host == "other.test" && dnsServer == "127.0.0.1:5353":
			return []string{"10.0.0.3", "fd00::3"}, nil
		}
		return nil, errors.New("no such host")
	}
	want := []string{
		"10.0.0.1:18000", "10.0.0.2:18000", "10.0.0.3:18000", "[fd00::3]:18000", "10.0.0.9:7",
		"passthrough:///reg.test:18000", "unix:///run/spillway.sock", "unix-abstract:spillway",
	}
	if diff := cmp.Diff(want, a.resolve(context.Background())); diff != "" {
		t.Errorf("resolve() (-want +got):\n%s", diff)
	}
	wantAsked := []query{{"", "reg.test"}, {"", "reg.test"}, {"127.0.0.1:5353", "other.test"}}
	if diff := cmp.Diff(wantAsked, asked, cmp.AllowUnexported(query{})); diff != "" {
		t.Errorf("lookups (-want +got):\n%s", diff)
	}
}

func TestDialTarget(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.1:18000":                "passthrough:///10.0.0.1:18000",
		"[fd00::1]:18000":               "passthrough:///[fd00::1]:18000",
		"passthrough:///reg.test:18000": "passthrough:///reg.test:18000",
		"unix:///run/spillway.sock":     "unix:///run/spillway.sock",
		"unix:spillway.sock":            "unix:spillway.sock",
		"unix-abstract:spillway":        "unix-abstract:spillway",
	} {
		if got := dialTarget(addr); got != want {
			t.Errorf("dialTarget(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestLookupHostDNSServer: the default lookup asks a dns://DNS-SERVER/
// entry's server, here one on 127.0.0.1 that knows registry.test.
func TestLookupHostDNSServer(t *testing.T) {
	addr, queries := startDNS(t, map[string][]string{"registry.test.": {"127.0.0.1", "127.0.0.2"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := lookupHost(ctx, addr, "registry.test")
	if err != nil {
		t.Fatalf("lookupHost(%s, registry.test) = %v", addr, err)
	}
	slices.Sort(got)
	if want := []string{"127.0.0.1", "127.0.0.2"}; !slices.Equal(got, want) {
		t.Errorf("lookupHost(%s, registry.test) = %v, want %v", addr, got, want)
	}
	if n := queries(); n == 0 {
		t.Error("the DNS server got no query")
	}

	a, err := New(Config{Servers: []string{"dns://" + addr + "/registry.test:18000"}, Service: service, Endpoint: testEndpoint()})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"127.0.0.1:18000", "127.0.0.2:18000"}, a.resolve(ctx)); diff != "" {
		t.Errorf("resolve() (-want +got):\n%s", diff)
	}
}

// startDNS serves A records for names (FQDNs) on a UDP port of 127.0.0.1
// until the test ends; other names and types get an empty answer. It
// returns the address and a count of the queries so far.
func startDNS(t *testing.T, names map[string][]string) (string, func() int) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	queries := make(chan struct{}, 1000)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		select {
		case queries <- struct{}{}:
		default:
		}
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		ips, ok := names[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		if q.Qtype == dns.TypeA {
			for _, ip := range ips {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(ip)})
			}
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
	return pc.LocalAddr().String(), func() int { return len(queries) }
}

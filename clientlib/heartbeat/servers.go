package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// ParseServers splits a comma-separated list of servers, as
// `spillwayctl agent --server a:18000,b:18000` takes it, into
// Config.Servers. Spaces around an entry are trimmed. Each entry is one of
// the forms Config.Servers documents: host:port, dns:///host:port,
// dns://DNS-SERVER/host:port, passthrough:///host:port, unix:PATH,
// unix:///ABSOLUTE-PATH or unix-abstract:NAME. Errors name the entry, e.g.
// `servers[1] "b": address b: missing port in address` or
// `servers[1] "xds:///x": scheme xds is not supported here: use
// dns:///host:port or host:port`.
func ParseServers(s string) ([]string, error) {
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if _, err := parseServer(p); err != nil {
			return nil, fmt.Errorf("servers[%d] %q: %w", i, p, err)
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("servers[%d] %q: listed twice", i, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// server is one Config.Servers entry, parsed.
type server struct {
	entry string // as given
	// target, for a passthrough, unix or unix-abstract entry, is the gRPC
	// target the agent dials as it is (its one address); "" for an entry
	// the agent resolves itself.
	target string
	// host and port of an entry the agent resolves: host:port or dns.
	host, port string
	// literal is the address of an entry whose host is an IP address; ""
	// when host is a DNS name.
	literal string
	// dnsServer is the DNS server (ip:port or name:port) of a
	// dns://DNS-SERVER/host:port entry; "" means the system's resolver.
	dnsServer string
}

// opaqueSchemes are read as a gRPC target's scheme without "//" too
// (unix:PATH, dns:host:port), unless the rest of the entry is a port
// number: "unix:18000" stays host unix, port 18000, as it always was. Any
// scheme followed by "//" is read as a target's.
var opaqueSchemes = []string{"dns", "passthrough", "unix", "unix-abstract", "ipv4", "ipv6", "xds", "google-c2p"}

// targetPrefixes start the address of an entry dialed as it is: resolved
// addresses are ip:port and never do.
var targetPrefixes = []string{"passthrough:", "unix:", "unix-abstract:"}

// parseServer validates one Config.Servers entry.
func parseServer(s string) (server, error) {
	if s == "" {
		return server{}, errors.New("is empty")
	}
	scheme, rest, ok := targetScheme(s)
	if !ok {
		host, port, err := splitHostPort(s)
		if err != nil {
			return server{}, err
		}
		srv := server{entry: s, host: host, port: port}
		if _, err := netip.ParseAddr(host); err == nil {
			srv.literal = s
		}
		return srv, nil
	}
	switch scheme {
	case "dns", "passthrough", "unix", "unix-abstract":
	case "ipv4", "ipv6":
		return server{}, fmt.Errorf("scheme %s is not supported here (grpc-go has no %s resolver): give each address as its own host:port entry", scheme, scheme)
	default:
		return server{}, fmt.Errorf("scheme %s is not supported here: use dns:///host:port or host:port", scheme)
	}
	u, err := url.Parse(scheme + ":" + rest)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return server{}, fmt.Errorf("is not a gRPC target: %w", err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return server{}, fmt.Errorf("a %s target here has no user, query or fragment", scheme)
	}
	// The endpoint as grpc-go reads it: the path, else the opaque part.
	endpoint := u.Path
	if endpoint == "" {
		endpoint = u.Opaque
	}
	switch scheme {
	case "dns":
		ep := strings.TrimPrefix(endpoint, "/")
		host, port, err := splitHostPort(ep)
		if err != nil {
			return server{}, fmt.Errorf("endpoint %q: %w (a dns target needs host:port here: no default port)", ep, err)
		}
		srv := server{entry: s, host: host, port: port}
		if _, err := netip.ParseAddr(host); err == nil {
			srv.literal = net.JoinHostPort(host, port)
		}
		if u.Host != "" {
			if srv.dnsServer, err = dnsServerAddr(u.Host); err != nil {
				return server{}, fmt.Errorf("DNS server %q: %w", u.Host, err)
			}
		}
		return srv, nil
	case "passthrough":
		if u.Host != "" {
			return server{}, fmt.Errorf("passthrough takes no authority %q: use passthrough:///host:port", u.Host)
		}
		ep := strings.TrimPrefix(endpoint, "/")
		if _, _, err := splitHostPort(ep); err != nil {
			return server{}, fmt.Errorf("endpoint %q: %w", ep, err)
		}
	default: // unix, unix-abstract
		if u.Host != "" {
			// grpc-go refuses it too: the path would be read as a host.
			return server{}, fmt.Errorf("%s takes no authority %q: use %s:///ABSOLUTE-PATH or %s:RELATIVE-PATH", scheme, u.Host, scheme, scheme)
		}
		if strings.TrimPrefix(endpoint, "/") == "" {
			return server{}, fmt.Errorf("%s target has no socket path", scheme)
		}
	}
	return server{entry: s, target: scheme + ":" + rest}, nil
}

// targetScheme returns the entry's scheme, lower-cased, and what follows
// its colon, when s is to be read as a gRPC target; ok false means s is
// host:port.
func targetScheme(s string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 {
		return "", "", false
	}
	scheme, rest = strings.ToLower(s[:i]), s[i+1:]
	for j, c := range scheme {
		letter := 'a' <= c && c <= 'z'
		if !letter && (j == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", "", false
		}
	}
	if strings.HasPrefix(rest, "//") {
		return scheme, rest, true
	}
	if !slices.Contains(opaqueSchemes, scheme) || isDigits(rest) {
		return "", "", false
	}
	return scheme, rest, true
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// splitHostPort validates a host:port address and splits it.
func splitHostPort(s string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(s)
	if err != nil {
		return "", "", err
	}
	if host == "" {
		return "", "", errors.New("host is empty")
	}
	if strings.ContainsAny(host, " /,") {
		return "", "", fmt.Errorf("host %q is not an IP address or a DNS name", host)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", "", fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return host, port, nil
}

// dnsServerAddr returns the DNS server of a dns://DNS-SERVER/ target as
// host:port, port 53 unless given (as grpc-go's dns resolver reads it).
func dnsServerAddr(authority string) (string, error) {
	if _, _, err := net.SplitHostPort(authority); err != nil {
		// No port: "8.8.8.8" or "[::1]".
		authority = net.JoinHostPort(strings.Trim(authority, "[]"), "53")
	}
	host, port, err := splitHostPort(authority)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

// lookupHost is the default name lookup: the system's resolver, or the
// entry's DNS server (as grpc-go's dns://DNS-SERVER/ targets use it: the
// Go resolver, /etc/hosts first, then that server).
func lookupHost(ctx context.Context, dnsServer, host string) ([]string, error) {
	if dnsServer == "" {
		return net.DefaultResolver.LookupHost(ctx, host)
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dnsServer)
	}}
	return r.LookupHost(ctx, host)
}

// replica is the server the agent talks to.
type replica struct {
	addr   string
	client registryv1.RegistryClient
	closer io.Closer // the connection when the agent dialed it, else nil
}

func (r *replica) close() {
	if r != nil && r.closer != nil {
		r.closer.Close()
	}
}

// dialGRPC is the default dial: a new connection to one address. A
// resolved ip:port uses the passthrough resolver (the agent resolves names
// itself); the address of a passthrough, unix or unix-abstract entry is
// its gRPC target, dialed as it is.
func dialGRPC(addr string, opts []grpc.DialOption) (registryv1.RegistryClient, io.Closer, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(dialTarget(addr), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return registryv1.NewRegistryClient(conn), conn, nil
}

// dialTarget is the gRPC target of an address resolve returned.
func dialTarget(addr string) string {
	for _, p := range targetPrefixes {
		if strings.HasPrefix(addr, p) {
			return addr
		}
	}
	return "passthrough:///" + addr
}

// resolve expands Config.Servers into addresses: an IP address stands for
// itself (ip:port), a DNS name (host:port or dns:) for every address it
// resolves to, a passthrough, unix or unix-abstract entry for its gRPC
// target. A name that fails to resolve keeps the addresses it had at its
// last resolution, so a DNS outage does not shrink the list. Owned by
// Run's goroutine.
func (a *Agent) resolve(ctx context.Context) []string {
	if a.conn != nil {
		return []string{a.connTarget()}
	}
	var out []string
	for _, s := range a.servers {
		switch {
		case s.target != "":
			out = appendNew(out, s.target)
			continue
		case s.literal != "":
			out = appendNew(out, s.literal)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
		ips, err := a.lookupHost(rctx, s.dnsServer, s.host)
		cancel()
		if err == nil && len(ips) == 0 {
			err = fmt.Errorf("no addresses")
		}
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("resolve server", "server", s.entry, "keeping", a.resolved[s.entry], "err", err)
			}
			for _, addr := range a.resolved[s.entry] {
				out = appendNew(out, addr)
			}
			continue
		}
		addrs := make([]string, 0, len(ips))
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, s.port)
			addrs = append(addrs, addr)
			a.authority[addr] = net.JoinHostPort(s.host, s.port)
		}
		a.resolved[s.entry] = addrs
		for _, addr := range addrs {
			out = appendNew(out, addr)
		}
	}
	return out
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// connTarget names Config.Conn in the status: its target when it has one.
func (a *Agent) connTarget() string {
	if t, ok := a.conn.(interface{ Target() string }); ok {
		return t.Target()
	}
	return "conn"
}

// pick makes addr the active server, dialing it unless it is the active one
// already. With Config.Conn there is one server, the connection.
func (a *Agent) pick(addr string) error {
	if a.active != nil && a.active.addr == addr {
		return nil
	}
	if a.conn != nil {
		a.active = &replica{addr: addr, client: registryv1.NewRegistryClient(a.conn)}
		a.setActive(addr, false)
		return nil
	}
	opts := a.dialOpts
	if auth, ok := a.authority[addr]; ok {
		// An address a name resolved to is dialed under that name, so
		// that TLS checks the server's certificate against the name the
		// entry gave (as a gRPC client dialing the name would), not the IP.
		if len(opts) == 0 {
			opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		}
		opts = append(slices.Clip(opts), grpc.WithAuthority(auth))
	}
	client, closer, err := a.dial(addr, opts)
	if err != nil {
		return err
	}
	moved := a.active != nil
	a.active.close()
	a.active = &replica{addr: addr, client: client, closer: closer}
	a.setActive(addr, moved)
	return nil
}

// start resolves the servers and picks one at random, so that a fleet of
// agents given the same list spreads over the replicas. With no address at
// all (every name failed to resolve) it returns false; Run then retries.
func (a *Agent) start(ctx context.Context) bool {
	a.addrs = a.resolve(ctx)
	a.setServers(a.addrs)
	if len(a.addrs) == 0 {
		return false
	}
	addr := a.addrs[rand.N(len(a.addrs))]
	if err := a.pick(addr); err != nil {
		a.log.Warn("dial server", "server", addr, "err", err)
		return false
	}
	return true
}

// next returns the address after cur in the current list: the replicas are
// tried in turn, starting over at the top. An address that left the list
// (a DNS change) restarts at the top.
func next(addrs []string, cur string) string {
	i := slices.Index(addrs, cur)
	return addrs[(i+1)%len(addrs)]
}

package heartbeat

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// ParseServers splits a comma-separated list of server addresses, as
// `spillwayctl agent --server a:18000,b:18000` takes it, into
// Config.Servers. Spaces around an entry are trimmed. Each entry is
// host:port, where host is an IP address or a DNS name (which may resolve to
// several replicas); errors name the entry, e.g. `servers[1] "b": missing
// port in address`.
func ParseServers(s string) ([]string, error) {
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if err := checkServer(p); err != nil {
			return nil, fmt.Errorf("servers[%d] %q: %w", i, p, err)
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("servers[%d] %q: listed twice", i, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// checkServer validates one host:port server address.
func checkServer(s string) error {
	if s == "" {
		return fmt.Errorf("is empty")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("host is empty")
	}
	if strings.ContainsAny(host, " /,") {
		return fmt.Errorf("host %q is not an IP address or a DNS name", host)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
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

// dialGRPC is the default dial: a new connection to one resolved address.
// The target uses the passthrough resolver: the agent resolves names itself.
func dialGRPC(addr string, opts []grpc.DialOption) (registryv1.RegistryClient, io.Closer, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return registryv1.NewRegistryClient(conn), conn, nil
}

// resolve expands Config.Servers into addresses (ip:port): an IP address
// stands for itself, a DNS name for every address it resolves to. A name
// that fails to resolve keeps the addresses it had at its last resolution,
// so a DNS outage does not shrink the list. Owned by Run's goroutine.
func (a *Agent) resolve(ctx context.Context) []string {
	if a.conn != nil {
		return []string{a.connTarget()}
	}
	var out []string
	for _, s := range a.servers {
		host, port, _ := net.SplitHostPort(s) // checked in New
		if _, err := netip.ParseAddr(host); err == nil {
			out = appendNew(out, s)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, a.attemptTimeout())
		ips, err := a.lookupHost(rctx, host)
		cancel()
		if err == nil && len(ips) == 0 {
			err = fmt.Errorf("no addresses")
		}
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("resolve server", "server", s, "keeping", a.resolved[s], "err", err)
			}
			for _, addr := range a.resolved[s] {
				out = appendNew(out, addr)
			}
			continue
		}
		addrs := make([]string, 0, len(ips))
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip, port))
		}
		a.resolved[s] = addrs
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
	client, closer, err := a.dial(addr, a.dialOpts)
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

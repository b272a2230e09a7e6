package dnsresolver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"

	"github.com/spillway/spillway/clientlib/internal/dnsquery"
	"github.com/spillway/spillway/registry/names"
)

// Scheme is the URI scheme of the targets the builder resolves.
const Scheme = "spillway-dns"

// Defaults of Config.
const (
	DefaultDomain   = "spillway.internal."
	DefaultPortName = "grpc"
	DefaultProto    = "tcp"
	DefaultMinTTL   = time.Second
	DefaultMaxTTL   = 5 * time.Minute
	DefaultTimeout  = 2 * time.Second
	maxBackoff      = 10 * time.Second
)

// Config configures a Builder.
type Config struct {
	// Server is the DNS server asked, host:port (spillway's is
	// 127.0.0.1:8053); "" asks the name servers of /etc/resolv.conf.
	Server string
	// Domain is the domain of the service names; "" means
	// spillway.internal.
	Domain string
	// PortName and Proto name the SRV record: _<PortName>._<Proto>.<service>.
	// "" means "grpc" and "tcp".
	PortName, Proto string
	// MinTTL is the shortest time between two lookups of one name; zero
	// means 1 s.
	MinTTL time.Duration
	// MaxTTL is the longest time an answer is kept before it is looked up
	// again; zero means 5 min.
	MaxTTL time.Duration
	// Timeout bounds each DNS query; zero means 2 s.
	Timeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	c.Domain = dns.Fqdn(strings.ToLower(c.Domain))
	if err := names.ValidateService("Domain", strings.TrimSuffix(c.Domain, ".")); err != nil {
		return fmt.Errorf("dnsresolver config: %w", err)
	}
	c.PortName = cmp.Or(c.PortName, DefaultPortName)
	c.Proto = cmp.Or(c.Proto, DefaultProto)
	for _, f := range []struct{ name, v string }{{"PortName", c.PortName}, {"Proto", c.Proto}} {
		if err := names.ValidateLabel(f.name, f.v); err != nil {
			return fmt.Errorf("dnsresolver config: %w", err)
		}
	}
	c.MinTTL = cmp.Or(c.MinTTL, DefaultMinTTL)
	c.MaxTTL = cmp.Or(c.MaxTTL, DefaultMaxTTL)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	switch {
	case c.MinTTL < 0:
		return fmt.Errorf("dnsresolver config: MinTTL %v: must not be negative", c.MinTTL)
	case c.MaxTTL < c.MinTTL:
		return fmt.Errorf("dnsresolver config: MaxTTL %v: must be at least MinTTL %v", c.MaxTTL, c.MinTTL)
	case c.Timeout < 0:
		return fmt.Errorf("dnsresolver config: Timeout %v: must not be negative", c.Timeout)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Builder builds resolvers for spillway-dns:///<service> targets.
type Builder struct {
	// read-only after NewBuilder
	cfg    Config
	client *dnsquery.Client
}

var _ resolver.Builder = (*Builder)(nil)

// NewBuilder validates cfg and returns a Builder. With Config.Server ""
// it reads /etc/resolv.conf once, here.
func NewBuilder(cfg Config) (*Builder, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	client, err := dnsquery.New(cfg.Server, cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("dnsresolver config: Server: %w", err)
	}
	return &Builder{cfg: cfg, client: client}, nil
}

// Scheme returns "spillway-dns".
func (b *Builder) Scheme() string { return Scheme }

// Name returns the SRV name looked up for service, e.g.
// "_grpc._tcp.payments.spillway.internal.".
func (b *Builder) Name(service string) string {
	return "_" + b.cfg.PortName + "._" + b.cfg.Proto + "." + strings.ToLower(service) + "." + b.cfg.Domain
}

// Build starts resolving the service named by the target's path.
func (b *Builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	service := strings.TrimSuffix(strings.TrimPrefix(target.Endpoint(), "/"), ".")
	if err := names.ValidateService("target", strings.ToLower(service)); err != nil {
		return nil, fmt.Errorf("dnsresolver: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &dnsResolver{
		cfg: b.cfg, client: b.client, cc: cc, name: b.Name(service),
		log:    b.cfg.Logger.With("name", b.Name(service)),
		cancel: cancel, now: make(chan struct{}, 1),
	}
	r.wg.Go(func() { r.run(ctx) })
	return r, nil
}

// dnsResolver resolves one name.
type dnsResolver struct {
	// read-only after Build
	cfg    Config
	client *dnsquery.Client
	cc     resolver.ClientConn
	name   string
	log    *slog.Logger
	cancel context.CancelFunc
	now    chan struct{} // ResolveNow's 1-slot trigger
	wg     sync.WaitGroup
}

// ResolveNow asks for a lookup soon; calls coalesce.
func (r *dnsResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Close stops the resolver and waits for its goroutine.
func (r *dnsResolver) Close() {
	r.cancel()
	r.wg.Wait()
}

// run owns every lookup: one at start, then at TTL expiry, on ResolveNow
// (no sooner than MinTTL after the last) and, after a failure, on backoff.
func (r *dnsResolver) run(ctx context.Context) {
	var (
		good    bool // an answer was given to the channel
		backoff time.Duration
		timer   = time.NewTimer(time.Hour)
		last    time.Time
	)
	defer timer.Stop()
	for {
		last = time.Now()
		eps, ttl, err := r.lookup(ctx)
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		if err != nil {
			backoff = min(max(2*backoff, r.cfg.MinTTL), maxBackoff)
			wait = backoff/2 + rand.N(backoff/2+1)
			if good {
				r.log.Warn("srv lookup failed; keeping the last addresses", "err", err, "retry", wait)
			} else {
				r.log.Warn("srv lookup failed", "err", err, "retry", wait)
				r.cc.ReportError(err)
			}
		} else {
			backoff = 0
			wait = min(max(ttl, r.cfg.MinTTL), r.cfg.MaxTTL)
			if uerr := r.cc.UpdateState(resolver.State{Endpoints: eps}); uerr != nil {
				r.log.Debug("channel rejected the addresses", "err", uerr)
			}
			good = true
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-r.now:
			// Go 1.23 timers: Stop leaves no stale tick to drain.
			timer.Stop()
			if d := r.cfg.MinTTL - time.Since(last); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
		}
	}
}

// errEmpty is returned for an answer without usable records.
var errEmpty = errors.New("no endpoint addresses")

// lookup reads the SRV records of r.name and the addresses of their
// targets. ttl is the smallest TTL of the records used.
func (r *dnsResolver) lookup(ctx context.Context) (eps []resolver.Endpoint, ttl time.Duration, err error) {
	in, err := r.client.Query(ctx, r.name, dns.TypeSRV)
	if err != nil {
		return nil, 0, err
	}
	minTTL := ^uint32(0)
	glue := map[string][]netip.Addr{}
	for _, rr := range in.Extra {
		var a netip.Addr
		switch rr := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(rr.A.To4())
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(rr.AAAA)
		default:
			continue
		}
		if a.IsValid() {
			name := strings.ToLower(rr.Header().Name)
			glue[name] = append(glue[name], a)
			minTTL = min(minTTL, rr.Header().Ttl)
		}
	}
	for _, rr := range in.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok || srv.Port == 0 || srv.Target == "." {
			continue
		}
		minTTL = min(minTTL, srv.Hdr.Ttl)
		target := strings.ToLower(srv.Target)
		addrs, ok := glue[target]
		if !ok {
			var t uint32
			addrs, t = r.addresses(ctx, target)
			glue[target] = addrs
			if len(addrs) > 0 {
				minTTL = min(minTTL, t)
			}
		}
		if len(addrs) == 0 {
			continue
		}
		var ep resolver.Endpoint
		for _, a := range addrs {
			ep.Addresses = append(ep.Addresses, resolver.Address{Addr: netip.AddrPortFrom(a, srv.Port).String()})
		}
		eps = append(eps, weight.Set(ep, weight.EndpointInfo{Weight: uint32(srv.Weight)}))
	}
	if len(eps) == 0 {
		return nil, 0, fmt.Errorf("%s: %w", strings.TrimSuffix(r.name, "."), errEmpty)
	}
	slices.SortFunc(eps, func(a, b resolver.Endpoint) int { return strings.Compare(a.Addresses[0].Addr, b.Addresses[0].Addr) })
	eps = slices.CompactFunc(eps, func(a, b resolver.Endpoint) bool { return a.Addresses[0].Addr == b.Addresses[0].Addr })
	return eps, time.Duration(minTTL) * time.Second, nil
}

// addresses looks up the A and AAAA records of a target without glue.
func (r *dnsResolver) addresses(ctx context.Context, target string) ([]netip.Addr, uint32) {
	var out []netip.Addr
	ttl := ^uint32(0)
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		in, err := r.client.Query(ctx, target, qt)
		if err != nil {
			if !errors.Is(err, dnsquery.ErrNoRecords) {
				r.log.Debug("address lookup failed", "target", target, "err", err)
			}
			continue
		}
		for _, rr := range in.Answer {
			var a netip.Addr
			switch rr := rr.(type) {
			case *dns.A:
				a, _ = netip.AddrFromSlice(rr.A.To4())
			case *dns.AAAA:
				a, _ = netip.AddrFromSlice(rr.AAAA)
			}
			if a.IsValid() {
				out = append(out, a)
				ttl = min(ttl, rr.Header().Ttl)
			}
		}
	}
	return out, ttl
}

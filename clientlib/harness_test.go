package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/resolver"
	"github.com/spillway/spillway/xds"
	"github.com/spillway/spillway/xds/xdstest"
)

// The tests run a real spillway DNS server and a real xDS server on one
// registry store, and real gRPC backends in three zones registered as
// service "echo".
const testService = "echo"

var testZones = []string{"zone-a", "zone-b", "zone-c"}

// env is one spillway (DNS + xDS on a shared store) and its backends.
type env struct {
	t        *testing.T
	store    *registry.Store
	dnsAddr  string
	xdsAddr  string
	xds      *xds.Server
	backends []*backend
	stopDNS  func()
}

// backend is a gRPC health server on two ports, one registered as port
// "grpc" (which DNS serves) and one as port "xds" (which the xDS server is
// configured to give its clients), so that the backend can tell which
// channel each RPC came through.
type backend struct {
	addr, xdsAddr netip.AddrPort
	zone          string
	calls         atomic.Int64 // all RPCs
	viaXDS        atomic.Int64 // RPCs on the xds port
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, store: registry.NewStore()}
	e.store.MarkSynced()
	e.dnsAddr, e.stopDNS = startDNS(t, e.store)
	e.xdsAddr, e.xds = startXDS(t, e.store)
	for _, z := range testZones {
		e.backends = append(e.backends, startBackend(t, z))
	}
	e.xdsPorts(func(b *backend) uint16 { return b.xdsAddr.Port() })
	return e
}

// xdsPorts registers the backends with port "grpc" (DNS) at their DNS
// listener and port "xds" where port says, all with weight 100.
func (e *env) xdsPorts(port func(*backend) uint16) {
	e.t.Helper()
	e.register(port, func(int) uint32 { return 100 })
}

// register registers the backends with port "grpc" (DNS) at their DNS
// listener, port "xds" where port says, and the weights weight gives.
func (e *env) register(port func(*backend) uint16, weight func(i int) uint32) {
	e.t.Helper()
	var ops []registry.Op
	for i, b := range e.backends {
		ops = append(ops, registry.Upsert(testService, &registry.Endpoint{
			ID: fmt.Sprintf("b%d", i), Address: b.addr.Addr(),
			Ports: []registry.Port{
				{Name: "grpc", Number: b.addr.Port(), Protocol: registry.TCP},
				{Name: "xds", Number: port(b), Protocol: registry.TCP},
			},
			Locality: registry.Locality{Region: "r1", Zone: b.zone},
			Health:   registry.Healthy, Weight: weight(i), Source: registry.SourceStatic,
		}))
	}
	e.apply(ops...)
}

func (e *env) apply(ops ...registry.Op) {
	e.t.Helper()
	if _, err := e.store.Apply(ops...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) setFlag(v string) { e.apply(registry.SetFlag(registry.FlagXDS, v)) }

// rollout writes a rollout file giving everyone percent.
func (e *env) rollout(percent float64) string {
	e.t.Helper()
	p := filepath.Join(e.t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(p, fmt.Appendf(nil, "rules:\n  - name: all\n    match: {}\n    percent: %v\n", percent), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// dial dials the test service as caller with short timers; extra options
// come last.
func (e *env) dial(caller string, extra ...clientlib.Option) *clientlib.Conn {
	e.t.Helper()
	opts := append([]clientlib.Option{
		clientlib.WithService(caller),
		clientlib.WithZone("zone-a"), clientlib.WithRegion("r1"),
		clientlib.WithDNSServer(e.dnsAddr),
		clientlib.WithControlPlane(e.xdsAddr),
		clientlib.WithRolloutURL(""),
		clientlib.WithPerConnBootstrap(), // several identities in one test process
		clientlib.WithPanicPollInterval(pollInterval),
		clientlib.WithXDSTimeout(5 * time.Second),
	}, extra...)
	c, err := clientlib.Dial(context.Background(), testService, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// pollInterval is the panic poll interval of the tests.
const pollInterval = 200 * time.Millisecond

// startDNS serves spillway's DNS for spillway.internal. on one loopback
// port, UDP and TCP; stop shuts it down (idempotent).
func startDNS(t *testing.T, store *registry.Store) (addr string, stop func()) {
	t.Helper()
	srv, err := resolver.New(resolver.Config{Store: store, Domain: "spillway.internal", TTL: resolver.TTLs{SRV: time.Second, TXT: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		pc net.PacketConn
		l  net.Listener
	)
	for range 20 {
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ctx, pc, l) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return pc.LocalAddr().String(), stop
}

// startXDS runs the xDS server on loopback, giving clients the "xds"
// port of each endpoint.
func startXDS(t *testing.T, store *registry.Store) (string, *xds.Server) {
	t.Helper()
	s := xdstest.Start(t, xds.Config{Store: store, PortName: "xds"}) // Debounce 10 ms, LRSInterval 1 s
	return s.Addr, s.XDS
}

func startBackend(t *testing.T, zone string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{addr: netip.MustParseAddrPort(lis.Addr().String()), xdsAddr: netip.MustParseAddrPort(xlis.Addr().String()), zone: zone}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		if p, ok := peer.FromContext(ctx); ok && p.LocalAddr.String() == b.xdsAddr.String() {
			b.viaXDS.Add(1)
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(lis) })
	wg.Go(func() { srv.Serve(xlis) })
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})
	return b
}

// load makes continuous RPCs on conns from a few goroutines per Conn
// until stopped, counting successes and failures.
type load struct {
	ok, failed atomic.Int64
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	mu      sync.Mutex
	lastErr error
}

func startLoad(conns []*clientlib.Conn, perConn int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for _, c := range conns {
		hc := healthpb.NewHealthClient(c)
		for range perConn {
			l.wg.Go(func() {
				for ctx.Err() == nil {
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{})
					rcancel()
					switch {
					case err == nil:
						l.ok.Add(1)
					case ctx.Err() != nil && errors.Is(rctx.Err(), context.Canceled):
						// stopped mid-RPC: not a failure of the Conn
					default:
						l.failed.Add(1)
						l.mu.Lock()
						l.lastErr = err
						l.mu.Unlock()
					}
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
	}
	return l
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *load) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// waitFor polls cond every 10 ms until it holds or d passes; it returns
// how long that took and whether it held.
func waitFor(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start), cond()
}

func onChannel(c *clientlib.Conn, ch clientlib.Channel) func() bool {
	return func() bool { return c.Status().Channel == ch }
}

// served returns the RPCs the backends served in all and through the xds
// port.
func (e *env) served() (all, viaXDS int64) {
	for _, b := range e.backends {
		all += b.calls.Load()
		viaXDS += b.viaXDS.Load()
	}
	return all, viaXDS
}

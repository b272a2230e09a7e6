package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/migration"
)

// The migration tests run 20 client services, each with its own
// clientlib.Conn (its own identity: WithService and a zone), making
// continuous RPCs to service "ledger", whose backends sit in three zones.
// Each backend listens on two ports: port "grpc", which DNS serves, and
// port "xds", which the server is told (--xds-port-name xds) to give xDS
// clients, so the backends see which channel every RPC came through, and
// from which caller.
const (
	mcService = "ledger"
	mcClients = 20
	mcPoll    = 500 * time.Millisecond // the clients' panic poll interval
	mcCaller  = "x-caller"
)

// mcHalf is the callers a 50% rollout makes eligible: those whose
// migration.Bucket is under 5000. Written out so that a change of the
// hash (which would move services between DNS and xDS on upgrade) fails.
var mcHalf = []string{"client-02", "client-03", "client-04", "client-07", "client-08", "client-09", "client-10", "client-16", "client-17", "client-18", "client-19"}

// mcBackend counts RPCs by caller and by the port they came in on.
type mcBackend struct {
	zone             string
	dnsPort, xdsPort int
	mu               sync.Mutex
	byCaller         map[string][2]int64 // caller -> {via dns, via xds}
}

func startMCBackend(t *testing.T, zone string) *mcBackend {
	t.Helper()
	b := &mcBackend{zone: zone, byCaller: map[string][2]int64{}}
	var lis [2]net.Listener
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i] = l
	}
	b.dnsPort, b.xdsPort = lis[0].Addr().(*net.TCPAddr).Port, lis[1].Addr().(*net.TCPAddr).Port
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		caller := "unknown"
		if v := metadata.ValueFromIncomingContext(ctx, mcCaller); len(v) == 1 {
			caller = v[0]
		}
		via := 0
		if p, ok := peer.FromContext(ctx); ok && p.LocalAddr.(*net.TCPAddr).Port == b.xdsPort {
			via = 1
		}
		b.mu.Lock()
		c := b.byCaller[caller]
		c[via]++
		b.byCaller[caller] = c
		b.mu.Unlock()
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	var wg sync.WaitGroup
	for _, l := range lis {
		wg.Go(func() { srv.Serve(l) })
	}
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})
	return b
}

// mcCounts sums what the backends counted: caller -> {via dns, via xds}.
func mcCounts(bs []*mcBackend) map[string][2]int64 {
	out := map[string][2]int64{}
	for _, b := range bs {
		b.mu.Lock()
		for k, v := range b.byCaller {
			c := out[k]
			c[0] += v[0]
			c[1] += v[1]
			out[k] = c
		}
		b.mu.Unlock()
	}
	return out
}

// mcFixture is a spillway server with the ledger backends in its static
// file and the admin token set.
type mcFixture struct {
	s        *server
	backends []*mcBackend
	dir      string
}

func newMCFixture(t *testing.T, extra ...string) *mcFixture {
	t.Helper()
	return newMCFixtureTLS(t, false, extra...)
}

// newMCFixtureTLS is newMCFixture whose server, with withTLS, speaks only
// mTLS on its gRPC and HTTP ports (newTLSServer): the clients' xDS
// channels, rollout reads and spillwayctl then use client certificates.
func newMCFixtureTLS(t *testing.T, withTLS bool, extra ...string) *mcFixture {
	t.Helper()
	f := &mcFixture{dir: t.TempDir()}
	var static strings.Builder
	fmt.Fprintf(&static, "services:\n  - name: %s\n    endpoints:\n", mcService)
	for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
		b := startMCBackend(t, z)
		f.backends = append(f.backends, b)
		fmt.Fprintf(&static, "      - address: 127.0.0.1\n        ports: [\"grpc=%d\", \"xds=%d\"]\n        zone: %s\n", b.dnsPort, b.xdsPort, z)
	}
	staticFile := filepath.Join(f.dir, "services.yaml")
	tokenFile := filepath.Join(f.dir, "admin-token")
	for p, body := range map[string]string{staticFile: static.String(), tokenFile: e2eToken + "\n"} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	newS := newServer
	if withTLS {
		newS = newTLSServer
	}
	f.s = newS(t, append([]string{"--static-file", staticFile, "--admin-token-file", tokenFile,
		"--xds-port-name", "xds", "--xds-debounce", "20ms", "--zone-aware=false"}, extra...)...)
	f.s.start()
	return f
}

// panic runs `spillwayctl panic on|off` and returns when it started and
// when the server was first seen answering the new TXT _xds value, by a
// tight loop of queries that runs while spillwayctl does: the flag was
// published between the two, close to the second.
func (f *mcFixture) panic(t *testing.T, onOff string) (started, published time.Time) {
	t.Helper()
	started = time.Now()
	want := map[string]string{"on": "xds=off", "off": "xds=on"}[onOff]
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan time.Time, 1)
	go func() {
		c := &dns.Client{Timeout: 200 * time.Millisecond}
		m := new(dns.Msg)
		m.SetQuestion("_xds.spillway.internal.", dns.TypeTXT)
		for ctx.Err() == nil {
			if r, _, err := c.Exchange(m, f.s.flag("--dns-addr")); err == nil && len(r.Answer) == 1 {
				if txt, ok := r.Answer[0].(*dns.TXT); ok && strings.Join(txt.Txt, "") == want {
					seen <- time.Now()
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer cancel()
	f.ctl(t, "panic", onOff)
	select {
	case published = <-seen:
		return started, published
	case <-time.After(5 * time.Second):
		t.Fatalf("panic %s: TXT _xds never said %s", onOff, want)
		return
	}
}

// ctl runs spillwayctl with the admin token and fails the test on error.
func (f *mcFixture) ctl(t *testing.T, args ...string) {
	t.Helper()
	if r := f.s.ctlEnv([]string{"SPILLWAY_ADMIN_TOKEN=" + e2eToken}, args...); r.code != 0 {
		t.Fatalf("spillwayctl %v: exit %d: %s", args, r.code, r.stderr)
	}
}

// setRollout makes the rollout config give every caller percent.
func (f *mcFixture) setRollout(t *testing.T, percent int) {
	t.Helper()
	p := filepath.Join(f.dir, fmt.Sprintf("rollout-%d.yaml", percent))
	if err := os.WriteFile(p, fmt.Appendf(nil, "rules:\n  - name: everyone\n    match: {}\n    percent: %d\n", percent), 0o600); err != nil {
		t.Fatal(err)
	}
	f.ctl(t, "rollout", "set", p)
}

// dial builds the 20 clients, each its own service in one of the three
// zones, reading the rollout config from the server.
func (f *mcFixture) dial(t *testing.T) map[string]*clientlib.Conn {
	t.Helper()
	conns := map[string]*clientlib.Conn{}
	zones := []string{"zone-a", "zone-b", "zone-c"}
	for i := range mcClients {
		name := fmt.Sprintf("client-%02d", i)
		var secure []clientlib.Option
		if f.s.tls != nil {
			secure = append(secure, clientlib.WithTLS(f.s.tls.clientlib()))
		}
		c, err := clientlib.Dial(context.Background(), mcService, append(secure,
			clientlib.WithService(name),
			clientlib.WithZone(zones[i%3]), clientlib.WithRegion("r1"),
			clientlib.WithMetadata(map[string]string{"tier": "3"}),
			clientlib.WithControlPlane(f.s.grpcAddr),
			clientlib.WithDNSServer(f.s.flag("--dns-addr")),
			clientlib.WithRolloutURL(f.s.url("/v1/rollout")),
			clientlib.WithPanicPollInterval(mcPoll),
			clientlib.WithXDSTimeout(5*time.Second),
			clientlib.WithPerConnBootstrap())...) // 20 identities in one test process
		if err != nil {
			t.Fatalf("Dial as %s: %v", name, err)
		}
		t.Cleanup(func() { c.Close() })
		conns[name] = c
	}
	return conns
}

// mcLoad makes continuous RPCs from every Conn, one at a time each.
type mcLoad struct {
	ok, failed atomic.Int64
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	mu         sync.Mutex
	errs       []string
}

func startMCLoad(conns map[string]*clientlib.Conn) *mcLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &mcLoad{cancel: cancel}
	for name, c := range conns {
		hc := healthpb.NewHealthClient(c)
		md := metadata.Pairs(mcCaller, name)
		l.wg.Go(func() {
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), 10*time.Second)
				_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{})
				rcancel()
				switch {
				case err == nil:
					l.ok.Add(1)
				case ctx.Err() != nil:
					// the load was stopped mid-RPC
				default:
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.errs) < 5 {
						l.errs = append(l.errs, name+": "+err.Error())
					}
					l.mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	return l
}

// stop stops the load and fails the test if any RPC failed.
func (l *mcLoad) stop(t *testing.T, what string) {
	t.Helper()
	l.cancel()
	l.wg.Wait()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%s: %d of %d RPCs failed, want 0; first errors: %v", what, n, n+l.ok.Load(), l.errs)
	}
	t.Logf("%s: %d RPCs, %d failed", what, l.ok.Load(), l.failed.Load())
}

// mcWait waits until every Conn satisfies cond, for at most d.
func mcWait(t *testing.T, conns map[string]*clientlib.Conn, d time.Duration, what string, cond func(name string, s clientlib.Status) bool) {
	t.Helper()
	start := time.Now()
	for {
		var late []string
		for name, c := range conns {
			if s := c.Status(); !cond(name, s) {
				late = append(late, fmt.Sprintf("%s (%v, %s: %s)", name, s.Channel, s.Reason, s.Detail))
			}
		}
		if len(late) == 0 {
			return
		}
		if time.Since(start) > d {
			slices.Sort(late)
			t.Fatalf("%s: after %v, not yet: %v", what, d, late)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mcChannels checks, from the backends' side, which channel each caller's
// RPCs used during a window of steady load: want[name] is the channel.
func mcChannels(t *testing.T, f *mcFixture, l *mcLoad, what string, want func(name string) clientlib.Channel) {
	t.Helper()
	before := mcCounts(f.backends)
	ok := l.ok.Load()
	for deadline := time.Now().Add(10 * time.Second); l.ok.Load() < ok+20*mcClients; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: RPCs stalled", what)
		}
	}
	after := mcCounts(f.backends)
	for i := range mcClients {
		name := fmt.Sprintf("client-%02d", i)
		dnsN, xdsN := after[name][0]-before[name][0], after[name][1]-before[name][1]
		// Each client sends one RPC at a time, so at most one begun
		// before the switch can arrive through the old channel in the
		// window (it would have arrived late on a busy machine).
		if ch := want(name); ch == clientlib.DNS && (xdsN > 1 || dnsN == 0) || ch == clientlib.XDS && (dnsN > 1 || xdsN == 0) {
			t.Errorf("%s: %s sent %d RPCs through dns and %d through xds, want all through %v but for at most one begun before the switch", what, name, dnsN, xdsN, ch)
		}
	}
}

// TestMigrationClients is acceptance 1: 20 client services on DNS at 0%;
// at 50% exactly the hashed half on xDS; `spillwayctl panic on` moves every
// client to DNS within two poll periods and `panic off` moves them back,
// with zero failed RPCs throughout.
func TestMigrationClients(t *testing.T) {
	f := newMCFixture(t)
	var names []string
	for i := range mcClients {
		names = append(names, fmt.Sprintf("client-%02d", i))
	}
	var half []string
	for _, n := range names {
		if migration.Bucket(n) < 5000 {
			half = append(half, n)
		}
	}
	if diff := cmp.Diff(mcHalf, half); diff != "" {
		t.Fatalf("migration.Bucket moved services (-pinned +now):\n%s", diff)
	}
	isHalf := func(n string) bool { return slices.Contains(half, n) }

	// 0%: everyone on DNS, no xDS channel at all.
	f.setRollout(t, 0)
	conns := f.dial(t)
	l := startMCLoad(conns)
	mcWait(t, conns, 5*time.Second, "0%", func(_ string, s clientlib.Status) bool {
		return s.Channel == clientlib.DNS && s.Reason == clientlib.ReasonIneligible && s.Eligibility.Version > 0
	})
	mcChannels(t, f, l, "0%", func(string) clientlib.Channel { return clientlib.DNS })
	l.stop(t, "0%")
	for _, c := range conns {
		c.Close()
	}

	// 50%: exactly the hashed half moves to xDS, for clients dialled
	// under it (TestMigrationRolloutLive moves running ones).
	f.setRollout(t, 50)
	conns = f.dial(t)
	l = startMCLoad(conns)
	mcWait(t, conns, 15*time.Second, "50%", func(n string, s clientlib.Status) bool {
		if isHalf(n) {
			return s.Eligibility.Eligible && s.Channel == clientlib.XDS
		}
		return !s.Eligibility.Eligible && s.Channel == clientlib.DNS && s.Reason == clientlib.ReasonIneligible
	})
	half50 := func(n string) clientlib.Channel {
		if isHalf(n) {
			return clientlib.XDS
		}
		return clientlib.DNS
	}
	mcChannels(t, f, l, "50%", half50)

	// Panic on, then off, twice: every client on DNS within two polls,
	// then the half back on xDS. "Within two polls" is counted with
	// Status.Polls and Status.LastSwitchPoll from the moment the server
	// answers the new flag, not timed: a busy machine makes polls late,
	// not fewer.
	for round := range 2 {
		for _, step := range []struct {
			onOff string
			want  func(string) clientlib.Channel
		}{
			{"on", func(string) clientlib.Channel { return clientlib.DNS }},
			{"off", half50},
		} {
			what := fmt.Sprintf("round %d: panic %s", round, step.onOff)
			started, at := f.panic(t, step.onOff)
			set := map[string]uint64{}
			for _, n := range half {
				set[n] = conns[n].Status().Polls
			}
			mcWait(t, conns, 15*time.Second, what, func(n string, s clientlib.Status) bool {
				return s.Channel == step.want(n)
			})
			// Each switching client's Status says when it switched.
			var slowest time.Duration
			var slowestPolls uint64
			for _, n := range half {
				s := conns[n].Status()
				slowest = max(slowest, s.LastSwitch.Sub(at))
				if s.LastSwitch.Before(started) {
					t.Errorf("%s: %s did not switch (last switch %v before spillwayctl ran)", what, n, s.LastSwitch)
					continue
				}
				if s.LastSwitchPoll > set[n] {
					slowestPolls = max(slowestPolls, s.LastSwitchPoll-set[n])
				}
				if s.LastSwitchPoll > set[n]+2 {
					t.Errorf("%s: %s switched at its poll %d, %d polls after the flag was served (at its poll %d), want at most 2", what, n, s.LastSwitchPoll, s.LastSwitchPoll-set[n], set[n])
				}
			}
			t.Logf("%s: the last of %d clients switched %v after the flag changed, at most %d polls after", what, len(half), slowest.Round(time.Millisecond), slowestPolls)
			mcChannels(t, f, l, what, step.want)
		}
	}
	l.stop(t, "50% with panic on and off")
}

// TestMigrationRolloutLive is issue 10 point 7: rollout changes apply to
// running clients. 20 callers at 0%; the rollout set to 50% moves the
// hashed half to xDS within two polls each, without a redial; back to 0%
// every one returns to DNS within two polls; at 50% again, panic on sends
// every one to DNS. Not one RPC fails throughout. "Within two polls" is
// counted with Status.Polls and Status.LastSwitchPoll, not timed.
//
// It runs twice: on plaintext, and with the server on mTLS (issue 16
// acceptance 4), where every client's xDS channel has a bootstrap with
// "tls" channel creds and reads the rollout over HTTPS with its client
// certificate; the server refuses any caller without one.
func TestMigrationRolloutLive(t *testing.T) {
	for _, mode := range []string{"plaintext", "mtls"} {
		t.Run(mode, func(t *testing.T) { testMigrationRolloutLive(t, mode == "mtls") })
	}
}

func testMigrationRolloutLive(t *testing.T, withTLS bool) {
	f := newMCFixtureTLS(t, withTLS)
	isHalf := func(n string) bool { return slices.Contains(mcHalf, n) }
	half50 := func(n string) clientlib.Channel {
		if isHalf(n) {
			return clientlib.XDS
		}
		return clientlib.DNS
	}
	f.setRollout(t, 0)
	conns := f.dial(t)
	l := startMCLoad(conns)
	mcWait(t, conns, 5*time.Second, "0%", func(_ string, s clientlib.Status) bool {
		return s.Channel == clientlib.DNS && s.Reason == clientlib.ReasonIneligible && s.Eligibility.Version > 0
	})
	mcChannels(t, f, l, "0%", func(string) clientlib.Channel { return clientlib.DNS })

	// change sets the rollout, waits until every client is where want
	// says, and checks that each one that moved did so within two polls
	// of the change: the config is in force once spillwayctl has
	// returned, so a switch must come at most two polls after the poll
	// count the client had then (clients that move while spillwayctl is
	// still running pass easily).
	change := func(percent int, want func(string) clientlib.Channel, reason func(string) clientlib.Reason) {
		t.Helper()
		what := fmt.Sprintf("rollout %d%%", percent)
		before, set := map[string]clientlib.Status{}, map[string]uint64{}
		for n, c := range conns {
			before[n] = c.Status()
		}
		f.setRollout(t, percent)
		for n, c := range conns {
			set[n] = c.Status().Polls
		}
		mcWait(t, conns, 15*time.Second, what, func(n string, s clientlib.Status) bool {
			return s.Channel == want(n) && s.Reason == reason(n)
		})
		var moved, maxPolls, maxFromStart uint64
		for n, c := range conns {
			s, b := c.Status(), before[n]
			if s.Switches == b.Switches {
				if b.Channel != want(n) {
					t.Errorf("%s: %s on %v without a switch", what, n, s.Channel)
				}
				continue
			}
			moved++
			maxFromStart = max(maxFromStart, s.LastSwitchPoll-b.Polls)
			if s.LastSwitchPoll > set[n] {
				maxPolls = max(maxPolls, s.LastSwitchPoll-set[n])
			}
			if s.LastSwitchPoll > set[n]+2 {
				t.Errorf("%s: %s switched at its poll %d, %d polls after the change was in force (at its poll %d), want at most 2", what, n, s.LastSwitchPoll, s.LastSwitchPoll-set[n], set[n])
			}
		}
		t.Logf("%s: %d of %d clients moved, the slowest %d polls after spillwayctl returned (%d after it started)", what, moved, len(conns), maxPolls, maxFromStart)
		mcChannels(t, f, l, what, want)
	}
	eligibleReason := func(n string) clientlib.Reason {
		if isHalf(n) {
			return clientlib.ReasonFlagOn
		}
		return clientlib.ReasonIneligible
	}
	ineligible := func(string) clientlib.Reason { return clientlib.ReasonIneligible }
	allDNS := func(string) clientlib.Channel { return clientlib.DNS }

	change(50, half50, eligibleReason)
	var onXDS int
	for _, c := range conns {
		if c.Status().Channel == clientlib.XDS {
			onXDS++
		}
	}
	if onXDS != len(mcHalf) {
		t.Errorf("at 50%%: %d of %d clients on xds, want the %d hashed under 5000", onXDS, len(conns), len(mcHalf))
	}
	change(0, allDNS, ineligible)
	change(50, half50, eligibleReason)

	// The flag still wins: panic on at 50% sends every client to DNS.
	f.panic(t, "on")
	mcWait(t, conns, 10*time.Second, "panic on at 50%", func(n string, s clientlib.Status) bool {
		return s.Channel == clientlib.DNS && s.Reason == map[bool]clientlib.Reason{true: clientlib.ReasonFlagOff, false: clientlib.ReasonIneligible}[isHalf(n)]
	})
	mcChannels(t, f, l, "panic on at 50%", allDNS)
	l.stop(t, "rollout 0% -> 50% -> 0% -> 50%, then panic on")
}

// TestMigrationControlPlaneDown is acceptance 2: with the control plane
// killed, connected clients (on xDS and on DNS) keep making successful
// RPCs for 30 s on their last known endpoints; when it returns they
// resync: the flag is read again and a new backend is seen over both
// channels.
func TestMigrationControlPlaneDown(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s without a control plane")
	}
	f := newMCFixture(t)
	f.setRollout(t, 50)
	conns := f.dial(t)
	isHalf := func(n string) bool { return slices.Contains(mcHalf, n) }
	mcWait(t, conns, 15*time.Second, "50%", func(n string, s clientlib.Status) bool {
		return s.Channel == clientlib.DNS && !isHalf(n) || s.Channel == clientlib.XDS && isHalf(n)
	})
	l := startMCLoad(conns)
	// Connected clients: every one has sent RPCs through its channel.
	mcChannels(t, f, l, "before the kill", func(n string) clientlib.Channel {
		if isHalf(n) {
			return clientlib.XDS
		}
		return clientlib.DNS
	})

	f.s.kill()
	killed := time.Now()
	// The event: every client on xDS has seen the control plane go (its
	// read of the panic flag, served by the same server, fails).
	mcWait(t, conns, 15*time.Second, "every xds client counts flag errors after the kill", func(n string, s clientlib.Status) bool {
		return !isHalf(n) || s.FlagErrors > 0 && s.LastFlagError != nil
	})
	// From then until 30 s after the kill, in three slices, every client
	// keeps reaching the backends through its own channel, as the ledger
	// backends count it, and no RPC fails.
	failedAtKill := l.failed.Load()
	outageEnd := killed.Add(30 * time.Second)
	for slice := 1; ; slice++ {
		from := mcCounts(f.backends)
		end := time.Now().Add(10 * time.Second)
		if end.After(outageEnd) {
			end = outageEnd
		}
		for time.Now().Before(end) {
			time.Sleep(100 * time.Millisecond)
		}
		to := mcCounts(f.backends)
		for i := range mcClients {
			name := fmt.Sprintf("client-%02d", i)
			ch := 0 // the DNS channel's port
			if isHalf(name) {
				ch = 1
			}
			if got := to[name][ch] - from[name][ch]; got == 0 {
				t.Errorf("control plane down, slice %d (to %v after the kill): %s made no RPC through its channel (counts %v -> %v)", slice, end.Sub(killed).Round(time.Second), name, from[name], to[name])
			}
		}
		if !time.Now().Before(outageEnd) {
			break
		}
	}
	if n := l.failed.Load() - failedAtKill; n != 0 {
		t.Errorf("%d RPCs failed while the control plane was down, want 0; first errors: %v", n, l.errs)
	}
	for name, c := range conns {
		s := c.Status()
		if isHalf(name) && (s.Channel != clientlib.XDS || s.FlagErrors == 0 || s.LastFlagError == nil) {
			t.Errorf("%s with the control plane down: %v, %d flag errors (%v); want still on xds, counting errors", name, s.Channel, s.FlagErrors, s.LastFlagError)
		}
		if !isHalf(name) && s.Channel != clientlib.DNS {
			t.Errorf("%s with the control plane down: on %v, want dns", name, s.Channel)
		}
	}
	t.Logf("control plane down for %v: %d RPCs ok, %d failed", time.Since(killed).Round(time.Second), l.ok.Load(), l.failed.Load())

	// Back, with one more backend in the static file.
	nb := startMCBackend(t, "zone-a")
	f.backends = append(f.backends, nb)
	staticFile := f.s.flag("--static-file")
	body, err := os.ReadFile(staticFile)
	if err != nil {
		t.Fatal(err)
	}
	body = fmt.Appendf(body, "      - address: 127.0.0.1\n        ports: [\"grpc=%d\", \"xds=%d\"]\n        zone: zone-a\n", nb.dnsPort, nb.xdsPort)
	if err := os.WriteFile(staticFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	f.s.start()
	restarted := time.Now()
	mcWait(t, conns, 10*time.Second, "flag read again", func(n string, s clientlib.Status) bool {
		return !isHalf(n) || s.LastFlagError == nil && time.Since(s.FlagRead) < 2*mcPoll
	})
	// DNS clients re-resolve within their backoff (at most 10 s), xDS
	// clients get the new endpoint when their ADS stream is back.
	// grpc-go's xDS client retries a failed ADS stream with its default
	// backoff (1 s, ×1.6 per failure, ±20%, at most 120 s): after 30 s of
	// failures its next try may come ~55 s after the restart.
	deadline := time.Now().Add(90 * time.Second)
	lastMissing := -1
	for {
		nb.mu.Lock()
		var missing []string
		for i := range mcClients {
			name := fmt.Sprintf("client-%02d", i)
			c := nb.byCaller[name]
			if isHalf(name) && c[1] == 0 || !isHalf(name) && c[0] == 0 {
				missing = append(missing, name)
			}
		}
		nb.mu.Unlock()
		if len(missing) == 0 {
			t.Logf("every client reached the new backend %v after the restart", time.Since(restarted).Round(100*time.Millisecond))
			break
		}
		if len(missing) != lastMissing {
			t.Logf("%v after the restart: %d clients yet to reach the new backend: %v", time.Since(restarted).Round(100*time.Millisecond), len(missing), missing)
			lastMissing = len(missing)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart, the new backend got no RPC from %v", missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.stop(t, "control plane down and back")
}

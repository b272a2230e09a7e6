package clientlib_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/migration/rollout"
)

// switchPolls is how soon after the flag changes new RPCs must be on the
// other channel, counted in the Conn's own polls (a busy machine makes a
// poll late, not wrong): the poll that begins after the change reads it,
// and one more covers a poll already reading when the change landed.
const switchPolls = 2

// TestPanicSwitchNoFailedRPCs: with RPCs running all the time, the panic
// flag moves new RPCs to DNS and back to xDS within two poll periods, and
// not one RPC fails.
func TestPanicSwitchNoFailedRPCs(t *testing.T) {
	e := newEnv(t)
	var conns []*clientlib.Conn
	for i := range 3 {
		conns = append(conns, e.dial(fmt.Sprintf("caller-%d", i), clientlib.WithRolloutFile(e.rollout(100))))
	}
	const perConn = 4
	l := startLoad(conns, perConn)
	defer l.stop()

	for _, c := range conns {
		if d, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
			t.Fatalf("%s: not on xds after %v: %+v", c.Status().Service, d, c.Status())
		}
	}
	for round := range 2 {
		for _, step := range []struct {
			flag string
			ch   clientlib.Channel
		}{{"off", clientlib.DNS}, {"on", clientlib.XDS}} {
			polls := make([]uint64, len(conns))
			for i, c := range conns {
				polls[i] = c.Status().Polls
			}
			e.setFlag(step.flag)
			for i, c := range conns {
				d, ok := waitFor(10*time.Second, onChannel(c, step.ch))
				if !ok {
					t.Fatalf("round %d: xds=%s: %s still on %v: %+v", round, step.flag, c.Status().Service, c.Status().Channel, c.Status())
				}
				s := c.Status()
				if s.LastSwitchPoll > polls[i]+switchPolls {
					t.Errorf("round %d: xds=%s: %s moved to %v at its poll %d (after %v), %d polls after the flag changed at its poll %d, want at most %d",
						round, step.flag, s.Service, step.ch, s.LastSwitchPoll, d, s.LastSwitchPoll-polls[i], polls[i], switchPolls)
				}
				if s.Reason != map[string]clientlib.Reason{"on": clientlib.ReasonFlagOn, "off": clientlib.ReasonFlagOff}[step.flag] {
					t.Errorf("reason = %q, want the flag's", s.Reason)
				}
			}
			// Every new RPC goes through the new channel. An RPC begun
			// before the switch may still land on the old one: at most
			// one per load goroutine.
			all0, xds0 := e.served()
			before := l.ok.Load()
			if _, ok := waitFor(10*time.Second, func() bool { return l.ok.Load() > before+300 }); !ok {
				t.Fatalf("round %d: xds=%s: RPCs stalled", round, step.flag)
			}
			all1, xds1 := e.served()
			viaXDS, viaDNS := xds1-xds0, (all1-xds1)-(all0-xds0)
			viaNew, viaOld := viaXDS, viaDNS
			if step.ch == clientlib.DNS {
				viaNew, viaOld = viaDNS, viaXDS
			}
			if inFlight := uint64(perConn * len(conns)); viaNew == 0 || viaOld > int64(inFlight) {
				t.Errorf("round %d: xds=%s: after the switch %d RPCs came through xds and %d through dns, want all on %v but for at most %d begun before it",
					round, step.flag, viaXDS, viaDNS, step.ch, inFlight)
			}
		}
	}
	l.stop()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d RPCs failed (last: %v) of %d, want 0", n, l.err(), n+l.ok.Load())
	}
	t.Logf("%d RPCs, none failed", l.ok.Load())
	for _, c := range conns {
		if got, want := c.Status().Switches, uint64(5); got != want {
			t.Errorf("%s: switches = %d, want %d (1 to xds, then 2 rounds of off and on)", c.Status().Service, got, want)
		}
	}
	for _, b := range e.backends {
		if b.calls.Load() == 0 {
			t.Errorf("backend in %s served no RPC", b.zone)
		}
	}
}

// halfEligible is the 20 callers of TestEligibilityHalf that a 50%
// rollout puts on xDS: those whose rollout.Bucket is under 5000. It is
// written out so that a change of the hash, which would move services
// between DNS and xDS on upgrade, fails this test.
var halfEligible = []string{"svc-00", "svc-01", "svc-06", "svc-10", "svc-11", "svc-13", "svc-15"}

// TestEligibilityHalf: under a 50% rollout exactly the callers whose
// bucket is under 5000 use xDS, and the others never open an xDS stream.
func TestEligibilityHalf(t *testing.T) {
	e := newEnv(t)
	file := e.rollout(50)
	var want, got []string
	conns := map[string]*clientlib.Conn{}
	for i := range 20 {
		name := fmt.Sprintf("svc-%02d", i)
		if rollout.Bucket(name) < 5000 {
			want = append(want, name)
		}
		conns[name] = e.dial(name, clientlib.WithRolloutFile(file))
	}
	if diff := cmp.Diff(halfEligible, want); diff != "" {
		t.Fatalf("rollout.Bucket moved services (-pinned +now):\n%s", diff)
	}
	for name, c := range conns {
		s := c.Status()
		if s.Eligibility.Eligible != slices.Contains(want, name) {
			t.Errorf("%s: eligible = %v, bucket %d", name, s.Eligibility.Eligible, s.Eligibility.Bucket)
		}
		if !s.Eligibility.Eligible {
			if s.Reason != clientlib.ReasonIneligible || s.NodeID != "" {
				t.Errorf("%s: reason %q node %q, want ineligible without an xds node", name, s.Reason, s.NodeID)
			}
			continue
		}
		if _, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
			t.Errorf("%s: eligible but not on xds: %+v", name, c.Status())
		}
	}
	l := startLoad(slices.Collect(func(yield func(*clientlib.Conn) bool) {
		for _, c := range conns {
			if !yield(c) {
				return
			}
		}
	}), 1)
	time.Sleep(300 * time.Millisecond)
	l.stop()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d RPCs failed (last %v)", n, l.err())
	}
	for name, c := range conns {
		if c.Status().Channel == clientlib.XDS {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("callers on xds (-want +got):\n%s", diff)
	}
	// The control plane saw exactly the eligible callers.
	seen := map[string]bool{}
	for _, s := range e.xds.Subscriptions() {
		seen[s.ClientService] = true
	}
	var callers []string
	for n := range seen {
		callers = append(callers, n)
	}
	slices.Sort(callers)
	if diff := cmp.Diff(want, callers); diff != "" {
		t.Errorf("xds streams by caller (-want +got):\n%s", diff)
	}
}

// TestXDSIdentity: the control plane sees the bootstrap the library
// wrote: the node id, node.cluster = the calling service, and its zone.
func TestXDSIdentity(t *testing.T) {
	e := newEnv(t)
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)), clientlib.WithZone("zone-b"))
	if _, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
		t.Fatalf("not on xds: %+v", c.Status())
	}
	id := c.Status().NodeID
	if !strings.HasPrefix(id, "caller~") {
		t.Errorf("node id %q, want caller~<host>~<random>", id)
	}
	subs := e.xds.Subscriptions()
	if len(subs) == 0 {
		t.Fatal("no xds stream")
	}
	for _, s := range subs {
		if s.NodeID != id || s.ClientService != "caller" || s.Zone != "zone-b" {
			t.Errorf("stream of node %q cluster %q zone %q, want %q, caller, zone-b", s.NodeID, s.ClientService, s.Zone, id)
		}
	}
}

// TestXDSTimeoutServesFromDNS: with no control plane, an eligible caller
// serves from DNS and says why.
func TestXDSTimeoutServesFromDNS(t *testing.T) {
	e := newEnv(t)
	dead := deadAddr(t)
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)), clientlib.WithControlPlane(dead), clientlib.WithXDSTimeout(300*time.Millisecond))
	l := startLoad([]*clientlib.Conn{c}, 2)
	if _, ok := waitFor(5*time.Second, func() bool { return c.Status().Reason == clientlib.ReasonXDSNotReady }); !ok {
		t.Fatalf("status %+v, want reason %q", c.Status(), clientlib.ReasonXDSNotReady)
	}
	if _, ok := waitFor(10*time.Second, func() bool { return l.ok.Load() >= 50 }); !ok {
		t.Fatalf("%d RPCs served from dns in 10s, want 50", l.ok.Load())
	}
	l.stop()
	s := c.Status()
	if s.Channel != clientlib.DNS || !strings.Contains(s.Detail, "not ready") {
		t.Errorf("status %+v, want dns and a detail saying the xds channel is not ready", s)
	}
	if l.failed.Load() != 0 || l.ok.Load() == 0 {
		t.Errorf("%d ok, %d failed (last %v): want every RPC served from dns", l.ok.Load(), l.failed.Load(), l.err())
	}
}

// TestXDSFailureFallsBackToDNS: when the active xDS channel loses every
// backend (here: xDS hands out dead ports, DNS still the live ones), new
// RPCs move to DNS; when xDS is healthy again they move back.
func TestXDSFailureFallsBackToDNS(t *testing.T) {
	e := newEnv(t)
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)))
	if _, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
		t.Fatalf("not on xds: %+v", c.Status())
	}
	l := startLoad([]*clientlib.Conn{c}, 2)
	defer l.stop()
	e.xdsPorts(func(b *backend) uint16 { return netip.MustParseAddrPort(deadAddr(t)).Port() })
	if _, ok := waitFor(10*time.Second, func() bool { return c.Status().Reason == clientlib.ReasonXDSFailure }); !ok {
		t.Fatalf("status %+v, want reason %q", c.Status(), clientlib.ReasonXDSFailure)
	}
	if s := c.Status(); s.Channel != clientlib.DNS {
		t.Fatalf("status %+v, want dns", s)
	}
	// The next 200 RPCs go through DNS and succeed. An RPC begun on xDS
	// before the fall back may still fail: at most one per load
	// goroutine (2).
	failed, ok := l.failed.Load(), l.ok.Load()
	if _, done := waitFor(10*time.Second, func() bool { return l.ok.Load() >= ok+200 }); !done {
		t.Fatalf("after the fall back to dns: %d RPCs succeeded in 10s, want 200", l.ok.Load()-ok)
	}
	if n := l.failed.Load() - failed; n > 2 {
		t.Errorf("%d RPCs failed after the fall back to dns, want at most 2 begun before it (last %v)", n, l.err())
	}
	t.Logf("%d RPCs failed while xds was broken and active", failed)

	e.xdsPorts(func(b *backend) uint16 { return b.xdsAddr.Port() })
	if d, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
		t.Fatalf("not back on xds: %+v", c.Status())
	} else {
		t.Logf("back on xds %v after the repair", d)
	}
}

// TestCloseDuringReadinessWait: Close does not wait out WithXDSTimeout.
func TestCloseDuringReadinessWait(t *testing.T) {
	e := newEnv(t)
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)), clientlib.WithControlPlane(deadAddr(t)), clientlib.WithXDSTimeout(time.Minute))
	if _, ok := waitFor(5*time.Second, func() bool { return c.Status().Flag == "on" }); !ok {
		t.Fatalf("flag never read: %+v", c.Status())
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v while waiting for xds", d)
	}
}

// TestFlagLookupFailureKeepsState: when the panic flag cannot be read the
// Conn stays where it is; before the first good read it is on DNS.
func TestFlagLookupFailureKeepsState(t *testing.T) {
	t.Run("after_a_read", func(t *testing.T) {
		e := newEnv(t)
		c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)))
		if _, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
			t.Fatalf("not on xds: %+v", c.Status())
		}
		l := startLoad([]*clientlib.Conn{c}, 2)
		e.stopDNS()
		if _, ok := waitFor(5*time.Second, func() bool { return c.Status().FlagErrors >= 3 }); !ok {
			t.Fatalf("no flag errors counted: %+v", c.Status())
		}
		l.stop()
		s := c.Status()
		if s.Channel != clientlib.XDS || s.Flag != "on" || s.LastFlagError == nil {
			t.Errorf("status %+v, want still on xds, flag on, with the last error", s)
		}
		if l.failed.Load() != 0 {
			t.Errorf("%d RPCs failed (last %v)", l.failed.Load(), l.err())
		}
	})
	t.Run("before_a_read", func(t *testing.T) {
		e := newEnv(t)
		c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)), clientlib.WithDNSServer(deadUDP(t)))
		if _, ok := waitFor(5*time.Second, func() bool { return c.Status().FlagErrors >= 2 }); !ok {
			t.Fatalf("no flag errors counted: %+v", c.Status())
		}
		s := c.Status()
		if s.Channel != clientlib.DNS || s.Reason != clientlib.ReasonStarting || s.Flag != "" {
			t.Errorf("status %+v, want dns, reason %q, no flag", s, clientlib.ReasonStarting)
		}
	})
}

// TestIneligibleNeverPolls: a caller the rollout leaves out is on DNS for
// good, with no xDS channel.
func TestIneligibleNeverPolls(t *testing.T) {
	e := newEnv(t)
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(0)))
	l := startLoad([]*clientlib.Conn{c}, 2)
	time.Sleep(3 * pollInterval)
	l.stop()
	s := c.Status()
	if s.Channel != clientlib.DNS || s.Reason != clientlib.ReasonIneligible || s.FlagErrors != 0 || s.Flag != "" || s.NodeID != "" {
		t.Errorf("status %+v, want dns for good", s)
	}
	if l.failed.Load() != 0 || l.ok.Load() == 0 {
		t.Errorf("%d ok, %d failed (last %v)", l.ok.Load(), l.failed.Load(), l.err())
	}
	if subs := e.xds.Subscriptions(); len(subs) != 0 {
		t.Errorf("xds streams %+v, want none", subs)
	}
}

// TestRolloutURL: the rollout config comes from spillway's GET
// /v1/rollout; one that cannot be read leaves the caller on DNS, saying
// why.
func TestRolloutURL(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		eligible bool
		errHas   string
	}{
		{"all", 200, `{"rules":[{"name":"all","match":{},"percent":100}],"version":3}`, true, ""},
		{"tier_match", 200, `{"rules":[{"match":{"tier":"3"},"percent":100}],"version":1}`, true, ""},
		{"tier_miss", 200, `{"rules":[{"match":{"tier":"1"},"percent":100}],"version":1}`, false, ""},
		{"bad_percent", 200, `{"rules":[{"percent":150}],"version":1}`, false, "rules[0].percent"},
		{"not_json", 200, `rules: []`, false, "invalid character"},
		{"http_500", 500, `oops`, false, "500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/rollout" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			c, err := clientlib.Dial(context.Background(), "echo",
				clientlib.WithService("caller"), clientlib.WithMetadata(map[string]string{"tier": "3"}),
				clientlib.WithRolloutURL(srv.URL+"/v1/rollout"),
				clientlib.WithControlPlane(deadAddr(t)), clientlib.WithDNSServer(deadUDP(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			el := c.Status().Eligibility
			if el.Eligible != tt.eligible {
				t.Errorf("eligible = %v, want %v: %v", el.Eligible, tt.eligible, el)
			}
			if el.Source != srv.URL+"/v1/rollout" {
				t.Errorf("source = %q", el.Source)
			}
			if tt.errHas == "" && el.Err != nil || tt.errHas != "" && (el.Err == nil || !strings.Contains(el.Err.Error(), tt.errHas)) {
				t.Errorf("err = %v, want one containing %q", el.Err, tt.errHas)
			}
			if tt.errHas != "" && !strings.Contains(c.Status().Detail, tt.errHas) {
				t.Errorf("detail %q does not say why", c.Status().Detail)
			}
		})
	}
}

// TestNoRolloutConfig: without a rollout source nobody is eligible, and
// Status says so.
func TestNoRolloutConfig(t *testing.T) {
	c, err := clientlib.Dial(context.Background(), "echo", clientlib.WithService("caller"), clientlib.WithRolloutURL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.Status()
	if s.Eligibility.Eligible || s.Eligibility.Err == nil || s.Reason != clientlib.ReasonIneligible || !strings.Contains(s.Detail, "none configured") {
		t.Errorf("status %+v, want ineligible saying no config is configured", s)
	}
}

// TestDialOptionErrors: each bad option is refused with an error naming
// it.
func TestDialOptionErrors(t *testing.T) {
	tests := []struct {
		name   string
		target string
		opts   []clientlib.Option
		want   string
	}{
		{"no_service", "echo", nil, "WithService"},
		{"bad_service", "echo", []clientlib.Option{clientlib.WithService("Bad_Name")}, "WithService"},
		{"bad_target", "no/slash", []clientlib.Option{clientlib.WithService("a")}, "target"},
		{"service_in_metadata", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithMetadata(map[string]string{"service": "b"})}, "WithMetadata"},
		{"bad_zone", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithZone("Zone A")}, "WithZone"},
		{"bad_region", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithRegion("-r")}, "WithRegion"},
		{"bad_control_plane", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithControlPlane("nohostport")}, "WithControlPlane"},
		{"bad_dns_server", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithDNSServer("8053")}, "WithDNSServer"},
		{"bad_domain", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithDomain("a..b")}, "WithDomain"},
		{"bad_url", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithRolloutURL("ftp://x/")}, "WithRolloutURL"},
		{"zero_poll", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithPanicPollInterval(0)}, "WithPanicPollInterval"},
		{"negative_xds_timeout", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithXDSTimeout(-time.Second)}, "WithXDSTimeout"},
		{"zero_switch_timeout", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithSwitchTimeout(0)}, "WithSwitchTimeout"},
		{"bad_propagation_key", "echo", []clientlib.Option{clientlib.WithService("a"), clientlib.WithPropagation("x-traffic-class", "grpc-timeout")}, "WithPropagation: propagate: keys[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := clientlib.Dial(context.Background(), tt.target, tt.opts...)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded, want an error")
			}
			if !errors.Is(err, clientlib.ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrInvalidOption naming %s", err, tt.want)
			}
		})
	}
}

// TestMetrics: the Conn's state is exported when a registerer is given,
// and unregistered by Close.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewPedanticRegistry()
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)), clientlib.WithRegisterer(reg))
	if _, ok := waitFor(10*time.Second, onChannel(c, clientlib.XDS)); !ok {
		t.Fatalf("not on xds: %+v", c.Status())
	}
	want := `
# HELP spillway_client_active_channel 1 for the channel new RPCs use (dns or xds), 0 for the other.
# TYPE spillway_client_active_channel gauge
spillway_client_active_channel{channel="dns",service="caller",target="echo"} 0
spillway_client_active_channel{channel="xds",service="caller",target="echo"} 1
# HELP spillway_client_eligible 1 when the rollout config lets the caller use xDS, else 0; rule is the deciding rule's index (-1: none).
# TYPE spillway_client_eligible gauge
spillway_client_eligible{rule="0",service="caller",target="echo"} 1
# HELP spillway_client_panic_flag_xds The last panic flag read: 1 for xds=on, 0 for xds=off; absent before the first read.
# TYPE spillway_client_panic_flag_xds gauge
spillway_client_panic_flag_xds{service="caller",target="echo"} 1
# HELP spillway_client_reason 1 for the reason the active channel is the one it is (see clientlib.Reason); one series per Conn.
# TYPE spillway_client_reason gauge
spillway_client_reason{reason="flag_on",service="caller",target="echo"} 1
# HELP spillway_client_switches_total Switches of the active channel, by the channel switched to and the reason.
# TYPE spillway_client_switches_total counter
spillway_client_switches_total{reason="flag_on",service="caller",target="echo",to="xds"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"spillway_client_active_channel", "spillway_client_eligible", "spillway_client_panic_flag_xds", "spillway_client_reason", "spillway_client_switches_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "spillway_client_panic_flag_errors_total"); err != nil || n != 1 {
		t.Errorf("panic_flag_errors_total series = %d, %v", n, err)
	}
	c.Close()
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("after Close: %d series (%v), want 0", n, err)
	}
}

// TestConcurrentUseAndClose: RPCs, Status and Close from many goroutines
// at once (for the race detector); RPCs after Close fail, none hangs.
func TestConcurrentUseAndClose(t *testing.T) {
	e := newEnv(t)
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(100)))
	l := startLoad([]*clientlib.Conn{c}, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_ = c.Status()
			time.Sleep(time.Millisecond)
		}
	}()
	e.setFlag("off")
	e.setFlag("on")
	<-done
	l.stop()
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("RPC after Close succeeded")
	}
}

// TestDNSChannelHonoursSRVWeights: the DNS channel sends each endpoint its
// SRV weight's share (the spillway.wrr balancer), here 1:2:4.
func TestDNSChannelHonoursSRVWeights(t *testing.T) {
	e := newEnv(t)
	e.register(func(b *backend) uint16 { return b.xdsAddr.Port() }, func(i int) uint32 { return 100 << i })
	c := e.dial("caller", clientlib.WithRolloutFile(e.rollout(0)))
	hc := healthpb.NewHealthClient(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Warm up until every backend is connected and serving.
	for i := 0; ; i++ {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		if i > 1000 {
			t.Fatal("a backend never got an RPC")
		}
		if e.backends[0].calls.Load() > 0 && e.backends[1].calls.Load() > 0 && e.backends[2].calls.Load() > 0 {
			break
		}
	}
	var before [3]int64
	for i, b := range e.backends {
		before[i] = b.calls.Load()
	}
	const n = 1400
	for range n {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range e.backends {
		got := float64(b.calls.Load()-before[i]) / n
		want := float64(int(1)<<i) / 7
		if got < want-0.05 || got > want+0.05 {
			t.Errorf("backend %d (SRV weight %d): share %.3f, want %.3f ± 0.05", i, 1<<i, got, want)
		}
	}
}

// deadAddr is a TCP address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// deadUDP is a UDP address nobody answers on.
func deadUDP(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// TestRolloutChangeMovesRunningConn: a Conn re-reads its rollout config at
// every poll. Raised from 0% to 100%, it builds its xDS channel and moves
// within two polls; lowered to 0%, it moves back within two polls and
// closes the xDS channel (its stream leaves the control plane); the flag
// still wins. Not one RPC fails.
func TestRolloutChangeMovesRunningConn(t *testing.T) {
	e := newEnv(t)
	file := e.rollout(0)
	set := func(percent int) {
		t.Helper()
		if err := os.WriteFile(file, fmt.Appendf(nil, "rules:\n  - name: all\n    match: {}\n    percent: %d\n", percent), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := e.dial("caller", clientlib.WithRolloutFile(file))
	l := startLoad([]*clientlib.Conn{c}, 2)
	defer l.stop()
	if s := c.Status(); s.Reason != clientlib.ReasonIneligible || s.NodeID != "" {
		t.Fatalf("at 0%%: %+v, want ineligible without an xds channel", s)
	}
	// moved sets the rollout and waits for the Conn to be on ch, then
	// checks that it switched within two polls of the change.
	moved := func(what string, percent int, ch clientlib.Channel, reason clientlib.Reason) {
		t.Helper()
		set(percent)
		p0 := c.Status().Polls
		if _, ok := waitFor(10*time.Second, func() bool { s := c.Status(); return s.Channel == ch && s.Reason == reason }); !ok {
			t.Fatalf("%s: %+v, want on %v (%s)", what, c.Status(), ch, reason)
		}
		if s := c.Status(); s.LastSwitchPoll > p0+2 {
			t.Errorf("%s: switched at poll %d, %d polls after the change (seen at poll %d), want at most 2", what, s.LastSwitchPoll, s.LastSwitchPoll-p0, p0)
		}
	}
	moved("0% -> 100%", 100, clientlib.XDS, clientlib.ReasonFlagOn)
	if s := c.Status(); !s.Eligibility.Eligible || s.NodeID == "" || s.Bootstrap != "per-conn" || s.Flag != "on" {
		t.Errorf("at 100%%: %+v, want eligible, a node, a per-conn bootstrap and the flag read", s)
	}
	before := l.ok.Load()
	if _, ok := waitFor(5*time.Second, func() bool { return l.ok.Load() > before+50 }); !ok {
		t.Fatal("RPCs stalled on xds")
	}
	moved("100% -> 0%", 0, clientlib.DNS, clientlib.ReasonIneligible)
	if _, ok := waitFor(10*time.Second, func() bool { return len(e.xds.Subscriptions()) == 0 && c.Status().NodeID == "" }); !ok {
		t.Errorf("at 0%% again: xds streams %d, node %q; want the xds channel closed", len(e.xds.Subscriptions()), c.Status().NodeID)
	}
	if s := c.Status(); s.Flag != "" {
		t.Errorf("ineligible Conn keeps flag %q, want none", s.Flag)
	}
	// The flag wins over the rollout: at 100% with xds=off, DNS.
	e.setFlag("off")
	moved("100% with xds=off", 100, clientlib.DNS, clientlib.ReasonFlagOff)
	e.setFlag("on")
	moved("100% with xds=on", 100, clientlib.XDS, clientlib.ReasonFlagOn)
	// A rollout that cannot be read keeps the last decision.
	if err := os.WriteFile(file, []byte("rules: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errs := c.Status().RolloutErrors
	if _, ok := waitFor(5*time.Second, func() bool { return c.Status().RolloutErrors >= errs+2 }); !ok {
		t.Fatalf("bad rollout file: %+v, want read errors counted", c.Status())
	}
	if s := c.Status(); s.Channel != clientlib.XDS || !s.Eligibility.Eligible || s.LastRolloutError == nil {
		t.Errorf("bad rollout file: %+v, want still eligible on xds, with the error", s)
	}
	l.stop()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d RPCs failed (last: %v) of %d, want 0", n, l.err(), n+l.ok.Load())
	}
	t.Logf("%d RPCs, none failed; %d switches", l.ok.Load(), c.Status().Switches)
}

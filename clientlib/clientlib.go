package clientlib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/clientlib/dnsresolver"
	"github.com/spillway/spillway/clientlib/internal/dnsquery"
	"github.com/spillway/spillway/clientlib/wrr"
)

// Channel names one of a Conn's two gRPC channels.
type Channel uint8

const (
	// DNS is the channel whose endpoints come from SRV records.
	DNS Channel = iota
	// XDS is the channel dialled as xds:///<target>.
	XDS
)

// String returns "dns" or "xds".
func (c Channel) String() string {
	if c == XDS {
		return "xds"
	}
	return "dns"
}

// Reason says, in a word fit for a metric label, why the active channel is
// the one it is. Status.Detail says it in a sentence.
type Reason string

// Reasons.
const (
	// ReasonStarting: on DNS because the panic flag has not been read yet.
	ReasonStarting Reason = "starting"
	// ReasonIneligible: on DNS because the rollout config leaves the
	// caller out (or could not be read yet); re-read at every poll. An
	// ineligible Conn has no xDS channel (one it had is closed a few polls
	// after the move to DNS) and does not read the panic flag.
	ReasonIneligible Reason = "ineligible"
	// ReasonXDSUnavailable: on DNS although eligible, because the xDS
	// channel could not be built (no bootstrap in the environment, or a
	// bad one); retried at every poll.
	ReasonXDSUnavailable Reason = "xds_unavailable"
	// ReasonSwitching: the flag asks for the other channel, and the Conn is
	// waiting (bounded) for that channel to be ready; new RPCs still use
	// the current one.
	ReasonSwitching Reason = "switching"
	// ReasonFlagOn: on xDS, the panic flag reads xds=on.
	ReasonFlagOn Reason = "flag_on"
	// ReasonFlagOff: on DNS, the panic flag reads xds=off.
	ReasonFlagOff Reason = "flag_off"
	// ReasonXDSNotReady: on DNS although the flag reads xds=on, because the
	// xDS channel did not get its resources and a ready connection within
	// WithXDSTimeout; retried at every poll.
	ReasonXDSNotReady Reason = "xds_not_ready"
	// ReasonXDSFailure: on DNS although the flag reads xds=on, because the
	// xDS channel fell into TRANSIENT_FAILURE while it was active.
	ReasonXDSFailure Reason = "xds_failure"
	// ReasonDNSNotReady: still on xDS although the flag reads xds=off,
	// because the DNS channel did not become ready within
	// WithSwitchTimeout; retried at every poll.
	ReasonDNSNotReady Reason = "dns_not_ready"
)

// Status is a snapshot of a Conn's state.
type Status struct {
	Service, Target string
	// Channel is the channel new RPCs use; Reason and Detail say why.
	Channel Channel
	Reason  Reason
	Detail  string
	// LastSwitch is the time of the last switch (zero before the first);
	// Switches counts them. LastSwitchPoll is the poll during which the
	// last switch happened (the value of Polls then; 0 before the first
	// switch).
	LastSwitch     time.Time
	Switches       uint64
	LastSwitchPoll uint64
	// Polls counts the polls begun: each re-reads the rollout config
	// (except the first, right after Dial read it) and, while eligible,
	// the panic flag, then moves new RPCs if needed.
	Polls uint64
	// Eligibility is the latest rollout decision: made at Dial, then again
	// at every poll from the config read then. A failed read keeps the
	// last decision (at Dial: not eligible) and counts in RolloutErrors;
	// LastRolloutError is the latest failure, nil after a good read.
	Eligibility      Eligibility
	RolloutErrors    uint64
	LastRolloutError error
	// Bootstrap says where the xDS channel's bootstrap comes from:
	// "env:GRPC_XDS_BOOTSTRAP", "env:GRPC_XDS_BOOTSTRAP_CONFIG" (the
	// process's, see the package doc) or "per-conn" (WithPerConnBootstrap);
	// "" before an xDS channel was first built.
	Bootstrap string
	// NodeID is the xDS node id; "" when there is no xDS channel.
	NodeID string
	// Flag is the last panic flag read: "on" or "off"; "" before the first
	// good read, and for ineligible Conns, which do not poll it. FlagRead is
	// the time of the last good read.
	Flag     string
	FlagRead time.Time
	// FlagErrors counts failed reads of the flag; LastFlagError is the
	// latest (nil if none).
	FlagErrors    uint64
	LastFlagError error

	switchCounts map[switchKey]uint64 // for the metrics
}

type switchKey struct {
	to     Channel
	reason Reason
}

// Conn is a gRPC connection to one target service, over DNS or xDS. It
// implements grpc.ClientConnInterface, so any generated client takes it.
type Conn struct {
	// read-only after Dial
	target   string
	opts     options
	log      *slog.Logger
	dns      *grpc.ClientConn
	flags    *dnsquery.Client
	flagName string
	metrics  *collector // nil without WithRegisterer
	kick     chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	close    sync.Once

	// owner only (Dial, then the run goroutine; Close after it returned):
	// the xDS channel, nil while the caller is not eligible; the stop of
	// its state watcher; why it could not be built; and the poll at which
	// a channel kept after the caller left the rollout is closed (0: none).
	xds        *grpc.ClientConn
	xdsStop    func()
	xdsErr     error
	retirePoll uint64

	// active is the channel of new RPCs; status is the latest snapshot.
	// Both are written only by the run goroutine (and Dial, before it
	// starts) and read by anyone.
	active atomic.Pointer[grpc.ClientConn]
	status atomic.Pointer[Status]

	// owner only (the run goroutine): the working copy of the status.
	st Status
}

var _ grpc.ClientConnInterface = (*Conn)(nil)

// dnsServiceConfig is the DNS channel's default service config: spread
// over every SRV endpoint, not only the first, in proportion to the SRV
// weights (spillway.wrr, linked in by this package), else evenly.
const dnsServiceConfig = `{"loadBalancingConfig":[{"` + wrr.Name + `":{}},{"round_robin":{}}]}`

// Dial returns a Conn to the target service (a name such as "payments").
// It reads the rollout config (WithRolloutFile, else WithRolloutURL,
// bounded by ctx and 5 s) and builds the channels; it does not wait for
// any connection. The Conn starts on DNS; a background goroutine polls at
// once and then every poll interval, re-reading the rollout config and,
// while the caller is eligible, the panic flag, and moves new RPCs to xDS
// when the caller is eligible, the flag says xds=on and the xDS channel is
// ready, and back to DNS when one of these stops holding.
//
// Dial fails only for invalid options (errors.Is(err, ErrInvalidOption);
// the message names the option) or when a channel cannot be created. A
// rollout config that cannot be read is not an error: the Conn uses DNS
// only, and Status says why.
func Dial(ctx context.Context, target string, opts ...Option) (*Conn, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	target = strings.ToLower(strings.TrimSuffix(target, "."))
	if err := o.validate(target); err != nil {
		return nil, err
	}
	c := &Conn{target: target, opts: o}
	c.log = o.logger.With("component", "clientlib", "service", o.service, "target", target)
	c.st = Status{Service: o.service, Target: target, Channel: DNS, switchCounts: map[switchKey]uint64{}}

	// The DNS channel: always.
	b, err := dnsresolver.NewBuilder(dnsresolver.Config{Server: o.dnsServer, Domain: o.domain, Logger: c.log})
	if err != nil {
		return nil, fmt.Errorf("%w: WithDNSServer: %v", ErrInvalidOption, err)
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(b),
		grpc.WithDefaultServiceConfig(dnsServiceConfig),
	}
	c.dns, err = grpc.NewClient(dnsresolver.Scheme+":///"+target, append(dopts, o.dialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("clientlib: dns channel: %w", err)
	}
	c.active.Store(c.dns)

	// Eligibility, then the xDS channel only for the eligible.
	timeout := min(2*time.Second, max(o.pollInterval, 200*time.Millisecond))
	c.flags, err = dnsquery.New(o.dnsServer, timeout)
	if err != nil {
		c.dns.Close()
		return nil, fmt.Errorf("%w: WithDNSServer: %v", ErrInvalidOption, err)
	}
	c.flagName = "_xds." + o.domain
	c.kick = make(chan struct{}, 1)
	c.st.Eligibility = o.decide(ctx, rolloutFetchTimeout)
	if err := c.st.Eligibility.Err; err != nil && !errors.Is(err, errNoRollout) {
		c.st.RolloutErrors, c.st.LastRolloutError = 1, err
	}
	c.st.Reason, c.st.Detail = ReasonStarting, "panic flag not read yet"
	if c.st.Eligibility.Eligible {
		c.ensureXDS()
		c.log.Info("eligible for xds; starting on dns", "eligibility", c.st.Eligibility.String(), "node", c.st.NodeID)
	} else {
		c.log.Info("not eligible for xds: on dns", "eligibility", c.st.Eligibility.String())
	}
	c.st.Reason, c.st.Detail = c.wantReason()
	c.publish()

	if o.registerer != nil {
		m := newCollector(c)
		if err := o.registerer.Register(m); err != nil {
			c.log.Warn("metrics not registered", "err", err)
		} else {
			c.metrics = m
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	c.wg.Go(func() { c.run(runCtx) })
	return c, nil
}

// wantReason is the reason and detail of a Conn on DNS before its first
// poll.
func (c *Conn) wantReason() (Reason, string) {
	_, r, d := c.want()
	return r, d
}

// ensureXDS builds the xDS channel if there is none, and starts watching
// its state. A failure is kept in xdsErr (and Status) and retried at the
// next poll.
func (c *Conn) ensureXDS() {
	if c.xds != nil {
		return
	}
	cc, bs, err := c.buildXDS()
	if err != nil {
		if c.xdsErr == nil || c.xdsErr.Error() != err.Error() {
			c.log.Error("no xds channel: serving from dns", "err", err)
		}
		c.xdsErr = err
		return
	}
	c.xds, c.xdsErr, c.st.Bootstrap = cc, nil, bs.source
	c.st.NodeID = bs.nodeID
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { watchState(ctx, cc, c.kick) })
	c.xdsStop = func() {
		cancel()
		wg.Wait()
	}
}

// closeXDS stops watching the xDS channel and closes it; RPCs still on it
// fail with codes.Canceled.
func (c *Conn) closeXDS() error {
	if c.xds == nil {
		return nil
	}
	c.xdsStop()
	err := c.xds.Close()
	c.xds, c.xdsStop, c.retirePoll, c.st.NodeID = nil, nil, 0, ""
	return err
}

func (c *Conn) buildXDS() (*grpc.ClientConn, bootstrapInfo, error) {
	bs, rb, err := c.opts.xdsBootstrap(c.log)
	if err != nil {
		return nil, bs, err
	}
	xopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if rb != nil {
		xopts = append(xopts, grpc.WithResolvers(rb))
	}
	cc, err := grpc.NewClient("xds:///"+c.target, append(xopts, c.opts.dialOptions...)...)
	if err != nil {
		return nil, bs, fmt.Errorf("xds channel: %w", err)
	}
	return cc, bs, nil
}

// Invoke sends a unary RPC on the active channel. It implements
// grpc.ClientConnInterface.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.active.Load().Invoke(ctx, method, args, reply, opts...)
}

// NewStream opens a stream on the active channel; the stream stays on that
// channel until it ends, whatever switches happen meanwhile. It implements
// grpc.ClientConnInterface.
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.active.Load().NewStream(ctx, desc, method, opts...)
}

// Status returns a snapshot of the Conn's state.
func (c *Conn) Status() Status {
	s := *c.status.Load()
	s.switchCounts = nil
	return s
}

// Close stops the flag poller, closes both channels (RPCs still in flight
// fail with codes.Canceled) and unregisters the metrics. Later calls return
// nil.
func (c *Conn) Close() error {
	var err error
	c.close.Do(func() {
		c.cancel()
		c.wg.Wait()
		if c.metrics != nil {
			c.opts.registerer.Unregister(c.metrics)
		}
		err = errors.Join(c.dns.Close(), c.closeXDS())
	})
	return err
}

// publish stores a copy of the working status for readers.
func (c *Conn) publish() {
	s := c.st
	s.switchCounts = maps.Clone(c.st.switchCounts)
	c.status.Store(&s)
}

// run owns the switching. At once and then every poll interval
// (jittered) it re-reads the rollout config (not at the first poll: Dial
// just read it), reads the flag while eligible, and moves new RPCs to the
// channel they ask for, once that channel is ready. Between polls, a
// change of the xDS channel's state (READY, or TRANSIENT_FAILURE) is acted
// on at once, without waiting.
func (c *Conn) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
			if c.xds != nil {
				c.reconcile(ctx, false)
			}
			c.publish()
			continue
		case <-timer.C:
		}
		c.st.Polls++
		c.publish()
		if !first {
			c.pollRollout(ctx)
		}
		if c.st.Eligibility.Eligible {
			c.ensureXDS()
			if c.xds != nil {
				c.pollFlag(ctx)
			}
		} else {
			c.st.Flag = ""
		}
		c.publish()
		c.reconcile(ctx, true)
		c.retire()
		c.publish()
		timer.Reset(jitter(c.opts.pollInterval))
	}
}

// retirePolls is how many polls an xDS channel stays open after its
// caller left the rollout, so that RPCs and streams begun on it before the
// move to DNS can finish.
const retirePolls = 3

// pollRollout re-reads the rollout config and decides again; a failed
// read keeps the last decision.
func (c *Conn) pollRollout(ctx context.Context) {
	if c.opts.rolloutFile == "" && c.opts.rolloutURL == "" {
		return
	}
	e := c.opts.decide(ctx, min(rolloutFetchTimeout, max(c.opts.pollInterval, 200*time.Millisecond)))
	if ctx.Err() != nil {
		return
	}
	if e.Err != nil {
		c.st.RolloutErrors++
		c.st.LastRolloutError = e.Err
		c.log.Warn("rollout config read failed; keeping the last decision", "eligibility", c.st.Eligibility.String(), "err", e.Err)
		return
	}
	prev := c.st.Eligibility
	c.st.Eligibility, c.st.LastRolloutError = e, nil
	switch {
	case prev.Eligible == e.Eligible:
	case e.Eligible:
		c.retirePoll = 0
		c.log.Info("now eligible for xds", "eligibility", e.String(), "version", e.Version)
	default:
		c.retirePoll = c.st.Polls + retirePolls
		c.log.Info("no longer eligible for xds", "eligibility", e.String(), "version", e.Version)
	}
}

// retire closes the xDS channel of a caller that left the rollout, once
// new RPCs have been on DNS for retirePolls polls.
func (c *Conn) retire() {
	if c.xds == nil || c.st.Eligibility.Eligible || c.st.Channel != DNS || c.st.Polls < c.retirePoll {
		return
	}
	if err := c.closeXDS(); err != nil {
		c.log.Warn("closing the xds channel", "err", err)
	}
	c.log.Info("closed the xds channel: not eligible", "eligibility", c.st.Eligibility.String())
}

// watchState kicks when cc becomes READY or falls into TRANSIENT_FAILURE,
// until ctx ends. Kicks coalesce in the 1-slot channel.
func watchState(ctx context.Context, cc *grpc.ClientConn, kick chan<- struct{}) {
	s := cc.GetState()
	for cc.WaitForStateChange(ctx, s) {
		s = cc.GetState()
		if s == connectivity.Ready || s == connectivity.TransientFailure {
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}
}

// jitter returns d ± 10%.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// errNoFlag is wrapped when the TXT record holds no xds=on or xds=off.
var errNoFlag = errors.New(`no "xds=on" or "xds=off" string`)

// pollFlag reads TXT _xds.<domain>; a failed read keeps the last value.
func (c *Conn) pollFlag(ctx context.Context) {
	v, err := c.readFlag(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		c.st.FlagErrors++
		c.st.LastFlagError = err
		c.log.Warn("panic flag read failed; keeping the last state", "flag", c.st.Flag, "err", err)
		return
	}
	c.st.LastFlagError = nil
	c.st.FlagRead = time.Now()
	if v != c.st.Flag {
		c.log.Info("panic flag", "xds", v, "was", c.st.Flag)
		c.st.Flag = v
	}
}

func (c *Conn) readFlag(ctx context.Context) (string, error) {
	in, err := c.flags.Query(ctx, c.flagName, dns.TypeTXT)
	if err != nil {
		return "", fmt.Errorf("panic flag: %w", err)
	}
	for _, rr := range in.Answer {
		txt, ok := rr.(*dns.TXT)
		if !ok {
			continue
		}
		switch strings.ToLower(strings.Join(txt.Txt, "")) {
		case "xds=on":
			return "on", nil
		case "xds=off":
			return "off", nil
		}
	}
	return "", fmt.Errorf("panic flag %s: %w", strings.TrimSuffix(c.flagName, "."), errNoFlag)
}

// want is the channel the rollout decision and the flag ask for.
func (c *Conn) want() (Channel, Reason, string) {
	if !c.st.Eligibility.Eligible {
		return DNS, ReasonIneligible, c.st.Eligibility.String()
	}
	if c.xds == nil {
		detail := "no xds channel"
		if c.xdsErr != nil {
			detail += ": " + c.xdsErr.Error()
		}
		return DNS, ReasonXDSUnavailable, detail
	}
	switch c.st.Flag {
	case "on":
		return XDS, ReasonFlagOn, "panic flag xds=on"
	case "off":
		return DNS, ReasonFlagOff, "panic flag xds=off"
	}
	detail := "panic flag not read yet"
	if c.st.LastFlagError != nil {
		detail += ": " + c.st.LastFlagError.Error()
	}
	return DNS, ReasonStarting, detail
}

// reconcile moves new RPCs to the channel the flag asks for, once that
// channel is ready; when it does not get ready in time, nothing moves and
// Status says why. RPCs in flight are never touched: they finish on the
// channel they started on, which stays open. With wait false (a state
// change between polls) it moves to xDS only if xDS is ready now.
func (c *Conn) reconcile(ctx context.Context, wait bool) {
	want, reason, detail := c.want()
	if want == c.st.Channel {
		if want == XDS && c.xds.GetState() == connectivity.TransientFailure {
			// The active xDS channel lost every backend, or its resources
			// are in error: DNS may still have a way.
			if st, ok := waitReady(ctx, c.dns, c.opts.switchTimeout); ok {
				c.switchTo(DNS, ReasonXDSFailure, "xds channel in TRANSIENT_FAILURE; serving from dns")
			} else if ctx.Err() == nil {
				c.log.Warn("xds channel failing and dns channel not ready", "dns_state", st)
			}
			return
		}
		c.setReason(reason, detail)
		return
	}
	switch want {
	case XDS:
		// The first try waits for the channel; later ones (it was not
		// ready, or failed) only look: the state watcher kicks when it
		// gets ready.
		timeout := c.opts.xdsTimeout
		if !wait || c.st.Reason == ReasonXDSNotReady || c.st.Reason == ReasonXDSFailure {
			timeout = 0
		}
		if timeout > 0 && c.xds.GetState() != connectivity.Ready {
			c.setReason(ReasonSwitching, fmt.Sprintf("%s; waiting up to %v for the xds channel to be ready", detail, timeout))
			c.publish()
		}
		if st, ok := waitReady(ctx, c.xds, timeout); !ok {
			if ctx.Err() == nil && wait && timeout > 0 {
				c.setReason(ReasonXDSNotReady, fmt.Sprintf("panic flag xds=on but the xds channel is not ready after %v (state %v); serving from dns", c.opts.xdsTimeout, st))
				c.log.Warn("staying on dns: xds channel not ready", "timeout", c.opts.xdsTimeout, "state", st)
			}
			return
		}
	case DNS:
		if !wait && c.st.Reason == ReasonDNSNotReady {
			return // retried at the next poll
		}
		if c.dns.GetState() != connectivity.Ready {
			c.setReason(ReasonSwitching, fmt.Sprintf("%s; waiting up to %v for the dns channel to be ready", detail, c.opts.switchTimeout))
			c.publish()
		}
		if st, ok := waitReady(ctx, c.dns, c.opts.switchTimeout); !ok {
			if ctx.Err() == nil {
				c.setReason(ReasonDNSNotReady, fmt.Sprintf("%s but the dns channel is not ready after %v (state %v); staying on xds", detail, c.opts.switchTimeout, st))
				c.log.Error("staying on xds: dns channel not ready", "timeout", c.opts.switchTimeout, "state", st, "flag", c.st.Flag)
			}
			return
		}
	}
	c.switchTo(want, reason, detail)
}

func (c *Conn) setReason(r Reason, detail string) {
	c.st.Reason, c.st.Detail = r, detail
}

// switchTo makes ch the channel of new RPCs.
func (c *Conn) switchTo(ch Channel, r Reason, detail string) {
	from := c.st.Channel
	if ch == XDS {
		c.active.Store(c.xds)
	} else {
		c.active.Store(c.dns)
	}
	c.st.Channel = ch
	c.setReason(r, detail)
	c.st.LastSwitch = time.Now()
	c.st.Switches++
	c.st.LastSwitchPoll = c.st.Polls
	c.st.switchCounts[switchKey{ch, r}]++
	c.log.Info("switched", "from", from, "to", ch, "reason", r, "detail", detail)
}

// waitReady asks cc to connect and waits, at most d, for it to be READY.
// It returns the last state seen. With d 0 it only looks.
func waitReady(ctx context.Context, cc *grpc.ClientConn, d time.Duration) (connectivity.State, bool) {
	if d <= 0 {
		s := cc.GetState()
		if s == connectivity.Idle {
			cc.Connect()
		}
		return s, s == connectivity.Ready
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return s, true
		case connectivity.Idle:
			cc.Connect()
		}
		if !cc.WaitForStateChange(ctx, s) {
			return cc.GetState(), false
		}
	}
}

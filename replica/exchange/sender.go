package exchange

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry/names"
	"github.com/spillway/spillway/replica/exchange/meshv1"
)

// maxChunkBytes is the encoded size past which a sender starts a new
// message for the same owner: well under gRPC's default 4 MiB receive
// limit.
const maxChunkBytes = 1 << 20

// idleRounds is how many rounds a connection to an owner address stays
// open with nothing to send before it is closed.
const idleRounds = 3

// Sender runs on every replica: each Interval it sends the owner of every
// service with local load or clients that service's summary, and (with
// Owners set) every owner in the ownership records one summary listing
// the shards this replica routes to it, even with no services: the
// acknowledgement a new owner waits for. Configure the exported fields,
// then call Run once.
type Sender struct {
	// ID is this replica's id; required (letters, digits and -_.:=@+).
	ID string
	// Interval is the report interval; required, at most MaxInterval.
	Interval time.Duration
	// Local returns every service with load or clients on this replica
	// (Summarize builds it from the load table); required. Called on
	// Run's goroutine.
	Local func(now time.Time) []load.ServiceSummary
	// Route returns the owner of service and its gRPC address; ok false
	// when the service has no owner (skipped and counted). Required.
	Route func(service string) (replica, addr string, ok bool)
	// Owners returns every shard's owner as the ownership records say
	// (shards with no owner, or a released one, left out); or nil to
	// send no shard acknowledgements. Each round calls it before Local
	// and Route, so a record that changes during the round routes the
	// services to the new owner no earlier than the shard is listed to
	// it. Called on Run's goroutine.
	Owners func() []ShardOwner
	// Deliver receives the summary of the services this replica owns
	// itself (owner == ID), without the network; or nil to send those
	// over gRPC to the owner's address like any other.
	Deliver func(load.Summary)
	// DialOptions for grpc.NewClient to the owners (credentials among
	// them); required to hold at least the transport credentials.
	DialOptions []grpc.DialOption
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer for the metrics, or nil for none.
	Registerer prometheus.Registerer
}

// ShardOwner is one shard's ownership record as a Sender needs it.
type ShardOwner struct {
	Shard   int
	Replica string // the owner's replica id
	Addr    string // its gRPC address; "" when unknown (skipped unless it is this replica)
	Epoch   int64
}

func (s *Sender) validate() error {
	if err := validateReplica(s.ID); err != nil {
		return fmt.Errorf("exchange sender: ID: %w", err)
	}
	if s.Interval <= 0 || s.Interval > MaxInterval {
		return fmt.Errorf("exchange sender: Interval: %v, want (0, %v]", s.Interval, MaxInterval)
	}
	if s.Local == nil {
		return errors.New("exchange sender: Local: must not be nil")
	}
	if s.Route == nil {
		return errors.New("exchange sender: Route: must not be nil")
	}
	return nil
}

// Run sends a round of summaries every Interval until ctx ends, then
// closes its streams and returns nil. It returns an error at once if the
// Sender is misconfigured. A slow or failing owner never delays the
// others: each owner address has its own stream and goroutine, holding at
// most one round; a round that cannot be sent is dropped, never queued.
func (s *Sender) Run(ctx context.Context) error {
	if err := s.validate(); err != nil {
		return err
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &run{s: s, log: log.With("component", "load-exchange-sender", "replica", s.ID), m: newMetrics(s.Registerer), peers: map[string]*peer{}}
	defer r.stop()
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			r.round(ctx, now)
		}
	}
}

// run is the state of one Run; owned by Run's goroutine.
type run struct {
	s     *Sender
	log   *slog.Logger
	m     *metrics
	peers map[string]*peer // by owner address
	wg    sync.WaitGroup
}

func (r *run) stop() {
	for _, p := range r.peers {
		p.cancel()
	}
	r.wg.Wait()
}

// round groups the local summaries by owner and hands each owner its
// part, with the shards routed to it.
func (r *run) round(ctx context.Context, now time.Time) {
	self := load.Summary{Replica: r.s.ID, At: now, Interval: r.s.Interval}
	byAddr := map[string]*load.Summary{}
	summaryFor := func(addr string) *load.Summary {
		sum := byAddr[addr]
		if sum == nil {
			sum = &load.Summary{Replica: r.s.ID, At: now, Interval: r.s.Interval}
			byAddr[addr] = sum
		}
		return sum
	}
	// The records first: see Sender.Owners.
	if r.s.Owners != nil {
		seen := map[int]bool{}
		for _, o := range r.s.Owners() {
			if o.Shard < 0 || o.Shard >= MaxShards || o.Epoch < 1 || seen[o.Shard] {
				continue
			}
			seen[o.Shard] = true
			se := load.ShardEpoch{Shard: o.Shard, Epoch: o.Epoch}
			switch {
			case o.Replica == r.s.ID && r.s.Deliver != nil:
				self.Shards = append(self.Shards, se)
			case o.Addr != "":
				sum := summaryFor(o.Addr)
				sum.Shards = append(sum.Shards, se)
			}
		}
	}
	local := r.s.Local(now)
	var unrouted, invalid int
	for _, ss := range local {
		if err := names.ValidateService("service", ss.Service); err != nil {
			invalid++
			continue
		}
		if err := validateService(0, ss, now); err != nil {
			invalid++
			r.log.Debug("local load summary skipped", "service", ss.Service, "err", err)
			continue
		}
		replica, addr, ok := r.s.Route(ss.Service)
		if !ok {
			unrouted++
			continue
		}
		if replica == r.s.ID && r.s.Deliver != nil {
			self.Services = append(self.Services, ss)
			continue
		}
		sum := summaryFor(addr)
		sum.Services = append(sum.Services, ss)
	}
	if unrouted > 0 {
		r.m.unrouted.Add(float64(unrouted))
	}
	if invalid > 0 {
		r.log.Warn("local load summaries skipped: invalid", "services", invalid)
	}
	if len(self.Services) > 0 || len(self.Shards) > 0 {
		sortShards(self.Shards)
		r.s.Deliver(self)
		r.m.summaries.WithLabelValues("delivered").Inc()
	}
	for addr, sum := range byAddr {
		p := r.peers[addr]
		if p == nil {
			p = r.newPeer(ctx, addr)
			r.peers[addr] = p
		}
		p.idle = 0
		sortShards(sum.Shards)
		p.offer(chunk(*sum), r.m)
	}
	for addr, p := range r.peers {
		if _, used := byAddr[addr]; used {
			continue
		}
		if p.idle++; p.idle >= idleRounds {
			p.cancel()
			delete(r.peers, addr)
		}
	}
}

func sortShards(s []load.ShardEpoch) {
	slices.SortFunc(s, func(a, b load.ShardEpoch) int { return cmp.Compare(a.Shard, b.Shard) })
}

// chunk encodes a summary as messages of at most MaxServices services and
// about maxChunkBytes each, every one carrying the whole shard list; a
// summary without services is one message (its shards).
func chunk(s load.Summary) []*meshv1.Summary {
	var out []*meshv1.Summary
	var cur *meshv1.Summary
	size := 0
	shards := shardsToProto(s.Shards)
	start := func() {
		cur = &meshv1.Summary{Replica: s.Replica, AtUnixNano: s.At.UnixNano(), IntervalMs: s.Interval.Milliseconds(), Shards: shards}
		out = append(out, cur)
		size = 0
	}
	if len(s.Services) == 0 {
		start()
	}
	for _, ss := range s.Services {
		ms := serviceToProto(ss, s.At)
		n := proto.Size(ms)
		if cur == nil || len(cur.Services) >= MaxServices || size+n > maxChunkBytes {
			start()
		}
		cur.Services = append(cur.Services, ms)
		size += n + 4
	}
	return out
}

// peer is the stream to one owner address.
type peer struct {
	addr   string
	ch     chan []*meshv1.Summary // 1 slot: the newest round not yet sent
	cancel context.CancelFunc
	idle   int // rounds with nothing for it; owned by Run's goroutine
}

func (r *run) newPeer(ctx context.Context, addr string) *peer {
	ctx, cancel := context.WithCancel(ctx)
	p := &peer{addr: addr, ch: make(chan []*meshv1.Summary, 1), cancel: cancel}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		p.loop(ctx, r)
	}()
	return p
}

// offer replaces the pending round, if any (counted as dropped): the new
// one has fresher data.
func (p *peer) offer(msgs []*meshv1.Summary, m *metrics) {
	for {
		select {
		case p.ch <- msgs:
			return
		default:
		}
		select {
		case old := <-p.ch:
			m.summaries.WithLabelValues("dropped").Add(float64(len(old)))
		default:
		}
	}
}

// loop owns the peer's connection and stream: it sends each round it
// gets, and after a failure drops rounds until a backoff has passed.
func (p *peer) loop(ctx context.Context, r *run) {
	log := r.log.With("owner_addr", p.addr)
	var (
		conn         *grpc.ClientConn
		stream       grpc.ClientStreamingClient[meshv1.Summary, meshv1.ReportAck]
		cancelStream context.CancelFunc = func() {}
		backoff      time.Duration
		retryAt      time.Time
	)
	reset := func() {
		cancelStream()
		stream, cancelStream = nil, func() {}
	}
	defer func() {
		if stream != nil {
			_ = stream.CloseSend()
		}
		reset()
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		var msgs []*meshv1.Summary
		select {
		case <-ctx.Done():
			return
		case msgs = <-p.ch:
		}
		if time.Now().Before(retryAt) {
			r.m.summaries.WithLabelValues("dropped").Add(float64(len(msgs)))
			continue
		}
		err := func() error {
			if conn == nil {
				c, err := grpc.NewClient(p.addr, r.s.DialOptions...)
				if err != nil {
					return fmt.Errorf("dial: %w", err)
				}
				conn = c
			}
			// An owner that does not answer (a connection stuck
			// connecting, a stream stuck on flow control) is given up
			// after a few intervals; the next round after the backoff
			// gets a fresh stream.
			if stream == nil {
				sctx, cancel := context.WithCancel(ctx)
				watchdog := time.AfterFunc(FreshIntervals*r.s.Interval, cancel)
				st, err := meshv1.NewLoadExchangeClient(conn).Report(sctx)
				watchdog.Stop()
				if err != nil {
					cancel()
					return fmt.Errorf("open stream: %w", err)
				}
				stream, cancelStream = st, cancel
			}
			watchdog := time.AfterFunc(FreshIntervals*r.s.Interval, cancelStream)
			defer watchdog.Stop()
			for i, msg := range msgs {
				if err := stream.Send(msg); err != nil {
					if errors.Is(err, io.EOF) {
						_, err = stream.CloseAndRecv()
					}
					r.m.summaries.WithLabelValues("dropped").Add(float64(len(msgs) - i))
					return fmt.Errorf("send: %w", err)
				}
				r.m.summaries.WithLabelValues("sent").Inc()
				r.m.bytes.WithLabelValues("sent").Add(float64(proto.Size(msg)))
			}
			return nil
		}()
		if err == nil {
			backoff, retryAt = 0, time.Time{}
			continue
		}
		if stream == nil {
			r.m.summaries.WithLabelValues("dropped").Add(float64(len(msgs)))
		}
		reset()
		backoff = nextBackoff(backoff, r.s.Interval)
		retryAt = time.Now().Add(backoff)
		log.Warn("load summaries to owner not sent", "err", err, "retry_in", backoff)
	}
}

// nextBackoff doubles from min(interval, 1s) up to 30 s.
func nextBackoff(prev, interval time.Duration) time.Duration {
	if prev == 0 {
		return min(interval, time.Second)
	}
	return min(2*prev, 30*time.Second)
}

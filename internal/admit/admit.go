// Package admit bounds how many new connections a gRPC server sets up at
// once.
//
// A reconnect storm (a replica restarted, a zone's clients failing over)
// opens thousands of connections within a second. Each one in setup holds
// more than it will once idle: its TLS handshake, the HTTP/2 transport's
// buffers, the first request being decoded and the first answer being
// written, and the stacks of the goroutines doing it. Set up all at once,
// those peaks add up, and the Go runtime keeps the pages it took for them
// long after the storm. A Listener accepts every connection as soon as the
// kernel offers it (a queued connection costs only its socket), but hands
// at most InSetup of them to the server at a time. A connection leaves
// setup when the server starts sending it a first message on any RPC (an
// xDS stream's first push, a unary call's answer), when it closes, or
// after SetupTimeout, so a client that connects and says nothing holds a
// place only that long. The interceptors tell the Listener when; put them
// first in the server's chain, so that a call another interceptor refuses
// ends the setup too.
//
// The trade-off is the setup rate: with clients far away, a setup takes
// several round trips, and at most InSetup of them run at once.
package admit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// Config bounds the connections in setup.
type Config struct {
	// InSetup is the most connections handed to the server and not yet
	// set up; 0 turns admission off (every connection is handed on at
	// once).
	InSetup int
	// Queue is the most accepted connections waiting for a place; one
	// more is closed at once (its client reconnects with backoff).
	Queue int
	// SetupTimeout is how long a connection may hold its place without
	// the server sending it anything.
	SetupTimeout time.Duration
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.InSetup < 0:
		return fmt.Errorf("InSetup: %d, want >= 0", c.InSetup)
	case c.InSetup > 0 && c.Queue < 1:
		return fmt.Errorf("Queue: %d, want >= 1", c.Queue)
	case c.InSetup > 0 && c.SetupTimeout <= 0:
		return fmt.Errorf("SetupTimeout: %v, want > 0", c.SetupTimeout)
	}
	return nil
}

// Stats are a Listener's counters since it was made.
type Stats struct {
	Accepted uint64 // connections taken from the kernel
	Refused  uint64 // closed because the queue was full
	TimedOut uint64 // left setup by SetupTimeout
	Waiting  int    // accepted, waiting for a place now
	InSetup  int    // handed on and not yet set up now
}

// Listener is a net.Listener whose Accept hands on at most InSetup
// connections in setup. Its interceptors tell it when a connection is set
// up; without them every connection holds its place until SetupTimeout.
type Listener struct {
	inner net.Listener
	cfg   Config

	places chan struct{} // one token per connection in setup
	queue  chan net.Conn // accepted, waiting for a place
	done   chan struct{} // closed by Close
	err    error         // the inner Accept's error that ended the accept loop; read after errCh closes
	errCh  chan struct{} // closed once err is set

	mu      sync.Mutex
	pending map[string]*conn // in setup, by remote address

	closeOnce sync.Once
	startOnce sync.Once

	accepted, refused, timedOut atomic.Uint64
	// handed counts the connections handed on and not yet set up; the
	// places channel also holds the place an Accept waiting for a
	// connection has taken.
	handed atomic.Int64
}

// NewListener wraps l. With cfg.InSetup 0 it returns a Listener that hands
// on every connection as Accept takes it.
func NewListener(l net.Listener, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Listener{
		inner:   l,
		cfg:     cfg,
		done:    make(chan struct{}),
		errCh:   make(chan struct{}),
		pending: make(map[string]*conn),
	}
	if cfg.InSetup > 0 {
		a.places = make(chan struct{}, cfg.InSetup)
		a.queue = make(chan net.Conn, cfg.Queue)
	}
	return a, nil
}

// Accept returns the next connection once a place in setup is free.
func (a *Listener) Accept() (net.Conn, error) {
	if a.places == nil {
		return a.inner.Accept()
	}
	a.startOnce.Do(func() { go a.acceptLoop() })
	select {
	case a.places <- struct{}{}:
	case <-a.done:
		return nil, net.ErrClosed
	}
	select {
	case c := <-a.queue:
		return a.admit(c), nil
	case <-a.errCh:
		<-a.places
		return nil, a.err
	case <-a.done:
		<-a.places
		return nil, net.ErrClosed
	}
}

// acceptLoop takes connections from the kernel as they come and queues
// them; a full queue closes the newest.
func (a *Listener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := a.inner.Accept()
		if err != nil {
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				// EMFILE, ECONNABORTED and the like: back off and go on, as
				// net/http and grpc-go do; ending here would stop the
				// server accepting for good.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-a.done:
					return
				}
			}
			a.err = err
			close(a.errCh)
			return
		}
		delay = 0
		a.accepted.Add(1)
		select {
		case a.queue <- c:
		default:
			a.refused.Add(1)
			c.Close()
		}
	}
}

func (a *Listener) admit(c net.Conn) net.Conn {
	ac := &conn{Conn: c, l: a, key: c.RemoteAddr().String()}
	a.handed.Add(1)
	// The timer's func does not read ac.timer, which is set after it
	// may run.
	ac.timer = time.AfterFunc(a.cfg.SetupTimeout, func() { ac.release(true) })
	a.mu.Lock()
	if _, dup := a.pending[ac.key]; !dup && !ac.settled.Load() {
		a.pending[ac.key] = ac
	}
	a.mu.Unlock()
	return ac
}

// Close closes the inner listener and every connection still queued.
func (a *Listener) Close() error {
	err := a.inner.Close()
	a.closeOnce.Do(func() {
		close(a.done)
		if a.queue == nil {
			return
		}
		for {
			select {
			case c := <-a.queue:
				c.Close()
			default:
				return
			}
		}
	})
	return err
}

// Addr is the inner listener's address.
func (a *Listener) Addr() net.Addr { return a.inner.Addr() }

// Stats reads the counters.
func (a *Listener) Stats() Stats {
	s := Stats{Accepted: a.accepted.Load(), Refused: a.refused.Load(), TimedOut: a.timedOut.Load()}
	if a.places != nil {
		s.Waiting = len(a.queue)
		s.InSetup = int(a.handed.Load())
	}
	return s
}

// Settled ends the setup of the connection whose remote address is addr,
// if it is in setup.
func (a *Listener) Settled(addr net.Addr) {
	if a.places == nil || addr == nil {
		return
	}
	a.mu.Lock()
	c := a.pending[addr.String()]
	a.mu.Unlock()
	if c != nil {
		c.settle()
	}
}

// UnaryServerInterceptor ends the caller connection's setup when the call
// returns.
func (a *Listener) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		a.settledCtx(ctx)
		return resp, err
	}
}

// StreamServerInterceptor ends the caller connection's setup when the
// server starts sending the stream its first message, or when the stream
// ends.
func (a *Listener) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if a.places == nil || a.handed.Load() == 0 {
			return handler(srv, ss) // nobody in setup: no wrapper
		}
		w := &stream{ServerStream: ss, l: a}
		err := handler(srv, w)
		if !w.sent.Load() {
			a.settledCtx(ss.Context())
		}
		return err
	}
}

func (a *Listener) settledCtx(ctx context.Context) {
	if a.places == nil || a.handed.Load() == 0 {
		return // the usual case once a storm is over: no lookup, no lock
	}
	if p, ok := peer.FromContext(ctx); ok {
		a.Settled(p.Addr)
	}
}

// conn is a connection handed on; its place is given back once.
type conn struct {
	net.Conn
	l       *Listener
	key     string
	timer   *time.Timer
	settled atomic.Bool
}

// settle gives the place back before the timeout.
func (c *conn) settle() {
	if c.release(false) {
		c.timer.Stop()
	}
}

// release gives the place back, counting a timeout first; it reports
// whether this call did.
func (c *conn) release(timeout bool) bool {
	if !c.settled.CompareAndSwap(false, true) {
		return false
	}
	if timeout {
		c.l.timedOut.Add(1)
	}
	c.l.mu.Lock()
	if c.l.pending[c.key] == c {
		delete(c.l.pending, c.key)
	}
	c.l.mu.Unlock()
	c.l.handed.Add(-1)
	<-c.l.places
	return true
}

func (c *conn) Close() error {
	c.settle()
	return c.Conn.Close()
}

// stream ends its connection's setup at its first SendMsg.
type stream struct {
	grpc.ServerStream
	l    *Listener
	sent atomic.Bool
}

func (s *stream) SendMsg(m any) error {
	if !s.sent.Load() {
		s.sent.Store(true)
		s.l.settledCtx(s.ServerStream.Context())
	}
	return s.ServerStream.SendMsg(m)
}

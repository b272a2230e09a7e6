package admit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/internal/testwait"
)

func listen(t *testing.T, cfg Config) *Listener {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewListener(tcp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// recv waits for what ch delivers, failing after a bound (a hang, not a
// speed check); nil when Accept failed.
func recv(t *testing.T, ch <-chan net.Conn, what string) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: Accept did not return within 20s", what)
		return nil
	}
}

// accepted runs Accept in the background and delivers what it returns.
func accepted(l *Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	return ch
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // substring of the error, "" for none
	}{
		{Config{}, ""},
		{Config{InSetup: 4, Queue: 1, SetupTimeout: time.Second}, ""},
		{Config{InSetup: -1}, "InSetup"},
		{Config{InSetup: 4, Queue: 0, SetupTimeout: time.Second}, "Queue"},
		{Config{InSetup: 4, Queue: 8}, "SetupTimeout"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want error naming %q", tc.cfg, err, tc.want)
		}
	}
}

// The limit holds; a place comes back when a connection closes, when it
// is settled, or at the timeout.
func TestPlaces(t *testing.T) {
	// The setup timeout is long enough that nothing times out before the
	// last step on a busy machine, which waits for it.
	const setup = 2 * time.Second
	l := listen(t, Config{InSetup: 2, Queue: 8, SetupTimeout: setup})
	for range 4 {
		dial(t, l.Addr())
	}
	first, second := recv(t, accepted(l), "first"), recv(t, accepted(l), "second")
	third := accepted(l)
	// The accept loop takes the other two and queues them: waited for,
	// then the third must still be held.
	testwait.For(t, 20*time.Second, "4 accepted, 2 in setup, 2 waiting", func() (bool, string) {
		s := l.Stats()
		return s.InSetup == 2 && s.Waiting == 2 && s.Accepted == 4, fmt.Sprintf("%+v", s)
	})
	select {
	case c := <-third:
		t.Fatalf("third connection %v handed on with 2 in setup", c.RemoteAddr())
	case <-time.After(50 * time.Millisecond):
	}
	first.Close()
	if c3 := recv(t, third, "third, after a place came back"); c3 == nil {
		t.Fatal("Accept failed after a place came back")
	}
	fourth := accepted(l)
	select {
	case <-fourth:
		t.Fatal("fourth connection handed on with 2 in setup")
	case <-time.After(50 * time.Millisecond):
	}
	l.Settled(second.RemoteAddr())
	if c := recv(t, fourth, "fourth, after Settled"); c == nil {
		t.Fatal("Accept failed after Settled")
	}
	// Settling twice gives back one place, not two.
	l.Settled(second.RemoteAddr())
	second.Close()
	if s := l.Stats(); s.InSetup != 2 {
		t.Errorf("in setup after a double settle = %d, want 2", s.InSetup)
	}
	// Nothing settles the last two: the timeout does.
	dial(t, l.Addr())
	if c := recv(t, accepted(l), "fifth, at the setup timeout"); c == nil {
		t.Fatal("Accept failed")
	}
	if got := l.Stats().TimedOut; got == 0 {
		t.Errorf("TimedOut = 0 after a timeout")
	}
}

func TestQueueFullCloses(t *testing.T) {
	l := listen(t, Config{InSetup: 1, Queue: 1, SetupTimeout: time.Minute})
	dial(t, l.Addr())
	if c := recv(t, accepted(l), "first"); c == nil { // starts the accept loop; holds the one place
		t.Fatal("Accept failed")
	}
	queued := dial(t, l.Addr())
	extra := dial(t, l.Addr())
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Refused == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s := l.Stats(); s.Refused != 1 || s.Waiting != 1 {
		t.Fatalf("stats = %+v, want 1 refused, 1 waiting", s)
	}
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read on the refused connection: %v, want it closed", err)
	}
	_ = queued
}

func TestCloseEndsAccept(t *testing.T) {
	l := listen(t, Config{InSetup: 1, Queue: 4, SetupTimeout: time.Minute})
	dial(t, l.Addr())
	recv(t, accepted(l), "first")
	waiting := accepted(l)
	l.Close()
	select {
	case c, ok := <-waiting:
		if ok {
			t.Fatalf("Accept after Close returned %v", c.RemoteAddr())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

func TestOff(t *testing.T) {
	l := listen(t, Config{})
	for range 3 {
		dial(t, l.Addr())
	}
	for range 3 {
		if c := recv(t, accepted(l), "TestOff"); c == nil {
			t.Fatal("Accept failed")
		}
	}
}

// Through a real gRPC server: a connection's first answer ends its setup,
// so with one place, one connection after another gets its answers; a
// refused call ends it too.
func TestGRPCSettles(t *testing.T) {
	l := listen(t, Config{InSetup: 1, Queue: 64, SetupTimeout: time.Hour})
	refuse := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == healthpb.Health_Check_FullMethodName {
			return nil, status.Error(codes.PermissionDenied, "no")
		}
		return handler(ctx, req)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor(), refuse),
		grpc.ChainStreamInterceptor(l.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				errs <- err
				return
			}
			defer cc.Close()
			client := healthpb.NewHealthClient(cc)
			if i%2 == 0 {
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
				if status.Code(err) != codes.PermissionDenied {
					errs <- err
				}
				return
			}
			w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := l.Stats(); s.TimedOut != 0 || s.Accepted != 8 {
		t.Errorf("stats = %+v, want 8 accepted, none timed out", s)
	}
}

type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

// flaky fails its first Accept with a temporary error, as EMFILE does.
type flaky struct {
	net.Listener
	once sync.Once
}

func (f *flaky) Accept() (net.Conn, error) {
	var failed bool
	f.once.Do(func() { failed = true })
	if failed {
		return nil, tempErr{}
	}
	return f.Listener.Accept()
}

// A temporary accept error (EMFILE) does not stop the listener.
func TestTemporaryAcceptError(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewListener(&flaky{Listener: tcp}, Config{InSetup: 1, Queue: 4, SetupTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial(t, l.Addr())
	select {
	case c, ok := <-accepted(l):
		if !ok || c == nil {
			t.Fatal("Accept failed after a temporary error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection after a temporary accept error")
	}
}

package streamlimit

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/security/authn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeStream is a ServerStream that only has a context.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }

// caller is the context of a stream from addr ("" for none), as identity
// name ("" for anonymous).
func caller(name, addr string) context.Context {
	ctx := context.Background()
	if addr != "" {
		ap, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			panic(err)
		}
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: ap})
	}
	if name != "" {
		ctx = authn.NewContext(ctx, authn.Identity{Name: name, Method: authn.Token})
	}
	return ctx
}

// holder opens streams through a Limiter's interceptor and holds them
// open until release.
type holder struct {
	t       *testing.T
	ic      grpc.StreamServerInterceptor
	release chan struct{}
	wg      sync.WaitGroup
}

func newHolder(t *testing.T, l *Limiter) *holder {
	h := &holder{t: t, ic: l.StreamServerInterceptor(), release: make(chan struct{})}
	t.Cleanup(h.close)
	return h
}

// open opens one stream of ctx's caller; it returns the interceptor's
// error, or nil once the handler runs (and holds the stream).
func (h *holder) open(ctx context.Context) error {
	running := make(chan struct{})
	errc := make(chan error, 1)
	h.wg.Go(func() {
		errc <- h.ic(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/test/Stream"}, func(any, grpc.ServerStream) error {
			close(running)
			<-h.release
			return nil
		})
	})
	select {
	case <-running:
		return nil
	case err := <-errc:
		return err
	}
}

func (h *holder) close() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
	h.wg.Wait()
}

func TestPerIdentity(t *testing.T) {
	type open struct {
		name, addr string
		want       codes.Code
	}
	tests := []struct {
		name  string
		limit int
		opens []open
	}{
		{"identity_shared_across_peers", 2, []open{
			{"fleet", "10.0.0.1:1000", codes.OK},
			{"fleet", "10.0.0.2:1000", codes.OK},
			{"fleet", "10.0.0.3:1000", codes.ResourceExhausted},
			{"other", "10.0.0.3:1000", codes.OK},
		}},
		{"anonymous_by_peer_ip", 1, []open{
			{"", "10.0.0.1:1000", codes.OK},
			{"", "10.0.0.1:2000", codes.ResourceExhausted}, // another connection, same host
			{"", "[::ffff:10.0.0.1]:3000", codes.ResourceExhausted},
			{"", "10.0.0.2:1000", codes.OK},
			{"", "[2001:db8::1]:1000", codes.OK},
			{"", "[2001:db8::1]:1001", codes.ResourceExhausted},
		}},
		{"identity_named_like_an_ip_is_not_that_ip", 1, []open{
			{"", "10.0.0.1:1000", codes.OK},
			{"10.0.0.1", "10.0.0.9:1000", codes.OK},
		}},
		{"anonymous_without_peer_share_one", 1, []open{
			{"", "", codes.OK},
			{"", "", codes.ResourceExhausted},
		}},
		{"zero_is_no_limit", 0, []open{
			{"fleet", "10.0.0.1:1000", codes.OK},
			{"fleet", "10.0.0.1:1000", codes.OK},
			{"fleet", "10.0.0.1:1000", codes.OK},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(Config{PerIdentity: tt.limit, Setting: "--grpc-max-streams-per-identity"})
			if err != nil {
				t.Fatal(err)
			}
			h := newHolder(t, l)
			var held, refused int
			for i, o := range tt.opens {
				err := h.open(caller(o.name, o.addr))
				if got := status.Code(err); got != o.want {
					t.Fatalf("open %d (%q from %s) = %v, want %v", i, o.name, o.addr, err, o.want)
				}
				if err == nil {
					held++
				} else {
					refused++
				}
			}
			if got := l.Stats(); got.Open != held || got.Refused != uint64(refused) {
				t.Errorf("Stats = %+v, want %d open and %d refused", got, held, refused)
			}
			h.close()
			if got := l.Stats(); got.Open != 0 || got.Identities != 0 {
				t.Errorf("Stats after every stream ended = %+v, want no stream and no identity tracked", got)
			}
		})
	}
}

// TestRefusal: the caller's error names the limit and the setting, the
// counter counts it, and no metric carries the identity.
func TestRefusal(t *testing.T) {
	l, err := New(Config{PerIdentity: 3, Setting: "--grpc-max-streams-per-identity"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := l.Register(reg); err != nil {
		t.Fatal(err)
	}
	h := newHolder(t, l)
	for range 3 {
		if err := h.open(caller("spiffe://example.org/sa/payments", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
	}
	err = h.open(caller("spiffe://example.org/sa/payments", "10.0.0.2:1"))
	want := "spiffe://example.org/sa/payments already has 3 gRPC streams open, the most one identity may (--grpc-max-streams-per-identity)"
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), want) {
		t.Errorf("refusal = %v, want ResourceExhausted with %q", err, want)
	}
	if err := h.open(caller("", "192.0.2.7:5")); err != nil {
		t.Fatal(err)
	}
	want = `# HELP spillway_grpc_stream_identities Callers (identities, or anonymous peer IPs) with at least one gRPC stream open.
# TYPE spillway_grpc_stream_identities gauge
spillway_grpc_stream_identities 2
# HELP spillway_grpc_streams_open gRPC streams open, counted by the per-identity stream limit.
# TYPE spillway_grpc_streams_open gauge
spillway_grpc_streams_open 4
# HELP spillway_grpc_streams_refused_total gRPC streams refused with RESOURCE_EXHAUSTED, by reason (identity: the caller already held its per-identity limit).
# TYPE spillway_grpc_streams_refused_total counter
spillway_grpc_streams_refused_total{reason="identity"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetValue(), "payments") || strings.Contains(lp.GetValue(), "192.0.2.7") {
					t.Errorf("%s has label %s=%q: an identity in a label", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

func TestAnonymousRefusalNamesPeer(t *testing.T) {
	l, err := New(Config{PerIdentity: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := newHolder(t, l)
	if err := h.open(caller("", "192.0.2.7:5")); err != nil {
		t.Fatal(err)
	}
	err = h.open(caller("", "192.0.2.7:6"))
	if want := "anonymous caller 192.0.2.7 already has 1 gRPC streams open, the most one identity may (the per-identity stream limit)"; !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("refusal = %v, want %q", err, want)
	}
}

func TestValidate(t *testing.T) {
	if _, err := New(Config{PerIdentity: -1}); err == nil || !strings.Contains(err.Error(), "PerIdentity") {
		t.Errorf("New(PerIdentity -1) = %v, want an error naming PerIdentity", err)
	}
}

// TestConcurrent opens and ends streams of a few callers from many
// goroutines: the counts never pass the limit and end at zero.
func TestConcurrent(t *testing.T) {
	const limit, goroutines, rounds = 4, 32, 200
	l, err := New(Config{PerIdentity: limit})
	if err != nil {
		t.Fatal(err)
	}
	ic := l.StreamServerInterceptor()
	callers := []context.Context{caller("a", "10.0.0.1:1"), caller("b", "10.0.0.1:1"), caller("", "10.0.0.1:1")}
	var mu sync.Mutex
	inHandler := map[int]int{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				c := (g + r) % len(callers)
				ic(nil, fakeStream{ctx: callers[c]}, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error {
					mu.Lock()
					inHandler[c]++
					if inHandler[c] > limit {
						t.Errorf("caller %d has %d streams in handlers, limit %d", c, inHandler[c], limit)
					}
					mu.Unlock()
					runtime.Gosched() // let others overlap this stream
					mu.Lock()
					inHandler[c]--
					mu.Unlock()
					return nil
				})
			}
		})
	}
	wg.Wait()
	if got := l.Stats(); got.Open != 0 || got.Identities != 0 {
		t.Errorf("Stats = %+v, want nothing open or tracked", got)
	}
}

// TestWarnRate: a burst of refusals logs one warning; the next comes
// after warnEvery.
func TestWarnRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		l, err := New(Config{PerIdentity: 1, Setting: "--grpc-max-streams-per-identity", Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		h := newHolder(t, l)
		ctx := caller("fleet", "10.0.0.1:1")
		if err := h.open(ctx); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			h.open(ctx)
		}
		time.Sleep(warnEvery)
		h.open(ctx)
		if got := strings.Count(buf.String(), "gRPC stream refused"); got != 2 {
			t.Errorf("%d warnings, want 2 (one per %v):\n%s", got, warnEvery, buf.String())
		}
		if !strings.Contains(buf.String(), "caller=fleet") || !strings.Contains(buf.String(), "setting=--grpc-max-streams-per-identity") {
			t.Errorf("warning = %q, want the caller and the setting", buf.String())
		}
		h.close()
	})
}

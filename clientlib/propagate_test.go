package clientlib_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/clientlib/propagate"
)

// sentRecorder is a client interceptor, given with WithDialOptions, that
// records the outgoing metadata of each RPC as the channel sends it (after
// WithPropagation's interceptor, which runs first).
type sentRecorder struct {
	mu   sync.Mutex
	sent []metadata.MD
}

func (r *sentRecorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	r.mu.Lock()
	r.sent = append(r.sent, md.Copy())
	r.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (r *sentRecorder) last() metadata.MD {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[len(r.sent)-1]
}

// TestWithPropagation: on the DNS channel and on the xDS channel, an RPC
// whose context carries x-traffic-class (propagate.With, or an incoming
// request through propagate's server interceptors) sends it; one that
// does not carries nothing; a value the caller set itself wins.
func TestWithPropagation(t *testing.T) {
	const key = "x-traffic-class"
	e := newEnv(t)
	for _, ch := range []clientlib.Channel{clientlib.DNS, clientlib.XDS} {
		t.Run(ch.String(), func(t *testing.T) {
			rec := &sentRecorder{}
			opts := []clientlib.Option{clientlib.WithPropagation(key), clientlib.WithDialOptions(grpc.WithChainUnaryInterceptor(rec.intercept))}
			if ch == clientlib.XDS {
				opts = append(opts, clientlib.WithRolloutFile(e.rollout(100)))
			}
			c := e.dial("caller-prop-"+ch.String(), opts...)
			if d, ok := waitFor(10*time.Second, onChannel(c, ch)); !ok {
				t.Fatalf("not on %v after %v: %+v", ch, d, c.Status())
			}
			hc := healthpb.NewHealthClient(c)
			for _, tt := range []struct {
				name string
				ctx  func(context.Context) context.Context
				want []string
			}{
				{"tagged", func(ctx context.Context) context.Context { return propagate.With(ctx, key, "synthetic") }, []string{"synthetic"}},
				{"untagged", func(ctx context.Context) context.Context { return ctx }, nil},
				{"explicit-wins", func(ctx context.Context) context.Context {
					return metadata.AppendToOutgoingContext(propagate.With(ctx, key, "synthetic"), key, "prod")
				}, []string{"prod"}},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := hc.Check(tt.ctx(ctx), &healthpb.HealthCheckRequest{})
				cancel()
				if err != nil {
					t.Fatalf("%s: %v", tt.name, err)
				}
				if got := rec.last()[key]; !cmp.Equal(got, tt.want) {
					t.Errorf("%s: sent %s = %q, want %q", tt.name, key, got, tt.want)
				}
			}
			if got := c.Status().Channel; got != ch {
				t.Errorf("RPCs ran on %v, want %v", got, ch)
			}
		})
	}
}

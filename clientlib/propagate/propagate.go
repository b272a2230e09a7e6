package propagate

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// A Propagator carries its keys from incoming requests to the outgoing
// RPCs made with their context. It is immutable and safe for concurrent
// use.
type Propagator struct {
	keys   []string // read-only after New
	logger *slog.Logger
}

// New validates cfg and returns a Propagator. The error names the bad
// field (e.g. "keys[1]: ...") and wraps ErrInvalidKey.
func New(cfg Config) (*Propagator, error) {
	if err := validateKeys(cfg.Keys); err != nil {
		return nil, fmt.Errorf("propagate: %w", err)
	}
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &Propagator{keys: slices.Clone(cfg.Keys), logger: l.With("component", "propagate")}, nil
}

// Keys returns the keys p carries, in the order configured.
func (p *Propagator) Keys() []string { return slices.Clone(p.keys) }

// ctxKey is the context key of the carried values.
type ctxKey struct{}

// carried is what a context carries: key -> values. Immutable once in a
// context; every change makes a new map.
type carried map[string][]string

func carriedFrom(ctx context.Context) carried {
	c, _ := ctx.Value(ctxKey{}).(carried)
	return c
}

// With returns a context that carries value under key, in place of what
// ctx carried under it: the way to tag calls at an edge that is neither
// gRPC nor HTTP (a queue consumer, a batch job), or to change the class
// for the calls a handler makes. The key is carried only by Propagators
// configured with it, and the value only if it is within bounds (printable
// ASCII, at most MaxValueLen bytes); an outgoing interceptor leaves out
// what is not.
func With(ctx context.Context, key, value string) context.Context {
	c := maps.Clone(carriedFrom(ctx))
	if c == nil {
		c = carried{}
	}
	c[key] = []string{value}
	return context.WithValue(ctx, ctxKey{}, c)
}

// Without returns a context that carries nothing under key: calls made
// with it are not tagged with key, whatever the incoming request said.
func Without(ctx context.Context, key string) context.Context {
	c := carriedFrom(ctx)
	if _, ok := c[key]; !ok {
		return ctx
	}
	c = maps.Clone(c)
	delete(c, key)
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns a copy of what ctx carries, every key, as metadata
// (nil when it carries nothing): for logs, or for a hand-written edge.
func FromContext(ctx context.Context) metadata.MD {
	c := carriedFrom(ctx)
	if len(c) == 0 {
		return nil
	}
	md := make(metadata.MD, len(c))
	for k, vs := range c {
		md[k] = slices.Clone(vs)
	}
	return md
}

// inBounds reports why values may not be carried, or "" if they may.
func inBounds(values []string) string {
	if len(values) > MaxValues {
		return "too many values"
	}
	for _, v := range values {
		if len(v) > MaxValueLen {
			return "value too long"
		}
		for _, c := range []byte(v) {
			if c < 0x20 || c > 0x7e {
				return "value not printable ASCII"
			}
		}
	}
	return ""
}

// lift returns ctx carrying, for each of p's keys that get returns values
// for, those values, in place of what ctx carried under the key. Values
// out of bounds are not carried (and the key keeps nothing).
func (p *Propagator) lift(ctx context.Context, get func(key string) []string) context.Context {
	var c carried
	for _, k := range p.keys {
		vs := get(k)
		if len(vs) == 0 {
			continue
		}
		if c == nil {
			c = maps.Clone(carriedFrom(ctx))
			if c == nil {
				c = carried{}
			}
		}
		if why := inBounds(vs); why != "" {
			p.logger.Debug("incoming value not carried", "key", k, "reason", why, "values", len(vs))
			delete(c, k)
			continue
		}
		c[k] = slices.Clone(vs)
	}
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, c)
}

// liftMD lifts p's keys from incoming gRPC metadata.
func (p *Propagator) liftMD(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return p.lift(ctx, func(k string) []string { return md[k] })
}

// outgoing returns ctx with p's carried keys appended to its outgoing
// metadata, except keys the caller already set there: an explicit value
// wins.
func (p *Propagator) outgoing(ctx context.Context) context.Context {
	c := carriedFrom(ctx)
	if len(c) == 0 {
		return ctx
	}
	out, _ := metadata.FromOutgoingContext(ctx)
	var kv []string
	for _, k := range p.keys {
		vs, ok := c[k]
		if !ok || len(out[k]) > 0 {
			continue
		}
		if why := inBounds(vs); why != "" {
			p.logger.Debug("carried value not sent", "key", k, "reason", why, "values", len(vs))
			continue
		}
		for _, v := range vs {
			kv = append(kv, k, v)
		}
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// UnaryServerInterceptor lifts p's keys from the incoming metadata into
// the handler's context.
func (p *Propagator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(p.liftMD(ctx), req)
	}
}

// StreamServerInterceptor lifts p's keys from the incoming metadata into
// the context the handler's stream returns.
func (p *Propagator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx := p.liftMD(ss.Context())
		if ctx == ss.Context() {
			return h(srv, ss)
		}
		return h(srv, &serverStream{ServerStream: ss, ctx: ctx})
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

// UnaryClientInterceptor adds the values the RPC's context carries under
// p's keys to its outgoing metadata, unless the caller set the key there.
func (p *Propagator) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(p.outgoing(ctx), method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams.
func (p *Propagator) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(p.outgoing(ctx), desc, cc, method, opts...)
	}
}

// ServerOptions returns the server interceptors as options for
// grpc.NewServer. They are chained: other interceptors still apply.
func (p *Propagator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(p.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(p.StreamServerInterceptor()),
	}
}

// DialOptions returns the client interceptors as options for
// grpc.NewClient. They are chained: other interceptors still apply.
func (p *Propagator) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(p.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(p.StreamClientInterceptor()),
	}
}

// HTTP returns middleware that lifts p's keys from an incoming HTTP
// request's headers into its context, for an HTTP edge (a gateway, a web
// handler) whose handler then makes gRPC calls.
func (p *Propagator) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := p.lift(r.Context(), r.Header.Values)
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// SetHeaders adds the values ctx carries under p's keys to h, the headers
// of an outgoing HTTP request, except keys h already has: the HTTP
// counterpart of the client interceptors.
func (p *Propagator) SetHeaders(ctx context.Context, h http.Header) {
	c := carriedFrom(ctx)
	for _, k := range p.keys {
		vs, ok := c[k]
		if !ok || len(h.Values(k)) > 0 || inBounds(vs) != "" {
			continue
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

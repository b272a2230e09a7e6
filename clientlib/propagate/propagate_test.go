package propagate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/spillway/spillway/clientlib/propagate"
)

const tc = "x-traffic-class"

func mustNew(t *testing.T, keys ...string) *propagate.Propagator {
	t.Helper()
	p, err := propagate.New(propagate.Config{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hop runs one server hop: an incoming RPC with metadata in goes through
// server's unary interceptor to a handler that applies handler to its
// context and makes one outgoing RPC through client's unary interceptor.
// It returns the outgoing RPC's metadata as the transport would send it.
func hop(t *testing.T, server, client *propagate.Propagator, in metadata.MD, handler func(context.Context) context.Context) metadata.MD {
	t.Helper()
	var sent metadata.MD
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		sent, _ = metadata.FromOutgoingContext(ctx)
		return nil
	}
	h := func(ctx context.Context, _ any) (any, error) {
		if handler != nil {
			ctx = handler(ctx)
		}
		return nil, client.UnaryClientInterceptor()(ctx, "/svc/M", nil, nil, nil, invoker)
	}
	ctx := context.Background()
	if in != nil {
		ctx = metadata.NewIncomingContext(ctx, in)
	}
	if _, err := server.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/In"}, h); err != nil {
		t.Fatal(err)
	}
	return sent
}

func TestCarry(t *testing.T) {
	long := strings.Repeat("a", propagate.MaxValueLen)
	tests := []struct {
		name    string
		keys    []string // server and client, unless clientKeys
		client  []string
		in      metadata.MD
		handler func(context.Context) context.Context
		want    metadata.MD // sent, nil for nothing
	}{
		{name: "propagated", keys: []string{tc}, in: metadata.Pairs(tc, "synthetic"), want: metadata.Pairs(tc, "synthetic")},
		{name: "absent", keys: []string{tc}, in: metadata.Pairs("x-other", "1"), want: nil},
		{name: "no-incoming-metadata", keys: []string{tc}, in: nil, want: nil},
		{name: "other-keys-not-carried", keys: []string{tc}, in: metadata.Pairs(tc, "synthetic", "x-user", "bob", "authorization", "secret"), want: metadata.Pairs(tc, "synthetic")},
		{name: "two-keys", keys: []string{tc, "x-tenant"}, in: metadata.Pairs("x-tenant", "t1", tc, "synthetic"), want: metadata.Pairs(tc, "synthetic", "x-tenant", "t1")},
		{name: "client-sends-only-its-keys", keys: []string{tc, "x-tenant"}, client: []string{tc}, in: metadata.Pairs("x-tenant", "t1", tc, "synthetic"), want: metadata.Pairs(tc, "synthetic")},
		{name: "several-values", keys: []string{tc}, in: metadata.MD{tc: {"a", "b"}}, want: metadata.MD{tc: {"a", "b"}}},
		{
			name: "explicit-value-wins", keys: []string{tc}, in: metadata.Pairs(tc, "synthetic"),
			handler: func(ctx context.Context) context.Context { return metadata.AppendToOutgoingContext(ctx, tc, "prod") },
			want:    metadata.Pairs(tc, "prod"),
		},
		{
			name: "explicit-other-key-kept", keys: []string{tc}, in: metadata.Pairs(tc, "synthetic"),
			handler: func(ctx context.Context) context.Context {
				return metadata.AppendToOutgoingContext(ctx, "x-caller", "a")
			},
			want: metadata.Pairs(tc, "synthetic", "x-caller", "a"),
		},
		{
			name: "with-replaces-incoming", keys: []string{tc}, in: metadata.Pairs(tc, "synthetic"),
			handler: func(ctx context.Context) context.Context { return propagate.With(ctx, tc, "batch") },
			want:    metadata.Pairs(tc, "batch"),
		},
		{
			name: "with-tags-untagged", keys: []string{tc}, in: nil,
			handler: func(ctx context.Context) context.Context { return propagate.With(ctx, tc, "batch") },
			want:    metadata.Pairs(tc, "batch"),
		},
		{
			name: "with-unconfigured-key-not-sent", keys: []string{tc}, in: nil,
			handler: func(ctx context.Context) context.Context { return propagate.With(ctx, "x-other", "1") },
			want:    nil,
		},
		{
			name: "with-value-out-of-bounds-not-sent", keys: []string{tc}, in: nil,
			handler: func(ctx context.Context) context.Context { return propagate.With(ctx, tc, "a\nb") },
			want:    nil,
		},
		{
			name: "without-removes", keys: []string{tc}, in: metadata.Pairs(tc, "synthetic"),
			handler: func(ctx context.Context) context.Context { return propagate.Without(ctx, tc) },
			want:    nil,
		},
		{name: "longest-value", keys: []string{tc}, in: metadata.Pairs(tc, long), want: metadata.Pairs(tc, long)},
		{name: "value-too-long", keys: []string{tc}, in: metadata.Pairs(tc, long+"a"), want: nil},
		{name: "most-values", keys: []string{tc}, in: metadata.MD{tc: {"1", "2", "3", "4"}}, want: metadata.MD{tc: {"1", "2", "3", "4"}}},
		{name: "too-many-values", keys: []string{tc}, in: metadata.MD{tc: {"1", "2", "3", "4", "5"}}, want: nil},
		{name: "not-printable", keys: []string{tc}, in: metadata.Pairs(tc, "syn\x7fthetic"), want: nil},
		{name: "bad-key-value-dropped-good-kept", keys: []string{tc, "x-tenant"}, in: metadata.Pairs(tc, long+"a", "x-tenant", "t1"), want: metadata.Pairs("x-tenant", "t1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ck := tt.client
			if ck == nil {
				ck = tt.keys
			}
			got := hop(t, mustNew(t, tt.keys...), mustNew(t, ck...), tt.in, tt.handler)
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("sent metadata (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStreamInterceptors: the stream interceptors carry as the unary ones.
func TestStreamInterceptors(t *testing.T) {
	p := mustNew(t, tc)
	var sent metadata.MD
	streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		sent, _ = metadata.FromOutgoingContext(ctx)
		return nil, nil
	}
	h := func(_ any, ss grpc.ServerStream) error {
		_, err := p.StreamClientInterceptor()(ss.Context(), &grpc.StreamDesc{}, nil, "/svc/M", streamer)
		return err
	}
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tc, "synthetic"))
	if err := p.StreamServerInterceptor()(nil, fakeStream{ctx: in}, &grpc.StreamServerInfo{}, h); err != nil {
		t.Fatal(err)
	}
	if got, want := sent[tc], []string{"synthetic"}; !cmp.Equal(got, want) {
		t.Errorf("sent %s = %q, want %q", tc, got, want)
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestNewRefusesBadKeys(t *testing.T) {
	many := make([]string, propagate.MaxKeys+1)
	for i := range many {
		many[i] = "x-k" + strings.Repeat("a", i)
	}
	tests := []struct {
		name  string
		keys  []string
		field string // in the error
	}{
		{name: "none", keys: nil, field: "keys:"},
		{name: "empty", keys: []string{""}, field: "keys[0]"},
		{name: "upper-case", keys: []string{tc, "X-Tenant"}, field: "keys[1]"},
		{name: "space", keys: []string{"x tenant"}, field: "keys[0]"},
		{name: "colon", keys: []string{":authority"}, field: "keys[0]"},
		{name: "grpc-prefix", keys: []string{"grpc-timeout"}, field: "keys[0]"},
		{name: "bin-suffix", keys: []string{"x-trace-bin"}, field: "keys[0]"},
		{name: "content-type", keys: []string{"content-type"}, field: "keys[0]"},
		{name: "authorization", keys: []string{"authorization"}, field: "keys[0]"},
		{name: "cookie", keys: []string{tc, "cookie"}, field: "keys[1]"},
		{name: "te", keys: []string{"te"}, field: "keys[0]"},
		{name: "too-long", keys: []string{strings.Repeat("x", propagate.MaxKeyLen+1)}, field: "keys[0]"},
		{name: "duplicate", keys: []string{tc, "x-tenant", tc}, field: "keys[2]"},
		{name: "too-many", keys: many, field: "keys:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := propagate.New(propagate.Config{Keys: tt.keys})
			if !errors.Is(err, propagate.ErrInvalidKey) {
				t.Fatalf("New(%q) = %v, want an error wrapping ErrInvalidKey", tt.keys, err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("New(%q) = %q, want it to name %s", tt.keys, err, tt.field)
			}
		})
	}
	for _, ok := range [][]string{{tc}, {"x_a.b-1"}, {strings.Repeat("x", propagate.MaxKeyLen)}, many[:propagate.MaxKeys]} {
		if _, err := propagate.New(propagate.Config{Keys: ok}); err != nil {
			t.Errorf("New(%q) = %v, want no error", ok, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "x-traffic-class", want: []string{tc}},
		{in: " x-traffic-class , x-tenant ", want: []string{tc, "x-tenant"}},
		{in: "", wantErr: "keys:"},
		{in: "  ", wantErr: "keys:"},
		{in: "x-a,,x-b", wantErr: "keys[1]"},
		{in: "x-a,X-B", wantErr: "keys[1]"},
		{in: "x-a,x-a", wantErr: "keys[1]"},
		{in: "x-a,grpc-b", wantErr: "keys[1]"},
		{in: strings.Repeat("x,", propagate.MaxKeys) + "x", wantErr: "keys:"},
	}
	for _, tt := range tests {
		got, err := propagate.ParseKeys(tt.in)
		if tt.wantErr != "" {
			if err == nil || !errors.Is(err, propagate.ErrInvalidKey) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseKeys(%q) = %q, %v; want an error naming %s", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !cmp.Equal(got, tt.want) {
			t.Errorf("ParseKeys(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseKeys: whatever ParseKeys accepts, New accepts, and it parses
// back to itself once joined again.
func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{"x-traffic-class", "x-traffic-class, x-tenant", "", ",", "grpc-x", "X-A", "a-bin", "a,a", "content-type", "x.y_z-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := propagate.ParseKeys(s)
		if err != nil {
			if !errors.Is(err, propagate.ErrInvalidKey) {
				t.Fatalf("ParseKeys(%q) error %v does not wrap ErrInvalidKey", s, err)
			}
			return
		}
		if len(keys) == 0 || len(keys) > propagate.MaxKeys {
			t.Fatalf("ParseKeys(%q) = %d keys", s, len(keys))
		}
		p, err := propagate.New(propagate.Config{Keys: keys})
		if err != nil {
			t.Fatalf("ParseKeys(%q) = %q but New refuses it: %v", s, keys, err)
		}
		again, err := propagate.ParseKeys(strings.Join(p.Keys(), ","))
		if err != nil || !cmp.Equal(again, keys) {
			t.Fatalf("round trip of %q: %q, %v; want %q", s, again, err, keys)
		}
	})
}

func TestHTTP(t *testing.T) {
	p := mustNew(t, tc, "x-tenant")
	var got metadata.MD
	h := p.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = propagate.FromContext(r.Context())
	}))
	for _, tt := range []struct {
		name   string
		header http.Header
		want   metadata.MD
	}{
		{name: "lifted", header: http.Header{"X-Traffic-Class": {"synthetic"}, "Authorization": {"secret"}}, want: metadata.Pairs(tc, "synthetic")},
		{name: "absent", header: http.Header{"X-Other": {"1"}}, want: nil},
		{name: "too-long", header: http.Header{"X-Traffic-Class": {strings.Repeat("a", propagate.MaxValueLen+1)}, "X-Tenant": {"t"}}, want: metadata.Pairs("x-tenant", "t")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			r := httptest.NewRequest("GET", "/", nil)
			r.Header = tt.header
			h.ServeHTTP(httptest.NewRecorder(), r)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("carried (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetHeaders(t *testing.T) {
	p := mustNew(t, tc, "x-tenant")
	ctx := propagate.With(propagate.With(context.Background(), tc, "synthetic"), "x-tenant", "t1")
	h := http.Header{"X-Tenant": {"explicit"}}
	p.SetHeaders(ctx, h)
	want := http.Header{"X-Traffic-Class": {"synthetic"}, "X-Tenant": {"explicit"}}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
}

// TestContextImmutable: With and Without leave the parent context as it was.
func TestContextImmutable(t *testing.T) {
	parent := propagate.With(context.Background(), tc, "a")
	child := propagate.With(parent, tc, "b")
	gone := propagate.Without(child, tc)
	for _, c := range []struct {
		name string
		ctx  context.Context
		want metadata.MD
	}{
		{"parent", parent, metadata.Pairs(tc, "a")},
		{"child", child, metadata.Pairs(tc, "b")},
		{"without", gone, nil},
	} {
		if got := propagate.FromContext(c.ctx); !cmp.Equal(got, c.want) {
			t.Errorf("%s carries %v, want %v", c.name, got, c.want)
		}
	}
	md := propagate.FromContext(parent)
	md[tc][0] = "changed"
	if got := propagate.FromContext(parent)[tc][0]; got != "a" {
		t.Errorf("FromContext returned the context's own slice: after a change it carries %q", got)
	}
}

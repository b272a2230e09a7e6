package serverinfo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// The service and its one method, as on the wire.
const (
	ServiceName = "spillway.info.v1.ServerInfo"
	GetMethod   = "/" + ServiceName + "/Get"
)

// Fields of the Get answer (a google.protobuf.Struct).
const (
	fieldHTTPAddr = "http_addr"
	fieldHTTPTLS  = "http_tls"
)

// ErrNotServed is returned (errors.Is) by Lookup when the server does not
// serve ServerInfo: a release older than this package.
var ErrNotServed = errors.New(ServiceName + " is not served")

// Info is what a server tells about itself.
type Info struct {
	// HTTPAddr is the HTTP listener's address as bound, host:port; the
	// host may be a wildcard ("[::]:18080", "0.0.0.0:18080", ":18080").
	// "" means the server did not say.
	HTTPAddr string
	// TLS reports whether the HTTP listener speaks only TLS.
	TLS bool
}

// Register adds the ServerInfo service to s, answering info to every Get.
// info.HTTPAddr should be the bound listener's address
// (httpLis.Addr().String()), which holds the real port of a ":0" flag.
func Register(s grpc.ServiceRegistrar, info Info) {
	s.RegisterService(&serviceDesc, &server{answer: info.proto()})
}

// Lookup asks the server behind conn for its Info. conn carries the
// caller's credentials (TLS, token) as for any other call. A server
// without the service fails with ErrNotServed; any other error is the
// call's, with its gRPC status.
func Lookup(ctx context.Context, conn grpc.ClientConnInterface) (Info, error) {
	out := new(structpb.Struct)
	if err := conn.Invoke(ctx, GetMethod, &emptypb.Empty{}, out); err != nil {
		if status.Code(err) == codes.Unimplemented {
			return Info{}, fmt.Errorf("%w: %w", ErrNotServed, err)
		}
		return Info{}, err
	}
	f := out.GetFields()
	return Info{HTTPAddr: f[fieldHTTPAddr].GetStringValue(), TLS: f[fieldHTTPTLS].GetBoolValue()}, nil
}

// HTTPAddrFor returns the host:port at which a client that reached the
// server's gRPC port by dialling target (host:port, or a dns:/// or
// passthrough:/// target) reaches its HTTP API:
//
//   - HTTPAddr as it is when its host is a specific, non-loopback one;
//   - the host of target with HTTPAddr's port when HTTPAddr's host is a
//     wildcard ("", 0.0.0.0, ::): the server listens on every address, so
//     the one the client dialled works;
//   - for a loopback HTTPAddr (127.0.0.1, ::1, localhost), HTTPAddr when
//     target is on loopback too, else target's host with HTTPAddr's port:
//     a remote client never talks to a process of its own machine, and a
//     tunnel that forwards both ports works.
//
// The error says why no address can be made (HTTPAddr empty or not
// host:port, a target without a host such as unix:).
func (i Info) HTTPAddrFor(target string) (string, error) {
	if i.HTTPAddr == "" {
		return "", errors.New("the server reported no HTTP address")
	}
	host, port, err := net.SplitHostPort(i.HTTPAddr)
	if err != nil || port == "" {
		return "", fmt.Errorf("the server reported HTTP address %q, want host:port", i.HTTPAddr)
	}
	if !isWildcard(host) && !isLoopback(host) {
		return net.JoinHostPort(host, port), nil
	}
	th, err := TargetHost(target)
	if err != nil {
		return "", err
	}
	if isLoopback(host) && (th == "" || isLoopback(th)) {
		return net.JoinHostPort(host, port), nil
	}
	if th == "" { // ":18000" dials this machine
		th = "localhost"
	}
	return net.JoinHostPort(th, port), nil
}

// TargetHost returns the host a gRPC target dials: "host:port", "host"
// (gRPC's default port), "[v6]:port", dns:///host:port,
// dns://AUTHORITY/host:port, passthrough:///host:port; "" for ":port".
// A target without a host (unix:, xds:///...) is an error. A TLS client
// verifies the server's certificate against this name.
func TargetHost(target string) (string, error) {
	hostport := target
	if scheme, rest, ok := strings.Cut(target, "://"); ok {
		if scheme != "dns" && scheme != "passthrough" {
			return "", fmt.Errorf("target %q has no host the HTTP API could be on", target)
		}
		_, hostport, _ = strings.Cut(rest, "/") // drops dns://AUTHORITY/
	} else if s, _, ok := strings.Cut(target, ":"); ok && (s == "unix" || s == "unix-abstract" || s == "vsock") {
		return "", fmt.Errorf("target %q has no host the HTTP API could be on", target)
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil { // no port (gRPC's default, 443): the whole is the host
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	return host, nil
}

func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsUnspecified()
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (i Info) proto() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		fieldHTTPAddr: structpb.NewStringValue(i.HTTPAddr),
		fieldHTTPTLS:  structpb.NewBoolValue(i.TLS),
	}}
}

// getter is the service's handler type, for grpc.ServiceDesc.
type getter interface {
	get(ctx context.Context, in *emptypb.Empty) (*structpb.Struct, error)
}

// server answers Get. Read-only after Register: answer is marshaled
// concurrently, never changed.
type server struct{ answer *structpb.Struct }

func (s *server) get(context.Context, *emptypb.Empty) (*structpb.Struct, error) { return s.answer, nil }

// serviceDesc is what protoc-gen-go-grpc would generate for
//
//	service ServerInfo { rpc Get(google.protobuf.Empty) returns (google.protobuf.Struct); }
//
// including the interceptor call, so that the server's interceptors run.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*getter)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			g := srv.(getter)
			if interceptor == nil {
				return g.get(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: GetMethod}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return g.get(ctx, req.(*emptypb.Empty))
			})
		},
	}},
	// No Metadata: there is no .proto file of the service to name.
}

package authn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/internal/httpjson"
)

// TokenLookup finds the identity of a bearer token. *TokenSet and
// *TokenFile implement it. Lookup is called concurrently.
type TokenLookup interface {
	Lookup(token string) (Identity, bool)
}

// MaxTokenLen bounds a bearer token; a longer one is refused unhashed.
const MaxTokenLen = 4096

// Authenticator establishes the caller's identity for the gRPC server
// (interceptors) and the HTTP server (Middleware):
//
//   - a client certificate verified against --client-ca wins: its first
//     URI SAN, else its first DNS SAN (FromTLS); a verified certificate
//     without a usable name is refused;
//   - else "authorization: Bearer TOKEN" (gRPC metadata, HTTP header)
//     must be a known token, or the call fails Unauthenticated / 401;
//   - else the caller is anonymous.
//
// The authorization header is left in place, so handlers that still
// check the admin token themselves keep working. Safe for concurrent
// use.
type Authenticator struct {
	tokens TokenLookup // or nil: no token is known
	log    *slog.Logger
}

// NewAuthenticator returns an authenticator that looks bearer tokens up
// in tokens (nil knows none). log may be nil.
func NewAuthenticator(tokens TokenLookup, log *slog.Logger) *Authenticator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authenticator{tokens: tokens, log: log}
}

// Authenticate returns the identity of a caller whose TLS state is
// state (nil for plaintext) and whose authorization header values are
// authorization. The error is an *Error.
func (a *Authenticator) Authenticate(state *tls.ConnectionState, authorization []string) (Identity, error) {
	if state != nil {
		id, err := fromTLS(*state)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, errNoVerifiedChain) {
			return Identity{}, err
		}
	}
	switch len(authorization) {
	case 0:
		return Identity{Method: None}, nil
	case 1:
	default:
		return Identity{}, &Error{Field: "authorization", Reason: fmt.Sprintf("given %d times, want one", len(authorization))}
	}
	token, err := ParseBearer(authorization[0])
	if err != nil {
		return Identity{}, err
	}
	if a.tokens != nil {
		if id, ok := a.tokens.Lookup(token); ok {
			return id, nil
		}
	}
	if n, ok := a.tokens.(interface{ Len() int }); a.tokens == nil || ok && n.Len() == 0 {
		return Identity{}, &Error{Field: "authorization", Reason: "unknown token: this server has no tokens (start it with --tokens-file or --admin-token-file)"}
	}
	return Identity{}, &Error{Field: "authorization", Reason: "unknown token"}
}

// ParseBearer returns the token of an authorization header value
// "Bearer TOKEN" (the scheme in any case). The error is an *Error naming
// "authorization".
func ParseBearer(value string) (string, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(value), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", &Error{Field: "authorization", Reason: `want "Bearer <token>"`}
	}
	token = strings.TrimSpace(token)
	switch {
	case token == "":
		return "", &Error{Field: "authorization", Reason: `want "Bearer <token>", got no token`}
	case len(token) > MaxTokenLen:
		return "", &Error{Field: "authorization", Reason: fmt.Sprintf("token of %d bytes, want at most %d", len(token), MaxTokenLen)}
	case strings.ContainsAny(token, " \t\r\n"):
		return "", &Error{Field: "authorization", Reason: "the token has whitespace inside, want one word"}
	}
	return token, nil
}

// grpcIdentity authenticates a gRPC call from its peer and metadata.
func (a *Authenticator) grpcIdentity(ctx context.Context) (context.Context, error) {
	var state *tls.ConnectionState
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			state = &ti.State
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	id, err := a.Authenticate(state, md.Get("authorization"))
	if err != nil {
		a.log.Debug("unauthenticated call", "err", err)
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return NewContext(ctx, id), nil
}

// UnaryServerInterceptor puts the caller's Identity in the context of
// every unary call, or fails it with codes.Unauthenticated.
func (a *Authenticator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.grpcIdentity(ctx)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor puts the caller's Identity in the context of
// every stream, or fails it with codes.Unauthenticated before the
// handler runs.
func (a *Authenticator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.grpcIdentity(ss.Context())
		if err != nil {
			return err
		}
		return handler(srv, &identityStream{ServerStream: ss, ctx: ctx})
	}
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }

// Middleware puts the caller's Identity in the request's context, or
// answers 401 with the JSON error body the APIs use:
// {"error":"authorization: unknown token","field":"authorization","code":401}.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.Authenticate(r.TLS, r.Header.Values("Authorization"))
		if err != nil {
			a.log.Debug("unauthenticated request", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			WriteHTTPError(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), id)))
	})
}

// WriteHTTPError answers 401 for err (an *Error, or any error as the
// message), with WWW-Authenticate: Bearer.
func WriteHTTPError(w http.ResponseWriter, err error) {
	field := ""
	var e *Error
	if errors.As(err, &e) {
		field = e.Field
	}
	w.Header().Set("WWW-Authenticate", "Bearer")
	httpjson.WriteError(w, http.StatusUnauthorized, field, err.Error())
}

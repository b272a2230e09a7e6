// Package authn carries the identity of the caller of an API call: the
// SPIFFE (or other) URI SAN or DNS SAN of a verified client certificate,
// or the name a bearer token stands for. The gRPC interceptors and HTTP
// middleware that establish it put it in the request's context; handlers
// read it with FromContext.
package authn

import "context"

// Method is how a caller proved its identity.
type Method string

// Methods.
const (
	// None: no credentials (plaintext, no token); the identity is
	// anonymous.
	None Method = "none"
	// Certificate: a client certificate that chains to --client-ca.
	Certificate Method = "certificate"
	// Token: a bearer token from one of the token files.
	Token Method = "token"
)

// Identity is who is calling. The zero value is the anonymous caller.
type Identity struct {
	// Name is the certificate's first URI SAN (e.g.
	// "spiffe://example.org/ns/prod/sa/payments"), else its first DNS
	// SAN; or the identity name a token file gives its token. "" when
	// anonymous.
	Name string
	// Method is how Name was proved.
	Method Method
}

// Anonymous reports whether the caller presented no credentials.
func (id Identity) Anonymous() bool { return id.Name == "" }

// String is the identity as logs, audit entries and denials name it:
// "anonymous", or Name.
func (id Identity) String() string {
	if id.Anonymous() {
		return "anonymous"
	}
	return id.Name
}

type ctxKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity NewContext put in ctx, or the
// anonymous identity.
func FromContext(ctx context.Context) Identity {
	id, _ := ctx.Value(ctxKey{}).(Identity)
	if id.Method == "" {
		id.Method = None
	}
	return id
}

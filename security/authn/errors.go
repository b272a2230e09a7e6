package authn

import "errors"

// ErrUnauthenticated matches (errors.Is) every *Error: credentials were
// presented and are not good (an unknown token, a malformed
// authorization header, a verified certificate without a usable name).
// gRPC edges map it to Unauthenticated, HTTP edges to 401.
var ErrUnauthenticated = errors.New("unauthenticated")

// Error says which credential failed and why, e.g.
// "authorization: unknown token".
type Error struct {
	// Field is the credential: "authorization" (the bearer header) or
	// "certificate..." (the client certificate).
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrUnauthenticated) true.
func (e *Error) Is(target error) bool { return target == ErrUnauthenticated }

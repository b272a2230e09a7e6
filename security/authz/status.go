package authz

import (
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/security/authn"

	"github.com/spillway/spillway/internal/httpjson"
)

// ToStatus maps err for a gRPC edge: a *Denied to PermissionDenied, an
// authn error (authn.ErrUnauthenticated) to Unauthenticated, each with
// err's message; nil and other errors are returned as they are.
func ToStatus(err error) error {
	var d *Denied
	switch {
	case err == nil:
		return nil
	case errors.As(err, &d):
		return status.Error(codes.PermissionDenied, d.Error())
	case errors.Is(err, authn.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return err
}

// WriteHTTPError answers err at an HTTP edge when it is a *Denied (403)
// or an authn error (401), in the JSON error body the APIs use:
// {"error":"permission denied: ...","code":403}. It reports false, and
// writes nothing, for any other error.
func WriteHTTPError(w http.ResponseWriter, err error) bool {
	var d *Denied
	switch {
	case err == nil:
		return false
	case errors.As(err, &d):
		httpjson.WriteError(w, http.StatusForbidden, "", d.Error())
		return true
	case errors.Is(err, authn.ErrUnauthenticated):
		authn.WriteHTTPError(w, err)
		return true
	}
	return false
}

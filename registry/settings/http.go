package settings

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/internal/strictyaml"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// Paths returns the patterns to mount the kind's Handler on: Path and
// Path/.
func (k Kind[T]) Paths() []string { return []string{k.Path, k.Path + "/"} }

// Auth decides whether the request r may change service's setting. A
// refusal is answered by Auth (403, 401) and returns false. It is called
// from many goroutines at once.
type Auth func(w http.ResponseWriter, r *http.Request, service string) bool

// LogFunc is told each change requested; nil tells nothing.
type LogFunc func(msg string, args ...any)

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements it.
// A non-nil error is a denial whose message is the 403's. It is called
// from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// PolicyAuth lets az decide every change: Kind.Action on the service, for
// the identity the authn middleware put in the request's context. A
// denial is 403 with az's message; nil az refuses every change (403,
// Kind.Disabled).
func (s *Store[T]) PolicyAuth(az Authorizer, log LogFunc) Auth {
	return func(w http.ResponseWriter, r *http.Request, service string) bool {
		if az == nil {
			httpjson.WriteError(w, http.StatusForbidden, "", s.kind.Disabled)
			return false
		}
		if err := az.Authorize(r.Context(), s.kind.Action, service); err != nil {
			httpjson.WriteError(w, http.StatusForbidden, "", err.Error())
			return false
		}
		if log != nil {
			log(s.kind.Noun+" change requested", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "identity", authn.FromContext(r.Context()).String())
		}
		return true
	}
}

// TokenAuth lets a change through with "Authorization: Bearer TOKEN": 401
// without the header, 403 with a wrong token or when token is ""
// (changes disabled).
func (s *Store[T]) TokenAuth(token string, log LogFunc) Auth {
	var sum []byte
	if token != "" {
		h := sha256.Sum256([]byte(token))
		sum = h[:]
	}
	return func(w http.ResponseWriter, r *http.Request, _ string) bool {
		if sum == nil {
			httpjson.WriteError(w, http.StatusForbidden, "", "changes are disabled: start spillway with --admin-token-file FILE to allow them")
			return false
		}
		scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", "Bearer")
			httpjson.WriteError(w, http.StatusUnauthorized, "", `no admin token: send "Authorization: Bearer <token>" (spillwayctl: $SPILLWAY_ADMIN_TOKEN or --token)`)
			return false
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if subtle.ConstantTimeCompare(got[:], sum) != 1 {
			httpjson.WriteError(w, http.StatusForbidden, "", "wrong admin token")
			return false
		}
		if log != nil {
			log(s.kind.Noun+" change requested", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		}
		return true
	}
}

// HandlerConfig is what Handler needs besides the Store.
type HandlerConfig struct {
	// Auth decides every change; nil refuses them (403, Kind.Disabled).
	Auth Auth
	// View is the JSON of one service's setting: in the list (for each
	// service whose setting applies), for GET (the name normalised), and
	// after a DELETE or an undelete (the name as the request gave it).
	// Required.
	View func(service string) any
	// PutView, or nil for View, is the JSON after a PUT, given the name
	// as the request gave it.
	PutView func(service string) any
}

// Handler serves GET Path, GET|PUT|DELETE Path/{service} and, for a kind
// with tombstones, POST Path/{service}/undelete. PUT's body is the text
// (at most Kind.MaxBody bytes), set from SourceAPI. Every change asks
// hc.Auth first; a refused one changes nothing. Reads stay open. The
// kind's package may add its own routes to the mux.
func (s *Store[T]) Handler(hc HandlerConfig) *http.ServeMux {
	auth := hc.Auth
	if auth == nil {
		auth = s.PolicyAuth(nil, nil)
	}
	view, putView := hc.View, hc.PutView
	if putView == nil {
		putView = view
	}
	path := s.kind.Path
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
		out := []any{}
		for _, svc := range s.Services() {
			if _, _, ok := s.Get(svc); ok {
				out = append(out, view(svc))
			}
		}
		httpjson.Write(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET "+path+"/{service}", func(w http.ResponseWriter, r *http.Request) {
		svc, err := s.CheckService(r.PathValue("service"))
		if err != nil {
			s.Fail(w, err)
			return
		}
		s.setETag(w, svc)
		httpjson.Write(w, http.StatusOK, view(svc))
	})
	mux.HandleFunc("PUT "+path+"/{service}", func(w http.ResponseWriter, r *http.Request) {
		svc := r.PathValue("service")
		if !auth(w, r, svc) {
			return
		}
		cond, ok := s.precondition(w, r, svc)
		if !ok {
			return
		}
		body, ok := s.ReadBody(w, r)
		if !ok {
			return
		}
		var err error
		if cond != nil {
			_, err = s.SetIf(r.Context(), svc, body, *cond)
		} else {
			_, err = s.Set(r.Context(), svc, body, SourceAPI, "")
		}
		if err != nil {
			s.Fail(w, err)
			return
		}
		s.setETag(w, svc)
		httpjson.Write(w, http.StatusOK, putView(svc))
	})
	mux.HandleFunc("DELETE "+path+"/{service}", func(w http.ResponseWriter, r *http.Request) {
		svc := r.PathValue("service")
		if !auth(w, r, svc) {
			return
		}
		cond, ok := s.precondition(w, r, svc)
		if !ok {
			return
		}
		var err error
		if cond != nil {
			_, err = s.DeleteIf(r.Context(), svc, *cond)
		} else {
			_, err = s.Delete(r.Context(), svc, SourceAPI)
		}
		if err != nil {
			s.Fail(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, view(svc))
	})
	if s.tombstone > 0 {
		mux.HandleFunc("POST "+path+"/{service}/undelete", func(w http.ResponseWriter, r *http.Request) {
			svc := r.PathValue("service")
			if !auth(w, r, svc) {
				return
			}
			if _, err := s.Undelete(r.Context(), svc); err != nil {
				s.Fail(w, err)
				return
			}
			httpjson.Write(w, http.StatusOK, view(svc))
		})
	}
	return mux
}

// setETag sets the ETag of service's setting, its version in quotes,
// when it has one.
func (s *Store[T]) setETag(w http.ResponseWriter, service string) {
	if svc, err := s.CheckService(service); err == nil {
		if e, ok := s.current(svc); ok {
			w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(e.status.Version, 10)))
		}
	}
}

// precondition reads a write's condition (RFC 9110 13.1): If-Match with
// the ETag (or bare version) the caller read, `If-None-Match: *` for
// "only if there is none" (version 0). nil: unconditional. A malformed
// header is answered 400 and returns false.
func (s *Store[T]) precondition(w http.ResponseWriter, r *http.Request, service string) (*int64, bool) {
	if v := r.Header.Get("If-None-Match"); v != "" {
		if strings.TrimSpace(v) != "*" {
			httpjson.WriteError(w, http.StatusBadRequest, "If-None-Match", fmt.Sprintf("If-None-Match: %.40q: only * (create only) is supported", v))
			return nil, false
		}
		zero := int64(0)
		return &zero, true
	}
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return nil, true
	}
	if v == "*" {
		var e entry[T]
		ok := false
		if svc, err := s.CheckService(service); err == nil {
			e, ok = s.current(svc)
		}
		if !ok {
			httpjson.WriteError(w, http.StatusPreconditionFailed, "If-Match", fmt.Sprintf("If-Match: *: service %s has no %s", service, s.kind.Name))
			return nil, false
		}
		return &e.status.Version, true
	}
	unq := strings.TrimPrefix(v, "W/")
	if len(unq) >= 2 && unq[0] == '"' && unq[len(unq)-1] == '"' {
		unq = unq[1 : len(unq)-1]
	}
	n, err := strconv.ParseInt(unq, 10, 64)
	if err != nil || n < 1 {
		httpjson.WriteError(w, http.StatusBadRequest, "If-Match", fmt.Sprintf("If-Match: %.40q: want the ETag (a version in quotes, e.g. \"57\") a GET returned", v))
		return nil, false
	}
	return &n, true
}

// ReadBody reads a request's body of at most Kind.MaxBody bytes, for the
// kind's own routes; a failure is answered (400) and returns false.
func (s *Store[T]) ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody()))
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, "", fmt.Sprintf("body: %v", err))
		return nil, false
	}
	return body, true
}

// Fail answers err: a parse error 400 naming its field; the kind's own
// errors (Kind.HTTPError); a bad service name 400 (field "service"); a
// setting a file owns 409; no setting 404; the store down 503; else 500.
func (s *Store[T]) Fail(w http.ResponseWriter, err error) {
	if pe, ok := errors.AsType[*strictyaml.Error](err); ok {
		httpjson.WriteError(w, http.StatusBadRequest, pe.Field, err.Error())
		return
	}
	if s.kind.HTTPError != nil {
		if code, field, ok := s.kind.HTTPError(err); ok {
			httpjson.WriteError(w, code, field, err.Error())
			return
		}
	}
	switch {
	case errors.Is(err, systemstore.ErrConflict):
		httpjson.WriteError(w, http.StatusPreconditionFailed, "If-Match", err.Error())
	case errors.Is(err, s.kind.ErrInvalid):
		httpjson.WriteError(w, http.StatusBadRequest, "service", err.Error())
	case s.kind.ErrOwnedByFile != nil && errors.Is(err, s.kind.ErrOwnedByFile):
		httpjson.WriteError(w, http.StatusConflict, "", err.Error())
	case errors.Is(err, s.kind.ErrNotFound):
		httpjson.WriteError(w, http.StatusNotFound, "", err.Error())
	case errors.Is(err, systemstore.ErrUnavailable):
		httpjson.WriteError(w, http.StatusServiceUnavailable, "", err.Error())
	default:
		httpjson.WriteError(w, http.StatusInternalServerError, "", err.Error())
	}
}

// maxBody is the bound of a PUT's body.
func (s *Store[T]) maxBody() int64 {
	if s.kind.MaxBody > 0 {
		return s.kind.MaxBody
	}
	return 64 << 10
}

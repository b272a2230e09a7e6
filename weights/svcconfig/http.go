package svcconfig

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
	"github.com/spillway/spillway/weights/regions"
)

// Paths of the HTTP API; mount Handler on each.
var Paths = []string{"/v1/config", "/v1/config/"}

// Entry is the JSON of one service's config in the API.
type Entry struct {
	Service    string     `json:"service"`
	Configured bool       `json:"configured"` // false: the defaults apply
	Deleted    bool       `json:"deleted"`
	DeletedAt  *time.Time `json:"deleted_at,omitempty"`
	Until      *time.Time `json:"until,omitempty"`
	Source     string     `json:"source,omitempty"`
	File       string     `json:"file,omitempty"`
	Version    int64      `json:"version,omitempty"`
	UpdatedAt  *time.Time `json:"updated_at,omitempty"`
	Config     Config     `json:"config"`
	YAML       string     `json:"yaml,omitempty"`
	// Warnings (PUT only): what of the config, though valid, does not
	// apply now, naming the field, e.g. a redirect to a region where the
	// service has no healthy endpoint.
	Warnings []string `json:"warnings,omitempty"`
}

// EntryOf returns the API view of service.
func (s *Store) EntryOf(service string) Entry {
	cfg, st, ok := s.Get(service)
	e := Entry{Service: service, Configured: ok, Config: cfg}
	if !ok {
		return e
	}
	e.Deleted, e.Source, e.File, e.Version, e.YAML = st.Deleted, st.Source, st.File, st.Version, st.YAML
	e.UpdatedAt = &st.UpdatedAt
	if st.Deleted {
		e.DeletedAt, e.Until = &st.DeletedAt, &st.Until
	}
	return e
}

// Handler serves GET /v1/config, GET|PUT|DELETE /v1/config/{service} and
// POST /v1/config/{service}/undelete. Changes need "Authorization: Bearer
// TOKEN": 401 without the header, 403 with a wrong token or when token is
// "" (changes disabled).
func (s *Store) Handler(token string, log func(msg string, args ...any)) http.Handler {
	var sum []byte
	if token != "" {
		h := sha256.Sum256([]byte(token))
		sum = h[:]
	}
	auth := func(w http.ResponseWriter, r *http.Request, _ string) bool {
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
			log("service config change requested", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		}
		return true
	}
	return s.handler(auth)
}

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements it.
// A non-nil error is a denial whose message is the 403's. It is called
// from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// AuthorizedHandler is Handler with az deciding every change: action
// "config" on the service, for the identity the authn middleware put in
// the request's context (the admin token is identity "admin" there). A
// denial is 403 with az's message ("permission denied: IDENTITY may not
// config SERVICE") and changes nothing. Reads stay open.
func (s *Store) AuthorizedHandler(az Authorizer, log func(msg string, args ...any)) http.Handler {
	return s.handler(func(w http.ResponseWriter, r *http.Request, service string) bool {
		if err := az.Authorize(r.Context(), authz.Config, service); err != nil {
			httpjson.WriteError(w, http.StatusForbidden, "", err.Error())
			return false
		}
		if log != nil {
			log("service config change requested", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "identity", authn.FromContext(r.Context()).String())
		}
		return true
	})
}

// handler serves the API; auth decides a change of service and answers
// the refusal itself.
func (s *Store) handler(auth func(w http.ResponseWriter, r *http.Request, service string) bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, _ *http.Request) {
		out := []Entry{}
		for _, svc := range s.Services() {
			if e := s.EntryOf(svc); e.Configured {
				out = append(out, e)
			}
		}
		httpjson.Write(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/config/{service}", func(w http.ResponseWriter, r *http.Request) {
		svc, err := checkService(r.PathValue("service"))
		if err != nil {
			s.fail(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, s.EntryOf(svc))
	})
	mux.HandleFunc("PUT /v1/config/{service}", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r, r.PathValue("service")) {
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBytes))
		if err != nil {
			httpjson.WriteError(w, http.StatusBadRequest, "", fmt.Sprintf("body: %v", err))
			return
		}
		svc := r.PathValue("service")
		if _, err := s.Set(r.Context(), svc, body, SourceAPI, ""); err != nil {
			s.fail(w, err)
			return
		}
		e := s.EntryOf(svc)
		e.Warnings = s.warnings(svc, e.Config)
		httpjson.Write(w, http.StatusOK, e)
	})
	mux.HandleFunc("DELETE /v1/config/{service}", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r, r.PathValue("service")) {
			return
		}
		svc := r.PathValue("service")
		if _, err := s.Delete(r.Context(), svc, SourceAPI); err != nil {
			s.fail(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, s.EntryOf(svc))
	})
	mux.HandleFunc("POST /v1/config/{service}/undelete", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r, r.PathValue("service")) {
			return
		}
		svc := r.PathValue("service")
		if _, err := s.Undelete(r.Context(), svc); err != nil {
			s.fail(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, s.EntryOf(svc))
	})
	return mux
}

func (s *Store) fail(w http.ResponseWriter, err error) {
	var pe *Error
	switch {
	case errors.As(err, &pe):
		httpjson.WriteError(w, http.StatusBadRequest, pe.Field, err.Error())
	case errors.Is(err, ErrInvalid):
		httpjson.WriteError(w, http.StatusBadRequest, "service", err.Error())
	case errors.Is(err, ErrOwnedByFile):
		httpjson.WriteError(w, http.StatusConflict, "", err.Error())
	case errors.Is(err, ErrNotFound):
		httpjson.WriteError(w, http.StatusNotFound, "", err.Error())
	case errors.Is(err, systemstore.ErrUnavailable):
		httpjson.WriteError(w, http.StatusServiceUnavailable, "", err.Error())
	default:
		httpjson.WriteError(w, http.StatusInternalServerError, "", err.Error())
	}
}

// warnings lists the regional rules of cfg that do not apply now for want
// of endpoints (StoreConfig.Regions); nil without Regions or when all do.
func (s *Store) warnings(service string, cfg Config) []string {
	rules := cfg.RegionRules()
	if s.regions == nil || rules.Empty() {
		return nil
	}
	present, now := s.regions(service), s.now()
	var out []string
	for i, d := range rules.Redirects {
		if (d.Until.IsZero() || now.Before(d.Until)) && !slices.Contains(present, d.To) {
			out = append(out, fmt.Sprintf("redirects[%d].to: %s has no healthy endpoint of %s now: the redirect does not apply until it has one", i, d.To, service))
		}
	}
	active := rules.Active(now).Excludes
	left := slices.ContainsFunc(present, func(r string) bool {
		return !slices.ContainsFunc(active, func(e regions.Exclude) bool { return e.Region == r })
	})
	if len(present) > 0 && !left {
		out = append(out, fmt.Sprintf("exclude: leaves %s no region with endpoints (%s): nothing is excluded (fail open)", service, strings.Join(present, ", ")))
	}
	return out
}

package svcconfig

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spillway/spillway/registry/settings"
	"github.com/spillway/spillway/weights/regions"
)

// Paths of the HTTP API; mount Handler on each.
var Paths = kind.Paths()

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
	// apply now or not as written, naming the field: a redirect to a
	// region where the service has no healthy endpoint, or an
	// endpoint-picking policy (resilience.lb) that ignores or churns on
	// the PID weights the strategy computes.
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
	return s.handler(s.set.TokenAuth(token, log))
}

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements it.
// A non-nil error is a denial whose message is the 403's. It is called
// from many goroutines at once.
type Authorizer = settings.Authorizer

// AuthorizedHandler is Handler with az deciding every change: action
// "config" on the service, for the identity the authn middleware put in
// the request's context (the admin token is identity "admin" there). A
// denial is 403 with az's message ("permission denied: IDENTITY may not
// config SERVICE") and changes nothing. Reads stay open.
func (s *Store) AuthorizedHandler(az Authorizer, log func(msg string, args ...any)) http.Handler {
	return s.handler(s.set.PolicyAuth(az, log))
}

// handler serves the API (settings.Store.Handler); auth decides a change
// of service and answers the refusal itself. A PUT answers the config's
// warnings too.
func (s *Store) handler(auth settings.Auth) http.Handler {
	return s.set.Handler(settings.HandlerConfig{
		Auth: auth,
		View: func(svc string) any { return s.EntryOf(svc) },
		PutView: func(svc string) any {
			e := s.EntryOf(svc)
			e.Warnings = s.warnings(svc, e.Config)
			return e
		},
	})
}

// warnings lists the regional rules of cfg that do not apply now for want
// of endpoints (StoreConfig.Regions; none without Regions), then the
// resilience policies that do not combine well with cfg's strategy; nil
// when there are none.
func (s *Store) warnings(service string, cfg Config) []string {
	return append(s.regionWarnings(service, cfg), cfg.resilienceWarnings()...)
}

// regionWarnings lists the regional rules of cfg that do not apply now
// for want of endpoints; nil without Regions or when all do.
func (s *Store) regionWarnings(service string, cfg Config) []string {
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

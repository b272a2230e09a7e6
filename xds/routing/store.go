package routing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/spillway/spillway/registry/settings"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authz"
)

// KeyPrefix is where records live in the KV: routes/<service>.
const KeyPrefix = "routes/"

// Errors of the Store.
var (
	// ErrNoTarget: a rule names a service that is not registered (HTTP 409).
	ErrNoTarget = errors.New("no such target service")
	// ErrUnreachable: every target a rule gives weight to has no healthy
	// endpoint, so its RPCs would all fail (HTTP 409).
	ErrUnreachable = errors.New("unreachable")
	// ErrNotFound: the service has no rules (HTTP 404).
	ErrNotFound = errors.New("no route rules")
)

// Client is a client service (xDS node.cluster; "" when its node names
// none) and how many of its streams subscribe to a service.
type Client struct {
	Service string `json:"service"`
	Streams int    `json:"streams"`
}

// Targets tells the Store about the services rules send to; the
// registry implements it in cmd/spillway. It is called from many
// goroutines at once.
type Targets interface {
	// Target reports whether service is registered and how many of its
	// endpoints are healthy.
	Target(service string) (exists bool, healthy int)
}

// TargetsFunc adapts a function to Targets.
type TargetsFunc func(service string) (bool, int)

// Target calls f.
func (f TargetsFunc) Target(service string) (bool, int) { return f(service) }

var _ Targets = TargetsFunc(nil)

// Recorder receives an audit entry for every put and delete of a
// service's rules, and every refused or failed one. Record must not block
// for long and never fails the change. *audit.Log implements it.
type Recorder = settings.Recorder

// kind is the route rules as a setting (package registry/settings):
// records {yaml, updated_at} under KeyPrefix, action routes. Routes have
// no tombstones and no directory: the previous release decodes a route
// record leniently and would serve a tombstone ("deleted_at") as live
// rules, so a deleted rule set is removed from the KV, as it always was.
var kind = settings.Kind[Rules]{
	Name:            "routes",
	Noun:            "route rules",
	Prefix:          KeyPrefix,
	Path:            "/v1/routes",
	Parse:           Parse,
	MaxBody:         MaxBytes + 1, // as before: a body one byte too long reaches Parse, which names the limit
	Action:          authz.Routes,
	ErrInvalid:      ErrInvalid,
	ErrNotFound:     ErrNotFound,
	AuditNormalized: true,
	Disabled:        "route changes are disabled: no authorization is configured",
	HTTPError:       targetHTTPError,
}

// Status is where a service's rules stand.
type Status struct {
	YAML      string    // the rules as written
	Version   int64     // the KV revision of the record
	UpdatedAt time.Time // when they were set
}

// StoreConfig configures a Store.
type StoreConfig struct {
	// KV holds the records, shared by every replica; nil keeps them in
	// memory only.
	KV systemstore.KV
	// Targets is asked at Set whether targets exist and have healthy
	// endpoints, and by Broken; nil means every target exists, healthy.
	Targets Targets
	// Check, or nil, refuses rules whose route configuration a client
	// would reject (xds.CheckRules); its error is reported under field
	// "rules".
	Check func(service string, r Rules) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger, or nil to discard.
	Logger *slog.Logger
	// Audit records every change; nil records none.
	Audit Recorder
}

// Store is the in-memory view of every service's rules, kept in step with
// the KV. Get is lock-free; writes go to the KV and then the view.
type Store struct {
	// Read-only after New.
	targets Targets
	check   func(string, Rules) error // or nil

	// set holds every service's rules, replicated through the KV.
	set *settings.Store[Rules]
}

// NewStore returns an empty Store; call Init to load.
func NewStore(cfg StoreConfig) (*Store, error) {
	if cfg.Targets == nil {
		cfg.Targets = TargetsFunc(func(string) (bool, int) { return true, 1 })
	}
	s := &Store{targets: cfg.Targets, check: cfg.Check}
	set, err := settings.New(kind, settings.Config[Rules]{KV: cfg.KV, Check: s.validate, Now: cfg.Now, Logger: cfg.Logger, Audit: cfg.Audit})
	if err != nil {
		return nil, err
	}
	s.set = set
	return s, nil
}

// Rules returns service's rules and the revision they were stored at;
// false when it has none. Safe for concurrent use; it takes no lock.
func (s *Store) Rules(service string) (Rules, int64, bool) {
	r, st, ok := s.set.Get(service)
	return r, st.Version, ok
}

// Get returns service's rules and their status; false when it has none.
func (s *Store) Get(service string) (Rules, Status, bool) {
	r, st, ok := s.set.Get(service)
	return r, statusOf(st), ok
}

func statusOf(st settings.Status) Status {
	return Status{YAML: st.YAML, Version: st.Version, UpdatedAt: st.UpdatedAt}
}

// Services returns the services with rules, sorted.
func (s *Store) Services() []string { return s.set.Services() }

// Changed returns a channel closed at the next change of the view.
func (s *Store) Changed() <-chan struct{} { return s.set.Changed() }

// Version counts the changes of the view.
func (s *Store) Version() uint64 { return s.set.Version() }

// BrokenRule is a rule that names a target no longer registered: it is
// left out of the served route configuration, so its RPCs go to the
// default route.
type BrokenRule struct {
	Index   int      `json:"index"`
	Rule    string   `json:"rule"` // Rule.Label
	Missing []string `json:"missing"`
}

// Broken lists service's rules whose targets are not all registered now,
// and the default target when it is gone (Index -1, Rule "default").
func (s *Store) Broken(service string) []BrokenRule {
	r, _, ok := s.Rules(service)
	if !ok {
		return nil
	}
	var out []BrokenRule
	for i, rule := range r.Rules {
		var missing []string
		for _, t := range rule.Targets() {
			if ok, _ := s.targets.Target(t); !ok {
				missing = append(missing, t)
			}
		}
		if missing != nil {
			out = append(out, BrokenRule{Index: i, Rule: rule.Label(i), Missing: missing})
		}
	}
	if r.Default != "" {
		if ok, _ := s.targets.Target(r.Default); !ok {
			out = append(out, BrokenRule{Index: -1, Rule: "default", Missing: []string{r.Default}})
		}
	}
	return out
}

// TargetError is a rule naming a target that does not exist, or whose
// weight all goes to targets without a healthy endpoint.
type TargetError struct {
	Field string // e.g. "rules[1].split[0].to"
	Msg   string
	Err   error // ErrNoTarget or ErrUnreachable
}

func (e *TargetError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap returns Err.
func (e *TargetError) Unwrap() error { return e.Err }

// targetHTTPError answers a *TargetError: 409 naming its field.
func targetHTTPError(err error) (int, string, bool) {
	if te, ok := errors.AsType[*TargetError](err); ok {
		return http.StatusConflict, te.Field, true
	}
	return 0, "", false
}

// validate checks parsed rules r of service: every target registered,
// every rule reachable, and the route configuration (StoreConfig.Check).
// label names the text in a Check error.
func (s *Store) validate(service, label string, r Rules) error {
	for i, rule := range r.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		if rule.To != "" {
			if err := s.target(service, f+".to", rule.To); err != nil {
				return err
			}
			if _, healthy := s.targets.Target(rule.To); healthy == 0 && rule.To != service {
				return &TargetError{Field: f + ".to", Msg: fmt.Sprintf("%s has no healthy endpoint: every RPC the rule takes would fail", rule.To), Err: ErrUnreachable}
			}
			continue
		}
		reachable := false
		for j, t := range rule.Split {
			if err := s.target(service, fmt.Sprintf("%s.split[%d].to", f, j), t.To); err != nil {
				return err
			}
			if _, healthy := s.targets.Target(t.To); (healthy > 0 || t.To == service) && t.Weight > 0 {
				reachable = true
			}
		}
		if !reachable {
			return &TargetError{Field: f + ".split", Msg: "every target with weight has no healthy endpoint: every RPC the rule takes would fail", Err: ErrUnreachable}
		}
	}
	if r.Default != "" {
		if err := s.target(service, "default", r.Default); err != nil {
			return err
		}
	}
	if s.check != nil {
		if err := s.check(service, r); err != nil {
			return &Error{File: label, Field: "rules", Msg: err.Error(), Kind: ErrInvalid}
		}
	}
	return nil
}

func (s *Store) target(service, field, to string) error {
	if to == service {
		return nil // the service itself is served whenever its rules are
	}
	if ok, _ := s.targets.Target(to); !ok {
		return &TargetError{Field: field, Msg: fmt.Sprintf("%s: %v", to, ErrNoTarget), Err: ErrNoTarget}
	}
	return nil
}

// Validate is a dry run of Set: the parsed rules, or the error Set would
// return. Nothing changes.
func (s *Store) Validate(service string, yamlText []byte) (Rules, error) {
	return s.set.Validate(service, yamlText)
}

// Set validates yamlText (Parse, targets registered, every rule
// reachable, Check) and stores it as service's rules.
func (s *Store) Set(ctx context.Context, service string, yamlText []byte) (Status, error) {
	st, err := s.set.Set(ctx, service, yamlText, settings.SourceAPI, "")
	return statusOf(st), err
}

// Delete removes service's rules: its RPCs all go to the service itself.
func (s *Store) Delete(ctx context.Context, service string) error {
	_, err := s.set.Delete(ctx, service, settings.SourceAPI)
	return err
}

// Init loads every record from the KV and returns the revision listed.
func (s *Store) Init(ctx context.Context) (int64, error) { return s.set.Init(ctx) }

// Run watches the KV for other replicas' changes until ctx ends. Call
// Init first. A failed watch is followed by a new Init.
func (s *Store) Run(ctx context.Context) error { return s.set.Run(ctx, 0) }

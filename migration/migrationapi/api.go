package migrationapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway/spillway/migration"
	pb "github.com/spillway/spillway/migration/migrationv1"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// PanicSwitch reads and flips the panic flag. It is called from many
// goroutines at once and must be safe for that. *migration.Controller
// implements it.
type PanicSwitch interface {
	Panic() migration.PanicState
	// SetPanic returns once the change is durable and published; changed
	// is false when on was already in force.
	SetPanic(ctx context.Context, on bool) (_ migration.PanicState, changed bool, _ error)
}

// RolloutKeeper reads and replaces the rollout config. It is called from
// many goroutines at once and must be safe for that. *migration.Controller
// implements it.
type RolloutKeeper interface {
	Rollout() migration.Rollout
	// SetRollout parses yaml; an invalid one is an error wrapping
	// migration.ErrInvalid and changes nothing.
	SetRollout(ctx context.Context, yaml []byte) (_ migration.Rollout, changed bool, _ error)
}

// ClientLister lists the client services (node.cluster) of the
// connected ADS streams, each once; it is called from many goroutines.
// *xds.Server implements it (the assembly checks).
type ClientLister interface {
	ClientServices() []string
}

// Snapshotter gives the registry's services, also known client services.
// *registry.Store implements it.
type Snapshotter interface {
	Snapshot() *registry.Snapshot
}

var (
	_ PanicSwitch   = (*migration.Controller)(nil)
	_ RolloutKeeper = (*migration.Controller)(nil)
	_ Snapshotter   = (*registry.Store)(nil)
)

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements it.
// A non-nil error is a denial whose message ("permission denied:
// IDENTITY may not ACTION") is the PermissionDenied status's (HTTP 403).
// It is called from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// Config configures an API.
type Config struct {
	// Panic is the panic flag; non-nil.
	Panic PanicSwitch
	// Rollout is the rollout config; non-nil.
	Rollout RolloutKeeper
	// Clients gives the client services connected over xDS, or nil.
	Clients ClientLister
	// Registry gives the services of the registry, or nil.
	Registry Snapshotter
	// Authorizer decides who may change the panic flag (action "panic")
	// and the rollout ("rollout"), from the identity the authn
	// interceptors put in the context; nil falls back to Token.
	Authorizer Authorizer
	// Token is the admin token that changes need when Authorizer is nil;
	// "" refuses every change (FailedPrecondition, HTTP 403) until one is
	// configured. Ignored when Authorizer is set (the authn layer then
	// turns the admin token into identity "admin").
	Token string
	// NoTokenHint: with an Authorizer and no Token, an anonymous caller
	// it refuses gets FailedPrecondition saying how to configure the
	// admin token, as without an Authorizer (cmd/spillway sets it under
	// the default policy, where only the admin token can change anything).
	NoTokenHint bool
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives spillway_admin_changes_total; nil registers
	// nothing.
	Registerer prometheus.Registerer
}

// API implements pb.MigrationServer and the HTTP handler.
type API struct {
	pb.UnimplementedMigrationServer

	// Read-only after New.
	flag     PanicSwitch
	rollout  RolloutKeeper
	clients  ClientLister
	registry Snapshotter
	auth     authorizer
	authz    Authorizer // or nil: auth decides
	// noTokenHint: see Config.NoTokenHint.
	noTokenHint bool
	log         *slog.Logger
	changes     *prometheus.CounterVec
}

var _ pb.MigrationServer = (*API)(nil)

// New validates cfg and returns an API.
func New(cfg Config) (*API, error) {
	if cfg.Panic == nil {
		return nil, errors.New("migration api config: Panic is nil")
	}
	if cfg.Rollout == nil {
		return nil, errors.New("migration api config: Rollout is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{
		flag: cfg.Panic, rollout: cfg.Rollout, clients: cfg.Clients, registry: cfg.Registry,
		auth: newAuthorizer(cfg.Token), authz: cfg.Authorizer, noTokenHint: cfg.NoTokenHint, log: cfg.Logger, changes: newChangesCounter(),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(a.changes); err != nil {
			return nil, fmt.Errorf("migration api metrics: %w", err)
		}
	}
	return a, nil
}

// RegisterGRPC adds the Migration service to s.
func (a *API) RegisterGRPC(s grpc.ServiceRegistrar) { pb.RegisterMigrationServer(s, a) }

// Results of a change, the "result" label of spillway_admin_changes_total.
const (
	resultOK        = "ok"        // changed
	resultUnchanged = "unchanged" // allowed, but already in force
	resultDenied    = "denied"    // token missing or wrong
	resultDisabled  = "disabled"  // no admin token configured
	resultInvalid   = "invalid"   // the request does not parse
	resultError     = "error"     // storage failed
)

func newChangesCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spillway_admin_changes_total",
		Help: "Requests to change the panic flag (what=panic) or the rollout config (what=rollout), by result: ok, unchanged, denied, disabled, invalid, error.",
	}, []string{"what", "result"})
	for _, what := range []string{"panic", "rollout"} {
		for _, r := range []string{resultOK, resultUnchanged, resultDenied, resultDisabled, resultInvalid, resultError} {
			c.WithLabelValues(what, r)
		}
	}
	return c
}

// resultOf classifies the outcome of a change for the metric.
func resultOf(changed bool, err error) string {
	switch {
	case err == nil && changed:
		return resultOK
	case err == nil:
		return resultUnchanged
	case errors.Is(err, errDenied):
		return resultDenied
	case errors.Is(err, errNoToken):
		return resultDisabled
	case errors.Is(err, migration.ErrInvalid), errors.Is(err, errBadRequest):
		return resultInvalid
	}
	return resultError
}

// record counts and logs one change request from peer.
func (a *API) record(what, from string, changed bool, err error) {
	res := resultOf(changed, err)
	a.changes.WithLabelValues(what, res).Inc()
	switch res {
	case resultOK:
		a.log.Warn("admin change", "what", what, "from", from)
	case resultDenied, resultDisabled:
		a.log.Warn("admin change refused", "what", what, "from", from, "result", res, "err", err)
	case resultError:
		a.log.Error("admin change failed", "what", what, "from", from, "err", err)
	}
}

// errBadRequest is a malformed HTTP request (body, JSON).
var errBadRequest = errors.New("bad request")

// toStatus maps domain errors to gRPC codes at the edge.
func toStatus(err error) error {
	switch {
	case errors.Is(err, systemstore.ErrUnavailable): // before DeadlineExceeded: a store timeout is the store's
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, errNoToken):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, migration.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// grpcCaller returns the authorization header and the peer of a gRPC call.
// More than one authorization value is refused.
func grpcCaller(ctx context.Context) (authz string, from string, err error) {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		from = p.Addr.String()
	}
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	switch len(vals) {
	case 0:
		return "", from, nil
	case 1:
		return vals[0], from, nil
	}
	return "", from, fmt.Errorf("%w: %d authorization values, want one", errDenied, len(vals))
}

// GetPanic implements pb.MigrationServer.
func (a *API) GetPanic(context.Context, *pb.GetPanicRequest) (*pb.PanicState, error) {
	return panicState(a.flag.Panic()), nil
}

// allowed decides a change: the Authorizer when there is one, else the
// admin token in header (the gRPC or HTTP authorization value).
func (a *API) allowed(ctx context.Context, action authz.Action, header string) error {
	if a.authz == nil {
		return a.auth.check(header)
	}
	if err := a.authz.Authorize(ctx, action, ""); err != nil {
		if a.noTokenHint && a.auth.sum == nil && authn.FromContext(ctx).Anonymous() {
			// No admin token and no credentials: say how to allow
			// changes, as without an Authorizer.
			return errNoToken
		}
		return &deniedError{err}
	}
	return nil
}

// deniedError is a refusal of the Authorizer; its message is the
// Authorizer's.
type deniedError struct{ err error }

func (d *deniedError) Error() string   { return d.err.Error() }
func (d *deniedError) Unwrap() []error { return []error{errDenied, d.err} }

// SetPanic implements pb.MigrationServer.
func (a *API) SetPanic(ctx context.Context, req *pb.SetPanicRequest) (*pb.PanicState, error) {
	header, from, err := grpcCaller(ctx)
	if err == nil || a.authz != nil {
		err = a.allowed(ctx, authz.Panic, header)
	}
	p, err := a.setPanic(ctx, from, err, req.GetPanic())
	if err != nil {
		return nil, toStatus(err)
	}
	return panicState(p), nil
}

// setPanic flips the flag unless authErr (the outcome of the token check)
// is set; it records the outcome either way.
func (a *API) setPanic(ctx context.Context, from string, authErr error, on bool) (migration.PanicState, error) {
	if authErr != nil {
		a.record("panic", from, false, authErr)
		return migration.PanicState{}, authErr
	}
	p, changed, err := a.flag.SetPanic(ctx, on)
	a.record("panic", from, changed, err)
	return p, err
}

// GetRollout implements pb.MigrationServer.
func (a *API) GetRollout(context.Context, *pb.GetRolloutRequest) (*pb.Rollout, error) {
	return rolloutMsg(a.rollout.Rollout()), nil
}

// SetRollout implements pb.MigrationServer.
func (a *API) SetRollout(ctx context.Context, req *pb.SetRolloutRequest) (*pb.Rollout, error) {
	header, from, err := grpcCaller(ctx)
	if err == nil || a.authz != nil {
		err = a.allowed(ctx, authz.Rollout, header)
	}
	r, err := a.setRollout(ctx, from, err, []byte(req.GetYaml()))
	if err != nil {
		return nil, toStatus(err)
	}
	return rolloutMsg(r), nil
}

func (a *API) setRollout(ctx context.Context, from string, authErr error, yaml []byte) (migration.Rollout, error) {
	if authErr != nil {
		a.record("rollout", from, false, authErr)
		return migration.Rollout{}, authErr
	}
	r, changed, err := a.rollout.SetRollout(ctx, yaml)
	a.record("rollout", from, changed, err)
	return r, err
}

// ValidateRollout implements pb.MigrationServer.
func (a *API) ValidateRollout(_ context.Context, req *pb.ValidateRolloutRequest) (*pb.ValidateRolloutResponse, error) {
	resp, err := a.validate([]byte(req.GetYaml()))
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// Sources of a known client service, in Decision.sources.
const (
	sourceXDS      = "xds"
	sourceRegistry = "registry"
)

// knownServices returns every known client service with where it is known
// from: the node.cluster of every connected ADS stream and every service
// of the registry.
func (a *API) knownServices() map[string][]string {
	known := map[string][]string{}
	if a.clients != nil {
		for _, s := range a.clients.ClientServices() {
			if s != "" && !slices.Contains(known[s], sourceXDS) {
				known[s] = append(known[s], sourceXDS)
			}
		}
	}
	if a.registry != nil {
		for _, s := range a.registry.Snapshot().Services() {
			known[s] = append(known[s], sourceRegistry)
		}
	}
	return known
}

// validate parses yaml and decides eligibility for every known client
// service, whose metadata is only its name: {"service": name}.
func (a *API) validate(yaml []byte) (*pb.ValidateRolloutResponse, error) {
	cfg, err := migration.ParseLimited(yaml)
	if err != nil {
		return nil, err
	}
	known := a.knownServices()
	resp := &pb.ValidateRolloutResponse{Rules: rules(cfg), Decisions: make([]*pb.Decision, 0, len(known))}
	for _, name := range slices.Sorted(maps.Keys(known)) {
		d := cfg.Eligible(map[string]string{"service": name})
		resp.Decisions = append(resp.Decisions, &pb.Decision{
			Service: name, Bucket: uint32(d.Bucket), Rule: int32(d.Rule), RuleName: d.RuleName,
			Eligible: d.Eligible, Sources: known[name],
		})
		if d.Eligible {
			resp.Eligible++
		}
		if d.Rule < 0 {
			resp.Unmatched++
		}
	}
	return resp, nil
}

func panicState(p migration.PanicState) *pb.PanicState {
	m := &pb.PanicState{Panic: p.Panic, Xds: p.XDS()}
	if !p.Changed.IsZero() {
		m.Changed = timestamppb.New(p.Changed)
	}
	return m
}

func rolloutMsg(r migration.Rollout) *pb.Rollout {
	m := &pb.Rollout{Yaml: r.YAML, Rules: rules(r.Config), Version: r.Version}
	if !r.Changed.IsZero() {
		m.Changed = timestamppb.New(r.Changed)
	}
	return m
}

func rules(c *migration.Config) []*pb.Rule {
	if c == nil {
		return nil
	}
	out := make([]*pb.Rule, len(c.Rules))
	for i, r := range c.Rules {
		out[i] = &pb.Rule{Name: r.Name, Match: maps.Clone(r.Match), Percent: r.Percent}
	}
	return out
}

// Patterns that find the field a migration.ErrInvalid names.
var (
	ruleFieldRE    = regexp.MustCompile(`^invalid rollout config: (rules(?:\[\d+\])?(?:\.\w+)?): `)
	unknownFieldRE = regexp.MustCompile(`field (\S+) not found in type`)
)

// fieldOf returns the field an invalid-config error names, for the "field"
// member of an HTTP error; "" if it cannot tell.
func fieldOf(err error) string {
	msg := err.Error()
	if m := ruleFieldRE.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	if errors.Is(err, migration.ErrInvalid) {
		return "yaml"
	}
	return ""
}

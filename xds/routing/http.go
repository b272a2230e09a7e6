package routing

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry/names"
	"github.com/spillway/spillway/registry/settings"
)

// Paths of the HTTP API; mount Handler on each.
var Paths = kind.Paths()

// Entry is the JSON of one service's rules in the API.
type Entry struct {
	Service    string       `json:"service"`
	Configured bool         `json:"configured"` // false: every RPC goes to the service itself
	Version    int64        `json:"version,omitempty"`
	UpdatedAt  *time.Time   `json:"updated_at,omitempty"`
	Rules      []Rule       `json:"rules"`
	Default    string       `json:"default"` // the target of RPCs no rule takes
	Broken     []BrokenRule `json:"broken,omitempty"`
	YAML       string       `json:"yaml,omitempty"`
}

// EntryOf returns the API view of service.
func (s *Store) EntryOf(service string) Entry {
	r, st, ok := s.Get(service)
	e := Entry{Service: service, Configured: ok, Rules: r.Rules, Default: r.Default}
	if e.Rules == nil {
		e.Rules = []Rule{}
	}
	if e.Default == "" {
		e.Default = service
	}
	if !ok {
		return e
	}
	e.Version, e.YAML = st.Version, st.YAML
	e.UpdatedAt = &st.UpdatedAt
	e.Broken = s.Broken(service)
	return e
}

// Report is the answer of a dry run (POST …/validate).
type Report struct {
	Service string        `json:"service"`
	Rules   []RuleReport  `json:"rules"`
	Default string        `json:"default"`
	Samples []SampleMatch `json:"samples,omitempty"`
	// Clients are the clients subscribed to the service now: the ones
	// the rules would reach.
	Clients []Client `json:"clients"`
}

// RuleReport is one rule of a dry run with its targets as they are now.
type RuleReport struct {
	Rule    string         `json:"rule"`
	Targets []TargetReport `json:"targets"`
}

// TargetReport is one target of a rule.
type TargetReport struct {
	To      string `json:"to"`
	Weight  uint32 `json:"weight"`
	Healthy int    `json:"healthy"`
}

// SampleMatch says which rule takes a sample request.
type SampleMatch struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Rule    string            `json:"rule"` // a Rule.Label, or "default"
	Targets []string          `json:"targets"`
}

// report builds the dry-run answer for valid rules r.
func (s *Store) report(service string, r Rules, samples []Request, clients ClientLister) Report {
	rep := Report{Service: service, Rules: []RuleReport{}, Default: r.Default, Clients: []Client{}}
	if clients != nil {
		rep.Clients = append(rep.Clients, clients.RouteClients(service)...)
	}
	if rep.Default == "" {
		rep.Default = service
	}
	for i, rule := range r.Rules {
		rr := RuleReport{Rule: rule.Label(i)}
		if rule.To != "" {
			_, h := s.targets.Target(rule.To)
			rr.Targets = append(rr.Targets, TargetReport{To: rule.To, Weight: 1, Healthy: h})
		}
		for _, t := range rule.Split {
			_, h := s.targets.Target(t.To)
			rr.Targets = append(rr.Targets, TargetReport{To: t.To, Weight: t.Weight, Healthy: h})
		}
		rep.Rules = append(rep.Rules, rr)
	}
	for _, req := range samples {
		m := SampleMatch{Path: req.Path, Headers: req.Headers, Rule: "default", Targets: []string{rep.Default}}
		if i := r.Pick(req); i >= 0 {
			m.Rule, m.Targets = r.Rules[i].Label(i), r.Rules[i].Targets()
		}
		rep.Samples = append(rep.Samples, m)
	}
	return rep
}

// ParseSample reads a sample request of a dry run: the query's "path"
// and every "header" as "name: value" (or "name=value").
func ParseSample(path string, headers []string) (Request, error) {
	req := Request{Path: path}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			k, v, ok = strings.Cut(h, "=")
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" {
			return req, fmt.Errorf("header: %q: want name: value", h)
		}
		if req.Headers == nil {
			req.Headers = map[string]string{}
		}
		req.Headers[k] = strings.TrimSpace(v)
	}
	return req, nil
}

// Authorizer decides whether the caller (the identity in ctx, see package
// authn) may do action on resource; *authz.Policy implements it. A
// non-nil error is a denial whose message is the 403's. It is called from
// many goroutines at once.
type Authorizer = settings.Authorizer

// Handler serves GET /v1/routes, GET|PUT|DELETE /v1/routes/{service} and
// POST /v1/routes/{service}/validate (a dry run: body the YAML, query
// "path" and "header" a sample request). az decides every change: action
// "routes" on the service, for the identity the authn middleware put in
// the request's context; a denial is 403 and changes nothing; nil az
// refuses every change (403). Reads and dry runs stay open.
//
// The dry run lists no clients; HandlerWith adds them.
func (s *Store) Handler(az Authorizer, log func(msg string, args ...any)) http.Handler {
	return s.HandlerWith(HandlerConfig{Authorizer: az, Log: log})
}

// ClientLister lists the clients subscribed to a service now (xDS
// node.cluster, with their stream counts), for the dry run.
type ClientLister interface {
	RouteClients(service string) []Client
}

// HandlerConfig is what the HTTP handlers need besides the Store.
type HandlerConfig struct {
	// Authorizer decides every change (see Handler); nil refuses them.
	Authorizer Authorizer
	// Clients, or nil, lists a service's subscribed clients in the dry
	// run's answer.
	Clients ClientLister
	// Log, or nil, is told every change requested.
	Log func(msg string, args ...any)
}

// HandlerWith is Handler with the dry run's client list.
func (s *Store) HandlerWith(hc HandlerConfig) http.Handler {
	view := func(svc string) any { return s.EntryOf(names.NormalizeService(svc)) }
	mux := s.set.Handler(settings.HandlerConfig{Auth: s.set.PolicyAuth(hc.Authorizer, hc.Log), View: view})
	mux.HandleFunc("POST "+kind.Path+"/{service}/validate", func(w http.ResponseWriter, r *http.Request) {
		svc, err := s.set.CheckService(r.PathValue("service"))
		if err != nil {
			s.set.Fail(w, err)
			return
		}
		body, ok := s.set.ReadBody(w, r)
		if !ok {
			return
		}
		var samples []Request
		q := r.URL.Query()
		if q.Has("path") || q.Has("header") {
			req, err := ParseSample(q.Get("path"), q["header"])
			if err != nil {
				httpjson.WriteError(w, http.StatusBadRequest, "header", err.Error())
				return
			}
			samples = append(samples, req)
		}
		rules, err := s.Validate(svc, body)
		if err != nil {
			s.set.Fail(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, s.report(svc, rules, samples, hc.Clients))
	})
	return mux
}

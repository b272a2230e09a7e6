package authz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/security/authn"
)

// ErrDenied matches (errors.Is) every *Denied.
var ErrDenied = errors.New("permission denied")

// Denied is the error of a refused action. gRPC edges map it to
// PermissionDenied, HTTP edges to 403 (ToStatus, WriteHTTPError).
type Denied struct {
	Identity authn.Identity
	Action   Action
	// Resource is the service acted on; "" for a global action (and for
	// read_registry or read_load of everything).
	Resource string
}

// Error is "permission denied: IDENTITY may not ACTION RESOURCE", or
// without RESOURCE when it is "".
func (d *Denied) Error() string {
	if d.Resource == "" {
		return fmt.Sprintf("permission denied: %s may not %s", d.Identity, d.Action)
	}
	return fmt.Sprintf("permission denied: %s may not %s %s", d.Identity, d.Action, d.Resource)
}

// Is makes errors.Is(err, ErrDenied) true.
func (d *Denied) Is(target error) bool { return target == ErrDenied }

// kind is what an action's value in a policy says.
type kind int

const (
	// global actions take true or false: panic, rollout, mesh, read_audit.
	global kind = iota
	// service actions take true (any service) or a list of service globs.
	service
)

var kinds = map[Action]kind{
	Register: service, Heartbeat: service, Deregister: service, Report: service,
	ReadRegistry: service, ReadLoad: service, Routes: service, Config: service, XDS: service,
	Panic: global, Rollout: global, Mesh: global, ReadAudit: global,
}

// Endpoints is the policy shorthand for register, heartbeat, deregister
// and report of the same services.
const Endpoints = "endpoints"

var endpointActions = []Action{Register, Heartbeat, Deregister, Report}

// Own in an xds list binds an xDS client to its own service: its node's
// cluster must be a service the identity may register.
const Own = "own"

// grant is the rights of one action.
type grant struct {
	all   bool     // true, or "*": every resource, and ""
	globs []string // service globs
	own   bool     // xds only: a service the identity may register
}

func (g *grant) add(o grant) {
	g.all = g.all || o.all
	g.own = g.own || o.own
	g.globs = append(g.globs, o.globs...)
}

// rights is what one policy entry (or the default) allows.
type rights map[Action]grant

// rule gives rights to the identities its pattern matches.
type rule struct {
	match string // exact name, or a glob with '*'
	allow rights
}

// Policy says what each identity may do: the rights of every entry whose
// match fits the caller's identity, plus the default rights that every
// caller (anonymous included) has. A Policy is immutable and safe for
// concurrent use.
type Policy struct {
	source string // file name, or "default"
	rules  []rule
	def    rights
}

// Source names where the policy came from: its file, or "default".
func (p *Policy) Source() string { return p.source }

// Authorize allows or refuses the caller in ctx (authn.FromContext)
// action a on resource (a service, or "" for a global action); a refusal
// is a *Denied.
func (p *Policy) Authorize(ctx context.Context, a Action, resource string) error {
	id := authn.FromContext(ctx)
	if p.Allowed(id, a, resource) {
		return nil
	}
	return &Denied{Identity: id, Action: a, Resource: resource}
}

// Allowed reports whether id may do a on resource.
func (p *Policy) Allowed(id authn.Identity, a Action, resource string) bool {
	g := p.grant(id, a)
	if g.all {
		return true
	}
	if resource == "" {
		return false
	}
	for _, glob := range g.globs {
		if matchGlob(glob, resource) {
			return true
		}
	}
	if g.own && a == XDS {
		return p.Allowed(id, Register, resource)
	}
	return false
}

// grant is the union of id's rights to a.
func (p *Policy) grant(id authn.Identity, a Action) grant {
	g := p.def[a]
	if id.Anonymous() {
		return g
	}
	for _, r := range p.rules {
		if matchGlob(r.match, id.Name) {
			g.add(r.allow[a])
		}
	}
	return g
}

// matchGlob reports whether s matches pattern, where '*' is any run of
// characters (including none, and '/').
func matchGlob(pattern, s string) bool {
	// The classic iterative match: on a mismatch, retry from the last
	// star with one more character swallowed. O(len(pattern)*len(s)).
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// DefaultYAML is the policy without --authz-file: today's behaviour.
// Anyone may register, heartbeat, deregister and report any service,
// read the registry and load, connect over xDS and send mesh load;
// identity admin (the --admin-token-file token) may also change the
// panic flag, the rollout, routes and service config, and read the
// audit log.
const DefaultYAML = `identities:
  - match: admin
    allow: {panic: true, rollout: true, routes: true, config: true, read_audit: true}
default: {endpoints: true, read_registry: true, read_load: true, xds: true, mesh: true}
`

// DefaultPolicy is DefaultYAML parsed.
func DefaultPolicy() *Policy {
	p, err := Parse("default", []byte(DefaultYAML))
	if err != nil {
		panic("authz: DefaultYAML: " + err.Error())
	}
	return p
}

// Parse parses a policy file (docs/security.md, "Policy"):
//
//	identities:                     # in any order; rights add up
//	  - match: NAME-OR-GLOB         # '*' is any run of characters
//	    allow: {ACTION: VALUE, ...}
//	default: {ACTION: VALUE, ...}   # every caller, anonymous included
//
// VALUE is true or false for panic, rollout, mesh and read_audit, and
// true (any service) or a list of service globs for the others; xds may
// list "own"; "endpoints" stands for register, heartbeat, deregister and
// report. name is the file's name for errors, which say "name:line:
// field: reason". Anything unknown is an error.
func Parse(name string, b []byte) (*Policy, error) {
	p := &Policy{source: name, def: rights{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return p, nil // an empty file allows nothing
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: one YAML document wanted", name, extra.Line)
	}
	ps := parser{name: name}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if isNull(root) {
		return p, nil
	}
	err := ps.mapping(root, "policy", func(k, v *yaml.Node) error {
		switch k.Value {
		case "identities":
			return ps.identities(v, p)
		case "default":
			r, err := ps.rights(v, "default")
			p.def = r
			return err
		}
		return ps.errorf(k, clip(k.Value), "unknown key, want identities or default")
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

type parser struct{ name string }

func (ps parser) errorf(n *yaml.Node, field, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s: %s", ps.name, n.Line, field, fmt.Sprintf(format, args...))
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// mapping calls fn for each key of n, refusing a non-mapping, a
// non-string key and a key given twice.
func (ps parser) mapping(n *yaml.Node, field string, fn func(k, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return ps.errorf(n, field, "want a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return ps.errorf(k, field, "want string keys")
		}
		if seen[k.Value] {
			return ps.errorf(k, field+"."+clip(k.Value), "given twice")
		}
		seen[k.Value] = true
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (ps parser) identities(n *yaml.Node, p *Policy) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return ps.errorf(n, "identities", "want a list of {match, allow}")
	}
	seen := map[string]int{}
	for i, item := range n.Content {
		field := fmt.Sprintf("identities[%d]", i)
		var r rule
		var haveMatch bool
		err := ps.mapping(item, field, func(k, v *yaml.Node) error {
			switch k.Value {
			case "match":
				if v.Kind != yaml.ScalarNode || isNull(v) {
					return ps.errorf(v, field+".match", "want an identity or a glob")
				}
				if err := validMatch(v.Value); err != nil {
					return ps.errorf(v, field+".match", "%v", err)
				}
				if prev, dup := seen[v.Value]; dup {
					return ps.errorf(v, field+".match", "%s is also identities[%d]; merge them", v.Value, prev)
				}
				seen[v.Value] = i
				r.match, haveMatch = v.Value, true
				return nil
			case "allow":
				a, err := ps.rights(v, field+".allow")
				r.allow = a
				return err
			}
			return ps.errorf(k, field+"."+clip(k.Value), "unknown key, want match or allow")
		})
		if err != nil {
			return err
		}
		if !haveMatch {
			return ps.errorf(item, field+".match", "missing")
		}
		if r.allow == nil {
			r.allow = rights{}
		}
		p.rules = append(p.rules, r)
	}
	return nil
}

// validMatch checks an identity pattern: a name as authn.ValidateName
// takes it, where '*' may stand for any run; "anonymous" is not one (the
// default rights are the anonymous caller's).
func validMatch(m string) error {
	if err := authn.ValidateName(m); err != nil {
		return err
	}
	if m == "anonymous" {
		return errors.New(`"anonymous" is not an identity: the default rights are the anonymous caller's`)
	}
	return nil
}

func (ps parser) rights(n *yaml.Node, field string) (rights, error) {
	r := rights{}
	if isNull(n) {
		return r, nil
	}
	err := ps.mapping(n, field, func(k, v *yaml.Node) error {
		f := field + "." + clip(k.Value)
		if k.Value == Endpoints {
			g, err := ps.grant(v, f, service, false)
			for _, a := range endpointActions {
				x := r[a]
				x.add(g)
				r[a] = x
			}
			return err
		}
		a := Action(k.Value)
		kd, ok := kinds[a]
		if !ok {
			return ps.errorf(k, f, "unknown action, want one of %s or %s", actionList(), Endpoints)
		}
		g, err := ps.grant(v, f, kd, a == XDS)
		x := r[a]
		x.add(g)
		r[a] = x
		return err
	})
	return r, err
}

func actionList() string {
	names := make([]string, len(Actions))
	for i, a := range Actions {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// grant parses one action's value.
func (ps parser) grant(v *yaml.Node, field string, kd kind, ownOK bool) (grant, error) {
	var g grant
	if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" {
		var b bool
		if err := v.Decode(&b); err != nil {
			return g, ps.errorf(v, field, "%v", err)
		}
		g.all = b
		return g, nil
	}
	if kd == global {
		return g, ps.errorf(v, field, "a global action takes true or false, not a resource list")
	}
	if v.Kind != yaml.SequenceNode {
		return g, ps.errorf(v, field, "want true, false or a list of service globs")
	}
	for i, item := range v.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
			return g, ps.errorf(item, f, "want a service glob (a string)")
		}
		s := item.Value
		switch {
		case s == Own && ownOK:
			g.own = true
		case s == Own:
			return g, ps.errorf(item, f, `"own" is for xds only`)
		case s == "*":
			g.all = true
		default:
			if err := validGlob(s); err != nil {
				return g, ps.errorf(item, f, "%v", err)
			}
			if !slices.Contains(g.globs, s) {
				g.globs = append(g.globs, s)
			}
		}
	}
	return g, nil
}

// validGlob checks a service glob: a lower-case DNS label where '*' may
// stand for any run of characters.
func validGlob(s string) error {
	if s == "" {
		return errors.New("empty service glob")
	}
	if len(s) > 63 {
		return fmt.Errorf("service glob of %d bytes, want at most 63 (a DNS label)", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '*') {
			return fmt.Errorf("service glob %q has %q at %d, want lower-case letters, digits, '-' and '*'", s, c, i)
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

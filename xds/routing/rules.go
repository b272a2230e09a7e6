package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/internal/strictyaml"
	"github.com/spillway/spillway/registry/names"
)

// ErrInvalid is wrapped by every parse and validation error.
var ErrInvalid = errors.New("invalid route rules")

// MaxBytes bounds one service's rules as written.
const MaxBytes = 64 << 10

// MaxRules bounds the rules of one service.
const MaxRules = 64

// Rules are one service's route rules: tried in order, the first whose
// Match holds sends the RPC; an RPC that matches none goes to Default.
type Rules struct {
	Rules []Rule `json:"rules"`
	// Default is the target of RPCs that match no rule; "" means the
	// service itself.
	Default string `json:"default,omitempty"`
}

// Rule is one route: a match and either one target (To) or weighted
// targets (Split), never both.
type Rule struct {
	// Name is optional and unique among the service's rules; it names
	// the rule in GET, explain and metrics ("rules[i]" when empty).
	Name  string   `json:"name,omitempty"`
	Match Match    `json:"match"`
	To    string   `json:"to,omitempty"`
	Split []Target `json:"split,omitempty"`
}

// Label is the rule's name, or "rules[i]" for rule i without one.
func (r Rule) Label(i int) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("rules[%d]", i)
}

// Targets returns the services the rule sends to, in order.
func (r Rule) Targets() []string {
	if r.To != "" {
		return []string{r.To}
	}
	out := make([]string, 0, len(r.Split))
	for _, t := range r.Split {
		out = append(out, t.To)
	}
	return out
}

// Match says which RPCs a rule takes: all of Headers hold and the method
// path starts with PathPrefix. The zero Match takes every RPC.
type Match struct {
	Headers []HeaderMatch `json:"headers,omitempty"`
	// PathPrefix is a prefix of the gRPC method path
	// ("/package.Service/Method"), case-sensitive; "" matches every path.
	PathPrefix string `json:"path_prefix,omitempty"`
}

// HeaderMatch is one header condition; exactly one of Exact, Prefix,
// Present, Regex is set. Names are lowercase (gRPC metadata keys are).
type HeaderMatch struct {
	Name    string `json:"name"`
	Exact   string `json:"exact,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	Present bool   `json:"present,omitempty"`
	// Regex is RE2 syntax matched against the whole value, as grpc-go
	// does (it anchors the pattern).
	Regex string `json:"regex,omitempty"`

	kind string // which of the four is set: "exact", "prefix", "present", "regex"
	re   *regexp.Regexp
}

// Kind is which condition is set: exact, prefix, present or regex.
func (h HeaderMatch) Kind() string { return h.kind }

// MarshalJSON writes the name and the one condition, even an exact match
// of "" (which omitempty would drop), so that the JSON parses back to the
// same match.
func (h HeaderMatch) MarshalJSON() ([]byte, error) {
	type out struct {
		Name    string  `json:"name"`
		Exact   *string `json:"exact,omitempty"`
		Prefix  *string `json:"prefix,omitempty"`
		Present *bool   `json:"present,omitempty"`
		Regex   *string `json:"regex,omitempty"`
	}
	o := out{Name: h.Name}
	switch {
	case h.kind == "exact" || (h.kind == "" && h.Exact != ""):
		o.Exact = &h.Exact
	case h.kind == "prefix" || (h.kind == "" && h.Prefix != ""):
		o.Prefix = &h.Prefix
	case h.kind == "present" || (h.kind == "" && h.Present):
		o.Present = &h.Present
	case h.kind == "regex" || (h.kind == "" && h.Regex != ""):
		o.Regex = &h.Regex
	}
	return json.Marshal(o)
}

// Target is one member of a split.
type Target struct {
	To     string `json:"to"`
	Weight uint32 `json:"weight"`
}

// Error is a parse or validation error at a line of the rules; it
// unwraps to ErrInvalid.
type Error = strictyaml.Error

// Parse reads one service's rules (YAML or JSON) strictly: an unknown
// field, a wrong type, a bad value, a duplicate rule name or a split
// whose weights do not sum to a positive total no larger than 2^32-1 is
// an *Error naming file, line and field. An empty document is no rules.
// Parse does not check that targets exist (Store.Set does).
func Parse(file string, data []byte) (Rules, error) {
	p := parser{strictyaml.Parser{File: file, Kind: ErrInvalid}}
	root, err := p.Document(data, MaxBytes, "the rules are one")
	if err != nil || root == nil {
		return Rules{}, err
	}
	var r Rules
	if err := p.rules(root, &r); err != nil {
		return Rules{}, err
	}
	return r, nil
}

// parser reads the rules' nodes with the shared strict checks.
type parser struct{ strictyaml.Parser }

// list is strictyaml's List, null being no items.
func (p parser) list(n *yaml.Node, field string) ([]*yaml.Node, error) {
	if strictyaml.IsNull(n) {
		return nil, nil
	}
	return p.List(n, field)
}

func (p parser) service(n *yaml.Node, field string) (string, error) {
	s, err := p.String(n, field)
	if err != nil {
		return "", err
	}
	norm := names.NormalizeService(s)
	if err := names.ValidateService(field, norm); err != nil {
		return "", p.Errf(n, field, "%q is not a service name: %v", s, err)
	}
	return norm, nil
}

// ruleName is a rule's name: 1..63 of a-z 0-9 - _.
var ruleName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// headerName is a gRPC metadata key as grpc-go sends it: lowercase.
var headerName = regexp.MustCompile(`^[a-z0-9_.-]+$`)

func (p parser) rules(root *yaml.Node, r *Rules) error {
	m, err := p.Mapping(root, "", "rules", "default")
	if err != nil {
		return err
	}
	if n := m["default"]; n != nil {
		if r.Default, err = p.service(n, "default"); err != nil {
			return err
		}
	}
	n := m["rules"]
	if n == nil {
		return nil
	}
	items, err := p.list(n, "rules")
	if err != nil {
		return err
	}
	if len(items) > MaxRules {
		return p.Errf(n, "rules", "%d rules, over the limit of %d", len(items), MaxRules)
	}
	seen := map[string]int{}
	for i, item := range items {
		f := fmt.Sprintf("rules[%d]", i)
		rule, err := p.rule(item, f)
		if err != nil {
			return err
		}
		if rule.Name != "" {
			if j, dup := seen[rule.Name]; dup {
				return p.Errf(item, f+".name", "%q is also rules[%d]'s name", rule.Name, j)
			}
			seen[rule.Name] = i
		}
		r.Rules = append(r.Rules, rule)
	}
	return nil
}

func (p parser) rule(n *yaml.Node, f string) (Rule, error) {
	var r Rule
	m, err := p.Mapping(n, f, "name", "match", "to", "split")
	if err != nil {
		return r, err
	}
	if v := m["name"]; v != nil {
		if r.Name, err = p.String(v, f+".name"); err != nil {
			return r, err
		}
		if !ruleName.MatchString(r.Name) {
			return r, p.Errf(v, f+".name", "%q: want 1..63 of a-z, 0-9, - and _, starting with a letter or digit", r.Name)
		}
	}
	if v := m["match"]; v != nil {
		if r.Match, err = p.match(v, f+".match"); err != nil {
			return r, err
		}
	}
	to, split := m["to"], m["split"]
	switch {
	case to != nil && split != nil:
		return r, p.Errf(split, f+".split", "set with to: a rule has one target (to) or weighted targets (split)")
	case to != nil:
		if r.To, err = p.service(to, f+".to"); err != nil {
			return r, err
		}
	case split != nil:
		if r.Split, err = p.split(split, f+".split"); err != nil {
			return r, err
		}
	default:
		return r, p.Errf(n, f+".to", "missing: a rule needs a target (to) or weighted targets (split)")
	}
	return r, nil
}

func (p parser) match(n *yaml.Node, f string) (Match, error) {
	var m Match
	if strictyaml.IsNull(n) {
		return m, nil
	}
	fields, err := p.Mapping(n, f, "headers", "path_prefix")
	if err != nil {
		return m, err
	}
	if v := fields["path_prefix"]; v != nil {
		if m.PathPrefix, err = p.String(v, f+".path_prefix"); err != nil {
			return m, err
		}
		if !strings.HasPrefix(m.PathPrefix, "/") {
			return m, p.Errf(v, f+".path_prefix", "%q: a gRPC method path starts with / (/package.Service/Method)", m.PathPrefix)
		}
	}
	if v := fields["headers"]; v != nil {
		items, err := p.list(v, f+".headers")
		if err != nil {
			return m, err
		}
		for j, item := range items {
			h, err := p.header(item, fmt.Sprintf("%s.headers[%d]", f, j))
			if err != nil {
				return m, err
			}
			m.Headers = append(m.Headers, h)
		}
	}
	return m, nil
}

func (p parser) header(n *yaml.Node, f string) (HeaderMatch, error) {
	var h HeaderMatch
	m, err := p.Mapping(n, f, "name", "exact", "prefix", "present", "regex")
	if err != nil {
		return h, err
	}
	v := m["name"]
	if v == nil {
		return h, p.Errf(n, f+".name", "missing")
	}
	if h.Name, err = p.String(v, f+".name"); err != nil {
		return h, err
	}
	switch {
	case !headerName.MatchString(h.Name):
		return h, p.Errf(v, f+".name", "%q: want a lowercase gRPC metadata key (a-z, 0-9, -, _, .)", h.Name)
	case strings.HasSuffix(h.Name, "-bin"):
		return h, p.Errf(v, f+".name", "%q: grpc-go never matches binary (-bin) headers", h.Name)
	case strings.HasPrefix(h.Name, "grpc-"):
		return h, p.Errf(v, f+".name", "%q: grpc- headers are reserved to gRPC", h.Name)
	}
	set := 0
	for _, k := range []string{"exact", "prefix", "present", "regex"} {
		v := m[k]
		if v == nil {
			continue
		}
		set++
		if set > 1 {
			return h, p.Errf(v, f+"."+k, "set with %s: a header match has one of exact, prefix, present, regex", h.kind)
		}
		h.kind = k
		switch k {
		case "exact":
			h.Exact, err = p.String(v, f+".exact")
		case "prefix":
			if h.Prefix, err = p.String(v, f+".prefix"); err == nil && h.Prefix == "" {
				err = p.Errf(v, f+".prefix", "empty: use present: true")
			}
		case "present":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Value != "true" {
				err = p.Errf(v, f+".present", "want true, got %s", strictyaml.Describe(v))
			}
			h.Present = true
		case "regex":
			if h.Regex, err = p.String(v, f+".regex"); err == nil {
				if h.re, err = compileRegex(h.Regex); err != nil {
					err = p.Errf(v, f+".regex", "%q is not RE2: %v", h.Regex, err)
				}
			}
		}
		if err != nil {
			return h, err
		}
	}
	if set == 0 {
		return h, p.Errf(n, f, "no condition: set one of exact, prefix, present, regex")
	}
	return h, nil
}

// compileRegex compiles an RE2 pattern matched against a whole value, as
// grpc-go's CompileSafeRegex does.
func compileRegex(pattern string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, err
	}
	return regexp.Compile("^(?:" + pattern + ")$")
}

func (p parser) split(n *yaml.Node, f string) ([]Target, error) {
	items, err := p.list(n, f)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, p.Errf(n, f, "empty: list the weighted targets")
	}
	var out []Target
	var total uint64
	seen := map[string]int{}
	for j, item := range items {
		tf := fmt.Sprintf("%s[%d]", f, j)
		m, err := p.Mapping(item, tf, "to", "weight")
		if err != nil {
			return nil, err
		}
		var t Target
		v := m["to"]
		if v == nil {
			return nil, p.Errf(item, tf+".to", "missing")
		}
		if t.To, err = p.service(v, tf+".to"); err != nil {
			return nil, err
		}
		if k, dup := seen[t.To]; dup {
			return nil, p.Errf(v, tf+".to", "%s is also %s[%d]", t.To, f, k)
		}
		seen[t.To] = j
		w := m["weight"]
		if w == nil {
			return nil, p.Errf(item, tf+".weight", "missing")
		}
		if w.Kind != yaml.ScalarNode || w.Tag != "!!int" {
			return nil, p.Errf(w, tf+".weight", "want an integer, got %s", strictyaml.Describe(w))
		}
		x, err := strconv.ParseUint(strings.ReplaceAll(w.Value, "_", ""), 10, 32)
		if err != nil {
			return nil, p.Errf(w, tf+".weight", "%q: want an integer 0..%d", w.Value, uint64(math.MaxUint32))
		}
		t.Weight = uint32(x)
		total += x
		out = append(out, t)
	}
	if total == 0 {
		return nil, p.Errf(n, f, "the weights sum to 0: at least one target needs a positive weight")
	}
	if total > math.MaxUint32 {
		return nil, p.Errf(n, f, "the weights sum to %d, over %d", total, uint64(math.MaxUint32))
	}
	return out, nil
}

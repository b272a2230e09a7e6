package routing

import "strings"

// Request is what a rule matches on: the gRPC method path and the
// request's metadata (lowercase keys; several values of one key are
// joined with "," as grpc-go does before matching).
type Request struct {
	Path    string
	Headers map[string]string
}

// Pick returns the index of the first rule that takes req, or -1 when
// none does and the default target gets it. It follows grpc-go's xDS
// route matching for the conditions Parse accepts.
func (r Rules) Pick(req Request) int {
	for i, rule := range r.Rules {
		if rule.Match.takes(req) {
			return i
		}
	}
	return -1
}

func (m Match) takes(req Request) bool {
	if !strings.HasPrefix(req.Path, m.PathPrefix) {
		return false
	}
	for _, h := range m.Headers {
		v, ok := req.Headers[h.Name]
		switch h.kind {
		case "present":
			if !ok {
				return false
			}
		case "exact":
			if !ok || v != h.Exact {
				return false
			}
		case "prefix":
			if !ok || !strings.HasPrefix(v, h.Prefix) {
				return false
			}
		case "regex":
			re := h.re
			if re == nil {
				var err error
				if re, err = compileRegex(h.Regex); err != nil {
					return false
				}
			}
			if !ok || !re.MatchString(v) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// AllTargets returns every service the rules name (rule targets and the
// default), each once, in order of first appearance.
func (r Rules) AllTargets() []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, rule := range r.Rules {
		for _, t := range rule.Targets() {
			add(t)
		}
	}
	add(r.Default)
	return out
}

package xds

import (
	"fmt"
	"strconv"
	"strings"

	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds/routing"
)

// RouteRules gives each service's route rules (a *routing.Store). It is
// called from many goroutines at once.
type RouteRules interface {
	// Rules returns service's rules and the revision they were stored
	// at; false when it has none.
	Rules(service string) (routing.Rules, int64, bool)
	// Changed returns a channel closed at the next change of any rules.
	Changed() <-chan struct{}
	// Services lists the services with rules.
	Services() []string
}

var _ RouteRules = (*routing.Store)(nil)

// routeWith builds RouteConfiguration S from its rules: one virtual host,
// the rules in order, then the default route (prefix "" to the default
// target, or S). A rule naming a target for which exists is false is
// left out (its RPCs take the default route), and so is a default target
// that does not exist (S takes them). It returns the indexes of the rules
// left out.
func routeWith(service string, r routing.Rules, exists func(string) bool) (*v3routepb.RouteConfiguration, []int) {
	var routes []*v3routepb.Route
	var dropped []int
	for i, rule := range r.Rules {
		ok := true
		for _, t := range rule.Targets() {
			ok = ok && (t == service || exists(t))
		}
		if !ok {
			dropped = append(dropped, i)
			continue
		}
		routes = append(routes, ruleRoute(rule))
	}
	def := service
	if r.Default != "" && (r.Default == service || exists(r.Default)) {
		def = r.Default
	}
	routes = append(routes, &v3routepb.Route{
		Match:  &v3routepb.RouteMatch{PathSpecifier: &v3routepb.RouteMatch_Prefix{Prefix: ""}},
		Action: &v3routepb.Route_Route{Route: &v3routepb.RouteAction{ClusterSpecifier: &v3routepb.RouteAction_Cluster{Cluster: def}}},
	})
	return &v3routepb.RouteConfiguration{
		Name:         service,
		VirtualHosts: []*v3routepb.VirtualHost{{Name: service, Domains: []string{"*"}, Routes: routes}},
	}, dropped
}

func ruleRoute(rule routing.Rule) *v3routepb.Route {
	m := &v3routepb.RouteMatch{PathSpecifier: &v3routepb.RouteMatch_Prefix{Prefix: rule.Match.PathPrefix}}
	for _, h := range rule.Match.Headers {
		hm := &v3routepb.HeaderMatcher{Name: h.Name}
		switch h.Kind() {
		case "exact":
			hm.HeaderMatchSpecifier = &v3routepb.HeaderMatcher_StringMatch{StringMatch: &v3matcherpb.StringMatcher{MatchPattern: &v3matcherpb.StringMatcher_Exact{Exact: h.Exact}}}
		case "prefix":
			hm.HeaderMatchSpecifier = &v3routepb.HeaderMatcher_StringMatch{StringMatch: &v3matcherpb.StringMatcher{MatchPattern: &v3matcherpb.StringMatcher_Prefix{Prefix: h.Prefix}}}
		case "present":
			hm.HeaderMatchSpecifier = &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true}
		case "regex":
			hm.HeaderMatchSpecifier = &v3routepb.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &v3matcherpb.RegexMatcher{Regex: h.Regex}}
		}
		m.Headers = append(m.Headers, hm)
	}
	a := &v3routepb.RouteAction{}
	if rule.To != "" {
		a.ClusterSpecifier = &v3routepb.RouteAction_Cluster{Cluster: rule.To}
	} else {
		wc := &v3routepb.WeightedCluster{}
		for _, t := range rule.Split {
			wc.Clusters = append(wc.Clusters, &v3routepb.WeightedCluster_ClusterWeight{Name: t.To, Weight: wrapperspb.UInt32(t.Weight)})
		}
		a.ClusterSpecifier = &v3routepb.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	return &v3routepb.Route{Match: m, Action: &v3routepb.Route_Route{Route: a}}
}

// CheckRules reports whether the RouteConfiguration of service's rules,
// with every target present, is one a gRPC client accepts (checkForGRPC);
// routing.StoreConfig.Check takes it.
func CheckRules(service string, r routing.Rules) error {
	rc, _ := routeWith(service, r, func(string) bool { return true })
	_, err := encode(service, rc)
	return err
}

// routeKey names the content of RouteConfiguration service: the rules'
// revision and which of their targets exist.
func routeKey(rev int64, r routing.Rules, exists func(string) bool) string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(rev, 10))
	for _, t := range r.AllTargets() {
		if exists(t) {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// dependents maps a target service to the services whose rules name it,
// so that a target coming or going re-evaluates their routes.
func dependents(rr RouteRules) map[string][]string {
	out := map[string][]string{}
	for _, svc := range rr.Services() {
		r, _, ok := rr.Rules(svc)
		if !ok {
			continue
		}
		for _, t := range r.AllTargets() {
			if t != svc {
				out[t] = append(out[t], svc)
			}
		}
	}
	return out
}

// ruledRoute returns RouteConfiguration name built from its rules, and
// false when it has none (the static route serves). It is called with
// e.mu held. Rules whose route a client would reject (they passed
// CheckRules when set, so only a change of the checks can do it) give
// the default route.
func (s *Server) ruledRoute(e *entry, name string, snap *registry.Snapshot) (*resource, bool) {
	if s.cfg.Routes == nil {
		return nil, false
	}
	r, rev, ok := s.cfg.Routes.Rules(name)
	if !ok {
		return nil, false
	}
	exists := func(n string) bool {
		_, ok := snap.Service(n)
		return ok
	}
	key := routeKey(rev, r, exists)
	if e.rds != nil && e.rdsKey == key {
		return e.rds, true
	}
	rc, dropped := routeWith(name, r, exists)
	if len(dropped) > 0 {
		s.log.Warn("route rules left out: a target is not registered; their RPCs take the default route", "service", name, "rules", fmt.Sprint(dropped))
	}
	res, err := encode(name, rc)
	if err != nil {
		s.metrics.invalid.WithLabelValues("RDS").Inc()
		s.log.Error("route rules not served: the route configuration is invalid; the default route serves", "service", name, "err", err)
		if res, err = encode(name, route(name)); err != nil {
			return nil, true
		}
	}
	e.rds, e.rdsKey = res, key
	return res, true
}

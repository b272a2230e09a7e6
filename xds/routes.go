package xds

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	v3matcherpb "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
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
// the rules in order, then a warm-up route per cluster of warm and per
// split member of weight 0, then the default route (prefix "" to the
// default target, or S). A rule naming a target for which exists is
// false is left out (its RPCs take the default route), and so is a
// default target that does not exist (S takes them). It returns the
// indexes of the rules left out.
func routeWith(service string, r routing.Rules, exists func(string) bool, warm []string) (*v3routepb.RouteConfiguration, []int) {
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
		for _, t := range rule.Split {
			if t.Weight == 0 {
				warm = append(warm, t.To)
			}
		}
	}
	seen := map[string]bool{}
	for _, c := range warm {
		if !seen[c] {
			seen[c] = true
			routes = append(routes, warmRoute(c))
		}
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

// Warm-up routes match no RPC (a method of no service, with a header no
// client sends): they only make a client subscribe to a cluster and build
// its balancer before a rule sends RPCs to it. grpc-go switches its
// config selector before its balancer has the new cluster, and fails the
// RPCs picked in between ("unknown cluster selected for RPC").
const (
	warmPath   = "/spillway.routing.v1.Warmup/Never"
	warmHeader = "x-spillway-warmup"
)

func warmRoute(cluster string) *v3routepb.Route {
	return &v3routepb.Route{
		Match: &v3routepb.RouteMatch{
			PathSpecifier: &v3routepb.RouteMatch_Path{Path: warmPath},
			Headers:       []*v3routepb.HeaderMatcher{{Name: warmHeader, HeaderMatchSpecifier: &v3routepb.HeaderMatcher_PresentMatch{PresentMatch: true}}},
		},
		Action: &v3routepb.Route_Route{Route: &v3routepb.RouteAction{ClusterSpecifier: &v3routepb.RouteAction_Cluster{Cluster: cluster}}},
	}
}

// clustersOf returns the clusters rc sends RPCs to or warms.
func clustersOf(rc *v3routepb.RouteConfiguration) map[string]bool {
	out := map[string]bool{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if c := a.GetCluster(); c != "" {
				out[c] = true
			}
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				if wc.GetWeight().GetValue() > 0 {
					out[wc.GetName()] = true
				}
			}
		}
	}
	return out
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
	rc, _ := routeWith(service, r, func(string) bool { return true }, nil)
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

// ruledRoute returns RouteConfiguration name built from its rules, with
// the service's policy e.pol (withPolicy), and false when it has none
// (the static route serves). It is called with e.mu held. Rules whose
// route a client would reject (they passed CheckRules when set, so only
// a change of the checks can do it) give the default route.
//
// A change that sends RPCs to a cluster the last route served did not
// name goes out in two pushes: first the last route plus a warm-up route
// per new cluster, for Config.RouteWarmup, then the new route, so the
// client has the cluster's balancer when its first RPC is sent there.
func (s *Server) ruledRoute(e *entry, name string, snap *registry.Snapshot) (*resource, bool) {
	if s.cfg.Routes == nil {
		return nil, false
	}
	r, rev, ok := s.cfg.Routes.Rules(name)
	if !ok {
		e.rds, e.rdsKey, e.rdsRC, e.warmKey, e.warmRes = nil, "", nil, "", nil
		return nil, false
	}
	// A target is there while it has an endpoint to serve: a service
	// whose endpoints are all deregistered stays known to the registry,
	// but RPCs sent to it would fail.
	exists := func(n string) bool {
		svc, ok := snap.Service(n)
		return ok && len(svc.Serving()) > 0
	}
	key := routeKey(rev, r, exists)
	if e.polKey != 0 { // the service's policy is in every route (withPolicy)
		key += "|p" + strconv.FormatUint(e.polKey, 16)
	}
	if e.rds != nil && e.rdsKey == key {
		return e.rds, true
	}
	rc, dropped := routeWith(name, r, exists, nil)
	withPolicy(rc, e.pol)
	if res, ok := s.warming(e, name, key, rc); ok {
		return res, true
	}
	if len(dropped) > 0 {
		s.log.Warn("route rules left out: a target is not registered; their RPCs take the default route", "service", name, "rules", fmt.Sprint(dropped))
	}
	res, rc, err := s.encodeRuled(e, name, rc, func() *v3routepb.RouteConfiguration {
		rc, _ := routeWith(name, r, exists, nil)
		return rc
	})
	if err != nil {
		return nil, true
	}
	e.rds, e.rdsKey, e.rdsRC, e.warmKey, e.warmRes = res, key, rc, "", nil
	return res, true
}

// encodeRuled encodes rc, the route of name's rules with its policy, and
// returns what serves: rc; else, when the policy made it invalid, the
// rules without it (bare); else the default route, with the policy, then
// without. Called with e.mu held.
func (s *Server) encodeRuled(e *entry, name string, rc *v3routepb.RouteConfiguration, bare func() *v3routepb.RouteConfiguration) (*resource, *v3routepb.RouteConfiguration, error) {
	res, err := encode(name, rc)
	if err != nil && e.polKey != 0 {
		s.metrics.invalid.WithLabelValues("RDS").Inc()
		s.log.Error("resilience policy not served: the route configuration is invalid with it; the rules serve without it", "service", name, "err", err)
		rc = bare()
		res, err = encode(name, rc)
	}
	if err == nil {
		return res, rc, nil
	}
	s.metrics.invalid.WithLabelValues("RDS").Inc()
	s.log.Error("route rules not served: the route configuration is invalid; the default route serves", "service", name, "err", err)
	for _, rc = range []*v3routepb.RouteConfiguration{routeFor(name, e.pol), route(name)} {
		if res, err = encode(name, rc); err == nil {
			return res, rc, nil
		}
	}
	return nil, nil, err
}

// warming returns the warm-up route to serve instead of rc, the route of
// key, while rc sends RPCs to clusters the last route served did not.
func (s *Server) warming(e *entry, name, key string, rc *v3routepb.RouteConfiguration) (*resource, bool) {
	prev := e.rdsRC
	if prev == nil && e.static[1] != nil {
		prev = routeFor(name, e.pol) // the static route was served
	}
	if prev == nil || s.cfg.RouteWarmup <= 0 {
		return nil, false
	}
	old := clustersOf(prev)
	var fresh []string
	for c := range clustersOf(rc) {
		if !old[c] {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) == 0 {
		return nil, false
	}
	now := time.Now()
	if e.warmKey != key {
		e.warmKey, e.warmUntil, e.warmRes = key, now.Add(s.cfg.RouteWarmup), nil
		time.AfterFunc(s.cfg.RouteWarmup, func() { s.hub.dispatch([]string{name}, time.Now()) })
	}
	if !now.Before(e.warmUntil) {
		return nil, false
	}
	if e.warmRes == nil {
		slices.Sort(fresh)
		w := proto.Clone(prev).(*v3routepb.RouteConfiguration)
		vh := w.VirtualHosts[0]
		last := vh.Routes[len(vh.Routes)-1]
		vh.Routes = vh.Routes[:len(vh.Routes)-1]
		for _, c := range fresh {
			wr := warmRoute(c)
			actionPolicy(wr.GetRoute(), e.pol)
			vh.Routes = append(vh.Routes, wr)
		}
		vh.Routes = append(vh.Routes, last)
		res, err := encode(name, w)
		if err != nil {
			s.log.Error("warm-up route not built", "service", name, "err", err)
			return nil, false
		}
		e.warmRes = res
	}
	return e.warmRes, true
}

package xds

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/regions"
)

// RegionRules gives a service's regional redirects and exclusions (a
// *regions.Table implements it), with a version that changes whenever the
// rules in force change (expiry included). It is called from many
// goroutines at once.
type RegionRules interface {
	Rules(service string) (regions.Rules, uint64)
}

// regionRules is service's rules, none without Config.RegionRules.
func (s *Server) regionRules(service string) (regions.Rules, uint64) {
	if s.cfg.RegionRules == nil {
		return regions.Rules{}, 0
	}
	return s.cfg.RegionRules.Rules(service)
}

// serviceRegions lists the regions of svc's localities with a healthy
// endpoint (those groupLocalities keeps), sorted; empty, not nil.
func serviceRegions(svc *registry.Service, port string) []string {
	locs, _ := groupLocalities(svc, port)
	out := []string{}
	for _, l := range locs {
		if !slices.Contains(out, l.Region) {
			out = append(out, l.Region)
		}
	}
	slices.Sort(out)
	return out
}

// priorities is the priority of each region for a client of region
// client; nil (every locality at priority 0, as before regions) when the
// service has a single region and no rule applies.
func (s *Server) priorities(present []string, client string, rules regions.Rules) (map[string]int, regions.Outcome) {
	if len(present) <= 1 && rules.Empty() {
		return nil, regions.Outcome{}
	}
	return regions.Order(present, client, s.cfg.RegionPreference, rules, time.Now())
}

// prioKey names a priority map in the EDS variant key: clients of regions
// that get the same priorities share one encoded resource, so the number
// of variants is bounded by the service's regions, not by what clients
// claim.
func prioKey(prio map[string]int) string {
	if prio == nil {
		return ""
	}
	keys := make([]string, 0, len(prio))
	for r := range prio {
		keys = append(keys, r)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString("\x00p")
	for _, r := range keys {
		b.WriteString("\x00" + r + "=" + strconv.Itoa(prio[r]))
	}
	return b.String()
}

// reportRegions logs what a rule could not do as written.
func (s *Server) reportRegions(service, client string, o regions.Outcome) {
	if o.RedirectNoEndpoints != "" {
		s.log.Warn("regional redirect not applied: its target region has no healthy endpoints", "service", service, "client_region", client, "to", o.RedirectNoEndpoints)
	}
	if o.FailOpen {
		s.log.Warn("region exclusion not applied: it would leave no endpoints (fail open)", "service", service)
	}
}

// RegionView is what the regional rules in force decide for service
// (regions.Explain over the regions of its healthy endpoints, with the
// server's RegionPreference), for explain; false when the registry has no
// such service.
func (s *Server) RegionView(service string) (regions.View, bool) {
	svc, ok := s.store.Snapshot().Service(service)
	if !ok {
		return regions.View{}, false
	}
	rules, _ := s.regionRules(service)
	return regions.Explain(serviceRegions(svc, s.cfg.PortName), s.cfg.RegionPreference, rules, time.Now()), true
}

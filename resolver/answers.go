package resolver

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights/regions"
)

// section is pre-built answer and additional records, positioned for a
// question of one fixed length (names of one service differ only in case,
// which does not change their length).
type section struct {
	an, ar uint16
	// anLen is the size of the answer records at the start of body; the
	// rest is additional records (glue), which may be left out.
	anLen int
	body  []byte
}

// answer is the positive answer to one (name, type). When the whole answer
// would pass 65,535 bytes (tooBig), it is never sent whole: subsets hold
// zone-balanced subsets that fit, rotated between queries so every endpoint
// is served over time.
type answer struct {
	full    section
	tooBig  bool
	subsets []section
	next    atomic.Uint32
}

// pick returns the section to send over TCP and whether it is a subset.
func (a *answer) pick() (section, bool) {
	if !a.tooBig {
		return a.full, false
	}
	i := a.next.Add(1) % uint32(len(a.subsets))
	return a.subsets[i], true
}

type srvKey struct {
	port  string
	proto registry.Protocol
}

type srvAnswer struct {
	key srvKey
	a   *answer
}

// srvFor returns the SRV answer of port and proto, nil when there is none.
func (a *svcAnswers) srvFor(port string, proto registry.Protocol) *answer {
	for i := range a.srv {
		if a.srv[i].key.port == port && a.srv[i].key.proto == proto {
			return a.srv[i].a
		}
	}
	return nil
}

// svcAnswers holds every positive answer of one service version. It is
// built once, when first needed after the service changed, and then only
// read.
type svcAnswers struct {
	svc  *registry.Service
	a    *answer // A of <svc>.<domain>
	aaaa *answer
	// srv holds the SRV answers of _<port>._<proto>.<svc>.<domain>, one
	// per port (at most registry.MaxPorts, usually one): a slice
	// searched in order costs less than a map, in memory and in time.
	srv []srvAnswer
	// split is the zone-aware split the SRV weights follow; nil for the
	// endpoint weights. A variant with a split holds no A or AAAA.
	split []ZoneWeight
	// epGen is the EndpointWeights generation the SRV weights were built
	// with (0: registry weights).
	epGen uint64
	// prio is the SRV priority of each region (package regions); nil: all
	// 0. An endpoint of a region it leaves out is left out. rulesVer is
	// the RegionRules version it was computed with.
	prio     map[string]int
	rulesVer uint64
}

// slot holds the current answers of one service name: cur with endpoint
// weights, and per configured zone a variant whose SRV weights follow that
// zone's split.
type slot struct {
	cur   atomic.Pointer[svcAnswers]
	zoned []atomic.Pointer[svcAnswers] // by zoneTable index
	// regional holds the variants of queriers of a known region when the
	// service has more than one region or region rules, keyed by
	// regionalKey; bounded by (zones + 1) × (regions + 1).
	regional sync.Map
	// regions caches the service's regions for one version.
	regions atomic.Pointer[svcRegions]
}

type svcRegions struct {
	svc  *registry.Service
	regs []string
}

type regionalKey struct {
	zone int    // zoneTable index, -1 unknown
	prio string // prioKey
}

// cache maps service names to their answers. Readers take no lock: a
// sync.Map (a concurrent hash trie) finds a name's slot in a few loads,
// and adding a name, once per service, touches only its own branch, so
// the first query of each of n services costs O(1), not a copy of the n
// names before it; each slot is swapped when its service changes.
type cache struct {
	names sync.Map // service name -> *slot
	zones int      // variants per slot, read-only after New
}

func (c *cache) slot(name string) *slot {
	if v, ok := c.names.Load(name); ok {
		return v.(*slot)
	}
	s := &slot{}
	if c.zones > 0 {
		s.zoned = make([]atomic.Pointer[svcAnswers], c.zones)
	}
	v, _ := c.names.LoadOrStore(name, s)
	return v.(*slot)
}

// answers returns the answers for svc, building them if svc is newer than
// what is cached. Concurrent builders of the same version may both build;
// one wins, and both results are correct.
func (s *Server) answers(svc *registry.Service) *svcAnswers {
	sl := s.cache.slot(svc.Name)
	gen := s.endpointGen(svc.Name)
	rules, rv := s.regionRules(svc.Name)
	if a := sl.cur.Load(); a != nil && a.svc == svc && a.epGen == gen && a.rulesVer == rv {
		return a
	}
	var prio map[string]int
	if !rules.Empty() { // exclusions apply to queriers of every region
		prio, _ = regions.Order(s.serviceRegions(sl, svc), "", s.cfg.RegionPreference, rules, time.Now())
	}
	a := s.build(svc, nil, gen, prio)
	a.rulesVer = rv
	sl.cur.Store(a)
	return a
}

// regionRules is service's rules, none without Config.RegionRules.
func (s *Server) regionRules(service string) (regions.Rules, uint64) {
	if s.cfg.RegionRules == nil {
		return regions.Rules{}, 0
	}
	return s.cfg.RegionRules.Rules(service)
}

// serviceRegions lists svc's regions with a healthy serving endpoint.
func (s *Server) serviceRegions(sl *slot, svc *registry.Service) []string {
	if r := sl.regions.Load(); r != nil && r.svc == svc {
		return r.regs
	}
	var regs []string
	for _, e := range svc.Serving() {
		if e.Health == registry.Healthy && !slices.Contains(regs, e.Locality.Region) {
			regs = append(regs, e.Locality.Region)
		}
	}
	slices.Sort(regs)
	sl.regions.Store(&svcRegions{svc: svc, regs: regs})
	return regs
}

// regionalAnswers returns the variant for a querier of a known region
// when the service's SRV priorities depend on the region, and false when
// they do not (one region, no rules, or the querier's region unknown).
func (s *Server) regionalAnswers(rp *reply, svc *registry.Service) (*svcAnswers, bool) {
	if s.zones == nil || !s.zones.hasRegions {
		return nil, false
	}
	sl := s.cache.slot(svc.Name)
	present := s.serviceRegions(sl, svc)
	rules, rv := s.regionRules(svc.Name)
	if len(present) <= 1 && rules.Empty() {
		return nil, false
	}
	zi, scope := s.zoneOf(rp)
	region := ""
	if zi >= 0 {
		region = s.zones.regions[zi]
	}
	// The answer differs by region: keep it to the querier's subnet.
	rp.scope = scope
	if region == "" {
		return nil, false
	}
	prio, _ := regions.Order(present, region, s.cfg.RegionPreference, rules, time.Now())
	var split []ZoneWeight
	if s.cfg.Weights != nil {
		var ok bool
		split, ok = s.cfg.Weights.ZoneWeights(rp.sc.split[:0], svc.Name, s.zones.names[zi])
		rp.sc.split = split[:0]
		if !ok || len(split) == 0 {
			split = nil
		}
	}
	key := regionalKey{zone: zi, prio: prioKey(prio)}
	if split == nil {
		key.zone = -1 // endpoint weights: the same for every zone
	}
	gen := s.endpointGen(svc.Name)
	if v, ok := sl.regional.Load(key); ok {
		if a := v.(*svcAnswers); a.svc == svc && a.epGen == gen && a.rulesVer == rv && slices.Equal(a.split, split) {
			return a, true
		}
	}
	a := s.build(svc, slices.Clone(split), gen, prio)
	a.rulesVer = rv
	sl.regional.Store(key, a)
	return a, true
}

// prioKey names a priority map.
func prioKey(prio map[string]int) string {
	keys := make([]string, 0, len(prio))
	for r := range prio {
		keys = append(keys, r)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, r := range keys {
		b.WriteString(r + "=" + strconv.Itoa(prio[r]) + ",")
	}
	return b.String()
}

// srvAnswers returns the answers whose SRV weights suit the querier: its
// zone's variant when its zone is known and Config.Weights has a split
// for it, else the endpoint weights. It sets the ECS scope of the reply
// when the answer depends on the querier's zone.
func (s *Server) srvAnswers(rp *reply, svc *registry.Service) *svcAnswers {
	if a, ok := s.regionalAnswers(rp, svc); ok {
		return a
	}
	if s.zones == nil || s.cfg.Weights == nil {
		return s.answers(svc)
	}
	zi, scope := s.zoneOf(rp)
	if zi < 0 && !rp.ecs.present {
		return s.answers(svc)
	}
	zone := ""
	if zi >= 0 {
		zone = s.zones.names[zi]
	}
	split, ok := s.cfg.Weights.ZoneWeights(rp.sc.split[:0], svc.Name, zone)
	rp.sc.split = split[:0] // keep what it grew to
	if !ok || len(split) == 0 {
		return s.answers(svc) // same for every querier: scope 0
	}
	// The service's answers differ by zone: a resolver caching this one
	// must keep it to the subnet it holds for (RFC 7871 7.3.1), even when
	// the querier's zone is unknown.
	rp.scope = scope
	if zi < 0 {
		return s.answers(svc)
	}
	if rp.zoneByECS {
		s.metrics.zoned[zoneByECS].Inc()
	} else {
		s.metrics.zoned[zoneBySource].Inc()
	}
	p := &s.cache.slot(svc.Name).zoned[zi]
	gen := s.endpointGen(svc.Name)
	if a := p.Load(); a != nil && a.svc == svc && a.epGen == gen && slices.Equal(a.split, split) {
		return a
	}
	a := s.build(svc, slices.Clone(split), gen, nil)
	p.Store(a)
	return a
}

// build makes the positive answers of svc: all of them with the endpoint
// weights when split is nil, else the SRV answers with split's.
func (s *Server) build(svc *registry.Service, split []ZoneWeight, epGen uint64, prio map[string]int) *svcAnswers {
	out := &svcAnswers{svc: svc, split: split, epGen: epGen, prio: prio}
	var v4, v6 []*registry.Endpoint
	ports := map[srvKey][]*registry.Endpoint{}
	for _, e := range svc.Serving() {
		if e.Health != registry.Healthy {
			continue
		}
		if _, kept := prio[e.Locality.Region]; prio != nil && !kept {
			continue // an excluded region
		}
		if e.Address.Is4() {
			v4 = append(v4, e)
		} else {
			v6 = append(v6, e)
		}
		for _, p := range e.Ports {
			k := srvKey{p.Name, p.Protocol}
			ports[k] = append(ports[k], e)
		}
	}
	host := svc.Name + "." + s.domain
	if len(v4) > 0 && split == nil {
		out.a = s.buildAddrs(v4, wireLen(host))
	}
	if len(v6) > 0 && split == nil {
		out.aaaa = s.buildAddrs(v6, wireLen(host))
	}
	out.srv = make([]srvAnswer, 0, len(ports))
	for k, eps := range ports {
		qname := "_" + k.port + "._" + string(k.proto) + "." + host
		out.srv = append(out.srv, srvAnswer{k, s.buildSRV(eps, split, prio, k.port, svc.Name, wireLen(qname), epGen)})
	}
	return out
}

// room is the space left for sections in a TCP message after the header, a
// question of qlen wire bytes and our OPT record (with the largest ECS
// option and a COOKIE).
func room(qlen int) int { return maxTCPSize - headerLen - qlen - 4 - optMaxLen }

func (s *Server) buildAddrs(eps []*registry.Endpoint, qlen int) *answer {
	mk := func(eps []*registry.Endpoint) section {
		// Sized exactly: a cache holds one per service.
		b := make([]byte, 0, len(eps)*addrLen(eps[0].Address))
		for _, e := range eps {
			b = appendAddr(b, ptrQName, s.ttl.a, e.Address)
		}
		return section{an: uint16(len(eps)), anLen: len(b), body: b}
	}
	a := &answer{}
	per := addrLen(eps[0].Address)
	if len(eps)*per <= room(qlen) {
		a.full = mk(eps)
		return a
	}
	a.tooBig = true
	for _, sub := range zoneSubsets(eps, room(qlen)/per) {
		a.subsets = append(a.subsets, mk(sub))
	}
	return a
}

// srvWeights gives the SRV weights of the endpoints of one answer. Without
// a split they are the endpoint weights; with one, endpoint e of zone y
// gets split[y] × e.Weight / (Σ weights of y's endpoints in eps), so that
// the zones' totals follow the split and each zone's endpoints share its
// weight by their own. Either way they are scaled to 1..65535, keeping
// their ratios (the largest becomes 65535; none is 0). When no endpoint's
// zone has weight in the split, the endpoint weights are used.
func srvWeights(eps []*registry.Endpoint, split []ZoneWeight) []uint16 {
	return srvWeightsWith(eps, split, func(e *registry.Endpoint) float64 { return float64(e.Weight) })
}

// endpointGen is the generation of service's EndpointWeights; 0 without.
func (s *Server) endpointGen(service string) uint64 {
	if s.epw == nil {
		return 0
	}
	return s.epw.EndpointGen(service)
}

// endpointWeight gives the weight srvWeightsWith uses for the endpoints of
// service: its EndpointWeights weight when there is one (gen > 0), else
// its registry weight.
func (s *Server) endpointWeight(service string, gen uint64) func(*registry.Endpoint) float64 {
	if gen == 0 || s.epw == nil {
		return func(e *registry.Endpoint) float64 { return float64(e.Weight) }
	}
	return func(e *registry.Endpoint) float64 {
		if w, ok := s.epw.EndpointWeight(service, e.ID); ok {
			return float64(max(w, 1))
		}
		return float64(e.Weight)
	}
}

// srvWeightsWith is srvWeights with weight(e) in place of e.Weight: the
// SRV weight of endpoint e of zone y is split[y] × weight(e) / Σ weight of
// y's endpoints, scaled to 1..65535.
func srvWeightsWith(eps []*registry.Endpoint, split []ZoneWeight, weight func(*registry.Endpoint) float64) []uint16 {
	raw := make([]float64, len(eps))
	zoned := false
	if len(split) > 0 {
		sums := make([]float64, len(split))
		idx := make([]int, len(eps))
		for i, e := range eps {
			idx[i] = slices.IndexFunc(split, func(z ZoneWeight) bool { return z.Zone == e.Locality.Zone })
			if idx[i] >= 0 {
				sums[idx[i]] += weight(e)
			}
		}
		for i, e := range eps {
			if j := idx[i]; j >= 0 && sums[j] > 0 && split[j].Weight > 0 {
				raw[i] = float64(split[j].Weight) * weight(e) / sums[j]
				zoned = true
			}
		}
	}
	if !zoned {
		for i, e := range eps {
			raw[i] = weight(e)
		}
	}
	maxW := 0.0
	for _, w := range raw {
		maxW = max(maxW, w)
	}
	out := make([]uint16, len(eps))
	for i, w := range raw {
		if maxW > 0 {
			w = math.Round(w * 65535 / maxW)
		}
		out[i] = uint16(min(max(w, 1), 65535))
	}
	return out
}

// buildSRV makes the SRV answer: one SRV per endpoint with its target
// <id>.<service>.<domain>, and the targets' addresses as additional
// records, their owners compressed to point at the SRV targets.
func (s *Server) buildSRV(eps []*registry.Endpoint, split []ZoneWeight, prio map[string]int, port, service string, qlen int, epGen uint64) *answer {
	suffix := "." + service + "." + s.domain
	weight := s.endpointWeight(service, epGen)
	var scratch []byte // reused between subsets; what is kept is copied to size
	mk := func(eps []*registry.Endpoint) section {
		base := headerLen + qlen + 4
		weights := srvWeightsWith(eps, split, weight)
		b := scratch[:0]
		targets := make([]int, len(eps))
		for i, e := range eps {
			p, _ := e.Port(port)
			target := e.ID + suffix
			b = appendRRHeader(b, ptrQName, typeSRV, s.ttl.srv, 6+wireLen(target))
			b = appendU16(b, uint16(prio[e.Locality.Region])) // by region, see the package doc
			b = appendU16(b, weights[i])
			b = appendU16(b, p.Number)
			targets[i] = base + len(b)
			b = appendName(b, target)
		}
		anLen := len(b)
		for i, e := range eps {
			if targets[i] <= maxPtr {
				b = appendAddr(b, 0xC000|uint16(targets[i]), s.ttl.a, e.Address)
				continue
			}
			// Past the reach of a pointer: the owner is written out.
			b = appendName(b, e.ID+suffix)
			b = appendAddrRest(b, s.ttl.a, e.Address)
		}
		scratch = b
		// The cache keeps the body: without append's spare capacity.
		return section{an: uint16(len(eps)), ar: uint16(len(eps)), anLen: anLen, body: slices.Clone(b)}
	}
	// Worst case per endpoint: SRV + address record with its owner written
	// out.
	per := 0
	for _, e := range eps {
		t := wireLen(e.ID + suffix)
		per = max(per, 12+6+t+t+10+addrLen(e.Address)-2)
	}
	a := &answer{}
	full := mk(eps)
	if len(full.body) <= room(qlen) {
		a.full = full
		return a
	}
	a.tooBig = true
	a.subsets = fitSubsets(eps, room(qlen), room(qlen)/per, mk)
	return a
}

// fitSubsets finds subsets as large as fit in room. k is a size that fits
// in the worst case (every glue owner written out); the real size is
// smaller, since glue owners are pointers while they are within reach, so
// it searches between k and the number of endpoints for the largest size
// whose every subset fits.
func fitSubsets(eps []*registry.Endpoint, room, k int, mk func([]*registry.Endpoint) section) []section {
	build := func(k int) ([]section, bool) {
		var secs []section
		for _, sub := range zoneSubsets(eps, k) {
			sec := mk(sub)
			if len(sec.body) > room {
				return nil, false
			}
			secs = append(secs, sec)
		}
		return secs, true
	}
	lo, hi := max(k, 1), len(eps) // lo fits, hi does not
	best, ok := build(lo)
	for !ok && lo > 1 { // only if the worst case was not the worst
		lo = lo * 9 / 10
		best, ok = build(lo)
	}
	for range 8 {
		if hi-lo <= max(lo/100, 1) {
			break
		}
		mid := (lo + hi) / 2
		if secs, ok := build(mid); ok {
			lo, best = mid, secs
		} else {
			hi = mid
		}
	}
	return best
}

// zoneSubsets splits eps into subsets of at most k endpoints, each taking
// from every zone in proportion to the zone's share of eps, such that the
// subsets together hold every endpoint. Subset v takes, from each zone, the
// window of its quota starting at v*quota, wrapping around.
func zoneSubsets(eps []*registry.Endpoint, k int) [][]*registry.Endpoint {
	k = max(k, 1)
	byZone := map[string][]*registry.Endpoint{}
	for _, e := range eps {
		byZone[e.Locality.Zone] = append(byZone[e.Locality.Zone], e)
	}
	zones := make([]string, 0, len(byZone))
	for z := range byZone {
		zones = append(zones, z)
	}
	slices.Sort(zones)
	n := len(eps)
	// Largest-remainder apportionment of k among zones, at least 1 each
	// while k allows.
	quota := make([]int, len(zones))
	type rem struct {
		i    int
		frac float64
	}
	rems := make([]rem, len(zones))
	used := 0
	for i, z := range zones {
		exact := float64(k) * float64(len(byZone[z])) / float64(n)
		quota[i] = int(exact)
		rems[i] = rem{i, exact - float64(quota[i])}
		used += quota[i]
	}
	slices.SortStableFunc(rems, func(a, b rem) int { return cmp.Compare(b.frac, a.frac) })
	for j := 0; used < k && j < len(rems); j++ {
		quota[rems[j].i]++
		used++
	}
	rounds := 1
	for i, z := range zones {
		nz := len(byZone[z])
		quota[i] = min(quota[i], nz)
		if quota[i] == 0 && used < k {
			quota[i] = 1
		}
		if quota[i] > 0 {
			rounds = max(rounds, (nz+quota[i]-1)/quota[i])
		}
	}
	out := make([][]*registry.Endpoint, rounds)
	for v := range rounds {
		for i, z := range zones {
			eps := byZone[z]
			for j := range quota[i] {
				out[v] = append(out[v], eps[(v*quota[i]+j)%len(eps)])
			}
		}
	}
	return out
}

// glueThatFits returns how many bytes and records of glue, whole records
// from the start, fit in room. glue is what buildSRV wrote after the SRV
// records: address records whose owner is a compression pointer or a
// name written out.
func glueThatFits(glue []byte, room int) (n int, count uint16) {
	for n < len(glue) {
		i := n
		for i < len(glue) && glue[i] != 0 && glue[i]&0xC0 != 0xC0 {
			i += 1 + int(glue[i]) // a label
		}
		if i < len(glue) && glue[i] != 0 {
			i += 2 // a pointer ends the owner
		} else {
			i++ // the root label
		}
		if i+10 > len(glue) {
			return n, count // cannot happen: buildSRV writes whole records
		}
		end := i + 10 + (int(glue[i+8])<<8 | int(glue[i+9]))
		if end > room || end > len(glue) {
			return n, count
		}
		n, count = end, count+1
	}
	return n, count
}

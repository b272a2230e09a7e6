package xds

import (
	"fmt"
	"math"
	"reflect"

	"github.com/spillway/spillway/registry"
)

// edsShared is what the EDS variants of one service version share. The
// client zones of a service get the same endpoints with the same weights
// and differ only in the weights (and, across regions, the priorities) of
// the localities, yet each variant was built, checked and encoded whole:
// three times the work for a service with clients in three zones, on
// every registration of a churn. So the first variant built records where
// each locality's endpoints lie in its encoding, and the next ones copy
// those bytes between locality fields of their own.
//
// The copy is exactly what a build would encode (TestEDSSharedMatchesBuild)
// and passes the same checks: the endpoints' checks (encode's validation
// and checkEDS) hold for any set of the first variant's localities,
// because they look at each endpoint, each locality's endpoint weights
// and addresses repeated across the localities present, and a variant
// holds the same or fewer; what depends on the variant, its locality
// weights and priorities, assemble checks as build and checkEDS do. A
// variant that needs a locality the first one left out (a region its
// priorities dropped) is built in full.
//
// It lives in the service's cache entry, for the service version, plan
// generation and region rules of its EDS map, and keeps no bytes of its
// own: buf is the first variant's, which the entry keeps anyway. Its
// own few hundred bytes (the localities) go at the second sweep after
// it is made (cache.sweep), so a region's 50,000 services do not
// each keep them while they do not change.
type edsShared struct {
	epw   endpointWeights // what the endpoints were weighed with
	locs  []Locality      // the service's localities, as build grouped them
	locW  []uint32        // with epw.localities: their weights, the same for every zone
	buf   []byte          // the first variant's buffer
	spans []span          // by locality of locs, in buf
	have  []bool          // whether spans[i] is in buf
	count int             // how many have
}

// newEDSShared records what b's last build, encoded into r with spans
// (one per locality it included), lets other variants copy.
func newEDSShared(b *claBuilder, epw endpointWeights, r *resource, spans []span) *edsShared {
	sh := &edsShared{
		epw:   epw,
		locs:  append([]Locality(nil), b.groups.outL...),
		buf:   r.field.ReadOnlyData(),
		spans: make([]span, len(b.groups.outL)),
		have:  make([]bool, len(b.groups.outL)),
		count: len(b.included),
	}
	if epw.localities {
		sh.locW = append([]uint32(nil), b.weights...)
	}
	for k, i := range b.included {
		sh.spans[i], sh.have[i] = spans[k], true
	}
	return sh
}

// assemble makes the variant of svc for clients in zone, with locality
// weights from weights (or sh's, with epw.localities) and region
// priorities prio (nil: every locality at 0), from sh's encoded
// endpoints. It reports false when it cannot, and the variant is to be
// built in full: the endpoints are weighed otherwise than sh's, or a
// locality the variant holds is not in sh.
func (sh *edsShared) assemble(svc *registry.Service, zone string, weights LocalityWeights, epw endpointWeights, prio map[string]int) (*resource, bool, error) {
	if epw.localities != sh.epw.localities || epw.edge != nil || sh.epw.edge != nil ||
		reflect.ValueOf(epw.byID).UnsafePointer() != reflect.ValueOf(sh.epw.byID).UnsafePointer() {
		return nil, false, nil
	}
	name, locs := svc.Name, sh.locs
	if len(locs) == 0 {
		return nil, false, nil // nothing to share: a build is the cluster's name
	}
	w := sh.locW
	if w == nil {
		w = weights(svc, zone, locs)
	}
	if err := checkLocalityWeights(name, locs, w); err != nil {
		return nil, true, err
	}
	// The localities the variant holds, in build's order, with their
	// priorities: checked as encode's validation (a priority of at most
	// 128) and checkEDS (each priority's weights within uint32, the
	// priorities 0..n-1 with none missing) check them.
	var held []int
	prios := make([]uint32, len(locs))
	for i, l := range locs {
		if prio != nil {
			p, ok := prio[l.Region]
			if !ok {
				continue
			}
			prios[i] = uint32(p)
		}
		if !sh.have[i] {
			return nil, false, nil
		}
		held = append(held, i)
	}
	for k, i := range held {
		if p := prios[i]; p > 128 {
			return nil, true, fmt.Errorf("resource %s is invalid: endpoints[%d].priority: %d, want at most 128", name, k, p)
		}
	}
	var sums []uint64
	size := sizeString(name)
	for k, i := range held {
		p := prios[i]
		for uint32(len(sums)) <= p {
			sums = append(sums, 0)
		}
		if sums[p] += uint64(w[i]); sums[p] > math.MaxUint32 {
			return nil, true, fmt.Errorf("resource %s: %w", name, rejectf(fmt.Sprintf("endpoints[%d].load_balancing_weight", k),
				"the locality weights of priority %d sum over %d", p, uint64(math.MaxUint32)))
		}
		size += sizeMessage(sh.lleSize(i, w[i], p))
	}
	for p, sum := range sums {
		if sum == 0 {
			return nil, true, fmt.Errorf("resource %s: %w", name, rejectf("endpoints", "priority %d missing (priorities must be 0..%d)", p, len(sums)-1))
		}
	}
	r, err := frame(name, EndpointType, size, func(b []byte) ([]byte, error) {
		b = appendString(b, claClusterName, name)
		for _, i := range held {
			l, sp := locs[i], sh.spans[i]
			b = appendMessageHeader(b, claEndpoints, sh.lleSize(i, w[i], prios[i]))
			b = appendLocality(b, l.Region, l.Zone, l.SubZone)
			b = append(b, sh.buf[sp.start:sp.end]...)
			b = appendU32Value(b, lleWeight, w[i])
			b = appendVarint(b, llePriority, uint64(prios[i]))
		}
		return b, nil
	})
	return r, true, err
}

// lleSize is the encoded size of locality i's LocalityLbEndpoints with
// weight w and priority p, as appendCLA writes it.
func (sh *edsShared) lleSize(i int, w, p uint32) int {
	l, sp := sh.locs[i], sh.spans[i]
	return sizeMessage(sizeLocalityOf(l.Region, l.Zone, l.SubZone)) + (sp.end - sp.start) +
		sizeMessage(sizeVarint(uint64(w))) + sizeVarint(uint64(p))
}

// buildEDSShared is buildEDS for svc's cache entry e (its mu held, its
// EDS map for svc's version, plan generation and rules): a variant is
// copied from e's shared endpoints when it can be, else built in full,
// and a full build that holds more localities than e's shared endpoints
// becomes them.
func (s *Server) buildEDSShared(e *entry, svc *registry.Service, zone string, weights LocalityWeights, epw endpointWeights, prio map[string]int) (*resource, error) {
	if e.shared != nil {
		if r, ok, err := e.shared.assemble(svc, zone, weights, epw, prio); ok {
			return r, err
		}
	}
	b := s.claBuilder()
	defer b.release()
	cla, err := b.build(svc, s.cfg.PortName, zone, weights, epw, prio)
	if err != nil {
		return nil, err
	}
	spans := make([]span, len(cla.Endpoints))
	r, recorded, err := encodeSpans(svc.Name, cla, spans)
	if err != nil {
		return nil, err
	}
	if recorded && (e.shared == nil || len(b.included) > e.shared.count) {
		e.shared, e.sharedAged = newEDSShared(b, epw, r, spans), false
	}
	return r, nil
}

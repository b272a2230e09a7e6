package xds

import (
	"fmt"
	"sync"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillway/spillway/registry"
)

// claBuilder holds the messages of one ClusterLoadAssignment while it is
// built, checked and encoded. A message is cleared by assigning its zero
// value, not by Reset, which also stores the message's type information
// (an atomic store per message, about a tenth of a build): nothing reads
// these messages through reflection unless an assignment falls back to
// the generic marshaler, and protobuf-go sets that up on first use. Nothing keeps them afterwards (a resource
// holds bytes), so buildEDS takes a builder from claBuilders and returns
// it: a planner cycle that changes every service's weights rebuilds each
// service's EDS for each zone, and its garbage, not the streams, would
// otherwise set how much heap that cycle touches.
type claBuilder struct {
	groups  localityGroups
	cla     v3endpointpb.ClusterLoadAssignment
	llePtrs []*v3endpointpb.LocalityLbEndpoints
	lles    []v3endpointpb.LocalityLbEndpoints
	locs    []v3corepb.Locality
	lbPtrs  []*v3endpointpb.LbEndpoint
	lbs     []v3endpointpb.LbEndpoint
	hosts   []v3endpointpb.LbEndpoint_Endpoint
	eps     []v3endpointpb.Endpoint
	addrs   []v3corepb.Address
	sockets []v3corepb.Address_SocketAddress
	sas     []v3corepb.SocketAddress
	ports   []v3corepb.SocketAddress_PortValue
	u32s    []wrapperspb.UInt32Value
	ws      []uint64
	fitted  []uint32
	// weights are the last build's locality weights, one per locality of
	// groups, and included the localities it put in the assignment, in
	// order (build leaves out those of a region prio leaves out).
	weights  []uint32
	included []int
	// omitHostnames leaves each endpoint's hostname (its id) out
	// (Config.OmitHostnames); Server.claBuilder sets it.
	omitHostnames bool
}

// claBuilders are the builders buildEDS reuses. A builder grown past
// maxPooledEndpoints goes to the GC instead, so the pool stays small: a
// builder for 10,000 endpoints holds about 5 MB, and the pool keeps at
// most one or two per P until the next GC or two. The region's largest
// service has 10,000 endpoints; with the limit at 4,096 each of its
// builds made its builder anew (BenchmarkBuildEDS at 10,000 endpoints:
// 9.6 -> 7.6 ms and 6.2 -> 1.3 MB a build).
var claBuilders = sync.Pool{New: func() any { return new(claBuilder) }}

const maxPooledEndpoints = 16384

// grow returns s with length n, reusing its array when it is large
// enough. It never copies elements (proto messages must not be copied).
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// clusterLoadAssignmentWith builds ClusterLoadAssignment S for clients in
// zone, with a plan's endpoint weights, into messages of its own.
func clusterLoadAssignmentWith(svc *registry.Service, port, zone string, weights LocalityWeights, epw endpointWeights, prio map[string]int) (*v3endpointpb.ClusterLoadAssignment, error) {
	return new(claBuilder).build(svc, port, zone, weights, epw, prio)
}

// build builds ClusterLoadAssignment S for clients in zone, with a plan's
// endpoint weights. prio, non-nil, is the priority of each region (package
// regions): a locality of a region it leaves out is dropped. Nil puts
// every locality at priority 0. The locality weights are computed over
// every locality, as without priorities: inside one priority only their
// ratios count. The message is b's: it is valid until b builds again.
func (b *claBuilder) build(svc *registry.Service, port, zone string, weights LocalityWeights, epw endpointWeights, prio map[string]int) (*v3endpointpb.ClusterLoadAssignment, error) {
	locs, eps := b.groups.group(svc, port)
	b.weights, b.included = nil, b.included[:0]
	cla := &b.cla
	*cla = v3endpointpb.ClusterLoadAssignment{}
	cla.ClusterName = svc.Name
	if len(locs) == 0 {
		return cla, nil
	}
	var w []uint32
	if epw.localities {
		sums := make([]uint64, len(locs))
		for i := range locs {
			for _, e := range eps[i] {
				if e.Health == registry.Healthy {
					sums[i] += epw.weight(e)
				}
			}
		}
		w = fitUint32(sums)
	} else {
		w = weights(svc, zone, locs)
	}
	if err := checkLocalityWeights(svc.Name, locs, w); err != nil {
		return nil, err
	}
	b.weights = w
	total := 0
	for i := range eps {
		total += len(eps[i])
	}
	b.size(len(locs), total)
	cla.Endpoints = b.llePtrs[:0]
	next := 0 // the next endpoint's index in b's slices
	for i, l := range locs {
		var priority int
		if prio != nil {
			p, ok := prio[l.Region]
			if !ok {
				continue // an excluded region
			}
			priority = p
		}
		loc := &b.locs[i]
		*loc = v3corepb.Locality{}
		loc.Region, loc.Zone, loc.SubZone = l.Region, l.Zone, l.SubZone
		lle := &b.lles[i]
		*lle = v3endpointpb.LocalityLbEndpoints{}
		lle.Locality = loc
		lle.LoadBalancingWeight = b.uint32(i, w[i])
		lle.Priority = uint32(priority)

		ws := b.ws[:len(eps[i])]
		for j, e := range eps[i] {
			ws[j] = epw.weight(e)
		}
		fitted := fitUint32Into(b.fitted[:len(eps[i])], ws)
		lle.LbEndpoints = b.lbPtrs[next : next : next+len(eps[i])]
		for j, e := range eps[i] {
			k := next + j
			p, _ := endpointPort(e, port)
			sa := &b.sas[k]
			*sa = v3corepb.SocketAddress{}
			sa.Address = e.Address.String()
			b.ports[k] = v3corepb.SocketAddress_PortValue{PortValue: uint32(p.Number)}
			sa.PortSpecifier = &b.ports[k]
			b.sockets[k] = v3corepb.Address_SocketAddress{SocketAddress: sa}
			addr := &b.addrs[k]
			*addr = v3corepb.Address{}
			addr.Address = &b.sockets[k]
			ep := &b.eps[k]
			*ep = v3endpointpb.Endpoint{}
			ep.Address = addr
			if !b.omitHostnames {
				ep.Hostname = e.ID
			}
			b.hosts[k] = v3endpointpb.LbEndpoint_Endpoint{Endpoint: ep}
			lb := &b.lbs[k]
			*lb = v3endpointpb.LbEndpoint{}
			lb.HostIdentifier = &b.hosts[k]
			lb.HealthStatus = healthStatus[e.Health]
			lb.LoadBalancingWeight = b.uint32(len(locs)+k, fitted[j])
			lle.LbEndpoints = append(lle.LbEndpoints, lb)
		}
		next += len(eps[i])
		cla.Endpoints = append(cla.Endpoints, lle)
		b.included = append(b.included, i)
	}
	return cla, nil
}

// checkLocalityWeights says why gRPC could not take w as the weights of
// svc's localities locs: one weight per locality, none of them 0.
func checkLocalityWeights(svc string, locs []Locality, w []uint32) error {
	if len(w) != len(locs) {
		return fmt.Errorf("cluster load assignment %s: %d locality weights for %d localities", svc, len(w), len(locs))
	}
	for i, l := range locs {
		if w[i] < 1 {
			return fmt.Errorf("cluster load assignment %s: locality %s/%s/%s has weight 0; gRPC would drop it", svc, l.Region, l.Zone, l.SubZone)
		}
	}
	return nil
}

// size makes room for localities and endpoints.
func (b *claBuilder) size(localities, endpoints int) {
	b.llePtrs = grow(b.llePtrs, localities)
	b.lles = grow(b.lles, localities)
	b.locs = grow(b.locs, localities)
	b.lbPtrs = grow(b.lbPtrs, endpoints)
	b.lbs = grow(b.lbs, endpoints)
	b.hosts = grow(b.hosts, endpoints)
	b.eps = grow(b.eps, endpoints)
	b.addrs = grow(b.addrs, endpoints)
	b.sockets = grow(b.sockets, endpoints)
	b.sas = grow(b.sas, endpoints)
	b.ports = grow(b.ports, endpoints)
	b.u32s = grow(b.u32s, localities+endpoints)
	b.ws = grow(b.ws, endpoints)
	b.fitted = grow(b.fitted, endpoints)
}

// uint32 is wrapper i, set to v.
func (b *claBuilder) uint32(i int, v uint32) *wrapperspb.UInt32Value {
	u := &b.u32s[i]
	*u = wrapperspb.UInt32Value{}
	u.Value = v
	return u
}

// release returns b to claBuilders unless it grew too large to keep.
func (b *claBuilder) release() {
	if cap(b.lbs) > maxPooledEndpoints {
		return
	}
	claBuilders.Put(b)
}

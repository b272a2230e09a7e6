package xds

import (
	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The wire encoding of the ClusterLoadAssignments claBuilder builds,
// written field by field. It gives the same bytes as
// proto.MarshalOptions{Deterministic: true} (fields in number order, but
// a message's oneof members after its other fields, as protobuf-go
// orders them; a set message field written even when empty, a zero
// scalar left out, a oneof member written even when zero), which
// TestCLAEncodingMatchesProto checks over many built assignments, in
// about a third of the time: the generic marshaler walked every endpoint
// twice through reflection-driven coders, once to size and once to
// write, and that was about half of a build (BenchmarkBuildEDS).
//
// It encodes exactly the fields claBuilder.build sets: cluster_name;
// each LocalityLbEndpoints' locality, lb_endpoints, load_balancing_weight
// and priority; each LbEndpoint's endpoint (address.socket_address with
// protocol, address and port_value; hostname), health_status and
// load_balancing_weight. claEncodable says whether an assignment holds
// nothing else (unknown fields aside: the builder resets every message
// it fills); encode marshals one that does the generic way.

// Field numbers (envoy/config/endpoint/v3 and core/v3).
const (
	claClusterName = 1
	claEndpoints   = 2

	lleLocality    = 1
	lleLbEndpoints = 2
	lleWeight      = 3
	llePriority    = 5

	locRegion  = 1
	locZone    = 2
	locSubZone = 3

	lbEndpoint = 1
	lbHealth   = 2
	lbWeight   = 4

	epAddress  = 1
	epHostname = 3

	addrSocket = 1

	saProtocol  = 1
	saAddress   = 2
	saPortValue = 3

	u32Value = 1
)

// claEncodable reports whether appendCLA encodes every field cla sets.
func claEncodable(cla *v3endpointpb.ClusterLoadAssignment) bool {
	if cla.Policy != nil || cla.NamedEndpoints != nil {
		return false
	}
	for _, lle := range cla.Endpoints {
		if lle == nil || lle.Metadata != nil || lle.Proximity != nil || lle.LbConfig != nil {
			return false
		}
		for _, lb := range lle.LbEndpoints {
			if lb == nil || lb.Metadata != nil {
				return false
			}
			if _, ok := lb.HostIdentifier.(*v3endpointpb.LbEndpoint_Endpoint); !ok && lb.HostIdentifier != nil {
				return false
			}
			ep := lb.GetEndpoint()
			if ep == nil {
				continue
			}
			if ep.HealthCheckConfig != nil || ep.AdditionalAddresses != nil {
				return false
			}
			a := ep.Address
			if a == nil {
				continue
			}
			if _, ok := a.Address.(*v3corepb.Address_SocketAddress); !ok && a.Address != nil {
				return false
			}
			sa := a.GetSocketAddress()
			if sa == nil {
				continue
			}
			if sa.ResolverName != "" || sa.Ipv4Compat || sa.NetworkNamespaceFilepath != "" {
				return false
			}
			if _, ok := sa.PortSpecifier.(*v3corepb.SocketAddress_PortValue); !ok && sa.PortSpecifier != nil {
				return false
			}
		}
	}
	return true
}

func sizeString(v string) int {
	if v == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(v)) // every tag here is one byte
}

func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func sizeMessage(n int) int { return 1 + protowire.SizeBytes(n) }

func appendString(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendMessageHeader(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func sizeU32(w *wrapperspb.UInt32Value) int { return sizeVarint(uint64(w.GetValue())) }

func appendU32(b []byte, num protowire.Number, w *wrapperspb.UInt32Value) []byte {
	if w == nil {
		return b
	}
	return appendU32Value(b, num, w.GetValue())
}

// appendU32Value appends a set UInt32Value field holding v.
func appendU32Value(b []byte, num protowire.Number, v uint32) []byte {
	b = appendMessageHeader(b, num, sizeVarint(uint64(v)))
	return appendVarint(b, u32Value, uint64(v))
}

func sizeLocality(l *v3corepb.Locality) int {
	return sizeLocalityOf(l.Region, l.Zone, l.SubZone)
}

func sizeLocalityOf(region, zone, subZone string) int {
	return sizeString(region) + sizeString(zone) + sizeString(subZone)
}

// appendLocality appends a LocalityLbEndpoints' locality field.
func appendLocality(b []byte, region, zone, subZone string) []byte {
	b = appendMessageHeader(b, lleLocality, sizeLocalityOf(region, zone, subZone))
	b = appendString(b, locRegion, region)
	b = appendString(b, locZone, zone)
	return appendString(b, locSubZone, subZone)
}

func sizeSocketAddress(sa *v3corepb.SocketAddress) int {
	n := sizeVarint(uint64(sa.Protocol)) + sizeString(sa.Address)
	if p, ok := sa.PortSpecifier.(*v3corepb.SocketAddress_PortValue); ok {
		n += 1 + protowire.SizeVarint(uint64(p.PortValue)) // a oneof member: written even when 0
	}
	return n
}

func sizeAddress(a *v3corepb.Address) int {
	if sa := a.GetSocketAddress(); sa != nil {
		return sizeMessage(sizeSocketAddress(sa))
	}
	return 0
}

func sizeEndpoint(ep *v3endpointpb.Endpoint) int {
	n := sizeString(ep.Hostname)
	if ep.Address != nil {
		n += sizeMessage(sizeAddress(ep.Address))
	}
	return n
}

func sizeLbEndpoint(lb *v3endpointpb.LbEndpoint) int {
	n := sizeVarint(uint64(lb.HealthStatus))
	if ep := lb.GetEndpoint(); ep != nil {
		n += sizeMessage(sizeEndpoint(ep))
	}
	if lb.LoadBalancingWeight != nil {
		n += sizeMessage(sizeU32(lb.LoadBalancingWeight))
	}
	return n
}

func sizeLocalityLbEndpoints(lle *v3endpointpb.LocalityLbEndpoints) int {
	n := sizeVarint(uint64(lle.Priority))
	if lle.Locality != nil {
		n += sizeMessage(sizeLocality(lle.Locality))
	}
	for _, lb := range lle.LbEndpoints {
		n += sizeMessage(sizeLbEndpoint(lb))
	}
	if lle.LoadBalancingWeight != nil {
		n += sizeMessage(sizeU32(lle.LoadBalancingWeight))
	}
	return n
}

// sizeCLA is the encoded size of cla, which claEncodable accepts.
func sizeCLA(cla *v3endpointpb.ClusterLoadAssignment) int {
	n := sizeString(cla.ClusterName)
	for _, lle := range cla.Endpoints {
		n += sizeMessage(sizeLocalityLbEndpoints(lle))
	}
	return n
}

// appendCLA appends cla's encoding, sizeCLA bytes, to b.
func appendCLA(b []byte, cla *v3endpointpb.ClusterLoadAssignment) []byte {
	return appendCLASpans(b, cla, nil)
}

// span is where the encoded endpoints of one locality lie in a buffer:
// its lb_endpoints fields, b[start:end].
type span struct{ start, end int }

// appendCLASpans is appendCLA; spans, if not nil, has one element per
// locality of cla and gets where each one's endpoints went in b.
func appendCLASpans(b []byte, cla *v3endpointpb.ClusterLoadAssignment, spans []span) []byte {
	b = appendString(b, claClusterName, cla.ClusterName)
	for i, lle := range cla.Endpoints {
		b = appendMessageHeader(b, claEndpoints, sizeLocalityLbEndpoints(lle))
		if l := lle.Locality; l != nil {
			b = appendLocality(b, l.Region, l.Zone, l.SubZone)
		}
		start := len(b)
		for _, lb := range lle.LbEndpoints {
			b = appendMessageHeader(b, lleLbEndpoints, sizeLbEndpoint(lb))
			// The marshaler writes a message's oneof members after its
			// other fields: endpoint (1) after load_balancing_weight (4).
			b = appendVarint(b, lbHealth, uint64(lb.HealthStatus))
			b = appendU32(b, lbWeight, lb.LoadBalancingWeight)
			if ep := lb.GetEndpoint(); ep != nil {
				b = appendMessageHeader(b, lbEndpoint, sizeEndpoint(ep))
				if a := ep.Address; a != nil {
					b = appendMessageHeader(b, epAddress, sizeAddress(a))
					if sa := a.GetSocketAddress(); sa != nil {
						b = appendMessageHeader(b, addrSocket, sizeSocketAddress(sa))
						b = appendVarint(b, saProtocol, uint64(sa.Protocol))
						b = appendString(b, saAddress, sa.Address)
						if p, ok := sa.PortSpecifier.(*v3corepb.SocketAddress_PortValue); ok {
							b = protowire.AppendTag(b, saPortValue, protowire.VarintType)
							b = protowire.AppendVarint(b, uint64(p.PortValue))
						}
					}
				}
				b = appendString(b, epHostname, ep.Hostname)
			}
		}
		if spans != nil {
			spans[i] = span{start, len(b)}
		}
		b = appendU32(b, lleWeight, lle.LoadBalancingWeight)
		b = appendVarint(b, llePriority, uint64(lle.Priority))
	}
	return b
}

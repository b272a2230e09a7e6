package registryapi

import (
	"fmt"
	"net/netip"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway/spillway/registry"
	pb "github.com/spillway/spillway/registry/registryv1"
)

func fieldErr(field, format string, args ...any) error {
	return &registry.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// endpointFromPB converts a wire endpoint; fields the server owns (source,
// times, lease) are ignored.
func endpointFromPB(p *pb.Endpoint) (*registry.Endpoint, error) {
	if p == nil {
		return nil, fieldErr("endpoint", "is required")
	}
	e := &registry.Endpoint{
		ID:     p.GetId(),
		Health: registry.Health(p.GetHealth()),
		Weight: p.GetWeight(),
		Locality: registry.Locality{
			Region:  p.GetLocality().GetRegion(),
			Zone:    p.GetLocality().GetZone(),
			SubZone: p.GetLocality().GetSubZone(),
		},
	}
	if p.GetAddress() == "" {
		return nil, fieldErr("endpoint.address", "is required")
	}
	addr, err := netip.ParseAddr(p.GetAddress())
	if err != nil {
		return nil, fieldErr("endpoint.address", "%q is not an IPv4 or IPv6 address", p.GetAddress())
	}
	e.Address = addr
	for i, pp := range p.GetPorts() {
		if pp.GetNumber() == 0 || pp.GetNumber() > 65535 {
			return nil, fieldErr(fmt.Sprintf("endpoint.ports[%d].number", i), "%d, want 1..65535", pp.GetNumber())
		}
		e.Ports = append(e.Ports, registry.Port{Name: pp.GetName(), Number: uint16(pp.GetNumber()), Protocol: registry.Protocol(pp.GetProtocol())})
	}
	if len(p.GetMetadata()) > 0 {
		e.Metadata = make(map[string]string, len(p.GetMetadata()))
		for k, v := range p.GetMetadata() {
			e.Metadata[k] = v
		}
	}
	return e, nil
}

// endpointToPB converts an endpoint for a listing; its lease_id is left
// empty (see listEndpoints).
func endpointToPB(e *registry.Endpoint, lastSeen time.Time) *pb.Endpoint {
	p := &pb.Endpoint{
		Id:      e.ID,
		Address: e.Address.String(),
		Locality: &pb.Locality{
			Region:  e.Locality.Region,
			Zone:    e.Locality.Zone,
			SubZone: e.Locality.SubZone,
		},
		Health:     string(e.Health),
		Weight:     e.Weight,
		Metadata:   e.Metadata,
		Source:     string(e.Source),
		Registered: timestamp(e.Registered),
		LastSeen:   timestamp(lastSeen),
	}
	for _, pt := range e.Ports {
		p.Ports = append(p.Ports, &pb.Port{Name: pt.Name, Number: uint32(pt.Number), Protocol: string(pt.Protocol)})
	}
	return p
}

// timestamp leaves an unknown time unset rather than sending year 1.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

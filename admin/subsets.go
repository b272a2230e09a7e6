package admin

import (
	"math"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/subset"
)

// subsets converts the plan's subsets, with client's (a node id, "" for
// none) when its stream of service is connected here; nil without
// subsets.
func (a *API) subsets(service string, plan *weights.Plan, client string) *pb.Subsets {
	as := plan.Subsets
	if as == nil {
		return nil
	}
	out := &pb.Subsets{Mode: string(as.Mode), Size: uint32(as.Size)}
	for _, n := range as.Groups() {
		out.Slots += uint32(n)
	}
	counts := as.Counts()
	if a.registry != nil {
		// Every healthy endpoint counts, those no slot holds at 0.
		if svc, ok := a.registry.Snapshot().Service(service); ok {
			for _, e := range svc.Serving() {
				if _, held := counts[e.ID]; !held && e.Health == registry.Healthy {
					counts[e.ID] = 0
				}
			}
		}
	}
	if len(counts) > 0 {
		var sum float64
		lo, hi := math.MaxInt, 0
		for _, c := range counts {
			sum += float64(c)
			lo, hi = min(lo, c), max(hi, c)
		}
		out.ClientsPerEndpointMin, out.ClientsPerEndpointMax = uint32(lo), uint32(hi)
		out.ClientsPerEndpointMaxOverAvg = float64(hi) / (sum / float64(len(counts)))
	}
	if client == "" || a.slots == nil {
		return out
	}
	zone, slot, ok := a.slots.ClientSlot(service, client)
	if !ok {
		return out
	}
	g := subset.Group{Zone: zone}
	if plan.Source == weights.SourceMesh {
		g.Replica = a.replica
	}
	cs := &pb.ClientSubset{NodeId: client, Zone: zone, Replica: g.Replica, Slot: uint32(slot)}
	if n := as.Slots(g); n > 0 {
		cs.Slot = uint32(slot % n)
		cs.Endpoints = as.Subset(g, slot%n)
	}
	out.Client = cs
	return out
}

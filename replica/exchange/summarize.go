package exchange

import (
	"slices"
	"strings"

	"github.com/spillway/spillway/load"
)

// Summarize turns a load table's Loads("", now) and its client counts
// (service -> client zone -> xDS streams) into the summaries a Sender
// sends: per service, one Flow per (client zone, upstream zone), summed
// over client services, regions and sub-zones, and the client counts.
// Rows with Reporters == 0 (totals only, no fresh report) are skipped; a
// service with neither flows nor clients is left out. The result is
// sorted by service, flows by client zone and zone, clients by zone.
func Summarize(loads []load.Load, clients map[string]map[string]int) []load.ServiceSummary {
	return SummarizeWith(loads, clients, nil)
}

// SummarizeWith is Summarize that also carries each service's endpoint
// utilization reports (a load.UtilizationTable's All(now)): a service
// with reports but no load or clients is summarised too. Each service's
// reports are sent sorted by ID; past MaxEndpoints, the first
// MaxEndpoints.
func SummarizeWith(loads []load.Load, clients map[string]map[string]int, endpoints map[string][]load.EndpointUtilization) []load.ServiceSummary {
	type pair struct{ cz, z string }
	type acc struct {
		flows     map[pair]*load.Flow
		clients   []load.ClientCount
		endpoints []load.EndpointUtilization
	}
	by := map[string]*acc{}
	get := func(svc string) *acc {
		a := by[svc]
		if a == nil {
			a = &acc{flows: map[pair]*load.Flow{}}
			by[svc] = a
		}
		return a
	}
	for _, l := range loads {
		if l.Reporters == 0 {
			continue
		}
		a := get(l.Service)
		k := pair{l.ClientZone, l.Locality.Zone}
		f := a.flows[k]
		if f == nil {
			f = &load.Flow{ClientZone: k.cz, Zone: k.z}
			a.flows[k] = f
		}
		f.Issued += l.Issued
		f.Succeeded += l.Succeeded
		f.Errored += l.Errored
		f.InProgress += l.InProgress
		f.Reporters += l.Reporters
		if l.Updated.After(f.Updated) {
			f.Updated = l.Updated
		}
	}
	for svc, zones := range clients {
		var cs []load.ClientCount
		for z, n := range zones {
			if n > 0 {
				cs = append(cs, load.ClientCount{Zone: z, Count: n})
			}
		}
		if len(cs) == 0 {
			continue
		}
		slices.SortFunc(cs, func(a, b load.ClientCount) int { return strings.Compare(a.Zone, b.Zone) })
		get(svc).clients = cs
	}
	for svc, eps := range endpoints {
		if len(eps) == 0 {
			continue
		}
		eps = slices.Clone(eps)
		slices.SortFunc(eps, func(a, b load.EndpointUtilization) int { return strings.Compare(a.ID, b.ID) })
		get(svc).endpoints = eps[:min(len(eps), MaxEndpoints)]
	}
	out := make([]load.ServiceSummary, 0, len(by))
	for svc, a := range by {
		ss := load.ServiceSummary{Service: svc, Clients: a.clients, Endpoints: a.endpoints}
		if len(a.flows) > 0 {
			ss.Flows = make([]load.Flow, 0, len(a.flows))
			for _, f := range a.flows {
				ss.Flows = append(ss.Flows, *f)
			}
			slices.SortFunc(ss.Flows, func(a, b load.Flow) int {
				return cmpStrings(a.ClientZone, b.ClientZone, a.Zone, b.Zone)
			})
		}
		out = append(out, ss)
	}
	slices.SortFunc(out, func(a, b load.ServiceSummary) int { return strings.Compare(a.Service, b.Service) })
	return out
}

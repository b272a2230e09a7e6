package main

import (
	"fmt"
	"time"

	"github.com/spillway/spillway/weights/zoneaware"
)

// router decides the zone weights of each step. route is called once per
// step, in order, before the step's traffic: it fills st.Shares (row z:
// the shares of client zone z's traffic per upstream zone, summing to 1,
// or all 0 when nothing can be reached) from the fleet as it is now and
// what the previous step measured (prev, nil at step 0), and returns the
// fallback state.
type router interface {
	route(now time.Time, f *fleet, prev *Step, st *Step) string
}

func newRouter(name string, sc *Scenario) (router, error) {
	switch name {
	case StrategySpillway:
		calc, err := zoneaware.New(sc.Spillway)
		if err != nil {
			return nil, err
		}
		return &spillway{calc: calc}, nil
	case StrategyHostCount:
		return hostCount{}, nil
	case StrategyStatic:
		return static{}, nil
	}
	return nil, fmt.Errorf("unknown strategy %q", name)
}

// spillway is the real zoneaware code, fed what a spillway server would
// see: the endpoints, the connected clients per zone and, from step 1 on,
// load reports of the previous step (per upstream zone: issued,
// succeeded, errored, in progress; per client zone: issued). One State
// carries over all steps. Clients follow the integer weights, as grpc-go
// does with load_balancing_weight.
type spillway struct {
	calc *zoneaware.Calculator
	st   zoneaware.State
	res  zoneaware.Result
	in   zoneaware.Input
}

func (s *spillway) route(now time.Time, f *fleet, prev *Step, st *Step) string {
	zones := f.sc.Zones
	in := &s.in
	in.Now = now
	in.Endpoints, in.Loads, in.Demand, in.Clients = in.Endpoints[:0], in.Loads[:0], in.Demand[:0], in.Clients[:0]
	for _, p := range f.pods {
		in.Endpoints = append(in.Endpoints, zoneaware.Endpoint{ID: p.id, Zone: zones[p.zone], Healthy: true, Registered: p.registered})
	}
	for z, n := range f.clients {
		if n > 0 {
			in.Clients = append(in.Clients, zoneaware.ClientCount{Zone: zones[z], Count: n})
		}
	}
	if prev != nil {
		// The reports of the step that just ended, as the LRS server sums
		// them: Loads by upstream zone, Demand by client zone (what reached
		// some locality; a request with nowhere to go is not reported).
		for y, zs := range prev.Zones {
			if zs.Offered > 0 || zs.InFlight > 0 {
				in.Loads = append(in.Loads, zoneaware.ZoneLoad{
					Zone: zones[y], IssuedRPS: zs.Offered, SucceededRPS: zs.Served, ErroredRPS: zs.Errors,
					InProgress: zs.InFlight, Updated: now,
				})
			}
		}
		for z, zs := range prev.Zones {
			if zs.Clients > 0 {
				in.Demand = append(in.Demand, zoneaware.Demand{ClientZone: zones[z], RPS: zs.Routed, Updated: now})
			}
		}
	}
	s.calc.Compute(&s.st, in, &s.res)
	for z := range zones {
		row := st.Shares[z]
		rt := s.res.Route(zones[z])
		if rt == nil {
			continue
		}
		var sum float64
		for _, w := range rt.Weights {
			sum += float64(w.Weight)
		}
		for _, w := range rt.Weights {
			if y := indexOf(zones, w.Zone); y >= 0 && sum > 0 {
				row[y] = float64(w.Weight) / sum
			}
		}
	}
	return s.res.Fallback.Key()
}

func indexOf(zones []string, z string) int {
	for i, n := range zones {
		if n == z {
			return i
		}
	}
	return -1
}

// envoyMinClusterSize is Envoy's upstream.zone_routing.min_cluster_size
// default: below it, zone-aware routing is off.
const envoyMinClusterSize = 6

// hostCount is Envoy's zone-aware heuristic, written from its
// description (load_balancer_impl.cc): demand is the client instances per
// zone, capacity the healthy upstream hosts per zone, no load data and no
// capacity model. A zone whose share of hosts is at least its share of
// clients keeps everything local; otherwise it keeps hosts%/clients% and
// spills the rest in proportion to the other zones' residual
// (hosts% − clients%, where positive). It is off (every host equally
// likely) with fewer than 6 hosts or 2 zones with hosts, and for a client
// zone without hosts.
type hostCount struct{}

func (hostCount) route(_ time.Time, f *fleet, _ *Step, st *Step) string {
	nz := len(f.sc.Zones)
	hosts := make([]float64, nz)
	var total, clients float64
	zonesWithHosts := 0
	for _, p := range f.pods {
		hosts[p.zone]++
		total++
	}
	for z := range hosts {
		if hosts[z] > 0 {
			zonesWithHosts++
		}
		clients += float64(f.clients[z])
	}
	if total == 0 {
		return "no_endpoints"
	}
	off := ""
	switch {
	case total < envoyMinClusterSize:
		off = "off_cluster_too_small"
	case zonesWithHosts < 2:
		off = "off_one_zone"
	case clients == 0:
		off = "off_no_clients"
	}
	up := make([]float64, nz)
	local := make([]float64, nz)
	for z := range up {
		up[z] = hosts[z] / total
		if clients > 0 {
			local[z] = float64(f.clients[z]) / clients
		}
	}
	fallback := "none"
	if off != "" {
		fallback = off
	}
	for z := range nz {
		row := st.Shares[z]
		if off != "" || hosts[z] == 0 {
			copy(row, up) // every host equally likely
			if off == "" && f.clients[z] > 0 {
				fallback = "off_no_local_hosts"
			}
			continue
		}
		if up[z] >= local[z] {
			row[z] = 1
			continue
		}
		row[z] = up[z] / local[z]
		spill := 1 - row[z]
		var residual float64
		for y := range nz {
			if y != z && up[y] > local[y] {
				residual += up[y] - local[y]
			}
		}
		if residual == 0 { // Envoy picks a zone at random
			for y := range nz {
				if hosts[y] > 0 {
					row[y] += spill / float64(zonesWithHosts)
				}
			}
			continue
		}
		for y := range nz {
			if y != z && up[y] > local[y] {
				row[y] = spill * (up[y] - local[y]) / residual
			}
		}
	}
	return fallback
}

// static is capacity-proportional weights with no zone preference: every
// client zone sends to each zone in proportion to its pods' nominal
// capacity (host counts when pods are alike).
type static struct{}

func (static) route(_ time.Time, f *fleet, _ *Step, st *Step) string {
	nz := len(f.sc.Zones)
	capacity := make([]float64, nz)
	var total float64
	for _, p := range f.pods {
		capacity[p.zone] += p.capacity
		total += p.capacity
	}
	if total == 0 {
		return "no_endpoints"
	}
	for z := range nz {
		for y := range nz {
			st.Shares[z][y] = capacity[y] / total
		}
	}
	return "none"
}

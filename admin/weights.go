package admin

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/pid"
	"github.com/spillway/spillway/weights/regions"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds/routing"
)

// Weights implements pb.AdminServer.
func (a *API) Weights(ctx context.Context, req *pb.WeightsRequest) (*pb.WeightsResponse, error) {
	resp, err := a.weights(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

func (a *API) weights(ctx context.Context, req *pb.WeightsRequest) (*pb.WeightsResponse, error) {
	service := registry.NormalizeService(req.GetService())
	if err := registry.ValidateService("service", service); err != nil {
		return nil, err
	}
	if err := a.authorize(ctx, service); err != nil {
		return nil, err
	}
	plan := a.plans.Plan(service)
	if plan == nil || plan.Result == nil {
		return nil, fmt.Errorf("%w for %s: unknown service, zone-aware weights off (spillway --zone-aware=false), or not computed yet", errNoPlan, service)
	}
	resp := weightsResponse(service, plan.Result, a.now())
	resp.Origin = planOrigin(plan)
	resp.Endpoints, resp.Pid = endpointWeights(plan)
	if a.regs != nil {
		if v, ok := a.regs.RegionView(service); ok {
			resp.Regions = regionRouting(v)
		}
	}
	if a.routes != nil {
		resp.RouteRules = routeRules(a.routes.EntryOf(service))
	}
	resp.Subsets = a.subsets(service, plan, req.GetClient())
	return resp, nil
}

// routeRules converts a service's route rules; nil when it has none.
func routeRules(e routing.Entry) *pb.RouteRules {
	if !e.Configured {
		return nil
	}
	missing := make(map[int][]string, len(e.Broken))
	out := &pb.RouteRules{Default: e.Default, Version: e.Version}
	for _, b := range e.Broken {
		missing[b.Index] = b.Missing
		out.DefaultMissing = out.DefaultMissing || b.Index < 0
	}
	for i, r := range e.Rules {
		out.Rules = append(out.Rules, &pb.RouteRule{Name: r.Label(i), Targets: r.Targets(), Missing: missing[i]})
	}
	return out
}

// regionRouting converts a regions.View; nil when it decides nothing (a
// single region and no rule).
func regionRouting(v regions.View) *pb.RegionRouting {
	if len(v.Decisions) == 0 && v.Rules.Empty() {
		return nil
	}
	out := &pb.RegionRouting{Present: v.Present}
	until := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	for _, d := range v.Rules.Redirects {
		out.Rules = append(out.Rules, &pb.RegionRule{From: d.From, To: d.To, Until: until(d.Until), Active: slices.Contains(v.Active.Redirects, d)})
	}
	for _, e := range v.Rules.Excludes {
		out.Rules = append(out.Rules, &pb.RegionRule{Exclude: e.Region, Until: until(e.Until), Active: slices.Contains(v.Active.Excludes, e)})
	}
	for _, d := range v.Decisions {
		c := &pb.RegionDecision{ClientRegion: d.Client, Order: d.Order, Excluded: d.Outcome.Excluded, FailOpen: d.Outcome.FailOpen}
		switch {
		case d.Outcome.RedirectedTo != "":
			c.Redirect, c.RedirectTo = "applied", d.Outcome.RedirectedTo
		case d.Outcome.RedirectNoEndpoints != "":
			c.Redirect, c.RedirectTo = "no_endpoints", d.Outcome.RedirectNoEndpoints
		}
		out.Clients = append(out.Clients, c)
	}
	return out
}

// endpointWeights converts the plan's PID weights, sorted by zone then id;
// nil, nil without them.
func endpointWeights(plan *weights.Plan) ([]*pb.EndpointWeight, *pb.PIDRound) {
	if plan.Endpoints == nil {
		return nil, nil
	}
	out := make([]*pb.EndpointWeight, 0, len(plan.Endpoints))
	for id, w := range plan.Endpoints {
		limit, why := guardWhy(w, plan.PID)
		out = append(out, &pb.EndpointWeight{
			Id: id, Zone: w.Zone, Weight: w.Weight, PidWeight: w.PIDWeight,
			Utilization: w.Utilization, AgeSeconds: w.Age.Seconds(), Status: w.Status,
			Error: w.Error, P: w.P, I: w.I, D: w.D,
			Rps: w.RPS, ErrorRate: w.ErrorRate, LatencyMs: w.LatencyMs, Effective: w.Effective,
			Guard: w.Guard, GuardLimit: limit, GuardExplain: why,
		})
	}
	slices.SortFunc(out, func(x, y *pb.EndpointWeight) int {
		if c := strings.Compare(x.Zone, y.Zone); c != 0 {
			return c
		}
		return strings.Compare(x.Id, y.Id)
	})
	r := &pb.PIDRound{LocalityFromEndpoints: plan.LocalityFromEndpoints}
	if e := plan.PID; e != nil {
		r.Outcome, r.Setpoint = e.Outcome, e.Setpoint
		r.Known, r.Missing = uint32(max(e.Known, 0)), uint32(max(e.Missing, 0))
		if b := e.Blend; b != nil {
			r.BlendFrom, r.BlendTo, r.BlendPercent = b.From, b.To, b.Percent
		}
		r.MedianErrorRate, r.MedianLatencyMs = e.MedianErrorRate, e.MedianLatencyMs
		r.Guarded = uint32(max(e.Guarded, 0))
	}
	return out, r
}

// guardWhy says why the death-spiral guard held w down: the limit its
// error rate (a ratio) or latency (ms) was above, from the round's
// median by weights/pid's rule, and that in words. 0, "" when the guard
// did not hold it; a reason this release does not know (a newer owner's)
// is shown as it is.
func guardWhy(w weights.EndpointWeight, round *weights.PIDExplain) (limit float64, why string) {
	if w.Guard == "" {
		return 0, ""
	}
	var med weights.PIDExplain
	if round != nil {
		med = *round
	}
	switch w.Guard {
	case pid.GuardErrors.String():
		m := med.MedianErrorRate
		limit = max(pid.GuardErrorRatio*m, m+pid.GuardErrorPoints)
		return limit, fmt.Sprintf("error rate %s above the limit %s (max(%s × median %s, median + %s points))",
			percent(w.ErrorRate), percent(limit), plain(pid.GuardErrorRatio), percent(m), plain(100*pid.GuardErrorPoints))
	case pid.GuardLatency.String():
		m := med.MedianLatencyMs
		limit = max(pid.GuardLatencyRatio*m, m+pid.GuardLatencyMs)
		return limit, fmt.Sprintf("latency %s above the limit %s (max(%s × median %s, median + %s))",
			millis(w.LatencyMs), millis(limit), plain(pid.GuardLatencyRatio), millis(m), millis(pid.GuardLatencyMs))
	}
	return 0, w.Guard
}

// percent shows a ratio with one decimal: 0.4 → "40.0%".
func percent(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

// millis shows a latency in ms to two decimals at most: "12.75 ms".
func millis(v float64) string { return plain(v) + " ms" }

// plain shows a number to two decimals at most: 2, 0.5, 12.75.
func plain(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }

// planOrigin says where plan came from, which it does not modify.
func planOrigin(plan *weights.Plan) *pb.PlanOrigin {
	o := &pb.PlanOrigin{
		Source:       plan.Source.String(),
		Owner:        plan.Owner,
		Contributors: make([]*pb.Contributor, 0, len(plan.Contributors)),
		Reason:       plan.Reason,
	}
	for _, c := range plan.Contributors {
		o.Contributors = append(o.Contributors, &pb.Contributor{Replica: c.Replica, AgeSeconds: c.Age.Seconds()})
	}
	slices.SortStableFunc(o.Contributors, func(x, y *pb.Contributor) int { return strings.Compare(x.Replica, y.Replica) })
	if !plan.Published.IsZero() {
		o.Published = timestamppb.New(plan.Published)
	}
	return o
}

// weightsResponse converts res, which it does not modify.
func weightsResponse(service string, res *zoneaware.Result, now time.Time) *pb.WeightsResponse {
	wide := zoneaware.Explain{Fallback: res.Fallback, Reason: res.Reason, ReasonZone: res.ReasonZone, DataAge: res.DataAge}
	resp := &pb.WeightsResponse{
		Service:  service,
		Source:   res.Source.String(),
		Fallback: fallback(&wide),
		DataAge:  durationpb.New(res.DataAge),
		SameZone: res.SameZone,
		Optimum:  res.Optimum,
		Zones:    make([]*pb.ZoneCapacity, 0, len(res.Zones)),
		Routes:   make([]*pb.ZoneRoute, 0, len(res.Routes)),
		Time:     timestamppb.New(now),
	}
	for _, z := range res.Zones {
		resp.Zones = append(resp.Zones, zoneCapacity(z))
	}
	for i := range res.Routes {
		resp.Routes = append(resp.Routes, zoneRoute(&res.Routes[i]))
	}
	return resp
}

func fallback(e *zoneaware.Explain) *pb.Fallback {
	return &pb.Fallback{
		Key:        e.Fallback.Key(),
		Text:       e.FallbackText(),
		FailOpen:   e.Fallback.FailOpen(),
		Reason:     e.Reason,
		ReasonZone: e.ReasonZone,
	}
}

func zoneCapacity(z zoneaware.ZoneInfo) *pb.ZoneCapacity {
	return &pb.ZoneCapacity{
		Zone:                z.Zone,
		Healthy:             uint32(max(z.Healthy, 0)),
		SlowStarting:        uint32(max(z.SlowStarting, 0)),
		Trusted:             z.Trusted,
		InFlightPerEndpoint: z.InFlightPerEndpoint,
		ErrorRatio:          z.ErrorRatio,
		QueueFactor:         z.QueueFactor,
		ErrorFactor:         z.ErrorFactor,
		Health:              z.Health,
		Capacity:            z.Capacity,
		CapacityShare:       z.CapacityShare,
		Demand:              z.Demand,
		DemandShare:         z.DemandShare,
		Load:                z.Load,
	}
}

func zoneRoute(rt *zoneaware.Route) *pb.ZoneRoute {
	e := &rt.Explain
	r := &pb.ZoneRoute{
		ClientZone:  rt.ClientZone,
		Weights:     make([]*pb.ZoneWeight, 0, len(rt.Weights)),
		Demand:      e.Demand,
		DemandShare: e.DemandShare,
		HasDemand:   e.HasDemand,
		Source:      e.Source.String(),
		Fallback:    fallback(e),
		LocalFirst:  e.LocalFirst,
		Local:       e.Local,
		Spill:       make([]*pb.ZoneShare, 0, len(e.Spill)),
		Held:        e.Held,
		Moved:       e.Moved,
		Changed:     rt.Changed,
		Explain:     e.String(),
	}
	for _, w := range rt.Weights {
		r.Weights = append(r.Weights, &pb.ZoneWeight{Zone: w.Zone, Weight: w.Weight, Share: w.Share})
	}
	for _, s := range e.Spill {
		r.Spill = append(r.Spill, &pb.ZoneShare{Zone: s.Zone, Share: s.Share})
	}
	return r
}

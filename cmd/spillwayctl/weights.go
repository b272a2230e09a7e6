package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	adminv1 "github.com/spillway/spillway/admin/adminv1"
)

// noZone shows the route of clients without a zone.
const noZone = "(no zone)"

var weightsCommand = &command{
	name:    "weights",
	args:    "SERVICE",
	nargs:   1,
	summary: "explain a service's zone-aware weights: demand, capacity, local share and spill per client zone, per-endpoint PID weights and client subsets when the service has them",
	flags: func(fs *flag.FlagSet) action {
		format, check := outputFlag(fs)
		client := fs.String("client", "", "a client's node id: also show its subset (its stream must be connected to the replica asked)")
		return func(ctx context.Context, e *env, args []string) error {
			if err := check(); err != nil {
				return err
			}
			return callAdmin(ctx, e, func(ctx context.Context, c adminv1.AdminClient) error {
				resp, err := c.Weights(ctx, &adminv1.WeightsRequest{Service: args[0], Client: *client})
				if err != nil {
					return err
				}
				if *format == "json" {
					return printJSON(e.stdout, resp)
				}
				return writeWeights(e.stdout, resp)
			})
		}
	},
}

// writeWeights prints the explain view of a WeightsResponse: a header line
// for the service, the plan's origin (planLine), the capacity model of every zone, then one line per
// client zone, followed by its explanation when a fallback is in force:
//
//	payments: source lrs; fallback none; data age 2s; same zone 85.0% (optimum 85.0%)
//	plan: mesh, computed by r2 from the load of r0 (0.4s old), r1 (0.9s old), published 11:59:58 UTC
//
//	ZONE    HEALTHY  SLOW-START  CAPACITY(ADJ/RAW)  SHARE  QUEUE         ERR          DEMAND       LOAD
//	zone-a  1        0           1.00/1             25.0%  2.5/ep ×1.00  0.0% ×1.00   400 (40.0%)  25.0%
//	...
//
//	zone-a     demand 40.0% (lrs)  local 62.5%   → zone-b 25.0%, zone-c 12.5%  weights zone-a=6250 zone-b=2500 zone-c=1250
func writeWeights(w io.Writer, resp *adminv1.WeightsResponse) error {
	fmt.Fprintf(w, "%s: source %s; fallback %s; data age %s; same zone %s (optimum %s)\n",
		resp.GetService(), resp.GetSource(), resp.GetFallback().GetText(), dataAge(resp),
		pct(resp.GetSameZone()), pct(resp.GetOptimum()))
	if o := resp.GetOrigin(); o != nil {
		fmt.Fprintln(w, planLine(o))
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ZONE\tHEALTHY\tSLOW-START\tCAPACITY(ADJ/RAW)\tSHARE\tQUEUE\tERR\tDEMAND\tLOAD")
	for _, z := range resp.GetZones() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f/%d\t%s\t%s/ep ×%.2f\t%s ×%.2f\t%s\t%s\n",
			orDash(z.GetZone()), z.GetHealthy(), z.GetSlowStarting(), z.GetCapacity(), z.GetHealthy(), pct(z.GetCapacityShare()),
			num(z.GetInFlightPerEndpoint()), z.GetQueueFactor(), pct(z.GetErrorRatio()), z.GetErrorFactor(),
			demand(resp.GetSource(), z.GetDemand(), z.GetDemandShare()), pct(z.GetLoad()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	// The route lines are aligned by hand: the explanation lines between
	// them would end a tabwriter's column block.
	rows := make([][]string, len(resp.GetRoutes()))
	var width [4]int
	for i, rt := range resp.GetRoutes() {
		rows[i] = routeFields(rt)
		for j := range width {
			width[j] = max(width[j], len([]rune(rows[i][j])))
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(w)
	}
	for i, rt := range resp.GetRoutes() {
		var b strings.Builder
		for j, f := range rows[i] {
			if j < len(width) {
				f += strings.Repeat(" ", width[j]-len([]rune(f))+2)
			}
			b.WriteString(f)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if rt.GetFallback().GetKey() != "none" {
			fmt.Fprintf(w, "    %s\n", rt.GetExplain())
		}
	}
	if err := writeEndpoints(w, resp); err != nil {
		return err
	}
	if err := writeRegions(w, resp.GetRegions()); err != nil {
		return err
	}
	if err := writeRouteRules(w, resp.GetRouteRules()); err != nil {
		return err
	}
	return writeSubsets(w, resp.GetSubsets())
}

// writeSubsets prints a service's subsetting, and the asked client's
// subset:
//
//	subsets: deterministic, 10 endpoints each; 1000 client slots; clients per endpoint 100 to 100 (max/avg 1.000)
//	client vm-17 (zone-a, slot 16): ep-003 ep-017 ...
func writeSubsets(w io.Writer, s *adminv1.Subsets) error {
	if s == nil {
		return nil
	}
	fmt.Fprintf(w, "\nsubsets: %s, %d endpoints each; %d client slots; clients per endpoint %d to %d (max/avg %.3f)\n",
		s.GetMode(), s.GetSize(), s.GetSlots(), s.GetClientsPerEndpointMin(), s.GetClientsPerEndpointMax(), s.GetClientsPerEndpointMaxOverAvg())
	c := s.GetClient()
	if c == nil {
		return nil
	}
	where := orDash(c.GetZone())
	if c.GetReplica() != "" {
		where = c.GetReplica() + ", " + where
	}
	eps := strings.Join(c.GetEndpoints(), " ")
	if eps == "" {
		eps = "(every endpoint: the plan does not know its slot yet)"
	}
	_, err := fmt.Fprintf(w, "client %s (%s, slot %d): %s\n", c.GetNodeId(), where, c.GetSlot(), eps)
	return err
}

// writeRouteRules prints a service's route rules in order and the
// default route; a broken rule (a target with no endpoint) is served as
// if absent, so its RPCs take the default:
//
//	route rules (version 3), in order:
//	  synthetic  → payments-synthetic  BROKEN: payments-synthetic without endpoints; its RPCs take the default
//	  canary     → payments, payments-canary
//	  default    → payments
func writeRouteRules(w io.Writer, r *adminv1.RouteRules) error {
	if r == nil {
		return nil
	}
	fmt.Fprintf(w, "\nroute rules (version %d), in order:\n", r.GetVersion())
	width := len("default")
	for _, rule := range r.GetRules() {
		width = max(width, len(rule.GetName()))
	}
	for _, rule := range r.GetRules() {
		line := fmt.Sprintf("  %-*s  → %s", width, rule.GetName(), strings.Join(rule.GetTargets(), ", "))
		if m := rule.GetMissing(); len(m) > 0 {
			line += "  BROKEN: " + strings.Join(m, ", ") + " without endpoints; its RPCs take the default"
		}
		fmt.Fprintln(w, line)
	}
	line := fmt.Sprintf("  %-*s  → %s", width, "default", r.GetDefault())
	if r.GetDefaultMissing() {
		line += "  BROKEN: no endpoints"
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// writeRegions prints a service's regional rules and, per client region,
// the regions by priority and what the rules did; nothing without them:
//
//	regions with healthy endpoints: r1, r2
//	redirect r1 → r2 until 2026-12-01T18:00:00Z (active)
//	exclude r3 (expired)
//
//	CLIENT REGION  PRIORITY ORDER  RULES
//	r1             r2 > r1         redirect to r2 applied
//	r2             r2 > r1         -
//	(no region)    r1,r2           -
func writeRegions(w io.Writer, r *adminv1.RegionRouting) error {
	if r == nil {
		return nil
	}
	fmt.Fprintf(w, "\nregions with healthy endpoints: %s\n", orDash(strings.Join(r.GetPresent(), ", ")))
	for _, rule := range r.GetRules() {
		line := "exclude " + rule.GetExclude()
		if rule.GetExclude() == "" {
			line = "redirect " + rule.GetFrom() + " → " + rule.GetTo()
		}
		if rule.GetUntil() != nil {
			line += " until " + rule.GetUntil().AsTime().UTC().Format(time.RFC3339)
		}
		state := "active"
		if !rule.GetActive() {
			state = "expired"
		}
		fmt.Fprintf(w, "%s (%s)\n", line, state)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT REGION\tPRIORITY ORDER\tRULES")
	for _, c := range r.GetClients() {
		region := c.GetClientRegion()
		if region == "" {
			region = "(no region)"
		}
		var did []string
		switch c.GetRedirect() {
		case "applied":
			did = append(did, "redirect to "+c.GetRedirectTo()+" applied")
		case "no_endpoints":
			did = append(did, "redirect to "+c.GetRedirectTo()+" not applied: no healthy endpoint there")
		}
		if len(c.GetExcluded()) > 0 {
			did = append(did, "excluded "+strings.Join(c.GetExcluded(), ", "))
		}
		if c.GetFailOpen() {
			did = append(did, "exclusions not applied: they would leave no endpoint (fail open)")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", region, orDash(strings.Join(c.GetOrder(), " > ")), orDash(strings.Join(did, "; ")))
	}
	return tw.Flush()
}

// writeEndpoints prints the PID round and the endpoints table of a service
// with per-endpoint weights, nothing for one without:
//
//	pid: computed; setpoint 50.0%; 1 of 3 known endpoints missing; blend zone-aware → pid 30%
//
//	ENDPOINT  ZONE    WEIGHT  PID    UTIL   AGE   STATUS   ERROR  P      I      D
//	a-0       zone-a  12000   13000  30.0%  1.0s  fresh    0.400  0.200  0.008  0.010
//
// When a backend reports its requests (clientlib/utilization), the round
// line adds the death-spiral guard's medians and count, the table the
// request rate, error rate, mean latency and guard of each endpoint, and
// a line per guarded endpoint says why:
//
//	pid: computed; setpoint 50.0%; 0 of 3 known endpoints missing; guard: median error rate 2.0%, median latency 25 ms; 1 guarded
//
//	ENDPOINT  ZONE    WEIGHT  PID    UTIL   AGE   STATUS  ERROR   P       I       D      RPS  ERRORS  LATENCY  GUARD
//	a-1       zone-a  1500    1500   10.0%  1.0s  fresh   0.000   0.000   0.000   0.000  80   40.0%   25 ms    errors
//	...
//
//	guarded (not raised, halved each round, never above the median weight):
//	  a-1: error rate 40.0% above the limit 7.0% (max(2 × median 2.0%, median + 5 points))
func writeEndpoints(w io.Writer, resp *adminv1.WeightsResponse) error {
	if len(resp.GetEndpoints()) == 0 {
		return nil
	}
	r := resp.GetPid()
	rates := hasRates(resp)
	line := fmt.Sprintf("\npid: %s; setpoint %s; %d of %d known endpoints missing", orDash(r.GetOutcome()), pct(r.GetSetpoint()), r.GetMissing(), r.GetKnown())
	if r.GetBlendFrom() != "" || r.GetBlendTo() != "" {
		line += fmt.Sprintf("; blend %s → %s %s%%", orDash(r.GetBlendFrom()), orDash(r.GetBlendTo()), strconv.FormatFloat(r.GetBlendPercent(), 'f', -1, 64))
	}
	if r.GetLocalityFromEndpoints() {
		line += "; localities weighted by their endpoints (pid alone)"
	}
	if rates {
		line += fmt.Sprintf("; guard: median error rate %s, median latency %s; %d guarded",
			pct(r.GetMedianErrorRate()), latency(r.GetMedianLatencyMs()), r.GetGuarded())
	}
	fmt.Fprintln(w, line)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "ENDPOINT\tZONE\tWEIGHT\tPID\tUTIL\tAGE\tSTATUS\tERROR\tP\tI\tD"
	if rates {
		head += "\tRPS\tERRORS\tLATENCY\tGUARD"
	}
	fmt.Fprintln(tw, head)
	term := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	var guarded []*adminv1.EndpointWeight
	for _, e := range resp.GetEndpoints() {
		util, age := "-", "-"
		if e.GetAgeSeconds() > 0 || e.GetUtilization() > 0 {
			util, age = pct(e.GetUtilization()), seconds(e.GetAgeSeconds())
		}
		row := fmt.Sprintf("%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s",
			e.GetId(), orDash(e.GetZone()), e.GetWeight(), e.GetPidWeight(), util, age, e.GetStatus(),
			term(e.GetError()), term(e.GetP()), term(e.GetI()), term(e.GetD()))
		if rates {
			rps, errs := "-", "-"
			if e.GetRps() > 0 {
				rps, errs = num(e.GetRps()), pct(e.GetErrorRate())
			}
			row += fmt.Sprintf("\t%s\t%s\t%s\t%s", rps, errs, latency(e.GetLatencyMs()), orDash(e.GetGuard()))
		}
		fmt.Fprintln(tw, row)
		if e.GetGuard() != "" {
			guarded = append(guarded, e)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(guarded) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nguarded (not raised, halved each round, never above the median weight):")
	for _, e := range guarded {
		why := e.GetGuardExplain()
		if why == "" {
			why = e.GetGuard()
		}
		fmt.Fprintf(w, "  %s: %s\n", e.GetId(), why)
	}
	return nil
}

// hasRates reports whether the PID round of resp has request data: an
// endpoint reporting requests or latency, or one the guard held down.
func hasRates(resp *adminv1.WeightsResponse) bool {
	r := resp.GetPid()
	if r.GetGuarded() > 0 || r.GetMedianErrorRate() > 0 || r.GetMedianLatencyMs() > 0 {
		return true
	}
	for _, e := range resp.GetEndpoints() {
		if e.GetRps() > 0 || e.GetLatencyMs() > 0 || e.GetGuard() != "" {
			return true
		}
	}
	return false
}

// latency shows a mean latency in ms, "-" when not reported: "25 ms".
func latency(ms float64) string {
	if ms <= 0 {
		return "-"
	}
	return num(ms) + " ms"
}

// routeFields gives the columns of a client zone's line: zone, demand,
// local share, spill, weights (and whether the previous ones were kept).
func routeFields(rt *adminv1.ZoneRoute) []string {
	zone := rt.GetClientZone()
	if zone == "" {
		zone = noZone
	}
	dem := "demand -"
	if rt.GetHasDemand() {
		dem = fmt.Sprintf("demand %s (%s)", pct(rt.GetDemandShare()), rt.GetSource())
	}
	local := "local " + pct(rt.GetLocal())
	if !rt.GetLocalFirst() {
		local = "by capacity"
		if rt.GetClientZone() != "" {
			local += ", local " + pct(rt.GetLocal())
		}
	}
	spill := "→ no spill"
	if len(rt.GetSpill()) > 0 {
		parts := make([]string, len(rt.GetSpill()))
		for i, s := range rt.GetSpill() {
			parts[i] = orDash(s.GetZone()) + " " + pct(s.GetShare())
		}
		spill = "→ " + strings.Join(parts, ", ")
	}
	weights := "weights -"
	if len(rt.GetWeights()) > 0 {
		parts := make([]string, len(rt.GetWeights()))
		for i, zw := range rt.GetWeights() {
			parts[i] = orDash(zw.GetZone()) + "=" + strconv.FormatUint(uint64(zw.GetWeight()), 10)
		}
		weights = "weights " + strings.Join(parts, " ")
	}
	if rt.GetHeld() {
		weights += fmt.Sprintf("  held (moved %s)", pct(rt.GetMoved()))
	}
	return []string{zone, dem, local, spill, weights}
}

// dataAge is the age of the oldest load data used; "-" when there is none.
func dataAge(resp *adminv1.WeightsResponse) string {
	d := resp.GetDataAge().AsDuration()
	if d == 0 && resp.GetSource() != "lrs" {
		return "-"
	}
	return d.String()
}

// demand shows a zone's raw demand with its share: "400 rps (40.0%)",
// "3 clients (60.0%)", or "-" when the zone has none or no demand is used.
func demand(source string, raw, share float64) string {
	switch {
	case raw == 0 && share == 0:
		return "-"
	case source == "clients":
		return fmt.Sprintf("%s clients (%s)", num(raw), pct(share))
	case source == "lrs":
		return fmt.Sprintf("%s rps (%s)", num(raw), pct(share))
	}
	return "-"
}

// pct shows a ratio as a percentage with one decimal: 0.625 → "62.5%".
func pct(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

// num shows a figure to two decimals at most: 2.5, 0.33, 400.
func num(v float64) string { return rate(v) }

// planLine says where the weights come from:
//
//	plan: mesh, computed by r2 from the load of r0 (0.4s old), r1 (0.9s old), published 11:59:58 UTC
//	plan: local (published plan stale: owner r2 last heard 34s ago)
//	plan: local
//
// The publication time is in UTC: the replicas and the reader may not
// share a time zone.
func planLine(o *adminv1.PlanOrigin) string {
	if o.GetSource() != "mesh" {
		line := "plan: " + orDash(o.GetSource())
		if o.GetReason() != "" {
			line += " (" + o.GetReason() + ")"
		}
		return line
	}
	line := "plan: mesh, computed by " + orDash(o.GetOwner())
	if cs := o.GetContributors(); len(cs) > 0 {
		line += " from the load of " + contributors(cs)
	} else {
		line += " from no replica's fresh load"
	}
	if p := o.GetPublished(); p != nil {
		line += ", published " + p.AsTime().UTC().Format("15:04:05") + " UTC"
	}
	if o.GetReason() != "" {
		line += " (" + o.GetReason() + ")"
	}
	return line
}

// contributors lists replicas with the age of their load: "r0 (0.4s
// old), r1 (12s old)".
func contributors(cs []*adminv1.Contributor) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s (%s old)", orDash(c.GetReplica()), seconds(c.GetAgeSeconds()))
	}
	return strings.Join(parts, ", ")
}

// seconds shows an age: tenths of a second under 10 s ("0.4s"), whole
// seconds above ("34s", "2m5s").
func seconds(s float64) string {
	if t := math.Round(max(s, 0)*10) / 10; t < 10 {
		return strconv.FormatFloat(t, 'f', 1, 64) + "s"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

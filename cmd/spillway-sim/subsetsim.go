package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/internal/strictyaml"
	"github.com/spillway/spillway/weights/subset"
)

// A scenario's subset section (SubsetOptions) gives, after the run, every
// client instance a subset of the endpoints with the real weights/subset
// code, once per mode, and reports how evenly the endpoints are held,
// against the closed form of random subsetting: the clients holding one
// endpoint follow the binomial law B(M, s/N). Each client group is one
// group of slots (subset.Group{Replica: its name, Zone: its zone}); a
// zone's groups are balanced together, as one zone's streams on several
// replicas are. The subsets are those of the fleet as it is at the last
// step (after every event) and follow the route the strategy Route gave
// at that step, as the planner gives subset.Assign the zone plan's
// weights.

// maxSubsetWork bounds clients × endpoints × size in a subset section:
// deterministic Assign ranks every endpoint for each endpoint a slot
// takes (about 10 s at 10,000 × 1,000 × 20).
const maxSubsetWork = 2e8

// SubsetOptions is the scenario's subset section.
type SubsetOptions struct {
	// Size is the subset size asked, 1..subset.MaxSize.
	Size int
	// Modes are compared in this order: subset.Deterministic and/or
	// subset.Random, each once; by default both.
	Modes []subset.Mode
	// Route is the strategy whose last-step shares the subsets follow
	// and the requests are sent by; "" is the first strategy run.
	Route string
	// Churn, on by default, also reports the share of (client, endpoint)
	// pairs one change moves.
	Churn bool
}

var subsetFields = []string{"size", "modes", "route", "churn"}

// parseSubset reads the subset section n against the strategies, the
// clients and the pods the fleet ends the run with.
func parseSubset(n *yaml.Node, sc *Scenario, pods []int) (*SubsetOptions, error) {
	f, err := mapping(n, "subset", subsetFields)
	if err != nil {
		return nil, err
	}
	o := &SubsetOptions{Modes: []subset.Mode{subset.Deterministic, subset.Random}, Churn: true}
	if err := required(n, f, "subset", "size"); err != nil {
		return nil, err
	}
	if o.Size, err = integer(f["size"], "subset.size", 1, subset.MaxSize); err != nil {
		return nil, err
	}
	if v := f["modes"]; v != nil {
		items, err := sequence(v, "subset.modes")
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return nil, fieldErr(v, "subset.modes", "empty list, want deterministic and/or random")
		}
		o.Modes = nil
		for i, it := range items {
			path := fmt.Sprintf("subset.modes[%d]", i)
			s, err := str(it, path)
			if err != nil {
				return nil, err
			}
			m := subset.Mode(s)
			if m != subset.Deterministic && m != subset.Random {
				return nil, fieldErr(it, path, "unknown mode %q, want deterministic or random", s)
			}
			if slices.Contains(o.Modes, m) {
				return nil, fieldErr(it, path, "%q is listed twice", s)
			}
			o.Modes = append(o.Modes, m)
		}
	}
	if v := f["route"]; v != nil {
		if o.Route, err = strategy(v, "subset.route"); err != nil {
			return nil, err
		}
		if !slices.Contains(sc.Strategies, o.Route) {
			return nil, fieldErr(v, "subset.route", "strategy %q does not run, want one of %s", o.Route, strings.Join(sc.Strategies, ", "))
		}
	}
	if v := f["churn"]; v != nil {
		if err := v.Decode(&o.Churn); err != nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
			return nil, fieldErr(v, "subset.churn", "%s, want true or false", strictyaml.Describe(v))
		}
	}
	clients, endpoints := 0, 0
	for _, g := range sc.Clients {
		clients += g.Instances
	}
	for _, p := range pods {
		endpoints += p
	}
	if clients > subset.MaxSlots {
		return nil, fieldErr(n, "subset", "%d client instances, want at most %d to subset", clients, subset.MaxSlots)
	}
	if w := float64(clients) * float64(endpoints) * float64(min(o.Size, max(1, endpoints))); w > maxSubsetWork {
		return nil, fieldErr(n, "subset", "%d clients × %d endpoints × size %d is %.3g, want at most %.0g (the time Assign takes)", clients, endpoints, o.Size, w, maxSubsetWork)
	}
	return o, nil
}

// SubsetReport is the outcome of a subset section.
type SubsetReport struct {
	Size  int
	Modes []subset.Mode
	// Route is the strategy the subsets and requests follow, at Step (the
	// last), on the fleet of that step.
	Route              string
	Step               int
	Clients, Endpoints int
	Zones              []SubsetZone // upstream zones with endpoints, in Scenario.Zones order
	Churn              []ChurnRow   // nil when Churn is off
}

// SubsetZone is one upstream zone (a locality) and the clients holding
// its endpoints.
type SubsetZone struct {
	Zone      string
	Endpoints int
	Modes     []EndpointSpread // in SubsetReport.Modes order
	// Binomial is the closed form for random subsets.
	Binomial Binomial
}

// EndpointSpread is how one mode's subsets spread over a zone's
// endpoints. Connections are the slots holding an endpoint; requests are
// what it is sent when every client sends its rate by the route and round
// robin over the endpoints of each zone in its subset.
type EndpointSpread struct {
	Mode                  subset.Mode
	Min, Max              int
	Mean, MaxAvg, SD      float64 // SD: over the endpoints, about the mean (divided by N)
	RequestsMaxAvg        float64 // NaN: the zone gets no requests
	MaxUtil               float64 // the busiest pod's requests over its capacity now
	Requests, MaxRequests float64 // mean and max rps per endpoint
}

// BinomialTerm is the slots of one client zone holding K of the zone's N
// endpoints: their number holding one endpoint is B(M, K/N).
type BinomialTerm struct {
	ClientZone string
	M, K, N    int
}

// Binomial is the closed form for random subsets of one zone's N
// endpoints: the slots holding an endpoint are the sum of the terms'
// binomials, mean Σ M·p, variance Σ M·p·(1−p), p = K/N. By the normal
// approximation, the expected largest of the N endpoints is Mean + SD·Z,
// Z = Φ⁻¹((N − 0.375)/(N + 0.25)) (Blom's approximation of the largest of
// N normal draws: 2.50 at N = 100, where the exact expectation is 2.51),
// the smallest Mean − SD·Z; Bound is the classic upper bound Mean +
// SD·sqrt(2 ln N) (3.03 SD at N = 100).
type Binomial struct {
	Terms                    []BinomialTerm
	N                        int
	Mean, SD                 float64
	Z                        float64
	Min, Max, Bound          float64
	MaxAvg, BoundAvg         float64
	RequestsMaxAvg           float64 // the same for requests (NaN: none)
	RequestsMean, RequestsSD float64
}

// ChurnRow is one change to the fleet or the clients and, per mode, the
// (client, endpoint) pairs it moves, following every client: a client
// that leaves gives its slot to its group's newest, whose subset changes.
type ChurnRow struct {
	Change  string
	Pairs   int   // pairs before the change (per mode: the same)
	Changed []int // in SubsetReport.Modes order
}

// blomZ is Φ⁻¹((n − 0.375)/(n + 0.25)).
func blomZ(n int) float64 {
	q := (float64(n) - 0.375) / (float64(n) + 0.25)
	return math.Sqrt2 * math.Erfinv(2*q-1)
}

// subsetWorld is what the subsets are computed on: the fleet and the
// rates at the last step, and the route.
type subsetWorld struct {
	sc     *Scenario
	f      *fleet
	now    time.Time
	shares [][]float64 // [client zone][upstream zone]
	rate   []float64   // per client group, rps per instance
	in     subset.Input
}

// endOfRun replays the scenario's events on a fresh fleet: the fleet of
// the last step, as every strategy saw it.
func endOfRun(sc *Scenario) (*fleet, time.Time) {
	f := newFleet(sc)
	for i := range sc.Events {
		e := &sc.Events[i]
		f.apply(e, epoch.Add(time.Duration(e.Step)*sc.Step))
	}
	return f, epoch.Add(time.Duration(sc.Steps-1) * sc.Step)
}

// simulateSubsets runs the scenario's subset section on the finished
// report.
func simulateSubsets(rep *Report) (*SubsetReport, error) {
	sc := rep.Scenario
	o := sc.Subset
	route := o.Route
	if route == "" {
		route = rep.Runs[0].Strategy
	}
	run := rep.Run(route)
	if run == nil {
		var names []string
		for _, r := range rep.Runs {
			names = append(names, r.Strategy)
		}
		return nil, fmt.Errorf("subset.route: strategy %s does not run (want one of %s)", route, strings.Join(names, ", "))
	}
	last := run.Steps[len(run.Steps)-1]
	f, now := endOfRun(sc)
	w := &subsetWorld{sc: sc, f: f, now: now, shares: last.Shares}
	w.in = subset.Input{Size: o.Size, Seed: sc.Name + "/" + strconv.FormatUint(sc.Seed, 10), Slots: map[subset.Group]int{}, Localities: map[string][]string{}}
	for i, g := range sc.Clients {
		w.rate = append(w.rate, g.RPS*f.surge[i])
		if g.Instances > 0 {
			w.in.Slots[w.group(i)] = g.Instances
		}
	}
	for _, p := range f.pods {
		z := sc.Zones[p.zone]
		w.in.Localities[z] = append(w.in.Localities[z], p.id)
	}
	w.in.Shares = func(zone string) map[string]float64 {
		z := indexOf(sc.Zones, zone)
		if z < 0 {
			return nil
		}
		var out map[string]float64
		for y, s := range w.shares[z] {
			if s > 0 {
				if out == nil {
					out = map[string]float64{}
				}
				out[sc.Zones[y]] = s
			}
		}
		return out
	}
	out := &SubsetReport{Size: o.Size, Modes: o.Modes, Route: route, Step: last.Index, Endpoints: len(f.pods)}
	for _, g := range sc.Clients {
		out.Clients += g.Instances
	}
	base := make([]*subset.Assignment, len(o.Modes))
	for i, m := range o.Modes {
		in := w.in
		in.Mode = m
		a, err := subset.Assign(nil, in)
		if err != nil {
			return nil, fmt.Errorf("subset: %w", err)
		}
		base[i] = a
	}
	counts := make([]map[string]int, len(base))
	req := make([]map[string]float64, len(base))
	for i, a := range base {
		counts[i], req[i] = a.Counts(), w.requests(a)
	}
	for y, zone := range sc.Zones {
		ids := w.in.Localities[zone]
		if len(ids) == 0 {
			continue
		}
		sz := SubsetZone{Zone: zone, Endpoints: len(ids)}
		for i := range base {
			sz.Modes = append(sz.Modes, w.spread(o.Modes[i], counts[i], req[i], y))
		}
		sz.Binomial = w.binomial(base[0], y)
		out.Zones = append(out.Zones, sz)
	}
	if o.Churn {
		rows, err := w.churn(o.Modes, base)
		if err != nil {
			return nil, err
		}
		out.Churn = rows
	}
	return out, nil
}

func (w *subsetWorld) group(i int) subset.Group {
	g := w.sc.Clients[i]
	return subset.Group{Replica: g.Name, Zone: w.sc.Zones[g.Zone]}
}

// perZone is how many endpoints of each upstream zone sub holds.
func (w *subsetWorld) perZone(sub []string, zoneOf map[string]int) []int {
	k := make([]int, len(w.sc.Zones))
	for _, id := range sub {
		k[zoneOf[id]]++
	}
	return k
}

func (w *subsetWorld) zoneOf() map[string]int {
	out := make(map[string]int, len(w.f.pods))
	for _, p := range w.f.pods {
		out[p.id] = p.zone
	}
	return out
}

// requests is the rps each endpoint is sent under a: every client of
// group g sends rate[g] × share(zone → y) split evenly over the
// endpoints of y in its subset.
func (w *subsetWorld) requests(a *subset.Assignment) map[string]float64 {
	zoneOf := w.zoneOf()
	req := map[string]float64{}
	for gi, g := range w.sc.Clients {
		grp := w.group(gi)
		for i := range g.Instances {
			sub := a.Subset(grp, i)
			k := w.perZone(sub, zoneOf)
			for _, id := range sub {
				y := zoneOf[id]
				req[id] += w.rate[gi] * w.shares[g.Zone][y] / float64(k[y])
			}
		}
	}
	return req
}

// spread measures one mode's connections (counts) and requests (req) per
// endpoint over upstream zone y's endpoints.
func (w *subsetWorld) spread(m subset.Mode, counts map[string]int, req map[string]float64, y int) EndpointSpread {
	s := EndpointSpread{Mode: m, Min: math.MaxInt}
	var sum, sumReq float64
	n := 0
	for i := range w.f.pods {
		p := &w.f.pods[i]
		if p.zone != y {
			continue
		}
		c := counts[p.id]
		n++
		s.Min, s.Max = min(s.Min, c), max(s.Max, c)
		sum += float64(c)
		r := req[p.id]
		sumReq += r
		s.MaxRequests = max(s.MaxRequests, r)
		if capa := p.capacity * w.f.throttle[p.zone] * w.f.warm(p, w.now); capa > 0 {
			s.MaxUtil = max(s.MaxUtil, r/capa)
		} else if r > 0 {
			s.MaxUtil = math.Inf(1)
		}
	}
	s.Mean = sum / float64(n)
	s.Requests = sumReq / float64(n)
	var ss float64
	for i := range w.f.pods {
		if p := &w.f.pods[i]; p.zone == y {
			d := float64(counts[p.id]) - s.Mean
			ss += d * d
		}
	}
	s.SD = math.Sqrt(ss / float64(n))
	if s.Mean > 0 {
		s.MaxAvg = float64(s.Max) / s.Mean
	}
	s.RequestsMaxAvg = math.NaN()
	if s.Requests > 0 {
		s.RequestsMaxAvg = s.MaxRequests / s.Requests
	}
	return s
}

// binomial is the closed form for upstream zone y: a slot of client zone
// z holds each endpoint of y with p = K/N, K what the slots of z hold of
// y in a (every slot of a zone holds the same number). A slot of group g
// sends each endpoint it holds rate × share / K: its requests' mean is
// Σ w·p and variance Σ w²·p·(1−p) over the slots.
func (w *subsetWorld) binomial(a *subset.Assignment, y int) Binomial {
	sc := w.sc
	zoneOf := w.zoneOf()
	b := Binomial{N: len(w.in.Localities[sc.Zones[y]])}
	terms := map[int]*BinomialTerm{}
	var order []int
	var varC, meanR, varR float64
	for gi, g := range sc.Clients {
		if g.Instances == 0 {
			continue
		}
		k := w.perZone(a.Subset(w.group(gi), 0), zoneOf)[y]
		if k == 0 {
			continue
		}
		p := float64(k) / float64(b.N)
		t := terms[g.Zone]
		if t == nil {
			t = &BinomialTerm{ClientZone: sc.Zones[g.Zone], K: k, N: b.N}
			terms[g.Zone] = t
			order = append(order, g.Zone)
		}
		t.M += g.Instances
		m := float64(g.Instances)
		b.Mean += m * p
		varC += m * p * (1 - p)
		r := w.rate[gi] * w.shares[g.Zone][y] / float64(k)
		meanR += m * r * p
		varR += m * r * r * p * (1 - p)
	}
	slices.Sort(order)
	for _, z := range order {
		b.Terms = append(b.Terms, *terms[z])
	}
	b.SD = math.Sqrt(varC)
	b.Z = blomZ(b.N)
	b.Min, b.Max = b.Mean-b.SD*b.Z, b.Mean+b.SD*b.Z
	b.Bound = b.Mean + b.SD*math.Sqrt(2*math.Log(float64(b.N)))
	b.RequestsMaxAvg = math.NaN()
	if b.Mean > 0 {
		b.MaxAvg, b.BoundAvg = b.Max/b.Mean, b.Bound/b.Mean
	}
	b.RequestsMean, b.RequestsSD = meanR, math.Sqrt(varR)
	if meanR > 0 {
		b.RequestsMaxAvg = (meanR + b.RequestsSD*b.Z) / meanR
	}
	return b
}

// churn applies each change alone to the base assignments and counts
// the pairs moved, following the clients.
func (w *subsetWorld) churn(modes []subset.Mode, base []*subset.Assignment) ([]ChurnRow, error) {
	type change struct {
		name string
		edit func(in *subset.Input)
		from map[subset.Group][]int // b's slot → a's slot, for the groups whose clients move
	}
	var changes []change
	sc := w.sc
	// Endpoints: in the first zone with any.
	for _, zone := range sc.Zones {
		ids := w.in.Localities[zone]
		if len(ids) == 0 {
			continue
		}
		added := zone + "-new"
		changes = append(changes, change{name: "endpoint " + added + " added", edit: func(in *subset.Input) {
			in.Localities = maps.Clone(in.Localities)
			in.Localities[zone] = append(in.Localities[zone], added)
		}})
		gone := ids[len(ids)/2]
		changes = append(changes, change{name: "endpoint " + gone + " removed", edit: func(in *subset.Input) {
			in.Localities = maps.Clone(in.Localities)
			in.Localities[zone] = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == gone })
		}})
		break
	}
	// Clients: of the first group with any.
	for gi, g := range sc.Clients {
		if g.Instances == 0 {
			continue
		}
		grp, n := w.group(gi), g.Instances
		resize := func(to int) func(in *subset.Input) {
			return func(in *subset.Input) {
				in.Slots = maps.Clone(in.Slots)
				in.Slots[grp] = to
			}
		}
		changes = append(changes,
			change{name: "client joined (" + g.Name + ")", edit: resize(n + 1)},
			change{name: "client left (" + g.Name + ", the newest)", edit: resize(n - 1)})
		if n >= 2 {
			// Client n/2 leaves; the newest, in slot n-1, takes slot n/2.
			j := n / 2
			from := make([]int, n-1)
			for i := range from {
				from[i] = i
			}
			from[j] = n - 1
			changes = append(changes, change{
				name: fmt.Sprintf("client left (%s, slot %d: the newest takes it)", g.Name, j),
				edit: resize(n - 1), from: map[subset.Group][]int{grp: from},
			})
		}
		break
	}
	var rows []ChurnRow
	for _, ch := range changes {
		row := ChurnRow{Change: ch.name, Pairs: base[0].Pairs()}
		for i, m := range modes {
			in := w.in
			in.Mode = m
			ch.edit(&in)
			b, err := subset.Assign(base[i], in)
			if err != nil {
				return nil, fmt.Errorf("subset churn %s: %w", ch.name, err)
			}
			row.Changed = append(row.Changed, pairsChanged(base[i], b, ch.from))
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// pairsChanged counts the (client, endpoint) pairs of a that b does not
// have and those of b that a does not, following each client: from[g][i]
// is the slot in a of the client that holds slot i of group g in b (−1
// for a new client); a group not in from keeps its clients in their
// slots. A slot of a that no slot of b comes from is a client gone.
func pairsChanged(a, b *subset.Assignment, from map[subset.Group][]int) int {
	ga, gb := a.Groups(), b.Groups()
	groups := maps.Clone(ga)
	for g, n := range gb {
		groups[g] = max(groups[g], n)
	}
	n := 0
	for g := range groups {
		used := make([]bool, ga[g])
		for i := range gb[g] {
			j := i
			if f, ok := from[g]; ok {
				j = f[i]
			}
			if j < 0 || j >= ga[g] {
				n += len(b.Subset(g, i))
				continue
			}
			used[j] = true
			n += symDiff(a.Subset(g, j), b.Subset(g, i))
		}
		for j, u := range used {
			if !u {
				n += len(a.Subset(g, j))
			}
		}
	}
	return n
}

// symDiff is the size of the symmetric difference of two sorted lists.
func symDiff(x, y []string) int {
	n, i, j := 0, 0, 0
	for i < len(x) && j < len(y) {
		switch {
		case x[i] == y[j]:
			i++
			j++
		case x[i] < y[j]:
			n++
			i++
		default:
			n++
			j++
		}
	}
	return n + len(x) - i + len(y) - j
}

// writeSubsets prints the subset report: per upstream zone one row per
// mode and one for the binomial law, then the churn.
func writeSubsets(w io.Writer, r *SubsetReport) error {
	fmt.Fprintf(w, "\nsubsets of %d: %d clients, %d endpoints; fleet and %s route of step %d\n", r.Size, r.Clients, r.Endpoints, r.Route, r.Step)
	fmt.Fprintln(w, "connections per endpoint (clients holding it); requests: each client round robin over its subset")
	rows := [][]string{{"zone", "mode", "endpoints", "min", "avg", "max", "max/avg", "sd", "requests max/avg", "max util"}}
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	f3 := func(v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	for _, z := range r.Zones {
		for _, m := range z.Modes {
			rows = append(rows, []string{z.Zone, string(m.Mode), strconv.Itoa(z.Endpoints), strconv.Itoa(m.Min), strconv.FormatFloat(m.Mean, 'f', 1, 64),
				strconv.Itoa(m.Max), f3(m.MaxAvg), f2(m.SD), f3(m.RequestsMaxAvg), util(m.MaxUtil)})
		}
		b := z.Binomial
		rows = append(rows, []string{z.Zone, "binomial", strconv.Itoa(z.Endpoints), strconv.FormatFloat(b.Min, 'f', 1, 64), strconv.FormatFloat(b.Mean, 'f', 1, 64),
			strconv.FormatFloat(b.Max, 'f', 1, 64), f3(b.MaxAvg), f2(b.SD), f3(b.RequestsMaxAvg), "-"})
	}
	if err := writeAligned(w, rows, nil); err != nil {
		return err
	}
	for _, z := range r.Zones {
		b := z.Binomial
		var terms []string
		for _, t := range b.Terms {
			terms = append(terms, fmt.Sprintf("B(%d, %d/%d)", t.M, t.K, t.N))
		}
		if len(terms) == 0 {
			terms = []string{"0"}
		}
		fmt.Fprintf(w, "binomial %s: %s; max, min = mean ± %.3f sd (Blom: the normal quantile of (N-0.375)/(N+0.25), N = %d); bound mean + sd*sqrt(2 ln N) = %.1f, max/avg %s\n",
			z.Zone, strings.Join(terms, " + "), b.Z, b.N, b.Bound, f3(b.BoundAvg))
	}
	if r.Churn == nil {
		return nil
	}
	fmt.Fprintf(w, "\nchurn: (client, endpoint) pairs changed, of %d, each change alone\n", r.Churn[0].Pairs)
	hdr := []string{"change"}
	for _, m := range r.Modes {
		hdr = append(hdr, string(m))
	}
	rows = [][]string{hdr}
	for _, c := range r.Churn {
		row := []string{c.Change}
		for _, n := range c.Changed {
			row = append(row, fmt.Sprintf("%d (%.2f%%)", n, 100*float64(n)/float64(max(1, c.Pairs))))
		}
		rows = append(rows, row)
	}
	return writeAligned(w, rows, nil)
}

package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spillway/spillway/e2e/bench/consistency/model"
)

// ladder are the bounds tried to find the smallest that passes.
var ladder = []time.Duration{
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second,
	3 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
}

// phase is a stretch of the run: before the faults, or from one fault's
// start to the next one's.
type phase struct {
	name       string
	start, end int64
}

func phases(h *model.History, faults []*fault) []phase {
	out := []phase{{name: "before the faults", start: 0}}
	for _, f := range faults {
		out[len(out)-1].end = f.start
		out = append(out, phase{name: f.name, start: f.start})
	}
	out[len(out)-1].end = h.End + 1
	return out
}

func at(ns int64) string { return fmt.Sprintf("%.2f s", time.Duration(ns).Seconds()) }

// report prints the figures and checks the history; it returns false on a
// violation.
func report(c config, h *model.History, faults []*fault, w *workload, mon *monitor, sw *storeWatch) (bool, error) {
	var b strings.Builder
	p := c.promise(c.bound)
	eps := w.endpoints()
	fates := map[fate]int{}
	fateOf := map[string]fate{}
	for _, ep := range eps {
		fates[ep.fate]++
		fateOf[ep.service+"/"+ep.id] = ep.fate
	}
	count := map[string]int{}
	for _, op := range h.Ops {
		k := op.Kind.String()
		if op.Kind != model.OpList && op.Kind != model.OpAbandon {
			k += " " + op.Outcome.String()
		}
		count[k]++
	}
	fmt.Fprintf(&b, "# Consistency run (seed %d)\n\n", c.seed)
	fmt.Fprintf(&b, "%d replicas on one etcd; leases of %v heartbeated every %v; --lastseen-flush %v (grace %v), --election-ttl %v, --lease-tick %v, --guard-share %s.\n\n",
		c.replicas, c.ttl, c.beat, c.flush, p.Grace, c.electionTTL, c.leaseTick, orDefault(c.guardShare))
	fmt.Fprintf(&b, "## History\n\n%d endpoints over %d services (%d live to the end, %d deregistered, %d left to expire), %.0f s recorded: %d operations.\n\n",
		len(eps), c.services, fates[live], fates[deregister], fates[expire], time.Duration(h.End).Seconds(), len(h.Ops))
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %d\n", k, count[k])
	}
	fmt.Fprintf(&b, "- listed endpoints the workload never registered: %d; list RPCs that failed per replica: %v\n", w.foreign.Load(), readErrors(w))
	fmt.Fprintf(&b, "- heartbeats that failed and moved to the next replica: %d; heartbeats answered NotFound (registered again): %d\n", w.movedHBs.Load(), w.notFoundHBs.Load())
	w.ackedMu.Lock()
	stored, replaced := sw.unacknowledged(w.acked)
	w.ackedMu.Unlock()
	var eg []string
	for _, sp := range stored[:min(5, len(stored))] {
		eg = append(eg, sp.key+" at "+at(w.rec.At(sp.at)))
	}
	fmt.Fprintf(&b, "- registrations etcd stored whose Register RPC failed (a lease never given to the client): %d, of which %d replaced an acknowledged registration (e.g. %s)\n",
		len(stored), len(replaced), strings.Join(eg, "; "))
	for _, sp := range replaced[:min(3, len(replaced))] {
		fmt.Fprintf(&b, "  - %s: %s\n", sp.key, storyOf(h, sw, w, sp.key))
	}
	fmt.Fprintln(&b)

	ph := phases(h, faults)
	fmt.Fprintf(&b, "## Faults\n\n")
	for i, f := range faults {
		fmt.Fprintf(&b, "### %d. %s, at %s\n\n", i+1, f.name, at(f.start))
		for _, l := range f.lines {
			fmt.Fprintf(&b, "- %s\n", l)
		}
		writes := phaseWrites(h, ph[i+1])
		fmt.Fprintf(&b, "- until the next fault: %s\n", writes)
		if d, ok := firstAckAfter(h, f.end); ok {
			fmt.Fprintf(&b, "- first write acknowledged %v after the fault was lifted\n", d.Round(time.Millisecond))
		}
		fmt.Fprintln(&b)
	}
	mon.mu.Lock()
	fmt.Fprintf(&b, "Expiry decider over the run: %s. Mass-expiry guard trips: %d.\n\n", strings.Join(mon.changes, "; "), mon.trips)
	mon.mu.Unlock()
	if len(h.Pauses) > 0 {
		fmt.Fprintf(&b, "Expiry pauses given to the model:")
		for _, ps := range h.Pauses {
			fmt.Fprintf(&b, " %s from %s to %s;", ps.Why, at(ps.Start), at(ps.End))
		}
		fmt.Fprintf(&b, " each followed by %v of resume.\n\n", p.Resume)
	}

	fmt.Fprintf(&b, "## Check (porcupine)\n\n")
	res, err := model.Check(h, p, c.checkTimeout)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(&b, "Promise: N = %v, TTL %v, grace %v, resume %v, recovery %v.\n\n", p.Propagation, p.TTL, p.Grace, p.Resume, p.Recovery)
	fmt.Fprintf(&b, "%d partitions (endpoints), %d porcupine operations, checked in %v: **%d Ok, %d Illegal, %d Unknown**.\n\n",
		res.Partitions, res.Ops, res.Took.Round(time.Millisecond), res.Ok, res.Illegal, res.Unknown)
	byService := map[string][3]int{}
	for _, ep := range eps {
		k := ep.service + "/" + ep.id
		v := byService[ep.service]
		switch {
		case slices.Contains(res.IllegalKeys, k):
			v[1]++
		case slices.Contains(res.UnknownKeys, k):
			v[2]++
		default:
			v[0]++
		}
		byService[ep.service] = v
	}
	for s := range c.services {
		svc := w.service(s)
		v := byService[svc]
		fmt.Fprintf(&b, "- %s: %d Ok, %d Illegal, %d Unknown\n", svc, v[0], v[1], v[2])
	}
	fmt.Fprintln(&b)
	smallest := time.Duration(0)
	for _, n := range ladder {
		r, err := model.Check(h, c.promise(n), c.checkTimeout)
		if err != nil {
			return false, err
		}
		if r.Illegal == 0 && r.Unknown == 0 {
			smallest = n
			break
		}
		fmt.Fprintf(&b, "- N = %v: %d Illegal, %d Unknown\n", n, r.Illegal, r.Unknown)
	}
	if smallest > 0 {
		fmt.Fprintf(&b, "- smallest N of %v that passes: **%v**\n\n", ladder, smallest)
	} else {
		fmt.Fprintf(&b, "- no N up to %v passes\n\n", ladder[len(ladder)-1])
	}

	lags, err := h.Lags(p)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(&b, "## Largest staleness per phase\n\n")
	fmt.Fprintf(&b, "A stale read answered the state from before a write that was over when it was called; staleness is its return minus the write's acknowledgement (an expiry: the lease's latest end, last heartbeat + TTL + grace, pushed past pauses). The last column of the second table is when the last replica stopped serving an abandoned lease, after its latest end without pauses.\n\n")
	fmt.Fprintf(&b, "Reads by a replica during its store outage (and %v after) are counted apart: the promise lets it serve what it had.\n\n", p.Recovery)
	fmt.Fprintf(&b, "| phase | stale reads | > N | after a registration | after a deregistration | after an expiry | in an outage: stale reads, worst |\n|---|---|---|---|---|---|---|\n")
	for _, x := range ph {
		fmt.Fprintf(&b, "| %s | %s |\n", x.name, lagRow(h, lags, x, p))
	}
	fmt.Fprintln(&b)
	exps, err := h.Expiries(p)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(&b, "| phase (by latest end) | abandoned leases | pushed past a pause | last served after the latest end: worst | over its due time + N |\n|---|---|---|---|---|\n")
	for _, x := range ph {
		fmt.Fprintf(&b, "| %s | %s |\n", x.name, expiryRow(exps, x, p))
	}
	fmt.Fprintln(&b)

	if res.Illegal > 0 || res.Unknown > 0 {
		fmt.Fprintf(&b, "## Violations\n\n")
		bad := append(slices.Clone(res.IllegalKeys), res.UnknownKeys...)
		// Where each began: the phase of its first stale read beyond N.
		first := map[string]int64{}
		for _, l := range lags {
			if l.Stale() > p.Propagation && slices.Contains(bad, l.Key) {
				if t, ok := first[l.Key]; !ok || l.Return < t {
					first[l.Key] = l.Return
				}
			}
		}
		byPhase := map[string]int{}
		for _, k := range bad {
			name := "no stale read beyond N (a conflict between replicas or with a failed write)"
			if t, ok := first[k]; ok {
				for _, x := range ph {
					if t >= x.start && t < x.end {
						name = x.name
					}
				}
			}
			byPhase[name]++
		}
		for _, x := range append(ph, phase{name: "no stale read beyond N (a conflict between replicas or with a failed write)"}) {
			if n := byPhase[x.name]; n > 0 {
				fmt.Fprintf(&b, "- %d endpoints: first stale read beyond N during %q\n", n, x.name)
			}
		}
		fmt.Fprintln(&b)
		for i, k := range bad {
			if i == 10 {
				fmt.Fprintf(&b, "- and %d more\n", len(bad)-10)
				break
			}
			fmt.Fprintf(&b, "- %s (%s): %s\n", k, fateOf[k], describeKey(h, lags, k, p.Propagation))
		}
		viz := bad[:min(3, len(bad))]
		if _, err := model.Visualize(h, p, viz, c.viz, c.checkTimeout); err != nil {
			fmt.Fprintf(&b, "\nvisualization: %v\n", err)
		} else {
			fmt.Fprintf(&b, "\nporcupine's visualization of %v: %s\n", viz, c.viz)
		}
	}
	fmt.Print(b.String())
	if c.out != "" {
		var full strings.Builder
		full.WriteString(b.String())
		fmt.Fprintf(&full, "\n## Every partition\n\n| endpoint | fate | recorded ops | porcupine |\n|---|---|---|---|\n")
		perKey := map[int32]int{}
		for _, op := range h.Ops {
			perKey[op.Key]++
		}
		for i, k := range h.Keys {
			verdict := "Ok"
			switch {
			case slices.Contains(res.IllegalKeys, k):
				verdict = "Illegal"
			case slices.Contains(res.UnknownKeys, k):
				verdict = "Unknown"
			}
			fmt.Fprintf(&full, "| %s | %s | %d | %s |\n", k, fateOf[k], perKey[int32(i)], verdict)
		}
		if err := os.WriteFile(c.out, []byte(full.String()), 0o644); err != nil {
			return false, fmt.Errorf("--out: %w", err)
		}
	}
	return res.Illegal == 0 && res.Unknown == 0, nil
}

// storyOf tells one endpoint's Register attempts and the records etcd
// stored for it, in time order.
func storyOf(h *model.History, sw *storeWatch, w *workload, key string) string {
	type ev struct {
		t int64
		s string
	}
	var evs []ev
	i := slices.Index(h.Keys, key)
	for _, op := range h.Ops {
		if int(op.Key) == i && op.Kind == model.OpRegister {
			evs = append(evs, ev{op.Call, fmt.Sprintf("Register on r%d called %s, %s %s", op.Replica, at(op.Call), op.Outcome, at(op.Return))})
		}
	}
	w.ackedMu.Lock()
	for _, p := range sw.history(key) {
		t := w.rec.At(p.at)
		given := "never given to the client"
		if w.acked[p.lease] {
			given = "acknowledged"
		}
		evs = append(evs, ev{t, fmt.Sprintf("etcd stored lease %.8s… (%s) at %s", p.lease, given, at(t))})
	}
	w.ackedMu.Unlock()
	slices.SortStableFunc(evs, func(a, b ev) int { return cmp.Compare(a.t, b.t) })
	var out []string
	for _, e := range evs {
		out = append(out, e.s)
	}
	return strings.Join(out, "; ")
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

func readErrors(w *workload) []int64 {
	out := make([]int64, len(w.readErrors))
	for i := range w.readErrors {
		out[i] = w.readErrors[i].Load()
	}
	return out
}

// phaseWrites counts the RPC outcomes called in the phase.
func phaseWrites(h *model.History, x phase) string {
	type k struct {
		kind    model.OpKind
		outcome model.Outcome
	}
	n := map[k]int{}
	for _, op := range h.Ops {
		if op.Call >= x.start && op.Call < x.end && op.Kind != model.OpList && op.Kind != model.OpAbandon {
			n[k{op.Kind, op.Outcome}]++
		}
	}
	var parts []string
	for _, kind := range []model.OpKind{model.OpRegister, model.OpDeregister, model.OpHeartbeat} {
		var s []string
		for _, o := range []model.Outcome{model.Acked, model.Failed, model.NotFound} {
			if v := n[k{kind, o}]; v > 0 {
				s = append(s, fmt.Sprintf("%d %s", v, o))
			}
		}
		if len(s) > 0 {
			parts = append(parts, kind.String()+" "+strings.Join(s, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// firstAckAfter is how long after t the first Register or Deregister was
// acknowledged.
func firstAckAfter(h *model.History, t int64) (time.Duration, bool) {
	best := int64(-1)
	for _, op := range h.Ops {
		if (op.Kind == model.OpRegister || op.Kind == model.OpDeregister) && op.Outcome == model.Acked && op.Return >= t {
			if best < 0 || op.Return < best {
				best = op.Return
			}
		}
	}
	return time.Duration(best - t), best >= 0
}

// lagRow is one phase's row of the staleness table.
func lagRow(h *model.History, lags []model.Lag, x phase, p model.Promise) string {
	stale, over, outStale := 0, 0, 0
	var worst [4]model.Lag // by Kind
	var outWorst model.Lag
	for _, l := range lags {
		if l.Return < x.start || l.Return >= x.end {
			continue
		}
		if h.InOutage(l.Replica, l.Call, l.Return, p.Recovery) {
			outStale++
			if l.Stale() > outWorst.Stale() || outWorst.Key == "" {
				outWorst = l
			}
			continue
		}
		stale++
		if l.Stale() > p.Propagation {
			over++
		}
		if l.Stale() > worst[l.After].Stale() || worst[l.After].Key == "" {
			worst[l.After] = l
		}
	}
	cell := func(l model.Lag) string {
		if l.Key == "" {
			return "none"
		}
		return fmt.Sprintf("%v (r%d, %s)", l.Stale().Round(time.Millisecond), l.Replica, l.Key)
	}
	return fmt.Sprintf("%d | %d | %s | %s | %s | %d, %s", stale, over, cell(worst[model.Register]), cell(worst[model.Deregister]), cell(worst[model.Expire]), outStale, cell(outWorst))
}

// expiryRow is one phase's row of the expiry table.
func expiryRow(exps []model.Expiry, x phase, p model.Promise) string {
	n, paused, over := 0, 0, 0
	var worst model.Expiry
	for _, e := range exps {
		if e.Deadline < x.start || e.Deadline >= x.end {
			continue
		}
		n++
		if e.Due != e.Deadline {
			paused++
		}
		if e.Gone > e.Due+int64(p.Propagation) {
			over++
		}
		if worst.Key == "" || e.Late() > worst.Late() {
			worst = e
		}
	}
	cell := "none"
	if worst.Key != "" {
		cell = fmt.Sprintf("%v (%s", worst.Late().Round(time.Millisecond), worst.Key)
		if worst.Replica >= 0 {
			cell += fmt.Sprintf(", r%d", worst.Replica)
		}
		cell += ")"
	}
	return fmt.Sprintf("%d | %d | %s | %d", n, paused, cell, over)
}

// describeKey says what happened to one endpoint: its writes and its
// stale reads beyond n.
func describeKey(h *model.History, lags []model.Lag, key string, n time.Duration) string {
	i := slices.Index(h.Keys, key)
	var ev []string
	for _, op := range h.Ops {
		if int(op.Key) != i {
			continue
		}
		switch op.Kind {
		case model.OpRegister, model.OpDeregister:
			ev = append(ev, fmt.Sprintf("%s on r%d %s at %s-%s", op.Kind, op.Replica, op.Outcome, at(op.Call), at(op.Return)))
		case model.OpHeartbeat:
			if op.Outcome != model.Acked {
				ev = append(ev, fmt.Sprintf("heartbeat on r%d %s at %s", op.Replica, op.Outcome, at(op.Call)))
			}
		case model.OpAbandon:
			ev = append(ev, "abandoned at "+at(op.Call))
		}
	}
	// Stale reads beyond n, one line per replica and write: the first,
	// the last, how many.
	type run struct {
		replica     int
		after       model.Kind
		since       int64
		first, last int64
		worst       time.Duration
		n           int
	}
	var runs []*run
	for _, l := range lags {
		if l.Key != key || l.Stale() <= n {
			continue
		}
		j := slices.IndexFunc(runs, func(r *run) bool { return r.replica == l.Replica && r.since == l.Since })
		if j < 0 {
			runs = append(runs, &run{replica: l.Replica, after: l.After, since: l.Since, first: l.Return, last: l.Return})
			j = len(runs) - 1
		}
		r := runs[j]
		r.first, r.last, r.worst, r.n = min(r.first, l.Return), max(r.last, l.Return), max(r.worst, l.Stale()), r.n+1
	}
	var stale []string
	for _, r := range runs {
		what := "not served"
		if r.after != model.Register {
			what = "served"
		}
		stale = append(stale, fmt.Sprintf("r%d: %s from %s to %s (%d reads), up to %v after the %s of %s",
			r.replica, what, at(r.first), at(r.last), r.n, r.worst.Round(time.Millisecond), r.after, at(r.since)))
	}
	if len(ev) > 12 {
		ev = append(ev[:12], fmt.Sprintf("... %d more", len(ev)-12))
	}
	return strings.Join(ev, "; ") + ". Stale reads beyond N: " + orNone(stale)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none (porcupine's visualization shows the conflict)"
	}
	return strings.Join(s, "; ")
}

package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// result is everything a run measured; report turns it into markdown and
// a verdict without touching anything else.
type result struct {
	c                     config
	date                  time.Time
	machine               string // CPUs, Go, OS
	cpus                  int
	etcdVersion, spillway string
	loadBefore, loadAfter string // /proc/loadavg
	elapsed               time.Duration
	hbAtEnd               int64         // heartbeats acknowledged when the load ended (the settle goes on)
	etcdCPU, driverCPU    float64       // seconds of CPU over the load
	initialWall           time.Duration // registering the first --leases
	pids                  []int         // each replica's pid at the load's start
	samples               [][]sample    // per replica
	kills                 []kill
	t                     totals
	served                servedCheck
	expired               []expiry
	storePuts             int
	deletes               [numDeleteKinds]int
	oddDeletes            []storeDelete
	watchErr              error
}

// totals are the load loops' counters at the end.
type totals struct {
	hbAcked, hbNotFound, hbStreamFails, hbMoved, hbGaveUp, hbMismatch int64
	regOK, regFailed, regAbandoned, regAgain                          int64
	deregOK, deregFailed, deregNotFound, deregAbandoned               int64
	churnAdds, churnRemoves, churnDrop                                int64
	xdsOpened, xdsFailed, xdsResponses, xdsEDS, xdsCDS                int64
	liveAtEnd                                                         int
	hbFailCodes                                                       map[codes.Code]int
}

// failCodes is "Unavailable 29, DeadlineExceeded 2", most first, or
// "none".
func (t totals) failCodes() string {
	type kv struct {
		c codes.Code
		n int
	}
	var kvs []kv
	for c, n := range t.hbFailCodes {
		kvs = append(kvs, kv{c, n})
	}
	if len(kvs) == 0 {
		return "none"
	}
	slices.SortFunc(kvs, func(a, b kv) int { return cmp.Or(b.n-a.n, int(a.c)-int(b.c)) })
	var parts []string
	for _, x := range kvs {
		parts = append(parts, fmt.Sprintf("%v %d", x.c, x.n))
	}
	return strings.Join(parts, ", ")
}

// incarnation is one process of a replica: from its start (or the load's
// start) to its kill (or the load's end).
type incarnation struct {
	replica, n, pid int
	start, end      time.Duration
}

// incarnations splits each replica's run at its kills.
func incarnations(pids []int, kills []kill, end time.Duration) [][]incarnation {
	out := make([][]incarnation, len(pids))
	for i, pid := range pids {
		out[i] = []incarnation{{replica: i, n: 1, pid: pid, start: 0, end: end}}
	}
	for _, k := range kills {
		cur := &out[k.replica][len(out[k.replica])-1]
		cur.end = k.at
		if k.newPID != 0 {
			out[k.replica] = append(out[k.replica], incarnation{replica: k.replica, n: cur.n + 1, pid: k.newPID, start: k.restarted, end: end})
		}
	}
	return out
}

// pointsOf returns the samples of inc's process.
func pointsOf(ss []sample, inc incarnation) []point {
	var out []point
	for _, s := range ss {
		if s.Up && s.PID == inc.pid {
			out = append(out, point{At: s.At, RSSKiB: s.RSSKiB, Goroutines: s.Goroutines})
		}
	}
	return out
}

func (r *result) deleteCount() int {
	n := 0
	for _, d := range r.deletes {
		n += d
	}
	return n
}

// check is one pass/fail line of the verdict.
type check struct {
	name   string
	ok     bool
	detail string
}

func (r *result) rule() growthRule {
	return growthRule{Warmup: r.c.warmup, Edge: r.c.edge, Limit: r.c.limit}
}

// judged is every incarnation with its judgement.
type judged struct {
	inc incarnation
	j   judgement
}

func (r *result) judgements() [][]judged {
	incs := incarnations(r.pids, r.kills, r.elapsed)
	out := make([][]judged, len(incs))
	for i, is := range incs {
		for _, inc := range is {
			out[i] = append(out[i], judged{inc: inc, j: r.rule().judge(inc.start, inc.end, pointsOf(r.samples[i], inc))})
		}
	}
	return out
}

// checks are the verdict's lines, in the order printed.
func (r *result) checks() []check {
	var cs []check
	n := len(r.pids)
	lost, listErr, stale, foreign := 0, 0, 0, 0
	var lostDetail []string
	for i := range n {
		if i < len(r.served.lost) {
			lost += r.served.lost[i]
			listErr += r.served.listErrors[i]
			stale += r.served.stale[i]
			foreign += r.served.foreign[i]
			if r.served.lost[i] > 0 {
				lostDetail = append(lostDetail, fmt.Sprintf("r%d misses %d (e.g. %s)", i, r.served.lost[i], strings.Join(r.served.examples[i], ", ")))
			}
		}
	}
	d := fmt.Sprintf("%s acknowledged live registrations checked on each of %d replicas %v after the load: %d missing, %d list errors",
		num(int64(r.served.expected)), n, r.c.settle, lost, listErr)
	if len(lostDetail) > 0 {
		d += "; " + strings.Join(lostDetail, "; ")
	}
	cs = append(cs, check{"acknowledged registrations lost", r.served.expected > 0 && lost+listErr == 0, d})

	d = fmt.Sprintf("%d heartbeats of a live lease answered found=false", len(r.expired))
	for _, e := range r.expired[:min(5, len(r.expired))] {
		d += fmt.Sprintf("; %s at %s on r%d (acknowledged by r%d %.1f s before)", e.key, clock(e.at), e.replica, e.ackedBy, e.age.Seconds())
	}
	cs = append(cs, check{"live endpoints expired (heartbeats)", len(r.expired) == 0, d})

	d = fmt.Sprintf("%s store deletes: %s deregistrations, %d of live endpoints, %d of unacknowledged registrations, %d foreign",
		num(int64(r.deleteCount())), num(int64(r.deletes[delDeregistered])), r.deletes[delLive], r.deletes[delUnacked], r.deletes[delForeign])
	for _, od := range r.oddDeletes {
		d += fmt.Sprintf("; %s (%s) at %s, revision %d", od.key, od.kind, clock(od.at), od.rev)
	}
	if r.watchErr != nil {
		d += fmt.Sprintf("; the watch failed: %v", r.watchErr)
	}
	cs = append(cs, check{"live endpoints expired (etcd deletes)", r.deletes[delLive]+r.deletes[delForeign] == 0 && r.watchErr == nil, d})

	cs = append(cs, check{"deregistered endpoints still served", stale == 0,
		fmt.Sprintf("%s deregistered endpoints, listed %d times over the replicas; %d endpoints listed that the workload never created", num(int64(r.served.deregistered)), stale, foreign)})

	bad := 0
	var kd []string
	for _, k := range r.kills {
		if k.err != nil {
			bad++
			kd = append(kd, fmt.Sprintf("r%d at %s: %v", k.replica, clock(k.at), k.err))
		}
	}
	d = fmt.Sprintf("%d kills, %d restarted and ready", len(r.kills), len(r.kills)-bad)
	if len(kd) > 0 {
		d += "; " + strings.Join(kd, "; ")
	}
	cs = append(cs, check{"replicas restarted after SIGKILL", bad == 0, d})

	for i, js := range r.judgements() {
		ok, counted := true, 0
		var parts []string
		for _, jj := range js {
			if !jj.j.Judged {
				continue
			}
			counted++
			ok = ok && jj.j.OK(r.c.limit)
			parts = append(parts, fmt.Sprintf("pid %d: RSS %+.1f%%, goroutines %+.1f%%", jj.inc.pid, 100*jj.j.RSS.Growth(), 100*jj.j.Gorts.Growth()))
		}
		if counted == 0 {
			ok = false
			parts = append(parts, "no process of it ran long enough to be judged")
		}
		cs = append(cs, check{fmt.Sprintf("r%d growth within %.0f%%", i, 100*r.c.limit), ok, strings.Join(parts, "; ")})
	}
	return cs
}

// report renders the result and says whether every check passed.
func (r *result) report() (string, bool) {
	var b strings.Builder
	c := r.c
	n := len(r.pids)
	fmt.Fprintf(&b, "# Soak: %d replicas on etcd, %v\n\n", n, c.duration)
	fmt.Fprintf(&b, "Run of %s on %s; etcd %s (one member, default settings); spillway %s. Load average (1, 5, 15 min) before: %s; after: %s.\n\n",
		r.date.UTC().Format("2006-01-02 15:04 MST"), r.machine, r.etcdVersion, r.spillway, r.loadBefore, r.loadAfter)

	secs := r.elapsed.Seconds()
	t := r.t
	b.WriteString("## Load\n\n| | asked | measured |\n|---|---:|---:|\n")
	fmt.Fprintf(&b, "| leases heartbeated (TTL %v, every %v) | %s | %s at the end |\n", c.ttl, c.beat, num(int64(c.leases)), num(int64(t.liveAtEnd)))
	fmt.Fprintf(&b, "| heartbeats/s | %s | %s acknowledged over the load |\n", num(int64(float64(c.leases)/c.beat.Seconds())), num(int64(float64(r.hbAtEnd)/secs)))
	fmt.Fprintf(&b, "| xDS streams (CDS + EDS, %d services) | %s | %s |\n", c.services, num(int64(c.xdsStreams)), r.xdsOpenRange())
	fmt.Fprintf(&b, "| churn registrations/s (and as many deregistrations) | %g | %.1f registered, %.1f deregistered |\n", c.churn, float64(t.churnAdds)/secs, float64(t.churnRemoves)/secs)
	fmt.Fprintf(&b, "| SIGKILL of a replica, round robin | every %v | %d |\n\n", c.killEvery, len(r.kills))
	var repCPU float64
	for i := range r.samples {
		repCPU += r.replicaCPU(i)
	}
	fmt.Fprintf(&b, "CPU over the load's %.0f s: the replicas %.0f s, etcd %.0f s, this driver (every client) %.0f s; %.0f s in all, %.0f%% of %d CPUs.\n\n",
		secs, repCPU, r.etcdCPU, r.driverCPU, repCPU+r.etcdCPU+r.driverCPU, 100*(repCPU+r.etcdCPU+r.driverCPU)/(secs*float64(r.cpus)), r.cpus)
	fmt.Fprintf(&b, "The first %s registrations took %.1f s. Over the run: %s registrations acknowledged and %s attempts failed (%d gave up on every replica; %d registered again after found=false); %s deregistrations acknowledged, %s attempts failed, %d answered NotFound at once, %d gave up; %d churn calls dropped (workers busy). Heartbeats: %s acknowledged, %s answered found=false, %s streams failed (%s), %s leases moved to the next replica, %s not answered by any replica, %d answers for another lease. xDS: %s streams opened (had a response), %s attempts ended or failed and were retried, %s responses (%s EDS, %s CDS). etcd: %s puts and %s deletes of registrations.\n\n",
		num(int64(c.leases)), r.initialWall.Seconds(), num(t.regOK), num(t.regFailed), t.regAbandoned, t.regAgain,
		num(t.deregOK), num(t.deregFailed), t.deregNotFound, t.deregAbandoned, t.churnDrop,
		num(t.hbAcked), num(t.hbNotFound), num(t.hbStreamFails), t.failCodes(), num(t.hbMoved), num(t.hbGaveUp), t.hbMismatch,
		num(t.xdsOpened), num(t.xdsFailed), num(t.xdsResponses), num(t.xdsEDS), num(t.xdsCDS),
		num(int64(r.storePuts)), num(int64(r.deleteCount())))

	if len(r.kills) > 0 {
		b.WriteString("## Kills\n\n| # | at | replica | pid killed | restarted at | new pid | /readyz 200 after |\n|---:|---:|---|---:|---:|---:|---:|\n")
		for i, k := range r.kills {
			ready := "never"
			if k.ready >= 0 {
				ready = fmt.Sprintf("%.1f s", k.ready.Seconds())
			}
			fmt.Fprintf(&b, "| %d | %s | r%d | %d | %s | %d | %s |\n", i+1, clock(k.at), k.replica, k.oldPID, clock(k.restarted), k.newPID, ready)
		}
		b.WriteString("\n")
	}

	fmt.Fprintf(&b, "## Replicas over time\n\nA row every %v; RSS is VmRSS, goroutines are go_goroutines of /metrics, both at the row's time; heartbeats/s, registrations and failed attempts are over the time since the row before.\n\n", c.tableEvery)
	for i := range n {
		r.table(&b, i)
	}

	js := r.judgements()
	fmt.Fprintf(&b, "## Growth\n\nPer process: its samples count from %v after it started (the load's start for the first processes) to its kill or the run's end; base = the median of its samples in the first %v of that, final = the median in the last %v; growth = final / base − 1, at most %.0f%%. Peak (the largest value anywhere in the window) is shown, not judged.\n\n",
		c.warmup, c.edge, c.edge, 100*c.limit)
	b.WriteString("| replica | pid | counted | RSS base MiB | final | peak | growth | goroutines base | final | peak | growth | verdict |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, jjs := range js {
		for _, jj := range jjs {
			if !jj.j.Judged {
				fmt.Fprintf(&b, "| r%d | %d | %s–%s | | | | | | | | | not judged: %s |\n", i, jj.inc.pid, clock(jj.inc.start), clock(jj.inc.end), jj.j.Why)
				continue
			}
			v := "ok"
			if !jj.j.OK(c.limit) {
				v = "**grew**"
			}
			g := jj.j
			fmt.Fprintf(&b, "| r%d | %d | %s–%s | %.1f | %.1f | %.1f | %+.1f%% | %.0f | %.0f | %.0f | %+.1f%% | %s |\n", i, jj.inc.pid, clock(g.From), clock(g.To),
				g.RSS.Base/1024, g.RSS.Final/1024, g.RSS.Peak/1024, 100*g.RSS.Growth(),
				g.Gorts.Base, g.Gorts.Final, g.Gorts.Peak, 100*g.Gorts.Growth(), v)
		}
	}
	b.WriteString("\n## Checks\n\n| check | result | detail |\n|---|---|---|\n")
	ok := true
	var failed []string
	for _, ch := range r.checks() {
		res := "pass"
		if !ch.ok {
			res, ok = "**FAIL**", false
			failed = append(failed, ch.name)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", ch.name, res, ch.detail)
	}
	if ok {
		b.WriteString("\n**Verdict: PASS**\n")
	} else {
		fmt.Fprintf(&b, "\n**Verdict: FAIL** (%s)\n", strings.Join(failed, "; "))
	}
	return b.String(), ok
}

// table writes replica i's rows.
func (r *result) table(b *strings.Builder, i int) {
	fmt.Fprintf(b, "### r%d\n\n| t | pid | RSS MiB | goroutines | CPU %% | heartbeats/s | xDS streams open | registrations | failed | |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n", i)
	ss := r.samples[i]
	step := max(1, int(r.c.tableEvery/r.c.sampleEvery))
	var hbSum, cpuSum float64
	var regOK, regBad int64
	var span, cpuSpan time.Duration
	prevAt := time.Duration(-1)
	for k, s := range ss {
		if k > 0 {
			d := s.At - ss[k-1].At
			hbSum += s.HBPerSec * d.Seconds()
			span += d
			if p := ss[k-1]; p.Up && s.Up && p.PID == s.PID {
				cpuSum += s.CPUSec - p.CPUSec
				cpuSpan += d
			}
		}
		regOK += s.RegOK
		regBad += s.RegFailed
		if k%step != 0 && k != len(ss)-1 {
			continue
		}
		var notes []string
		for _, kl := range r.kills {
			if kl.replica == i && kl.at > prevAt && kl.at <= s.At {
				notes = append(notes, fmt.Sprintf("killed at %s, restarted at %s", clock(kl.at), clock(kl.restarted)))
			}
		}
		hb := "–"
		if span > 0 {
			hb = num(int64(hbSum / span.Seconds()))
		}
		cpu := "–"
		if cpuSpan > 0 {
			cpu = fmt.Sprintf("%.0f", 100*cpuSum/cpuSpan.Seconds())
		}
		if s.Up {
			fmt.Fprintf(b, "| %s | %d | %.1f | %d | %s | %s | %d | %d | %d | %s |\n", clock(s.At), s.PID, float64(s.RSSKiB)/1024, s.Goroutines, cpu, hb, s.XDSOpen, regOK, regBad, strings.Join(notes, "; "))
		} else {
			if s.Err != "" {
				notes = append(notes, s.Err)
			}
			fmt.Fprintf(b, "| %s | %d | – | – | %s | %s | %d | %d | %d | %s |\n", clock(s.At), s.PID, cpu, hb, s.XDSOpen, regOK, regBad, strings.Join(notes, "; "))
		}
		hbSum, cpuSum, span, cpuSpan, regOK, regBad, prevAt = 0, 0, 0, 0, 0, 0, s.At
	}
	b.WriteString("\n")
}

// replicaCPU is the CPU replica i's processes used over the samples:
// between the samples of each process, plus, for a restarted one, its
// life before its first sample.
func (r *result) replicaCPU(i int) float64 {
	var sum float64
	last := map[int]float64{} // pid -> CPU at its latest sample
	for _, s := range r.samples[i] {
		if !s.Up {
			continue
		}
		prev, seen := last[s.PID]
		switch {
		case seen:
			sum += s.CPUSec - prev
		case s.PID != r.pids[i]:
			sum += s.CPUSec
		}
		last[s.PID] = s.CPUSec
	}
	return sum
}

// xdsOpenRange is the fewest and most streams open over all replicas
// together, across the samples.
func (r *result) xdsOpenRange() string {
	lo, hi := int64(-1), int64(0)
	for k := range r.samples[0] {
		var sum int64
		for i := range r.samples {
			if k < len(r.samples[i]) {
				sum += r.samples[i][k].XDSOpen
			}
		}
		if lo < 0 || sum < lo {
			lo = sum
		}
		hi = max(hi, sum)
	}
	return fmt.Sprintf("%s–%s open (samples)", num(max(lo, 0)), num(hi))
}

// clock formats d as m:ss.
func clock(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%s%d:%02d", neg, s/60, s%60)
}

// num formats n with thousands separators.
func num(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// csv is every sample, one line each, for plotting.
func (r *result) csv() string {
	var b strings.Builder
	b.WriteString("replica,t_s,pid,up,rss_kib,goroutines,heartbeats_per_s,xds_open,registrations,registrations_failed\n")
	for i, ss := range r.samples {
		for _, s := range ss {
			fmt.Fprintf(&b, "r%d,%.0f,%d,%t,%d,%d,%.1f,%d,%d,%d\n", i, s.At.Seconds(), s.PID, s.Up, s.RSSKiB, s.Goroutines, s.HBPerSec, s.XDSOpen, s.RegOK, s.RegFailed)
		}
	}
	return b.String()
}

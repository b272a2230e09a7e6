package zoneaware

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// plant is a toy of the real system for closed-loop tests. Clients in each
// zone issue a fixed rate, spread by the vectors of the last cycle. A zone
// serves up to capRPS at a base latency and slows down beyond it; a
// degraded zone also fails errRate of its requests and is slow× slower. At
// the next cycle the load reports describe what happened.
type plant struct {
	zones     []string
	clientRPS map[string]float64
	capRPS    map[string]float64
	errRate   map[string]float64
	slow      map[string]float64
	hardCap   map[string]float64 // requests beyond it fail, if set
}

const baseLatency = 0.1 // seconds

// serve applies the vectors in out for one report interval and returns the
// load reports seen at now.
func (p *plant) serve(out *Result, now time.Time) ([]ZoneLoad, []Demand) {
	issued := map[string]float64{}
	var demand []Demand
	for _, z := range p.zones {
		for _, w := range out.Route(z).Weights {
			issued[w.Zone] += p.clientRPS[z] * w.Share
		}
		demand = append(demand, Demand{ClientZone: z, RPS: p.clientRPS[z], Updated: now})
	}
	var loads []ZoneLoad
	for _, y := range p.zones {
		r := issued[y]
		rho := r / p.capRPS[y]
		slow := p.slow[y]
		if slow == 0 {
			slow = 1
		}
		latency := baseLatency * slow * (1 + 3*max(0, rho-1))
		e := r * p.errRate[y]
		if c, ok := p.hardCap[y]; ok && r-c > e { // what it cannot serve fails
			e = r - c
		}
		loads = append(loads, ZoneLoad{Zone: y, IssuedRPS: r, SucceededRPS: r - e, ErroredRPS: e, InProgress: r * latency, Updated: now})
	}
	return loads, demand
}

func zoneInfo(out *Result, zone string) ZoneInfo {
	for _, z := range out.Zones {
		if z.Zone == zone {
			return z
		}
	}
	return ZoneInfo{}
}

// TestDegradedZone: zone a degrades (fails 90% of its requests and slows
// down 4×, or only slows down 4×). In the next cycle its capacity share
// drops and its traffic moves away (bar probes); when it recovers, its
// share comes back over cycles, its health factor climbing by at most
// interval/RecoveryRamp a cycle, and never overshoots its healthy share by
// more than MoveThreshold + 1 point.
func TestDegradedZone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		errRate   float64
		slow      float64
		maxCap    float64 // capacity share and traffic of a while degraded
		maxErrors float64 // share of all requests failing while degraded
		// settle is how many degraded cycles may have a above maxCap
		// (but below its healthy share): the queue signal pools
		// queueReports reports, so a zone that only slows down is marked
		// down over that many cycles.
		settle int
	}{
		// 90% errors: a's health goes to the floor (0.05). It keeps 4% of
		// the traffic (its share is held up a little by b and c, now
		// loaded 1.35× and slower), and errors fall from 30% to 3.6%.
		{"errors-and-slow", 0.9, 4, 0.045, 0.04, 0},
		// Slow only: the queue factor settles where a's in-flight per
		// endpoint meets the average (about 0.7 for 4× latency) once the
		// pooled reports are all slow: capacity share 30.5%, 27.7%,
		// 27.3%, then down to 26.3%; traffic a point above it (hysteresis).
		{"slow-only", 0, 4, 0.28, 0, queueReports},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const interval = 10 * time.Second
			p := &plant{
				zones:     []string{"a", "b", "c"},
				clientRPS: map[string]float64{"a": 300, "b": 300, "c": 300},
				capRPS:    map[string]float64{"a": 360, "b": 360, "c": 360},
				errRate:   map[string]float64{},
				slow:      map[string]float64{},
			}
			eps := fleet(map[string]int{"a": 3, "b": 3, "c": 3})
			calc := mustNew(t, Config{})
			var st State
			var out Result
			now := t0
			calc.Compute(&st, &Input{Now: now, Endpoints: eps, Clients: []ClientCount{{"a", 1}, {"b", 1}, {"c", 1}}}, &out)

			type sample struct {
				phase        string
				capA, loadA  float64
				healthA      float64
				localA, errs float64 // a's clients' local share; share of all requests failing
			}
			var series []sample
			step := func(phase string) sample {
				loads, demand := p.serve(&out, now.Add(interval))
				now = now.Add(interval)
				calc.Compute(&st, &Input{Now: now, Endpoints: eps, Loads: loads, Demand: demand}, &out)
				var errs, total float64
				for _, l := range loads {
					errs += l.ErroredRPS
					total += l.IssuedRPS
				}
				a := zoneInfo(&out, "a")
				s := sample{phase, a.CapacityShare, a.Load, a.Health, out.Route("a").Explain.Local, errs / total}
				series = append(series, s)
				return s
			}
			defer func() {
				var b strings.Builder
				for i, s := range series {
					fmt.Fprintf(&b, "\n%2d %-10s capacity share a %5.1f%%  health a %.2f  traffic on a %5.1f%%  a local %5.1f%%  errors %4.1f%%",
						i, s.phase, 100*s.capA, s.healthA, 100*s.loadA, 100*s.localA, 100*s.errs)
				}
				t.Log(b.String())
			}()

			var healthy sample
			for range 6 {
				healthy = step("healthy")
			}
			if math.Abs(healthy.capA-1.0/3) > 1e-9 || healthy.localA < 0.97 {
				t.Fatalf("healthy: capacity share of a %.4f, local %.4f; want 1/3 and >= 0.97", healthy.capA, healthy.localA)
			}

			p.errRate["a"], p.slow["a"] = tc.errRate, tc.slow
			step("degrading") // reports of the healthy interval: nothing seen yet
			for i := range 8 {
				s := step("degraded")
				if limit := tc.maxCap; i >= tc.settle && (s.capA > limit || s.loadA > limit) || s.capA > healthy.capA || s.loadA > healthy.loadA {
					t.Errorf("degraded cycle %d: capacity share of a %.4f, traffic on a %.4f; want both <= %g", i, s.capA, s.loadA, tc.maxCap)
				}
				if s.errs > tc.maxErrors {
					t.Errorf("degraded cycle %d: %.1f%% of requests fail, want <= %g%%", i, 100*s.errs, 100*tc.maxErrors)
				}
			}
			degraded := series[len(series)-1]

			p.errRate["a"], p.slow["a"] = 0, 1
			// The first recovered cycle is the one whose reports (of the
			// interval before) show the recovery.
			rec := []sample{step("recovering")}
			for range 12 {
				rec = append(rec, step("recovered"))
			}
			// The health factor grows by at most a factor of
			// 1+2·interval/RecoveryRamp per cycle, so the share does not
			// come back at once.
			prevHealth := degraded.healthA
			for i, s := range rec {
				if s.healthA > prevHealth*(1+2*interval.Seconds()/DefaultRecoveryRamp.Seconds())+1e-9 {
					t.Errorf("recovered cycle %d: health of a %.3f -> %.3f, faster than the recovery ramp", i, prevHealth, s.healthA)
				}
				prevHealth = s.healthA
			}
			if rec[0].capA > healthy.capA-0.02 {
				t.Errorf("first recovered cycle: capacity share of a %.4f -> %.4f, want a gradual return", degraded.capA, rec[0].capA)
			}
			const bound = DefaultMoveThreshold + 0.01
			for i, s := range rec {
				if s.capA > healthy.capA+bound || s.loadA > healthy.loadA+bound {
					t.Errorf("recovered cycle %d: capacity share %.4f, traffic %.4f; want <= healthy %.4f, %.4f + %g",
						i, s.capA, s.loadA, healthy.capA, healthy.loadA, bound)
				}
			}
			last := rec[len(rec)-1]
			if math.Abs(last.capA-healthy.capA) > 0.01 || math.Abs(last.loadA-healthy.loadA) > DefaultMoveThreshold {
				t.Errorf("after recovery: capacity share %.4f, traffic %.4f; want back to %.4f, %.4f", last.capA, last.loadA, healthy.capA, healthy.loadA)
			}
		})
	}
}

// TestSlowStart: one new endpoint joins zone a, which had one endpoint. It
// counts as 5% of a host, and zone a's capacity rises gradually, never
// jumping to two hosts: over SlowStartRamp without load reports, after
// SlowStartRequests successful requests with them.
func TestSlowStart(t *testing.T) {
	const interval = 10 * time.Second
	base := fleet(map[string]int{"a": 1, "b": 1, "c": 1})
	clients := []ClientCount{{"a", 1}, {"b", 1}, {"c", 1}}

	t.Run("ramp-without-reports", func(t *testing.T) {
		calc := mustNew(t, Config{})
		var st State
		var out Result
		calc.Compute(&st, &Input{Now: t0, Endpoints: base, Clients: clients}, &out)
		joined := t0.Add(interval)
		eps := append(base[:1:1], Endpoint{ID: "a-new", Zone: "a", Healthy: true, Registered: joined})
		eps = append(eps, base[1:]...)
		var got []float64
		for i := range 8 {
			now := joined.Add(time.Duration(i) * interval)
			calc.Compute(&st, &Input{Now: now, Endpoints: eps, Clients: clients}, &out)
			a := zoneInfo(&out, "a")
			got = append(got, a.Trusted)
			// The documented ramp: 1 + 0.05 + 0.95 × age/60 s, capped at 2.
			want := 1 + DefaultSlowStartFraction + (1-DefaultSlowStartFraction)*min(1, now.Sub(joined).Seconds()/60)
			if math.Abs(a.Trusted-want) > 1e-9 {
				t.Errorf("t+%v: zone a trust %.4f, want %.4f", now.Sub(joined), a.Trusted, want)
			}
			if wantSlow := btoi(now.Sub(joined) < time.Minute); a.SlowStarting != wantSlow {
				t.Errorf("t+%v: SlowStarting = %d, want %d", now.Sub(joined), a.SlowStarting, wantSlow)
			}
		}
		t.Logf("zone a trust every 10 s after the join: %.3f", got)
	})

	t.Run("requests-with-reports", func(t *testing.T) {
		calc := mustNew(t, Config{})
		var st State
		var out Result
		// Zone a's endpoints succeed 20 requests per second in total.
		const succ = 20.0
		input := func(now time.Time, eps []Endpoint) *Input {
			in := lrsInput(now, eps, map[string]float64{"a": 60, "b": 60, "c": 60}, map[string]float64{"a": 60, "b": 60, "c": 60})
			in.Loads[0].SucceededRPS = succ
			in.Loads[0].ErroredRPS = 0
			return in
		}
		calc.Compute(&st, input(t0, base), &out)
		joined := t0.Add(interval)
		eps := append(base[:1:1], Endpoint{ID: "a-new", Zone: "a", Healthy: true, Registered: joined})
		eps = append(eps, base[1:]...)
		// Independently of the package: the new endpoint is credited the
		// zone's successes in proportion to its trust, but earns at least
		// interval/(2·ramp) per cycle.
		progress, served := 0.0, 0.0
		var got []float64
		for i := range 40 {
			now := joined.Add(time.Duration(i) * interval)
			if i > 0 && progress < 1 {
				trust := 0.05 + 0.95*progress
				s := succ * interval.Seconds() * trust / (1 + trust)
				served += s
				progress = min(1, progress+max(s/1000, interval.Seconds()/(2*DefaultSlowStartRamp.Seconds())))
			}
			calc.Compute(&st, input(now, eps), &out)
			a := zoneInfo(&out, "a")
			got = append(got, a.Trusted)
			if want := 1 + 0.05 + 0.95*progress; math.Abs(a.Trusted-want) > 1e-9 {
				t.Fatalf("t+%v (%.0f requests served): zone a trust %.4f, want %.4f", now.Sub(joined), served, a.Trusted, want)
			}
			if i > 0 && a.Trusted-got[i-1] > 0.3 {
				t.Errorf("t+%v: trust jumped %.3f -> %.3f", now.Sub(joined), got[i-1], a.Trusted)
			}
			if (a.SlowStarting == 0) != (progress >= 1) {
				t.Errorf("t+%v: progress %.3f, SlowStarting = %d", now.Sub(joined), progress, a.SlowStarting)
			}
		}
		if got[len(got)-1] != 2 {
			t.Errorf("zone a trust after 400 s = %.4f, want 2", got[len(got)-1])
		}
		t.Logf("zone a trust every 10 s after the join: %.3f", got)
	})

	t.Run("no-successes-time-floor", func(t *testing.T) {
		// With load reports but no successful request, an endpoint earns
		// trust only at the floor rate: full after twice the ramp.
		calc := mustNew(t, Config{})
		var st State
		var out Result
		eps := append(fleet(map[string]int{"b": 1, "c": 1}), Endpoint{ID: "a-new", Zone: "a", Healthy: true, Registered: t0})
		for i := range 13 {
			now := t0.Add(time.Duration(i) * interval)
			in := lrsInput(now, eps, map[string]float64{"b": 60, "c": 60}, map[string]float64{"a": 0, "b": 60, "c": 60})
			calc.Compute(&st, in, &out)
			want := 0.05 + 0.95*min(1, float64(i)*interval.Seconds()/(2*DefaultSlowStartRamp.Seconds()))
			if a := zoneInfo(&out, "a"); math.Abs(a.Trusted-want) > 1e-9 {
				t.Fatalf("after %v without successes: trust %v, want %v", now.Sub(t0), a.Trusted, want)
			}
		}
	})

	t.Run("back-from-unhealthy-starts-over", func(t *testing.T) {
		calc := mustNew(t, Config{})
		var st State
		var out Result
		eps := fleet(map[string]int{"a": 2, "b": 1})
		var got []float64
		for i, healthy := range []bool{true, false, false, true, true} {
			eps[0].Healthy = healthy
			calc.Compute(&st, &Input{Now: t0.Add(time.Duration(i) * interval), Endpoints: eps, Clients: clients}, &out)
			got = append(got, zoneInfo(&out, "a").Trusted)
		}
		want := []float64{2, 1, 1, 1.05, 1.05 + 0.95/6}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				t.Errorf("zone a trust = %v, want %v", got, want)
				break
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSlowStartRelief: slow start discounts a cold cohort against the
// warm endpoints only while the cohort is a minority of the service:
// in full up to 40% of it (by coldness), not at all from half, linear
// between; and the relief is fixed when the endpoints join, so their
// trust only grows as they warm.
func TestSlowStartRelief(t *testing.T) {
	const interval = 10 * time.Second
	for _, tc := range []struct {
		name       string
		warm, cold int     // endpoints; the cold ones join at t0
		want       float64 // trust of a cold endpoint at the join
	}{
		{"all-new", 0, 8, 1},
		{"most-new", 3, 5, 1},
		{"half-new", 4, 4, 1},
		{"cold-pod-among-warm", 9, 1, DefaultSlowStartFraction},
		{"a-third-new", 8, 4, DefaultSlowStartFraction},
		{"forty-percent-new", 6, 4, DefaultSlowStartFraction},
		{"between", 11, 9, DefaultSlowStartFraction + (1-DefaultSlowStartFraction)*0.5}, // coldness 0.45
	} {
		t.Run(tc.name, func(t *testing.T) {
			calc := mustNew(t, Config{})
			var st State
			var out Result
			var eps []Endpoint
			for i := range tc.warm {
				eps = append(eps, Endpoint{ID: fmt.Sprintf("warm-%d", i), Zone: "a", Healthy: true, Registered: t0.Add(-time.Hour)})
			}
			for i := range tc.cold {
				eps = append(eps, Endpoint{ID: fmt.Sprintf("cold-%d", i), Zone: "b", Healthy: true, Registered: t0})
			}
			clients := []ClientCount{{"a", 1}, {"b", 1}}
			prev := 0.0
			for i := range 8 {
				calc.Compute(&st, &Input{Now: t0.Add(time.Duration(i) * interval), Endpoints: eps, Clients: clients}, &out)
				b := zoneInfo(&out, "b")
				per := b.Trusted / float64(tc.cold)
				if i == 0 && math.Abs(per-tc.want) > 1e-9 {
					t.Errorf("trust of a cold endpoint at the join = %.4f, want %.4f", per, tc.want)
				}
				if per < prev-1e-12 {
					t.Errorf("cycle %d: trust of a cold endpoint fell %.4f -> %.4f", i, prev, per)
				}
				if (b.SlowStarting == 0) != (per >= 1) {
					t.Errorf("cycle %d: trust %.4f, SlowStarting = %d", i, per, b.SlowStarting)
				}
				prev = per
			}
		})
	}
}

// TestSlowStartCreditNormalised: endpoints earn at most the fleet's
// successful requests per unit of trust, so an endpoint whose zone is sent
// far more than its trust (its clients send the most) earns no faster
// than one the traffic followed by trust would.
func TestSlowStartCreditNormalised(t *testing.T) {
	const interval = 10 * time.Second
	calc := mustNew(t, Config{})
	var st State
	var out Result
	// 3 warm endpoints in c, one cold endpoint in a sent 60 rps.
	eps := fleet(map[string]int{"c": 3})
	eps = append(eps, Endpoint{ID: "a-new", Zone: "a", Healthy: true, Registered: t0})
	const sentA, sentC = 60.0, 240.0
	progress := 0.0
	for i := range 12 {
		now := t0.Add(time.Duration(i) * interval)
		if i > 0 && progress < 1 {
			trust := 0.05 + 0.95*progress
			fleetRate := (sentA + sentC) / (3 + trust) // successes per unit of trust
			rate := min(sentA/trust, fleetRate)
			progress = min(1, progress+max(rate*interval.Seconds()*trust/1000, interval.Seconds()/(2*DefaultSlowStartRamp.Seconds())))
		}
		in := lrsInput(now, eps, map[string]float64{"a": 100, "c": 200}, map[string]float64{"a": sentA, "c": sentC})
		calc.Compute(&st, in, &out)
		want := 0.05 + 0.95*progress
		a := zoneInfo(&out, "a")
		if math.Abs(a.Trusted-want) > 1e-9 {
			t.Fatalf("cycle %d: trust %.4f, want %.4f (credited at the fleet's rate, not its zone's %.0f rps)", i, a.Trusted, want, sentA)
		}
		// Credited with its zone's 600 requests a cycle, it would be
		// fully trusted after two cycles.
		if i == 2 && a.Trusted > 0.5 {
			t.Errorf("after two cycles: trust %.4f, want well below 1", a.Trusted)
		}
	}
}

// TestDegradedZoneHeadroom: zone a loses 90% of its capacity (it serves at
// most 36 of the 300 rps it was sending, fails the rest, and is 4× slower).
// Its traffic moves away at once; then, rather than settle where errors
// hold it (over its capacity, failing requests for as long as it stays
// degraded), it settles at DegradedTarget of its measured capacity with no
// error and no oscillation; when it recovers its share comes back over
// the recovery ramp without overshoot.
func TestDegradedZoneHeadroom(t *testing.T) {
	const interval = 10 * time.Second
	p := &plant{
		zones:     []string{"a", "b", "c"},
		clientRPS: map[string]float64{"a": 300, "b": 300, "c": 300},
		capRPS:    map[string]float64{"a": 400, "b": 400, "c": 400},
		errRate:   map[string]float64{},
		slow:      map[string]float64{},
		hardCap:   map[string]float64{},
	}
	eps := fleet(map[string]int{"a": 3, "b": 3, "c": 3})
	calc := mustNew(t, Config{})
	var st State
	var out Result
	now := t0
	calc.Compute(&st, &Input{Now: now, Endpoints: eps, Clients: []ClientCount{{"a", 1}, {"b", 1}, {"c", 1}}}, &out)
	var log strings.Builder
	defer func() { t.Log(log.String()) }()
	step := func(phase string) (loadA, errs float64) {
		loads, demand := p.serve(&out, now.Add(interval))
		now = now.Add(interval)
		calc.Compute(&st, &Input{Now: now, Endpoints: eps, Loads: loads, Demand: demand}, &out)
		var total float64
		for _, l := range loads {
			errs += l.ErroredRPS
			total += l.IssuedRPS
			if l.Zone == "a" {
				loadA = l.IssuedRPS
			}
		}
		a := zoneInfo(&out, "a")
		fmt.Fprintf(&log, "\n%-10s a sent %5.1f rps (reported)  health %.3f  limit %5.1f  errors %5.2f%%", phase, loadA, a.Health, a.Limit, 100*errs/total)
		return loadA, errs / total
	}
	for range 4 {
		step("healthy")
	}
	const capA = 36.0
	p.hardCap["a"], p.slow["a"] = capA, 4
	step("degrading")
	var sent []float64
	for i := range 16 {
		load, errs := step("degraded")
		if i >= 5 {
			sent = append(sent, load)
			if load > capA {
				t.Errorf("degraded cycle %d: zone a sent %.1f rps, over its capacity %.0f", i, load, capA)
			}
			if errs > 0.001 {
				t.Errorf("degraded cycle %d: %.2f%% of requests fail, want under 0.1%%", i, 100*errs)
			}
		}
	}
	settled := sent[len(sent)-1]
	if settled < 0.8*capA {
		t.Errorf("zone a settled at %.1f rps, want near %.0f%% of its capacity %.0f (not written off)", settled, 100*DefaultDegradedTarget, capA)
	}
	for i := 1; i < len(sent); i++ {
		if math.Abs(sent[i]-sent[i-1]) > 0.02*capA {
			t.Errorf("settled cycles: zone a sent %.1f then %.1f rps: oscillation", sent[i-1], sent[i])
		}
	}
	delete(p.hardCap, "a")
	p.slow["a"] = 1
	step("recovering")
	prev := 0.0
	for i := range 14 {
		load, errs := step("recovered")
		if load > 300*1.03 {
			t.Errorf("recovered cycle %d: zone a sent %.1f rps, over its healthy 300: overshoot", i, load)
		}
		if load < prev-1 {
			t.Errorf("recovered cycle %d: zone a's load fell %.1f -> %.1f", i, prev, load)
		}
		if errs > 0 {
			t.Errorf("recovered cycle %d: errors %.2f%%", i, 100*errs)
		}
		prev = load
	}
	if prev < 290 {
		t.Errorf("after recovery zone a is sent %.1f rps, want back near 300", prev)
	}
}

// poisson draws a Poisson count of mean m (Knuth; m is small here).
func poisson(rng *rand.Rand, m float64) float64 {
	l, k, p := math.Exp(-m), 0.0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// TestCapacityNoise: healthy zones at a moderate load must not lose health
// to sampling noise. grpc-go's in-progress count is a point sample taken
// when the report is made, and small pools reject a few requests at any
// load; here three clients per zone report Poisson samples of their
// requests in flight (mean rate × 5 ms: a third of a request per endpoint
// at ~50% utilisation) and every zone fails ~0.3% of its requests, as a
// 4-slot backend does (Erlang loss). Over 300 cycles every zone keeps a
// health factor of 1. Before the queue signal was pooled and
// noise-discounted, one sample of 2 in flight in the 1-endpoint zone cost
// it a quarter of its capacity, recovered only over the recovery ramp.
func TestCapacityNoise(t *testing.T) {
	for _, tc := range []struct {
		name    string
		counts  map[string]int
		demand  map[string]float64
		latency float64 // seconds
	}{
		{"1-2-3/zone-a-sends-50pct", map[string]int{"a": 1, "b": 2, "c": 3}, map[string]float64{"a": 200, "b": 100, "c": 100}, 0.005},
		{"3-3-2/zone-c-sends-60pct", map[string]int{"a": 3, "b": 3, "c": 2}, map[string]float64{"a": 80, "b": 80, "c": 240}, 0.005},
		{"3-3-2/slower", map[string]int{"a": 3, "b": 3, "c": 2}, map[string]float64{"a": 80, "b": 80, "c": 240}, 0.02},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const interval = time.Second
			rng := rand.New(rand.NewPCG(1, 2))
			zones := []string{"a", "b", "c"}
			calc := mustNew(t, Config{ReportInterval: interval})
			var st State
			var out Result
			now := t0
			eps := fleet(tc.counts)
			calc.Compute(&st, &Input{Now: now, Endpoints: eps, Clients: []ClientCount{{"a", 1}, {"b", 1}, {"c", 1}}}, &out)
			minHealth, at := 1.0, -1
			for cycle := range 300 {
				now = now.Add(interval)
				issued := map[string]float64{}
				inflight := map[string]float64{}
				var demand []Demand
				for _, cz := range zones {
					for _, w := range out.Route(cz).Weights {
						r := tc.demand[cz] * w.Share
						issued[w.Zone] += r
						inflight[w.Zone] += poisson(rng, r*tc.latency) // this client's point sample
					}
					demand = append(demand, Demand{ClientZone: cz, RPS: tc.demand[cz], Updated: now})
				}
				var loads []ZoneLoad
				for _, y := range zones {
					r := issued[y]
					e := 0.003 * r * (0.5 + rng.Float64())
					loads = append(loads, ZoneLoad{Zone: y, IssuedRPS: r, SucceededRPS: r - e, ErroredRPS: e, InProgress: inflight[y], Updated: now})
				}
				calc.Compute(&st, &Input{Now: now, Endpoints: eps, Loads: loads, Demand: demand}, &out)
				for _, z := range out.Zones {
					if z.Health < minHealth {
						minHealth, at = z.Health, cycle
						t.Logf("cycle %d: zone %s health %.3f (queue ×%.3f, errors ×%.3f, %.0f in flight on %.0f rps)",
							cycle, z.Zone, z.Health, z.QueueFactor, z.ErrorFactor, inflight[z.Zone], issued[z.Zone])
					}
				}
			}
			if minHealth < 1 {
				t.Errorf("lowest health of a healthy zone = %.3f (cycle %d), want 1 throughout", minHealth, at)
			}
		})
	}
}

package pid

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// stuckFleet is the death spiral's model: n endpoints of equal speed
// share total load; endpoint stuck has degraded I/O that completes cap
// (a share of the mean endpoint's load) and fails the rest fast, so its
// CPU is a fifth of a healthy endpoint's for the same load, and its error
// rate grows with the traffic it is given.
type stuckFleet struct {
	n, stuck int
	total    float64 // mean utilization at equal weights
	cap      float64
	rps      float64 // requests per second at equal weights
}

// reports turns r's weights into the next round's reports.
func (f stuckFleet) reports(now time.Time, r *Result) *Input {
	var sum float64
	for _, e := range r.Endpoints {
		sum += float64(e.Weight)
	}
	in := &Input{Now: now}
	for i := range f.n {
		share := 1.0
		if sum > 0 {
			share = float64(r.Endpoints[i].Weight) / sum * float64(f.n)
		}
		e := Endpoint{ID: fmt.Sprintf("ep%d", i), Reported: now, RPS: f.rps * share, Utilization: f.total * share, LatencyMs: 10}
		e.EPS = 0.005 * e.RPS
		if i == f.stuck {
			rate := max(0.02, 1-f.cap/share)
			e.Utilization *= 0.2
			e.EPS = rate * e.RPS
			e.LatencyMs = 12
		}
		in.Endpoints = append(in.Endpoints, e)
	}
	return in
}

func lowerMedian(ws []uint32) uint32 {
	s := slices.Clone(ws)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func weightsOf(r *Result) []uint32 {
	w := make([]uint32, len(r.Endpoints))
	for i, e := range r.Endpoints {
		w[i] = e.Weight
	}
	return w
}

// TestGuardStuckEndpoint: an endpoint with low CPU and an error rate that
// grows with its traffic. With the guard and the penalty off (the
// controller before the guard) its weight climbs to the cap: the death
// spiral. The penalty alone settles where its effective utilization meets
// the others', still failing a third of its requests. With the guard it is
// never raised while guarded, never sits above the median weight, and
// ends near what its I/O can serve, failing few.
func TestGuardStuckEndpoint(t *testing.T) {
	off, on := false, true
	tests := []struct {
		name string
		cfg  Config
		// the stuck endpoint's final weight over the others' is in
		// [lo, hi], and its mean error rate over the last 20 rounds at
		// most maxRate
		lo, hi, maxRate float64
		guarded         bool
	}{
		{"off", Config{ErrorGuard: &off, ErrorPenalty: new(0.0)}, 4, 100, 1, false},
		{"penalty_only", Config{ErrorGuard: &off}, 1, 1.5, 1, false},
		{"guard_on", Config{}, 0.5, 1, 0.1, true},
		{"guard_on_no_penalty", Config{ErrorPenalty: new(0.0), ErrorGuard: &on}, 0.5, 1, 0.1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, tt.cfg)
			f := stuckFleet{n: 5, stuck: 4, total: 0.5, cap: 0.7, rps: 100}
			var st State
			var r Result
			c.Compute(&st, f.reports(t0, &Result{Endpoints: make([]EndpointResult, 5)}), &r)
			prev := r.Endpoints[f.stuck].Relative
			guardedRounds, rate := 0, 0.0
			for k := 1; k <= 60; k++ {
				c.Compute(&st, f.reports(t0.Add(time.Duration(k)*10*time.Second), &r), &r)
				if r.Outcome != OutcomeComputed {
					t.Fatalf("round %d: outcome %v, want computed", k, r.Outcome)
				}
				e := r.Endpoints[f.stuck]
				if e.Guard != GuardNone {
					guardedRounds++
					if e.Relative > prev+1e-12 {
						t.Errorf("round %d: guarded stuck endpoint raised from %.4f to %.4f of the mean", k, prev, e.Relative)
					}
				}
				if m := lowerMedian(weightsOf(&r)); tt.guarded && e.Weight > m {
					t.Errorf("round %d: stuck endpoint weight %d above the median %d", k, e.Weight, m)
				}
				prev = e.Relative
				if k > 40 {
					rate += e.ErrorRate / 20
				}
			}
			if got := guardedRounds > 0; got != tt.guarded {
				t.Errorf("stuck endpoint guarded in %d rounds, want guarded %v", guardedRounds, tt.guarded)
			}
			w := weightsOf(&r)
			ratio := float64(w[f.stuck]) / float64(w[0])
			t.Logf("final weights %v: stuck/healthy %.2f, its mean error rate over the last 20 rounds %.3f, guarded in %d of 60 rounds", w, ratio, rate, guardedRounds)
			if ratio < tt.lo || ratio > tt.hi {
				t.Errorf("stuck endpoint weight / a healthy one's = %.2f, want %.2f..%.2f", ratio, tt.lo, tt.hi)
			}
			if rate > tt.maxRate {
				t.Errorf("stuck endpoint error rate %.3f, want at most %.2f", rate, tt.maxRate)
			}
		})
	}
}

// TestGuardRule: the rule's thresholds, one round from equal weights.
func TestGuardRule(t *testing.T) {
	tests := []struct {
		name string
		// per endpoint: rps, error rate, latency ms
		rps, rate, lat []float64
		want           []Guard
	}{
		{"healthy", []float64{100, 100, 100, 100}, []float64{0.01, 0.01, 0.02, 0.01}, []float64{10, 12, 11, 10},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardNone}},
		// Median 1%: the limit is max(2%, 6%) = 6%.
		{"points_below", []float64{100, 100, 100, 100}, []float64{0.01, 0.01, 0.01, 0.0599}, []float64{10, 10, 10, 10},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardNone}},
		{"points_above", []float64{100, 100, 100, 100}, []float64{0.01, 0.01, 0.01, 0.0601}, []float64{10, 10, 10, 10},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardErrors}},
		// Median 10%: the limit is max(20%, 15%) = 20%.
		{"ratio_below", []float64{100, 100, 100, 100}, []float64{0.1, 0.1, 0.1, 0.199}, []float64{10, 10, 10, 10},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardNone}},
		{"ratio_above", []float64{100, 100, 100, 100}, []float64{0.1, 0.1, 0.1, 0.201}, []float64{10, 10, 10, 10},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardErrors}},
		// The lower median of two is the smaller: one failing endpoint of
		// two is guarded.
		{"two", []float64{100, 100}, []float64{0, 0.5}, []float64{10, 10}, []Guard{GuardNone, GuardErrors}},
		// Half failing: the lower median is a healthy one's.
		{"half", []float64{100, 100, 100, 100}, []float64{0, 0, 0.5, 0.5}, []float64{10, 10, 10, 10},
			[]Guard{GuardNone, GuardNone, GuardErrors, GuardErrors}},
		// Most failing: a service-wide problem, not an endpoint's.
		{"most", []float64{100, 100, 100, 100}, []float64{0, 0.5, 0.5, 0.5}, []float64{10, 10, 10, 10},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardNone}},
		// Too few requests: the error rate does not count.
		{"few_requests", []float64{100, 100, 100, 0.9}, []float64{0, 0, 0, 1}, []float64{10, 10, 10, 10},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardNone}},
		// Latency: median 10 ms, limit max(30, 60) = 60 ms.
		{"latency_below", []float64{100, 100, 100, 100}, []float64{0, 0, 0, 0}, []float64{10, 10, 10, 59},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardNone}},
		{"latency_above", []float64{100, 100, 100, 100}, []float64{0, 0, 0, 0}, []float64{10, 10, 10, 61},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardLatency}},
		// Median 200 ms: limit max(600, 250) = 600 ms.
		{"latency_ratio", []float64{100, 100, 100, 100}, []float64{0, 0, 0, 0}, []float64{200, 200, 200, 590},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardNone}},
		// No latency reported: only errors count.
		{"no_latency", []float64{100, 100, 100, 100}, []float64{0, 0, 0, 0.3}, []float64{0, 0, 0, 0},
			[]Guard{GuardNone, GuardNone, GuardNone, GuardErrors}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, Config{})
			var st State
			var r Result
			in := &Input{Now: t0}
			for i := range tt.rps {
				in.Endpoints = append(in.Endpoints, Endpoint{ID: fmt.Sprint(i), Reported: t0, Utilization: 0.5,
					RPS: tt.rps[i], EPS: tt.rate[i] * tt.rps[i], LatencyMs: tt.lat[i]})
			}
			c.Compute(&st, in, &r)
			var got []Guard
			for _, e := range r.Endpoints {
				got = append(got, e.Guard)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("guards = %v, want %v (median error rate %v, latency %v)", got, tt.want, r.MedianErrorRate, r.MedianLatencyMs)
			}
			for i, e := range r.Endpoints {
				if e.Guard != GuardNone && e.Weight >= r.Endpoints[0].Weight {
					t.Errorf("endpoint %d guarded but weight %d, not below a healthy endpoint's %d", i, e.Weight, r.Endpoints[0].Weight)
				}
			}
		})
	}
}

// TestErrorPenalty: the effective utilization is u + (eps/rps) × penalty
// (gRFC A58), with the error rate at most 1 and none below MinRPS.
func TestErrorPenalty(t *testing.T) {
	tests := []struct {
		name           string
		penalty        *float64
		minRPS         float64
		u, rps, eps    float64
		rate, penaltyU float64
	}{
		{"default", nil, 0, 0.3, 100, 20, 0.2, 0.5},
		{"half", new(0.5), 0, 0.3, 100, 20, 0.2, 0.4},
		{"ten", new(10.0), 0, 0.3, 100, 2, 0.02, 0.5},
		{"off", new(0.0), 0, 0.3, 100, 20, 0.2, 0.3},
		{"eps_above_rps", nil, 0, 0.3, 10, 20, 1, 1.3},
		{"below_min_rps", nil, 0, 0.3, 0.5, 0.5, 0, 0.3},
		{"min_rps_set", nil, 50, 0.3, 40, 20, 0, 0.3},
		{"no_fields", nil, 0, 0.3, 0, 0, 0, 0.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off := false
			c := mustNew(t, Config{ErrorPenalty: tt.penalty, ErrorGuard: &off, MinRPS: tt.minRPS})
			var st State
			var r Result
			in := &Input{Now: t0, Endpoints: []Endpoint{
				{ID: "a", Reported: t0, Utilization: tt.u, RPS: tt.rps, EPS: tt.eps},
				{ID: "b", Reported: t0, Utilization: 0.5},
			}}
			c.Compute(&st, in, &r)
			e := r.Endpoints[0]
			if math.Abs(e.ErrorRate-tt.rate) > 1e-12 || math.Abs(e.Effective-tt.penaltyU) > 1e-12 {
				t.Errorf("error rate %v, effective utilization %v; want %v, %v", e.ErrorRate, e.Effective, tt.rate, tt.penaltyU)
			}
			if want := (tt.penaltyU + 0.5) / 2; math.Abs(r.Setpoint-want) > 1e-12 {
				t.Errorf("setpoint %v, want the mean effective utilization %v", r.Setpoint, want)
			}
		})
	}
}

// TestGuardHealthyService: every endpoint with the same small error rate
// and latency: nothing is guarded and the weights stay within 2% of those
// on utilization alone (the penalty shifts every endpoint alike).
func TestGuardHealthyService(t *testing.T) {
	plain := compatRun(t, Config{}, func(*Endpoint) {})
	got := compatRun(t, Config{}, func(e *Endpoint) { e.RPS, e.EPS, e.LatencyMs = 200, 1, 15 })
	for k := range plain {
		for i := range plain[k] {
			if d := float64(got[k][i])/float64(plain[k][i]) - 1; math.Abs(d) > 0.02 {
				t.Fatalf("round %d endpoint %d: weight %d with 0.5%% errors everywhere, %d without: %+.1f%%", k, i, got[k][i], plain[k][i], 100*d)
			}
		}
	}
}

// TestGuardInvariants: over random fleets and rounds, a guarded endpoint
// never sits above the lower median weight and never gains share (but at
// the bounds: near MinWeight itself, or with another endpoint at
// MaxWeight, where the total is not kept).
func TestGuardInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := mustNew(t, Config{})
	for trial := range 300 {
		n := 2 + rng.IntN(9)
		var st State
		var r Result
		var prevShare []float64
		for k := range 15 {
			now := t0.Add(time.Duration(k) * 10 * time.Second)
			in := &Input{Now: now}
			for i := range n {
				e := Endpoint{ID: fmt.Sprint(i), Reported: now, Utilization: rng.Float64()}
				if rng.IntN(5) > 0 {
					e.RPS = 1 + 100*rng.Float64()
					e.EPS = e.RPS * math.Pow(rng.Float64(), 3)
					e.LatencyMs = 5 + 200*math.Pow(rng.Float64(), 4)
				}
				if rng.IntN(10) == 0 {
					e.Reported = time.Time{}
				}
				in.Endpoints = append(in.Endpoints, e)
			}
			c.Compute(&st, in, &r)
			var sum float64
			for _, e := range r.Endpoints {
				sum += e.Relative
			}
			m := lowerMedian(weightsOf(&r))
			atMax := false // another endpoint at the MaxWeight bound
			for _, e := range r.Endpoints {
				atMax = atMax || e.Relative >= 0.99*DefaultMaxWeight
			}
			for i, e := range r.Endpoints {
				if e.Guard == GuardNone {
					continue
				}
				if e.Weight > m {
					t.Fatalf("trial %d round %d: guarded endpoint %d weight %d above the median %d", trial, k, i, e.Weight, m)
				}
				// At the bounds (this one near MinWeight, another at
				// MaxWeight) the total is not kept and every share moves.
				if share := e.Relative / sum; prevShare != nil && share > prevShare[i]+1e-9 && e.Relative > 2*DefaultMinWeight && !atMax {
					t.Fatalf("trial %d round %d: guarded endpoint %d share %.4f, up from %.4f; relative %.4f; %+v", trial, k, i, share, prevShare[i], e.Relative, r)
				}
			}
			prevShare = make([]float64, n)
			for i, e := range r.Endpoints {
				prevShare[i] = e.Relative / sum
			}
		}
	}
}

// TestGuardAllocs: the guard's medians and caps reuse the State's
// buffers: Compute still allocates nothing in steady state.
func TestGuardAllocs(t *testing.T) {
	c := mustNew(t, Config{})
	var st State
	var r Result
	f := stuckFleet{n: 100, stuck: 7, total: 0.5, cap: 0.7, rps: 100}
	in := f.reports(t0, &Result{Endpoints: make([]EndpointResult, 100)})
	c.Compute(&st, in, &r)
	c.Compute(&st, in, &r)
	if r.Guarded == 0 {
		t.Fatal("the stuck endpoint is not guarded: the test shows nothing")
	}
	if n := testing.AllocsPerRun(10, func() { c.Compute(&st, in, &r) }); n != 0 {
		t.Errorf("Compute with the guard acting allocs = %v, want 0", n)
	}
}

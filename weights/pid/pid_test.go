package pid

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fleet is the test model: an endpoint's utilization is its share of the
// weights × total / its speed.
type fleet struct {
	speeds []float64
	total  float64
}

func (f fleet) utils(r *Result) []float64 {
	var sum float64
	for _, e := range r.Endpoints {
		sum += float64(e.Weight)
	}
	u := make([]float64, len(f.speeds))
	for i, e := range r.Endpoints {
		u[i] = float64(e.Weight) / sum * f.total / f.speeds[i]
	}
	return u
}

func maxAvg(u []float64) float64 {
	var m, s float64
	for _, v := range u {
		m, s = max(m, v), s+v
	}
	return m / (s / float64(len(u)))
}

func input(now time.Time, u []float64) *Input {
	in := &Input{Now: now}
	for i, v := range u {
		in.Endpoints = append(in.Endpoints, Endpoint{ID: fmt.Sprintf("ep%d", i), Zone: "a", Utilization: v, Reported: now})
	}
	return in
}

func mustNew(t testing.TB, cfg Config) *Controller {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConverges(t *testing.T) {
	c := mustNew(t, Config{})
	f := fleet{speeds: []float64{1, 1.3, 0.7}, total: 2.1}
	var st State
	var r Result
	// Equal weights (round robin): utilization 1/speed × 0.7.
	u := []float64{0.7, 0.7 / 1.3, 1}
	start := maxAvg(u)
	var got float64
	for k := 1; k <= 20; k++ {
		c.Compute(&st, input(t0.Add(time.Duration(k)*10*time.Second), u), &r)
		if r.Outcome != OutcomeComputed {
			t.Fatalf("round %d: outcome %v, want computed", k, r.Outcome)
		}
		u = f.utils(&r)
		got = maxAvg(u)
	}
	t.Logf("max/avg %.3f at start (round robin), %.3f after 20 rounds", start, got)
	if got > 1.05 {
		t.Errorf("max/avg after 20 rounds = %.3f, want <= 1.05 (start %.3f)", got, start)
	}
}

func TestColdStart(t *testing.T) {
	c := mustNew(t, Config{})
	var st State
	var r Result
	u := []float64{0.5, 0.5, 0.5}
	c.Compute(&st, input(t0, u), &r)
	in := input(t0, []float64{0.5, 0.5, 0.5, 0})
	in.Endpoints[3].Reported = time.Time{}
	c.Compute(&st, in, &r)
	if got, want := r.Endpoints[3].Status, StatusNew; got != want {
		t.Fatalf("new endpoint status = %v, want %v", got, want)
	}
	if got := r.Endpoints[3].Relative / r.Endpoints[0].Relative; math.Abs(got-DefaultInitialWeight) > 1e-9 {
		t.Errorf("new endpoint weight / others = %v, want %v", got, DefaultInitialWeight)
	}
	f := fleet{speeds: []float64{1, 1, 1, 1}, total: 2}
	var peak float64
	for k := 1; k <= 30; k++ {
		u := f.utils(&r)
		mean := (u[0] + u[1] + u[2] + u[3]) / 4
		peak = max(peak, u[3]/mean)
		c.Compute(&st, input(t0.Add(time.Duration(k)*10*time.Second), u), &r)
	}
	u = f.utils(&r)
	final := u[3] / ((u[0] + u[1] + u[2] + u[3]) / 4)
	t.Logf("cold endpoint: peak %.3f of the mean, final %.3f", peak, final)
	if peak > 1.10 || final < 0.95 {
		t.Errorf("cold endpoint peak %.3f, final %.3f of the mean, want peak <= 1.10 and final >= 0.95", peak, final)
	}
}

func TestMissingKeepsWeight(t *testing.T) {
	c := mustNew(t, Config{})
	var st State
	var r Result
	c.Compute(&st, input(t0, []float64{0.2, 0.5, 0.8, 0.5}), &r)
	before := r.Endpoints[2].Weight
	now := t0.Add(10 * time.Second)
	in := input(now, []float64{0.2, 0.5, 0.8, 0.5})
	in.Endpoints[2].Reported = now.Add(-DefaultMaxAge - time.Second) // too old
	c.Compute(&st, in, &r)
	if r.Outcome != OutcomeComputed || r.Missing != 1 {
		t.Fatalf("outcome %v missing %d, want computed with 1 missing", r.Outcome, r.Missing)
	}
	if got := r.Endpoints[2]; got.Status != StatusMissing || got.Weight != before {
		t.Errorf("missing endpoint: status %v weight %d, want missing, %d (held)", got.Status, got.Weight, before)
	}
	if r.Endpoints[0].Weight == r.Endpoints[1].Weight {
		t.Errorf("fresh endpoints did not move: %d and %d", r.Endpoints[0].Weight, r.Endpoints[1].Weight)
	}
}

func TestSkipRound(t *testing.T) {
	tests := []struct {
		name    string
		missing int // of 10
		want    Outcome
	}{
		{"none", 0, OutcomeComputed},
		{"30pct", 3, OutcomeComputed},
		{"40pct", 4, OutcomeSkippedMissing},
		{"all", 10, OutcomeSkippedMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, Config{})
			var st State
			var r Result
			u := []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}
			c.Compute(&st, input(t0, u), &r)
			c.Compute(&st, input(t0.Add(10*time.Second), u), &r)
			before := make([]uint32, len(u))
			for i, e := range r.Endpoints {
				before[i] = e.Weight
			}
			in := input(t0.Add(20*time.Second), u)
			for i := range tt.missing {
				in.Endpoints[i].Reported = time.Time{}
			}
			c.Compute(&st, in, &r)
			if r.Outcome != tt.want {
				t.Fatalf("outcome = %v (missing share %.2f), want %v", r.Outcome, r.MissingShare, tt.want)
			}
			if got, want := r.MissingShare, float64(tt.missing)/10; got != want {
				t.Errorf("missing share = %v, want %v", got, want)
			}
			held := true
			for i, e := range r.Endpoints {
				held = held && e.Weight == before[i]
			}
			if held != (tt.want != OutcomeComputed) {
				t.Errorf("weights held = %v, want %v", held, tt.want != OutcomeComputed)
			}
		})
	}
}

func TestRestoreWaitsForFreshReports(t *testing.T) {
	c := mustNew(t, Config{})
	var old State
	var r Result
	u := []float64{0.3, 0.6, 0.9}
	for k := range 5 {
		c.Compute(&old, input(t0.Add(time.Duration(k)*10*time.Second), u), &r)
	}
	want := make([]uint32, len(u))
	for i, e := range r.Endpoints {
		want[i] = e.Weight
	}
	var st State
	restoreAt := t0.Add(45 * time.Second)
	if err := st.Restore(old.Snapshot(), restoreAt); err != nil {
		t.Fatal(err)
	}
	// Reports from before the restore: waiting, weights as restored.
	in := input(t0.Add(40*time.Second), u)
	in.Now = t0.Add(50 * time.Second)
	c.Compute(&st, in, &r)
	got := make([]uint32, len(u))
	for i, e := range r.Endpoints {
		got[i] = e.Weight
	}
	if r.Outcome != OutcomeWaiting || !cmp.Equal(got, want) {
		t.Fatalf("after restore, old reports: outcome %v weights %v, want waiting %v", r.Outcome, got, want)
	}
	c.Compute(&st, input(t0.Add(50*time.Second), u), &r)
	if r.Outcome != OutcomeComputed {
		t.Errorf("after a fresh report: outcome %v, want computed", r.Outcome)
	}
	// The restored controller continues as the old one would have.
	c.Compute(&old, input(t0.Add(50*time.Second), u), &r2)
	for i := range r.Endpoints {
		if r.Endpoints[i].Weight != r2.Endpoints[i].Weight {
			t.Errorf("endpoint %d weight = %d after restore, want %d as without", i, r.Endpoints[i].Weight, r2.Endpoints[i].Weight)
		}
	}
}

var r2 Result

func TestStuckIO(t *testing.T) {
	// ep2 has low CPU but a full in-flight limit.
	for _, tt := range []struct {
		m    Metric
		less bool
	}{{MetricMax, true}, {MetricCPU, false}} {
		t.Run(tt.m.String(), func(t *testing.T) {
			c := mustNew(t, Config{Metric: tt.m})
			var st State
			var r Result
			in := &Input{Now: t0}
			for i, cpu := range []float64{0.5, 0.5, 0.1} {
				in.Endpoints = append(in.Endpoints, Endpoint{ID: fmt.Sprint(i), Reported: t0, Utilization: Utilization(cpu, []float64{10, 10, 100}[i], 100, c.Metric())})
			}
			c.Compute(&st, in, &r)
			c.Compute(&st, in, &r)
			if got := r.Endpoints[2].Weight < Scale; got != tt.less {
				t.Errorf("stuck endpoint weight %d, want below %d: %v", r.Endpoints[2].Weight, Scale, tt.less)
			}
		})
	}
}

func TestUtilization(t *testing.T) {
	tests := []struct {
		cpu, inflight, limit float64
		m                    Metric
		want                 float64
	}{
		{0.2, 90, 100, MetricMax, 0.9},
		{0.7, 10, 100, MetricMax, 0.7},
		{0.2, 90, 100, MetricCPU, 0.2},
		{0.2, 90, 100, MetricInFlight, 0.9},
		{0.2, 90, 0, MetricMax, 0.2},
		{math.NaN(), -1, 100, MetricMax, 0},
	}
	for _, tt := range tests {
		if got := Utilization(tt.cpu, tt.inflight, tt.limit, tt.m); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Utilization(%v, %v, %v, %v) = %v, want %v", tt.cpu, tt.inflight, tt.limit, tt.m, got, tt.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"kp", Config{Kp: f(-1)}, "kp"},
		{"kd_nan", Config{Kd: f(math.NaN())}, "kd"},
		{"no_gain", Config{Kp: f(0), Ki: f(0)}, "kp"},
		{"min", Config{MinWeight: 2}, "min_weight"},
		{"max", Config{MaxWeight: 0.5}, "max_weight"},
		{"initial", Config{InitialWeight: 0.05}, "initial_weight"},
		{"skip", Config{SkipShare: f(1.5)}, "skip_share"},
		{"target", Config{Target: -1}, "target"},
		{"integral", Config{IntegralLimit: -1}, "integral_limit"},
		{"max_age", Config{MaxAge: -time.Second}, "max_age"},
		{"metric", Config{Metric: 9}, "metric"},
		{"error_penalty", Config{ErrorPenalty: f(-0.5)}, "error_penalty"},
		{"error_penalty_big", Config{ErrorPenalty: f(11)}, "error_penalty"},
		{"error_penalty_nan", Config{ErrorPenalty: f(math.NaN())}, "error_penalty"},
		{"min_rps", Config{MinRPS: -1}, "min_rps"},
		{"min_rps_nan", Config{MinRPS: math.NaN()}, "min_rps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
			if want := ": " + tt.field + ": "; !contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, tt.field)
			}
		})
	}
	if _, err := New(Config{}); err != nil {
		t.Errorf("New(Config{}) = %v, want nil", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestBlend(t *testing.T) {
	tests := []struct {
		name     string
		from, to []uint32
		percent  float64
		want     []uint32
	}{
		// from shares 1/3 each, to 0.5/0.3/0.2; 30%: 0.7/3+0.3·x.
		{"30pct", []uint32{100, 100, 100}, []uint32{5, 3, 2}, 30, []uint32{11500, 9700, 8800}},
		{"0pct", []uint32{1, 3}, []uint32{3, 1}, 0, []uint32{5000, 15000}},
		{"100pct", []uint32{1, 3}, []uint32{3, 1}, 100, []uint32{15000, 5000}},
		{"50pct", []uint32{1, 3}, []uint32{3, 1}, 50, []uint32{10000, 10000}},
		{"tiny_share_at_least_1", []uint32{1, 1000000}, []uint32{1, 1000000}, 30, []uint32{1, 20000}},
		{"empty", nil, nil, 30, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Blend(nil, tt.from, tt.to, tt.percent)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Blend (-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []struct {
		from, to []uint32
		p        float64
	}{{[]uint32{1}, []uint32{1, 2}, 30}, {[]uint32{1}, []uint32{1}, 101}, {[]uint32{0}, []uint32{1}, 30}, {[]uint32{1}, []uint32{1}, math.NaN()}} {
		if _, err := Blend(nil, bad.from, bad.to, bad.p); err == nil {
			t.Errorf("Blend(%v, %v, %v) = nil error, want one", bad.from, bad.to, bad.p)
		}
	}
}

func TestSplitWithinZones(t *testing.T) {
	got, err := SplitWithinZones(nil, []string{"a", "a", "b", "c"}, []uint32{10000, 30000, 5000, 7}, map[string]float64{"a": 0.6, "b": 0.4})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float64{0.15, 0.45, 0.4, 0}, got); diff != "" {
		t.Errorf("SplitWithinZones (-want +got):\n%s", diff)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	c := mustNew(t, Config{})
	var st State
	var r Result
	c.Compute(&st, input(t0, []float64{0.3, 0.9}), &r)
	c.Compute(&st, input(t0.Add(10*time.Second), []float64{0.4, 0.8}), &r)
	snap := st.Snapshot()
	b, err := jsonMarshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(snap, back); diff != "" {
		t.Errorf("snapshot after JSON (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ name, json, field string }{
		{"dup", `{"endpoints":[{"id":"a","weight":1},{"id":"a","weight":1}]}`, "endpoints[1].id"},
		{"weight", `{"endpoints":[{"id":"a","weight":0}]}`, "endpoints[0].weight"},
		{"prev", `{"endpoints":[{"id":"a","weight":1,"prev_error":2}]}`, "endpoints[0].prev_error"},
		{"integral", `{"endpoints":[{"id":"a","weight":1,"integral":1e9}]}`, "endpoints[0].integral"},
		{"id", `{"endpoints":[{"id":"","weight":1}]}`, "endpoints[0].id"},
	} {
		s, err := UnmarshalSnapshot([]byte(tt.json))
		if err == nil {
			err = st.Restore(s, t0)
		}
		if !errors.Is(err, ErrInvalidSnapshot) || !contains(err.Error(), tt.field+":") {
			t.Errorf("%s: Restore = %v, want ErrInvalidSnapshot naming %s", tt.name, err, tt.field)
		}
	}
	if _, err := UnmarshalSnapshot([]byte(`{"endpoints":[],"x":1}`)); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("unknown field: %v, want ErrInvalidSnapshot", err)
	}
	// The failed restores left st as it was.
	if diff := cmp.Diff(snap, st.Snapshot()); diff != "" {
		t.Errorf("state changed by failed restores (-want +got):\n%s", diff)
	}
}

func TestComputeAllocs(t *testing.T) {
	c := mustNew(t, Config{})
	var st State
	var r Result
	u := make([]float64, 100)
	for i := range u {
		u[i] = 0.3 + float64(i%7)/10
	}
	in := input(t0, u)
	c.Compute(&st, in, &r)
	c.Compute(&st, in, &r)
	if n := testing.AllocsPerRun(10, func() { c.Compute(&st, in, &r) }); n != 0 {
		t.Errorf("Compute allocs = %v, want 0", n)
	}
	// A changed endpoint set uses the index map: still 0 once grown.
	in2 := input(t0, u[1:])
	c.Compute(&st, in2, &r)
	c.Compute(&st, in, &r)
	if n := testing.AllocsPerRun(10, func() { c.Compute(&st, in2, &r); c.Compute(&st, in, &r) }); n != 0 {
		t.Errorf("Compute with changing endpoints allocs = %v, want 0", n)
	}
}

package pid

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

func FuzzRestore(f *testing.F) {
	f.Add([]byte(`{"endpoints":[{"id":"a","weight":1.2,"integral":0.3,"prev_error":-0.1,"has_prev":true,"last_report":"2026-12-01T12:00:00Z"},{"id":"b","weight":0.8}]}`))
	f.Add([]byte(`{"endpoints":[]}`))
	f.Add([]byte(`{"endpoints":[{"id":"a","weight":1},{"id":"a","weight":1}]}`))
	f.Add([]byte(`{"endpoints":[{"id":"a","weight":-1e308}]}`))
	c, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := UnmarshalSnapshot(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("UnmarshalSnapshot error %v does not wrap ErrInvalidSnapshot", err)
			}
			return
		}
		var st State
		if err := st.Restore(s, t0); err != nil {
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("Restore error %v does not wrap ErrInvalidSnapshot", err)
			}
			if len(st.eps) != 0 {
				t.Fatalf("failed Restore changed the state")
			}
			return
		}
		// A restored state computes weights in range.
		in := &Input{Now: t0.Add(time.Second)}
		for i, e := range s.Endpoints {
			in.Endpoints = append(in.Endpoints, Endpoint{ID: e.ID, Utilization: float64(i%5) / 4, Reported: t0.Add(time.Second)})
		}
		var r Result
		c.Compute(&st, in, &r)
		c.Compute(&st, in, &r)
		for _, e := range r.Endpoints {
			if e.Weight < 1 || e.Weight > Scale*maxBound*maxBound {
				t.Fatalf("weight %d out of range", e.Weight)
			}
		}
	})
}

func FuzzConfig(f *testing.F) {
	f.Add(0.5, 0.02, 0.0, 0.1, 5.0, 0.2, 0.3, 0.0, 2.0, int64(30e9), uint8(0))
	f.Add(-1.0, 0.0, 0.0, 2.0, 0.5, 0.0, 1.5, -1.0, 0.0, int64(-1), uint8(9))
	f.Fuzz(func(t *testing.T, kp, ki, kd, mn, mx, initial, skip, target, il float64, age int64, m uint8) {
		cfg := Config{Kp: &kp, Ki: &ki, Kd: &kd, MinWeight: mn, MaxWeight: mx, InitialWeight: initial, SkipShare: &skip, Target: target, IntegralLimit: il, MaxAge: time.Duration(age), Metric: Metric(m)}
		c, err := New(cfg)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		var st State
		var r Result
		in := &Input{Now: t0, Endpoints: []Endpoint{{ID: "a", Utilization: 0.2, Reported: t0}, {ID: "b", Utilization: 0.9, Reported: t0}}}
		for range 3 {
			c.Compute(&st, in, &r)
		}
		for _, e := range r.Endpoints {
			if e.Weight < 1 {
				t.Fatalf("weight %d, want >= 1", e.Weight)
			}
		}
	})
}

// FuzzGuard: whatever three endpoints report (NaN, infinities and
// negatives included), every weight is at least 1, nothing is guarded
// without a request rate of at least MinRPS, and a guarded endpoint never
// sits above the lower median weight.
func FuzzGuard(f *testing.F) {
	f.Add(0.5, 0.5, 0.1, 100.0, 100.0, 100.0, 0.5, 0.5, 60.0, 10.0, 10.0, 12.0)
	f.Add(0.5, 0.6, 0.05, 100.0, 80.0, 150.0, 0.0, 1.0, 150.0, 0.0, 5.0, 900.0)
	f.Add(math.NaN(), -1.0, math.Inf(1), math.Inf(1), -5.0, 0.5, math.NaN(), 1e300, -1.0, math.Inf(1), math.NaN(), 1e308)
	c, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, u0, u1, u2, r0, r1, r2, e0, e1, e2, l0, l1, l2 float64) {
		us, rs, es, ls := []float64{u0, u1, u2}, []float64{r0, r1, r2}, []float64{e0, e1, e2}, []float64{l0, l1, l2}
		var st State
		var r Result
		for k := range 3 {
			now := t0.Add(time.Duration(k) * time.Second)
			in := &Input{Now: now}
			for i := range 3 {
				in.Endpoints = append(in.Endpoints, Endpoint{ID: string(rune('a' + i)), Reported: now,
					Utilization: us[i], RPS: rs[i], EPS: es[i], LatencyMs: ls[i]})
			}
			c.Compute(&st, in, &r)
			ws := make([]uint32, 3)
			for i, e := range r.Endpoints {
				ws[i] = e.Weight
				if e.Weight < 1 || math.IsNaN(e.Relative) {
					t.Fatalf("round %d: endpoint %d weight %d (relative %v)", k, i, e.Weight, e.Relative)
				}
				if e.Guard != GuardNone && !(rs[i] >= DefaultMinRPS) {
					t.Fatalf("round %d: endpoint %d guarded with rps %v", k, i, rs[i])
				}
			}
			slices.Sort(ws)
			for i, e := range r.Endpoints {
				if e.Guard != GuardNone && e.Weight > ws[1] {
					t.Fatalf("round %d: guarded endpoint %d weight %d above the median %d", k, i, e.Weight, ws[1])
				}
			}
		}
	})
}

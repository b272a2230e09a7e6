package pid

import (
	"errors"
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

package model

import (
	"testing"
	"time"
)

func TestExpiries(t *testing.T) {
	// Latest end 15.01 s; r0 serves until 17 s.
	b := abandoned(func(r int, t float64, s bool) bool { return s || (r == 0 && t > 2 && t < 17) })
	b.h.Pauses = []Pause{{Start: sec(14), End: sec(15), Why: "test"}}
	got, err := b.h.Expiries(testPromise)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("Expiries = %v, want one", got)
	}
	e := got[0]
	if e.Deadline != sec(15.01) || e.Due != sec(15+6) || e.Replica != 0 {
		t.Errorf("Expiry = %+v, want Deadline 15.01 s, Due 21 s, replica 0", e)
	}
	if d := e.Late(); d < 1900*time.Millisecond || d > 2*time.Second {
		t.Errorf("Late = %v, want about 17 − 15.01 s", d)
	}
	// Reads of a replica in an outage do not count.
	b.h.Outages = []Outage{{Replica: 0, Start: sec(10), End: sec(20)}}
	if got, _ := b.h.Expiries(testPromise); len(got) != 1 || got[0].Late() > time.Second {
		t.Errorf("Expiries with r0 in an outage = %+v, want one gone within a second of its latest end", got)
	}
	// A failed registration leaves it out.
	b.write(OpRegister, "svc/b", 0.5, 0.9, Failed)
	if got, _ := b.h.Expiries(testPromise); len(got) != 0 {
		t.Errorf("Expiries with a failed registration = %v, want none", got)
	}
}

// TestLagsRetried: a failed registration that a retry acknowledged does not
// hide what the replicas show after the retry; one without a retry does.
func TestLagsRetried(t *testing.T) {
	build := func(retry bool) *History {
		var b builder
		b.write(OpRegister, "svc/d", 1, 6, Failed)
		if retry {
			b.write(OpRegister, "svc/d", 6.5, 6.6, Acked)
		}
		// r1 misses it until 9 s.
		b.reads("svc/d", 12, func(r int, t float64) bool { return t >= 6.7 && (r != 1 || t >= 9) })
		return &b.h
	}
	worst := func(h *History) time.Duration {
		lags, err := h.Lags(testPromise)
		if err != nil {
			t.Fatal(err)
		}
		var d time.Duration
		for _, l := range lags {
			if l.Replica == 1 && l.After == Register {
				d = max(d, l.Stale())
			}
		}
		return d
	}
	if d := worst(build(true)); d < 2*time.Second || d > 2500*time.Millisecond {
		t.Errorf("r1's lag after the retried registration = %v, want about 9 − 6.6 s", d)
	}
	if d := worst(build(false)); d != 0 {
		t.Errorf("r1's lag with only a failed registration = %v, want none measured", d)
	}
}

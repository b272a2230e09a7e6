package model

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRecorder: a smoke test of the recording helpers, from many
// goroutines at once (run with -race).
func TestRecorder(t *testing.T) {
	rec := NewRecorder()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			key := rec.Key(fmt.Sprintf("svc/e%d", g%4)) // two goroutines per key
			call := rec.Now()
			rec.Write(OpRegister, g%3, key, call, rec.Now(), Acked)
			for range 50 {
				c := rec.Now()
				rec.Heartbeat(g%3, key, c, rec.Now(), Acked)
				rec.Add(Op{Kind: OpList, Present: true, Replica: int8(g % 3), Key: key, Call: c, Return: rec.Now()})
			}
			rec.Abandon(key)
		})
	}
	rec.Outage(1, rec.At(time.Now()), rec.Now(), "test")
	rec.Pause(rec.Now(), rec.Now(), "test")
	wg.Wait()
	h := rec.History()
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := len(h.Keys), 4; got != want {
		t.Errorf("keys = %d, want %d", got, want)
	}
	if got, want := len(h.Ops), 8*(1+50*2+1); got != want {
		t.Errorf("ops = %d, want %d", got, want)
	}
	if len(h.Outages) != 1 || len(h.Pauses) != 1 {
		t.Errorf("outages %v, pauses %v, want one each", h.Outages, h.Pauses)
	}
	if h.End < h.Ops[len(h.Ops)-1].Return {
		t.Errorf("End %d before the last op's Return %d", h.End, h.Ops[len(h.Ops)-1].Return)
	}
	// A snapshot does not change when recording goes on.
	rec.Abandon(0)
	if got, want := len(h.Ops), 8*(1+50*2+1); got != want {
		t.Errorf("snapshot ops = %d after one more Add, want %d", got, want)
	}
	if _, err := Check(h, testPromise, 10*time.Second); err != nil {
		t.Errorf("Check of the recorded history: %v", err)
	}
}

func TestValidate(t *testing.T) {
	h := &History{Keys: []string{"svc/a"}, Ops: []Op{{Kind: OpList, Key: 1}}}
	if err := h.Validate(); err == nil {
		t.Error("Validate with a key out of range = nil, want an error")
	}
	h.Ops = []Op{{Kind: OpList, Key: 0, Call: 5, Return: 4}}
	if err := h.Validate(); err == nil {
		t.Error("Validate with Return before Call = nil, want an error")
	}
	if _, err := Check(h, testPromise, 0); err == nil {
		t.Error("Check of an invalid history = nil error, want one")
	}
}

func TestOutcomeOf(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want Outcome
	}{
		{nil, Acked},
		{status.Error(codes.NotFound, "lease"), NotFound},
		{status.Error(codes.Unavailable, "store"), Failed},
		{status.Error(codes.DeadlineExceeded, "slow"), Failed},
		{errors.New("connection refused"), Failed},
	} {
		if got := OutcomeOf(tt.err); got != tt.want {
			t.Errorf("OutcomeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestReads: the reduction keeps every change of answer and one read per
// Propagation/2, and drops reads whose window contains another's.
func TestReads(t *testing.T) {
	// Registered at 1 s, deregistered at 10 s, registered again at 20 s;
	// r2 never drops it. The gap is longer than N: the sampled reads of
	// r2's constant run must still catch it.
	var b builder
	b.write(OpRegister, "svc/a", 1, 1.05, Acked)
	b.write(OpDeregister, "svc/a", 10, 10.05, Acked)
	b.write(OpRegister, "svc/a", 20, 20.05, Acked)
	b.reads("svc/a", 30, func(r int, t float64) bool {
		if r == 2 {
			return t >= 1.35
		}
		return t >= 1.05+lags[r] && t < 10.05+lags[r] || t >= 20.05+lags[r]
	})
	raw := 0
	for _, op := range b.h.Ops {
		if op.Kind == OpList {
			raw++
		}
	}
	ops, err := b.h.Operations(testPromise)
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	for _, op := range ops {
		if op.Input.(Input).Kind == Read {
			reads++
		}
	}
	// 30 s at one read per second per replica, plus the edges.
	if reads > 3*30+3*8 || reads < 3*30/2 {
		t.Errorf("%d of %d reads kept, want about one a second per replica", reads, raw)
	}
	res := check(t, &b.h, testPromise)
	if res.Illegal != 1 {
		t.Errorf("r2 serving through a 10 s deregistration: Check = %+v, want Illegal", res)
	}

	// An outage's reads all reach back to its start: with the same
	// answer, at most the one that returned first is needed (none when
	// another replica's read in the same window said the same).
	var o builder
	o.write(OpRegister, "svc/b", 1, 1.05, Acked)
	o.reads("svc/b", 30, func(r int, t float64) bool { return t >= 1.05+lags[r] })
	o.h.Outages = []Outage{{Replica: 0, Start: sec(5), End: sec(25)}}
	rs := o.h.reads(o.h.byKey()[0], int64(testPromise.Propagation), testPromise)
	var inOutage []int64
	for _, r := range rs {
		if r.replica == 0 && r.call >= sec(5) && r.call <= sec(27) {
			inOutage = append(inOutage, r.from)
		}
	}
	if len(inOutage) > 1 {
		t.Errorf("r0's reads kept in its outage start at %v, want at most one", inOutage)
	}
	if res := check(t, &o.h, testPromise); res.Ok != 1 {
		t.Errorf("Check = %+v, want Ok", res)
	}
}

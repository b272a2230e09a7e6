package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
)

// The promise the tests hold histories to: N = 2 s, leases of 4 s with
// 3 s of grace.
var testPromise = Promise{Propagation: 2 * time.Second, TTL: 4 * time.Second, Grace: 3 * time.Second, Resume: 6 * time.Second, Recovery: 2 * time.Second}

func sec(s float64) int64 { return int64(s * float64(time.Second)) }

// builder writes histories in seconds.
type builder struct{ h History }

func (b *builder) key(name string) int32 {
	if i := slices.Index(b.h.Keys, name); i >= 0 {
		return int32(i)
	}
	b.h.Keys = append(b.h.Keys, name)
	return int32(len(b.h.Keys) - 1)
}

func (b *builder) write(kind OpKind, key string, call, ret float64, o Outcome) {
	b.h.Ops = append(b.h.Ops, Op{Kind: kind, Outcome: o, Replica: -1, Key: b.key(key), Call: sec(call), Return: sec(ret)})
}

func (b *builder) beat(key string, replica int, call, ret float64, o Outcome) {
	b.h.Ops = append(b.h.Ops, Op{Kind: OpHeartbeat, Outcome: o, Replica: int8(replica), Key: b.key(key), Call: sec(call), Return: sec(ret)})
}

func (b *builder) abandon(key string, at float64) {
	b.h.Ops = append(b.h.Ops, Op{Kind: OpAbandon, Replica: -1, Key: b.key(key), Call: sec(at), Return: sec(at)})
}

// reads adds a 10 ms read on each of 3 replicas every 150 ms from 0 to
// end; served(replica, t) is its answer.
func (b *builder) reads(key string, end float64, served func(replica int, t float64) bool) {
	k := b.key(key)
	for i := 0; float64(i)*0.15 < end; i++ {
		t := float64(i) * 0.15
		for r := range 3 {
			b.h.Ops = append(b.h.Ops, Op{Kind: OpList, Present: served(r, t), Replica: int8(r), Key: k, Call: sec(t), Return: sec(t + 0.01)})
		}
	}
}

// between: served from on (after lag) until off (after lag).
func between(on, off float64, lag [3]float64) func(int, float64) bool {
	return func(r int, t float64) bool { return t >= on+lag[r] && t < off+lag[r] }
}

var lags = [3]float64{0.05, 0.1, 0.3}

// registered: svc/a registered at 1 s (acked 1.05 s), deregistered at 10 s
// (acked 10.05 s); every replica follows within its lag, except as
// changed by tweak.
func registered(tweak func(r int, t float64, served bool) bool) *History {
	var b builder
	b.write(OpRegister, "svc/a", 1, 1.05, Acked)
	b.write(OpDeregister, "svc/a", 10, 10.05, Acked)
	base := between(1.05, 10.05, lags)
	b.reads("svc/a", 20, func(r int, t float64) bool { return tweak(r, t, base(r, t)) })
	b.h.End = sec(20)
	return &b.h
}

// abandoned: svc/b registered at 1 s, heartbeated on replica 1 every
// second until 8 s, then abandoned: its latest end is 8.01 + 4 + 3 =
// 15.01 s. Replicas drop it at 15.5 s (a lease tick) plus their lag,
// except as changed by tweak.
func abandoned(tweak func(r int, t float64, served bool) bool) *builder {
	var b builder
	b.write(OpRegister, "svc/b", 1, 1.05, Acked)
	for s := 2.0; s <= 8; s++ {
		b.beat("svc/b", 1, s, s+0.01, Acked)
	}
	b.abandon("svc/b", 8.5)
	base := between(1.05, 15.5, lags)
	b.reads("svc/b", 30, func(r int, t float64) bool { return tweak(r, t, base(r, t)) })
	b.h.End = sec(30)
	return &b
}

func same(r int, t float64, served bool) bool { return served }

func check(t *testing.T, h *History, p Promise) Result {
	t.Helper()
	res, err := Check(h, p, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestCheckAccepts: histories that keep the promise pass, including
// replicas as late as just under N.
func TestCheckAccepts(t *testing.T) {
	tests := []struct {
		name string
		h    *History
	}{
		{"registration_and_deregistration", registered(same)},
		{"late_by_1.9s_after_registration", registered(func(r int, t float64, s bool) bool {
			if r == 2 && t >= 1.05 && t < 1.05+1.9 {
				return false
			}
			return s
		})},
		{"late_by_1.9s_after_deregistration", registered(func(r int, t float64, s bool) bool {
			return s || (r == 2 && t >= 10.05 && t < 10.05+1.9)
		})},
		{"expiry", &abandoned(same).h},
		{"expiry_late_by_1.5s", &abandoned(func(r int, t float64, s bool) bool {
			return s || (r == 0 && t >= 15.01 && t < 15.01+1.5)
		}).h},
		{"expiry_early_within_grace", &abandoned(func(r int, t float64, s bool) bool {
			// The lease may end from 8.0 + 4 s on: replicas that drop it
			// from 12.5 s are early but within the window.
			return s && t < 12.5+lags[r]
		}).h},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if res := check(t, tt.h, testPromise); res.Illegal != 0 || res.Unknown != 0 || res.Ok != 1 {
				t.Errorf("Check = %+v, want one Ok partition", res)
			}
		})
	}
}

// TestCheckCatchesPlantedViolation: each history breaks the promise in one
// place, and the checker must reject exactly that endpoint.
func TestCheckCatchesPlantedViolation(t *testing.T) {
	tests := []struct {
		name string
		h    *History
	}{
		{"served_2.5s_after_acked_deregistration", registered(func(r int, t float64, s bool) bool {
			return s || (r == 2 && t >= 10.05 && t < 10.05+2.5)
		})},
		{"misses_acked_registration_2.5s_after", registered(func(r int, t float64, s bool) bool {
			if r == 1 && t >= 1.05 && t < 1.05+2.5 {
				return false
			}
			return s
		})},
		{"drops_a_served_endpoint_once", registered(func(r int, t float64, s bool) bool {
			return s && !(r == 0 && t >= 5 && t < 5.3)
		})},
		{"serves_before_registration", registered(func(r int, t float64, s bool) bool {
			return s || (r == 1 && t < 0.5 && t >= 0.3)
		})},
		{"served_2.5s_after_lease_expiry", &abandoned(func(r int, t float64, s bool) bool {
			return s || (r == 0 && t >= 15.01 && t < 15.01+2.5)
		}).h},
		{"expired_before_ttl", &abandoned(func(r int, t float64, s bool) bool {
			// The last acked heartbeat was called at 8 s: the lease holds
			// until 12 s at least, and a read from 10.5 s is too early
			// even with N.
			return s && !(t >= 9.5)
		}).h},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := check(t, tt.h, testPromise)
			if res.Illegal != 1 || res.Ok != 0 {
				t.Errorf("Check = %+v, want the one partition Illegal", res)
			}
			if want := tt.h.Keys; !cmp.Equal(res.IllegalKeys, want) {
				t.Errorf("IllegalKeys = %v, want %v", res.IllegalKeys, want)
			}
		})
	}
}

// TestCheckUnknownOutcome: a failed registration may have happened or
// not; a failed one that lands after the deregistration (etcd got it while
// stopped) is served until its lease expires.
func TestCheckUnknownOutcome(t *testing.T) {
	landed := func(b *builder) {
		b.write(OpRegister, "svc/c", 1, 7, Failed)
		b.write(OpRegister, "svc/c", 7.5, 7.55, Acked)
		b.write(OpDeregister, "svc/c", 12, 12.05, Acked)
	}
	tests := []struct {
		name  string
		build func(*builder)
		reads func(r int, t float64) bool
		ok    bool
	}{
		{"never_served", func(b *builder) { b.write(OpRegister, "svc/c", 1, 7, Failed) }, func(int, float64) bool { return false }, true},
		{"served_while_failing", func(b *builder) { b.write(OpRegister, "svc/c", 1, 7, Failed) }, func(_ int, t float64) bool { return t > 3 }, true},
		{"landed_after_deregistration", landed, func(_ int, t float64) bool { return t >= 7.6 && t < 12.05 || t >= 13 && t < 20 }, true},
		{"served_again_twice", landed, func(_ int, t float64) bool {
			return t >= 7.6 && t < 12.05 || t >= 13 && t < 15 || t >= 17 && t < 20
		}, false},
		{"acked_only_control", func(b *builder) {
			b.write(OpRegister, "svc/c", 7.5, 7.55, Acked)
			b.write(OpDeregister, "svc/c", 12, 12.05, Acked)
		}, func(_ int, t float64) bool { return t >= 7.6 && t < 12.05 || t >= 13 && t < 20 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b builder
			tt.build(&b)
			b.reads("svc/c", 25, tt.reads)
			res := check(t, &b.h, testPromise)
			if got := res.Illegal == 0 && res.Ok == 1; got != tt.ok {
				t.Errorf("Check = %+v, want ok %v", res, tt.ok)
			}
		})
	}
}

// TestCheckOutage: a replica cut from the store serves what it had; an
// Outage says so, and without it the same history is illegal.
func TestCheckOutage(t *testing.T) {
	h := registered(func(r int, t float64, s bool) bool {
		return s || (r == 2 && t >= 10.05 && t < 12+1.5) // cut 9 to 12 s, back 1.5 s later
	})
	if res := check(t, h, testPromise); res.Illegal != 1 {
		t.Errorf("without the outage: Check = %+v, want Illegal", res)
	}
	h.Outages = []Outage{{Replica: 2, Start: sec(9), End: sec(12), Why: "cut"}}
	if res := check(t, h, testPromise); res.Ok != 1 {
		t.Errorf("with r2's outage: Check = %+v, want Ok", res)
	}
	h.Outages = []Outage{{Replica: 1, Start: sec(9), End: sec(12), Why: "cut"}}
	if res := check(t, h, testPromise); res.Illegal != 1 {
		t.Errorf("with r1's outage: Check = %+v, want Illegal (r2 was not cut)", res)
	}
	h.Outages = []Outage{{Replica: -1, Start: sec(9), End: sec(12), Why: "etcd stopped"}}
	if res := check(t, h, testPromise); res.Ok != 1 {
		t.Errorf("with the store's outage: Check = %+v, want Ok", res)
	}
}

// TestCheckPause: no lease expires while there is no decider; a Pause
// moves the expiry's latest end to its End plus Resume.
func TestCheckPause(t *testing.T) {
	b := abandoned(func(r int, t float64, s bool) bool { return s || (t > 1.1 && t < 25) })
	if res := check(t, &b.h, testPromise); res.Illegal != 1 {
		t.Errorf("without the pause: Check = %+v, want Illegal", res)
	}
	b.h.Pauses = []Pause{{Start: sec(14), End: sec(18), Why: "decider killed"}}
	if res := check(t, &b.h, testPromise); res.Ok != 1 {
		t.Errorf("with the pause: Check = %+v, want Ok (latest end 18 + 6 s)", res)
	}
	// The decider killed 1 s after the lease's latest end, before its
	// next tick expired it: the expiry waits for the next decider.
	b.h.Pauses = []Pause{{Start: sec(16), End: sec(18), Why: "within N after the deadline"}}
	if res := check(t, &b.h, testPromise); res.Ok != 1 {
		t.Errorf("with a pause within N after the deadline: Check = %+v, want Ok", res)
	}
	b.h.Pauses = []Pause{{Start: sec(17.5), End: sec(18), Why: "more than N after the deadline"}}
	if res := check(t, &b.h, testPromise); res.Illegal != 1 {
		t.Errorf("with a pause more than N after the deadline: Check = %+v, want Illegal", res)
	}
}

func TestCheckManyPartitions(t *testing.T) {
	var b builder
	for i := range 3 * batch {
		k := "svc/e" + strings.Repeat("x", i)
		b.write(OpRegister, k, 1, 1.05, Acked)
		b.reads(k, 5, func(r int, t float64) bool { return t >= 1.05+lags[r] })
	}
	// One endpoint in the middle batch is never served by r1.
	bad := "svc/e" + strings.Repeat("x", batch+3)
	for i, op := range b.h.Ops {
		if b.h.Keys[op.Key] == bad && op.Replica == 1 {
			b.h.Ops[i].Present = false
		}
	}
	res := check(t, &b.h, testPromise)
	if res.Partitions != 3*batch || res.Ok != 3*batch-1 || !cmp.Equal(res.IllegalKeys, []string{bad}) {
		t.Errorf("Check = %d partitions, %d Ok, illegal %v; want %d, %d, [%s]", res.Partitions, res.Ok, res.IllegalKeys, 3*batch, 3*batch-1, bad)
	}
}

func TestVisualize(t *testing.T) {
	h := registered(func(r int, t float64, s bool) bool { return s || (r == 2 && t >= 10.05 && t < 14) })
	h.Outages = []Outage{{Replica: 0, Start: sec(2), End: sec(3), Why: "test"}}
	h.Pauses = []Pause{{Start: sec(4), End: sec(5), Why: "test"}}
	path := filepath.Join(t.TempDir(), "viz.html")
	res, err := Visualize(h, testPromise, []string{"svc/a"}, path, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res != porcupine.Illegal {
		t.Errorf("Visualize verdict = %v, want Illegal", res)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "r2 read svc/a") {
		t.Errorf("visualization (%d bytes) does not describe r2's reads", len(b))
	}
	if _, err := Visualize(h, testPromise, []string{"svc/none"}, path, 0); err == nil {
		t.Error("Visualize of an endpoint without operations: nil error, want one")
	}
}

func TestLags(t *testing.T) {
	h := registered(same)
	got, err := h.Lags(testPromise)
	if err != nil {
		t.Fatal(err)
	}
	worst := map[Kind]time.Duration{}
	for _, l := range got {
		if l.Replica == 2 {
			worst[l.After] = max(worst[l.After], l.Stale())
		}
	}
	// r2 follows 0.3 s late; its reads are 150 ms apart and 10 ms long:
	// its last stale read returns between 0.16 and 0.31 s after the write.
	for _, k := range []Kind{Register, Deregister} {
		if d := worst[k]; d < 160*time.Millisecond || d > 310*time.Millisecond {
			t.Errorf("r2's worst lag after %s = %v, want 160-310ms", k, d)
		}
	}
	b := abandoned(func(r int, t float64, s bool) bool { return s || (r == 0 && t < 17) })
	b.h.Pauses = []Pause{{Start: sec(100), End: sec(101)}}
	got, err = b.h.Lags(testPromise)
	if err != nil {
		t.Fatal(err)
	}
	var expiry time.Duration
	for _, l := range got {
		if l.After == Expire && l.Replica == 0 {
			expiry = max(expiry, l.Stale())
			if l.Since != l.Deadline {
				t.Errorf("expiry lag Since %d != Deadline %d with no pause around it", l.Since, l.Deadline)
			}
		}
	}
	if expiry < 1800*time.Millisecond || expiry > 2*time.Second {
		t.Errorf("r0's expiry lag = %v, want about 17 − 15.01 s", expiry)
	}
}

func TestPromiseValidate(t *testing.T) {
	for _, p := range []Promise{
		{TTL: time.Second},
		{Propagation: time.Second},
		{Propagation: time.Second, TTL: time.Second, Grace: -1},
		{Propagation: time.Second, TTL: time.Second, Resume: -1},
		{Propagation: time.Second, TTL: time.Second, Recovery: -1},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", p)
		}
	}
	if err := testPromise.Validate(); err != nil {
		t.Errorf("testPromise.Validate() = %v", err)
	}
}

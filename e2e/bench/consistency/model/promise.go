package model

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Promise is what a client may rely on, in the figures Check holds a
// history to.
type Promise struct {
	// Propagation is the bound N: a replica that reaches the store serves
	// an acknowledged registration, and stops serving an acknowledged
	// deregistration or an expired lease, at most N after the
	// acknowledgement (the expiry). Must be > 0.
	Propagation time.Duration
	// TTL is every lease's TTL. Must be > 0.
	TTL time.Duration
	// Grace is what the expiry decider adds to every TTL: --lastseen-flush
	// plus two store probes. Must be >= 0.
	Grace time.Duration
	// Resume is how soon after a Pause ends leases expire again: a new
	// decider's election (the election TTL), its wait of Grace, a probe
	// and a lease tick. Must be >= 0.
	Resume time.Duration
	// Recovery is how soon after an Outage ends the replica reaches the
	// store again and serves within Propagation (its client's reconnect
	// backoff and a probe). Must be >= 0.
	Recovery time.Duration
}

// Validate names the first field out of range.
func (p Promise) Validate() error {
	switch {
	case p.Propagation <= 0:
		return fmt.Errorf("Propagation: %v, want > 0", p.Propagation)
	case p.TTL <= 0:
		return fmt.Errorf("TTL: %v, want > 0", p.TTL)
	case p.Grace < 0:
		return fmt.Errorf("Grace: %v, want >= 0", p.Grace)
	case p.Resume < 0:
		return fmt.Errorf("Resume: %v, want >= 0", p.Resume)
	case p.Recovery < 0:
		return fmt.Errorf("Recovery: %v, want >= 0", p.Recovery)
	}
	return nil
}

// Client ids of the operations, for porcupine's visualization: one row
// for the client's writes, one for the system's expiries, one per replica
// for its reads.
const (
	clientWrites = 0
	clientExpiry = 1
	clientReads  = 2 // + replica
)

// Operations turns the history into porcupine operations under p:
//
//   - an acked Register or Deregister is [Call, Return]; a failed one is
//     [Call, Infinity]; a deregistration answered NotFound changed nothing
//     and is left out;
//   - an OpList, and a heartbeat answered "found" (the replica holds the
//     lease), is a Read widened to [Call − Propagation, Return], and
//     further back to Outage.Start − Propagation when the read overlaps an
//     outage of its replica (or of the store) or Recovery after it;
//     failed and NotFound heartbeats are left out (a NotFound may mean a
//     lease replaced by a retried registration);
//   - an OpAbandon is an Expire from the lease's earliest end (the Call of
//     the last acked heartbeat or registration, plus the TTL) to its latest
//     (the Return of the last heartbeat or registration attempt, plus TTL
//     and Grace; past any Pause that begins before that plus Propagation
//     and ends after it, to the Pause's End plus Resume);
//   - an endpoint with a failed registration that the workload later
//     deregistered or abandoned also gets an Expire of unknown time from
//     its last action on (the failed registration may have been stored
//     after all, under a lease nobody heartbeats).
func (h *History) Operations(p Promise) ([]porcupine.Operation, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	byKey := h.byKey()
	pauses := slices.Clone(h.Pauses)
	slices.SortFunc(pauses, func(a, b Pause) int { return cmp.Compare(a.Start, b.Start) })
	out := make([]porcupine.Operation, 0, len(h.Ops)+len(h.Keys))
	n := int64(p.Propagation)
	for key, ops := range byKey {
		name := h.Keys[key]
		for _, op := range ops {
			switch op.Kind {
			case OpRegister, OpDeregister:
				kind := Register
				if op.Kind == OpDeregister {
					kind = Deregister
				}
				switch op.Outcome {
				case Acked:
					out = append(out, porcupine.Operation{ClientId: clientWrites, Input: Input{Kind: kind, Key: name, Replica: -1}, Output: Output{}, Call: op.Call, Return: op.Return})
				case Failed:
					out = append(out, porcupine.Operation{ClientId: clientWrites, Input: Input{Kind: kind, Key: name, Replica: -1}, Output: Output{}, Call: op.Call, Return: Infinity, Metadata: "failed: outcome unknown"})
				}
			case OpHeartbeat, OpList:
				// Reads are added below, reduced.
			case OpAbandon:
				lo, hi := expiryWindow(ops, op.Call, p)
				hi = resume(hi, pauses, p)
				out = append(out, porcupine.Operation{ClientId: clientExpiry, Input: Input{Kind: Expire, Key: name, Replica: -1}, Output: Output{}, Call: lo, Return: hi, Metadata: "lease expiry"})
			}
		}
		for _, r := range h.reads(ops, n, p) {
			out = append(out, porcupine.Operation{
				ClientId: clientReads + r.replica,
				Input:    Input{Kind: Read, Key: name, Replica: r.replica},
				Output:   Output{Present: r.present},
				Call:     r.from, Return: r.ret,
			})
		}
		if from, ok := phantomFrom(ops, p); ok {
			out = append(out, porcupine.Operation{ClientId: clientExpiry, Input: Input{Kind: Expire, Key: name, Replica: -1}, Output: Output{}, Call: from, Return: Infinity, Metadata: "expiry of a registration whose RPC failed"})
		}
	}
	return out, nil
}

// byKey groups the ops by key, each group in recording order.
func (h *History) byKey() [][]Op {
	out := make([][]Op, len(h.Keys))
	for _, op := range h.Ops {
		out[op.Key] = append(out[op.Key], op)
	}
	return out
}

// read is one read as porcupine gets it.
type read struct {
	replica   int
	heartbeat bool // a heartbeat answered "found", not a list
	present   bool
	call      int64 // as recorded
	from, ret int64 // widened window
}

// reads are the endpoint's reads, widened and reduced. Porcupine has to
// try every subset of the reads whose windows overlap before it can call
// a history illegal, so a history with many overlapping reads of one
// endpoint does not finish. Two reductions keep the overlap small:
//
//   - sampling: in each stream of reads (one replica's lists, one
//     replica's heartbeats), the reads on either side of every change of
//     answer are kept, and otherwise one read each Propagation/2. Dropping
//     a read can only hide a violation, never invent one; with one read
//     kept at least every Propagation/2, a state a replica shows for
//     longer than Propagation is still checked.
//   - containment, lossless: a read whose window contains the window of
//     another read with the same answer adds nothing (it can take the
//     other's place in any linearization: reads change no state), so it
//     is dropped. This is what collapses the reads of an outage, which all
//     reach back to its start.
func (h *History) reads(ops []Op, n int64, p Promise) []read {
	type stream struct {
		replica   int8
		heartbeat bool
	}
	streams := map[stream][]read{}
	for _, op := range ops {
		switch {
		case op.Kind == OpList:
		case op.Kind == OpHeartbeat && op.Outcome == Acked:
		default:
			continue
		}
		st := stream{op.Replica, op.Kind == OpHeartbeat}
		streams[st] = append(streams[st], read{
			replica: int(op.Replica), heartbeat: st.heartbeat, present: op.Present || st.heartbeat,
			call: op.Call, from: h.readFrom(op, n, p.Recovery), ret: op.Return,
		})
	}
	every := int64(p.Propagation / 2)
	var kept []read
	for _, rs := range streams {
		slices.SortFunc(rs, func(a, b read) int { return cmp.Compare(a.call, b.call) })
		last := int64(math.MinInt64)
		for i, r := range rs {
			edge := i == 0 || i == len(rs)-1 || rs[i-1].present != r.present || rs[i+1].present != r.present
			if edge || r.call-last >= every {
				kept = append(kept, r)
				last = r.call
			}
		}
	}
	// Containment: sorted by from descending (ret ascending on ties), a
	// read is redundant when an earlier one in that order (which starts no
	// earlier) with the same answer returned no later.
	slices.SortFunc(kept, func(a, b read) int {
		if c := cmp.Compare(b.from, a.from); c != 0 {
			return c
		}
		return cmp.Compare(a.ret, b.ret)
	})
	minRet := [2]int64{math.MaxInt64, math.MaxInt64}
	out := kept[:0]
	for _, r := range kept {
		i := 0
		if r.present {
			i = 1
		}
		if minRet[i] <= r.ret {
			continue
		}
		minRet[i] = r.ret
		out = append(out, r)
	}
	return out
}

// readFrom is the earliest state a read may have observed: Propagation
// before its call, or before the start of an outage of its replica it
// overlaps (with Recovery after the outage's end).
func (h *History) readFrom(op Op, n int64, recovery time.Duration) int64 {
	from := op.Call - n
	for _, o := range h.Outages {
		if o.covers(int(op.Replica), op.Call, op.Return, recovery) {
			from = min(from, o.Start-n)
		}
	}
	return from
}

// covers reports whether a read [call, ret] of replica overlaps the
// outage or the recovery after it.
func (o Outage) covers(replica int, call, ret int64, recovery time.Duration) bool {
	return (o.Replica == -1 || o.Replica == replica) && ret >= o.Start && call <= o.End+int64(recovery)
}

// InOutage reports whether a read [call, ret] of replica overlapped one of
// its store outages or the recovery after it: a read the promise lets
// serve what the replica had when it lost the store.
func (h *History) InOutage(replica int, call, ret int64, recovery time.Duration) bool {
	return slices.ContainsFunc(h.Outages, func(o Outage) bool { return o.covers(replica, call, ret, recovery) })
}

// expiryWindow is the window of the expiry of the lease abandoned at t:
// the earliest end (Call of the last acked keep-alive + TTL) and the
// latest (Return of the last attempt + TTL + Grace).
func expiryWindow(ops []Op, t int64, p Promise) (lo, hi int64) {
	var lastAcked, lastAttempt, firstCall int64 = -1, -1, -1
	for _, op := range ops {
		if op.Call > t || (op.Kind != OpRegister && op.Kind != OpHeartbeat) {
			continue
		}
		if firstCall < 0 {
			firstCall = op.Call
		}
		if op.Outcome == Acked {
			lastAcked = max(lastAcked, op.Call)
		}
		lastAttempt = max(lastAttempt, op.Return)
	}
	if lastAttempt < 0 { // abandoned before any attempt: nothing to expire, at once
		return t, t
	}
	if lastAcked < 0 {
		lastAcked = firstCall
	}
	lo = lastAcked + int64(p.TTL)
	hi = lastAttempt + int64(p.TTL) + int64(p.Grace)
	return lo, max(lo, hi)
}

// resume pushes an expiry's latest end past every pause that begins
// before it is due (its latest end plus Propagation: the decider acts on
// its next lease tick) and ends after it: expiry resumes Resume after the
// pause ends.
func resume(deadline int64, sorted []Pause, p Promise) int64 {
	for _, ps := range sorted {
		if deadline+int64(p.Propagation) >= ps.Start && deadline <= ps.End+int64(p.Resume) {
			deadline = ps.End + int64(p.Resume)
		}
	}
	return deadline
}

// phantomFrom: when the endpoint had a failed registration and the
// workload later ended it (a deregistration attempt or an abandon), the
// earliest time a lease from that failed registration could expire: the
// later of its call plus the TTL and the workload's last action.
func phantomFrom(ops []Op, p Promise) (int64, bool) {
	var failed, final int64 = -1, -1
	for _, op := range ops {
		switch {
		case op.Kind == OpRegister && op.Outcome == Failed && failed < 0:
			failed = op.Call
		case op.Kind == OpAbandon, op.Kind == OpDeregister:
			if final < 0 {
				final = op.Call
			}
		}
	}
	if failed < 0 || final < 0 {
		return 0, false
	}
	return max(failed+int64(p.TTL), final), true
}

package model

import (
	"cmp"
	"slices"
	"time"
)

// Lag is one read that returned the state from before the last write
// that was over when the read was called: how stale that replica was. It
// is a measurement, not the check (Check is): Lags shows how close a run
// came to the promise's bounds.
type Lag struct {
	Key     string
	Replica int
	// After is the write the read had not seen: Register, Deregister or
	// Expire.
	After Kind
	// Since is when that write was acknowledged; for an Expire, the
	// lease's latest end pushed past the pauses it fell in (what the
	// promise counts from), and Deadline the latest end without them.
	Since, Deadline int64
	// Call and Return are the read's.
	Call, Return int64
}

// Stale is how long after Since the read still returned the old state.
func (l Lag) Stale() time.Duration { return time.Duration(l.Return - l.Since) }

// write is one state change of an endpoint as Lags sees it.
type write struct {
	kind      Kind
	call, ret int64 // ret Infinity: not over
	deadline  int64 // Expire: the latest end before pauses
}

// Lags lists every read that returned a state older than the last write
// over before its call. A read is judged only when every write called
// before it returned was over when it was called and none of them
// overlapped the last one (otherwise the state it should see is not
// known). A failed registration or deregistration that a retry of the
// same kind acknowledged before any other write is left out (the retry
// did what it may have done); one not retried so is never over. An
// expiry is over at the lease's latest end (Operations).
func (h *History) Lags(p Promise) ([]Lag, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	pauses := slices.Clone(h.Pauses)
	slices.SortFunc(pauses, func(a, b Pause) int { return cmp.Compare(a.Start, b.Start) })
	var out []Lag
	for key, ops := range h.byKey() {
		writes := writesOf(ops, pauses, p)
		for _, op := range ops {
			present := op.Present
			switch {
			case op.Kind == OpList:
			case op.Kind == OpHeartbeat && op.Outcome == Acked:
				present = true
			default:
				continue
			}
			last, ok := lastWrite(writes, op.Call, op.Return)
			if !ok {
				continue
			}
			if want := last.kind == Register; present != want {
				out = append(out, Lag{Key: h.Keys[key], Replica: int(op.Replica), After: last.kind,
					Since: last.ret, Deadline: last.deadline, Call: op.Call, Return: op.Return})
			}
		}
	}
	return out, nil
}

// writesOf lists the endpoint's writes and expiries.
func writesOf(ops []Op, pauses []Pause, p Promise) []write {
	var ws []write
	for i, op := range ops {
		switch op.Kind {
		case OpRegister, OpDeregister:
			kind := Register
			if op.Kind == OpDeregister {
				kind = Deregister
			}
			switch op.Outcome {
			case Acked:
				ws = append(ws, write{kind: kind, call: op.Call, ret: op.Return})
			case Failed:
				if !retried(ops[i+1:], op.Kind) {
					ws = append(ws, write{kind: kind, call: op.Call, ret: Infinity})
				}
			}
		case OpAbandon:
			lo, hi := expiryWindow(ops, op.Call, p)
			ws = append(ws, write{kind: Expire, call: lo, ret: resume(hi, pauses, p), deadline: hi})
		}
	}
	return ws
}

// retried reports whether a write of kind is acknowledged in ops before
// any write of another kind: then a failed attempt of kind before ops did
// what the acknowledged retry did, and Lags leaves it out.
func retried(ops []Op, kind OpKind) bool {
	for _, op := range ops {
		switch {
		case op.Kind == kind && op.Outcome == Acked:
			return true
		case op.Kind == OpRegister || op.Kind == OpDeregister || op.Kind == OpAbandon:
			if op.Kind != kind {
				return false
			}
		}
	}
	return false
}

// lastWrite is the write a read [call, ret] must have seen, if known:
// every write called by ret is over by call, and the last of them began
// after the others ended.
func lastWrite(ws []write, call, ret int64) (write, bool) {
	var last write
	found := false
	for _, w := range ws {
		if w.call > ret {
			continue
		}
		if w.ret > call {
			return write{}, false
		}
		if !found || w.ret > last.ret {
			last, found = w, true
		}
	}
	if !found {
		return write{}, false
	}
	for _, w := range ws {
		if w.call <= ret && w != last && w.ret > last.call {
			return write{}, false
		}
	}
	return last, true
}

// Expiry is one abandoned lease as the replicas showed it.
type Expiry struct {
	Key string
	// Deadline is the lease's latest end (the last heartbeat or
	// registration attempt plus TTL and Grace), Due the same pushed past
	// the pauses it fell in: what the promise counts from.
	Deadline, Due int64
	// Gone is the Return of the last read, on any replica, that still
	// served the endpoint after it was abandoned (the abandon itself when
	// none did), and Replica that read's replica (-1: none). Reads of a
	// replica in a store outage (History.InOutage) do not count.
	Gone    int64
	Replica int
}

// Late is how long after its latest end, pauses ignored, the endpoint was
// last served; zero if it was gone by then.
func (e Expiry) Late() time.Duration { return max(0, time.Duration(e.Gone-e.Deadline)) }

// Expiries lists the abandoned leases, but those of endpoints with a
// failed registration (which may have left a lease nobody heartbeats).
func (h *History) Expiries(p Promise) ([]Expiry, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	pauses := slices.Clone(h.Pauses)
	slices.SortFunc(pauses, func(a, b Pause) int { return cmp.Compare(a.Start, b.Start) })
	var out []Expiry
	for key, ops := range h.byKey() {
		i := slices.IndexFunc(ops, func(op Op) bool { return op.Kind == OpAbandon })
		if i < 0 || slices.ContainsFunc(ops, func(op Op) bool { return op.Kind == OpRegister && op.Outcome == Failed }) {
			continue
		}
		t := ops[i].Call
		_, hi := expiryWindow(ops, t, p)
		e := Expiry{Key: h.Keys[key], Deadline: hi, Due: resume(hi, pauses, p), Gone: t, Replica: -1}
		for _, op := range ops {
			served := (op.Kind == OpList && op.Present) || (op.Kind == OpHeartbeat && op.Outcome == Acked)
			if op.Call > t && served && op.Return > e.Gone && !h.InOutage(int(op.Replica), op.Call, op.Return, p.Recovery) {
				e.Gone, e.Replica = op.Return, int(op.Replica)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

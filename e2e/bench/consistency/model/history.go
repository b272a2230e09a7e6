package model

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OpKind is what a recorded operation was.
type OpKind uint8

const (
	// OpRegister is a Register RPC.
	OpRegister OpKind = iota + 1
	// OpDeregister is a Deregister RPC.
	OpDeregister
	// OpHeartbeat is a Heartbeat RPC on Op.Replica.
	OpHeartbeat
	// OpList is one endpoint of a ListEndpoints answer of Op.Replica:
	// Op.Present says whether the answer listed it.
	OpList
	// OpAbandon marks when the workload stopped heartbeating the endpoint
	// on purpose: its lease must expire. Call and Return are that moment.
	OpAbandon
)

func (k OpKind) String() string {
	switch k {
	case OpRegister:
		return "register"
	case OpDeregister:
		return "deregister"
	case OpHeartbeat:
		return "heartbeat"
	case OpList:
		return "list"
	case OpAbandon:
		return "abandon"
	}
	return "op?"
}

// Outcome is how an RPC ended.
type Outcome uint8

const (
	// Acked: the RPC succeeded (a heartbeat: the lease was found).
	Acked Outcome = iota + 1
	// Failed: the RPC failed or timed out; what it did is unknown.
	Failed
	// NotFound: the replica did not hold the lease (a heartbeat answered
	// NotFound, a deregistration of an unknown lease). It changed nothing.
	NotFound
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Failed:
		return "failed"
	case NotFound:
		return "not found"
	}
	return "outcome?"
}

// OutcomeOf maps an RPC's error to its Outcome: nil is Acked, gRPC
// NotFound is NotFound, anything else (UNAVAILABLE, a deadline, a broken
// connection) is Failed.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Acked
	case status.Code(err) == codes.NotFound:
		return NotFound
	default:
		return Failed
	}
}

// Op is one recorded operation, small because a run records millions.
// Times are nanoseconds since the Recorder started (monotonic clock).
type Op struct {
	Kind    OpKind
	Outcome Outcome // OpRegister, OpDeregister, OpHeartbeat
	Present bool    // OpList
	Replica int8    // the replica the RPC went to; -1 for OpAbandon
	Key     int32   // index in History.Keys
	Call    int64
	Return  int64
}

// Outage is a time a replica could not reach the store (Replica -1: none
// could, the store itself was out). It served from memory meanwhile.
type Outage struct {
	Replica    int
	Start, End int64
	Why        string
}

// Pause is a time no lease could expire: no decider (it was killed), the
// store out, or the mass-expiry guard on. Expiry resumes within
// Promise.Resume after End.
type Pause struct {
	Start, End int64
	Why        string
}

// History is what one run recorded: the input of Check.
type History struct {
	Keys    []string
	Ops     []Op
	Outages []Outage
	Pauses  []Pause
	// End is when the recording stopped.
	End int64
}

// Recorder collects a History; safe for concurrent use.
type Recorder struct {
	start time.Time // read-only after NewRecorder

	mu      sync.Mutex // guards the fields below
	keys    []string
	index   map[string]int32
	ops     []Op
	outages []Outage
	pauses  []Pause
}

// NewRecorder starts a recording now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), index: map[string]int32{}}
}

// Now is the time since the recording started, in nanoseconds (monotonic):
// take it just before an RPC (Call) and just after (Return).
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// At converts a time.Time taken by the caller to the recording's clock.
func (r *Recorder) At(t time.Time) int64 { return int64(t.Sub(r.start)) }

// Key returns the index of the endpoint "<service>/<id>", adding it the
// first time.
func (r *Recorder) Key(name string) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.index[name]; ok {
		return i
	}
	i := int32(len(r.keys))
	r.keys = append(r.keys, name)
	r.index[name] = i
	return i
}

// Add records operations.
func (r *Recorder) Add(ops ...Op) {
	r.mu.Lock()
	r.ops = append(r.ops, ops...)
	r.mu.Unlock()
}

// Write records one Register or Deregister RPC sent to replica.
func (r *Recorder) Write(kind OpKind, replica int, key int32, call, ret int64, o Outcome) {
	r.Add(Op{Kind: kind, Outcome: o, Replica: int8(replica), Key: key, Call: call, Return: ret})
}

// Heartbeat records one Heartbeat RPC on replica.
func (r *Recorder) Heartbeat(replica int, key int32, call, ret int64, o Outcome) {
	r.Add(Op{Kind: OpHeartbeat, Outcome: o, Replica: int8(replica), Key: key, Call: call, Return: ret})
}

// Abandon records that the workload stops heartbeating key now.
func (r *Recorder) Abandon(key int32) {
	now := r.Now()
	r.Add(Op{Kind: OpAbandon, Replica: -1, Key: key, Call: now, Return: now})
}

// Outage records that replica (-1: every replica) could not reach the
// store from start to end.
func (r *Recorder) Outage(replica int, start, end int64, why string) {
	r.mu.Lock()
	r.outages = append(r.outages, Outage{Replica: replica, Start: start, End: end, Why: why})
	r.mu.Unlock()
}

// Pause records that no lease could expire from start to end.
func (r *Recorder) Pause(start, end int64, why string) {
	r.mu.Lock()
	r.pauses = append(r.pauses, Pause{Start: start, End: end, Why: why})
	r.mu.Unlock()
}

// History returns a copy of what was recorded so far.
func (r *Recorder) History() *History {
	end := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return &History{
		Keys:    slices.Clone(r.keys),
		Ops:     slices.Clone(r.ops),
		Outages: slices.Clone(r.outages),
		Pauses:  slices.Clone(r.pauses),
		End:     end,
	}
}

// Validate checks that every Op names a key of the history and has Call <=
// Return.
func (h *History) Validate() error {
	for i, op := range h.Ops {
		if op.Key < 0 || int(op.Key) >= len(h.Keys) {
			return fmt.Errorf("op %d: key %d, want 0..%d", i, op.Key, len(h.Keys)-1)
		}
		if op.Return < op.Call {
			return fmt.Errorf("op %d (%s %s): Return %d before Call %d", i, op.Kind, h.Keys[op.Key], op.Return, op.Call)
		}
	}
	return nil
}

package pid

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Snapshot is what a State carries from one Compute to the next, in a form
// that survives JSON, so that a new owner of the service carries on where
// the old one stopped instead of resetting every weight to equal.
type Snapshot struct {
	Endpoints []EndpointSnapshot `json:"endpoints"`
}

// EndpointSnapshot is one endpoint's controller state.
type EndpointSnapshot struct {
	ID string `json:"id"`
	// Weight relative to the service's mean weight, (0, 100].
	Weight float64 `json:"weight"`
	// Integral of the error, within ±100.
	Integral float64 `json:"integral"`
	// PrevError is the error of the last report used, [−1, 1]; HasPrev
	// false: none yet.
	PrevError float64 `json:"prev_error"`
	HasPrev   bool    `json:"has_prev,omitempty"`
	// LastReport is when the report last used was taken; zero: none.
	LastReport time.Time `json:"last_report,omitzero"`
}

// MaxSnapshotEndpoints bounds a Snapshot that Restore accepts.
const (
	MaxSnapshotEndpoints = 1 << 20
	maxEndpointID        = 1024
)

// ErrInvalidSnapshot is wrapped by the errors of Restore and
// UnmarshalSnapshot.
var ErrInvalidSnapshot = errors.New("invalid pid state")

// Snapshot returns a copy of what st carries to the next Compute. It shares
// no memory with st.
func (st *State) Snapshot() Snapshot {
	s := Snapshot{Endpoints: make([]EndpointSnapshot, len(st.eps))}
	for i, e := range st.eps {
		s.Endpoints[i] = EndpointSnapshot{ID: e.id, Weight: e.weight, Integral: e.integral, PrevError: e.prevErr, HasPrev: e.hasPrev, LastReport: e.last}
	}
	return s
}

// UnmarshalSnapshot decodes a Snapshot from JSON, refusing unknown fields
// and trailing data. An error wraps ErrInvalidSnapshot.
func UnmarshalSnapshot(b []byte) (Snapshot, error) {
	var s Snapshot
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Snapshot{}, fmt.Errorf("%w: %w", ErrInvalidSnapshot, err)
	}
	if dec.More() {
		return Snapshot{}, fmt.Errorf("%w: trailing data after the snapshot", ErrInvalidSnapshot)
	}
	return s, nil
}

// Restore replaces st's state with s, after checking it: at most
// MaxSnapshotEndpoints, ids unique and 1..1024 bytes, values finite and in
// range. at is the time of the restore: until a Compute sees a report
// taken after at, it holds every weight (OutcomeWaiting), and reports not
// newer than at are never used. An error wraps ErrInvalidSnapshot, names
// the field, and leaves st as it was.
func (st *State) Restore(s Snapshot, at time.Time) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidSnapshot, field, fmt.Sprintf(format, args...))
	}
	if len(s.Endpoints) > MaxSnapshotEndpoints {
		return bad("endpoints", "%d, want at most %d", len(s.Endpoints), MaxSnapshotEndpoints)
	}
	eps := make([]epState, len(s.Endpoints))
	ids := make(map[string]struct{}, len(s.Endpoints))
	for i, e := range s.Endpoints {
		field := fmt.Sprintf("endpoints[%d]", i)
		switch {
		case e.ID == "" || len(e.ID) > maxEndpointID:
			return bad(field+".id", "%d bytes, want 1..%d", len(e.ID), maxEndpointID)
		case !(e.Weight > 0 && e.Weight <= maxBound):
			return bad(field+".weight", "%v, want (0, %d]", e.Weight, maxBound)
		case !(math.Abs(e.Integral) <= 100):
			return bad(field+".integral", "%v, want -100..100", e.Integral)
		case !(e.PrevError >= -1 && e.PrevError <= 1):
			return bad(field+".prev_error", "%v, want -1..1", e.PrevError)
		}
		if _, dup := ids[e.ID]; dup {
			return bad(field+".id", "%q appears twice", e.ID)
		}
		ids[e.ID] = struct{}{}
		eps[i] = epState{id: e.ID, weight: e.Weight, integral: e.Integral, prevErr: e.PrevError, hasPrev: e.HasPrev, last: e.LastReport}
	}
	st.eps, st.next = eps, st.next[:0]
	clear(st.idx)
	st.restoredAt, st.restored = at, true
	return nil
}

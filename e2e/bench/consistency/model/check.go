package model

import (
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// batch is how many partitions one porcupine call checks: porcupine checks
// a call's partitions in parallel and keeps a cache per partition, so the
// batch bounds the memory of a large history.
const batch = 32

// Result is porcupine's verdict on a history, per partition (endpoint).
type Result struct {
	// Ops is the number of porcupine operations checked.
	Ops int
	// Partitions is the number of endpoints; Ok + Illegal + Unknown of
	// them.
	Partitions, Ok, Illegal, Unknown int
	// IllegalKeys are the endpoints whose history is not linearizable
	// under the promise; UnknownKeys those porcupine did not decide within
	// the timeout.
	IllegalKeys, UnknownKeys []string
	// Took is how long the check ran.
	Took time.Duration
}

// Check checks the history against the promise with porcupine, partition
// by partition (Model.Partition), giving each porcupine call at most
// timeout (0: none).
func Check(h *History, p Promise, timeout time.Duration) (Result, error) {
	start := time.Now()
	ops, err := h.Operations(p)
	if err != nil {
		return Result{}, err
	}
	parts := Model.Partition(ops)
	res := Result{Ops: len(ops), Partitions: len(parts)}
	for i := 0; i < len(parts); i += batch {
		group := parts[i:min(i+batch, len(parts))]
		if porcupine.CheckOperationsTimeout(Model, slices.Concat(group...), timeout) == porcupine.Ok {
			res.Ok += len(group)
			continue
		}
		// Something in the batch is illegal or undecided: find which.
		for _, part := range group {
			key := part[0].Input.(Input).Key
			switch porcupine.CheckOperationsTimeout(Model, part, timeout) {
			case porcupine.Ok:
				res.Ok++
			case porcupine.Illegal:
				res.Illegal++
				res.IllegalKeys = append(res.IllegalKeys, key)
			default:
				res.Unknown++
				res.UnknownKeys = append(res.UnknownKeys, key)
			}
		}
	}
	slices.Sort(res.IllegalKeys)
	slices.Sort(res.UnknownKeys)
	res.Took = time.Since(start)
	return res, nil
}

// Visualize writes porcupine's HTML visualization of the given endpoints'
// histories under p to path, with the history's outages and pauses as
// annotations. It returns porcupine's verdict on them.
func Visualize(h *History, p Promise, keys []string, path string, timeout time.Duration) (porcupine.CheckResult, error) {
	ops, err := h.Operations(p)
	if err != nil {
		return porcupine.Unknown, err
	}
	ops = slices.DeleteFunc(ops, func(op porcupine.Operation) bool {
		return !slices.Contains(keys, op.Input.(Input).Key)
	})
	if len(ops) == 0 {
		return porcupine.Unknown, fmt.Errorf("visualize: no operations of %v", keys)
	}
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	var notes []porcupine.Annotation
	for _, o := range h.Outages {
		who := "every replica"
		if o.Replica >= 0 {
			who = fmt.Sprintf("r%d", o.Replica)
		}
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: o.Start, End: o.End,
			Description: "store outage: " + who, Details: o.Why, BackgroundColor: "#f7d0d0"})
	}
	for _, ps := range h.Pauses {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: ps.Start, End: ps.End,
			Description: "expiry paused", Details: ps.Why, BackgroundColor: "#f7ecc0"})
	}
	info.AddAnnotations(notes)
	if err := porcupine.VisualizePath(Model, info, path); err != nil {
		return res, fmt.Errorf("visualize %s: %w", path, err)
	}
	return res, nil
}

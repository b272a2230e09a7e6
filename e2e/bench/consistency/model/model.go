package model

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// Kind is what a model operation does to one endpoint.
type Kind uint8

const (
	// Register is a client's Register RPC: the endpoint is served after it.
	Register Kind = iota + 1
	// Deregister is a client's Deregister RPC: the endpoint is not served
	// after it.
	Deregister
	// Expire is the system ending a lease its client stopped heartbeating:
	// the endpoint is not served after it.
	Expire
	// Read is one replica's answer: whether it serves the endpoint.
	Read
)

func (k Kind) String() string {
	switch k {
	case Register:
		return "register"
	case Deregister:
		return "deregister"
	case Expire:
		return "expire"
	case Read:
		return "read"
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Input is the porcupine.Operation.Input of the model.
type Input struct {
	Kind Kind
	// Key is the endpoint, "<service>/<endpoint id>": the partition.
	Key string
	// Replica is the replica a Read asked (0, 1, ...); -1 otherwise.
	Replica int
}

// Output is the porcupine.Operation.Output of the model: what a Read
// returned. Other kinds have the zero Output.
type Output struct {
	Present bool
}

// Infinity is the Return of an operation whose outcome is unknown (its RPC
// failed or timed out): porcupine may linearize it at any point after its
// Call, or after every other operation, that is never.
const Infinity = int64(math.MaxInt64)

// Model is the promise as a porcupine model. The state of a partition is a
// bool: the endpoint is served. Step is pure.
var Model = porcupine.Model{
	Partition: partition,
	Init:      func() any { return false },
	Step:      step,
	Equal:     func(a, b any) bool { return a.(bool) == b.(bool) },
	Hash: func(s any) uint64 {
		if s.(bool) {
			return 1
		}
		return 0
	},
	DescribeOperation: describe,
	DescribeState: func(s any) string {
		if s.(bool) {
			return "served"
		}
		return "not served"
	},
	DescribeOperationMetadata: func(m any) string {
		if m == nil {
			return ""
		}
		return fmt.Sprint(m)
	},
}

// step is the sequential specification: writes always apply; a read must
// return the state.
func step(state, input, output any) (bool, any) {
	in := input.(Input)
	switch in.Kind {
	case Register:
		return true, true
	case Deregister, Expire:
		return true, false
	case Read:
		return output.(Output).Present == state.(bool), state
	}
	return false, state
}

// partition splits a history by endpoint, keeping each endpoint's
// operations in their order in the history.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(Input).Key
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}

func describe(input, output any) string {
	in := input.(Input)
	switch in.Kind {
	case Read:
		got := "not served"
		if output.(Output).Present {
			got = "served"
		}
		return fmt.Sprintf("r%d read %s -> %s", in.Replica, in.Key, got)
	default:
		return fmt.Sprintf("%s %s", in.Kind, in.Key)
	}
}

package model

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStep(t *testing.T) {
	tests := []struct {
		name      string
		state     bool
		in        Input
		out       Output
		ok, after bool
	}{
		{name: "register_absent", state: false, in: Input{Kind: Register}, ok: true, after: true},
		{name: "register_served", state: true, in: Input{Kind: Register}, ok: true, after: true},
		{name: "deregister_served", state: true, in: Input{Kind: Deregister}, ok: true, after: false},
		{name: "deregister_absent", state: false, in: Input{Kind: Deregister}, ok: true, after: false},
		{name: "expire_served", state: true, in: Input{Kind: Expire}, ok: true, after: false},
		{name: "expire_absent", state: false, in: Input{Kind: Expire}, ok: true, after: false},
		{name: "read_served_served", state: true, in: Input{Kind: Read, Replica: 1}, out: Output{Present: true}, ok: true, after: true},
		{name: "read_absent_absent", state: false, in: Input{Kind: Read, Replica: 2}, out: Output{Present: false}, ok: true, after: false},
		{name: "read_served_but_absent", state: false, in: Input{Kind: Read}, out: Output{Present: true}, ok: false, after: false},
		{name: "read_absent_but_served", state: true, in: Input{Kind: Read}, out: Output{Present: false}, ok: false, after: true},
		{name: "unknown_kind", state: true, in: Input{Kind: 0}, ok: false, after: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, after := Model.Step(tt.state, tt.in, tt.out)
			if ok != tt.ok || after.(bool) != tt.after {
				t.Errorf("Step(%v, %v, %v) = %v, %v, want %v, %v", tt.state, tt.in, tt.out, ok, after, tt.ok, tt.after)
			}
		})
	}
}

func TestPartition(t *testing.T) {
	op := func(key string, call int64) porcupine.Operation {
		return porcupine.Operation{Input: Input{Kind: Read, Key: key}, Output: Output{}, Call: call, Return: call}
	}
	parts := Model.Partition([]porcupine.Operation{op("a", 1), op("b", 2), op("a", 3), op("c", 4), op("b", 5)})
	var got [][]int64
	for _, p := range parts {
		var calls []int64
		for _, o := range p {
			calls = append(calls, o.Call)
		}
		got = append(got, calls)
	}
	if want := [][]int64{{1, 3}, {2, 5}, {4}}; !cmp.Equal(got, want) {
		t.Errorf("Partition calls = %v, want %v", got, want)
	}
}

func TestDescribe(t *testing.T) {
	if got, want := Model.DescribeOperation(Input{Kind: Read, Key: "svc/a", Replica: 2}, Output{Present: true}), "r2 read svc/a -> served"; got != want {
		t.Errorf("DescribeOperation = %q, want %q", got, want)
	}
	if got, want := Model.DescribeOperation(Input{Kind: Deregister, Key: "svc/a", Replica: -1}, Output{}), "deregister svc/a"; got != want {
		t.Errorf("DescribeOperation = %q, want %q", got, want)
	}
	if got, want := Model.DescribeState(true), "served"; got != want {
		t.Errorf("DescribeState(true) = %q, want %q", got, want)
	}
}

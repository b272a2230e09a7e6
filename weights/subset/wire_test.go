package subset

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestJSONRoundTrip: an assignment survives its JSON (the plan record's
// field), groups of several replicas and edge weights included.
func TestJSONRoundTrip(t *testing.T) {
	in := Input{
		Size: 3, Mode: Deterministic, Seed: "svc",
		Slots:      map[Group]int{{"r0", "a"}: 7, {"r1", "a"}: 6, {"r1", "b"}: 4},
		Localities: map[string][]string{"a": ids("a", 6), "b": ids("b", 4)},
	}
	a := mustAssign(t, nil, in)
	weighted := 0
	for g, n := range a.Groups() {
		for i := range n {
			if a.Weights(g, i) != nil {
				weighted++
			}
		}
	}
	if weighted == 0 {
		t.Fatal("no slot has edge weights: the round trip would not cover them")
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var got Assignment
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(a) {
		t.Errorf("round trip changed the assignment: %s", b)
	}
	// It is the same as a previous assignment for the next Assign.
	if next := mustAssign(t, &got, in); !next.Equal(a) {
		t.Errorf("Assign from the decoded assignment moved %d pairs, want 0", changed(a, next))
	}
}

func TestJSONBad(t *testing.T) {
	for _, tc := range []struct{ in, field string }{
		{`{"size":0,"mode":"deterministic"}`, "subsets.size"},
		{`{"size":3,"mode":"ring"}`, "subsets.mode"},
		{`{"size":3,"mode":"random","endpoints":["a"],"groups":[{"zone":"z","slots":[[1]]}]}`, "subsets.groups[0].slots[0][0]"},
		{`{"size":3,"mode":"random","endpoints":["a"],"groups":[{"zone":"z","slots":[[0]]},{"zone":"z","slots":[]}]}`, "subsets.groups[1]"},
		{`{"size":3,"mode":"random","endpoints":["a"],"groups":[{"zone":"z","slots":[[-1]]}]}`, "subsets.groups[0].slots[0][0]"},
		{`[1,2]`, "subsets"},
		{`{"size":2,"mode":"deterministic","endpoints":["a","b"],"groups":[{"zone":"z","slots":[[0,1]],"weights":[]}]}`, "subsets.groups[0].weights"},
		{`{"size":2,"mode":"deterministic","endpoints":["a","b"],"groups":[{"zone":"z","slots":[[0,1]],"weights":[[1]]}]}`, "subsets.groups[0].weights[0]"},
		{`{"size":2,"mode":"deterministic","endpoints":["a","b"],"groups":[{"zone":"z","slots":[[0,1]],"weights":[[0,2]]}]}`, "subsets.groups[0].weights[0]"},
		{`{"size":2,"mode":"deterministic","endpoints":["a","b"],"groups":[{"zone":"z","slots":[[0,1]],"weights":[[2.5,1]]}]}`, "subsets.groups[0].weights[0]"},
		{`{"size":2,"mode":"deterministic","endpoints":["a","b"],"groups":[{"zone":"z","slots":[[0,0]],"weights":[[1,1]]}]}`, "subsets.groups[0].weights[0]"},
	} {
		var a Assignment
		err := json.Unmarshal([]byte(tc.in), &a)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Unmarshal(%s) = %v, want ErrInvalid naming %s", tc.in, err, tc.field)
		}
	}
}

// FuzzAssignmentJSON: any bytes decode to an error or to an assignment
// that encodes and decodes to itself.
func FuzzAssignmentJSON(f *testing.F) {
	f.Add([]byte(`{"size":2,"mode":"deterministic","endpoints":["a","b"],"groups":[{"replica":"r0","zone":"z","slots":[[0,1],[1]]}]}`))
	f.Add([]byte(`{"size":1,"mode":"random","endpoints":[],"groups":[]}`))
	f.Add([]byte(`{"size":2,"mode":"deterministic","endpoints":["a","b","c"],"groups":[{"zone":"z","slots":[[1,0],[2,0]],"weights":[[1.25,0.75],[]]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a Assignment
		if err := a.UnmarshalJSON(b); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		again, err := json.Marshal(&a)
		if err != nil {
			t.Fatal(err)
		}
		var b2 Assignment
		if err := json.Unmarshal(again, &b2); err != nil || !b2.Equal(&a) {
			t.Fatalf("re-encoding %s gave %s (%v), not the same assignment", b, again, err)
		}
	})
}

// TestJSONWithoutWeights: a record of a release before edge weights
// decodes with weight 1 everywhere, and the weights of a slot whose ids
// come out of order in the record follow their ids.
func TestJSONWithoutWeights(t *testing.T) {
	var a Assignment
	if err := json.Unmarshal([]byte(`{"size":2,"mode":"deterministic","endpoints":["a","b","c"],"groups":[{"zone":"z","slots":[[0,1],[1,2]]}]}`), &a); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if w := a.Weights(Group{Zone: "z"}, i); w != nil {
			t.Errorf("slot %d weights %v, want none", i, w)
		}
	}
	if err := json.Unmarshal([]byte(`{"size":2,"mode":"deterministic","endpoints":["a","b","c"],"groups":[{"zone":"z","slots":[[2,0]],"weights":[[1.5,0.5]]}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if sub, w := a.Subset(Group{Zone: "z"}, 0), a.Weights(Group{Zone: "z"}, 0); len(sub) != 2 || sub[0] != "a" || w[0] != 0.5 || w[1] != 1.5 {
		t.Errorf("slot 0 = %v weights %v, want [a c] weights [0.5 1.5]", sub, w)
	}
}

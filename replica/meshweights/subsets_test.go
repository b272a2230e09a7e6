package meshweights

import (
	"errors"
	"strings"
	"testing"

	"github.com/spillway/spillway/weights/subset"
)

// TestPlanRecordSubsets: a plan's subsets survive its record, and a
// record with broken subsets is refused naming the field.
func TestPlanRecordSubsets(t *testing.T) {
	a, err := subset.Assign(nil, subset.Input{
		Size: 2, Mode: subset.Deterministic, Seed: "svc",
		Slots:      map[subset.Group]int{{Replica: "r1", Zone: "a"}: 3, {Replica: "r2", Zone: "a"}: 2},
		Localities: map[string][]string{"a": {"e1", "e2", "e3"}, "b": {"e4", "e5", "e6"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := validRecord()
	rec.Subsets = a
	got, err := DecodePlan(PlanKey("svc"), encode(t, &rec))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Subsets.Equal(a) {
		t.Errorf("subsets changed through the record")
	}
	if planKey(rec.Result, nil, false)+subsetKey(a) == planKey(rec.Result, nil, false) {
		t.Errorf("the plan key does not see the subsets: a change of subsets would not be pushed")
	}
	raw := strings.Replace(string(encode(t, &rec)), `"size":2`, `"size":0`, 1)
	if _, err := DecodePlan(PlanKey("svc"), []byte(raw)); !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), "subsets.size") {
		t.Errorf("DecodePlan of a record with subsets.size 0 = %v, want ErrBadRecord naming subsets.size", err)
	}
}

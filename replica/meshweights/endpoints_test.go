package meshweights

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/weights"
)

// TestRecordEndpoints: a plan's PID endpoint weights travel in the record
// (round trip), are checked, are left out without PID, and count in the
// key that decides Gen.
func TestRecordEndpoints(t *testing.T) {
	rec := validRecord()
	if s := string(encode(t, &rec)); strings.Contains(s, "endpoints") || strings.Contains(s, `"pid"`) {
		t.Errorf("record without PID encodes %s; want no endpoints or pid", s)
	}
	rec.Endpoints = map[string]weights.EndpointWeight{
		"a-0": {Zone: "a", Weight: 12000, PIDWeight: 12000, Utilization: 0.4, Age: 2 * time.Second, Status: "fresh", Error: 0.2, P: 0.1},
		"b-0": {Zone: "b", Weight: 8000, PIDWeight: 8000, Status: "missing"},
	}
	rec.PID = &weights.PIDExplain{Outcome: "computed", Setpoint: 0.5, Known: 2, Missing: 1}
	got, err := DecodePlan(PlanKey("svc"), encode(t, &rec))
	if err != nil {
		t.Fatalf("record with endpoints: %v", err)
	}
	if diff := cmp.Diff(&rec, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	bad := rec
	bad.Endpoints = map[string]weights.EndpointWeight{"a-0": {Weight: 0}}
	if _, err := DecodePlan(PlanKey("svc"), encode(t, &bad)); !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), "endpoints") {
		t.Errorf("weight 0: %v, want ErrBadRecord naming endpoints", err)
	}
	k1 := planKey(rec.Result, rec.Endpoints, false)
	moved := map[string]weights.EndpointWeight{"a-0": {Weight: 12001}, "b-0": {Weight: 8000}}
	for name, k := range map[string]string{
		"no endpoints": planKey(rec.Result, nil, false),
		"weight moved": planKey(rec.Result, moved, false),
		"pid alone":    planKey(rec.Result, rec.Endpoints, true),
	} {
		if k == k1 {
			t.Errorf("%s: same key as the plan", name)
		}
	}
	if planKey(rec.Result, nil, false) != vectorKey(rec.Result) {
		t.Error("without endpoints the key is not vectorKey's")
	}
}

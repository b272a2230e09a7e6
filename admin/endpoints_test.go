package admin

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/weights"
)

// TestWeightsEndpoints: a plan with PID weights explains every endpoint
// (sorted by zone, then id) and the round; one without has neither.
func TestWeightsEndpoints(t *testing.T) {
	f := newFake()
	plans := fakePlans{
		"payments": {
			Gen: 9, Result: workedExample(), Source: weights.SourceLocal,
			Endpoints: map[string]weights.EndpointWeight{
				"b-1": {Zone: "b", Weight: 9000, PIDWeight: 8000, Utilization: 0.7, Age: 1500 * time.Millisecond, Status: "fresh", Error: -0.2, P: -0.1, I: -0.004},
				"a-0": {Zone: "a", Weight: 12000, PIDWeight: 13000, Utilization: 0.3, Age: time.Second, Status: "fresh", Error: 0.4, P: 0.2, I: 0.008, D: 0.01},
				"b-0": {Zone: "b", Weight: 10000, PIDWeight: 10000, Status: "missing"},
			},
			PID: &weights.PIDExplain{Outcome: "computed", Setpoint: 0.5, Known: 3, Missing: 1,
				Blend: &weights.Blend{From: "zone-aware", To: "pid", Percent: 30}},
		},
		"search": {Gen: 3, Result: staleExample(), Source: weights.SourceLocal},
	}
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: plans, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	c := startGRPC(t, a)
	got, err := c.Weights(context.Background(), &pb.WeightsRequest{Service: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*pb.EndpointWeight{
		{Id: "a-0", Zone: "a", Weight: 12000, PidWeight: 13000, Utilization: 0.3, AgeSeconds: 1, Status: "fresh", Error: 0.4, P: 0.2, I: 0.008, D: 0.01},
		{Id: "b-0", Zone: "b", Weight: 10000, PidWeight: 10000, Status: "missing"},
		{Id: "b-1", Zone: "b", Weight: 9000, PidWeight: 8000, Utilization: 0.7, AgeSeconds: 1.5, Status: "fresh", Error: -0.2, P: -0.1, I: -0.004},
	}
	if diff := cmp.Diff(want, got.GetEndpoints(), protocmp.Transform()); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	wantRound := &pb.PIDRound{Outcome: "computed", Setpoint: 0.5, Known: 3, Missing: 1, BlendFrom: "zone-aware", BlendTo: "pid", BlendPercent: 30}
	if diff := cmp.Diff(wantRound, got.GetPid(), protocmp.Transform()); diff != "" {
		t.Errorf("pid (-want +got):\n%s", diff)
	}
	if len(got.GetRoutes()) != 4 {
		t.Errorf("%d routes, want the zone-aware plan's 4 alongside", len(got.GetRoutes()))
	}
	other, err := c.Weights(context.Background(), &pb.WeightsRequest{Service: "search"})
	if err != nil {
		t.Fatal(err)
	}
	if other.GetEndpoints() != nil || other.GetPid() != nil {
		t.Errorf("zone-aware only: endpoints %v, pid %v; want none", other.GetEndpoints(), other.GetPid())
	}

	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/weights?service=payments", nil))
	var body struct {
		Endpoints []map[string]any `json:"endpoints"`
		PID       map[string]any   `json:"pid"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET /v1/weights: %v: %s", err, rec.Body)
	}
	if len(body.Endpoints) != 3 || body.Endpoints[0]["id"] != "a-0" || body.Endpoints[0]["age_seconds"] != 1.0 ||
		body.Endpoints[0]["pid_weight"] != 13000.0 || body.PID["outcome"] != "computed" || body.PID["blend_percent"] != 30.0 {
		t.Errorf("GET /v1/weights endpoints %v pid %v: want snake_case members as in the proto", body.Endpoints, body.PID)
	}
}

package admin

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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

// TestWeightsGuard: a PID service's endpoints carry their request rate,
// error rate, latency and effective utilization, and a guarded one why
// (errors or latency), the limit it was above and that in words from the
// round's medians; the round carries the medians and the guarded count.
// An endpoint without requests has none of it.
func TestWeightsGuard(t *testing.T) {
	f := newFake()
	plans := fakePlans{
		"payments": {
			Gen: 4, Result: workedExample(), Source: weights.SourceLocal,
			Endpoints: map[string]weights.EndpointWeight{
				"a-0": {Zone: "a", Weight: 12000, PIDWeight: 12000, Utilization: 0.5, Age: time.Second, Status: "fresh",
					RPS: 100, ErrorRate: 0.01, LatencyMs: 20, Effective: 0.51},
				"a-1": {Zone: "a", Weight: 1500, PIDWeight: 1500, Utilization: 0.1, Age: time.Second, Status: "fresh",
					RPS: 80, ErrorRate: 0.4, LatencyMs: 25, Effective: 0.5, Guard: "errors"},
				"b-0": {Zone: "b", Weight: 5000, PIDWeight: 5000, Utilization: 0.6, Age: time.Second, Status: "fresh",
					RPS: 90, ErrorRate: 0.02, LatencyMs: 900, Effective: 0.62, Guard: "latency"},
				"b-1": {Zone: "b", Weight: 11500, PIDWeight: 11500, Utilization: 0.4, Age: time.Second, Status: "fresh"},
			},
			PID: &weights.PIDExplain{Outcome: "computed", Setpoint: 0.5, Known: 4,
				MedianErrorRate: 0.02, MedianLatencyMs: 25, Guarded: 2},
		},
	}
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: plans, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := startGRPC(t, a).Weights(context.Background(), &pb.WeightsRequest{Service: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*pb.EndpointWeight{
		{Id: "a-0", Zone: "a", Weight: 12000, PidWeight: 12000, Utilization: 0.5, AgeSeconds: 1, Status: "fresh",
			Rps: 100, ErrorRate: 0.01, LatencyMs: 20, Effective: 0.51},
		{Id: "a-1", Zone: "a", Weight: 1500, PidWeight: 1500, Utilization: 0.1, AgeSeconds: 1, Status: "fresh",
			Rps: 80, ErrorRate: 0.4, LatencyMs: 25, Effective: 0.5, Guard: "errors", GuardLimit: 0.07,
			GuardExplain: "error rate 40.0% above the limit 7.0% (max(2 × median 2.0%, median + 5 points))"},
		{Id: "b-0", Zone: "b", Weight: 5000, PidWeight: 5000, Utilization: 0.6, AgeSeconds: 1, Status: "fresh",
			Rps: 90, ErrorRate: 0.02, LatencyMs: 900, Effective: 0.62, Guard: "latency", GuardLimit: 75,
			GuardExplain: "latency 900 ms above the limit 75 ms (max(3 × median 25 ms, median + 50 ms))"},
		{Id: "b-1", Zone: "b", Weight: 11500, PidWeight: 11500, Utilization: 0.4, AgeSeconds: 1, Status: "fresh"},
	}
	if diff := cmp.Diff(want, got.GetEndpoints(), protocmp.Transform(), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	wantRound := &pb.PIDRound{Outcome: "computed", Setpoint: 0.5, Known: 4, MedianErrorRate: 0.02, MedianLatencyMs: 25, Guarded: 2}
	if diff := cmp.Diff(wantRound, got.GetPid(), protocmp.Transform()); diff != "" {
		t.Errorf("pid (-want +got):\n%s", diff)
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
	if len(body.Endpoints) != 4 {
		t.Fatalf("GET /v1/weights: %d endpoints, want 4: %s", len(body.Endpoints), rec.Body)
	}
	e := body.Endpoints[1]
	if e["guard"] != "errors" || e["error_rate"] != 0.4 || e["latency_ms"] != 25.0 || e["rps"] != 80.0 || e["guard_explain"] != want[1].GuardExplain ||
		body.Endpoints[3]["guard"] != "" || body.PID["median_error_rate"] != 0.02 || body.PID["median_latency_ms"] != 25.0 || body.PID["guarded"] != 2.0 {
		t.Errorf("GET /v1/weights endpoints %v pid %v: want the guard in snake_case members as in the proto", body.Endpoints, body.PID)
	}
}

// TestGuardWhyUnknown: a guard reason this release does not know (a
// newer owner's plan) is shown as it is, with no limit.
func TestGuardWhyUnknown(t *testing.T) {
	limit, why := guardWhy(weights.EndpointWeight{Guard: "overload"}, &weights.PIDExplain{MedianErrorRate: 0.1})
	if limit != 0 || why != "overload" {
		t.Errorf("guardWhy(overload) = %v, %q; want 0, \"overload\"", limit, why)
	}
	if limit, why := guardWhy(weights.EndpointWeight{RPS: 10, ErrorRate: 0.5}, nil); limit != 0 || why != "" {
		t.Errorf("guardWhy(not guarded) = %v, %q; want 0, \"\"", limit, why)
	}
}

package load

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway/spillway/registry"
)

func goodUtilization() UtilizationReport {
	return UtilizationReport{Service: "web", EndpointID: "w1", CPU: 0.4, InFlight: 32, Limit: 64, Interval: time.Second}
}

// TestUtilizationValidation: each bad field is refused naming it, and
// nothing is stored.
func TestUtilizationValidation(t *testing.T) {
	store := registry.NewStore()
	if _, err := store.Apply(registry.Upsert("web", endpointIn("w1", "a"))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		edit  func(*UtilizationReport)
		field string
	}{
		{"service-empty", func(r *UtilizationReport) { r.Service = "" }, "service"},
		{"service-bad", func(r *UtilizationReport) { r.Service = "Web!" }, "service"},
		{"endpoint-empty", func(r *UtilizationReport) { r.EndpointID = "" }, "endpoint_id"},
		{"endpoint-bad", func(r *UtilizationReport) { r.EndpointID = "-x" }, "endpoint_id"},
		{"cpu-nan", func(r *UtilizationReport) { r.CPU = math.NaN() }, "cpu"},
		{"cpu-inf", func(r *UtilizationReport) { r.CPU = math.Inf(1) }, "cpu"},
		{"cpu-negative", func(r *UtilizationReport) { r.CPU = -0.01 }, "cpu"},
		{"cpu-above-burst", func(r *UtilizationReport) { r.CPU = 1.51 }, "cpu"},
		{"limit-zero-with-inflight", func(r *UtilizationReport) { r.Limit = 0 }, "limit"},
		{"limit-huge", func(r *UtilizationReport) { r.Limit = MaxLimit + 1 }, "limit"},
		{"inflight-huge", func(r *UtilizationReport) { r.InFlight = MaxLimit + 1 }, "in_flight"},
		{"interval-zero", func(r *UtilizationReport) { r.Interval = 0 }, "interval_ms"},
		{"interval-long", func(r *UtilizationReport) { r.Interval = 6 * time.Minute }, "interval_ms"},
		{"rps-negative", func(r *UtilizationReport) { r.RPS = -1 }, "rps"},
		{"rps-nan", func(r *UtilizationReport) { r.RPS = math.NaN() }, "rps"},
		{"rps-huge", func(r *UtilizationReport) { r.RPS = MaxRPS * 2 }, "rps"},
		{"eps-above-rps", func(r *UtilizationReport) { r.RPS, r.EPS = 10, 11 }, "eps"},
		{"eps-without-rps", func(r *UtilizationReport) { r.EPS = 1 }, "eps"},
		{"eps-negative", func(r *UtilizationReport) { r.RPS, r.EPS = 10, -1 }, "eps"},
		{"eps-inf", func(r *UtilizationReport) { r.RPS, r.EPS = 10, math.Inf(1) }, "eps"},
		{"latency-negative", func(r *UtilizationReport) { r.LatencyMs = -1 }, "latency_ms"},
		{"latency-nan", func(r *UtilizationReport) { r.LatencyMs = math.NaN() }, "latency_ms"},
		{"latency-huge", func(r *UtilizationReport) { r.LatencyMs = MaxLatencyMs + 1 }, "latency_ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := NewUtilizationTable(store, nil)
			r := goodUtilization()
			tc.edit(&r)
			err := tab.Record(r, time.Unix(1000, 0), nil)
			var fe *registry.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Record = %v, want a FieldError naming %s", err, tc.field)
			}
			if n := tab.Len(); n != 0 {
				t.Errorf("Len = %d after a refused report, want 0", n)
			}
			if got := testutil.ToFloat64(tab.results.WithLabelValues(UtilizationInvalid)); got != 1 {
				t.Errorf("invalid count = %v, want 1", got)
			}
		})
	}
}

// TestUtilizationTable: accepted numbers come back; unknown endpoints are
// refused; entries go when the endpoint leaves or falls silent.
func TestUtilizationTable(t *testing.T) {
	store := registry.NewStore()
	if _, err := store.Apply(
		registry.Upsert("web", endpointIn("w1", "a")),
		registry.Upsert("web", endpointIn("w2", "b")),
	); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	tab := NewUtilizationTable(store, reg)
	t0 := time.Unix(1000, 0)
	r1 := goodUtilization()
	r1.RPS, r1.EPS, r1.LatencyMs = 120, 6, 14.5                                                    // a backend that counts its RPCs
	r2 := UtilizationReport{Service: "web", EndpointID: "w2", CPU: 0.9, Interval: 2 * time.Second} // agent: in-flight and requests unknown
	for _, r := range []UtilizationReport{r1, r2} {
		if err := tab.Record(r, t0, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []UtilizationReport{{Service: "web", EndpointID: "w9", CPU: 0.1, Interval: time.Second}, {Service: "api", EndpointID: "w1", CPU: 0.1, Interval: time.Second}} {
		if err := tab.Record(r, t0, nil); !errors.Is(err, ErrUnknownEndpoint) {
			t.Errorf("Record(%s/%s) = %v, want ErrUnknownEndpoint", r.Service, r.EndpointID, err)
		}
	}
	checkErr := errors.New("not yours")
	if err := tab.Record(UtilizationReport{Service: "web", EndpointID: "w1", CPU: 1, Interval: time.Second}, t0, func(*registry.Endpoint) error { return checkErr }); !errors.Is(err, checkErr) {
		t.Errorf("Record with a failing check = %v, want %v", err, checkErr)
	}
	want := []EndpointUtilization{
		{ID: "w1", CPU: 0.4, InFlight: 32, Limit: 64, Utilization: 0.5, Reported: t0, Interval: time.Second, RPS: 120, EPS: 6, LatencyMs: 14.5},
		{ID: "w2", CPU: 0.9, Utilization: 0.9, Reported: t0, Interval: 2 * time.Second},
	}
	if diff := cmp.Diff(want, tab.Utilizations("web", t0.Add(time.Second))); diff != "" {
		t.Errorf("Utilizations (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(tab.results.WithLabelValues(UtilizationAccepted)); got != 2 {
		t.Errorf("accepted = %v, want 2", got)
	}
	if got := testutil.ToFloat64(tab.results.WithLabelValues(UtilizationUnknownEndpoint)); got != 2 {
		t.Errorf("unknown_endpoint = %v, want 2", got)
	}

	// All sends only what an owner would use: w1 (1 s interval) is stale
	// 4 s later, w2 (2 s interval) is not.
	all := tab.All(t0.Add(4 * time.Second))
	if got := all["web"]; len(got) != 1 || got[0].ID != "w2" {
		t.Errorf("All 4 s later = %+v, want only w2 (w1 is older than three of its intervals)", all)
	}
	if got := tab.All(t0.Add(-time.Second)); len(got) != 0 {
		t.Errorf("All before the reports arrived = %+v, want none", got)
	}

	// w2 leaves the registry: forgotten.
	if _, err := store.Apply(registry.Remove("web", "w2", registry.SourceStatic)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[:1], tab.Utilizations("web", t0.Add(time.Second))); diff != "" {
		t.Errorf("Utilizations after w2 left (-want +got):\n%s", diff)
	}
	// w1 silent for more than 5 min: forgotten by Prune.
	tab.Prune(t0.Add(UtilizationSilent + time.Second))
	if n := tab.Len(); n != 0 {
		t.Errorf("Len = %d after 5 min of silence, want 0", n)
	}
}

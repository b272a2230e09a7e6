package registryapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/registry"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// addStatic puts a non-VM endpoint (no lease) in the store.
func (h *harness) addStatic(t testing.TB, service, id string) {
	t.Helper()
	if _, err := h.store.Apply(registry.Upsert(service, staticEndpoint(id))); err != nil {
		t.Fatal(err)
	}
}

func staticEndpoint(id string) *registry.Endpoint {
	return &registry.Endpoint{ID: id, Address: netip.MustParseAddr("10.1.0.1"),
		Ports:  []registry.Port{{Name: "grpc", Number: 8080, Protocol: registry.TCP}},
		Health: registry.Healthy, Source: registry.SourceKubernetes}
}

// reportOne sends one report on a fresh stream and returns the status.
func (h *harness) reportOne(t *testing.T, r *pb.UtilizationReport) (*pb.UtilizationAck, error) {
	t.Helper()
	stream, err := h.client.ReportUtilization(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(r); err != nil {
		t.Fatal(err)
	}
	return stream.CloseAndRecv()
}

func goodUtilization() *pb.UtilizationReport {
	return &pb.UtilizationReport{Service: "search", EndpointId: "s1", Cpu: 0.5, InFlight: 10, Limit: 64, IntervalMs: 1000}
}

// TestUtilizationBadInput: each bad field of a report gets InvalidArgument
// naming it, over gRPC and JSON, and nothing is stored.
func TestUtilizationBadInput(t *testing.T) {
	h := newHarness(t)
	h.addStatic(t, "search", "s1")
	tests := []struct {
		name  string
		edit  func(*pb.UtilizationReport)
		field string
	}{
		{"no-service", func(r *pb.UtilizationReport) { r.Service = "" }, "service"},
		{"bad-service", func(r *pb.UtilizationReport) { r.Service = "a..b" }, "service"},
		{"no-endpoint", func(r *pb.UtilizationReport) { r.EndpointId = "" }, "endpoint_id"},
		{"bad-endpoint", func(r *pb.UtilizationReport) { r.EndpointId = "s_1" }, "endpoint_id"},
		{"cpu-nan", func(r *pb.UtilizationReport) { r.Cpu = math.NaN() }, "cpu"},
		{"cpu-negative", func(r *pb.UtilizationReport) { r.Cpu = -1 }, "cpu"},
		{"cpu-too-high", func(r *pb.UtilizationReport) { r.Cpu = 2 }, "cpu"},
		{"limit-zero-with-in-flight", func(r *pb.UtilizationReport) { r.Limit = 0 }, "limit"},
		{"limit-too-high", func(r *pb.UtilizationReport) { r.Limit = 1 << 21 }, "limit"},
		{"in-flight-too-high", func(r *pb.UtilizationReport) { r.InFlight = 1 << 21 }, "in_flight"},
		{"no-interval", func(r *pb.UtilizationReport) { r.IntervalMs = 0 }, "interval_ms"},
		{"interval-too-long", func(r *pb.UtilizationReport) { r.IntervalMs = 600_000 }, "interval_ms"},
		{"lease-too-long", func(r *pb.UtilizationReport) { r.LeaseId = strings.Repeat("x", 65) }, "lease_id"},
		{"rps-negative", func(r *pb.UtilizationReport) { r.Rps = -1 }, "rps"},
		{"eps-above-rps", func(r *pb.UtilizationReport) { r.Rps, r.Eps = 10, 20 }, "eps"},
		{"latency-negative", func(r *pb.UtilizationReport) { r.LatencyMs = -5 }, "latency_ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := goodUtilization()
			tc.edit(r)
			_, err := h.reportOne(t, r)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field+":") {
				t.Errorf("gRPC status = %v %q, want InvalidArgument naming %s", st.Code(), st.Message(), tc.field)
			}
			if !math.IsNaN(r.Cpu) { // JSON has no NaN literal
				body := fmt.Sprintf(`{"service":%q,"endpoint_id":%q,"lease_id":%q,"cpu":%v,"in_flight":%d,"limit":%d,"interval_ms":%d,"rps":%v,"eps":%v,"latency_ms":%v}`,
					r.Service, r.EndpointId, r.LeaseId, r.Cpu, r.InFlight, r.Limit, r.IntervalMs, r.Rps, r.Eps, r.LatencyMs)
				code, m := h.post(t, "/v1/utilization", body)
				if code != http.StatusBadRequest || m["field"] != tc.field {
					t.Errorf("HTTP = %d %v, want 400 naming %s", code, m, tc.field)
				}
			}
			if n := h.util.Len(); n != 0 {
				t.Errorf("table holds %d entries after refused reports, want 0", n)
			}
		})
	}
}

// TestUtilizationOwnership: a report must name an endpoint in the
// registry, and for a VM endpoint the lease that holds it.
func TestUtilizationOwnership(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	reg, err := h.client.Register(ctx, goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	other := goodRequest()
	other.Endpoint.Address = "10.0.0.2"
	reg2, err := h.client.Register(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	vm := func(lease string) *pb.UtilizationReport {
		return &pb.UtilizationReport{Service: "payments", EndpointId: reg.EndpointId, LeaseId: lease, Cpu: 0.25, IntervalMs: 1000}
	}
	tests := []struct {
		name  string
		r     *pb.UtilizationReport
		code  codes.Code
		field string
	}{
		{"unknown-endpoint", &pb.UtilizationReport{Service: "payments", EndpointId: "nope", Cpu: 0.1, IntervalMs: 1000}, codes.NotFound, ""},
		{"unknown-service", &pb.UtilizationReport{Service: "ghost", EndpointId: "nope", Cpu: 0.1, IntervalMs: 1000}, codes.NotFound, ""},
		{"vm-without-lease", vm(""), codes.InvalidArgument, "lease_id"},
		{"vm-other-lease", vm(reg2.LeaseId), codes.NotFound, ""},
		{"vm-unknown-lease", vm("no-such-lease"), codes.NotFound, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.reportOne(t, tc.r)
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.HasPrefix(st.Message(), tc.field) {
				t.Errorf("status = %v %q, want %v naming %q", st.Code(), st.Message(), tc.code, tc.field)
			}
			if n := h.util.Len(); n != 0 {
				t.Errorf("table holds %d entries after a refused report, want 0", n)
			}
		})
	}
	ack, err := h.reportOne(t, vm(reg.LeaseId))
	if err != nil || ack.Accepted != 1 {
		t.Fatalf("report with the holding lease = %v, %v; want accepted 1", ack, err)
	}
	got := h.util.Utilizations("payments", time.Now())
	if len(got) != 1 || got[0].ID != reg.EndpointId || got[0].CPU != 0.25 || got[0].Limit != 0 || got[0].Utilization != 0.25 {
		t.Errorf("Utilizations = %+v, want %s at cpu 0.25", got, reg.EndpointId)
	}
	code, m := h.post(t, "/v1/utilization", fmt.Sprintf(`{"service":"payments","endpoint_id":%q,"lease_id":%q,"cpu":0.75,"interval_ms":500}`, reg.EndpointId, reg.LeaseId))
	if code != http.StatusOK || m["accepted"] != "1" {
		t.Errorf("JSON report = %d %v, want 200 accepted 1", code, m)
	}
	if got := h.util.Utilizations("payments", time.Now()); len(got) != 1 || got[0].CPU != 0.75 {
		t.Errorf("after the JSON report Utilizations = %+v, want cpu 0.75", got)
	}
}

// TestUtilizationRates: the optional request rate, error rate and latency
// reach the table over gRPC and JSON; a report without them stores 0 (not
// reported), as from a sender older than the fields.
func TestUtilizationRates(t *testing.T) {
	h := newHarness(t)
	h.addStatic(t, "search", "s1")
	r := goodUtilization()
	r.Rps, r.Eps, r.LatencyMs = 250, 12.5, 8.25
	if ack, err := h.reportOne(t, r); err != nil || ack.Accepted != 1 {
		t.Fatalf("report = %v, %v; want accepted 1", ack, err)
	}
	got := h.util.Utilizations("search", time.Now())
	if len(got) != 1 || got[0].RPS != 250 || got[0].EPS != 12.5 || got[0].LatencyMs != 8.25 {
		t.Errorf("Utilizations = %+v, want rps 250, eps 12.5, latency 8.25 ms", got)
	}
	if _, err := h.reportOne(t, goodUtilization()); err != nil {
		t.Fatal(err)
	}
	if got := h.util.Utilizations("search", time.Now()); len(got) != 1 || got[0].RPS != 0 || got[0].EPS != 0 || got[0].LatencyMs != 0 {
		t.Errorf("without the fields Utilizations = %+v, want rps, eps, latency 0", got)
	}
	code, m := h.post(t, "/v1/utilization", `{"service":"search","endpoint_id":"s1","cpu":0.5,"in_flight":1,"limit":64,"interval_ms":1000,"rps":40,"eps":40,"latency_ms":900}`)
	if code != http.StatusOK || m["accepted"] != "1" {
		t.Fatalf("JSON report = %d %v, want 200 accepted 1", code, m)
	}
	if got := h.util.Utilizations("search", time.Now()); len(got) != 1 || got[0].RPS != 40 || got[0].EPS != 40 || got[0].LatencyMs != 900 {
		t.Errorf("after the JSON report Utilizations = %+v, want rps 40, eps 40, latency 900 ms", got)
	}
}

package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway/spillway/admin"
	adminv1 "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
)

// fakePlans is a hand-written fake of the admin API's sources: the given
// plans, no load and no streams.
type fakePlans map[string]*weights.Plan

func (f fakePlans) Plan(service string) *weights.Plan { return f[service] }
func (fakePlans) Loads(string, time.Time) []load.Load { return nil }
func (fakePlans) Subscriptions() []xds.Subscription   { return nil }

// compute sets service's plan to a local one from real cycles over in.
func (f fakePlans) compute(service string, in ...*zoneaware.Input) {
	f[service] = &weights.Plan{Gen: 1, Result: computeAll(in...), Source: weights.SourceLocal}
}

// computeAll runs real zone-aware cycles, one per input, on one State with
// the default Config, and returns the last result.
func computeAll(ins ...*zoneaware.Input) *zoneaware.Result {
	calc, err := zoneaware.New(zoneaware.Config{})
	if err != nil {
		panic(err)
	}
	var st zoneaware.State
	res := &zoneaware.Result{}
	for _, in := range ins {
		calc.Compute(&st, in, res)
	}
	return res
}

var wt0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// weightsPlans builds the services of the golden files from real cycles:
//
//   - payments: two cycles 10 s apart, load reports 2 s old; zone-b answers
//     10% errors with twice the in-flight requests per endpoint of the
//     others; zone-c has a new endpoint still slow-starting; some clients
//     have no zone; demand moved from zone-b to zone-a, so some routes
//     changed and others kept their weights. A mesh plan: published by
//     owner r2 from the load of r0, r1 and r12.
//   - search: the same reports, an hour old: stale, fail open. A local
//     plan, the published one being stale.
//   - orders: no load reports yet; demand from connected clients. A local
//     plan (one replica).
func weightsPlans() fakePlans {
	old := wt0.Add(-time.Hour)
	eps := []zoneaware.Endpoint{
		{ID: "a1", Zone: "zone-a", Healthy: true, Registered: old},
		{ID: "a2", Zone: "zone-a", Healthy: true, Registered: old},
		{ID: "a3", Zone: "zone-a", Healthy: true, Registered: old},
		{ID: "b1", Zone: "zone-b", Healthy: true, Registered: old},
		{ID: "b2", Zone: "zone-b", Healthy: true, Registered: old},
		{ID: "b3", Zone: "zone-b", Healthy: true, Registered: old},
		{ID: "c1", Zone: "zone-c", Healthy: true, Registered: old},
		{ID: "c2", Zone: "zone-c", Healthy: true, Registered: old},
		{ID: "c3", Zone: "zone-c", Healthy: true, Registered: wt0.Add(-3 * time.Second)},
		{ID: "c4", Zone: "zone-c", Healthy: false, Registered: old},
	}
	reports := func(now, updated time.Time, demandA, demandB float64) *zoneaware.Input {
		return &zoneaware.Input{
			Now:       now,
			Endpoints: eps,
			Loads: []zoneaware.ZoneLoad{
				{Zone: "zone-a", IssuedRPS: 350, SucceededRPS: 350, InProgress: 6, Updated: updated},
				{Zone: "zone-b", IssuedRPS: 400, SucceededRPS: 360, ErroredRPS: 40, InProgress: 12, Updated: updated},
				{Zone: "zone-c", IssuedRPS: 250, SucceededRPS: 250, InProgress: 4, Updated: updated},
			},
			Demand: []zoneaware.Demand{
				{ClientZone: "", RPS: 50, Updated: updated},
				{ClientZone: "zone-a", RPS: demandA, Updated: updated},
				{ClientZone: "zone-b", RPS: demandB, Updated: updated},
				{ClientZone: "zone-c", RPS: 200, Updated: updated},
			},
		}
	}
	p := fakePlans{}
	p.compute("payments",
		reports(wt0.Add(-10*time.Second), wt0.Add(-12*time.Second), 350, 400),
		reports(wt0, wt0.Add(-2*time.Second), 400, 350))
	pay := p["payments"]
	pay.Source, pay.Owner, pay.Published = weights.SourceMesh, "r2", wt0.Add(-1500*time.Millisecond)
	pay.Contributors = []weights.Contributor{
		{Replica: "r0", Age: 400 * time.Millisecond}, {Replica: "r1", Age: 900 * time.Millisecond}, {Replica: "r12", Age: 34 * time.Second}}
	p.compute("search", reports(wt0, wt0.Add(-time.Hour), 400, 350))
	p["search"].Reason = "published plan stale: owner r2 last heard 34s ago"
	p.compute("orders", &zoneaware.Input{
		Now:       wt0,
		Endpoints: eps,
		Clients:   []zoneaware.ClientCount{{Zone: "zone-a", Count: 3}, {Zone: "zone-b", Count: 2}},
	})
	return p
}

// startWeightsServer serves the admin API over p on loopback.
func startWeightsServer(t *testing.T, p fakePlans) string {
	t.Helper()
	a, err := admin.New(admin.Config{Loads: p, Subscriptions: p, Plans: p, Now: func() time.Time { return wt0 }})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	a.RegisterGRPC(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// TestCLIWeightsGolden checks the text view of real zone-aware results
// against testdata/weights_<service>.txt.
func TestCLIWeightsGolden(t *testing.T) {
	addr := startWeightsServer(t, weightsPlans())
	for _, service := range []string{"payments", "search", "orders"} {
		t.Run(service, func(t *testing.T) {
			got := mustCtl(t, addr, "weights", service)
			golden := filepath.Join("testdata", "weights_"+service+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/spillwayctl -run TestCLIWeightsGolden -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("weights %s differs from %s (-want +got):\n%s\nIf the change is intended, run go test ./cmd/spillwayctl -run TestCLIWeightsGolden -update", service, golden, diff)
			}
		})
	}
}

func TestCLIWeights(t *testing.T) {
	addr := startWeightsServer(t, weightsPlans())
	t.Run("json", func(t *testing.T) {
		out := mustCtl(t, addr, "weights", "Payments.", "-o", "json")
		var got adminv1.WeightsResponse
		if err := protojson.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("weights -o json is not a WeightsResponse: %v\n%s", err, out)
		}
		if got.GetService() != "payments" || got.GetSource() != "lrs" || got.GetFallback().GetKey() != "none" ||
			len(got.GetZones()) != 3 || len(got.GetRoutes()) != 4 {
			t.Errorf("weights -o json: service %q, source %q, fallback %q, %d zones, %d routes; want payments, lrs, none, 3, 4:\n%s",
				got.GetService(), got.GetSource(), got.GetFallback().GetKey(), len(got.GetZones()), len(got.GetRoutes()), out)
		}
		if d := got.GetDataAge().AsDuration(); d != 2*time.Second {
			t.Errorf("data_age = %v, want 2s", d)
		}
		compact := strings.Join(strings.Fields(out), "") // protojson varies its spacing
		for _, k := range []string{`"same_zone":`, `"slow_starting":`, `"queue_factor":`, `"fail_open":`, `"client_zone":""`, `"explain":`,
			`"origin":{"source":"mesh","owner":"r2","contributors":[{"replica":"r0","age_seconds":0.4}`, `"published":"2026-03-01T11:59:58.500Z"`} {
			if !strings.Contains(compact, k) {
				t.Errorf("weights -o json lacks %s (proto names, empty fields shown)", k)
			}
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown_service", []string{"weights", "nobody"}, 1, []string{"spillwayctl weights: no zone-aware weights for nobody", "(NotFound)"}},
		{"bad_service", []string{"weights", "pay_ments"}, 1, []string{"spillwayctl weights: service:", "(InvalidArgument)"}},
		{"no_service", []string{"weights"}, 2, []string{"want SERVICE, got 0 arguments"}},
		{"two_services", []string{"weights", "a", "b"}, 2, []string{"want SERVICE, got 2 arguments"}},
		{"bad_output", []string{"weights", "payments", "-o", "yaml"}, 2, []string{`-o "yaml": want text or json`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, addr, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit = %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if r.code != 0 && r.stdout != "" {
				t.Errorf("stdout = %q on failure, want nothing", r.stdout)
			}
		})
	}
}

// TestCLIWeightsZoneAwareOff: a real xDS server without zone-aware weights
// has no plan for any service: NotFound, exit 1.
func TestCLIWeightsZoneAwareOff(t *testing.T) {
	s := startXDSStack(t)
	r := ctl(t, s.addr, "weights", "payments")
	if r.code != 1 || !strings.Contains(r.stderr, "no zone-aware weights for payments") || !strings.Contains(r.stderr, "(NotFound)") {
		t.Errorf("weights payments: exit %d, stderr %q; want 1 and NotFound", r.code, r.stderr)
	}
}

func TestPlanLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    *adminv1.PlanOrigin
		want string
	}{
		{
			name: "mesh",
			o: &adminv1.PlanOrigin{Source: "mesh", Owner: "r2", Published: timestamppb.New(time.Date(2026, 3, 1, 12, 1, 2, 0, time.UTC)),
				Contributors: []*adminv1.Contributor{{Replica: "r0", AgeSeconds: 0.4}, {Replica: "r1", AgeSeconds: 0.94}}},
			want: "plan: mesh, computed by r2 from the load of r0 (0.4s old), r1 (0.9s old), published 12:01:02 UTC",
		},
		{
			name: "mesh_old_load",
			o: &adminv1.PlanOrigin{Source: "mesh", Owner: "r2",
				Contributors: []*adminv1.Contributor{{Replica: "r0", AgeSeconds: 9.96}, {Replica: "r1", AgeSeconds: 125.4}}},
			want: "plan: mesh, computed by r2 from the load of r0 (10s old), r1 (2m5s old)",
		},
		{
			name: "mesh_no_contributors",
			o:    &adminv1.PlanOrigin{Source: "mesh", Owner: "r2", Published: timestamppb.New(time.Date(2026, 3, 1, 14, 0, 0, 0, time.FixedZone("x", 3600)))},
			want: "plan: mesh, computed by r2 from no replica's fresh load, published 13:00:00 UTC",
		},
		{
			name: "local_reason",
			o:    &adminv1.PlanOrigin{Source: "local", Reason: "store unreachable: owner r2 last heard 34s ago"},
			want: "plan: local (store unreachable: owner r2 last heard 34s ago)",
		},
		{name: "local", o: &adminv1.PlanOrigin{Source: "local"}, want: "plan: local"},
		{name: "unset", o: &adminv1.PlanOrigin{}, want: "plan: -"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planLine(tc.o); got != tc.want {
				t.Errorf("planLine =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestWeightsWithoutOrigin: an answer without origin (a server before
// mesh-wide load) prints no plan line.
func TestWeightsWithoutOrigin(t *testing.T) {
	var b strings.Builder
	if err := writeWeights(&b, &adminv1.WeightsResponse{Service: "payments", Source: "none", Fallback: &adminv1.Fallback{Text: "none"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "plan:") {
		t.Errorf("weights without origin printed a plan line:\n%s", b.String())
	}
}

// TestWriteEndpoints: the PID round and the endpoints table, in the
// answer's order; nothing for a service without endpoint weights.
func TestWriteEndpoints(t *testing.T) {
	resp := &adminv1.WeightsResponse{
		Endpoints: []*adminv1.EndpointWeight{
			{Id: "a-0", Zone: "zone-a", Weight: 12000, PidWeight: 13000, Utilization: 0.3, AgeSeconds: 1, Status: "fresh", Error: 0.4, P: 0.2, I: 0.008, D: 0.01},
			{Id: "b-0", Zone: "zone-b", Weight: 10000, PidWeight: 10000, Status: "missing"},
		},
		Pid: &adminv1.PIDRound{Outcome: "computed", Setpoint: 0.5, Known: 2, Missing: 1, BlendFrom: "zone-aware", BlendTo: "pid", BlendPercent: 30},
	}
	var b strings.Builder
	if err := writeEndpoints(&b, resp); err != nil {
		t.Fatal(err)
	}
	want := `
pid: computed; setpoint 50.0%; 1 of 2 known endpoints missing; blend zone-aware → pid 30%

ENDPOINT  ZONE    WEIGHT  PID    UTIL   AGE   STATUS   ERROR  P      I      D
a-0       zone-a  12000   13000  30.0%  1.0s  fresh    0.400  0.200  0.008  0.010
b-0       zone-b  10000   10000  -      -     missing  0.000  0.000  0.000  0.000
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	b.Reset()
	resp.Pid.LocalityFromEndpoints, resp.Pid.BlendFrom, resp.Pid.BlendTo = true, "", ""
	if err := writeEndpoints(&b, resp); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "; localities weighted by their endpoints (pid alone)\n") || strings.Contains(b.String(), "blend") {
		t.Errorf("pid alone: %q", b.String())
	}
	b.Reset()
	if err := writeEndpoints(&b, &adminv1.WeightsResponse{}); err != nil || b.Len() != 0 {
		t.Errorf("no endpoints: %q, %v; want nothing", b.String(), err)
	}
}

// TestWriteEndpointsGuard: with request data the round line adds the
// guard's medians and count, the table the rate, error rate, latency and
// guard columns, and each guarded endpoint gets a line saying why.
func TestWriteEndpointsGuard(t *testing.T) {
	resp := &adminv1.WeightsResponse{
		Endpoints: []*adminv1.EndpointWeight{
			{Id: "a-0", Zone: "zone-a", Weight: 12000, PidWeight: 12000, Utilization: 0.5, AgeSeconds: 1, Status: "fresh", Error: 0.02, P: 0.01,
				Rps: 100, ErrorRate: 0.01, LatencyMs: 20, Effective: 0.51},
			{Id: "a-1", Zone: "zone-a", Weight: 1500, PidWeight: 1500, Utilization: 0.1, AgeSeconds: 1, Status: "fresh",
				Rps: 80, ErrorRate: 0.4, LatencyMs: 25, Effective: 0.5, Guard: "errors", GuardLimit: 0.07,
				GuardExplain: "error rate 40.0% above the limit 7.0% (max(2 × median 2.0%, median + 5 points))"},
			{Id: "b-0", Zone: "zone-b", Weight: 5000, PidWeight: 5000, Utilization: 0.6, AgeSeconds: 1, Status: "fresh",
				Rps: 90.5, ErrorRate: 0.02, LatencyMs: 912.25, Effective: 0.62, Guard: "latency", GuardLimit: 75,
				GuardExplain: "latency 912.25 ms above the limit 75 ms (max(3 × median 25 ms, median + 50 ms))"},
			{Id: "b-1", Zone: "zone-b", Weight: 11500, PidWeight: 11500, Utilization: 0.4, AgeSeconds: 1, Status: "fresh"},
		},
		Pid: &adminv1.PIDRound{Outcome: "computed", Setpoint: 0.5, Known: 4, MedianErrorRate: 0.02, MedianLatencyMs: 25, Guarded: 2},
	}
	var b strings.Builder
	if err := writeEndpoints(&b, resp); err != nil {
		t.Fatal(err)
	}
	want := `
pid: computed; setpoint 50.0%; 0 of 4 known endpoints missing; guard: median error rate 2.0%, median latency 25 ms; 2 guarded

ENDPOINT  ZONE    WEIGHT  PID    UTIL   AGE   STATUS  ERROR  P      I      D      RPS   ERRORS  LATENCY    GUARD
a-0       zone-a  12000   12000  50.0%  1.0s  fresh   0.020  0.010  0.000  0.000  100   1.0%    20 ms      -
a-1       zone-a  1500    1500   10.0%  1.0s  fresh   0.000  0.000  0.000  0.000  80    40.0%   25 ms      errors
b-0       zone-b  5000    5000   60.0%  1.0s  fresh   0.000  0.000  0.000  0.000  90.5  2.0%    912.25 ms  latency
b-1       zone-b  11500   11500  40.0%  1.0s  fresh   0.000  0.000  0.000  0.000  -     -       -          -

guarded (not raised, halved each round, never above the median weight):
  a-1: error rate 40.0% above the limit 7.0% (max(2 × median 2.0%, median + 5 points))
  b-0: latency 912.25 ms above the limit 75 ms (max(3 × median 25 ms, median + 50 ms))
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("endpoints with the guard (-want +got):\n%s", diff)
	}
	// Requests reported, nobody guarded: the columns, no guarded lines.
	for _, e := range resp.Endpoints {
		e.Guard, e.GuardExplain, e.GuardLimit = "", "", 0
	}
	resp.Pid.Guarded = 0
	b.Reset()
	if err := writeEndpoints(&b, resp); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.Contains(got, "; 0 guarded\n") || !strings.Contains(got, "  GUARD\n") || strings.Contains(got, "guarded (") {
		t.Errorf("requests reported, none guarded:\n%s", got)
	}
}

func TestWriteRegions(t *testing.T) {
	until := timestamppb.New(time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC))
	r := &adminv1.RegionRouting{
		Present: []string{"r1", "r2"},
		Rules: []*adminv1.RegionRule{
			{From: "r1", To: "r2", Until: until, Active: true},
			{From: "r2", To: "r3", Active: true},
			{Exclude: "r4", Until: until},
		},
		Clients: []*adminv1.RegionDecision{
			{ClientRegion: "r1", Order: []string{"r2", "r1"}, Redirect: "applied", RedirectTo: "r2"},
			{ClientRegion: "r2", Order: []string{"r2", "r1"}, Redirect: "no_endpoints", RedirectTo: "r3"},
			{ClientRegion: "r5", Order: []string{"r1"}, Excluded: []string{"r2"}},
			{ClientRegion: "", Order: []string{"r1,r2"}, FailOpen: true},
		},
	}
	var b strings.Builder
	if err := writeRegions(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `
regions with healthy endpoints: r1, r2
redirect r1 → r2 until 2026-12-01T18:00:00Z (active)
redirect r2 → r3 (active)
exclude r4 until 2026-12-01T18:00:00Z (expired)

CLIENT REGION  PRIORITY ORDER  RULES
r1             r2 > r1         redirect to r2 applied
r2             r2 > r1         redirect to r3 not applied: no healthy endpoint there
r5             r1              excluded r2
(no region)    r1,r2           exclusions not applied: they would leave no endpoint (fail open)
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("regions (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := writeRegions(&b, nil); err != nil || b.Len() != 0 {
		t.Errorf("no regions: %q, %v; want nothing", b.String(), err)
	}
}

// TestWriteRouteRules: the rules in order with their targets, a broken
// one flagged with what is missing, then the default route; nothing
// without rules.
func TestWriteRouteRules(t *testing.T) {
	var b strings.Builder
	if err := writeRouteRules(&b, nil); err != nil || b.Len() != 0 {
		t.Fatalf("no rules: %q, %v; want nothing", b.String(), err)
	}
	r := &adminv1.RouteRules{
		Version: 3,
		Default: "payments",
		Rules: []*adminv1.RouteRule{
			{Name: "synthetic", Targets: []string{"payments-synthetic"}, Missing: []string{"payments-synthetic"}},
			{Name: "rules[1]", Targets: []string{"payments", "payments-canary"}},
		},
	}
	if err := writeRouteRules(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `
route rules (version 3), in order:
  synthetic  → payments-synthetic  BROKEN: payments-synthetic without endpoints; its RPCs take the default
  rules[1]   → payments, payments-canary
  default    → payments
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

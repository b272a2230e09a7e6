package admin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/weights/zoneaware"
)

// compute runs one real zone-aware cycle on in, probing off.
func compute(in *zoneaware.Input) *zoneaware.Result {
	calc, err := zoneaware.New(zoneaware.Config{ProbeShare: new(0.0)})
	if err != nil {
		panic(err)
	}
	var st zoneaware.State
	res := &zoneaware.Result{}
	calc.Compute(&st, in, res)
	return res
}

// exampleInput is the design's worked example: clients 40/40/20 % in zones
// a/b/c, capacity 25/50/25 % (1, 2 and 1 endpoints), load reports of age
// updated.
func exampleInput(now, updated time.Time) *zoneaware.Input {
	old := now.Add(-time.Hour)
	return &zoneaware.Input{
		Now: now,
		Endpoints: []zoneaware.Endpoint{
			{ID: "a1", Zone: "a", Healthy: true, Registered: old},
			{ID: "b1", Zone: "b", Healthy: true, Registered: old},
			{ID: "b2", Zone: "b", Healthy: true, Registered: old},
			{ID: "c1", Zone: "c", Healthy: true, Registered: old},
		},
		Demand: []zoneaware.Demand{{ClientZone: "a", RPS: 400, Updated: updated}, {ClientZone: "b", RPS: 400, Updated: updated}, {ClientZone: "c", RPS: 200, Updated: updated}},
		Loads: []zoneaware.ZoneLoad{
			{Zone: "a", IssuedRPS: 250, SucceededRPS: 250, InProgress: 2.5, Updated: updated},
			{Zone: "b", IssuedRPS: 500, SucceededRPS: 500, InProgress: 5, Updated: updated},
			{Zone: "c", IssuedRPS: 250, SucceededRPS: 250, InProgress: 2.5, Updated: updated},
		},
	}
}

// workedExample: zone a keeps 62.5% local and spills 25% to b, 12.5% to c.
func workedExample() *zoneaware.Result { return compute(exampleInput(t0, t0)) }

// staleExample: the same reports an hour old; every route fails open to
// capacity-proportional weights.
func staleExample() *zoneaware.Result { return compute(exampleInput(t0, t0.Add(-time.Hour))) }

func wantPaymentsWeights() *pb.WeightsResponse {
	zone := func(name string, healthy uint32, demand, demandShare, share float64) *pb.ZoneCapacity {
		return &pb.ZoneCapacity{
			Zone: name, Healthy: healthy, Trusted: float64(healthy),
			InFlightPerEndpoint: 2.5, QueueFactor: 1, ErrorFactor: 1, Health: 1,
			Capacity: float64(healthy), CapacityShare: share,
			Demand: demand, DemandShare: demandShare, Load: share,
		}
	}
	none := &pb.Fallback{Key: "none", Text: "none"}
	weights := func(a, b, c uint32) []*pb.ZoneWeight {
		return []*pb.ZoneWeight{
			{Zone: "a", Weight: a, Share: float64(a) / 10000},
			{Zone: "b", Weight: b, Share: float64(b) / 10000},
			{Zone: "c", Weight: c, Share: float64(c) / 10000},
		}
	}
	own := func(share string, healthy int) string {
		return fmt.Sprintf("own zone capacity %s (%d healthy, 0 slow-starting, trust %d.00, queue ×1.00, errors ×1.00, health 1.00)", share, healthy, healthy)
	}
	return &pb.WeightsResponse{
		Service:  "payments",
		Source:   "lrs",
		Fallback: none,
		DataAge:  durationpb.New(0),
		SameZone: 0.85,
		Optimum:  0.85,
		Zones:    []*pb.ZoneCapacity{zone("a", 1, 400, 0.4, 0.25), zone("b", 2, 400, 0.4, 0.5), zone("c", 1, 200, 0.2, 0.25)},
		Routes: []*pb.ZoneRoute{
			{
				ClientZone: "", Weights: weights(2500, 5000, 2500), Source: "lrs",
				Fallback: &pb.Fallback{Key: "zoneless", Text: "client without zone", FailOpen: true},
				Spill:    []*pb.ZoneShare{{Zone: "a", Share: 0.25}, {Zone: "b", Share: 0.5}, {Zone: "c", Share: 0.25}},
				Moved:    1, Changed: true,
				Explain: `"": demand unknown; clients without a zone; capacity-proportional, local 0.0%, spill a 25.0% b 50.0% c 25.0%; fallback: client without zone`,
			},
			{
				ClientZone: "a", Weights: weights(6250, 2500, 1250),
				Demand: 400, DemandShare: 0.4, HasDemand: true, Source: "lrs", Fallback: none,
				LocalFirst: true, Local: 0.625, Spill: []*pb.ZoneShare{{Zone: "b", Share: 0.25}, {Zone: "c", Share: 0.125}},
				Moved: 1, Changed: true,
				Explain: "a: demand 400 rps (lrs, 40.0%); " + own("25.0%", 1) + "; local 62.5%, spill b 25.0% c 12.5%; fallback: none",
			},
			{
				ClientZone: "b", Weights: []*pb.ZoneWeight{{Zone: "a", Weight: 1}, {Zone: "b", Weight: 10000, Share: 1}, {Zone: "c", Weight: 1}},
				Demand: 400, DemandShare: 0.4, HasDemand: true, Source: "lrs", Fallback: none,
				LocalFirst: true, Local: 1, Spill: []*pb.ZoneShare{},
				Moved: 1, Changed: true,
				Explain: "b: demand 400 rps (lrs, 40.0%); " + own("50.0%", 2) + "; local 100.0%; fallback: none",
			},
			{
				ClientZone: "c", Weights: []*pb.ZoneWeight{{Zone: "a", Weight: 1}, {Zone: "b", Weight: 1}, {Zone: "c", Weight: 10000, Share: 1}},
				Demand: 200, DemandShare: 0.2, HasDemand: true, Source: "lrs", Fallback: none,
				LocalFirst: true, Local: 1, Spill: []*pb.ZoneShare{},
				Moved: 1, Changed: true,
				Explain: "c: demand 200 rps (lrs, 20.0%); " + own("25.0%", 1) + "; local 100.0%; fallback: none",
			},
		},
		Time:   ts(t0),
		Origin: &pb.PlanOrigin{Source: "local"},
	}
}

var approx = cmpopts.EquateApprox(0, 1e-9)

func TestWeightsGRPC(t *testing.T) {
	f := newFake()
	c := startGRPC(t, newAPI(t, f))
	ctx := context.Background()

	for _, name := range []string{"payments", "Payments."} {
		t.Run("ok_"+name, func(t *testing.T) {
			got, err := c.Weights(ctx, &pb.WeightsRequest{Service: name})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantPaymentsWeights(), got, protocmp.Transform(), approx); diff != "" {
				t.Errorf("Weights(%q) (-want +got):\n%s", name, diff)
			}
		})
	}
	t.Run("stale", func(t *testing.T) {
		got, err := c.Weights(ctx, &pb.WeightsRequest{Service: "search"})
		if err != nil {
			t.Fatal(err)
		}
		wantFallback := &pb.Fallback{
			Key: "stale", FailOpen: true, Reason: zoneaware.ReasonOld, ReasonZone: "a",
			Text: "stale load data (report older than the staleness limit, a, age 1h0m0s)",
		}
		if diff := cmp.Diff(wantFallback, got.GetFallback(), protocmp.Transform()); diff != "" {
			t.Errorf("service-wide fallback (-want +got):\n%s", diff)
		}
		if got.GetSource() != "none" || got.GetDataAge().AsDuration() != time.Hour || got.GetSameZone() != 0 || got.GetOptimum() != 0 {
			t.Errorf("source %q, data age %v, same zone %v, optimum %v; want none, 1h, 0, 0",
				got.GetSource(), got.GetDataAge().AsDuration(), got.GetSameZone(), got.GetOptimum())
		}
		for _, rt := range got.GetRoutes() {
			if rt.GetFallback().GetKey() != "stale" || rt.GetLocalFirst() || !strings.HasSuffix(rt.GetExplain(), "fallback: "+wantFallback.Text) {
				t.Errorf("route %q: fallback %v, local first %v, explain %q; want the stale fallback, capacity-proportional",
					rt.GetClientZone(), rt.GetFallback(), rt.GetLocalFirst(), rt.GetExplain())
			}
			if w := rt.GetWeights(); len(w) != 3 || w[0].GetWeight() != 2500 || w[1].GetWeight() != 5000 || w[2].GetWeight() != 2500 {
				t.Errorf("route %q weights = %v, want a=2500 b=5000 c=2500 (capacity)", rt.GetClientZone(), w)
			}
		}
	})
	t.Run("unknown_service", func(t *testing.T) {
		_, err := c.Weights(ctx, &pb.WeightsRequest{Service: "nobody"})
		st := status.Convert(err)
		if st.Code() != codes.NotFound || !strings.Contains(st.Message(), "no zone-aware weights for nobody") {
			t.Errorf("Weights(nobody) error = %v, want NotFound naming the service", err)
		}
	})
	for _, tc := range []struct{ name, service, want string }{
		{"empty", "", "service: must not be empty"},
		{"underscore", "pay_ments", `service: label 1: "pay_ments": character '_'`},
	} {
		t.Run("bad_"+tc.name, func(t *testing.T) {
			_, err := c.Weights(ctx, &pb.WeightsRequest{Service: tc.service})
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.want) {
				t.Errorf("Weights(%q) error = %v, want InvalidArgument %q", tc.service, err, tc.want)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"payments", "payments", "search", "nobody"}; !cmp.Equal(f.planned, want) {
		t.Errorf("Plan called with %q, want %q (normalized, never for a bad name)", f.planned, want)
	}
}

// TestWeightsKeepsResult: the response is built from the Result without
// modifying it (Plans hands out the published plan).
func TestWeightsKeepsResult(t *testing.T) {
	f := newFake()
	before := f.plans["payments"].Clone()
	if _, err := newAPI(t, f).weights(context.Background(), &pb.WeightsRequest{Service: "payments"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, f.plans["payments"]); diff != "" {
		t.Errorf("Result changed by Weights (-before +after):\n%s", diff)
	}
}

func TestWeightsHTTP(t *testing.T) {
	a := newAPI(t, newFake())
	want := func(service string) *pb.WeightsResponse {
		resp, err := a.weights(context.Background(), &pb.WeightsRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	h := a.Handler()
	for _, tc := range []httpCase{
		{name: "weights", method: "GET", target: "/v1/weights?service=payments", code: 200, want: want("payments")},
		{name: "weights_normalized", method: "GET", target: "/v1/weights?service=PAYMENTS.", code: 200, want: want("payments")},
		{name: "weights_stale", method: "GET", target: "/v1/weights?service=search", code: 200, want: want("search")},
		{name: "weights_head", method: "HEAD", target: "/v1/weights?service=payments", code: 200},
		{name: "weights_unknown", method: "GET", target: "/v1/weights?service=nobody", code: 404},
		{name: "weights_missing", method: "GET", target: "/v1/weights", code: 400, field: "service"},
		{name: "weights_bad_name", method: "GET", target: "/v1/weights?service=pay_ments", code: 400, field: "service"},
		{name: "weights_twice", method: "GET", target: "/v1/weights?service=a&service=b", code: 400, field: "service"},
		{name: "weights_typo", method: "GET", target: "/v1/weights?svc=payments", code: 400, field: "svc"},
		{name: "weights_post", method: "POST", target: "/v1/weights?service=payments", code: 405},
	} {
		t.Run(tc.name, func(t *testing.T) { checkHTTP(t, h, tc) })
	}
	if diff := cmp.Diff(wantPaymentsWeights(), want("payments"), protocmp.Transform(), approx); diff != "" {
		t.Errorf("weights(payments) (-want +got):\n%s", diff)
	}
}

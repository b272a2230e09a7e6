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
	"github.com/spillway/spillway/xds/routing"
)

// TestWeightsRouteRules: the weights answer carries the service's route
// rules in order, and a rule whose target lost its endpoints is flagged
// broken with the missing target, in gRPC and in the HTTP JSON; a
// service without rules has none.
func TestWeightsRouteRules(t *testing.T) {
	gone := map[string]bool{}
	rules, err := routing.NewStore(routing.StoreConfig{Targets: routing.TargetsFunc(func(s string) (bool, int) {
		if gone[s] {
			return false, 0
		}
		return true, 1
	})})
	if err != nil {
		t.Fatal(err)
	}
	const yamlText = `rules:
  - name: synthetic
    match: {headers: [{name: x-traffic-class, exact: synthetic}]}
    to: payments-synthetic
  - match: {}
    split: [{to: payments, weight: 90}, {to: payments-canary, weight: 10}]
`
	if _, err := rules.Set(context.Background(), "payments", []byte(yamlText)); err != nil {
		t.Fatal(err)
	}
	gone["payments-synthetic"] = true // deregistered after the rule was set

	f := newFake()
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: f, Routes: rules, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.weights(context.Background(), &pb.WeightsRequest{Service: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.RouteRules{
		Default: "payments",
		Version: got.GetRouteRules().GetVersion(),
		Rules: []*pb.RouteRule{
			{Name: "synthetic", Targets: []string{"payments-synthetic"}, Missing: []string{"payments-synthetic"}},
			{Name: "rules[1]", Targets: []string{"payments", "payments-canary"}},
		},
	}
	if diff := cmp.Diff(want, got.GetRouteRules(), protocmp.Transform()); diff != "" {
		t.Errorf("route rules of payments (-want +got):\n%s", diff)
	}
	if got.GetRouteRules().GetVersion() == 0 {
		t.Errorf("route rules version = 0, want the store's version")
	}
	if got, err := a.weights(context.Background(), &pb.WeightsRequest{Service: "search"}); err != nil || got.GetRouteRules() != nil {
		t.Errorf("route rules of search (none set) = %v, %v; want unset", got.GetRouteRules(), err)
	}

	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/weights?service=payments", nil))
	var body struct {
		RouteRules struct {
			Rules []struct {
				Name    string   `json:"name"`
				Missing []string `json:"missing"`
			} `json:"rules"`
		} `json:"route_rules"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
		t.Fatalf("GET /v1/weights: %d %v: %s", rec.Code, err, rec.Body)
	}
	if r := body.RouteRules.Rules; len(r) != 2 || r[0].Name != "synthetic" || !cmp.Equal(r[0].Missing, []string{"payments-synthetic"}) || len(r[1].Missing) != 0 {
		t.Errorf("GET /v1/weights route_rules.rules = %+v, want synthetic broken (payments-synthetic), rules[1] whole", r)
	}
}

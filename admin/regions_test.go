package admin

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/weights/regions"
)

// fakeRegions answers RegionView with regions.Explain over fixed regions
// and rules.
type fakeRegions map[string]struct {
	present []string
	rules   regions.Rules
}

func (f fakeRegions) RegionView(service string) (regions.View, bool) {
	s, ok := f[service]
	if !ok {
		return regions.View{}, false
	}
	return regions.Explain(s.present, nil, s.rules, t0), true
}

// TestWeightsRegions: the regional rules set for a service, which apply
// now, and per client region the priority order and what the rules did
// (applied, not applied for want of endpoints, fail open), in the gRPC
// answer and its JSON; unset for a single region without rules.
func TestWeightsRegions(t *testing.T) {
	f := newFake()
	later := t0.Add(time.Hour)
	regs := fakeRegions{
		"payments": {present: []string{"r1", "r2"}, rules: regions.Rules{
			Redirects: []regions.Redirect{{From: "r1", To: "r2", Until: later}, {From: "r2", To: "r3"}, {From: "r3", To: "r1", Until: t0}},
			Excludes:  []regions.Exclude{{Region: "r4"}},
		}},
		"search": {present: []string{"a"}},
	}
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: f, Regions: regs, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.weights(context.Background(), &pb.WeightsRequest{Service: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.RegionRouting{
		Present: []string{"r1", "r2"},
		Rules: []*pb.RegionRule{
			{From: "r1", To: "r2", Until: timestamppb.New(later), Active: true},
			{From: "r2", To: "r3", Active: true},
			{From: "r3", To: "r1", Until: timestamppb.New(t0)},
			{Exclude: "r4", Active: true},
		},
		Clients: []*pb.RegionDecision{
			{ClientRegion: "r1", Order: []string{"r2", "r1"}, Redirect: "applied", RedirectTo: "r2"},
			{ClientRegion: "r2", Order: []string{"r2", "r1"}, Redirect: "no_endpoints", RedirectTo: "r3"},
			{ClientRegion: "r3", Order: []string{"r1,r2"}},
			{ClientRegion: "", Order: []string{"r1,r2"}},
		},
	}
	if diff := cmp.Diff(want, got.GetRegions(), protocmp.Transform()); diff != "" {
		t.Errorf("regions of payments (-want +got):\n%s", diff)
	}
	if got, err := a.weights(context.Background(), &pb.WeightsRequest{Service: "search"}); err != nil || got.GetRegions() != nil {
		t.Errorf("regions of search (one region, no rule) = %v, %v; want unset", got.GetRegions(), err)
	}

	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/weights?service=payments", nil))
	var body struct {
		Regions struct {
			Clients []struct {
				ClientRegion string   `json:"client_region"`
				Order        []string `json:"order"`
				Redirect     string   `json:"redirect"`
			} `json:"clients"`
		} `json:"regions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
		t.Fatalf("GET /v1/weights: %d %v: %s", rec.Code, err, rec.Body)
	}
	if c := body.Regions.Clients; len(c) != 4 || c[0].ClientRegion != "r1" || c[0].Redirect != "applied" || !cmp.Equal(c[0].Order, []string{"r2", "r1"}) {
		t.Errorf("GET /v1/weights regions.clients = %+v, want r1 first, applied, order [r2 r1]", c)
	}
}

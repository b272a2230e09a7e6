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
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/ownership"
	"github.com/spillway/spillway/weights"
)

// fakePlans is a hand-written fake of Plans that hands out whole plans,
// origin included.
type fakePlans map[string]*weights.Plan

func (f fakePlans) Plan(service string) *weights.Plan { return f[service] }

// fakeMesh is a hand-written fake of MeshLoad: this replica owns the
// services in owned, and the merged load is loads from contributors.
type fakeMesh struct {
	owned        map[string]bool
	loads        []load.Load
	contributors []exchange.Contributor
	nows         []time.Time
}

func (m *fakeMesh) Owns(service string) bool { return m.owned[service] }

func (m *fakeMesh) Loads(service string, now time.Time) []load.Load {
	m.nows = append(m.nows, now)
	var out []load.Load
	for _, l := range m.loads {
		if l.Service == service {
			out = append(out, l)
		}
	}
	return out
}

func (m *fakeMesh) Contributors(service string, now time.Time) []exchange.Contributor {
	m.nows = append(m.nows, now)
	if !m.owned[service] {
		return nil
	}
	return m.contributors
}

// meshPlans: payments from its owner r2, search from this replica's own
// view because the published plan went stale.
func meshPlans() fakePlans {
	return fakePlans{
		"payments": {
			Gen: 7, Result: workedExample(), Source: weights.SourceMesh, Owner: "r2",
			// Not sorted: the answer sorts them.
			Contributors: []weights.Contributor{{Replica: "r1", Age: 900 * time.Millisecond}, {Replica: "r0", Age: 400 * time.Millisecond}},
			Published:    t0.Add(-2 * time.Second),
		},
		"search": {
			Gen: 3, Result: staleExample(), Source: weights.SourceLocal,
			Reason: "published plan stale: owner r2 last heard 34s ago",
		},
	}
}

func TestWeightsOrigin(t *testing.T) {
	f := newFake()
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: meshPlans(), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	c := startGRPC(t, a)
	for _, tc := range []struct {
		name, service string
		want          *pb.PlanOrigin
		// wantJSON is the origin member of GET /v1/weights.
		wantJSON string
	}{
		{
			name: "mesh", service: "payments",
			want: &pb.PlanOrigin{
				Source: "mesh", Owner: "r2",
				Contributors: []*pb.Contributor{{Replica: "r0", AgeSeconds: 0.4}, {Replica: "r1", AgeSeconds: 0.9}},
				Published:    ts(t0.Add(-2 * time.Second)),
			},
			wantJSON: `{"source": "mesh", "owner": "r2", "contributors": [{"replica": "r0", "age_seconds": 0.4}, {"replica": "r1", "age_seconds": 0.9}],
				"published": "2026-03-01T11:59:58Z", "reason": ""}`,
		},
		{
			name: "local_with_reason", service: "search",
			want: &pb.PlanOrigin{Source: "local", Reason: "published plan stale: owner r2 last heard 34s ago"},
			wantJSON: `{"source": "local", "owner": "", "contributors": [], "published": null,
				"reason": "published plan stale: owner r2 last heard 34s ago"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Weights(context.Background(), &pb.WeightsRequest{Service: tc.service})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.GetOrigin(), protocmp.Transform()); diff != "" {
				t.Errorf("Weights(%s).origin (-want +got):\n%s", tc.service, diff)
			}
			if len(got.GetRoutes()) != 4 {
				t.Errorf("Weights(%s) has %d routes, want the plan's 4", tc.service, len(got.GetRoutes()))
			}

			rec := httptest.NewRecorder()
			a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/weights?service="+tc.service, nil))
			if rec.Code != 200 {
				t.Fatalf("GET /v1/weights?service=%s: %d %s", tc.service, rec.Code, rec.Body)
			}
			var body struct{ Origin any }
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			var want any
			if err := json.Unmarshal([]byte(tc.wantJSON), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, body.Origin); diff != "" {
				t.Errorf("GET /v1/weights?service=%s: origin (-want +got):\n%s", tc.service, diff)
			}
		})
	}
}

// mergedFlow is a row of the merged table: no client service, the zone
// only, no totals.
func mergedFlow(clientZone, zone string, issued float64, reporters int) load.Load {
	l := load.Load{Key: load.Key{Service: "payments", ClientZone: clientZone, Locality: registry.Locality{Zone: zone}},
		Issued: issued, Succeeded: issued, InProgress: 5, Reporters: reporters, Updated: t0.Add(-time.Second)}
	return l
}

func TestLoadMesh(t *testing.T) {
	mesh := func(owned ...string) *fakeMesh {
		m := &fakeMesh{
			owned: map[string]bool{},
			loads: []load.Load{mergedFlow("zone-a", "zone-a", 300, 4), mergedFlow("zone-b", "zone-a", 20, 2)},
			contributors: []exchange.Contributor{
				{Replica: "r0", Age: 400 * time.Millisecond}, {Replica: "r1", Age: 900 * time.Millisecond}},
		}
		for _, s := range owned {
			m.owned[s] = true
		}
		return m
	}
	mergedRow := func(clientZone, zone string, issued float64, reporters uint32) *pb.LoadRow {
		return &pb.LoadRow{ClientZone: clientZone, Service: "payments", Locality: &pb.Locality{Zone: zone},
			IssuedRps: issued, SucceededRps: issued, InProgress: 5, Reporters: reporters, Updated: ts(t0.Add(-time.Second))}
	}
	local := wantPaymentsLoad()
	for _, tc := range []struct {
		name  string
		mesh  *fakeMesh // nil: no Config.Mesh
		plans fakePlans
		want  *pb.LoadResponse
	}{
		{
			name: "no_mesh", plans: meshPlans(),
			want: &pb.LoadResponse{Service: "payments", Time: ts(t0), Rows: local.Rows, Owner: "r2"},
		},
		{
			name: "owner", mesh: mesh("payments"), plans: meshPlans(),
			want: &pb.LoadResponse{
				Service: "payments", Time: ts(t0), Merged: true, Owner: "r2",
				Rows:       []*pb.LoadRow{mergedRow("zone-a", "zone-a", 300, 4), mergedRow("zone-b", "zone-a", 20, 2)},
				MergedFrom: []*pb.Contributor{{Replica: "r0", AgeSeconds: 0.4}, {Replica: "r1", AgeSeconds: 0.9}},
			},
		},
		{
			name: "owner_elsewhere", mesh: mesh("inventory"), plans: meshPlans(),
			want: &pb.LoadResponse{Service: "payments", Time: ts(t0), Rows: local.Rows, OwnerElsewhere: true, Owner: "r2"},
		},
		{
			// A local plan names no owner.
			name: "owner_elsewhere_unknown", mesh: mesh(), plans: fakePlans{},
			want: &pb.LoadResponse{Service: "payments", Time: ts(t0), Rows: local.Rows, OwnerElsewhere: true},
		},
		{
			name: "owner_no_fresh_summary", mesh: &fakeMesh{owned: map[string]bool{"payments": true}}, plans: fakePlans{},
			want: &pb.LoadResponse{Service: "payments", Time: ts(t0), Merged: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			cfg := Config{Loads: f, Subscriptions: f, Plans: tc.plans, Now: func() time.Time { return t0 }}
			if tc.mesh != nil {
				cfg.Mesh = tc.mesh
			}
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := startGRPC(t, a).Load(context.Background(), &pb.LoadRequest{Service: "Payments."})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
			if tc.mesh != nil {
				for _, now := range tc.mesh.nows {
					if !now.Equal(t0) {
						t.Errorf("Mesh called with now = %v, want Config.Now's %v", now, t0)
					}
				}
			}
			// The HTTP answer is the same.
			checkHTTP(t, a.Handler(), httpCase{method: "GET", target: "/v1/load?service=payments", code: 200, want: tc.want})
		})
	}
}

// TestJoinMesh: the real ownership and merged load make a MeshLoad.
func TestJoinMesh(t *testing.T) {
	var _ Owner = (*ownership.Owners)(nil)
	merged := exchange.NewMerged(exchange.MergedConfig{Now: func() time.Time { return t0 }})
	sum := load.Summary{Replica: "r1", At: t0, Interval: time.Second, Services: []load.ServiceSummary{{
		Service: "payments",
		Flows:   []load.Flow{{ClientZone: "zone-a", Zone: "zone-b", Issued: 7, Succeeded: 7, Reporters: 1, Updated: t0}},
	}}}
	if err := merged.Add(sum, t0); err != nil {
		t.Fatal(err)
	}
	f := newFake()
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: fakePlans{}, Now: func() time.Time { return t0.Add(500 * time.Millisecond) },
		Mesh: JoinMesh(&fakeMesh{owned: map[string]bool{"payments": true}}, merged)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.load(context.Background(), &pb.LoadRequest{Service: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.LoadResponse{
		Service: "payments", Time: ts(t0.Add(500 * time.Millisecond)), Merged: true,
		Rows: []*pb.LoadRow{{ClientZone: "zone-a", Service: "payments", Locality: &pb.Locality{Zone: "zone-b"},
			IssuedRps: 7, SucceededRps: 7, Reporters: 1, Updated: ts(t0)}},
		MergedFrom: []*pb.Contributor{{Replica: "r1", AgeSeconds: 0.5}},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("Load over JoinMesh (-want +got):\n%s", diff)
	}
}

package zoneaware

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The Result JSON of earlier releases, whose Explain held a copy of the
// client zone's ZoneInfo: replicas exchange plans in it (meshweights'
// PlanRecord.Result).
type (
	resultV1 struct {
		Routes             []routeV1
		Zones              []ZoneInfo
		Source             Source
		Fallback           Fallback
		Reason, ReasonZone string
		DataAge            time.Duration
		SameZone, Optimum  float64
		Changed            bool
	}
	routeV1 struct {
		ClientZone string
		Weights    []ZoneWeight
		Changed    bool
		Explain    explainV1
	}
	explainV1 struct {
		ClientZone          string
		Demand, DemandShare float64
		HasDemand           bool
		Source              Source
		Fallback            Fallback
		Reason, ReasonZone  string
		DataAge             time.Duration
		LocalFirst          bool
		Local               float64
		Spill               []ZoneShare
		Capacity            ZoneInfo
		Held                bool
		Moved               float64
	}
)

func toV1(r *Result) resultV1 {
	v := resultV1{Zones: r.Zones, Source: r.Source, Fallback: r.Fallback, Reason: r.Reason, ReasonZone: r.ReasonZone,
		DataAge: r.DataAge, SameZone: r.SameZone, Optimum: r.Optimum, Changed: r.Changed}
	for _, rt := range r.Routes {
		e := rt.Explain
		v.Routes = append(v.Routes, routeV1{ClientZone: rt.ClientZone, Weights: rt.Weights, Changed: rt.Changed, Explain: explainV1{
			ClientZone: e.ClientZone, Demand: e.Demand, DemandShare: e.DemandShare, HasDemand: e.HasDemand, Source: e.Source,
			Fallback: e.Fallback, Reason: e.Reason, ReasonZone: e.ReasonZone, DataAge: e.DataAge, LocalFirst: e.LocalFirst,
			Local: e.Local, Spill: e.Spill, Capacity: e.Capacity.Info(), Held: e.Held, Moved: e.Moved,
		}})
	}
	return v
}

// computedResult is a Compute's result over three zones with load
// reports, a zoneless route among its routes.
func computedResult(t *testing.T) *Result {
	t.Helper()
	calc, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	in := &Input{
		Now: now,
		Endpoints: []Endpoint{
			{ID: "a1", Zone: "a", Healthy: true, Registered: old},
			{ID: "b1", Zone: "b", Healthy: true, Registered: old},
			{ID: "b2", Zone: "b", Healthy: true, Registered: now.Add(-time.Second)},
			{ID: "c1", Zone: "c", Healthy: false, Registered: old},
		},
		Demand: []Demand{{ClientZone: "a", RPS: 400, Updated: now}, {ClientZone: "b", RPS: 400, Updated: now}, {ClientZone: "c", RPS: 200, Updated: now}},
		Loads: []ZoneLoad{
			{Zone: "a", IssuedRPS: 250, SucceededRPS: 240, ErroredRPS: 10, InProgress: 2.5, Updated: now},
			{Zone: "b", IssuedRPS: 500, SucceededRPS: 500, InProgress: 5, Updated: now},
		},
	}
	var st State
	out := &Result{}
	calc.Compute(&st, in, out)
	if len(out.Routes) < 2 || out.Routes[0].ClientZone != "" {
		t.Fatalf("routes = %+v, want a zoneless one and zoned ones", out.Routes)
	}
	return out
}

// A Result's JSON is byte for byte what earlier releases wrote, whose
// Explain copied the client zone's ZoneInfo; each reads the other's.
func TestResultJSONAsEarlierReleases(t *testing.T) {
	r := computedResult(t)
	for i, rt := range r.Routes[1:] {
		if rt.Explain.Capacity.z != &r.Zones[0] && rt.Explain.Capacity.z != &r.Zones[1] && rt.Explain.Capacity.z != &r.Zones[2] {
			t.Errorf("route %d's capacity refers outside Result.Zones", i+1)
		}
	}
	for name, res := range map[string]*Result{"computed": r, "clone": r.Clone()} {
		t.Run(name, func(t *testing.T) {
			got, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			v1 := toV1(res)
			want, err := json.Marshal(v1)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("JSON =\n%s\nwant (as earlier releases)\n%s", got, want)
			}
			// An earlier release reads it.
			var old resultV1
			if err := json.Unmarshal(got, &old); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(old, v1) {
				t.Errorf("an earlier release decodes %+v, want %+v", old, v1)
			}
			// It reads an earlier release's, and writes it back the same.
			var back Result
			if err := json.Unmarshal(want, &back); err != nil {
				t.Fatal(err)
			}
			if !back.Equal(res) {
				t.Errorf("decoded %+v, want %+v", back, res)
			}
			again, err := json.Marshal(&back)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, want) {
				t.Errorf("decoded and encoded again =\n%s\nwant\n%s", again, want)
			}
		})
	}
}

// A clone's references are to its own zones: changing the original's
// does not change the clone's explanations.
func TestCloneRefersToItsOwnZones(t *testing.T) {
	r := computedResult(t)
	c := r.Clone()
	for i := range r.Zones {
		r.Zones[i].Healthy += 100
	}
	for i, rt := range c.Routes[1:] {
		if got := rt.Explain.Capacity.Info().Healthy; got >= 100 {
			t.Errorf("clone route %d: capacity healthy = %d, changed with the original's zones", i+1, got)
		}
	}
}

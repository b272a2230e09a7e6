package weights

import (
	"slices"
	"testing"
	"time"
)

// planMap is a PlanSource over a fixed map.
type planMap map[string]*Plan

func (m planMap) Plan(service string) *Plan { return m[service] }

// TestServed: nil before Serve and on a nil Served; the first source after
// Serve, and a second Serve changes nothing.
func TestServed(t *testing.T) {
	var none *Served
	if p := none.Plan("web"); p != nil {
		t.Errorf("nil Served: plan %v, want nil", p)
	}
	s := &Served{}
	if p := s.Plan("web"); p != nil {
		t.Errorf("before Serve: plan %v, want nil", p)
	}
	first, second := &Plan{Gen: 1}, &Plan{Gen: 2}
	s.Serve(planMap{"web": first})
	s.Serve(planMap{"web": second})
	for _, tc := range []struct {
		service string
		want    *Plan
	}{{"web", first}, {"db", nil}} {
		if got := s.Plan(tc.service); got != tc.want {
			t.Errorf("Plan(%q) = %v, want %v", tc.service, got, tc.want)
		}
	}
}

// TestPlannerSubscribe: every listener hears the services whose plan a
// cycle changed, after OnChange, and nothing when none changed.
func TestPlannerSubscribe(t *testing.T) {
	var calls []string
	p, err := NewPlanner(Config{
		Registry: testStore(t, t0.Add(-time.Hour)), Loads: fakeLoads{}, Clients: fakeClients{}, Zones: fakeZones{},
		OnChange: func(s []string, _ time.Time) { calls = append(calls, "onchange:"+s[0]) },
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Subscribe(func(s []string, _ time.Time) { calls = append(calls, "a:"+s[0]) })
	p.Subscribe(func(s []string, _ time.Time) { calls = append(calls, "b:"+s[0]) })
	p.Cycle(t0)
	if len(calls) != 3 || !slices.Equal([]string{calls[0][:9], calls[1][:2], calls[2][:2]}, []string{"onchange:", "a:", "b:"}) {
		t.Fatalf("first cycle calls = %v, want OnChange then a then b", calls)
	}
	calls = nil
	p.Cycle(t0)
	if len(calls) != 0 {
		t.Errorf("unchanged cycle calls = %v, want none", calls)
	}
}

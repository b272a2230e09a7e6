package demo

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Zones are the demo's three zones, in region Region.
var Zones = []string{"zone-a", "zone-b", "zone-c"}

// Region is the demo's one region.
const Region = "local"

// Scenario is the demo's shape: how much each zone's clients ask of the
// main service, how many backends each zone has and what each can carry,
// and events fired at set times after the start.
type Scenario struct {
	Name        string
	Description string
	// Demand is the main service's requests per second by client zone.
	Demand map[string]float64
	// Backends is the main service's backend count by zone; Limit the
	// concurrency limit of each (capacity = Limit / ServiceTime).
	Backends map[string]int
	Limit    map[string]int
	// Timeline fires events after the start (e.g. throttle a zone at 10 s).
	Timeline []Timed
}

// Timed is an event of a scenario's timeline.
type Timed struct {
	After time.Duration
	Event Event
}

// serviceTime is every backend's service time before a throttle.
const serviceTime = 40 * time.Millisecond

// scenarios maps cmd/spillway-sim/scenarios (same names) to demo behaviour.
var scenarios = map[string]Scenario{
	"default": {
		Name:        "default",
		Description: "demand 60/30/10 % over zones a/b/c, 2/3/1 backends: zone-a spills to b and c",
		Demand:      map[string]float64{"zone-a": 60, "zone-b": 30, "zone-c": 10},
		Backends:    map[string]int{"zone-a": 2, "zone-b": 3, "zone-c": 1},
		Limit:       map[string]int{"zone-a": 6, "zone-b": 4, "zone-c": 4},
	},
	"degraded-zone": {
		Name:        "degraded-zone",
		Description: "even demand and capacity; zone-a throttled to 10% at 10 s, recovers at 70 s",
		Demand:      map[string]float64{"zone-a": 33, "zone-b": 33, "zone-c": 34},
		Backends:    map[string]int{"zone-a": 3, "zone-b": 3, "zone-c": 3},
		Limit:       map[string]int{"zone-a": 4, "zone-b": 4, "zone-c": 4},
		Timeline: []Timed{
			{10 * time.Second, Event{Name: EventThrottleZone, Zone: "zone-a", Factor: 0.1}},
			{70 * time.Second, Event{Name: EventRestoreZone, Zone: "zone-a"}},
		},
	},
	"cold-pod": {
		Name:        "cold-pod",
		Description: "zone-a has one backend; a cold pod joins it at 20 s, once the first endpoints are warm, and warms up (slow start)",
		Demand:      map[string]float64{"zone-a": 34, "zone-b": 33, "zone-c": 33},
		Backends:    map[string]int{"zone-a": 1, "zone-b": 4, "zone-c": 4},
		Limit:       map[string]int{"zone-a": 4, "zone-b": 4, "zone-c": 4},
		Timeline:    []Timed{{20 * time.Second, Event{Name: EventColdPod, Zone: "zone-a"}}},
	},
	"heterogeneous-clients": {
		Name:        "heterogeneous-clients",
		Description: "heavy zone: zone-a's clients send 70% of the traffic; capacity even",
		Demand:      map[string]float64{"zone-a": 70, "zone-b": 15, "zone-c": 15},
		Backends:    map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 2},
		Limit:       map[string]int{"zone-a": 6, "zone-b": 6, "zone-c": 6},
	},
	"worked-example": {
		Name:        "worked-example",
		Description: "DESIGN.md's worked example: clients 40/40/20 %, capacity 25/50/25 %",
		Demand:      map[string]float64{"zone-a": 40, "zone-b": 40, "zone-c": 20},
		Backends:    map[string]int{"zone-a": 1, "zone-b": 2, "zone-c": 1},
		Limit:       map[string]int{"zone-a": 8, "zone-b": 8, "zone-c": 8},
	},
}

// aliases are other names the issue uses for the same scenarios.
var aliases = map[string]string{"heavy-zone": "heterogeneous-clients", "": "default"}

// LookupScenario returns the scenario named name (see ScenarioNames).
func LookupScenario(name string) (Scenario, error) {
	if a, ok := aliases[name]; ok {
		name = a
	}
	s, ok := scenarios[name]
	if !ok {
		return Scenario{}, fmt.Errorf("scenario: %q is not one of %s", name, strings.Join(ScenarioNames(), ", "))
	}
	return s, nil
}

// ScenarioNames lists the scenarios and their aliases, sorted.
func ScenarioNames() []string {
	var out []string
	for n := range scenarios {
		out = append(out, n)
	}
	for a := range aliases {
		if a != "" {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

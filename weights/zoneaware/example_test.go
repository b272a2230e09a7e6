package zoneaware_test

import (
	"fmt"
	"time"

	"github.com/spillway/spillway/weights/zoneaware"
)

// The design's worked example: clients 40/40/20 % in zones a/b/c, capacity
// 25/50/25 % (1, 2 and 1 endpoints), probing off.
func Example() {
	calc, err := zoneaware.New(zoneaware.Config{ProbeShare: new(0.0)})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	in := &zoneaware.Input{
		Now: now,
		Endpoints: []zoneaware.Endpoint{
			{ID: "a1", Zone: "a", Healthy: true, Registered: old},
			{ID: "b1", Zone: "b", Healthy: true, Registered: old},
			{ID: "b2", Zone: "b", Healthy: true, Registered: old},
			{ID: "c1", Zone: "c", Healthy: true, Registered: old},
		},
		Demand: []zoneaware.Demand{{ClientZone: "a", RPS: 400, Updated: now}, {ClientZone: "b", RPS: 400, Updated: now}, {ClientZone: "c", RPS: 200, Updated: now}},
		Loads: []zoneaware.ZoneLoad{
			{Zone: "a", IssuedRPS: 250, SucceededRPS: 250, InProgress: 2.5, Updated: now},
			{Zone: "b", IssuedRPS: 500, SucceededRPS: 500, InProgress: 5, Updated: now},
			{Zone: "c", IssuedRPS: 250, SucceededRPS: 250, InProgress: 2.5, Updated: now},
		},
	}
	var st zoneaware.State
	var out zoneaware.Result
	calc.Compute(&st, in, &out)
	for _, rt := range out.Routes[1:] {
		fmt.Printf("clients in %s:", rt.ClientZone)
		for _, w := range rt.Weights {
			fmt.Printf(" %s=%d", w.Zone, w.Weight)
		}
		fmt.Println()
	}
	fmt.Printf("same zone %.1f%% (optimum %.1f%%)\n", 100*out.SameZone, 100*out.Optimum)
	fmt.Println(out.Route("a").Explain.String())
	// Output:
	// clients in a: a=6250 b=2500 c=1250
	// clients in b: a=1 b=10000 c=1
	// clients in c: a=1 b=1 c=10000
	// same zone 85.0% (optimum 85.0%)
	// a: demand 400 rps (lrs, 40.0%); own zone capacity 25.0% (1 healthy, 0 slow-starting, trust 1.00, queue ×1.00, errors ×1.00, health 1.00); local 62.5%, spill b 25.0% c 12.5%; fallback: none
}

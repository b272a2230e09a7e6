package zoneaware

import (
	"fmt"
	"testing"
	"time"
)

// benchServices returns n services with the given zones, perZone healthy
// endpoints each, and fresh load reports whose demand differs per service.
func benchServices(n, zones, perZone int) []*Input {
	names := make([]string, zones)
	for z := range names {
		names[z] = fmt.Sprintf("zone-%c", 'a'+z)
	}
	ins := make([]*Input, n)
	for s := range ins {
		in := &Input{Now: t0}
		var total float64
		for z, zn := range names {
			for i := range perZone {
				in.Endpoints = append(in.Endpoints, Endpoint{ID: fmt.Sprintf("svc%d-%s-%d", s, zn, i), Zone: zn, Healthy: true, Registered: t0.Add(-time.Hour)})
			}
			rps := float64(100 + (s*7+z*13)%90)
			total += rps
			in.Demand = append(in.Demand, Demand{ClientZone: zn, RPS: rps, Updated: t0})
		}
		for _, zn := range names {
			r := total / float64(zones)
			in.Loads = append(in.Loads, ZoneLoad{Zone: zn, IssuedRPS: r, SucceededRPS: r, InProgress: r * 0.01, Updated: t0})
		}
		in.Clients = []ClientCount{{names[0], 10}}
		ins[s] = in
	}
	return ins
}

// setNow moves every input (and its load data) to now.
func setNow(ins []*Input, now time.Time) {
	for _, in := range ins {
		in.Now = now
		for i := range in.Loads {
			in.Loads[i].Updated = now
		}
		for i := range in.Demand {
			in.Demand[i].Updated = now
		}
	}
}

// BenchmarkCycle: one op is one cycle over every service (each with its
// own State; one Result reused, as a caller that converts the vectors at
// once would).
func BenchmarkCycle(b *testing.B) {
	for _, bc := range []struct{ services, zones, perZone int }{
		{10000, 3, 3},
		{1000, 6, 3},
		{1000, 6, 50},
	} {
		b.Run(fmt.Sprintf("services=%d/zones=%d/endpoints=%d", bc.services, bc.zones, bc.zones*bc.perZone), func(b *testing.B) {
			calc := mustNew(b, Config{})
			ins := benchServices(bc.services, bc.zones, bc.perZone)
			states := make([]State, len(ins))
			var out Result
			now := t0
			cycle := func() {
				now = now.Add(10 * time.Second)
				setNow(ins, now)
				for i, in := range ins {
					calc.Compute(&states[i], in, &out)
				}
			}
			cycle() // the first two cycles size the States
			cycle()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cycle()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(bc.services), "ns/service")
		})
	}
}

// TestNoAllocs: a steady-state cycle allocates nothing.
func TestNoAllocs(t *testing.T) {
	calc := mustNew(t, Config{})
	ins := benchServices(10, 3, 4)
	states := make([]State, len(ins))
	var out Result
	now := t0
	cycle := func() {
		now = now.Add(10 * time.Second)
		setNow(ins, now)
		for i, in := range ins {
			calc.Compute(&states[i], in, &out)
		}
	}
	cycle()
	if n := testing.AllocsPerRun(20, cycle); n != 0 {
		t.Errorf("allocations per cycle = %v, want 0", n)
	}
}

package pid

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCompute is one PID cycle over 100,000 endpoints, as 10,000
// services of 10 and as one service of 100,000, in steady state (the
// endpoint sets unchanged, every report fresh).
func BenchmarkCompute(b *testing.B) {
	for _, sh := range []struct{ services, per int }{{10000, 10}, {1, 100000}} {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d", sh.services, sh.per), func(b *testing.B) {
			c, err := New(Config{})
			if err != nil {
				b.Fatal(err)
			}
			sts := make([]State, sh.services)
			rs := make([]Result, sh.services)
			ins := make([]*Input, sh.services)
			for s := range ins {
				in := &Input{Now: t0}
				for i := range sh.per {
					in.Endpoints = append(in.Endpoints, Endpoint{ID: fmt.Sprintf("svc%d-ep%d", s, i), Zone: "a", Utilization: 0.3 + float64((s+i)%7)/10, Reported: t0})
				}
				ins[s] = in
				for range 2 { // both buffers of the State grown
					c.Compute(&sts[s], in, &rs[s])
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; b.Loop(); k++ {
				now := t0.Add(time.Duration(k+1) * 10 * time.Second)
				for s, in := range ins {
					in.Now = now
					for i := range in.Endpoints {
						in.Endpoints[i].Reported = now
					}
					c.Compute(&sts[s], in, &rs[s])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/cycle")
		})
	}
}

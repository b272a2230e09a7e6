package subset

import (
	"fmt"
	"testing"
)

// benchScales are the two sizes: M slots, N endpoints, subsets
// of s.
var benchScales = []struct{ m, n, s int }{
	{1000, 100, 10},
	{10000, 1000, 20},
}

func benchName(mode Mode, m, n, s int) string {
	return fmt.Sprintf("%s/M=%d/N=%d/s=%d", mode, m, n, s)
}

// BenchmarkAssignScratch is Assign with no previous assignment: a
// replica's first plan of a service, or another subset size or mode.
func BenchmarkAssignScratch(b *testing.B) {
	for _, mode := range []Mode{Deterministic, Random} {
		for _, sc := range benchScales {
			b.Run(benchName(mode, sc.m, sc.n, sc.s), func(b *testing.B) {
				in := oneZone(mode, sc.m, sc.n, sc.s)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Assign(nil, in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkAssignIncremental is Assign from the previous assignment after
// one change: what the planner runs each cycle a client or an endpoint
// comes; and after none, what it runs every other cycle. The previous
// assignment is made once, outside the timing.
func BenchmarkAssignIncremental(b *testing.B) {
	changes := []struct {
		name string
		edit func(in *Input, m int)
	}{
		{"client_joined", func(in *Input, m int) { in.Slots = map[Group]int{{Zone: "a"}: m + 1} }},
		{"endpoint_added", func(in *Input, _ int) {
			in.Localities = map[string][]string{"a": append(in.Localities["a"], "ep-new")}
		}},
		{"unchanged", func(*Input, int) {}},
	}
	for _, mode := range []Mode{Deterministic, Random} {
		for _, ch := range changes {
			for _, sc := range benchScales {
				b.Run(ch.name+"/"+benchName(mode, sc.m, sc.n, sc.s), func(b *testing.B) {
					prev, err := Assign(nil, oneZone(mode, sc.m, sc.n, sc.s))
					if err != nil {
						b.Fatal(err)
					}
					in := oneZone(mode, sc.m, sc.n, sc.s)
					ch.edit(&in, sc.m)
					b.ReportAllocs()
					for b.Loop() {
						if _, err := Assign(prev, in); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

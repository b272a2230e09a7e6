package main

import "testing"

func TestRegionSizes(t *testing.T) {
	for _, f := range []float64{0.001, 0.01, 0.1, 0.5, 1} {
		r := newRegion(f)
		sizes := r.Sizes()
		if len(sizes) != r.Services {
			t.Fatalf("%v: %d sizes, want %d", f, len(sizes), r.Services)
		}
		sum, max := 0, 0
		for i, s := range sizes {
			if s < 1 {
				t.Fatalf("%v: service %d has %d endpoints", f, i, s)
			}
			sum += s
			max = maxInt(max, s)
		}
		if sum != r.Endpoints {
			t.Fatalf("%v: %d endpoints, want %d", f, sum, r.Endpoints)
		}
		n, seen := 0, map[string]bool{}
		r.Walk(func(ep Endpoint) bool {
			if seen[ep.ID] {
				t.Fatalf("%v: endpoint id %s twice", f, ep.ID)
			}
			seen[ep.ID] = true
			n++
			return true
		})
		if n != r.Endpoints {
			t.Fatalf("%v: walked %d endpoints, want %d", f, n, r.Endpoints)
		}
		t.Logf("%v: %d services, %d endpoints, largest %d", f, r.Services, r.Endpoints, max)
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

package resolver

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/spillway/spillway/registry"
)

func bigService(t testing.TB, store *registry.Store, name string, n int) map[string]string {
	t.Helper()
	zoneOf := map[string]string{}
	ops := make([]registry.Op, 0, n)
	for i := range n {
		// Uneven zones: 50% / 30% / 20%.
		z := "zone-a"
		switch {
		case i%10 >= 8:
			z = "zone-c"
		case i%10 >= 5:
			z = "zone-b"
		}
		id := fmt.Sprintf("ep-%05d", i)
		zoneOf[id+"."+name+".spillway.internal."] = z
		ops = append(ops, upsert(name, endpointSpec{id: id, addr: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255+0), zone: z}))
	}
	// Some unhealthy ones that must never appear.
	for i := range 10 {
		ops = append(ops, upsert(name, endpointSpec{id: fmt.Sprintf("sick-%d", i), addr: fmt.Sprintf("10.200.0.%d", i+1), zone: "zone-a", health: registry.Unhealthy}))
	}
	mustApply(t, store, ops...)
	return zoneOf
}

// TestBigService is acceptance 2 at the resolver: 10,000 endpoints. UDP
// gets TC; TCP gets a valid answer under 65,536 bytes with endpoints of
// every zone in proportion; repeated queries cover every endpoint.
func TestBigService(t *testing.T) {
	store, s := newTestServer(t)
	zoneOf := bigService(t, store, "big", 10000)
	for _, qt := range []uint16{dns.TypeSRV, dns.TypeA} {
		name := "_grpc._tcp.big.spillway.internal."
		if qt == dns.TypeA {
			name = "big.spillway.internal."
		}
		t.Run(dns.TypeToString[qt], func(t *testing.T) {
			q := newQuery(name, qt)
			q.SetEdns0(4096, false)
			m, _ := query(t, s, q, false)
			if !m.Truncated || len(m.Answer) != 0 {
				t.Errorf("UDP: TC %v with %d answers, want TC and none", m.Truncated, len(m.Answer))
			}
			seen := map[string]bool{}
			for i := 0; i < 100 && len(seen) < 10000; i++ {
				m, n := query(t, s, q, true)
				if n > 65535 {
					t.Fatalf("TCP answer of %d bytes, over 65,535", n)
				}
				if m.Truncated || m.Rcode != dns.RcodeSuccess {
					t.Fatalf("TCP: TC %v rcode %s", m.Truncated, dns.RcodeToString[m.Rcode])
				}
				perZone := map[string]int{}
				for _, rr := range m.Answer {
					var key string
					switch rr := rr.(type) {
					case *dns.SRV:
						key = rr.Target
					case *dns.A:
						key = rr.A.String()
					}
					if key == "" || (qt == dns.TypeSRV && zoneOf[key] == "") {
						t.Fatalf("unexpected record %v", rr)
					}
					seen[key] = true
					perZone[zoneOf[key]]++
				}
				if qt == dns.TypeSRV {
					if len(m.Extra) < len(m.Answer) {
						t.Errorf("%d glue records for %d SRV", len(m.Extra), len(m.Answer))
					}
					total := len(m.Answer)
					for z, want := range map[string]float64{"zone-a": 0.5, "zone-b": 0.3, "zone-c": 0.2} {
						share := float64(perZone[z]) / float64(total)
						if share < want-0.02 || share > want+0.02 {
							t.Errorf("query %d: zone %s has %.3f of the subset, want %.2f", i, z, share, want)
						}
					}
					if i == 0 {
						t.Logf("SRV subset: %d of 10000 endpoints, %d bytes", total, n)
					}
				}
			}
			if len(seen) != 10000 {
				t.Errorf("100 TCP queries covered %d of 10000 endpoints", len(seen))
			}
		})
	}
}

func TestZoneSubsets(t *testing.T) {
	mk := func(counts map[string]int) []*registry.Endpoint {
		var out []*registry.Endpoint
		for z, n := range counts {
			for i := range n {
				out = append(out, &registry.Endpoint{ID: fmt.Sprintf("%s-%d", z, i), Locality: registry.Locality{Zone: z}})
			}
		}
		return out
	}
	tests := []struct {
		name   string
		counts map[string]int
		k      int
	}{
		{"even", map[string]int{"a": 300, "b": 300, "c": 300}, 100},
		{"uneven", map[string]int{"a": 700, "b": 200, "c": 7}, 90},
		{"one_zone", map[string]int{"": 1000}, 333},
		{"k_not_dividing", map[string]int{"a": 13, "b": 17}, 7},
		{"k_near_n", map[string]int{"a": 10, "b": 10}, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := mk(tt.counts)
			subs := zoneSubsets(eps, tt.k)
			covered := map[string]bool{}
			for i, sub := range subs {
				if len(sub) > tt.k {
					t.Errorf("subset %d has %d endpoints, more than k=%d", i, len(sub), tt.k)
				}
				dup := map[string]bool{}
				for _, e := range sub {
					if dup[e.ID] {
						t.Errorf("subset %d holds %s twice", i, e.ID)
					}
					dup[e.ID] = true
					covered[e.ID] = true
				}
			}
			if len(covered) != len(eps) {
				t.Errorf("subsets cover %d of %d endpoints", len(covered), len(eps))
			}
		})
	}
}

package benchdata

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFileRoundTrip(t *testing.T) {
	want := Services(3, 4, 2)
	path := filepath.Join(t.TempDir(), "data.tsv")
	if err := WriteFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, zones, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("ReadFile(WriteFile(s)) differs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Zones(2), zones); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
}

// sized is a data set of services with the given endpoint counts.
func sized(sizes ...int) []Service {
	out := make([]Service, len(sizes))
	for i, n := range sizes {
		out[i] = Service{Name: ServiceName(i), Endpoints: make([]Endpoint, n)}
	}
	return out
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		k     int
		want  []int // streams per service
	}{
		{"even", []int{5, 5, 5}, 6, []int{2, 2, 2}},
		{"proportional", []int{10, 5, 5}, 8, []int{4, 2, 2}},
		{"largest_remainder", []int{5, 3, 2}, 4, []int{2, 1, 1}},
		{"tie_to_earlier", []int{6, 3, 1}, 4, []int{3, 1, 0}},
		{"fewer_streams_than_services", []int{1, 1, 1, 1}, 2, []int{1, 1, 0, 0}},
		{"one_big", []int{100, 1, 1}, 10, []int{10, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Spread(sized(tc.sizes...), tc.k)
			if len(got) != tc.k {
				t.Fatalf("Spread gave %d streams, want %d", len(got), tc.k)
			}
			counts := make([]int, len(tc.sizes))
			for i, s := range got {
				if i > 0 && s < got[i-1] {
					t.Fatalf("stream %d has service %d after service %d: a service's streams are not consecutive", i, s, got[i-1])
				}
				counts[s]++
			}
			if diff := cmp.Diff(tc.want, counts); diff != "" {
				t.Errorf("streams per service (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPairPlan(t *testing.T) {
	services := sized(10, 5, 5, 0)
	svcOf := Spread(services, 20)
	plan, err := PairPlan(services, Zones(3), svcOf, 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 6 {
		t.Fatalf("%d changes, want 6", len(plan))
	}
	used := map[int]bool{}
	for j := 0; j < len(plan); j += 2 {
		add, remove := plan[j], plan[j+1]
		if !add.Add || remove.Add || add.Service != remove.Service || add.Endpoint != remove.Endpoint {
			t.Errorf("changes %d and %d = %+v, %+v; want an add and the removal of the same endpoint of the same service", j, j+1, add, remove)
		}
		if used[add.Service] {
			t.Errorf("service %d drawn twice", add.Service)
		}
		used[add.Service] = true
		if add.Service == 3 {
			t.Errorf("change %d on service 3, which has no stream", j)
		}
	}
	if _, err := PairPlan(services, Zones(3), svcOf, 8); err == nil {
		t.Errorf("PairPlan of 4 pairs over 3 services with streams: no error")
	}
	if _, err := PairPlan(services, Zones(3), svcOf, 3); err == nil {
		t.Errorf("PairPlan of an odd count: no error")
	}
}

func TestChurnPlan(t *testing.T) {
	services := sized(10, 5, 5, 0)
	svcOf := Spread(services, 20)
	plan, err := ChurnPlan(services, Zones(3), svcOf, 20, 600, 40)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 600 {
		t.Fatalf("%d changes, want 600", len(plan))
	}
	drawn := make([]int, len(services))
	addrs := map[netip.Addr]bool{}
	for j, c := range plan {
		if c.Seq != 40+j || !c.Add {
			t.Fatalf("change %d = %+v, want an addition with seq %d", j, c, 40+j)
		}
		a := c.Endpoint.Address.As4()
		if a[0] != 10 || a[1] < 251 || a[1] > 253 || a[3] == 0 || a[3] == 255 || addrs[c.Endpoint.Address] {
			t.Fatalf("change %d adds %s: want a new address in 10.251.0.0/16-10.253.0.0/16, host byte 1 to 254", j, c.Endpoint.Address)
		}
		addrs[c.Endpoint.Address] = true
		drawn[c.Service]++
	}
	// Streams 10:5:5:0, so about 300:150:150:0 changes.
	if drawn[3] != 0 {
		t.Errorf("service 3, which has no stream, drawn %d times", drawn[3])
	}
	if drawn[0] < 240 || drawn[0] > 360 || drawn[1] < 100 || drawn[2] < 100 {
		t.Errorf("changes per service %v, want about 300, 150, 150, 0", drawn)
	}
	again, err := ChurnPlan(services, Zones(3), svcOf, 20, 600, 40)
	if err != nil || !slices.Equal(again, plan) {
		t.Errorf("a second ChurnPlan of the same arguments differs (err %v)", err)
	}
	last, err := ChurnPlan(services, Zones(3), svcOf, 20, MaxChurn, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a := last[MaxChurn-1].Endpoint.Address; a != netip.MustParseAddr("10.253.255.254") {
		t.Errorf("the last of MaxChurn changes adds %s, want 10.253.255.254", a)
	}
	for _, bad := range []struct{ k, n int }{{20, 0}, {20, MaxChurn + 1}, {0, 10}, {19, 10}} {
		if _, err := ChurnPlan(services, Zones(3), svcOf, bad.k, bad.n, 0); err == nil {
			t.Errorf("ChurnPlan(k=%d, n=%d): no error", bad.k, bad.n)
		}
	}
}

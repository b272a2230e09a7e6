package xds

import (
	"strconv"
	"testing"

	v3routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/xds/routing"
)

// summary is a route as "match → clusters" for comparison.
func summary(rc *v3routepb.RouteConfiguration) []string {
	var out []string
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		m := r.GetMatch()
		s := "prefix=" + m.GetPrefix()
		if p := m.GetPath(); p != "" {
			s = "path=" + p
		}
		for _, h := range m.GetHeaders() {
			s += " " + h.GetName()
		}
		a := r.GetRoute()
		s += " →"
		if c := a.GetCluster(); c != "" {
			s += " " + c
		}
		for _, wc := range a.GetWeightedClusters().GetClusters() {
			s += " " + wc.GetName() + ":" + strconv.FormatUint(uint64(wc.GetWeight().GetValue()), 10)
		}
		out = append(out, s)
	}
	return out
}

func TestRouteWith(t *testing.T) {
	rules, err := routing.Parse("t", []byte(`rules:
  - name: synthetic
    match:
      headers: [{name: x-traffic-class, exact: synthetic}]
      path_prefix: /pay.v1.Pay/
    to: pay-synthetic
  - name: canary
    split:
      - {to: pay, weight: 90}
      - {to: pay-canary, weight: 10}
      - {to: pay-next, weight: 0}
default: pay-fallback
`))
	if err != nil {
		t.Fatal(err)
	}
	warm := "path=" + warmPath + " " + warmHeader + " →"
	for _, tc := range []struct {
		name        string
		present     []string
		want        []string
		wantDropped []int
	}{
		{"all_present", []string{"pay-synthetic", "pay-canary", "pay-next", "pay-fallback"}, []string{
			"prefix=/pay.v1.Pay/ x-traffic-class → pay-synthetic",
			"prefix= → pay:90 pay-canary:10 pay-next:0",
			warm + " pay-next",
			"prefix= → pay-fallback",
		}, nil},
		{"synthetic_gone", []string{"pay-canary", "pay-next", "pay-fallback"}, []string{
			"prefix= → pay:90 pay-canary:10 pay-next:0",
			warm + " pay-next",
			"prefix= → pay-fallback",
		}, []int{0}},
		{"split_member_gone_default_gone", []string{"pay-synthetic", "pay-canary"}, []string{
			"prefix=/pay.v1.Pay/ x-traffic-class → pay-synthetic",
			"prefix= → pay",
		}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			present := map[string]bool{}
			for _, p := range tc.present {
				present[p] = true
			}
			rc, dropped := routeWith("pay", rules, func(s string) bool { return present[s] }, nil)
			if d := cmp.Diff(tc.want, summary(rc)); d != "" {
				t.Errorf("routes (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantDropped, dropped); d != "" {
				t.Errorf("dropped (-want +got):\n%s", d)
			}
			if err := checkForGRPC(RouteType, rc); err != nil {
				t.Errorf("checkForGRPC: %v", err)
			}
		})
	}
}

func TestRouteKey(t *testing.T) {
	rules, err := routing.Parse("t", []byte("rules:\n  - {to: a}\n  - split: [{to: b, weight: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	all := func(string) bool { return true }
	noB := func(s string) bool { return s != "b" }
	if routeKey(1, rules, all) == routeKey(2, rules, all) {
		t.Error("the key does not change with the revision")
	}
	if routeKey(1, rules, all) == routeKey(1, rules, noB) {
		t.Error("the key does not change when a target goes")
	}
	if routeKey(1, rules, all) != routeKey(1, rules, all) {
		t.Error("the key is not stable")
	}
}

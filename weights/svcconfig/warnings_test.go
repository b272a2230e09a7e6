package svcconfig

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPutWarnings: a redirect to a region without healthy endpoints, or
// exclusions that leave none, are accepted (200, the config is stored)
// with a warning naming the field; rules that apply, expired rules and a
// store without Regions give none. An endpoint-picking policy that works
// against PID weights warns too, with or without Regions.
func TestPutWarnings(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	regionsOf := func(service string) []string {
		if service == "cart" {
			return []string{"r1", "r2"}
		}
		return nil
	}
	tests := []struct {
		name, service, body string
		noRegions           bool
		want                []string
	}{
		{name: "applies", service: "cart", body: "redirects:\n  - {from: r1, to: r2}\n"},
		{name: "redirect-no-endpoints", service: "cart", body: "redirects:\n  - {from: r1, to: r2}\n  - {from: r2, to: r3}\n",
			want: []string{"redirects[1].to: r3 has no healthy endpoint of cart now: the redirect does not apply until it has one"}},
		{name: "redirect-expired", service: "cart", body: "redirects:\n  - {from: r2, to: r3, until: 2026-12-01T11:00:00Z}\n"},
		{name: "exclude-all", service: "cart", body: "exclude:\n  - {region: r1}\n  - {region: r2}\n",
			want: []string{"exclude: leaves cart no region with endpoints (r1, r2): nothing is excluded (fail open)"}},
		{name: "exclude-one", service: "cart", body: "exclude:\n  - {region: r1}\n"},
		{name: "no-regions-config", service: "cart", body: "redirects:\n  - {from: r2, to: r3}\n", noRegions: true},
		{name: "no-rules", service: "cart", body: "strategy: pid\n"},
		{name: "least-request-pid", service: "cart", body: "strategy: pid\nresilience: {lb: {least_request: {}}}\n",
			want: []string{"resilience.lb.least_request: gRPC clients ignore endpoint weights under least_request/client_wrr: PID weights (strategy pid) will not apply; locality weights still do"}},
		{name: "client-wrr-pid-no-regions", service: "cart", body: "strategy: zone-aware+pid\nresilience: {lb: {client_wrr: {}}}\n", noRegions: true,
			want: []string{"resilience.lb.client_wrr: gRPC clients ignore endpoint weights under least_request/client_wrr: PID weights (strategy zone-aware+pid) will not apply; locality weights still do"}},
		{name: "redirect-and-ring-hash-pid", service: "cart", body: "strategy: pid\nredirects: [{from: r1, to: r3}]\nresilience: {lb: {ring_hash: {header: x-user}}}\n",
			want: []string{
				"redirects[0].to: r3 has no healthy endpoint of cart now: the redirect does not apply until it has one",
				"resilience.lb.ring_hash: the ring is built from the endpoint weights: every PID weight change (strategy pid) rebuilds the ring and moves keys",
			}},
		{name: "ring-hash-zone-aware", service: "cart", body: "resilience: {lb: {ring_hash: {header: x-user}}}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := StoreConfig{Now: func() time.Time { return now }, Regions: regionsOf}
			if tt.noRegions {
				cfg.Regions = nil
			}
			s, err := NewStore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(s.Handler("s3cret", nil))
			defer srv.Close()
			req, _ := http.NewRequest("PUT", srv.URL+"/v1/config/"+tt.service, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer s3cret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e Entry
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 200 {
				t.Fatalf("PUT = %d, %v", resp.StatusCode, err)
			}
			if diff := cmp.Diff(tt.want, e.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if _, _, ok := s.Get(tt.service); !ok {
				t.Errorf("config not stored")
			}
		})
	}
}

package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/xds"
)

func ep(id, ip, zone string, h registry.Health, src registry.Source) *registry.Endpoint {
	return &registry.Endpoint{ID: id, Address: netip.MustParseAddr(ip), Ports: []registry.Port{{Name: "grpc", Number: 50051}},
		Locality: registry.Locality{Zone: zone}, Health: h, Source: src}
}

// summaryStore: payments (2 zones, one draining), checkout (static, no
// zone), inventory (declared, no endpoints).
func summaryStore(t testing.TB) *registry.Store {
	t.Helper()
	s := registry.NewStore()
	if _, err := s.Apply(
		registry.Upsert("payments", ep("p1", "10.0.0.1", "zone-a", registry.Healthy, registry.SourceVM)),
		registry.Upsert("payments", ep("p2", "10.0.0.2", "zone-a", registry.Unhealthy, registry.SourceVM)),
		registry.Upsert("payments", ep("p3", "10.0.0.3", "zone-b", registry.Draining, registry.SourceKubernetes)),
		registry.Upsert("checkout", ep("c1", "10.0.1.1", "", registry.Healthy, registry.SourceStatic)),
		registry.Declare("inventory"),
	); err != nil {
		t.Fatal(err)
	}
	return s
}

func summaryAPI(t testing.TB, f *fakeXDS, reg Snapshotter) http.Handler {
	t.Helper()
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: f, Registry: reg, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return a.Handler()
}

func getSummary(t *testing.T, h http.Handler, query string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/summary"+query, nil))
	return rec.Code, rec.Body.Bytes()
}

func TestSummary(t *testing.T) {
	h := summaryAPI(t, newFake(), summaryStore(t))
	payments := ServiceSummary{
		Name: "payments", Endpoints: 3, HealthCounts: HealthCounts{Healthy: 1, Draining: 1, Unhealthy: 1},
		Zones: []ZoneCount{
			{Zone: "zone-a", HealthCounts: HealthCounts{Healthy: 1, Unhealthy: 1}},
			{Zone: "zone-b", HealthCounts: HealthCounts{Draining: 1}},
		},
		Sources: []string{"kubernetes", "vm"},
		// checkout-1 (two streams), checkout-2, mystery, envoy-1.
		XDSClients: 4, XDSStreams: 5, Weights: true,
	}
	checkout := ServiceSummary{Name: "checkout", Endpoints: 1, HealthCounts: HealthCounts{Healthy: 1},
		Zones: []ZoneCount{{Zone: "", HealthCounts: HealthCounts{Healthy: 1}}}, Sources: []string{"static"}}
	inventory := ServiceSummary{Name: "inventory", Zones: []ZoneCount{}, Sources: []string{}, XDSClients: 1, XDSStreams: 1}
	// 6 streams of 5 nodes; client services checkout and edge, of which
	// checkout is in the registry: 3 - 1 services have no stream.
	clients := ClientCounts{XDSServices: 2, XDSNodes: 5, XDSStreams: 6, DNSServices: 2}

	for _, tc := range []struct {
		name, query string
		want        Summary
	}{
		{"all", "", Summary{Total: 3, Limit: 100, Services: []ServiceSummary{checkout, inventory, payments}}},
		{"search", "?query=PAY", Summary{Total: 1, Limit: 100, Services: []ServiceSummary{payments}}},
		{"search-substring", "?query=o", Summary{Total: 2, Limit: 100, Services: []ServiceSummary{checkout, inventory}}},
		{"name", "?name=checkout", Summary{Total: 1, Limit: 100, Services: []ServiceSummary{checkout}}},
		{"name-unknown", "?name=nope", Summary{Total: 0, Limit: 100, Services: []ServiceSummary{}}},
		{"page-1", "?limit=2", Summary{Total: 3, Limit: 2, Services: []ServiceSummary{checkout, inventory}}},
		{"page-2", "?limit=2&offset=2", Summary{Total: 3, Offset: 2, Limit: 2, Services: []ServiceSummary{payments}}},
		{"past-the-end", "?offset=10", Summary{Total: 3, Offset: 10, Limit: 100, Services: []ServiceSummary{}}},
		{"no-match", "?query=zzz", Summary{Total: 0, Limit: 100, Services: []ServiceSummary{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := getSummary(t, h, tc.query)
			if code != http.StatusOK {
				t.Fatalf("GET /v1/summary%s = %d %s, want 200", tc.query, code, body)
			}
			var got Summary
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			tc.want.Version, tc.want.Clients, tc.want.Time = 1, clients, t0
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GET /v1/summary%s (-want +got):\n%s", tc.query, diff)
			}
		})
	}
}

func TestSummaryJSONNames(t *testing.T) {
	_, body := getSummary(t, summaryAPI(t, newFake(), summaryStore(t)), "?name=payments")
	for _, k := range []string{`"total":1`, `"services":[{"name":"payments","endpoints":3,"healthy":1,"draining":1,"unhealthy":1,"zones":[{"zone":"zone-a"`,
		`"sources":["kubernetes","vm"]`, `"xds_clients":4`, `"xds_streams":5`, `"weights":true`, `"clients":{"xds_services":2,"xds_nodes":5,"xds_streams":6,"dns_services":2}`} {
		if !strings.Contains(string(body), k) {
			t.Errorf("GET /v1/summary?name=payments = %s, lacks %s", body, k)
		}
	}
}

func TestSummaryErrors(t *testing.T) {
	h := summaryAPI(t, newFake(), summaryStore(t))
	for _, tc := range []struct {
		query, field string
		code         int
	}{
		{"?limit=0", "limit", 400},
		{"?limit=1001", "limit", 400},
		{"?limit=x", "limit", 400},
		{"?offset=-1", "offset", 400},
		{"?offset=1e3", "offset", 400},
		{"?offset=1&offset=2", "offset", 400},
		{"?servce=a", "servce", 400},
		{"?name=Bad_Name", "name", 400},
		{"?query=" + strings.Repeat("a", 254), "query", 400},
		{"?query=%zz", "query", 400},
	} {
		t.Run(tc.query, func(t *testing.T) {
			code, body := getSummary(t, h, tc.query)
			var e httpjson.Error
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if code != tc.code || e.Field != tc.field || !strings.HasPrefix(e.Error, tc.field+": ") {
				t.Errorf("GET /v1/summary%s = %d %+v, want %d naming %q", tc.query, code, e, tc.code, tc.field)
			}
		})
	}
	t.Run("no-registry", func(t *testing.T) {
		if code, _ := getSummary(t, summaryAPI(t, newFake(), nil), ""); code != http.StatusNotImplemented {
			t.Errorf("GET /v1/summary without a registry = %d, want 501", code)
		}
	})
	t.Run("post", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/summary", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST /v1/summary = %d, want 405", rec.Code)
		}
	})
}

func FuzzParseSummaryQuery(f *testing.F) {
	for _, s := range []string{"", "query=pay&offset=100&limit=100", "name=payments", "limit=0", "offset=-1", "query=%zz", "a=1&a=2", "limit=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := ParseSummaryQuery(raw)
		if err != nil {
			var fe *registry.FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("ParseSummaryQuery(%q) = %v, want a FieldError naming the parameter", raw, err)
			}
			return
		}
		if q.Offset < 0 || q.Limit < 1 || q.Limit > MaxSummaryLimit || len(q.Query) > maxSummaryQuery {
			t.Fatalf("ParseSummaryQuery(%q) = %+v, out of bounds", raw, q)
		}
		if q.Name != "" {
			if err := registry.ValidateService("name", q.Name); err != nil {
				t.Fatalf("ParseSummaryQuery(%q) kept invalid name %q", raw, q.Name)
			}
		}
	})
}

// BenchmarkSummary is one services page (100) at 5,000 services with 3
// endpoints each and 1,000 ADS streams: the server time of the page's
// GET /v1/summary.
func BenchmarkSummary(b *testing.B) {
	for _, n := range []int{500, 5000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			s := registry.NewStore()
			var ops []registry.Op
			for i := range n {
				name := fmt.Sprintf("svc-%05d", i)
				for z := range 3 {
					ops = append(ops, registry.Upsert(name, ep(fmt.Sprintf("e%d", z), fmt.Sprintf("10.%d.%d.%d", z, i/250, i%250+1), fmt.Sprintf("zone-%c", 'a'+z), registry.Healthy, registry.SourceVM)))
				}
			}
			if _, err := s.Apply(ops...); err != nil {
				b.Fatal(err)
			}
			f := newFake()
			f.subs = nil
			for i := range 1000 {
				f.subs = append(f.subs, subscription(i, n))
			}
			h := summaryAPI(b, f, s)
			for _, q := range []string{"?offset=0&limit=100", "?query=svc-04&offset=100&limit=100"} {
				b.Run(strings.NewReplacer("?", "", "&", ",").Replace(q), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/summary"+q, nil))
						if rec.Code != http.StatusOK {
							b.Fatalf("status %d: %s", rec.Code, rec.Body)
						}
					}
				})
			}
		})
	}
}

func subscription(i, services int) xds.Subscription {
	return xds.Subscription{NodeID: fmt.Sprintf("node-%d", i), Zone: fmt.Sprintf("zone-%c", 'a'+i%3), ClientService: fmt.Sprintf("svc-%05d", i%services),
		Services: []string{fmt.Sprintf("svc-%05d", (i*7)%services), fmt.Sprintf("svc-%05d", (i*13)%services)}}
}

package admin

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/weights"
	"github.com/spillway/spillway/weights/zoneaware"
	"github.com/spillway/spillway/xds"
)

// fakeXDS is a hand-written fake of LoadReader, SubscriptionLister and
// Plans.
type fakeXDS struct {
	loads []load.Load
	subs  []xds.Subscription
	plans map[string]*zoneaware.Result

	// mu guards the calls seen.
	mu       sync.Mutex
	services []string
	nows     []time.Time
	planned  []string
}

func (f *fakeXDS) Loads(service string, now time.Time) []load.Load {
	f.mu.Lock()
	f.services = append(f.services, service)
	f.nows = append(f.nows, now)
	f.mu.Unlock()
	var out []load.Load
	for _, l := range f.loads {
		if service == "" || l.Service == service {
			out = append(out, l)
		}
	}
	return out
}

func (f *fakeXDS) Subscriptions() []xds.Subscription { return f.subs }

func (f *fakeXDS) Plan(service string) *weights.Plan {
	f.mu.Lock()
	f.planned = append(f.planned, service)
	f.mu.Unlock()
	if res := f.plans[service]; res != nil {
		return &weights.Plan{Gen: 1, Result: res, Source: weights.SourceLocal}
	}
	return nil
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func flow(clientZone, client, service, zone string, issued, ok, errored float64, reporters int) load.Load {
	l := load.Load{
		Key: load.Key{ClientZone: clientZone, ClientService: client, Service: service,
			Locality: registry.Locality{Region: "r1", Zone: zone}},
		Issued: issued, Succeeded: ok, Errored: errored,
		InProgress:  3,
		TotalIssued: 1000, TotalSucceeded: 990, TotalErrored: 10,
		Reporters: reporters,
	}
	if reporters > 0 {
		l.Updated = t0.Add(-4 * time.Second)
	}
	return l
}

func newFake() *fakeXDS {
	return &fakeXDS{
		loads: []load.Load{
			flow("zone-a", "checkout", "payments", "zone-a", 10, 9.5, 0.5, 2),
			flow("zone-b", "checkout", "payments", "zone-a", 2.5, 2.5, 0, 1),
			// Only stale reports: a row for load, no edge for graph.
			flow("zone-a", "frontend", "payments", "zone-b", 0, 0, 0, 0),
			// Load without an ADS stream on this server.
			flow("zone-c", "batch", "payments", "zone-c", 1, 1, 0, 1),
			flow("zone-a", "checkout", "inventory", "zone-a", 4, 4, 0, 1),
		},
		subs: []xds.Subscription{
			{NodeID: "checkout-1", Zone: "zone-a", ClientService: "checkout", Services: []string{"payments", "inventory"}},
			{NodeID: "checkout-1", Zone: "zone-a", ClientService: "checkout", Services: []string{"payments"}},
			{NodeID: "checkout-2", Zone: "zone-b", ClientService: "checkout", Services: []string{"payments"}},
			{NodeID: "mystery", Zone: "", ClientService: "", Services: []string{"payments"}},
			{NodeID: "envoy-1", Zone: "zone-a", ClientService: "edge", Wildcard: true, Services: []string{"payments"}},
			{NodeID: "idle", Zone: "zone-a", ClientService: "checkout"}, // no subscriptions yet
		},
		plans: map[string]*zoneaware.Result{
			"payments": workedExample(),
			"search":   staleExample(),
		},
	}
}

func newAPI(t *testing.T, f *fakeXDS) *API {
	t.Helper()
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: f, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestNewValidates(t *testing.T) {
	f := newFake()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no_loads", Config{Subscriptions: f, Plans: f}, "Loads"},
		{"no_subscriptions", Config{Loads: f, Plans: f}, "Subscriptions"},
		{"no_plans", Config{Loads: f, Subscriptions: f}, "Plans"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error = %v, want one naming %s", err, tc.want)
			}
		})
	}
	a, err := New(Config{Loads: f, Subscriptions: f, Plans: f})
	if err != nil {
		t.Fatalf("New with the required fields: %v", err)
	}
	if a.log == nil || a.now == nil {
		t.Errorf("New left Logger or Now nil")
	}
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func wantPaymentsLoad() *pb.LoadResponse {
	row := func(clientZone, client, zone string, issued, ok, errored float64, reporters uint32) *pb.LoadRow {
		r := &pb.LoadRow{
			ClientZone: clientZone, ClientService: client, Service: "payments",
			Locality:  &pb.Locality{Region: "r1", Zone: zone},
			IssuedRps: issued, SucceededRps: ok, ErroredRps: errored,
			InProgress: 3, TotalIssued: 1000, TotalSucceeded: 990, TotalErrored: 10,
			Reporters: reporters,
		}
		if reporters > 0 {
			r.Updated = ts(t0.Add(-4 * time.Second))
		}
		return r
	}
	return &pb.LoadResponse{
		Service: "payments",
		Time:    ts(t0),
		Rows: []*pb.LoadRow{
			row("zone-a", "checkout", "zone-a", 10, 9.5, 0.5, 2),
			row("zone-b", "checkout", "zone-a", 2.5, 2.5, 0, 1),
			row("zone-a", "frontend", "zone-b", 0, 0, 0, 0),
			row("zone-c", "batch", "zone-c", 1, 1, 0, 1),
		},
	}
}

func wantGraph() *pb.GraphResponse {
	return &pb.GraphResponse{
		Time: ts(t0),
		Edges: []*pb.Edge{
			{ClientService: "", Service: "payments", Streams: 1, Nodes: 1, Zones: []string{""}},
			{ClientService: "batch", Service: "payments", Zones: []string{}, Rps: 1},
			{ClientService: "checkout", Service: "inventory", Streams: 1, Nodes: 1, Zones: []string{"zone-a"}, Rps: 4},
			{ClientService: "checkout", Service: "payments", Streams: 3, Nodes: 2, Zones: []string{"zone-a", "zone-b"}, Rps: 12.5, ErroredRps: 0.5},
			{ClientService: "edge", Service: "*", Streams: 1, Nodes: 1, Zones: []string{"zone-a"}},
			{ClientService: "edge", Service: "payments", Streams: 1, Nodes: 1, Zones: []string{"zone-a"}},
		},
	}
}

// startGRPC serves a on loopback and returns a client.
func startGRPC(t *testing.T, a *API) pb.AdminClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	a.RegisterGRPC(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return pb.NewAdminClient(conn)
}

func TestLoadGRPC(t *testing.T) {
	f := newFake()
	c := startGRPC(t, newAPI(t, f))
	ctx := context.Background()

	for _, name := range []string{"payments", "Payments."} {
		t.Run("ok_"+name, func(t *testing.T) {
			got, err := c.Load(ctx, &pb.LoadRequest{Service: name})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantPaymentsLoad(), got, protocmp.Transform()); diff != "" {
				t.Errorf("Load(%q) (-want +got):\n%s", name, diff)
			}
		})
	}
	t.Run("unknown_service", func(t *testing.T) {
		got, err := c.Load(ctx, &pb.LoadRequest{Service: "nobody-calls-me"})
		if err != nil {
			t.Fatalf("Load of an unknown service: %v, want an empty list", err)
		}
		if len(got.GetRows()) != 0 || got.GetService() != "nobody-calls-me" {
			t.Errorf("Load of an unknown service = %v, want no rows", got)
		}
	})
	for _, tc := range []struct{ name, service, want string }{
		{"empty", "", "service: must not be empty"},
		{"underscore", "pay_ments", `service: label 1: "pay_ments": character '_'`},
		{"empty_label", "payments..prod", "service: label 2: must not be empty"},
		{"long", strings.Repeat("a", 64), "service: label 1"},
	} {
		t.Run("bad_"+tc.name, func(t *testing.T) {
			_, err := c.Load(ctx, &pb.LoadRequest{Service: tc.service})
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.want) {
				t.Errorf("Load(%q) error = %v, want InvalidArgument %q", tc.service, err, tc.want)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, now := range f.nows {
		if !now.Equal(t0) {
			t.Errorf("call %d: Loads got now = %v, want Config.Now's %v", i, now, t0)
		}
	}
}

func TestGraphGRPC(t *testing.T) {
	c := startGRPC(t, newAPI(t, newFake()))
	got, err := c.Graph(context.Background(), &pb.GraphRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantGraph(), got, protocmp.Transform()); diff != "" {
		t.Errorf("Graph (-want +got):\n%s", diff)
	}
}

func TestGraphEmpty(t *testing.T) {
	got := newAPI(t, &fakeXDS{}).graph()
	if len(got.GetEdges()) != 0 {
		t.Errorf("Graph of nothing = %v, want no edges", got.GetEdges())
	}
}

type httpCase struct {
	name, method, target string
	code                 int
	field                string        // of the JSON error
	want                 proto.Message // of a 200
}

func TestHTTP(t *testing.T) {
	h := newAPI(t, newFake()).Handler()
	for _, tc := range []httpCase{
		{name: "load", method: "GET", target: "/v1/load?service=payments", code: 200, want: wantPaymentsLoad()},
		{name: "load_normalized", method: "GET", target: "/v1/load?service=PAYMENTS", code: 200, want: wantPaymentsLoad()},
		{name: "load_unknown", method: "GET", target: "/v1/load?service=nobody", code: 200,
			want: &pb.LoadResponse{Service: "nobody", Rows: []*pb.LoadRow{}, Time: ts(t0)}},
		{name: "load_head", method: "HEAD", target: "/v1/load?service=payments", code: 200},
		{name: "load_missing", method: "GET", target: "/v1/load", code: 400, field: "service"},
		{name: "load_bad_name", method: "GET", target: "/v1/load?service=pay%20ments", code: 400, field: "service"},
		{name: "load_twice", method: "GET", target: "/v1/load?service=a&service=b", code: 400, field: "service"},
		{name: "load_typo", method: "GET", target: "/v1/load?servce=payments", code: 400, field: "servce"},
		{name: "load_bad_query", method: "GET", target: "/v1/load?service=%zz", code: 400, field: "query"},
		{name: "load_post", method: "POST", target: "/v1/load?service=payments", code: 405},
		{name: "graph", method: "GET", target: "/v1/graph", code: 200, want: wantGraph()},
		{name: "graph_param", method: "GET", target: "/v1/graph?service=payments", code: 400, field: "service"},
		{name: "graph_delete", method: "DELETE", target: "/v1/graph", code: 405},
	} {
		t.Run(tc.name, func(t *testing.T) { checkHTTP(t, h, tc) })
	}
}

func checkHTTP(t *testing.T, h http.Handler, tc httpCase) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
	if rec.Code != tc.code {
		t.Fatalf("%s %s: status = %d, want %d; body:\n%s", tc.method, tc.target, rec.Code, tc.code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if tc.code == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("Allow = %q, want GET, HEAD", rec.Header().Get("Allow"))
	}
	if tc.code != 200 {
		var e struct {
			Error, Field string
			Code         int
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatalf("error body is not JSON: %v\n%s", err, rec.Body)
		}
		if e.Field != tc.field || e.Code != tc.code || e.Error == "" {
			t.Errorf("error = %+v, want field %q, code %d and a message", e, tc.field, tc.code)
		}
		if tc.field != "" && tc.field != "query" && !strings.HasPrefix(e.Error, tc.field+":") {
			t.Errorf("error message %q does not start with the field %q", e.Error, tc.field)
		}
		return
	}
	if tc.want == nil {
		return
	}
	got := tc.want.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(rec.Body.Bytes(), got); err != nil {
		t.Fatalf("body is not a %T: %v\n%s", got, err, rec.Body)
	}
	if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
		t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.target, diff)
	}
}

// TestHTTPFieldNames: the JSON uses the proto names and shows empty fields.
func TestHTTPFieldNames(t *testing.T) {
	h := newAPI(t, newFake()).Handler()
	for target, keys := range map[string][]string{
		"/v1/load?service=payments": {`"client_service":`, `"issued_rps":`, `"sub_zone":""`, `"in_progress":`, `"updated":null`,
			`"merged":false`, `"merged_from":[]`, `"owner_elsewhere":false`, `"owner":""`},
		"/v1/graph": {`"client_service":""`, `"errored_rps":`, `"zones":[]`},
		"/v1/weights?service=search": {`"same_zone":0`, `"data_age":"3600s"`, `"fail_open":true`, `"reason_zone":"a"`,
			`"in_flight_per_endpoint":`, `"capacity_share":`, `"client_zone":""`, `"has_demand":false`, `"spill":[`,
			`"origin":{"source":"local","owner":"","contributors":[],"published":null,"reason":""}`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		body := strings.ReplaceAll(rec.Body.String(), " ", "")
		for _, k := range keys {
			if !strings.Contains(body, k) {
				t.Errorf("GET %s: body lacks %s:\n%s", target, k, rec.Body)
			}
		}
	}
}

// TestMountBesideRegistry mounts the handler the way cmd/spillway does,
// next to a catch-all "/v1/" (the registry API): the more specific paths
// win, and the registry keeps every other /v1/ path.
func TestMountBesideRegistry(t *testing.T) {
	registryAPI := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"from":"registry"}`))
	})
	h := newAPI(t, newFake()).Handler()
	mux := http.NewServeMux()
	mux.Handle("/v1/", registryAPI)
	mux.Handle("/v1/load", h)
	mux.Handle("/v1/graph", h)
	mux.Handle("/v1/weights", h)

	for _, tc := range []httpCase{
		{name: "load", method: "GET", target: "/v1/load?service=payments", code: 200, want: wantPaymentsLoad()},
		{name: "graph", method: "GET", target: "/v1/graph", code: 200, want: wantGraph()},
		{name: "load_post", method: "POST", target: "/v1/load", code: 405},
		{name: "load_bad", method: "GET", target: "/v1/load?service=a_b", code: 400, field: "service"},
		{name: "weights", method: "GET", target: "/v1/weights?service=payments", code: 200},
		{name: "weights_unknown", method: "GET", target: "/v1/weights?service=nobody", code: 404},
	} {
		t.Run(tc.name, func(t *testing.T) { checkHTTP(t, mux, tc) })
	}
	for _, target := range []string{"/v1/services", "/v1/services/payments/endpoints", "/v1/register", "/v1/loads", "/v1/graph/x", "/v1/weights/payments"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", target, nil))
		if got := rec.Body.String(); got != `{"from":"registry"}` {
			t.Errorf("GET %s went to %q, want the registry", target, got)
		}
	}
}

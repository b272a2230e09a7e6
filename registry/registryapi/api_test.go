package registryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore/boltstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type harness struct {
	store  *registry.Store
	leases *lease.Manager
	client pb.RegistryClient
	http   *httptest.Server
	util   *load.UtilizationTable
}

// newHarness runs the real API over real gRPC and HTTP on loopback, backed
// by a bbolt file in a temp dir.
func newHarness(t testing.TB) *harness {
	t.Helper()
	st, err := boltstore.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newHarnessWith(t, st)
}

func newHarnessWith(t testing.TB, st lease.Storage) *harness {
	return newHarnessLeases(t, lease.Config{Storage: st})
}

// newHarnessLeases is newHarness with a lease manager of lc (its Store
// is the harness's).
func newHarnessLeases(t testing.TB, lc lease.Config) *harness {
	store := registry.NewStore()
	lc.Store = store
	lm, err := lease.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	util := load.NewUtilizationTable(store, nil)
	api, err := New(Config{Store: store, Leases: lm, Utilization: util})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterGRPC(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hs := httptest.NewServer(api.Handler())
	t.Cleanup(hs.Close)
	return &harness{store: store, leases: lm, client: pb.NewRegistryClient(conn), http: hs, util: util}
}

func goodRequest() *pb.RegisterRequest {
	return &pb.RegisterRequest{
		Service: "payments",
		Endpoint: &pb.Endpoint{
			Address:  "10.0.0.1",
			Ports:    []*pb.Port{{Name: "grpc", Number: 8080, Protocol: "tcp"}},
			Locality: &pb.Locality{Region: "us-east1", Zone: "us-east1-a"},
			Metadata: map[string]string{"version": "v1"},
		},
		TtlSeconds: 30,
	}
}

// state captures everything a rejected request must leave alone.
func (h *harness) state() (uint64, map[string][]registry.Endpoint) {
	snap := h.store.Snapshot()
	out := map[string][]registry.Endpoint{}
	for _, n := range snap.Services() {
		svc, _ := snap.Service(n)
		for _, e := range svc.Endpoints {
			out[n] = append(out[n], *e)
		}
	}
	return snap.Version(), out
}

func (h *harness) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(h.http.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("POST %s: response is not JSON: %q", path, b)
	}
	return resp.StatusCode, m
}

// TestBadInput is acceptance 5: each bad request gets InvalidArgument or
// NotFound over gRPC and 400/404 over HTTP, naming the field, and the store's
// version and content are unchanged.
func TestBadInput(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	// Some existing state, so "unchanged" means something.
	seed, err := h.client.Register(ctx, goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	expired := goodRequest()
	expired.Endpoint.Address = "10.0.0.2"
	exp, err := h.client.Register(ctx, expired)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.leases.Deregister(ctx, exp.LeaseId); err != nil {
		t.Fatal(err)
	}

	// A service whose name an endpoint id of payments must not take.
	if _, err := h.store.Apply(registry.Declare("taken.payments")); err != nil {
		t.Fatal(err)
	}
	// DNS name limits: a 180-character service in spillway.internal.
	// leaves 54 characters for an id and 48 for a port name.
	svc180 := strings.Repeat("s", 59) + "." + strings.Repeat("s", 60) + "." + strings.Repeat("s", 59)
	svc234 := svc180 + "." + strings.Repeat("t", 53)

	reg := func(edit func(r *pb.RegisterRequest)) *pb.RegisterRequest {
		r := goodRequest()
		r.Endpoint.Address = "10.0.0.99"
		edit(r)
		return r
	}
	bigMeta := map[string]string{}
	for i := range 40 {
		bigMeta[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name  string
		reg   *pb.RegisterRequest // a Register call, or
		hb    string              // a Heartbeat for this lease, or
		raw   string              // a raw HTTP body for /v1/register
		code  codes.Code
		field string
	}{
		{name: "empty_service", reg: reg(func(r *pb.RegisterRequest) { r.Service = "" }), code: codes.InvalidArgument, field: "service"},
		{name: "service_label_64", reg: reg(func(r *pb.RegisterRequest) { r.Service = strings.Repeat("a", 64) }), code: codes.InvalidArgument, field: "service"},
		{name: "service_empty_label", reg: reg(func(r *pb.RegisterRequest) { r.Service = "pay..ments" }), code: codes.InvalidArgument, field: "service"},
		{name: "service_not_dns", reg: reg(func(r *pb.RegisterRequest) { r.Service = "pay_ments!" }), code: codes.InvalidArgument, field: "service"},
		{name: "no_endpoint", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint = nil }), code: codes.InvalidArgument, field: "endpoint"},
		{name: "empty_address", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Address = "" }), code: codes.InvalidArgument, field: "endpoint.address"},
		{name: "bad_ipv4", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Address = "10.0.0.256" }), code: codes.InvalidArgument, field: "endpoint.address"},
		{name: "hostname_not_ip", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Address = "db.example.com" }), code: codes.InvalidArgument, field: "endpoint.address"},
		{name: "bad_ipv6", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Address = "2001:db8:::1" }), code: codes.InvalidArgument, field: "endpoint.address"},
		{name: "id_64_chars", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Id = strings.Repeat("x", 64) }), code: codes.InvalidArgument, field: "endpoint.id"},
		{name: "zone_empty_label_chars", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Locality.Zone = "zone a" }), code: codes.InvalidArgument, field: "endpoint.locality.zone"},
		{name: "no_ports", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Ports = nil }), code: codes.InvalidArgument, field: "endpoint.ports"},
		{name: "port_0", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Ports[0].Number = 0 }), code: codes.InvalidArgument, field: "endpoint.ports[0].number"},
		{name: "port_65536", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Ports[0].Number = 65536 }), code: codes.InvalidArgument, field: "endpoint.ports[0].number"},
		{name: "port_name_empty", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Ports[0].Name = "" }), code: codes.InvalidArgument, field: "endpoint.ports[0].name"},
		{name: "duplicate_port_names", reg: reg(func(r *pb.RegisterRequest) {
			r.Endpoint.Ports = append(r.Endpoint.Ports, &pb.Port{Name: "grpc", Number: 9090})
		}), code: codes.InvalidArgument, field: "endpoint.ports[1].name"},
		{name: "bad_protocol", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Ports[0].Protocol = "sctp" }), code: codes.InvalidArgument, field: "endpoint.ports[0].protocol"},
		{name: "bad_health", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Health = "sick" }), code: codes.InvalidArgument, field: "endpoint.health"},
		{name: "weight_too_big", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Weight = 70000 }), code: codes.InvalidArgument, field: "endpoint.weight"},
		{name: "metadata_too_many_keys", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Metadata = bigMeta }), code: codes.InvalidArgument, field: "endpoint.metadata"},
		{name: "metadata_value_too_long", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Metadata["v"] = strings.Repeat("x", 300) }), code: codes.InvalidArgument, field: "endpoint.metadata[v]"},
		{name: "ttl_too_long", reg: reg(func(r *pb.RegisterRequest) { r.TtlSeconds = 86400 }), code: codes.InvalidArgument, field: "ttl_seconds"},
		{name: "srv_target_over_255", reg: reg(func(r *pb.RegisterRequest) { r.Service, r.Endpoint.Id = svc180, strings.Repeat("i", 55) }), code: codes.InvalidArgument, field: "endpoint.id"},
		{name: "srv_name_over_255", reg: reg(func(r *pb.RegisterRequest) { r.Service, r.Endpoint.Ports[0].Name = svc180, strings.Repeat("p", 49) }), code: codes.InvalidArgument, field: "endpoint.ports[0].name"},
		{name: "service_leaves_no_room", reg: reg(func(r *pb.RegisterRequest) { r.Service, r.Endpoint.Id = svc234, "x" }), code: codes.InvalidArgument, field: "service"},
		{name: "service_named_like_endpoint", reg: reg(func(r *pb.RegisterRequest) { r.Service = seed.EndpointId + ".payments" }), code: codes.InvalidArgument, field: "service"},
		{name: "endpoint_named_like_service", reg: reg(func(r *pb.RegisterRequest) { r.Endpoint.Id = "taken" }), code: codes.InvalidArgument, field: "endpoint.id"},
		{name: "heartbeat_unknown_lease", hb: "0123456789abcdef", code: codes.NotFound},
		{name: "heartbeat_expired_lease", hb: exp.LeaseId, code: codes.NotFound},
		{name: "heartbeat_empty_lease", hb: " ", code: codes.NotFound},
		{name: "malformed_json", raw: `{"service": "payments", "endpoint": {`, code: codes.InvalidArgument, field: "body"},
		{name: "json_wrong_type", raw: `{"service": 7}`, code: codes.InvalidArgument, field: "body"},
		{name: "json_unknown_field", raw: `{"service": "payments", "endpoints": {}}`, code: codes.InvalidArgument, field: "body"},
	}
	wantHTTP := map[codes.Code]int{codes.InvalidArgument: 400, codes.NotFound: 404}
	v0, content0 := h.state()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// gRPC
			var err error
			switch {
			case tt.reg != nil:
				_, err = h.client.Register(ctx, tt.reg)
			case tt.hb != "":
				_, err = h.client.Heartbeat(ctx, &pb.HeartbeatRequest{LeaseId: tt.hb})
			}
			if tt.raw == "" {
				st := status.Convert(err)
				if st.Code() != tt.code {
					t.Errorf("gRPC code = %v (%v), want %v", st.Code(), err, tt.code)
				}
				if tt.field != "" && !strings.HasPrefix(st.Message(), tt.field+":") {
					t.Errorf("gRPC message %q does not start with the field %q", st.Message(), tt.field)
				}
			}
			// HTTP
			path, body := "/v1/register", tt.raw
			switch {
			case tt.reg != nil:
				b, _ := protojson.Marshal(tt.reg)
				body = string(b)
			case tt.hb != "":
				path, body = "/v1/heartbeat", fmt.Sprintf(`{"lease_id": %q}`, tt.hb)
			}
			code, resp := h.post(t, path, body)
			if code != wantHTTP[tt.code] {
				t.Errorf("HTTP status = %d (%v), want %d", code, resp, wantHTTP[tt.code])
			}
			if tt.field != "" && resp["field"] != tt.field {
				t.Errorf("HTTP field = %v (%v), want %q", resp["field"], resp["error"], tt.field)
			}
			if v, content := h.state(); v != v0 || !cmp.Equal(content, content0, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
				t.Errorf("store changed: version %d -> %d", v0, v)
			}
		})
	}
	if h.leases.Len() != 1 {
		t.Errorf("%d leases after bad input, want the 1 seeded (%s)", h.leases.Len(), seed.LeaseId)
	}
}

// TestHTTPRoundTrip walks the curl path: register, heartbeat, list,
// deregister.
func TestHTTPRoundTrip(t *testing.T) {
	h := newHarness(t)
	code, resp := h.post(t, "/v1/register", `{"service":"web","endpoint":{"address":"2001:db8::7","ports":[{"name":"http","number":80}],"locality":{"zone":"z1"},"metadata":{"team":"edge"}},"ttl_seconds":10}`)
	if code != 200 {
		t.Fatalf("register: %d %v", code, resp)
	}
	leaseID, _ := resp["lease_id"].(string)
	if leaseID == "" || resp["endpoint_id"] != "2001-db8--7-80" || resp["ttl_seconds"] != float64(10) {
		t.Errorf("register response = %v", resp)
	}
	if code, resp := h.post(t, "/v1/heartbeat", fmt.Sprintf(`{"lease_id":%q}`, leaseID)); code != 200 || resp["found"] != true {
		t.Errorf("heartbeat: %d %v", code, resp)
	}
	r, err := http.Get(h.http.URL + "/v1/services/web/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	var list pb.ListEndpointsResponse
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if err := protojson.Unmarshal(b, &list); err != nil {
		t.Fatalf("endpoints: %v: %s", err, b)
	}
	if len(list.Endpoints) != 1 {
		t.Fatalf("endpoints = %d, want 1", len(list.Endpoints))
	}
	e := list.Endpoints[0]
	if e.Address != "2001:db8::7" || e.Source != "vm" || e.Health != "healthy" || e.Weight != registry.DefaultWeight ||
		e.LeaseId != "" || e.Metadata["team"] != "edge" || e.Ports[0].Protocol != "tcp" || e.LastSeen.AsTime().Before(e.Registered.AsTime()) {
		t.Errorf("endpoint = %v", e)
	}
	r, err = http.Get(h.http.URL + "/v1/services/nope/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 404 {
		t.Errorf("unknown service: %d, want 404", r.StatusCode)
	}
	if code, resp := h.post(t, "/v1/deregister", fmt.Sprintf(`{"lease_id":%q}`, leaseID)); code != 200 {
		t.Errorf("deregister: %d %v", code, resp)
	}
	if code, _ := h.post(t, "/v1/deregister", fmt.Sprintf(`{"lease_id":%q}`, leaseID)); code != 404 {
		t.Errorf("second deregister: %d, want 404", code)
	}
}

func TestHeartbeatStream(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := h.client.Register(ctx, goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	stream, err := h.client.HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id    string
		found bool
	}{{l.LeaseId, true}, {"feedfacefeedface", false}, {"", false}, {strings.Repeat("x", 100), false}, {l.LeaseId, true}} {
		if err := stream.Send(&pb.HeartbeatRequest{LeaseId: tc.id}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.LeaseId != tc.id || resp.Found != tc.found {
			t.Errorf("stream heartbeat %s = %v, want found=%v", tc.id, resp, tc.found)
		}
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("after CloseSend: %v, want EOF", err)
	}
}

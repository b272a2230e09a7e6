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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// servicePolicy is a hand fake of the policy: identity "admin" may do
// everything; identity S may register, heartbeat, deregister, report and
// read service S; nobody else may do anything.
type servicePolicy struct{}

func (servicePolicy) Authorize(ctx context.Context, a authz.Action, resource string) error {
	id := authn.FromContext(ctx)
	if id.Name == "admin" || (!id.Anonymous() && id.Name == resource) {
		return nil
	}
	if resource == "" {
		return fmt.Errorf("permission denied: %s may not %s", id, a)
	}
	return fmt.Errorf("permission denied: %s may not %s %s", id, a, resource)
}

// identityFrom is what the authn interceptors do, for the tests: the
// identity named by the "x-identity" metadata (HTTP header X-Identity).
func identityFrom(ctx context.Context) context.Context {
	if v := metadata.ValueFromIncomingContext(ctx, "x-identity"); len(v) == 1 {
		return authn.NewContext(ctx, authn.Identity{Name: v[0], Method: authn.Certificate})
	}
	return ctx
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s identityStream) Context() context.Context { return s.ctx }

// newAuthzHarness is newHarness with the Authorizer az and identities
// taken from the "x-identity" metadata and header.
func newAuthzHarness(t *testing.T, az Authorizer) *harness {
	t.Helper()
	store := registry.NewStore()
	lm, err := lease.New(lease.Config{Store: store, Storage: systemstore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	util := load.NewUtilizationTable(store, nil)
	api, err := New(Config{Store: store, Leases: lm, Utilization: util, Authorizer: az})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(identityFrom(ctx), req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, identityStream{ss, identityFrom(ss.Context())})
		}),
	)
	api.RegisterGRPC(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	handler := api.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Identity"); id != "" {
			r = r.WithContext(authn.NewContext(r.Context(), authn.Identity{Name: id, Method: authn.Token}))
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return &harness{store: store, leases: lm, client: pb.NewRegistryClient(conn), http: hs, util: util}
}

// as returns a context whose outgoing metadata names identity id ("" for
// none).
func as(id string) context.Context {
	if id == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), "x-identity", id)
}

func (h *harness) postAs(t *testing.T, id, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", h.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		req.Header.Set("X-Identity", id)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// registryState is everything a denied call must leave alone: the
// store's version and content, the leases (with their last heartbeat)
// and the utilization reports.
type registryState struct {
	Version   uint64
	Endpoints map[string][]registry.Endpoint
	LeaseSeen time.Time
	LeaseID   string
	Reports   int
}

func (h *harness) fullState(service, endpointID string) registryState {
	v, eps := h.state()
	seen, lid, _ := h.leases.LastSeen(service, endpointID)
	return registryState{Version: v, Endpoints: eps, LeaseSeen: seen, LeaseID: lid, Reports: h.util.Len()}
}

// TestAuthorizeEveryCall: every Registry call, over gRPC and HTTP, asks
// the Authorizer with the call's service, and a lease is only its
// owner's: exactly the allowed cells succeed, every denial is
// PermissionDenied (HTTP 403) with the documented message, and nothing
// changes on a denial.
func TestAuthorizeEveryCall(t *testing.T) {
	const (
		byPolicy = "permission denied: %[1]s may not %[2]s payments"
		byOwner  = "permission denied: %[1]s may not %[2]s lease LEASE of payments (it belongs to payments)"
		byOwnerR = "permission denied: %[1]s may not register endpoint %[3]s of payments (its lease belongs to payments)"
	)
	regBody := func(addr string) string {
		r := goodRequest()
		r.Endpoint.Address = addr
		b, _ := protojson.Marshal(r)
		return string(b)
	}
	type call func(h *harness, id, leaseID string) (code codes.Code, msg string)
	grpcCall := func(err error) (codes.Code, string) {
		st := status.Convert(err)
		return st.Code(), st.Message()
	}
	httpCall := func(code int, body string) (codes.Code, string) {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		for c, hc := range httpCodes {
			if hc == code {
				return c, e.Error
			}
		}
		if code == http.StatusOK {
			return codes.OK, ""
		}
		return codes.Unknown, body
	}
	calls := []struct {
		name   string
		action authz.Action
		call   call
		// owned: the call acts on the seeded lease, so only its owner
		// may, whatever the policy says.
		owned bool
		// replace: a re-registration of the seeded endpoint.
		replace bool
	}{
		{"grpc_register", authz.Register, func(h *harness, id, _ string) (codes.Code, string) {
			r := goodRequest()
			r.Endpoint.Address = "10.0.0.2"
			_, err := h.client.Register(as(id), r)
			return grpcCall(err)
		}, false, false},
		{"grpc_register_same_endpoint", authz.Register, func(h *harness, id, _ string) (codes.Code, string) {
			_, err := h.client.Register(as(id), goodRequest())
			return grpcCall(err)
		}, false, true},
		{"grpc_heartbeat", authz.Heartbeat, func(h *harness, id, l string) (codes.Code, string) {
			_, err := h.client.Heartbeat(as(id), &pb.HeartbeatRequest{LeaseId: l})
			return grpcCall(err)
		}, true, false},
		{"grpc_heartbeat_stream", authz.Heartbeat, func(h *harness, id, l string) (codes.Code, string) {
			s, err := h.client.HeartbeatStream(as(id))
			if err != nil {
				return grpcCall(err)
			}
			if err := s.Send(&pb.HeartbeatRequest{LeaseId: l}); err != nil {
				return grpcCall(err)
			}
			resp, err := s.Recv()
			if err != nil {
				return grpcCall(err)
			}
			s.CloseSend()
			if !resp.GetFound() {
				return codes.NotFound, "found=false"
			}
			return codes.OK, ""
		}, true, false},
		{"grpc_deregister", authz.Deregister, func(h *harness, id, l string) (codes.Code, string) {
			_, err := h.client.Deregister(as(id), &pb.DeregisterRequest{LeaseId: l})
			return grpcCall(err)
		}, true, false},
		{"grpc_report_utilization", authz.Report, func(h *harness, id, l string) (codes.Code, string) {
			s, err := h.client.ReportUtilization(as(id))
			if err != nil {
				return grpcCall(err)
			}
			if err := s.Send(&pb.UtilizationReport{Service: "payments", EndpointId: seedEndpointID, LeaseId: l, Cpu: 0.5, IntervalMs: 1000}); err != nil {
				return grpcCall(err)
			}
			_, err = s.CloseAndRecv()
			return grpcCall(err)
		}, true, false},
		{"http_register", authz.Register, func(h *harness, id, _ string) (codes.Code, string) {
			return httpCall(h.postAs(t, id, "/v1/register", regBody("10.0.0.2")))
		}, false, false},
		{"http_register_same_endpoint", authz.Register, func(h *harness, id, _ string) (codes.Code, string) {
			return httpCall(h.postAs(t, id, "/v1/register", regBody("10.0.0.1")))
		}, false, true},
		{"http_heartbeat", authz.Heartbeat, func(h *harness, id, l string) (codes.Code, string) {
			return httpCall(h.postAs(t, id, "/v1/heartbeat", `{"lease_id":"`+l+`"}`))
		}, true, false},
		{"http_deregister", authz.Deregister, func(h *harness, id, l string) (codes.Code, string) {
			return httpCall(h.postAs(t, id, "/v1/deregister", `{"lease_id":"`+l+`"}`))
		}, true, false},
		{"http_utilization", authz.Report, func(h *harness, id, l string) (codes.Code, string) {
			return httpCall(h.postAs(t, id, "/v1/utilization", `{"service":"payments","endpoint_id":"`+seedEndpointID+`","lease_id":"`+l+`","cpu":0.5,"interval_ms":1000}`))
		}, true, false},
		{"grpc_list_endpoints", authz.ReadRegistry, func(h *harness, id, _ string) (codes.Code, string) {
			_, err := h.client.ListEndpoints(as(id), &pb.ListEndpointsRequest{Service: "payments"})
			return grpcCall(err)
		}, false, false},
	}
	identities := []string{"", "checkout", "payments", "admin"}
	for _, c := range calls {
		for _, id := range identities {
			name := id
			if name == "" {
				name = "anonymous"
			}
			t.Run(c.name+"/"+name, func(t *testing.T) {
				h := newAuthzHarness(t, servicePolicy{})
				seed, err := h.client.Register(as("payments"), goodRequest())
				if err != nil {
					t.Fatal(err)
				}
				if seed.EndpointId != seedEndpointID {
					t.Fatalf("seed endpoint = %q, want %q", seed.EndpointId, seedEndpointID)
				}
				before := h.fullState("payments", seed.EndpointId)

				policyAllows := id == "payments" || id == "admin"
				ownerAllows := id == "payments" || (!c.owned && !c.replace)
				wantMsg := ""
				switch {
				case !policyAllows:
					wantMsg = fmt.Sprintf(byPolicy, name, c.action)
				case !ownerAllows && c.replace:
					wantMsg = fmt.Sprintf(byOwnerR, name, c.action, seed.EndpointId)
				case !ownerAllows:
					wantMsg = strings.Replace(fmt.Sprintf(byOwner, name, c.action), "LEASE", seed.LeaseId, 1)
				}

				code, msg := c.call(h, id, seed.LeaseId)
				if wantMsg == "" {
					if code != codes.OK {
						t.Fatalf("%s as %s = %v %q, want OK", c.name, name, code, msg)
					}
					return
				}
				if code != codes.PermissionDenied || msg != wantMsg {
					t.Errorf("%s as %s = %v %q, want PermissionDenied %q", c.name, name, code, msg, wantMsg)
				}
				if diff := cmp.Diff(before, h.fullState("payments", seed.EndpointId), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
					t.Errorf("a denied %s changed the registry (-before +after):\n%s", c.name, diff)
				}
			})
		}
	}
}

// seedEndpointID is the id goodRequest's endpoint gets.
var seedEndpointID = registry.DefaultEndpointID(netip.MustParseAddr("10.0.0.1"), 8080)

package registryapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// The attack of issue #28 item 4, with the default policy (every
// caller, anonymous included, may register, heartbeat, deregister,
// report and read): a second identity read the lease id of an endpoint
// from the endpoints list and used it to heartbeat, report cpu 1.5 and
// deregister the endpoint of a lease registered anonymously.

// ownerCall is one call on the seeded lease (or its endpoint) as
// identity id ("" anonymous); it answers the status code and message.
type ownerCall struct {
	name   string
	action string // the action the refusal names
	call   func(t *testing.T, h *harness, id, leaseID string) (codes.Code, string)
}

func ownerCalls() []ownerCall {
	grpcErr := func(err error) (codes.Code, string) {
		st := status.Convert(err)
		return st.Code(), st.Message()
	}
	httpErr := func(code int, body string) (codes.Code, string) {
		if code == http.StatusOK {
			return codes.OK, ""
		}
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		for c, hc := range httpCodes {
			if hc == code {
				return c, e.Error
			}
		}
		return codes.Unknown, body
	}
	regBody, _ := protojson.Marshal(goodRequest())
	return []ownerCall{
		{"grpc_heartbeat", "heartbeat", func(t *testing.T, h *harness, id, l string) (codes.Code, string) {
			_, err := h.client.Heartbeat(as(id), &pb.HeartbeatRequest{LeaseId: l})
			return grpcErr(err)
		}},
		{"grpc_heartbeat_stream", "heartbeat", func(t *testing.T, h *harness, id, l string) (codes.Code, string) {
			s, err := h.client.HeartbeatStream(as(id))
			if err != nil {
				return grpcErr(err)
			}
			defer s.CloseSend()
			if err := s.Send(&pb.HeartbeatRequest{LeaseId: l}); err != nil {
				return grpcErr(err)
			}
			resp, err := s.Recv()
			if err != nil {
				return grpcErr(err)
			}
			if !resp.GetFound() {
				return codes.NotFound, "found=false"
			}
			return codes.OK, ""
		}},
		{"grpc_deregister", "deregister", func(t *testing.T, h *harness, id, l string) (codes.Code, string) {
			_, err := h.client.Deregister(as(id), &pb.DeregisterRequest{LeaseId: l})
			return grpcErr(err)
		}},
		{"grpc_report_utilization", "report", func(t *testing.T, h *harness, id, l string) (codes.Code, string) {
			s, err := h.client.ReportUtilization(as(id))
			if err != nil {
				return grpcErr(err)
			}
			if err := s.Send(&pb.UtilizationReport{Service: "payments", EndpointId: seedEndpointID, LeaseId: l, Cpu: 1.5, IntervalMs: 1000}); err != nil {
				return grpcErr(err)
			}
			_, err = s.CloseAndRecv()
			return grpcErr(err)
		}},
		{"grpc_register_same_endpoint", "register", func(t *testing.T, h *harness, id, _ string) (codes.Code, string) {
			_, err := h.client.Register(as(id), goodRequest())
			return grpcErr(err)
		}},
		{"http_heartbeat", "heartbeat", func(t *testing.T, h *harness, id, l string) (codes.Code, string) {
			return httpErr(h.postAs(t, id, "/v1/heartbeat", `{"lease_id":"`+l+`"}`))
		}},
		{"http_deregister", "deregister", func(t *testing.T, h *harness, id, l string) (codes.Code, string) {
			return httpErr(h.postAs(t, id, "/v1/deregister", `{"lease_id":"`+l+`"}`))
		}},
		{"http_utilization", "report", func(t *testing.T, h *harness, id, l string) (codes.Code, string) {
			return httpErr(h.postAs(t, id, "/v1/utilization", `{"service":"payments","endpoint_id":"`+seedEndpointID+`","lease_id":"`+l+`","cpu":1.5,"interval_ms":1000}`))
		}},
		{"http_register_same_endpoint", "register", func(t *testing.T, h *harness, id, _ string) (codes.Code, string) {
			return httpErr(h.postAs(t, id, "/v1/register", string(regBody)))
		}},
	}
}

func nameOf(id string) string {
	if id == "" {
		return "anonymous"
	}
	return id
}

// TestLeaseOwnerAttack: whoever registered a lease, anonymous included,
// is the only caller that may heartbeat, deregister, report under it or
// replace its endpoint, over gRPC and HTTP: another caller given the
// lease id is refused with PermissionDenied / 403 naming the lease and
// its owner and changes nothing, and the owner then still may.
func TestLeaseOwnerAttack(t *testing.T) {
	for _, owner := range []string{"", "payments"} {
		for _, attacker := range []string{"", "checkout", "admin"} {
			if attacker == owner {
				continue
			}
			for _, c := range ownerCalls() {
				t.Run(nameOf(owner)+"_lease/"+nameOf(attacker)+"/"+c.name, func(t *testing.T) {
					h := newAuthzHarness(t, nil) // the default policy: everyone may everything
					seed, err := h.client.Register(as(owner), goodRequest())
					if err != nil {
						t.Fatal(err)
					}
					if seed.GetLeaseId() == "" {
						t.Fatal("Register answered no lease id to the registrant")
					}
					if got := listedLeaseIDs(t, h, attacker); got != "" {
						t.Errorf("endpoints listed to %s show lease ids %s, want none", nameOf(attacker), got)
					}
					before := h.fullState("payments", seed.EndpointId)

					code, msg := c.call(t, h, attacker, seed.LeaseId)
					want := fmt.Sprintf("permission denied: %s may not %s lease %s of payments (it belongs to %s)", nameOf(attacker), c.action, seed.LeaseId, nameOf(owner))
					if c.action == "register" {
						want = fmt.Sprintf("permission denied: %s may not register endpoint %s of payments (its lease belongs to %s)", nameOf(attacker), seed.EndpointId, nameOf(owner))
					}
					if code != codes.PermissionDenied || msg != want {
						t.Errorf("%s as %s on %s's lease = %v %q, want PermissionDenied %q", c.name, nameOf(attacker), nameOf(owner), code, msg, want)
					}
					if diff := cmp.Diff(before, h.fullState("payments", seed.EndpointId), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
						t.Errorf("a refused %s changed the registry (-before +after):\n%s", c.name, diff)
					}

					if code, msg := c.call(t, h, owner, seed.LeaseId); code != codes.OK {
						t.Errorf("%s as the owner %s = %v %q, want OK", c.name, nameOf(owner), code, msg)
					}
				})
			}
		}
	}
}

// TestLeaseAnonymousDeploymentUnchanged: without credentials (no authn,
// no policy) every caller is anonymous, and every call on a lease works
// as before over gRPC and HTTP; only the listing lost its lease ids.
func TestLeaseAnonymousDeploymentUnchanged(t *testing.T) {
	for _, c := range ownerCalls() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			seed, err := h.client.Register(t.Context(), goodRequest())
			if err != nil {
				t.Fatal(err)
			}
			if got := listedLeaseIDs(t, h, ""); got != "" {
				t.Errorf("endpoints list lease ids %s, want none", got)
			}
			if code, msg := c.call(t, h, "", seed.LeaseId); code != codes.OK {
				t.Errorf("%s, anonymous without credentials = %v %q, want OK", c.name, code, msg)
			}
		})
	}
}

// TestListEndpointsHidesLeaseIDs: neither ListEndpoints nor GET
// /v1/services/S/endpoints shows a lease id, to anyone (its owner
// included: only Register's answer carries it), for anonymous and named
// leases; the field is in the JSON, empty.
func TestListEndpointsHidesLeaseIDs(t *testing.T) {
	h := newAuthzHarness(t, nil)
	for i, owner := range []string{"", "payments"} {
		r := goodRequest()
		r.Endpoint.Address = fmt.Sprintf("10.0.0.%d", i+1)
		l, err := h.client.Register(as(owner), r)
		if err != nil {
			t.Fatal(err)
		}
		if l.GetLeaseId() == "" {
			t.Fatalf("Register as %s answered no lease id", nameOf(owner))
		}
	}
	for _, reader := range []string{"", "payments", "checkout", "admin"} {
		if got := listedLeaseIDs(t, h, reader); got != "" {
			t.Errorf("endpoints listed to %s show lease ids %s, want none", nameOf(reader), got)
		}
	}
}

// listedLeaseIDs lists payments' endpoints as id over gRPC and HTTP and
// returns the lease ids they show ("" for none); it fails the test if
// an endpoint is missing or the JSON has no lease_id key.
func listedLeaseIDs(t *testing.T, h *harness, id string) string {
	t.Helper()
	var shown []string
	resp, err := h.client.ListEndpoints(as(id), &pb.ListEndpointsRequest{Service: "payments"})
	if err != nil || len(resp.GetEndpoints()) == 0 {
		t.Fatalf("ListEndpoints as %s = %v, %v; want the registered endpoints", nameOf(id), resp, err)
	}
	for _, e := range resp.GetEndpoints() {
		if e.GetLeaseId() != "" {
			shown = append(shown, "grpc:"+e.GetLeaseId())
		}
	}
	req, err := http.NewRequest("GET", h.http.URL+"/v1/services/payments/endpoints", nil)
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		req.Header.Set("X-Identity", id)
	}
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	var list struct {
		Endpoints []map[string]any `json:"endpoints"`
	}
	if err := json.Unmarshal(b, &list); err != nil || hr.StatusCode != 200 || len(list.Endpoints) != len(resp.GetEndpoints()) {
		t.Fatalf("GET endpoints as %s = %d %s, %v; want the registered endpoints", nameOf(id), hr.StatusCode, b, err)
	}
	for _, e := range list.Endpoints {
		v, ok := e["lease_id"]
		if !ok {
			t.Errorf("GET endpoints: endpoint %v has no lease_id key, want it empty", e["id"])
		}
		if v != "" {
			shown = append(shown, fmt.Sprint("http:", v))
		}
	}
	return strings.Join(shown, ",")
}

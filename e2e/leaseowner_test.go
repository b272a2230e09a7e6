package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// leaseCaller is one caller of the real server in the lease-owner
// attack: a bearer token ("" anonymous) and the name denials give it.
type leaseCaller struct {
	name, token string
}

func (c leaseCaller) ctx(ctx context.Context) context.Context {
	if c.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
}

// do sends an HTTP request as c, the way curl does (no Origin), and
// answers the status and the body.
func (c leaseCaller) do(t *testing.T, s *server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.url(path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// leaseUse is one use of a lease: over HTTP or gRPC; it answers nil or
// the error (an HTTP error as "HTTP CODE: BODY").
type leaseUse struct {
	name, action string
	use          func(t *testing.T, s *server, c leaseCaller, lease, endpoint string) error
}

func leaseUses() []leaseUse {
	httpErr := func(code int, body string) error {
		if code == http.StatusOK {
			return nil
		}
		return fmt.Errorf("HTTP %d: %s", code, body)
	}
	return []leaseUse{
		{"http_heartbeat", "heartbeat", func(t *testing.T, s *server, c leaseCaller, l, _ string) error {
			return httpErr(c.do(t, s, "POST", "/v1/heartbeat", `{"lease_id":"`+l+`"}`))
		}},
		{"http_utilization", "report", func(t *testing.T, s *server, c leaseCaller, l, e string) error {
			return httpErr(c.do(t, s, "POST", "/v1/utilization", `{"service":"payments","endpoint_id":"`+e+`","lease_id":"`+l+`","cpu":1.5,"interval_ms":1000}`))
		}},
		{"grpc_heartbeat", "heartbeat", func(t *testing.T, s *server, c leaseCaller, l, _ string) error {
			_, err := rclient(s).Heartbeat(c.ctx(t.Context()), &pb.HeartbeatRequest{LeaseId: l})
			return err
		}},
		{"grpc_heartbeat_stream", "heartbeat", func(t *testing.T, s *server, c leaseCaller, l, _ string) error {
			st, err := rclient(s).HeartbeatStream(c.ctx(t.Context()))
			if err != nil {
				return err
			}
			defer st.CloseSend()
			if err := st.Send(&pb.HeartbeatRequest{LeaseId: l}); err != nil {
				return err
			}
			resp, err := st.Recv()
			if err == nil && !resp.GetFound() {
				err = fmt.Errorf("lease %s not found", l)
			}
			return err
		}},
		{"grpc_report_utilization", "report", func(t *testing.T, s *server, c leaseCaller, l, e string) error {
			st, err := rclient(s).ReportUtilization(c.ctx(t.Context()))
			if err != nil {
				return err
			}
			if err := st.Send(&pb.UtilizationReport{Service: "payments", EndpointId: e, LeaseId: l, Cpu: 1.5, IntervalMs: 1000}); err != nil {
				return err
			}
			_, err = st.CloseAndRecv()
			return err
		}},
		// Deregistrations last: the owner's ends the lease.
		{"http_deregister", "deregister", func(t *testing.T, s *server, c leaseCaller, l, _ string) error {
			return httpErr(c.do(t, s, "POST", "/v1/deregister", `{"lease_id":"`+l+`"}`))
		}},
		{"grpc_deregister", "deregister", func(t *testing.T, s *server, c leaseCaller, l, _ string) error {
			_, err := rclient(s).Deregister(c.ctx(t.Context()), &pb.DeregisterRequest{LeaseId: l})
			return err
		}},
	}
}

// registerHTTP registers addr:8080 in payments as c with POST
// /v1/register and returns the lease and endpoint ids its answer gives.
func registerHTTP(t *testing.T, s *server, c leaseCaller, addr string) (lease, endpoint string) {
	t.Helper()
	code, body := c.do(t, s, "POST", "/v1/register", `{"service":"payments","endpoint":{"address":"`+addr+`","ports":[{"name":"grpc","number":8080}]},"ttl_seconds":60}`)
	var r struct {
		LeaseID    string `json:"lease_id"`
		EndpointID string `json:"endpoint_id"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.LeaseID == "" {
		t.Fatalf("register as %s = %d %s; want a lease id", c.name, code, body)
	}
	return r.LeaseID, r.EndpointID
}

// listedLeaseIDs returns the lease ids GET /v1/services/payments/endpoints
// and ListEndpoints show to c, and how many endpoints they list.
func listedLeaseIDs(t *testing.T, s *server, c leaseCaller) (shown []string, n int) {
	t.Helper()
	code, body := c.do(t, s, "GET", "/v1/services/payments/endpoints", "")
	var list struct {
		Endpoints []map[string]any `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != 200 {
		t.Fatalf("GET endpoints as %s = %d %s", c.name, code, body)
	}
	for _, e := range list.Endpoints {
		if v, ok := e["lease_id"]; !ok || v != "" {
			shown = append(shown, fmt.Sprintf("http:%v", v))
		}
	}
	resp, err := rclient(s).ListEndpoints(c.ctx(t.Context()), &pb.ListEndpointsRequest{Service: "payments"})
	if err != nil || len(resp.GetEndpoints()) != len(list.Endpoints) {
		t.Fatalf("ListEndpoints as %s = %v, %v; want the %d endpoints of the HTTP list", c.name, resp, err, len(list.Endpoints))
	}
	for _, e := range resp.GetEndpoints() {
		if e.GetLeaseId() != "" {
			shown = append(shown, "grpc:"+e.GetLeaseId())
		}
	}
	return shown, len(list.Endpoints)
}

// TestLeaseOwnerAttack is issue #28 item 4 against the real server with
// tokens and the default policy (every caller, anonymous included, may
// register, heartbeat, deregister, report and read): a second identity
// finds no lease id in the endpoints list, and given one anyway cannot
// heartbeat, report for or deregister a lease that is not its own, over
// HTTP (403) and gRPC (PermissionDenied), whether the lease was made by
// a named identity or anonymously; the owner can, also after a kill -9
// and restart (the owner is in the bbolt record).
func TestLeaseOwnerAttack(t *testing.T) {
	payments := leaseCaller{"vm-payments", "payments-token-0123456789"}
	checkout := leaseCaller{"vm-checkout", "checkout-token-0123456789"}
	anonymous := leaseCaller{"anonymous", ""}
	var tokens strings.Builder
	for _, c := range []leaseCaller{payments, checkout} {
		sum := sha256.Sum256([]byte(c.token))
		fmt.Fprintf(&tokens, "- identity: %s\n  sha256: %s\n", c.name, hex.EncodeToString(sum[:]))
	}
	tokensFile := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokensFile, []byte(tokens.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, "--tokens-file", tokensFile)
	s.start()

	type lease struct {
		owner     leaseCaller
		id, ep    string
		attackers []leaseCaller
	}
	leases := []*lease{{owner: anonymous, attackers: []leaseCaller{checkout, payments}}, {owner: payments, attackers: []leaseCaller{checkout, anonymous}}}
	for i, l := range leases {
		l.id, l.ep = registerHTTP(t, s, l.owner, fmt.Sprintf("10.9.0.%d", i+1))
	}

	attack := func(t *testing.T, uses []leaseUse) {
		for _, c := range []leaseCaller{checkout, anonymous, payments} {
			if shown, n := listedLeaseIDs(t, s, c); len(shown) != 0 || n != len(leases) {
				t.Errorf("endpoints listed to %s: %d endpoints, lease ids %v; want %d, none", c.name, n, shown, len(leases))
			}
		}
		for _, l := range leases {
			for _, u := range uses {
				for _, a := range l.attackers {
					err := u.use(t, s, a, l.id, l.ep)
					want := fmt.Sprintf("permission denied: %s may not %s lease %s of payments (it belongs to %s)", a.name, u.action, l.id, l.owner.name)
					ok := err != nil && strings.Contains(err.Error(), want)
					if strings.HasPrefix(u.name, "http") {
						ok = ok && strings.HasPrefix(err.Error(), "HTTP 403: ")
					} else {
						ok = ok && status.Code(err) == codes.PermissionDenied
					}
					if !ok {
						t.Errorf("%s as %s on %s's lease = %v, want PermissionDenied / 403 %q", u.name, a.name, l.owner.name, err, want)
					}
				}
				if err := u.use(t, s, l.owner, l.id, l.ep); err != nil {
					t.Errorf("%s as the owner %s = %v, want OK", u.name, l.owner.name, err)
				}
			}
		}
	}

	var renew []leaseUse
	for _, u := range leaseUses() {
		if u.action != "deregister" {
			renew = append(renew, u)
		}
	}
	t.Run("before_restart", func(t *testing.T) { attack(t, renew) })

	// The owners are in the bbolt records: a kill -9 and a restart keep them.
	s.kill()
	s.start()
	t.Run("after_restart", func(t *testing.T) {
		attack(t, renew)
		// The attackers' deregistrations are refused; each owner's ends its
		// lease (HTTP for one, gRPC for the other).
		uses := leaseUses()
		dereg := map[string]leaseUse{}
		for _, u := range uses {
			if u.action == "deregister" {
				dereg[u.name] = u
			}
		}
		for i, l := range leases {
			for _, u := range dereg {
				for _, a := range l.attackers {
					if err := u.use(t, s, a, l.id, l.ep); status.Code(err) != codes.PermissionDenied && !strings.HasPrefix(fmt.Sprint(err), "HTTP 403: ") {
						t.Errorf("%s as %s on %s's lease = %v, want PermissionDenied / 403", u.name, a.name, l.owner.name, err)
					}
				}
			}
			u := dereg[[]string{"http_deregister", "grpc_deregister"}[i]]
			if err := u.use(t, s, l.owner, l.id, l.ep); err != nil {
				t.Errorf("%s as the owner %s = %v, want OK", u.name, l.owner.name, err)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if resp, err := rclient(s).ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: "payments"}); status.Code(err) != codes.NotFound && len(resp.GetEndpoints()) != 0 {
			t.Errorf("payments after both owners deregistered = %v, %v; want no endpoints", resp, err)
		}
	})
}

// TestLeaseAnonymousDeploymentUnchanged: a server without credentials
// (everyone anonymous, the default start): the registrant's lease works
// from any anonymous caller, over HTTP and gRPC, as before; only the
// listing lost its lease ids.
func TestLeaseAnonymousDeploymentUnchanged(t *testing.T) {
	s := newServer(t)
	s.start()
	anonymous := leaseCaller{"anonymous", ""}
	for _, u := range leaseUses() {
		id, ep := registerHTTP(t, s, anonymous, "10.9.1.1")
		if shown, n := listedLeaseIDs(t, s, anonymous); len(shown) != 0 || n != 1 {
			t.Errorf("endpoints: %d, lease ids %v; want 1, none", n, shown)
		}
		if err := u.use(t, s, anonymous, id, ep); err != nil {
			t.Errorf("%s without credentials = %v, want OK", u.name, err)
		}
	}
}

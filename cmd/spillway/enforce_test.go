package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	migrationv1 "github.com/spillway/spillway/migration/migrationv1"
	registryv1 "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

// Identities of the enforcement test.
const (
	idPayments = "spiffe://example.org/ns/prod/sa/payments"
	idCheckout = "spiffe://example.org/ns/prod/sa/checkout"
	idAdmin    = "spiffe://example.org/ns/ops/sa/admin"
	vmToken    = "tok-payments-vm"
)

const enforcePolicy = `identities:
  - match: "` + idPayments + `"
    allow: {endpoints: [payments], read_registry: true}
  - match: "` + idCheckout + `"
    allow: {endpoints: [checkout], read_registry: true}
  - match: "` + idAdmin + `"
    allow: {endpoints: true, read_registry: true, panic: true, rollout: true, config: true, read_audit: true}
`

// caller is one column of the table: how a client connects and what it
// presents.
type caller struct {
	name string
	// identity is how denials name the caller ("anonymous" without
	// credentials).
	identity string
	// handshake: the server refuses the TLS handshake (the certificate is
	// expired, from an unknown CA, or from a CA rotated out of the
	// bundle): no call reaches an API.
	handshake bool
	// alert is the TLS alert the server refuses the handshake with.
	alert string
	token string // a bearer token, or ""
	conn  *grpc.ClientConn
	http  *http.Client
}

func (c *caller) ctx(ctx context.Context) context.Context {
	if c.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
}

func (c *caller) do(t *testing.T, method, url, body string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		ct := "application/json"
		if strings.Contains(url, "/v1/config/") || strings.Contains(url, "/v1/routes/") {
			ct = "application/yaml" // their bodies are YAML, as spillwayctl sends them
		}
		req.Header.Set("Content-Type", ct)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error string `json:"error"`
	}
	json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error, nil
}

// newCaller dials the server's gRPC and HTTP listeners over TLS trusting
// ca, with leaf as client certificate (nil: none).
func newCaller(t *testing.T, name, identity string, ca *tlstest.CA, leaf *tlstest.Cert, grpcAddr string) *caller {
	t.Helper()
	cfg := &tls.Config{RootCAs: tlstest.Pool(ca), MinVersion: tls.VersionTLS12}
	if leaf != nil {
		// Present the certificate whatever CAs the server asks for, as a
		// hostile client would (crypto/tls would otherwise send none that
		// does not chain to one of them).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf.TLS, nil }
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(func() { conn.Close(); tr.CloseIdleConnections() })
	return &caller{name: name, identity: identity, conn: conn, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// serverState is everything a denied call must leave as it was: the
// registry's version, services and endpoints (with their leases and last
// heartbeats), the panic flag, the rollout and the service config.
func serverState(t *testing.T, admin *caller, httpURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := registryv1.NewRegistryClient(admin.conn)
	mig := migrationv1.NewMigrationClient(admin.conn)
	var parts []string
	add := func(m proto.Message, err error) {
		if err != nil && status.Code(err) != codes.NotFound {
			t.Fatalf("reading the state: %v", err)
		}
		b, _ := protojson.Marshal(m)
		parts = append(parts, string(b))
	}
	add(reg.ListServices(ctx, &registryv1.ListServicesRequest{}))
	for _, svc := range []string{"payments", "checkout"} {
		add(reg.ListEndpoints(ctx, &registryv1.ListEndpointsRequest{Service: svc}))
	}
	add(mig.GetPanic(ctx, &migrationv1.GetPanicRequest{}))
	add(mig.GetRollout(ctx, &migrationv1.GetRolloutRequest{}))
	resp, err := admin.http.Get(httpURL + "/v1/config/payments")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	parts = append(parts, string(b))
	return strings.Join(parts, "\n")
}

// TestWriteAPIEnforcement is #16 acceptance 1, over the whole server
// (run) with TLS, optional client certificates, a policy file and a
// tokens file: every write API, gRPC and HTTP, × every kind of caller.
// Exactly the allowed cells succeed; a refused handshake is Unavailable
// (gRPC) or a transport error naming the TLS alert (HTTP); a policy
// denial is PermissionDenied / 403 "permission denied: IDENTITY may not
// ACTION SERVICE"; a lease owner's denial names the lease and its owner;
// and after every denied call the server's state is unchanged.
func TestWriteAPIEnforcement(t *testing.T) {
	dir := t.TempDir()
	ca, old, other := tlstest.NewCA(t, "current CA"), tlstest.NewCA(t, "rotated-out CA"), tlstest.NewCA(t, "unrelated CA")
	srv := ca.Issue(t, tlstest.Leaf{IPs: []netip.Addr{tlstest.Loopback}}).WriteFiles(t, dir, "server")
	clientCA := tlstest.WriteCA(t, filepath.Join(dir, "clients.ca.crt"), ca, old)
	tokens := filepath.Join(dir, "tokens.yaml")
	authzFile := filepath.Join(dir, "authz.yaml")
	if err := os.WriteFile(tokens, []byte(tokenLine(idPayments, vmToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(authzFile, []byte(enforcePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr, grpcAddr := startSecured(t,
		"--tls-cert", srv.Cert, "--tls-key", srv.Key, "--client-ca", clientCA, "--client-auth", "optional",
		"--tls-reload", "100ms", "--tokens-file", tokens, "--authz-file", authzFile)
	httpURL := "https://" + httpAddr

	leaf := func(issuer *tlstest.CA, id string, expired bool) *tlstest.Cert {
		return issuer.Issue(t, tlstest.Leaf{URIs: []string{id}, Expired: expired})
	}
	revokedLeaf := leaf(old, idPayments, false)

	// Rotation: the old CA is trusted at first, then removed from the
	// bundle; once the server has reloaded it, its certificates are
	// refused on new connections.
	probe := func() error {
		c := newCaller(t, "probe", idPayments, ca, revokedLeaf, grpcAddr)
		defer c.conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := registryv1.NewRegistryClient(c.conn).ListServices(ctx, &registryv1.ListServicesRequest{})
		return err
	}
	if err := probe(); err != nil {
		t.Fatalf("a certificate of the old CA before the rotation: ListServices = %v, want OK", err)
	}
	tlstest.WriteCA(t, clientCA, ca)
	deadline := time.Now().Add(20 * time.Second)
	for probe() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the old CA's certificates still accepted 20s after it left the bundle")
		}
		time.Sleep(50 * time.Millisecond)
	}

	admin := newCaller(t, "admin", idAdmin, ca, leaf(ca, idAdmin, false), grpcAddr)
	payments := newCaller(t, "right_identity", idPayments, ca, leaf(ca, idPayments, false), grpcAddr)
	token := newCaller(t, "token", idPayments, ca, nil, grpcAddr)
	token.token = vmToken
	callers := []*caller{
		newCaller(t, "no_credentials", "anonymous", ca, nil, grpcAddr),
		newCaller(t, "wrong_service", idCheckout, ca, leaf(ca, idCheckout, false), grpcAddr),
		payments,
		admin,
		newCaller(t, "expired_certificate", idPayments, ca, leaf(ca, idPayments, true), grpcAddr),
		newCaller(t, "other_ca", idPayments, ca, leaf(other, idPayments, false), grpcAddr),
		newCaller(t, "revoked_by_rotation", idPayments, ca, revokedLeaf, grpcAddr),
		token,
	}
	for i, alert := range []string{"expired certificate", "unknown certificate authority", "unknown certificate authority"} {
		callers[4+i].handshake, callers[4+i].alert = true, alert
	}

	// seed registers a fresh endpoint of payments as payments, with a
	// TTL long enough that no lease expires during the test, and returns
	// its lease and endpoint id.
	n := 0
	seed := func(t *testing.T) (leaseID, endpointID string) {
		t.Helper()
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := registryv1.NewRegistryClient(payments.conn).Register(ctx, registration(fmt.Sprintf("10.9.%d.%d", n/250, n%250+1)))
		if err != nil {
			t.Fatalf("seed registration: %v", err)
		}
		return resp.GetLeaseId(), resp.GetEndpointId()
	}
	const rollout = "rules:\n- name: all\n  match: {}\n  percent: 50\n"

	type result struct {
		code codes.Code
		msg  string
		err  error // a transport error (HTTP) or the gRPC error
	}
	grpcResult := func(err error) result {
		st := status.Convert(err)
		return result{code: st.Code(), msg: st.Message(), err: err}
	}
	httpResult := func(code int, msg string, err error) result {
		switch {
		case err != nil:
			return result{code: codes.Unavailable, msg: err.Error(), err: err}
		case code == http.StatusOK:
			return result{code: codes.OK}
		case code == http.StatusForbidden:
			return result{code: codes.PermissionDenied, msg: msg}
		}
		return result{code: codes.Unknown, msg: fmt.Sprintf("HTTP %d: %s", code, msg)}
	}
	// Who each row allows: "endpoint" rows the identities with payments'
	// endpoint rights (payments by certificate or token, admin); "lease"
	// rows only the lease's owner, payments; "admin" rows only admin.
	type row struct {
		name   string
		action string
		allow  string // "endpoint", "lease" or "admin"
		global bool   // a global action: the denial names no service
		call   func(t *testing.T, c *caller, leaseID, endpointID string) result
	}
	reg := func(c *caller) registryv1.RegistryClient { return registryv1.NewRegistryClient(c.conn) }
	mig := func(c *caller) migrationv1.MigrationClient { return migrationv1.NewMigrationClient(c.conn) }
	callCtx := func(c *caller) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		return c.ctx(ctx), cancel
	}
	regJSON := func(addr string) string {
		b, _ := protojson.Marshal(registration(addr))
		return string(b)
	}
	rows := []row{
		{"grpc_register", "register", "endpoint", false, func(t *testing.T, c *caller, _, _ string) result {
			ctx, cancel := callCtx(c)
			defer cancel()
			n++
			_, err := reg(c).Register(ctx, registration(fmt.Sprintf("10.8.%d.%d", n/250, n%250+1)))
			return grpcResult(err)
		}},
		{"grpc_heartbeat", "heartbeat", "lease", false, func(t *testing.T, c *caller, l, _ string) result {
			ctx, cancel := callCtx(c)
			defer cancel()
			_, err := reg(c).Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: l})
			return grpcResult(err)
		}},
		{"grpc_heartbeat_stream", "heartbeat", "lease", false, func(t *testing.T, c *caller, l, _ string) result {
			ctx, cancel := callCtx(c)
			defer cancel()
			s, err := reg(c).HeartbeatStream(ctx)
			if err == nil {
				err = s.Send(&registryv1.HeartbeatRequest{LeaseId: l})
			}
			if err == nil {
				var resp *registryv1.HeartbeatResponse
				if resp, err = s.Recv(); err == nil && !resp.GetFound() {
					return result{code: codes.NotFound, msg: "found=false"}
				}
			}
			return grpcResult(err)
		}},
		{"grpc_deregister", "deregister", "lease", false, func(t *testing.T, c *caller, l, _ string) result {
			ctx, cancel := callCtx(c)
			defer cancel()
			_, err := reg(c).Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: l})
			return grpcResult(err)
		}},
		{"grpc_report_utilization", "report", "lease", false, func(t *testing.T, c *caller, l, e string) result {
			ctx, cancel := callCtx(c)
			defer cancel()
			s, err := reg(c).ReportUtilization(ctx)
			if err == nil {
				err = s.Send(&registryv1.UtilizationReport{Service: "payments", EndpointId: e, LeaseId: l, Cpu: 0.5, IntervalMs: 1000})
			}
			if err == nil {
				_, err = s.CloseAndRecv()
			}
			return grpcResult(err)
		}},
		{"grpc_set_panic", "panic", "admin", true, func(t *testing.T, c *caller, _, _ string) result {
			ctx, cancel := callCtx(c)
			defer cancel()
			_, err := mig(c).SetPanic(ctx, &migrationv1.SetPanicRequest{Panic: true})
			return grpcResult(err)
		}},
		{"grpc_set_rollout", "rollout", "admin", true, func(t *testing.T, c *caller, _, _ string) result {
			ctx, cancel := callCtx(c)
			defer cancel()
			_, err := mig(c).SetRollout(ctx, &migrationv1.SetRolloutRequest{Yaml: rollout})
			return grpcResult(err)
		}},
		{"http_register", "register", "endpoint", false, func(t *testing.T, c *caller, _, _ string) result {
			n++
			return httpResult(c.do(t, "POST", httpURL+"/v1/register", regJSON(fmt.Sprintf("10.7.%d.%d", n/250, n%250+1))))
		}},
		{"http_heartbeat", "heartbeat", "lease", false, func(t *testing.T, c *caller, l, _ string) result {
			return httpResult(c.do(t, "POST", httpURL+"/v1/heartbeat", `{"lease_id":"`+l+`"}`))
		}},
		{"http_deregister", "deregister", "lease", false, func(t *testing.T, c *caller, l, _ string) result {
			return httpResult(c.do(t, "POST", httpURL+"/v1/deregister", `{"lease_id":"`+l+`"}`))
		}},
		{"http_utilization", "report", "lease", false, func(t *testing.T, c *caller, l, e string) result {
			return httpResult(c.do(t, "POST", httpURL+"/v1/utilization", `{"service":"payments","endpoint_id":"`+e+`","lease_id":"`+l+`","cpu":0.5,"interval_ms":1000}`))
		}},
		{"http_panic", "panic", "admin", true, func(t *testing.T, c *caller, _, _ string) result {
			return httpResult(c.do(t, "POST", httpURL+"/v1/panic", `{"panic": false}`))
		}},
		{"http_rollout", "rollout", "admin", true, func(t *testing.T, c *caller, _, _ string) result {
			return httpResult(c.do(t, "PUT", httpURL+"/v1/rollout", rollout))
		}},
		{"http_config_put", "config", "admin", false, func(t *testing.T, c *caller, _, _ string) result {
			return httpResult(c.do(t, "PUT", httpURL+"/v1/config/payments", "strategy: pid\n"))
		}},
		{"http_config_delete", "config", "admin", false, func(t *testing.T, c *caller, _, _ string) result {
			return httpResult(c.do(t, "DELETE", httpURL+"/v1/config/payments", ""))
		}},
	}

	allowedCells, deniedCells, audited := 0, 0, 0
	handshakeErrors := map[string]int{}
	for _, r := range rows {
		for _, c := range callers {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				leaseID, endpointID := seed(t)
				if r.name == "http_config_delete" {
					// Something to delete, put by admin.
					if code, msg, err := admin.do(t, "PUT", httpURL+"/v1/config/payments", "strategy: static\n"); err != nil || code != http.StatusOK {
						t.Fatalf("seeding the config: %d %q %v", code, msg, err)
					}
				}
				before := serverState(t, admin, httpURL)
				start := time.Now()
				got := r.call(t, c, leaseID, endpointID)

				var allowed bool
				var want string
				switch {
				case c.handshake:
				case r.allow == "endpoint":
					allowed = c.identity == idPayments || c.identity == idAdmin
				case r.allow == "lease":
					allowed = c.identity == idPayments
				case r.allow == "admin":
					allowed = c.identity == idAdmin
				}
				switch {
				case allowed || c.handshake:
				case r.allow == "lease" && c.identity == idAdmin:
					// The policy lets admin act on payments' endpoints;
					// the lease is still payments'.
					want = fmt.Sprintf("permission denied: %s may not %s lease %s of payments (it belongs to %s)", idAdmin, r.action, leaseID, idPayments)
				case r.global:
					want = fmt.Sprintf("permission denied: %s may not %s", c.identity, r.action)
				default:
					want = fmt.Sprintf("permission denied: %s may not %s payments", c.identity, r.action)
				}

				if allowed {
					allowedCells++
					if got.code != codes.OK {
						t.Fatalf("%s by %s = %v %q, want OK", r.name, c.name, got.code, got.msg)
					}
					// Every admin change is in the audit log with its
					// identity; one that changed nothing need not be.
					if r.allow == "admin" && serverState(t, admin, httpURL) != before {
						wantAudit(t, admin, httpURL, start, c.identity, r.action, "allowed")
						audited++
					}
					return
				}
				deniedCells++
				if c.handshake {
					// The server refuses the certificate in the handshake: a
					// connection error (gRPC Unavailable, an HTTP transport
					// error), whose text is the client's view of the
					// aborted connection: the TLS alert, or a broken pipe
					// when the alert races the client's first write.
					aborted := strings.Contains(got.msg, "tls: "+c.alert) || strings.Contains(got.msg, "broken pipe") || strings.Contains(got.msg, "connection reset")
					if got.code != codes.Unavailable || !aborted {
						t.Errorf("%s by %s = %v %q, want Unavailable with the TLS alert %q", r.name, c.name, got.code, got.msg, c.alert)
					}
					handshakeErrors[got.msg[max(0, strings.LastIndex(got.msg, ": ")+2):]]++
				} else if got.code != codes.PermissionDenied || got.msg != want {
					t.Errorf("%s by %s = %v %q, want PermissionDenied %q", r.name, c.name, got.code, got.msg, want)
				} else {
					// Every denied write is in the audit log, with who.
					wantAudit(t, admin, httpURL, start, cmp.Or(c.identity, "anonymous"), r.action, "denied")
					audited++
				}
				if after := serverState(t, admin, httpURL); after != before {
					t.Errorf("a denied %s by %s changed the server's state:\nbefore %s\nafter  %s", r.name, c.name, before, after)
				}
			})
		}
	}
	t.Logf("%d rows × %d callers: %d allowed, %d denied; refused handshakes seen as %v; %d audit entries checked", len(rows), len(callers), allowedCells, deniedCells, handshakeErrors, audited)
}

// wantAudit fails unless GET /v1/audit lists an entry recorded since
// start for identity doing action with outcome.
func wantAudit(t *testing.T, admin *caller, httpURL string, start time.Time, identity, action, outcome string) {
	t.Helper()
	resp, err := admin.http.Get(httpURL + "/v1/audit?limit=1000&since=" + url.QueryEscape(start.Format(time.RFC3339Nano)))
	if err != nil {
		t.Fatalf("GET /v1/audit: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/audit: %d %q", resp.StatusCode, body)
	}
	var entries []audit.Entry
	if err := json.Unmarshal([]byte(body), &entries); err != nil {
		t.Fatalf("GET /v1/audit: %v in %q", err, body)
	}
	for _, e := range entries {
		if e.Identity == identity && e.Action == action && e.Outcome == outcome {
			return
		}
	}
	t.Errorf("the audit log since %s has no %s %s by %s: %s", start.Format(time.RFC3339Nano), outcome, action, identity, body)
}

// registration is a Register of payments at addr:8080 with a one-hour
// TTL.
func registration(addr string) *registryv1.RegisterRequest {
	return &registryv1.RegisterRequest{
		Service: "payments",
		Endpoint: &registryv1.Endpoint{
			Address: addr,
			Ports:   []*registryv1.Port{{Name: "grpc", Number: 8080, Protocol: "tcp"}},
		},
		TtlSeconds: 3600,
	}
}

// TestVMCertificateOwnsItsLease is #16 acceptance 2, over the whole
// server with mTLS: a VM whose certificate says payments registers and
// heartbeats payments (unary and on a stream) but may not register
// checkout; another identity (checkout's VM, admin) can neither
// heartbeat nor deregister its lease, nor take its endpoint over; the
// owner can deregister it.
func TestVMCertificateOwnsItsLease(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	srv := ca.Issue(t, tlstest.Leaf{IPs: []netip.Addr{tlstest.Loopback}}).WriteFiles(t, dir, "server", ca)
	authzFile := filepath.Join(dir, "authz.yaml")
	if err := os.WriteFile(authzFile, []byte(enforcePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	_, grpcAddr := startSecured(t, "--tls-cert", srv.Cert, "--tls-key", srv.Key, "--client-ca", srv.CA, "--authz-file", authzFile)
	vm := func(id string) registryv1.RegistryClient {
		return registryv1.NewRegistryClient(newCaller(t, id, id, ca, ca.Issue(t, tlstest.Leaf{URIs: []string{id}}), grpcAddr).conn)
	}
	payments, checkout, admin := vm(idPayments), vm(idCheckout), vm(idAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l, err := payments.Register(ctx, registration("10.0.0.1"))
	if err != nil {
		t.Fatalf("payments registers payments: %v", err)
	}
	if _, err := payments.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: l.LeaseId}); err != nil {
		t.Errorf("payments heartbeats its lease: %v", err)
	}
	hs, err := payments.HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := hs.Send(&registryv1.HeartbeatRequest{LeaseId: l.LeaseId}); err != nil {
		t.Fatal(err)
	}
	if resp, err := hs.Recv(); err != nil || !resp.GetFound() {
		t.Errorf("payments heartbeats its lease on a stream = %v, %v; want found", resp, err)
	}
	hs.CloseSend()

	other := registration("10.0.0.2")
	other.Service = "checkout"
	_, err = payments.Register(ctx, other)
	wantCode(t, "payments registers checkout", err, codes.PermissionDenied, "permission denied: "+idPayments+" may not register checkout")

	owned := fmt.Sprintf("lease %s of payments (it belongs to %s)", l.LeaseId, idPayments)
	_, err = checkout.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: l.LeaseId})
	wantCode(t, "checkout heartbeats payments' lease", err, codes.PermissionDenied, "permission denied: "+idCheckout+" may not heartbeat payments")
	_, err = checkout.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: l.LeaseId})
	wantCode(t, "checkout deregisters payments' lease", err, codes.PermissionDenied, "permission denied: "+idCheckout+" may not deregister payments")
	_, err = admin.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: l.LeaseId})
	wantCode(t, "admin heartbeats payments' lease", err, codes.PermissionDenied, "permission denied: "+idAdmin+" may not heartbeat "+owned)
	_, err = admin.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: l.LeaseId})
	wantCode(t, "admin deregisters payments' lease", err, codes.PermissionDenied, "permission denied: "+idAdmin+" may not deregister "+owned)
	_, err = admin.Register(ctx, registration("10.0.0.1"))
	wantCode(t, "admin re-registers payments' endpoint", err, codes.PermissionDenied,
		"permission denied: "+idAdmin+" may not register endpoint "+l.EndpointId+" of payments (its lease belongs to "+idPayments+")")

	eps, err := admin.ListEndpoints(ctx, &registryv1.ListEndpointsRequest{Service: "payments"})
	// Listings carry no lease id (only Register's answer does): the
	// endpoint is still there, and its lease is still payments' below.
	if err != nil || len(eps.GetEndpoints()) != 1 || eps.GetEndpoints()[0].GetId() != l.EndpointId || eps.GetEndpoints()[0].GetLeaseId() != "" {
		t.Fatalf("payments' endpoints after the refusals = %v, %v; want its one endpoint %s, without lease id", eps, err, l.EndpointId)
	}
	if _, err := payments.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: l.LeaseId}); err != nil {
		t.Errorf("payments deregisters its lease: %v", err)
	}
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if st := status.Convert(err); st.Code() != code || st.Message() != msg {
		t.Errorf("%s = %v %q, want %v %q", what, st.Code(), st.Message(), code, msg)
	}
}

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/clientlib/clientcreds"
	"github.com/spillway/spillway/load"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/exchange/meshv1"
	"github.com/spillway/spillway/security/tlsconfig"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

// e2eTLS is the PKI of one TLS server: a CA, the server's certificate
// (127.0.0.1 and localhost) and one client identity, as files.
type e2eTLS struct {
	dir    string
	ca     *tlstest.CA
	server tlsconfig.Files // CA: the client CA bundle (--client-ca)
	client tlsconfig.Files // CA: the bundle that signs the server

	once sync.Once
	http *http.Client
}

// e2eClientID is the harness client certificate's identity (its only
// SAN, a DNS SAN): "admin", whom the default policy lets change the
// panic flag and the rollout, so the TLS variants of the migration tests
// run their spillwayctl calls as the plaintext ones do with the token (a
// verified certificate wins over a token).
const e2eClientID = "admin"

func newE2ETLS(t *testing.T) *e2eTLS {
	e := &e2eTLS{dir: t.TempDir(), ca: tlstest.NewCA(t, "spillway e2e CA")}
	e.server = e.serverLeaf(t, e.ca).WriteFiles(t, e.dir, "server", e.ca)
	e.client = e.ca.Issue(t, tlstest.Leaf{DNS: []string{e2eClientID}}).WriteFiles(t, e.dir, "client", e.ca)
	return e
}

func (e *e2eTLS) serverLeaf(t *testing.T, ca *tlstest.CA) *tlstest.Cert {
	return ca.Issue(t, tlstest.Leaf{DNS: []string{"localhost"}, IPs: []netip.Addr{tlstest.Loopback}})
}

func (e *e2eTLS) creds() clientcreds.Config {
	return clientcreds.Config{CA: e.client.CA, Cert: e.client.Cert, Key: e.client.Key}
}

func (e *e2eTLS) clientlib() clientlib.TLS {
	return clientlib.TLS{CA: e.client.CA, Cert: e.client.Cert, Key: e.client.Key, Refresh: time.Second}
}

// newTLSServer is newServer with TLS on both ports, client certificates
// required (--client-ca), and the files polled every 200ms.
func newTLSServer(t *testing.T, extra ...string) *server {
	e := newE2ETLS(t)
	s := newServer(t, append([]string{"--tls-cert", e.server.Cert, "--tls-key", e.server.Key, "--client-ca", e.server.CA, "--tls-reload", "200ms"}, extra...)...)
	s.tls = e
	return s
}

// httpClient is the client of s's HTTP port: with TLS, one client with
// the client certificate for the whole test.
func (s *server) httpClient() *http.Client {
	if s.tls == nil {
		return http.DefaultClient
	}
	s.tls.once.Do(func() {
		c, err := s.tls.creds().HTTPClient()
		if err != nil {
			s.t.Fatal(err)
		}
		s.tls.http = c
		s.t.Cleanup(c.CloseIdleConnections)
	})
	return s.tls.http
}

// url is the URL of path on s's HTTP port.
func (s *server) url(path string) string {
	if s.tls == nil {
		return "http://" + s.httpAddr + path
	}
	return "https://" + s.httpAddr + path
}

// dialOptions dial s's gRPC port.
func (s *server) dialOptions() []grpc.DialOption {
	if s.tls == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts, err := s.tls.creds().DialOptions()
	if err != nil {
		s.t.Fatal(err)
	}
	return opts
}

// ctlGlobals are spillwayctl's global flags for s.
func (s *server) ctlGlobals() []string {
	g := []string{"--server", s.grpcAddr}
	if s.tls != nil {
		g = append(g, "--tls-ca", s.tls.client.CA, "--tls-cert", s.tls.client.Cert, "--tls-key", s.tls.client.Key)
	}
	return g
}

// tlsDial makes one new TLS connection to addr with cfg and returns the
// server certificate's serial, or the handshake error. The handshake
// error of a refused client certificate may only show on the first
// read (TLS 1.3), so it reads until the server speaks or closes.
func tlsDial(addr string, cfg *tls.Config) (*big.Int, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	serial := c.ConnectionState().PeerCertificates[0].SerialNumber
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// An HTTP/1.1 request: the HTTP port answers it; on a refused client
	// certificate the read fails with the server's alert.
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return nil, err
	}
	if _, err := io.ReadAll(c); err != nil {
		return nil, err
	}
	return serial, nil
}

// TestTLSRotation is issue 16 acceptance 3: the server certificate and
// the client CA bundle are replaced on disk (a new CA); without a
// restart, new connections get the new server certificate within the
// reload interval, a client certificate of the old CA is refused and one
// of the new CA accepted, while an ADS stream and an HTTP keep-alive
// connection opened before the rotation stay up and keep working.
func TestTLSRotation(t *testing.T) {
	s := newTLSServer(t)
	s.start()
	e := s.tls
	oldServerSerial := func() *big.Int {
		serial, err := tlsDial(s.httpAddr, &tls.Config{RootCAs: tlstest.Pool(e.ca), Certificates: []tls.Certificate{mustPair(t, e.client)}})
		if err != nil {
			t.Fatalf("before rotation: %v", err)
		}
		return serial
	}()

	// An xDS stream and an HTTP keep-alive connection, both on the old
	// certificates.
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register := func(c pb.RegistryClient, id string, port uint32) {
		t.Helper()
		if _, err := c.Register(ctx, &pb.RegisterRequest{Service: "tlsrot", Endpoint: &pb.Endpoint{
			Id: id, Address: "10.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: port, Protocol: "tcp"}}, Locality: &pb.Locality{Zone: "z1"},
		}}); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}
	register(reg, "before", 1001)
	w := watchEDSWith(t, s.grpcAddr, "tlsrot", "z1", s.dialOptions()...)
	w.until(t, "the endpoint registered before the rotation", func(cla *v3endpointpb.ClusterLoadAssignment) bool {
		return slices.Contains(claPorts(cla), 1001)
	})
	keep := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: tlstest.Pool(e.ca), Certificates: []tls.Certificate{mustPair(t, e.client)}},
		ForceAttemptHTTP2: true,
	}}
	defer keep.CloseIdleConnections()
	get := func(what string) (reused bool, serial *big.Int) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, s.url("/healthz"), nil)
		resp, err := keep.Do(req)
		if err != nil {
			t.Fatalf("%s: GET /healthz: %v", what, err)
		}
		defer resp.Body.Close()
		io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			t.Fatalf("%s: GET /healthz = %d over %s, want 200 over HTTP/2 (tlsDial speaks HTTP/1.1)", what, resp.StatusCode, resp.Proto)
		}
		return reused, resp.TLS.PeerCertificates[0].SerialNumber
	}
	get("keep-alive before rotation")

	// Rotate: a new CA signs the new server certificate and is the only
	// client CA.
	newCA := tlstest.NewCA(t, "spillway e2e CA 2")
	newServer := e.serverLeaf(t, newCA)
	newServer.WriteFiles(t, e.dir, "server", newCA)
	newClient := newCA.Issue(t, tlstest.Leaf{URIs: []string{"spiffe://spillway.test/ns/e2e/sa/client2"}})
	rotated := time.Now()

	// Poll new connections (bounded) until one shows the new certificate.
	newCfg := &tls.Config{RootCAs: tlstest.Pool(e.ca, newCA), Certificates: []tls.Certificate{newClient.TLS}}
	var polls int
	deadline := time.Now().Add(20 * time.Second)
	for {
		polls++
		serial, err := tlsDial(s.httpAddr, newCfg)
		if err == nil && serial.Cmp(newServer.Cert.SerialNumber) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new connection used the rotated certificate within 20s (last: serial %v, err %v); logs:\n%s", serial, err, s.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the rotated certificate reached new connections %v after the write (%d polls; --tls-reload 200ms)", time.Since(rotated).Round(time.Millisecond), polls)

	// New connections: old-CA client refused, new-CA client accepted,
	// over HTTP and gRPC.
	if _, err := tlsDial(s.httpAddr, &tls.Config{RootCAs: tlstest.Pool(newCA), Certificates: []tls.Certificate{mustPair(t, e.client)}}); err == nil {
		t.Error("HTTP: a client certificate of the old CA was accepted after the rotation")
	}
	grpcCheck := func(cfg *tls.Config) error {
		cc, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer cc.Close()
		_, err = pb.NewRegistryClient(cc).ListServices(ctx, &pb.ListServicesRequest{})
		return err
	}
	if err := grpcCheck(&tls.Config{RootCAs: tlstest.Pool(newCA), Certificates: []tls.Certificate{mustPair(t, e.client)}}); err == nil {
		t.Error("gRPC: a client certificate of the old CA was accepted after the rotation")
	}
	if err := grpcCheck(&tls.Config{RootCAs: tlstest.Pool(newCA), Certificates: []tls.Certificate{newClient.TLS}}); err != nil {
		t.Errorf("gRPC: the new CA's client was refused after the rotation: %v", err)
	}
	// The server's old-CA root no longer verifies the server.
	if _, err := tlsDial(s.httpAddr, &tls.Config{RootCAs: tlstest.Pool(e.ca), Certificates: []tls.Certificate{newClient.TLS}}); err == nil {
		t.Error("a client trusting only the old CA verified the rotated server certificate")
	}

	// The connections opened before the rotation are still the same
	// connections, on the old certificate, and still work: the keep-alive
	// connection is reused, the ADS stream gets the push of a change made
	// after the rotation.
	reused, serial := get("keep-alive after rotation")
	if !reused || serial.Cmp(oldServerSerial) != 0 {
		t.Errorf("keep-alive after rotation: reused %v, server serial %v; want the same connection (serial %v)", reused, serial, oldServerSerial)
	}
	newFiles := newClient.WriteFiles(t, e.dir, "client2", newCA)
	newCreds := clientcreds.Config{CA: newFiles.CA, Cert: newFiles.Cert, Key: newFiles.Key}
	newOpts, err := newCreds.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(s.grpcAddr, newOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	register(pb.NewRegistryClient(cc), "after", 1002)
	w.until(t, "the endpoint registered after the rotation, on the stream opened before it", func(cla *v3endpointpb.ClusterLoadAssignment) bool {
		return slices.Contains(claPorts(cla), 1001) && slices.Contains(claPorts(cla), 1002)
	})
	// Metrics, read as the new client: one reload, no failure.
	hc, err := newCreds.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(s.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"spillway_tls_reload_failures_total 0", "spillway_tls_reloads_total 1"} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func mustPair(t *testing.T, f tlsconfig.Files) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientlibMTLS is issue 16 acceptance 4 in one client: against a
// server that requires client certificates, a Conn with WithTLS reads
// the rollout over HTTPS and moves to xDS (its bootstrap has "tls"
// channel creds with the client certificate); the same Conn without
// WithTLS cannot read the rollout (https with an unknown CA) and stays
// on DNS, saying why.
func TestClientlibMTLS(t *testing.T) {
	f := newMCFixtureTLS(t, true)
	f.setRollout(t, 100)
	dial := func(name string, opts ...clientlib.Option) *clientlib.Conn {
		c, err := clientlib.Dial(context.Background(), mcService, append(opts,
			clientlib.WithService(name), clientlib.WithZone("zone-a"),
			clientlib.WithControlPlane(f.s.grpcAddr), clientlib.WithDNSServer(f.s.flag("--dns-addr")),
			clientlib.WithRolloutURL(f.s.url("/v1/rollout")), clientlib.WithPanicPollInterval(mcPoll),
			clientlib.WithXDSTimeout(5*time.Second), clientlib.WithPerConnBootstrap())...)
		if err != nil {
			t.Fatalf("Dial as %s: %v", name, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	secure := dial("mtls-caller", clientlib.WithTLS(f.s.tls.clientlib()))
	plain := dial("plain-caller")
	conns := map[string]*clientlib.Conn{"mtls-caller": secure, "plain-caller": plain}
	mcWait(t, conns, 15*time.Second, "mtls on xds, plaintext on dns", func(n string, s clientlib.Status) bool {
		if n == "mtls-caller" {
			return s.Channel == clientlib.XDS && s.Eligibility.Eligible && s.Eligibility.Version > 0
		}
		return s.Channel == clientlib.DNS && s.Eligibility.Err != nil
	})
	if s := secure.Status(); !strings.HasPrefix(s.Eligibility.Source, "https://") {
		t.Errorf("mtls-caller read the rollout from %q, want https://", s.Eligibility.Source)
	}
	if err := plain.Status().Eligibility.Err; !strings.Contains(err.Error(), "certificate") {
		t.Errorf("plain-caller rollout error = %v, want a certificate error", err)
	}
	// RPCs flow over the xDS channel.
	for range 10 {
		if _, err := healthpb.NewHealthClient(secure).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("RPC over the mTLS-bootstrapped xDS channel: %v", err)
		}
	}
	if s := secure.Status(); s.Channel != clientlib.XDS {
		t.Fatalf("mtls-caller on %v after the RPCs, want xds", s.Channel)
	}
}

// TestMeshTLS: two replicas on one etcd, both on mTLS with certificates
// of one CA, each its own identity: each dials the other's gRPC port for
// the load exchange with its own certificate as client certificate, and
// the summaries arrive (a replica whose dial failed would count them
// dropped, and the owner would accept none). Issue 28's attack with the
// default policy (every caller may mesh): a workload certificate of the
// same CA claiming a replica id is refused, naming its identity.
func TestMeshTLS(t *testing.T) {
	etcd := etcdtest.Start(t)
	e := newE2ETLS(t)
	store := "etcd://" + strings.TrimPrefix(etcd.Endpoint, "http://") + "/" + etcdPrefix
	var servers []*server
	for i := range 2 {
		own := e.ca.Issue(t, tlstest.Leaf{URIs: []string{fmt.Sprintf("spiffe://e2e/replica/r%d", i)}, DNS: []string{"localhost"}, IPs: []netip.Addr{tlstest.Loopback}}).
			WriteFiles(t, e.dir, fmt.Sprintf("replica-%d", i), e.ca)
		s := newServer(t, "--store", store, "--replica-id", fmt.Sprintf("r%d", i), "--election-ttl", "2s",
			"--lrs-interval", "1s", "--weights-interval", "1s", "--mesh-shards", "4", "--mesh-stale-cycles", "6",
			"--tls-cert", own.Cert, "--tls-key", own.Key, "--client-ca", e.server.CA)
		s.tls = e
		servers = append(servers, s)
		s.startNoWait()
	}
	for _, s := range servers {
		s.waitReady()
	}
	accepted := func(s *server) float64 {
		for _, m := range metricSeries(t, s, "spillway_mesh_load_summaries_total") {
			if m.labels["result"] == "accepted" {
				return m.value
			}
		}
		return 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		a0, a1 := accepted(servers[0]), accepted(servers[1])
		if a0+a1 >= 2 {
			t.Logf("load summaries accepted over mTLS: r0 %v, r1 %v", a0, a1)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no load summary accepted between the replicas within 30s (r0 %v, r1 %v); logs:\n%s\n%s", a0, a1, servers[0].logs, servers[1].logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Once the replicas reach each other, none drops a summary: counted
	// from here, over the next few rounds (a summary sent while the other
	// replica was still starting may have been dropped before).
	dropped := func(s *server) float64 {
		var n float64
		for _, m := range metricSeries(t, s, "spillway_mesh_load_summaries_total") {
			if m.labels["result"] == "dropped" {
				n += m.value
			}
		}
		return n
	}
	d0, d1 := dropped(servers[0]), dropped(servers[1])
	a0, a1 := accepted(servers[0]), accepted(servers[1])
	for deadline := time.Now().Add(30 * time.Second); accepted(servers[0])+accepted(servers[1]) < a0+a1+4; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("load summaries stopped: %v accepted in 30s after the first ones", accepted(servers[0])+accepted(servers[1])-a0-a1)
		}
	}
	for i, before := range []float64{d0, d1} {
		if n := dropped(servers[i]) - before; n > 0 {
			t.Errorf("r%d dropped %v summaries once the replicas reached each other (a failed dial to the other replica?)", i, n)
		}
	}

	// The workload certificate (identity "admin", same CA) claims r1.
	creds, err := e.creds().TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(servers[0].grpcAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := meshv1.NewLoadExchangeClient(conn).Report(ctx)
	if err == nil {
		_ = st.Send(exchange.ToProto(load.Summary{Replica: "r1", At: time.Now(), Interval: time.Second}))
		_, err = st.CloseAndRecv()
	}
	if s := status.Convert(err); s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), e2eClientID) {
		t.Errorf("Report as r1 with the workload certificate = %v, want PermissionDenied naming %q", err, e2eClientID)
	}
	if v := servers[0].metric(`spillway_mesh_load_refused_total{reason="peer_identity"}`); v != "1" {
		t.Errorf(`spillway_mesh_load_refused_total{reason="peer_identity"} = %q, want 1`, v)
	}
}

// TestCtlTLS: spillwayctl's global TLS flags on every path — gRPC
// (services, panic), HTTP (config list), the agent's heartbeats — and
// --token-file: with --client-auth optional, a caller with only the CA
// and the admin token file may flip the panic flag; without --tls-ca
// nothing gets through.
func TestCtlTLS(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	tlstest.WriteFile(t, tokenFile, []byte(e2eToken+"\n"))
	s := newTLSServer(t, "--client-auth", "optional", "--admin-token-file", tokenFile)
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// HTTP: config list over https with the client certificate (s.ctl
	// fails the test on a non-zero exit); without --tls-ca it fails.
	s.ctl(ctx, "config", "list", "--http", s.httpAddr)
	plainHTTP := exec.CommandContext(ctx, bin.spillwayctl, "--timeout", "2s", "config", "list", "--http", s.httpAddr)
	if out, err := plainHTTP.CombinedOutput(); err == nil {
		t.Errorf("plaintext config list succeeded against the TLS port: %s", out)
	}
	// The CA and the token file, no client certificate.
	// (ctlNoCert: s.ctlGlobals would add the admin certificate.)
	ctlNoCert := func(args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, bin.spillwayctl, append([]string{"--server", s.grpcAddr, "--tls-ca", s.tls.client.CA}, args...)...).CombinedOutput()
	}
	if out, err := ctlNoCert("--token-file", tokenFile, "panic", "on"); err != nil {
		t.Fatalf("panic on with --tls-ca and --token-file: %v: %s", err, out)
	}
	if got := s.xdsTXT(); got != "xds=off" {
		t.Errorf("TXT _xds after panic on = %q, want xds=off", got)
	}
	// A wrong token from --token-file is refused (the admin check).
	bad := filepath.Join(t.TempDir(), "bad-token")
	tlstest.WriteFile(t, bad, []byte("not-the-token\n"))
	if out, err := ctlNoCert("--token-file", bad, "panic", "off"); err == nil || !strings.Contains(string(out), "authorization") {
		t.Errorf("panic off with a wrong --token-file: %v: %s; want a refusal naming authorization", err, out)
	}
	// Plaintext against the TLS port fails.
	cmd := exec.CommandContext(ctx, bin.spillwayctl, "--server", s.grpcAddr, "--timeout", "2s", "services")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("plaintext spillwayctl services succeeded against the TLS port: %s", out)
	}

	// The agent heartbeats over mTLS.
	agentCtx, stopAgent := context.WithCancel(ctx)
	agent := exec.CommandContext(agentCtx, bin.spillwayctl, append(s.ctlGlobals(), "agent", "--service", "tlsagent",
		"--address", "10.0.0.9", "--port", "grpc=8080", "--zone", "z1", "--id", "vm-tls", "--ttl", "2s",
		"--report-utilization", "--utilization-interval", "200ms")...)
	var agentLogs syncBuffer
	agent.Stdout, agent.Stderr = &agentLogs, &agentLogs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stopAgent(); agent.Wait() }()
	reg := s.client()
	lastSeen := func() (time.Time, bool) {
		resp, err := reg.ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: "tlsagent"})
		if err != nil {
			return time.Time{}, false
		}
		for _, e := range resp.GetEndpoints() {
			if e.GetId() == "vm-tls" {
				return e.GetLastSeen().AsTime(), true
			}
		}
		return time.Time{}, false
	}
	// Registered, then three heartbeats seen by the server (last_seen
	// moves), bounded.
	var seen []time.Time
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < 4 {
		if ls, ok := lastSeen(); ok && (len(seen) == 0 || ls.After(seen[len(seen)-1])) {
			seen = append(seen, ls)
		}
		if time.Now().After(deadline) {
			t.Fatalf("saw %d of the agent's registration and 3 heartbeats within 30s; agent logs:\n%s", len(seen), agentLogs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its utilization reporter dials with the same credentials.
	for {
		var accepted float64
		for _, m := range metricSeries(t, s, "spillway_utilization_reports_total") {
			if m.labels["result"] == "accepted" {
				accepted = m.value
			}
		}
		if accepted > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no utilization report accepted over mTLS within 30s; agent logs:\n%s", agentLogs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package exchange

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/replica/exchange/meshv1"
	"github.com/spillway/spillway/replica/ownership"
	"github.com/spillway/spillway/security/tlsconfig/tlstest"
)

// serveExchange serves a Server with Members over m on 127.0.0.1 with
// the given gRPC server options.
func serveExchange(t *testing.T, m *Merged, members Membership, reg prometheus.Registerer, opts ...grpc.ServerOption) string {
	t.Helper()
	_, addr := serveExchangeVersions(t, m, members, nil, reg, opts...)
	return addr
}

// serveExchangeVersions is serveExchange with the cluster version of
// versions (nil: none), returning the Server too.
func serveExchangeVersions(t *testing.T, m *Merged, members Membership, versions Versions, reg prometheus.Registerer, opts ...grpc.ServerOption) (*Server, string) {
	t.Helper()
	srv, err := NewServer(ServerConfig{Merged: m, Members: members, Self: "owner", Services: ownedHere, Registerer: reg, Versions: versions})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return srv, lis.Addr().String()
}

// dialWith dials addr with creds from the local address from ("" for
// any).
func dialWith(t *testing.T, addr, from string, creds credentials.TransportCredentials) meshv1.LoadExchangeClient {
	t.Helper()
	d := net.Dialer{}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return meshv1.NewLoadExchangeClient(conn)
}

// TestPlaintextPeerSpeaksOnlyForItself is the attack on the address
// check: a live member's host (or anything at its address) claims
// another live member's replica id. Before, any live member's address
// could send for every member; now the summary's replica must be the
// member at the peer's address.
func TestPlaintextPeerSpeaksOnlyForItself(t *testing.T) {
	m := NewMerged(MergedConfig{})
	members := &fakeMembers{}
	members.set(ownership.Member{ID: "owner", GRPCAddr: "127.0.0.1:1"},
		ownership.Member{ID: "r1", GRPCAddr: "127.0.0.1:2"},
		ownership.Member{ID: "r9", GRPCAddr: "127.0.0.9:2"})
	reg := prometheus.NewRegistry()
	addr := serveExchange(t, m, members, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()

	from1 := dialWith(t, addr, "127.0.0.1", insecure.NewCredentials())
	_, err := reportStream(ctx, t, from1, forged("r9", now))
	if s := status.Convert(err); s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), `"r9"`) || !strings.Contains(s.Message(), "127.0.0.9:2") {
		t.Errorf("Report as r9 from 127.0.0.1 = %v, want PermissionDenied naming r9 and its address", err)
	}
	if got := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_refused_total", "not_bound")); got != 1 {
		t.Errorf("refused{not_bound} = %v, want 1", got)
	}
	if got := m.Size(); got != (Size{}) {
		t.Errorf("Size = %+v after a refused claim, want empty", got)
	}

	// Each from its own address is taken.
	if _, err := reportStream(ctx, t, from1, ToProto(goodSummary("r1", now))); err != nil {
		t.Errorf("Report as r1 from 127.0.0.1 = %v, want OK", err)
	}
	from9 := dialWith(t, addr, "127.0.0.9", insecure.NewCredentials())
	if _, err := reportStream(ctx, t, from9, ToProto(goodSummary("r9", now))); err != nil {
		t.Errorf("Report as r9 from 127.0.0.9 = %v, want OK", err)
	}
	if got := m.Size(); got.Senders != 2 {
		t.Errorf("Size = %+v, want r1's and r9's summaries", got)
	}
}

// TestCertificateSpeaksOnlyForItsMember is item 1's mTLS case: with
// client certificates verified and a policy granting mesh to every
// caller (the default with no --authz-file), a workload's certificate,
// or one replica's certificate claiming another replica, is refused; a
// replica's own certificate is taken for its own id. A member record
// without an identity (a release before it was recorded) is taken over a
// certificate as that release took it, so that a rolling upgrade under
// mTLS keeps its load and acknowledgements.
func TestCertificateSpeaksOnlyForItsMember(t *testing.T) {
	ca := tlstest.NewCA(t, "mesh-ca")
	server := ca.Issue(t, tlstest.Leaf{CommonName: "owner", URIs: []string{"spiffe://test/replica/owner"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	cert := func(uri string) credentials.TransportCredentials {
		c := ca.Issue(t, tlstest.Leaf{CommonName: uri, URIs: []string{uri}})
		return credentials.NewTLS(c.ClientTLS(ca))
	}
	m := NewMerged(MergedConfig{})
	members := &fakeMembers{}
	upgraded := []ownership.Member{{ID: "owner", GRPCAddr: "127.0.0.1:1", Identity: "spiffe://test/replica/owner"},
		{ID: "r1", GRPCAddr: "127.0.0.1:2", Identity: "spiffe://test/replica/r1"},
		{ID: "r2", GRPCAddr: "127.0.0.1:3", Identity: "spiffe://test/replica/r2"}}
	members.set(upgraded...)
	reg := prometheus.NewRegistry()
	addr := serveExchange(t, m, members, reg, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{server.TLS}, ClientCAs: tlstest.Pool(ca), ClientAuth: tls.RequireAndVerifyClientCert,
	})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()

	for _, c := range []struct {
		name, cert, replica, reason string
		want                        []string // in the denial
	}{
		{"workload certificate", "spiffe://test/ns/prod/sa/payments", "r1", "peer_identity", []string{"spiffe://test/ns/prod/sa/payments"}},
		{"r2's certificate as r1", "spiffe://test/replica/r2", "r1", "not_bound", []string{`"r1"`, "spiffe://test/replica/r1", "spiffe://test/replica/r2"}},
	} {
		before := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_refused_total", c.reason))
		_, err := reportStream(ctx, t, dialWith(t, addr, "", cert(c.cert)), forged(c.replica, now))
		s := status.Convert(err)
		if s.Code() != codes.PermissionDenied {
			t.Errorf("%s: Report = %v, want PermissionDenied", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(s.Message(), w) {
				t.Errorf("%s: denial %q does not name %s", c.name, s.Message(), w)
			}
		}
		if got := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_refused_total", c.reason)); got != before+1 {
			t.Errorf("%s: refused{%s} = %v, want %v", c.name, c.reason, got, before+1)
		}
	}
	if got := m.Size(); got != (Size{}) {
		t.Fatalf("Size = %+v after refused certificates, want empty", got)
	}

	if _, err := reportStream(ctx, t, dialWith(t, addr, "", cert("spiffe://test/replica/r1")), ToProto(goodSummary("r1", now))); err != nil {
		t.Errorf("Report as r1 with r1's certificate = %v, want OK", err)
	}
	if got := m.Size(); got.Senders != 1 {
		t.Errorf("Size = %+v, want r1's summary", got)
	}

	// Mid-upgrade: member "old" runs a release that records no identity.
	// Its load is taken over any certificate the policy grants mesh, as
	// that release did (the window a rolling upgrade leaves open), while
	// the upgraded members stay bound.
	members.set(append(upgraded, ownership.Member{ID: "old", GRPCAddr: "127.0.0.1:4"})...)
	if _, err := reportStream(ctx, t, dialWith(t, addr, "", cert("spiffe://test/replica/old")), ToProto(goodSummary("old", now))); err != nil {
		t.Errorf("Report as old (a record without identity) over a certificate = %v, want OK as in its release", err)
	}
	if got := m.Size(); got.Senders != 2 {
		t.Errorf("Size = %+v, want r1's and old's summaries", got)
	}
	_, err := reportStream(ctx, t, dialWith(t, addr, "", cert("spiffe://test/ns/prod/sa/payments")), forged("r1", now))
	if s := status.Convert(err); s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), "spiffe://test/replica/r1") {
		t.Errorf("workload certificate as r1 mid-upgrade = %v, want PermissionDenied naming r1's identity", err)
	}
}

// fakeVersions is a cluster version the test sets.
type fakeVersions struct{ v atomic.Int64 }

func (f *fakeVersions) Active(v int) bool { return f.v.Load() >= int64(v) }

// TestIdentityMissingAtVersion2 is cluster version 2's feature: before
// it, a member record without identity (a release before identities
// were recorded) is taken over a certificate on the mesh grant alone,
// as in TestCertificateSpeaksOnlyForItsMember; from it on, that record
// binds no certificate: its own and any other replica's certificate are
// refused (identity_missing), saying why, while the members with an
// identity stay bound to it and plaintext peers to their address.
func TestIdentityMissingAtVersion2(t *testing.T) {
	ca := tlstest.NewCA(t, "mesh-ca")
	server := ca.Issue(t, tlstest.Leaf{CommonName: "owner", URIs: []string{"spiffe://test/replica/owner"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	cert := func(uri string) credentials.TransportCredentials {
		c := ca.Issue(t, tlstest.Leaf{CommonName: uri, URIs: []string{uri}})
		return credentials.NewTLS(c.ClientTLS(ca))
	}
	m := NewMerged(MergedConfig{})
	members := &fakeMembers{}
	old := ownership.Member{ID: "old", GRPCAddr: "127.0.0.1:4"}
	r1 := ownership.Member{ID: "r1", GRPCAddr: "127.0.0.1:2", Identity: "spiffe://test/replica/r1"}
	members.set(ownership.Member{ID: "owner", GRPCAddr: "127.0.0.1:1", Identity: "spiffe://test/replica/owner"}, r1, old)
	versions := &fakeVersions{}
	versions.v.Store(1)
	reg := prometheus.NewRegistry()
	srv, addr := serveExchangeVersions(t, m, members, versions, reg, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{server.TLS}, ClientCAs: tlstest.Pool(ca), ClientAuth: tls.RequireAndVerifyClientCert,
	})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()

	if _, err := reportStream(ctx, t, dialWith(t, addr, "", cert("spiffe://test/replica/old")), ToProto(goodSummary("old", now))); err != nil {
		t.Errorf("version 1: Report as old over its certificate = %v, want OK (the mid-upgrade rule)", err)
	}
	if srv.RefusesCertificates(old) {
		t.Errorf("version 1: RefusesCertificates(old) = true, want false")
	}

	versions.v.Store(2)
	if !srv.RefusesCertificates(old) || srv.RefusesCertificates(r1) {
		t.Errorf("version 2: RefusesCertificates(old, r1) = %v, %v; want true, false", srv.RefusesCertificates(old), srv.RefusesCertificates(r1))
	}
	for _, c := range []struct {
		name, cert string
		want       []string // in the denial
	}{
		{"old's certificate as old", "spiffe://test/replica/old", []string{"spiffe://test/replica/old", `"old"`, "name no identity", "cluster version 2"}},
		{"r1's certificate as old", "spiffe://test/replica/r1", []string{`"old"`, "names no identity", "spiffe://test/replica/r1", "cluster version 2"}},
	} {
		before := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_refused_total", "identity_missing"))
		_, err := reportStream(ctx, t, dialWith(t, addr, "", cert(c.cert)), forged("old", now))
		s := status.Convert(err)
		if s.Code() != codes.PermissionDenied {
			t.Errorf("%s: Report = %v, want PermissionDenied", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(s.Message(), w) {
				t.Errorf("%s: denial %q does not say %s", c.name, s.Message(), w)
			}
		}
		if got := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_refused_total", "identity_missing")); got != before+1 {
			t.Errorf("%s: refused{identity_missing} = %v, want %v", c.name, got, before+1)
		}
	}
	if _, err := reportStream(ctx, t, dialWith(t, addr, "", cert("spiffe://test/replica/r1")), ToProto(goodSummary("r1", now))); err != nil {
		t.Errorf("version 2: Report as r1 over its certificate = %v, want OK", err)
	}

	// In plaintext, a record without identity is bound by its address,
	// at version 2 as before.
	pm := NewMerged(MergedConfig{})
	plain := &fakeMembers{}
	plain.set(ownership.Member{ID: "owner", GRPCAddr: "127.0.0.1:1"}, ownership.Member{ID: "r9", GRPCAddr: "127.0.0.9:2"})
	_, paddr := serveExchangeVersions(t, pm, plain, versions, prometheus.NewRegistry())
	if _, err := reportStream(ctx, t, dialWith(t, paddr, "127.0.0.9", insecure.NewCredentials()), ToProto(goodSummary("r9", now))); err != nil {
		t.Errorf("version 2, plaintext: Report as r9 from its address = %v, want OK", err)
	}
}

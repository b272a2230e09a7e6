package exchange

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/replica/exchange/meshv1"
	"github.com/spillway/spillway/replica/ownership"
)

// fakeMembers is a Membership whose live members a test sets.
type fakeMembers struct {
	mu sync.Mutex
	ms []ownership.Member
}

func (f *fakeMembers) Members() []ownership.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ms
}

func (f *fakeMembers) set(ms ...ownership.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ms = ms
}

// fakeServices registers and owns the services in its sets.
type fakeServices struct{ registered, owned map[string]bool }

func (f fakeServices) Registered(s string) bool { return f.registered[s] }
func (f fakeServices) Owns(s string) bool       { return f.owned[s] }

// Shard is 1 for "theirs", 0 for the others.
func (f fakeServices) Shard(s string) int {
	if s == "theirs" {
		return 1
	}
	return 0
}

// The owner "owner" with live members r1 and r2 on this machine, owning
// and registering payments and search.prod (goodSummary's services).
var (
	localMembers = []ownership.Member{{ID: "owner", GRPCAddr: "127.0.0.1:1"}, {ID: "r1", GRPCAddr: "127.0.0.1:2"}, {ID: "r2", GRPCAddr: "localhost:3"}}
	ownedHere    = fakeServices{
		registered: map[string]bool{"payments": true, "search.prod": true, "theirs": true},
		owned:      map[string]bool{"payments": true, "search.prod": true},
	}
)

// startAdmitServer serves a Server with Members and Services over m on
// 127.0.0.1.
func startAdmitServer(t *testing.T, m *Merged, members Membership, reg prometheus.Registerer, seam func(*Server)) string {
	t.Helper()
	srv, err := NewServer(ServerConfig{Merged: m, Members: members, Self: "owner", Services: ownedHere, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if seam != nil {
		seam(srv)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}

// reportStream sends msgs on one stream and returns the stream's outcome.
func reportStream(ctx context.Context, t *testing.T, c meshv1.LoadExchangeClient, msgs ...*meshv1.Summary) (*meshv1.ReportAck, error) {
	t.Helper()
	st, err := c.Report(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break // the server ended the stream: CloseAndRecv says why
		}
	}
	return st.CloseAndRecv()
}

// forged is what the attack sent: all of a service's load in one zone.
func forged(replica string, now time.Time) *meshv1.Summary {
	s := goodSummary(replica, now)
	s.Services = s.Services[:1]
	s.Services[0].Flows = []load.Flow{{ClientZone: "zone-a", Zone: "zone-b", Issued: 1e6, Succeeded: 1e6, Reporters: 50, Updated: now}}
	s.Services[0].Endpoints = nil
	return ToProto(s)
}

// TestForgedReplicaRefused is the attack of issue 28: a Report from a
// made-up replica id (or the owner's own) is refused, naming it, and
// the owner's merged load is what it was.
func TestForgedReplicaRefused(t *testing.T) {
	m := NewMerged(MergedConfig{})
	members := &fakeMembers{}
	members.set(localMembers...)
	reg := prometheus.NewRegistry()
	client := dial(t, startAdmitServer(t, m, members, reg, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	now := time.Now()
	if _, err := reportStream(ctx, t, client, ToProto(goodSummary("r1", now))); err != nil {
		t.Fatalf("Report from live member r1 = %v, want OK", err)
	}
	before := stateOf(m, now)
	contributors := m.Contributors("payments", now)
	for i, id := range []string{"forger", "owner"} {
		_, err := reportStream(ctx, t, client, forged(id, now))
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), fmt.Sprintf("%q", id)) {
			t.Errorf("Report from %s = %v, want PermissionDenied naming %q", id, err, id)
		}
		if got := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_refused_total", "not_member")); got != float64(i+1) {
			t.Errorf("refused{not_member} = %v, want %d", got, i+1)
		}
	}
	if diff := cmp.Diff(before, stateOf(m, now)); diff != "" {
		t.Errorf("Merged changed by forged reports (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(contributors, m.Contributors("payments", now)); diff != "" {
		t.Errorf("Contributors changed by forged reports (-before +after):\n%s", diff)
	}

	// A member that left is refused too; one that joins is taken.
	members.set(localMembers[0], localMembers[2])
	if _, err := reportStream(ctx, t, client, forged("r1", now)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Report from r1 after it left = %v, want PermissionDenied", err)
	}
	members.set(append(localMembers, ownership.Member{ID: "r3", GRPCAddr: "127.0.0.1:4"})...)
	if _, err := reportStream(ctx, t, client, ToProto(goodSummary("r3", now))); err != nil {
		t.Errorf("Report from r3 after it joined = %v, want OK", err)
	}
}

// counterOf returns the counter of name with label value v in reg.
func counterOf(t *testing.T, reg *prometheus.Registry, name, v string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.Metric {
			if mt.Label[0].GetValue() == v {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
				c.Add(mt.GetCounter().GetValue())
				return c
			}
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name})
}

// TestUnregisteredServicesDropped: a live member naming 100,000 services
// this replica has not registered (or does not own) costs no memory:
// they are dropped and counted, the registered owned ones kept.
func TestUnregisteredServicesDropped(t *testing.T) {
	m := NewMerged(MergedConfig{})
	members := &fakeMembers{}
	members.set(localMembers...)
	reg := prometheus.NewRegistry()
	client := dial(t, startAdmitServer(t, m, members, reg, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	now := time.Now()
	const fake = 100_000
	var msgs []*meshv1.Summary
	for i := 0; i < fake; {
		s := load.Summary{Replica: "r1", At: now, Interval: time.Second}
		for ; i < fake && len(s.Services) < MaxServices; i++ {
			s.Services = append(s.Services, load.ServiceSummary{Service: fmt.Sprintf("fake-%06d", i),
				Flows: []load.Flow{{ClientZone: "zone-a", Zone: "zone-a", Issued: 1, Succeeded: 1, Reporters: 1, Updated: now}}})
		}
		msgs = append(msgs, ToProto(s))
	}
	good := goodSummary("r1", now)
	good.Services = append(good.Services, load.ServiceSummary{Service: "theirs", Clients: []load.ClientCount{{Zone: "zone-a", Count: 1}}})
	msgs = append(msgs, ToProto(good))
	ack, err := reportStream(ctx, t, client, msgs...)
	if err != nil {
		t.Fatalf("Report = %v, want OK", err)
	}
	if ack.Summaries != uint64(len(msgs)) {
		t.Errorf("ack.summaries = %d, want %d", ack.Summaries, len(msgs))
	}
	if got, want := m.Size(), (Size{Senders: 1, Services: 2}); got != want {
		t.Errorf("Size = %+v, want %+v (payments and search.prod only)", got, want)
	}
	if b := m.Budget(); b.Bytes > 4096 {
		t.Errorf("Budget = %+v, want under 4 KiB for two services", b)
	}
	for reason, want := range map[string]float64{"unregistered": fake, "not_owned": 1} {
		if got := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_dropped_services_total", reason)); got != want {
			t.Errorf("dropped_services{%s} = %v, want %v", reason, got, want)
		}
	}

	// A shard the owner took a moment ago (its record seen by the
	// sender, not yet marked owned here): listed by the summary as
	// routed here, its services come with the acknowledgement.
	good.Shards = append(good.Shards, load.ShardEpoch{Shard: 1, Epoch: 2})
	if _, err := reportStream(ctx, t, client, ToProto(good)); err != nil {
		t.Fatalf("Report = %v, want OK", err)
	}
	if got, want := m.Size(), (Size{Senders: 1, Services: 3}); got != want {
		t.Errorf("Size = %+v, want %+v (theirs kept: its shard is listed)", got, want)
	}
}

// TestNonMemberPeerRefused: a plaintext stream from an address that is
// no live member's is refused before anything is read; a member's name
// is resolved (and cached) to match.
func TestNonMemberPeerRefused(t *testing.T) {
	m := NewMerged(MergedConfig{})
	members := &fakeMembers{}
	members.set(ownership.Member{ID: "owner", GRPCAddr: "192.0.2.1:9000"}, ownership.Member{ID: "r1", GRPCAddr: "replica-1.example:9000"})
	reg := prometheus.NewRegistry()
	var lookups atomic.Int32
	names := map[string]netip.Addr{
		"replica-1.example":  netip.MustParseAddr("192.0.2.2"),
		"replica-1b.example": netip.MustParseAddr("::ffff:127.0.0.1"),
	}
	client := dial(t, startAdmitServer(t, m, members, reg, func(s *Server) {
		s.hosts.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			lookups.Add(1)
			a, ok := names[host]
			if !ok {
				return nil, fmt.Errorf("no such host %s", host)
			}
			return []netip.Addr{a}, nil
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	now := time.Now()
	_, err := reportStream(ctx, t, client, ToProto(goodSummary("r1", now)))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "127.0.0.1") {
		t.Fatalf("Report from 127.0.0.1 = %v, want PermissionDenied naming the address", err)
	}
	if got := m.Size(); got != (Size{}) {
		t.Errorf("Size = %+v after a refused peer, want empty", got)
	}
	if got := testutil.ToFloat64(counterOf(t, reg, "spillway_mesh_load_refused_total", "peer_address")); got != 1 {
		t.Errorf("refused{peer_address} = %v, want 1", got)
	}

	// r1 now records a name that resolves to this machine: taken, and
	// looked up once for both streams (cached).
	members.set(ownership.Member{ID: "owner", GRPCAddr: "192.0.2.1:9000"}, ownership.Member{ID: "r1", GRPCAddr: "replica-1b.example:9000"})
	before := lookups.Load()
	for i := range 2 {
		if _, err := reportStream(ctx, t, client, ToProto(goodSummary("r1", now))); err != nil {
			t.Fatalf("Report %d from 127.0.0.1 as r1 at replica-1b.example = %v, want OK", i, err)
		}
	}
	if got := lookups.Load() - before; got != 1 {
		t.Errorf("lookups for two streams = %d, want 1 (cached)", got)
	}
	if got := m.Size(); got.Senders != 1 {
		t.Errorf("Size = %+v, want r1's summary", got)
	}
}

// TestSendersBoundedByLiveMembers: a new sender forgets the held senders
// that are no longer live members once as many are held as are live.
func TestSendersBoundedByLiveMembers(t *testing.T) {
	m := NewMerged(MergedConfig{})
	members := &fakeMembers{}
	members.set(localMembers...) // owner, r1, r2
	client := dial(t, startAdmitServer(t, m, members, nil, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	must(t, m.Add(goodSummary("owner", now), now)) // its own, delivered in process
	must(t, m.Add(goodSummary("gone", now), now))  // a member that died
	if _, err := reportStream(ctx, t, client, ToProto(goodSummary("r1", now))); err != nil {
		t.Fatal(err)
	}
	if _, err := reportStream(ctx, t, client, ToProto(goodSummary("r2", now))); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range m.Contributors("payments", now) {
		got = append(got, c.Replica)
	}
	if want := []string{"owner", "r1", "r2"}; !cmp.Equal(got, want) {
		t.Errorf("senders held = %v, want %v (gone forgotten for r2)", got, want)
	}
}

// TestByteBudget: services past a sender's byte budget are dropped
// (their older summary too) and counted; the rest are stored.
func TestByteBudget(t *testing.T) {
	now := time.Now()
	one := load.ServiceSummary{Service: "svc-000", Flows: []load.Flow{{ClientZone: "zone-a", Zone: "zone-a", Issued: 1, Reporters: 1, Updated: now}}}
	size := entrySize(&one)
	m := NewMerged(MergedConfig{MaxBytes: 10*size + size/2})
	s := summary("r1", now, time.Second)
	for i := range 30 {
		ss := one
		ss.Service = fmt.Sprintf("svc-%03d", i)
		s.Services = append(s.Services, ss)
	}
	must(t, m.Add(s, now))
	if got, want := m.Size(), (Size{Senders: 1, Services: 10}); got != want {
		t.Errorf("Size = %+v, want %+v", got, want)
	}
	if b := m.Budget(); b.Bytes > 10*size+size/2 || b.Dropped != 20 {
		t.Errorf("Budget = %+v, want at most %d bytes and 20 dropped", b, 10*size+size/2)
	}
	// A bigger summary of svc-000 no longer fits: dropped, the old one too.
	big := one
	for _, z := range []string{"zone-b", "zone-c", "zone-d", "zone-e"} {
		big.Flows = append(big.Flows, load.Flow{ClientZone: z, Zone: z, Issued: 1, Reporters: 1, Updated: now})
	}
	must(t, m.Add(summary("r1", now, time.Second, big), now))
	if got := m.Loads("svc-000", now); len(got) != 0 {
		t.Errorf("Loads(svc-000) = %+v, want none past the budget", got)
	}
	if b := m.Budget(); b.Dropped != 21 || b.Bytes != 9*size {
		t.Errorf("Budget = %+v, want 21 dropped and %d bytes", b, 9*size)
	}
}

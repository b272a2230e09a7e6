package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/internal/testwait"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/replica/exchange"
	"github.com/spillway/spillway/replica/exchange/meshv1"
)

// TestMeshAdmission is issue 28's attack on a real replica over real
// etcd: a LoadExchange/Report from a made-up replica id is refused, one
// from a live member naming 100,000 unregistered services stores none
// of them, and one from an address no member has is refused.
func TestMeshAdmission(t *testing.T) {
	c := newReplicaClusterWith(t, 2)
	owner := c.servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	counter := func(name, reason string) float64 {
		v := owner.metric(fmt.Sprintf("%s{reason=%q}", name, reason))
		f, _ := strconv.ParseFloat(v, 64) // absent: 0
		return f
	}
	send := func(c meshv1.LoadExchangeClient, s load.Summary) error {
		st, err := c.Report(ctx)
		if err != nil {
			return err
		}
		for _, m := range chunks(s) {
			if st.Send(m) != nil {
				break
			}
		}
		_, err = st.CloseAndRecv()
		return err
	}
	client := meshClient(t, owner.grpcAddr, nil)
	now := func() time.Time { return time.Now() }
	empty := func(id string) load.Summary { return load.Summary{Replica: id, At: now(), Interval: time.Second} }

	// r1 is a live member at this address once r0 has seen it: taken.
	testwait.For(t, 30*time.Second, "a summary as r1 taken by r0", func() (bool, string) {
		err := send(client, empty("r1"))
		return err == nil, fmt.Sprint(err)
	})

	// A made-up replica id: refused, naming it.
	before := counter("spillway_mesh_load_refused_total", "not_member")
	forged := empty("forger")
	forged.Services = []load.ServiceSummary{{Service: "payments", Flows: []load.Flow{{ClientZone: "zone-a", Zone: "zone-b", Issued: 1e6, Succeeded: 1e6, Reporters: 50, Updated: now()}}}}
	err := send(client, forged)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), `"forger"`) {
		t.Errorf("Report as forger = %v, want PermissionDenied naming \"forger\"", err)
	}
	if got := counter("spillway_mesh_load_refused_total", "not_member") - before; got < 1 {
		t.Errorf("spillway_mesh_load_refused_total{reason=not_member} grew by %v, want at least 1", got)
	}

	// 100,000 unregistered names from a live member: taken, none kept.
	const fake = 100_000
	flood := empty("r1")
	for i := range fake {
		flood.Services = append(flood.Services, load.ServiceSummary{Service: fmt.Sprintf("fake-%06d", i),
			Flows: []load.Flow{{ClientZone: "zone-a", Zone: "zone-a", Issued: 1, Succeeded: 1, Reporters: 1, Updated: now()}}})
	}
	before = counter("spillway_mesh_load_dropped_services_total", "unregistered")
	if err := send(client, flood); err != nil {
		t.Errorf("Report of 100,000 unregistered services as r1 = %v, want OK", err)
	}
	if got := counter("spillway_mesh_load_dropped_services_total", "unregistered") - before; got != fake {
		t.Errorf("spillway_mesh_load_dropped_services_total{reason=unregistered} grew by %v, want %d", got, fake)
	}

	// Plaintext from 127.0.0.2, no member's address: refused before
	// anything is read, naming the address.
	before = counter("spillway_mesh_load_refused_total", "peer_address")
	stranger := meshClient(t, owner.grpcAddr, &net.TCPAddr{IP: net.ParseIP("127.0.0.2")})
	err = send(stranger, empty("r1"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "127.0.0.2") {
		t.Errorf("Report from 127.0.0.2 = %v, want PermissionDenied naming the address", err)
	}
	if got := counter("spillway_mesh_load_refused_total", "peer_address") - before; got != 1 {
		t.Errorf("spillway_mesh_load_refused_total{reason=peer_address} grew by %v, want 1", got)
	}
}

// meshClient dials addr in plaintext, from local when non-nil.
func meshClient(t *testing.T, addr string, local *net.TCPAddr) meshv1.LoadExchangeClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if local != nil {
		d := &net.Dialer{LocalAddr: local}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return meshv1.NewLoadExchangeClient(conn)
}

// chunks splits s into messages of at most exchange.MaxServices
// services, as a Sender does.
func chunks(s load.Summary) []*meshv1.Summary {
	var out []*meshv1.Summary
	for len(s.Services) > exchange.MaxServices || len(out) == 0 {
		part := s
		part.Services = s.Services[:min(len(s.Services), exchange.MaxServices)]
		out = append(out, exchange.ToProto(part))
		s.Services = s.Services[len(part.Services):]
	}
	if len(s.Services) > 0 {
		out = append(out, exchange.ToProto(s))
	}
	return out
}

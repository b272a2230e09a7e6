package exchange

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/replica/exchange/meshv1"
)

// startServer serves a Server over m on 127.0.0.1 and returns its address.
func startServer(t *testing.T, m *Merged) string {
	t.Helper()
	srv, err := NewServer(ServerConfig{Merged: m})
	if err != nil {
		t.Fatal(err)
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

func dial(t *testing.T, addr string) meshv1.LoadExchangeClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return meshv1.NewLoadExchangeClient(conn)
}

// state is everything a Merged answers, for before/after comparisons.
type state struct {
	Loads   any
	Clients map[string]map[string]int
	Size    Size
	Utils   []load.EndpointUtilization
}

func stateOf(m *Merged, now time.Time) state {
	return state{Loads: m.Loads("", now), Clients: m.ClientCounts(), Size: m.Size(), Utils: m.Utilizations("payments", now)}
}

func TestServerRejectsInvalid(t *testing.T) {
	m := NewMerged(MergedConfig{})
	addr := startServer(t, m)
	client := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// One good summary first, so there is something to leave unchanged.
	st, err := client.Report(ctx)
	must(t, err)
	must(t, st.Send(ToProto(goodSummary("replica-0", time.Now()))))
	ack, err := st.CloseAndRecv()
	must(t, err)
	if ack.Summaries != 1 {
		t.Fatalf("ack.summaries = %d, want 1", ack.Summaries)
	}
	now := time.Now()
	before := stateOf(m, now)
	if len(before.Utils) != 2 {
		t.Fatalf("after a good summary Utilizations = %+v, want 2 endpoints", before.Utils)
	}
	if before.Size.Services != 2 {
		t.Fatalf("after a good summary Size = %+v, want 2 services", before.Size)
	}

	cases := append(badCases[:len(badCases):len(badCases)], struct {
		name   string
		mutate func(m *meshv1.Summary)
		want   string
	}{"replica_changes_on_stream", func(m *meshv1.Summary) { m.Replica = "replica-2" }, "summary.replica"})
	for _, tc := range cases {
		if strings.HasPrefix(tc.name, "nil_") {
			continue // a nil element is not representable on the wire: it arrives as an empty message
		}
		t.Run(tc.name, func(t *testing.T) {
			st, err := client.Report(ctx)
			must(t, err)
			first := "replica-1"
			if tc.name == "replica_changes_on_stream" {
				must(t, st.Send(ToProto(goodSummary(first, now))))
			}
			bad := ToProto(goodSummary(first, now))
			// Values that differ from the stored ones, so a partial store would show.
			bad.Services[0].Flows[0].Issued = 7777
			bad.Services[0].Endpoints[0].Cpu = 0.77
			tc.mutate(bad)
			_ = st.Send(bad) // io.EOF if the server has already failed the stream
			_, err = st.CloseAndRecv()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Report = %v, want InvalidArgument", err)
			}
			if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, tc.want+":") {
				t.Errorf("Report error = %q, want it to name %s", msg, tc.want)
			}
			after := stateOf(m, now)
			if tc.name == "replica_changes_on_stream" {
				// The first, valid message of that stream is stored; the second is not.
				if after.Size.Senders != 2 {
					t.Errorf("Size = %+v, want replica-1's first summary stored", after.Size)
				}
				return
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("Merged changed by an invalid summary (-before +after):\n%s", diff)
			}
		})
	}
}

func TestServerFull(t *testing.T) {
	m := NewMerged(MergedConfig{MaxSenders: 1})
	client := dial(t, startServer(t, m))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, tc := range []struct {
		replica string
		code    codes.Code
	}{{"r1", codes.OK}, {"r2", codes.ResourceExhausted}} {
		st, err := client.Report(ctx)
		must(t, err)
		_ = st.Send(ToProto(goodSummary(tc.replica, time.Now())))
		_, err = st.CloseAndRecv()
		if status.Code(err) != tc.code {
			t.Errorf("report %d from %s = %v, want %v", i, tc.replica, err, tc.code)
		}
	}
	if got := m.Size(); got.Senders != 1 {
		t.Errorf("Size = %+v, want 1 sender", got)
	}
}

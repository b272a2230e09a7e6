package hbload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/registry/registrytest"
	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/security/authz"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait of these tests.
const testTimeout = 20 * time.Second

// testServer is the real registry server in-process, with leases.
type testServer struct {
	srv    *registrytest.Server
	client pb.RegistryClient
	known  []string // leases of service "web"
	denied string   // a lease of service "denied"
}

// startServer runs the registry server on loopback with n leases of
// service "web" and one of service "denied", each of a minute's TTL.
func startServer(t testing.TB, n int) *testServer {
	t.Helper()
	srv := registrytest.Start(t)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ts := &testServer{srv: srv, client: pb.NewRegistryClient(conn)}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	register := func(service string, i int) string {
		resp, err := ts.client.Register(ctx, &pb.RegisterRequest{
			Service:    service,
			Endpoint:   &pb.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Ports: []*pb.Port{{Name: "http", Number: 8080}}},
			TtlSeconds: 60,
		})
		if err != nil {
			t.Fatalf("register %s endpoint %d: %v", service, i, err)
		}
		return resp.LeaseId
	}
	for i := range n {
		ts.known = append(ts.known, register("web", i))
	}
	ts.denied = register("denied", n)
	return ts
}

// counted is what a Counts holds, for comparing.
type counted struct{ Acked, NotFound, StreamErrs int64 }

func (c *Counts) load() counted {
	return counted{c.Acked.Load(), c.NotFound.Load(), c.StreamErrs.Load()}
}

// waitDone waits until st has ended.
func waitDone(t *testing.T, st *RawStream) {
	t.Helper()
	select {
	case <-st.Done():
	case <-time.After(testTimeout):
		t.Fatalf("stream not ended after %v", testTimeout)
	}
}

// cycle is n lease ids going round ids.
func cycle(ids []string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = ids[i%len(ids)]
	}
	return out
}

// TestRawStreamAnswers sends batches over one stream, closes it and
// counts every answer: the stream ends with status OK.
func TestRawStreamAnswers(t *testing.T) {
	ts := startServer(t, 100)
	tests := []struct {
		name       string
		batches    func(known []string) [][]string
		recvWindow uint32 // zero: the default
		want       counted
	}{
		{
			name:    "known_leases",
			batches: func(k []string) [][]string { return [][]string{k[:10]} },
			want:    counted{Acked: 10},
		},
		{
			name: "unknown_keeps_the_stream",
			batches: func(k []string) [][]string {
				return [][]string{{"no-such-lease", "nor-this"}, k[:5], {"nor-that"}, k[5:7]}
			},
			want: counted{Acked: 7, NotFound: 3},
		},
		{
			// An empty id is left out of the message; one longer than
			// the API takes is unknown too.
			name:    "malformed_ids",
			batches: func(k []string) [][]string { return [][]string{{"", strings.Repeat("x", 200), k[0]}} },
			want:    counted{Acked: 1, NotFound: 2},
		},
		{
			// 50,000 heartbeats, well over a MiB, in five batches sent
			// before the test waits for any answer: the server's
			// initial 64 KiB windows must be given back many times, and
			// a 16 KiB receive window makes this side give back the
			// server's as often.
			name: "windows_replenished",
			batches: func(k []string) [][]string {
				b := cycle(k, 50_000)
				return [][]string{b[:10_000], b[10_000:20_000], b[20_000:30_000], b[30_000:40_000], b[40_000:]}
			},
			recvWindow: 16 << 10,
			want:       counted{Acked: 50_000},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			var c Counts
			st, err := dialRaw(ctx, ts.srv.Addr, &c, rawOptions{recvWindow: tt.recvWindow})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for i, b := range tt.batches(ts.known) {
				n, err := st.Send(ctx, b)
				if err != nil || n != len(b) {
					t.Fatalf("batch %d: Send = %d, %v; want %d, nil", i, n, err, len(b))
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			waitDone(t, st)
			if err := st.Err(); err != nil {
				t.Errorf("Err = %v, want nil", err)
			}
			if diff := cmp.Diff(tt.want, c.load()); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRawStreamEnds ends a stream in each way but a clean close: each
// counts one stream error, says why, and refuses further sends.
func TestRawStreamEnds(t *testing.T) {
	tests := []struct {
		name  string
		end   func(ctx context.Context, ts *testServer, st *RawStream) // ends the stream after st sent ts.known
		code  codes.Code                                               // status.Code of Err
		is    error                                                    // or nil: Err wraps it
		acked int64
	}{
		{
			// The policy refuses heartbeats of service "denied": the
			// API ends the stream with PermissionDenied, after
			// answering the heartbeats before.
			name: "permission_denied",
			end: func(ctx context.Context, ts *testServer, st *RawStream) {
				ts.srv.Deny(func(a authz.Action, resource string) error {
					if a == authz.Heartbeat && resource == "denied" {
						return errors.New("permission denied: anonymous may not heartbeat denied")
					}
					return nil
				})
				st.Send(ctx, []string{ts.denied, ts.known[0]})
			},
			code:  codes.PermissionDenied,
			acked: 10,
		},
		{
			name:  "server_stopped",
			end:   func(_ context.Context, ts *testServer, _ *RawStream) { ts.srv.Stop() },
			code:  codes.Unknown,
			acked: -1, // the stop may come before the answers
		},
		{
			name:  "closed",
			end:   func(_ context.Context, _ *testServer, st *RawStream) { st.Close() },
			code:  codes.Unknown,
			is:    errClosed,
			acked: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, 10)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			var c Counts
			st, err := DialRaw(ctx, ts.srv.Addr, &c)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Send(ctx, ts.known); err != nil {
				t.Fatal(err)
			}
			tt.end(ctx, ts, st)
			waitDone(t, st)
			err = st.Err()
			if err == nil {
				t.Fatal("Err = nil, want the stream's end")
			}
			t.Logf("Err: %v", err)
			if got := status.Code(err); got != tt.code {
				t.Errorf("status.Code(Err) = %v, want %v (Err: %v)", got, tt.code, err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("Err = %v, want it to wrap %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), ts.srv.Addr) {
				t.Errorf("Err = %v, want it to name %s", err, ts.srv.Addr)
			}
			got := c.load()
			if got.StreamErrs != 1 || tt.acked >= 0 && got.Acked != tt.acked {
				t.Errorf("counts = %+v, want 1 stream error and %d acked (-1: any)", got, tt.acked)
			}
			if n, err := st.Send(ctx, ts.known[:1]); n != 0 || err == nil {
				t.Errorf("Send after the end = %d, %v; want 0 and an error", n, err)
			}
		})
	}
}

// TestSendCancelledWhileBlocked holds the server's handler in the policy,
// so that it reads nothing and gives back no window, and cancels a Send
// waiting for one: Send returns the context's error promptly.
func TestSendCancelledWhileBlocked(t *testing.T) {
	ts := startServer(t, 1)
	release := make(chan struct{})
	ts.srv.Deny(func(a authz.Action, _ string) error {
		if a == authz.Heartbeat {
			<-release
		}
		return nil
	})
	t.Cleanup(func() { close(release) }) // before the server stops: it waits for its handlers

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	waiting := make(chan struct{})
	var once sync.Once
	var c Counts
	st, err := dialRaw(ctx, ts.srv.Addr, &c, rawOptions{onWait: func() { once.Do(func() { close(waiting) }) }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// More than grpc-go's largest window (16 MiB, its BDP limit) holds.
	batch := cycle(ts.known, (17<<20)/heartbeatLen(ts.known[0]))
	sctx, scancel := context.WithCancel(ctx)
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := st.Send(sctx, batch)
		res <- result{n, err}
	}()
	select {
	case <-waiting:
	case r := <-res:
		t.Fatalf("Send = %d, %v before waiting for a window", r.n, r.err)
	case <-time.After(testTimeout):
		t.Fatalf("Send not waiting for a window after %v", testTimeout)
	}
	scancel()
	cancelled := time.Now()
	select {
	case r := <-res:
		t.Logf("Send = %d of %d, %v", r.n, len(batch), r.err)
		if !errors.Is(r.err, context.Canceled) || r.n >= len(batch) {
			t.Errorf("Send = %d, %v; want fewer than %d and context.Canceled", r.n, r.err, len(batch))
		}
		if d := time.Since(cancelled); d > time.Second {
			t.Errorf("Send returned %v after the cancel, want promptly", d)
		}
	case <-time.After(testTimeout):
		t.Fatalf("Send still blocked %v after the cancel", testTimeout)
	}
}

// TestAppendHeartbeat checks the hand-made message against
// proto.Marshal behind a gRPC prefix.
func TestAppendHeartbeat(t *testing.T) {
	for _, id := range []string{"", "a", "01HZX3Q9V7M2N8K4R6T1W5Y0ZB", strings.Repeat("l", 64), strings.Repeat("m", 300)} {
		t.Run(fmt.Sprintf("len_%d", len(id)), func(t *testing.T) {
			body, err := proto.Marshal(&pb.HeartbeatRequest{LeaseId: id})
			if err != nil {
				t.Fatal(err)
			}
			want := append([]byte{0, 0, 0, byte(len(body) >> 8), byte(len(body))}, body...)
			got := appendHeartbeat([]byte("kept"), id)
			if diff := cmp.Diff(append([]byte("kept"), want...), got); diff != "" {
				t.Errorf("appendHeartbeat (-want +got):\n%s", diff)
			}
			if n := heartbeatLen(id); n != len(want) {
				t.Errorf("heartbeatLen = %d, want %d", n, len(want))
			}
		})
	}
}

// answers is the gRPC messages of resps, back to back.
func answers(t testing.TB, resps ...*pb.HeartbeatResponse) []byte {
	t.Helper()
	var b []byte
	for _, r := range resps {
		m, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, 0, 0, 0, byte(len(m)>>8), byte(len(m)))
		b = append(b, m...)
	}
	return b
}

// TestConsumeCut feeds answers cut into three DATA frames at every pair
// of places: each is counted once.
func TestConsumeCut(t *testing.T) {
	data := answers(t,
		&pb.HeartbeatResponse{LeaseId: "a", Found: true, TtlSeconds: 30},
		&pb.HeartbeatResponse{LeaseId: "b"},
		&pb.HeartbeatResponse{},
		&pb.HeartbeatResponse{LeaseId: strings.Repeat("c", 64), Found: true, TtlSeconds: 3600},
	)
	want := counted{Acked: 2, NotFound: 2}
	for i := range len(data) + 1 {
		for j := i; j <= len(data); j++ {
			var c Counts
			s := &RawStream{counts: &c}
			for _, p := range [][]byte{data[:i], data[i:j], data[j:]} {
				if err := s.consume(append([]byte(nil), p...)); err != nil {
					t.Fatalf("cut at %d, %d: %v", i, j, err)
				}
			}
			if got := c.load(); got != want || len(s.partial) != 0 {
				t.Fatalf("cut at %d, %d: counts %+v, %d bytes left; want %+v, none", i, j, got, len(s.partial), want)
			}
		}
	}
}

// FuzzAnswerFound checks answerFound against proto.Unmarshal.
func FuzzAnswerFound(f *testing.F) {
	for _, r := range []*pb.HeartbeatResponse{
		{LeaseId: "01HZX3Q9V7M2N8K4R6T1W5Y0ZB", Found: true, TtlSeconds: 30},
		{LeaseId: "01HZX3Q9V7M2N8K4R6T1W5Y0ZB"},
		{},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x10, 0x02, 0x10, 0x00}) // found twice: the last wins
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := answerFound(b)
		var want pb.HeartbeatResponse
		if proto.Unmarshal(b, &want) != nil {
			return
		}
		if err != nil || got != want.Found {
			t.Errorf("answerFound(%x) = %v, %v; proto.Unmarshal found = %v", b, got, err, want.Found)
		}
	})
}

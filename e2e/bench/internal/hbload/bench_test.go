package hbload

import (
	"context"
	"fmt"
	"os"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/e2e/bench/internal/procstat"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// benchBatches are the heartbeats one stream of the scale bench sends per
// 100 ms step at 10 % and at 100 % (1M leases, 8 streams, every 10 s).
var benchBatches = []int{125, 1250}

// BenchmarkRawSend and BenchmarkGRPCSend send b.N heartbeats over one
// HeartbeatStream to the real registry server in this process, in
// batches of benchBatches, and wait for every answer. ns/op is wall time
// per heartbeat; cpu-ns/hb is this process's CPU per heartbeat, the
// server's included. The server's share is the same in both, so the
// difference between the two is the difference between the generators.
func BenchmarkRawSend(b *testing.B) {
	benchSend(b, func(b *testing.B, addr string, c *Counts) (func([]string) error, func() error) {
		st, err := DialRaw(context.Background(), addr, c)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(st.Close)
		send := func(ids []string) error {
			_, err := st.Send(context.Background(), ids)
			return err
		}
		end := func() error {
			if err := st.CloseSend(); err != nil {
				return err
			}
			<-st.Done()
			return st.Err()
		}
		return send, end
	})
}

// BenchmarkGRPCSend is BenchmarkRawSend with grpc-go's client, one
// stream.Send per heartbeat as the benches did before RawStream.
func BenchmarkGRPCSend(b *testing.B) {
	benchSend(b, func(b *testing.B, addr string, c *Counts) (func([]string) error, func() error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		stream, err := pb.NewRegistryClient(conn).HeartbeatStream(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		done := c.Receive(stream)
		send := func(ids []string) error {
			for _, id := range ids {
				if err := stream.Send(&pb.HeartbeatRequest{LeaseId: id}); err != nil {
					return err
				}
			}
			return nil
		}
		end := func() error {
			if err := stream.CloseSend(); err != nil {
				return err
			}
			<-done
			return nil
		}
		return send, end
	})
}

// benchSend runs a sub-benchmark per batch size: open opens a stream
// counting into c and returns how it sends a batch and how it ends once
// every answer is in. It times b.N heartbeats and checks that c counted
// each.
func benchSend(b *testing.B, open func(b *testing.B, addr string, c *Counts) (send func(ids []string) error, end func() error)) {
	ts := startServer(b, 1000)
	for _, batch := range benchBatches {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ids := cycle(ts.known, batch)
			var c Counts
			send, end := open(b, ts.srv.Addr, &c)
			b.ReportAllocs()
			cpu0, err := procstat.CPUSeconds(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for sent := 0; sent < b.N; {
				n := min(batch, b.N-sent)
				if err := send(ids[:n]); err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			if err := end(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu1, err := procstat.CPUSeconds(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((cpu1-cpu0)*1e9/float64(b.N), "cpu-ns/hb")
			if got := c.load(); got != (counted{Acked: int64(b.N)}) {
				b.Fatalf("counts = %+v, want %d acked", got, b.N)
			}
		})
	}
}

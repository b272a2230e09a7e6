// Package hbload is the bench commands' heartbeat load (replicabench,
// scale), both halves: RawStream sends heartbeats over a raw HTTP/2
// HeartbeatStream, framed as grpc-go's client frames them at a fraction
// of its CPU, and counts the answers; Counts.Receive counts the answers
// of a grpc-go HeartbeatStream.
package hbload

import (
	"io"
	"sync/atomic"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// Counts are the answers of every stream of one load.
type Counts struct {
	Acked      atomic.Int64 // the lease was found and renewed
	NotFound   atomic.Int64 // the server knows no such lease
	StreamErrs atomic.Int64 // streams that ended with an error
}

// Receive reads stream's answers into c until the stream ends and closes
// the returned channel then.
func (c *Counts) Receive(stream pb.Registry_HeartbeatStreamClient) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err == io.EOF {
				return
			}
			if err != nil {
				c.StreamErrs.Add(1)
				return
			}
			if resp.Found {
				c.Acked.Add(1)
			} else {
				c.NotFound.Add(1)
			}
		}
	}()
	return done
}

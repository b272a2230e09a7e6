package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/spillway/spillway/registry/registryv1"
)

func vmRequest(service string, i int) *pb.RegisterRequest {
	return &pb.RegisterRequest{
		Service: service,
		Endpoint: &pb.Endpoint{
			Address:  fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
			Ports:    []*pb.Port{{Name: "grpc", Number: 8080}},
			Locality: &pb.Locality{Region: "r1", Zone: fmt.Sprintf("zone-%c", 'a'+i%3)},
		},
	}
}

// TestKill9LosesNoAcknowledgedRegistration registers from 8 clients at once
// and kills the server with SIGKILL while registrations are in flight. After
// a restart on the same data dir, every registration that was acknowledged
// is served.
func TestKill9LosesNoAcknowledgedRegistration(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()

	var mu sync.Mutex
	acked := map[string]bool{}
	var next atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > 5000 || ctx.Err() != nil {
					return
				}
				resp, err := c.Register(ctx, vmRequest("durable", i))
				if err != nil {
					return // the server is gone
				}
				mu.Lock()
				acked[resp.EndpointId] = true
				mu.Unlock()
			}
		})
	}
	// Kill once a few hundred are acknowledged, with more in flight.
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 300 || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.kill()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 300 {
		t.Fatalf("only %d registrations acknowledged before the deadline", len(acked))
	}

	s.start()
	got := endpointIDs(t, c, "durable")
	missing := 0
	for id := range acked {
		if !got[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged registrations lost by kill -9", missing, len(acked))
	}
	t.Logf("%d acknowledged before SIGKILL, %d served after restart", len(acked), len(got))
}

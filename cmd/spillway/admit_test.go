package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	registryv1 "github.com/spillway/spillway/registry/registryv1"
)

// TestGRPCAdmission runs the server with one place in setup and a setup
// timeout far longer than the test: each connection, unary or xDS, must
// leave setup by its first answer for the next one to be served.
func TestGRPCAdmission(t *testing.T) {
	httpAddr, grpcAddr := startSecured(t, "--grpc-admit-in-setup", "1", "--grpc-admit-setup-timeout", "1h")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	if _, err := registryv1.NewRegistryClient(dial()).Register(ctx, registration("10.7.0.1")); err != nil {
		t.Fatal(err)
	}
	const n = 8
	conns := make([]*grpc.ClientConn, 2*n)
	for i := range conns {
		conns[i] = dial()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			_, err := registryv1.NewRegistryClient(conns[i]).Register(ctx, registration(fmt.Sprintf("10.7.1.%d", i+1)))
			if err != nil {
				errs <- fmt.Errorf("register %d: %w", i, err)
			}
		})
		wg.Go(func() {
			ads, err := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(conns[n+i]).StreamAggregatedResources(ctx)
			if err == nil {
				err = ads.Send(&v3discoverypb.DiscoveryRequest{
					Node:    &v3corepb.Node{Id: fmt.Sprintf("admit-%d", i), Locality: &v3corepb.Locality{Zone: "zone-a"}},
					TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", ResourceNames: []string{"payments"},
				})
			}
			if err == nil {
				_, err = ads.Recv()
			}
			if err != nil {
				errs <- fmt.Errorf("xds stream %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The gauges are read until they settle: a stream's place is given
	// back as its first answer is sent, which races the client's read.
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if strings.Contains(body, "spillway_grpc_admit_in_setup 0\n") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, want := range []string{
		"spillway_grpc_admit_accepted_total 17",
		"spillway_grpc_admit_setup_timeouts_total 0",
		"spillway_grpc_admit_in_setup 0",
		"spillway_grpc_admit_waiting 0",
		"spillway_grpc_admit_refused_total 0",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q; admission metrics:\n%s", want, grepLines(body, "spillway_grpc_admit"))
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

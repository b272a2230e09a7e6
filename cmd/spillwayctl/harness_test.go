package main

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/durable"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/registryapi"
)

// testServer is the real registry server in-process: store, lease manager,
// API and a gRPC server on 127.0.0.1.
type testServer struct {
	store *registry.Store
	lm    *lease.Manager
	addr  string
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	store := registry.NewStore()
	lm, err := lease.New(lease.Config{
		Store:   store,
		Storage: durable.NewMemory(),
		Tick:    50 * time.Millisecond,
		MinTTL:  100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	api, err := registryapi.New(registryapi.Config{Store: store, Leases: lm})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lmDone := make(chan struct{})
	go func() {
		defer close(lmDone)
		lm.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-lmDone
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.WaitForHandlers(true))
	api.RegisterGRPC(srv)
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-srvDone
	})
	return &testServer{store: store, lm: lm, addr: lis.Addr().String()}
}

// endpoint returns endpoint id of service from the store.
func (s *testServer) endpoint(service, id string) (*registry.Endpoint, bool) {
	svc, ok := s.store.Snapshot().Service(service)
	if !ok {
		return nil, false
	}
	return svc.Endpoint(id)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

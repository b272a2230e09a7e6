package heartbeat

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/durable"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/registryapi"
)

// testServer is the real registry server in-process: store, lease manager,
// API, and a gRPC server on 127.0.0.1 that can be stopped and restarted on
// the same address with the same lease manager.
type testServer struct {
	store *registry.Store
	lm    *lease.Manager
	api   *registryapi.API
	addr  string

	// mu guards srv and done.
	mu   sync.Mutex
	srv  *grpc.Server
	done chan struct{}
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startServerOn(t, lis)
}

// startServerOn serves on lis, or only prepares the server if lis is nil
// (start it later with restart).
func startServerOn(t *testing.T, lis net.Listener) *testServer {
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
	s := &testServer{store: store, lm: lm, api: api}
	if lis != nil {
		s.addr = lis.Addr().String()
		s.serve(lis)
	}
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) serve(lis net.Listener) {
	srv := grpc.NewServer(grpc.WaitForHandlers(true))
	s.api.RegisterGRPC(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	s.mu.Lock()
	s.srv, s.done = srv, done
	s.mu.Unlock()
}

// stop stops the gRPC server, breaking every connection; the lease manager
// keeps running.
func (s *testServer) stop() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv, s.done = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
}

// restart stops the gRPC server if it runs and serves again on s.addr.
func (s *testServer) restart(t *testing.T) {
	t.Helper()
	s.stop()
	var lis net.Listener
	waitFor(t, 5*time.Second, "listening again on "+s.addr, func() bool {
		var err error
		lis, err = net.Listen("tcp", s.addr)
		return err == nil
	})
	s.serve(lis)
}

// endpoint returns endpoint id of service from the store.
func (s *testServer) endpoint(service, id string) (*registry.Endpoint, bool) {
	svc, ok := s.store.Snapshot().Service(service)
	if !ok {
		return nil, false
	}
	return svc.Endpoint(id)
}

// dial connects to addr with a short reconnect backoff, so a restarted
// server is found quickly.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
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

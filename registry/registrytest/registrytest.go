// Package registrytest runs the real registry server in-process for tests
// of its clients: store, lease manager, API, and a gRPC server on 127.0.0.1
// that can be stopped and restarted on the same address with the same lease
// manager (a server restart as a client sees it).
package registrytest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/lease"
	"github.com/spillway/spillway/registry/registryapi"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authz"
)

// Server is the registry server in-process. Leases expire on a 50 ms tick and
// may be as short as 100 ms, so tests of expiry run fast.
type Server struct {
	Store  *registry.Store
	Leases *lease.Manager
	// Utilization holds the utilization reports the API accepted.
	Utilization *load.UtilizationTable
	// Addr is the gRPC address, fixed for the server's life.
	Addr string

	api *registryapi.API
	// deny is the current authorizer (see Deny), or nil: allow everything.
	deny atomic.Pointer[denyFunc]

	// mu guards srv and done.
	mu   sync.Mutex
	srv  *grpc.Server
	done chan struct{}
}

// Start serves on a new loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return StartOn(t, lis)
}

// StartOn serves on lis until the test ends.
func StartOn(t testing.TB, lis net.Listener) *Server {
	t.Helper()
	store := registry.NewStore()
	lm, err := lease.New(lease.Config{
		Store:   store,
		Storage: systemstore.NewMemory(),
		Tick:    50 * time.Millisecond,
		MinTTL:  100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	util := load.NewUtilizationTable(store, nil)
	s := &Server{Store: store, Leases: lm, Utilization: util, Addr: lis.Addr().String()}
	api, err := registryapi.New(registryapi.Config{Store: store, Leases: lm, Utilization: util, Authorizer: s})
	if err != nil {
		t.Fatal(err)
	}
	s.api = api
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
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

type denyFunc func(a authz.Action, resource string) error

// Deny makes the API ask f before every call, as the server's policy
// would: a non-nil error refuses the call with PermissionDenied and its
// text. Nil allows everything again. Replicas of s share it.
func (s *Server) Deny(f func(a authz.Action, resource string) error) {
	if f == nil {
		s.deny.Store(nil)
		return
	}
	d := denyFunc(f)
	s.deny.Store(&d)
}

// Authorize implements registryapi.Authorizer with the function of Deny.
func (s *Server) Authorize(_ context.Context, a authz.Action, resource string) error {
	if d := s.deny.Load(); d != nil {
		return (*d)(a, resource)
	}
	return nil
}

func (s *Server) serve(lis net.Listener) {
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

// Stop stops the gRPC server, breaking every connection; the lease manager
// keeps running, as leases keep expiring while clients cannot reach it.
func (s *Server) Stop() {
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

// Restart stops the gRPC server if it runs and serves again on Addr.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var lis net.Listener
	WaitFor(t, 5*time.Second, "listening again on "+s.Addr, func() bool {
		var err error
		lis, err = net.Listen("tcp", s.Addr)
		return err == nil
	})
	s.serve(lis)
}

// Endpoint returns endpoint id of service from the store.
func (s *Server) Endpoint(service, id string) (*registry.Endpoint, bool) {
	svc, ok := s.Store.Snapshot().Service(service)
	if !ok {
		return nil, false
	}
	return svc.Endpoint(id)
}

// WaitFor polls cond every 10 ms until it holds, failing the test after
// timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Replica serves s's store and lease manager on a new loopback port until
// the test ends: another replica of the same registry, as replicas that
// share one store look to a client (a lease registered on one heartbeats
// on the other). Stop and Restart act on the replica's gRPC server alone.
func (s *Server) Replica(t testing.TB) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return s.ReplicaOn(t, lis)
}

// ReplicaOn is Replica on lis.
func (s *Server) ReplicaOn(t testing.TB, lis net.Listener) *Server {
	t.Helper()
	r := &Server{Store: s.Store, Leases: s.Leases, api: s.api, Addr: lis.Addr().String()}
	r.serve(lis)
	t.Cleanup(r.Stop)
	return r
}

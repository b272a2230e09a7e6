package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// The child processes are package benchproc's (shared with
// e2e/bench/replicabench).
type proc = benchproc.Proc

var (
	startProc = benchproc.Start
	get       = benchproc.Get
	freeAddr  = benchproc.FreeAddr
)

// startEtcd starts a one-member etcd on 127.0.0.1 (benchproc.StartEtcd).
func startEtcd(ctx context.Context, dataDir, logDir, bin string) (*proc, string, error) {
	return benchproc.StartEtcd(ctx, "consistency", dataDir, logDir, bin)
}

// replica is one spillway process behind its own store proxy, and the
// driver's registry client to it.
type replica struct {
	// Read-only after newReplica.
	id                 int
	name               string // r0, r1, ...
	bin, logDir        string
	args               []string
	grpcAddr, httpAddr string
	proxy              *proxy // its --store points here

	mu   sync.Mutex // guards proc, conn, client
	proc *proc
	conn *grpc.ClientConn
	cli  pb.RegistryClient
}

// newReplica prepares replica id: its data dir under dataDir, its log in
// logDir. Start it with start.
func newReplica(id int, bin, dataDir, logDir string, px *proxy, c config) (*replica, error) {
	grpcAddr, err1 := freeAddr()
	httpAddr, err2 := freeAddr()
	dnsAddr, err3 := freeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("r%d", id)
	args := []string{
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--dns-addr", dnsAddr,
		"--data-dir", filepath.Join(dataDir, name), "--store", "etcd://" + px.Addr() + "/consistency",
		"--replica-id", name, "--lastseen-flush", c.flush.String(), "--election-ttl", c.electionTTL.String(),
		"--lease-tick", c.leaseTick.String(), "--lease-min-ttl", "1s", "--log-level", "info",
	}
	if c.guardShare != "" {
		args = append(args, "--guard-share", c.guardShare)
	}
	return &replica{id: id, name: name, bin: bin, logDir: logDir, args: args, grpcAddr: grpcAddr, httpAddr: httpAddr, proxy: px}, nil
}

// start starts the process (again, on the same data dir and flags) and
// dials it afresh: a connection to the killed process may be backing off.
func (r *replica) start() error {
	p, err := startProc(r.logDir, r.name, r.bin, r.args...)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.Kill()
		return fmt.Errorf("dial %s: %w", r.name, err)
	}
	r.mu.Lock()
	old := r.conn
	r.proc, r.conn, r.cli = p, conn, pb.NewRegistryClient(conn)
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

func (r *replica) client() pb.RegistryClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cli
}

func (r *replica) process() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

func (r *replica) waitReady(ctx context.Context) error {
	return r.process().WaitHTTP(ctx, "http://"+r.httpAddr+"/readyz", 60*time.Second)
}

// decides reports whether the replica's /readyz says it decides expiry.
func (r *replica) decides() bool {
	code, body, err := get("http://" + r.httpAddr + "/readyz")
	return err == nil && code == http.StatusOK && strings.Contains(body, "this replica decides expiry")
}

// storeUp reports what /readyz says of the store: false once it names it
// unreachable.
func (r *replica) storeUp() (up, answered bool) {
	code, body, err := get("http://" + r.httpAddr + "/readyz")
	if err != nil || code != http.StatusOK {
		return false, false
	}
	return !strings.Contains(body, "unreachable"), true
}

// gauges reads the replica's expiry decider and mass-expiry guard gauges.
func (r *replica) gauges() (decider, guard bool, err error) {
	code, body, err := get("http://" + r.httpAddr + "/metrics")
	if err != nil {
		return false, false, err
	}
	if code != http.StatusOK {
		return false, false, fmt.Errorf("GET /metrics: %d", code)
	}
	for line := range strings.SplitSeq(body, "\n") {
		switch {
		case strings.HasPrefix(line, "spillway_expiry_decider "):
			decider = strings.TrimSpace(strings.TrimPrefix(line, "spillway_expiry_decider ")) == "1"
		case strings.HasPrefix(line, "spillway_vm_mass_expiry_guard_active "):
			guard = strings.TrimSpace(strings.TrimPrefix(line, "spillway_vm_mass_expiry_guard_active ")) == "1"
		}
	}
	return decider, guard, nil
}

func (r *replica) close() {
	if p := r.process(); p != nil {
		p.Stop()
	}
	r.mu.Lock()
	if r.conn != nil {
		r.conn.Close()
	}
	r.mu.Unlock()
}

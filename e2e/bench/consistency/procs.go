package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// proc is one child process: etcd or a spillway replica (as in
// e2e/bench/replicabench).
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string // path of its combined stdout/stderr
}

// startProc starts bin with args, appending to dir/name.log. The child
// dies with the driver (Pdeathsig), even if the driver is killed.
func startProc(dir, name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// signal sends sig to the process by its pid.
func (p *proc) signal(sig syscall.Signal) error { return syscall.Kill(p.pid(), sig) }

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGCONT (in case it was stopped) and SIGTERM, then SIGKILL
// after 5 s, and waits for the process to be gone.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.kill()
	}
}

// tail returns the last lines of the process log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitHTTP polls url until it answers 200, the process exits or timeout
// passes.
func (p *proc) waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before ready:\n%s", p.name, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if code, _, err := get(url); err == nil && code == http.StatusOK {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s not 200 after %v:\n%s", p.name, url, timeout, p.tail())
}

// httpClient bounds every probe of the driver: a replica being killed or
// cut must not hang it.
var httpClient = &http.Client{Timeout: 2 * time.Second}

// get returns the status and body of url.
func get(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), err
}

// freeAddr returns a free 127.0.0.1 TCP address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startEtcd starts a one-member etcd with its defaults on 127.0.0.1, its
// data under dataDir and its log in logDir.
func startEtcd(ctx context.Context, dataDir, logDir, bin string) (*proc, string, error) {
	client, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	peer, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	clientURL, peerURL := "http://"+client, "http://"+peer
	p, err := startProc(logDir, "etcd", bin,
		"--name", "consistency",
		"--data-dir", filepath.Join(dataDir, "etcd-data"),
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "consistency="+peerURL,
		"--initial-cluster-state", "new",
		"--log-level", "warn")
	if err != nil {
		return nil, "", err
	}
	if err := p.waitHTTP(ctx, clientURL+"/health", 60*time.Second); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, client, nil
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
		p.kill()
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
	return r.process().waitHTTP(ctx, "http://"+r.httpAddr+"/readyz", 60*time.Second)
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
		p.stop()
	}
	r.mu.Lock()
	if r.conn != nil {
		r.conn.Close()
	}
	r.mu.Unlock()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// dialOpts are those of every connection to a replica: plaintext, and a
// reconnect backoff capped at 1 s (grpc-go's default grows to 120 s),
// so that a restarted replica is reached again within a second.
var dialOpts = []grpc.DialOption{
	grpc.WithTransportCredentials(insecure.NewCredentials()),
	grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: 5 * time.Second,
	}),
}

// replica is one spillway process, restarted on the same flags and data
// dir after each kill, and the driver's connections to it (which outlive
// the process: they reconnect).
type replica struct {
	// Read-only after newReplica.
	id                 int
	name               string // r0, r1, ...
	bin, logDir        string
	args               []string
	grpcAddr, httpAddr string
	conn               *grpc.ClientConn // registry calls and heartbeat streams
	reg                pb.RegistryClient
	stats              *repStats

	mu   sync.Mutex // guards proc
	proc *benchproc.Proc
}

func newReplica(id int, bin, dataDir, logDir, etcdAddr string) (*replica, error) {
	grpcAddr, err1 := benchproc.FreeAddr()
	httpAddr, err2 := benchproc.FreeAddr()
	dnsAddr, err3 := benchproc.FreeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("replica r%d: free port: %w", id, err)
	}
	name := fmt.Sprintf("r%d", id)
	data := filepath.Join(dataDir, name)
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, fmt.Errorf("replica %s: data dir: %w", name, err)
	}
	conn, err := grpc.NewClient(grpcAddr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("replica %s: dial %s: %w", name, grpcAddr, err)
	}
	return &replica{
		id: id, name: name, bin: bin, logDir: logDir,
		args: []string{
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--dns-addr", dnsAddr,
			"--data-dir", data, "--store", "etcd://" + etcdAddr + "/" + storePrefix,
			"--replica-id", name, "--pprof", "--log-level", "warn",
		},
		grpcAddr: grpcAddr, httpAddr: httpAddr,
		conn: conn, reg: pb.NewRegistryClient(conn), stats: &repStats{},
	}, nil
}

// start starts the process (again: same flags, same data dir, the log
// appended to).
func (r *replica) start() (*benchproc.Proc, error) {
	p, err := benchproc.Start(r.logDir, r.name, r.bin, r.args...)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", r.name, err)
	}
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	return p, nil
}

// process is the current process (possibly exited).
func (r *replica) process() *benchproc.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// up reports whether the current process runs, and its pid.
func (r *replica) up() (pid int, ok bool) {
	p := r.process()
	if p == nil {
		return 0, false
	}
	select {
	case <-p.Done:
		return p.PID(), false
	default:
		return p.PID(), true
	}
}

func (r *replica) waitReady(ctx context.Context) error {
	return r.process().WaitHTTP(ctx, "http://"+r.httpAddr+"/readyz", 90*time.Second)
}

// stop ends the process (SIGTERM, then SIGKILL) and closes the
// connection.
func (r *replica) stop() {
	if p := r.process(); p != nil {
		p.Stop()
	}
	r.conn.Close()
}

// kill is one SIGKILL and restart the killer did.
type kill struct {
	replica        int
	at, restarted  time.Duration // since the load started
	ready          time.Duration // /readyz 200 after the restart, or -1
	oldPID, newPID int
	err            error
}

// killer kills replica k%N (k = 0, 1, ...) every interval from the load's
// start, keeps it down for down, restarts it with the same flags and data
// dir and waits for /readyz. It stops starting kills when ctx ends (one
// under way is finished: the replica is restarted) and returns what it
// did.
func killer(ctx context.Context, log *slog.Logger, reps []*replica, t0 time.Time, interval, down, until time.Duration) []kill {
	var out []kill
	if interval <= 0 {
		return nil
	}
	for k := 0; ; k++ {
		at := time.Duration(k+1) * interval
		if at >= until || !sleepUntil(ctx, t0.Add(at)) {
			return out
		}
		r := reps[k%len(reps)]
		p := r.process()
		kl := kill{replica: r.id, oldPID: p.PID(), ready: -1}
		kl.at = time.Since(t0)
		p.Kill() // by its pid; waits until it is gone
		log.Info("replica killed", "replica", r.name, "pid", kl.oldPID, "at", kl.at.Round(time.Second))
		time.Sleep(down)
		kl.restarted = time.Since(t0)
		np, err := r.start()
		if err != nil {
			kl.err = err
			out = append(out, kl)
			return out
		}
		kl.newPID = np.PID()
		// Not ctx: the replica must come back even if the run is ending.
		if err := r.waitReady(context.Background()); err != nil {
			kl.err = fmt.Errorf("replica %s after restart: %w", r.name, err)
			out = append(out, kl)
			return out
		}
		kl.ready = time.Since(t0) - kl.restarted
		log.Info("replica restarted", "replica", r.name, "pid", kl.newPID, "ready_after", kl.ready.Round(10*time.Millisecond))
		out = append(out, kl)
	}
}

// sleepUntil waits until t or ctx's end; it reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	return sleep(ctx, time.Until(t))
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

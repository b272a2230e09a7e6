// Package benchproc runs the child processes of the bench commands
// (replicabench, consistency, soak): spillway replicas and a one-member
// etcd on 127.0.0.1, each logging to its own file, each dying with the
// driver; and it reads their Prometheus /metrics.
package benchproc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Proc is one child process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Done chan struct{} // closed when it has exited
	Log  string        // path of its combined stdout/stderr
}

// Start starts bin with args, appending to dir/name.log. The child dies
// with the driver (Pdeathsig), even if the driver is killed.
func Start(dir, name, bin string, args ...string) (*Proc, error) {
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
	p := &Proc{Name: name, Cmd: cmd, Done: make(chan struct{}), Log: logPath}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.Done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process by its pid.
func (p *Proc) Signal(sig syscall.Signal) error { return syscall.Kill(p.PID(), sig) }

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	select {
	case <-p.Done:
		return
	default:
	}
	p.Signal(syscall.SIGKILL)
	<-p.Done
}

// Stop sends SIGCONT (in case it was stopped) and SIGTERM, then SIGKILL
// after 5 s, and waits for the process to be gone.
func (p *Proc) Stop() {
	select {
	case <-p.Done:
		return
	default:
	}
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(5 * time.Second):
		p.Kill()
	}
}

// Tail returns the end of the process log, for error messages.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// WaitHTTP polls url until it answers 200, the process exits or timeout
// passes.
func (p *Proc) WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.Done:
			return fmt.Errorf("%s exited before ready:\n%s", p.Name, p.Tail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if code, _, err := Get(url); err == nil && code == http.StatusOK {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s not 200 after %v:\n%s", p.Name, url, timeout, p.Tail())
}

// httpClient bounds every probe: a process being killed or cut off must
// not hang the driver.
var httpClient = &http.Client{Timeout: 2 * time.Second}

// Get returns the status and body (at most 1 MiB) of url.
func Get(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), err
}

// BuildSpillway builds ./cmd/spillway (run from the repository root)
// into dir and returns the binary's path; the compiler's output goes to
// stderr.
func BuildSpillway(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "spillway")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/spillway")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/spillway (run from the repository root): %w", err)
	}
	return bin, nil
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes
// (/proc/loadavg), or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// EtcdVersion is what `bin --version` says of etcd's version, or
// "unknown".
func EtcdVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "etcd Version:"))
}

// FreeAddr returns a free 127.0.0.1 TCP address.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartEtcd starts a one-member etcd named name with its defaults on
// 127.0.0.1, its data under dataDir and its log in logDir, and returns
// it with its client host:port once /health answers.
func StartEtcd(ctx context.Context, name, dataDir, logDir, bin string) (*Proc, string, error) {
	client, err := FreeAddr()
	if err != nil {
		return nil, "", err
	}
	peer, err := FreeAddr()
	if err != nil {
		return nil, "", err
	}
	clientURL, peerURL := "http://"+client, "http://"+peer
	p, err := Start(logDir, "etcd", bin,
		"--name", name,
		"--data-dir", filepath.Join(dataDir, "etcd-data"),
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", name+"="+peerURL,
		"--initial-cluster-state", "new",
		"--log-level", "warn")
	if err != nil {
		return nil, "", err
	}
	if err := p.WaitHTTP(ctx, clientURL+"/health", 60*time.Second); err != nil {
		p.Stop()
		return nil, "", err
	}
	return p, client, nil
}

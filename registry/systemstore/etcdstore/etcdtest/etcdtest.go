// Package etcdtest starts a real etcd server process for tests: Debian's
// etcd-server (/usr/bin/etcd), on 127.0.0.1 ports picked at random, with a
// temporary data dir, stopped by its pid when the test ends.
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/spillway/spillway/internal/testport"
)

// Binary is the etcd server the tests run; ETCD_BIN overrides it.
var Binary = "/usr/bin/etcd"

// Server is one running etcd process.
type Server struct {
	// Endpoint is the client URL, http://127.0.0.1:<port>.
	Endpoint string

	t       testing.TB
	dir     string
	args    []string
	mu      sync.Mutex // guards cmd and log
	cmd     *exec.Cmd
	log     *bytes.Buffer
	stopped chan struct{}
}

// Start starts etcd and waits until it serves; t.Cleanup stops it. It
// fails the test, naming scripts/test-deps.sh, when the binary is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary
	if b := os.Getenv("ETCD_BIN"); b != "" {
		bin = b
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("etcd server %s: %v; scripts/test-deps.sh installs it (Debian package etcd-server)", bin, err)
	}
	dir := t.TempDir()
	client, peer := testport.Port(t), testport.Port(t)
	s := &Server{
		Endpoint: "http://127.0.0.1:" + strconv.Itoa(client),
		t:        t, dir: dir,
	}
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	s.args = []string{
		"--name", "test",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", s.Endpoint,
		"--advertise-client-urls", s.Endpoint,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "test=" + peerURL,
		"--initial-cluster-state", "new",
		"--log-level", "warn",
	}
	s.args = append([]string{bin}, s.args...)
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.args[0], err)
	}
	stopped := make(chan struct{})
	go func() { cmd.Wait(); close(stopped) }()
	s.mu.Lock()
	s.cmd, s.log, s.stopped = cmd, log, stopped
	s.mu.Unlock()
	if err := s.waitReady(stopped); err != nil {
		s.Stop()
		s.t.Fatalf("etcd %s: %v\n%s", s.Endpoint, err, s.Log())
	}
}

// waitReady polls until etcd answers a read, the process dies, or 60 s
// (a bound on a hung start, not a speed check) pass.
func (s *Server) waitReady(stopped <-chan struct{}) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "ready-check")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-stopped:
			return fmt.Errorf("process exited before serving: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not serving after 60s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log returns what the process printed.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// Stop kills the process by its pid and waits for it; safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, stopped := s.cmd, s.stopped
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-stopped:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-stopped
}

// Restart stops the process and starts it again on the same data dir and
// ports.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.args = replace(s.args, "--initial-cluster-state", "existing")
	s.start()
}

func replace(args []string, flag, value string) []string {
	out := append([]string{}, args...)
	for i := range out[:len(out)-1] {
		if out[i] == flag {
			out[i+1] = value
		}
	}
	return out
}

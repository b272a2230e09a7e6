package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/spillway/spillway/internal/testport"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// bin holds the paths of the binaries built once for the whole package.
var bin struct {
	spillway, spillwayctl string
}

func TestMain(m *testing.M) {
	flag.Parse() // for runs, before m.Run
	dir, err := os.MkdirTemp("", "spillway-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.spillway = filepath.Join(dir, "spillway")
	bin.spillwayctl = filepath.Join(dir, "spillwayctl")
	if err := goBuild("..", dir, "./cmd/spillway", "./cmd/spillwayctl"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if runs("TestRollingUpgrade") {
		startRelease(previousRelease) // builds while the first tests run
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goBuild builds the main packages pkgs of the module in src into dir,
// in one go build (-race as this test binary is).
func goBuild(src, dir string, pkgs ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v in %s: %v\n%s", pkgs, src, err, b)
	}
	return nil
}

// runs reports whether this run's -test.run pattern can select test (a
// top-level name): true without a pattern.
func runs(test string) bool {
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	top, _, _ := strings.Cut(f.Value.String(), "/")
	re, err := regexp.Compile(top)
	return err != nil || re.MatchString(test)
}

// freeAddr returns a loopback address for a server of the test to bind
// (see testport for how it avoids ports another process may take).
func freeAddr(t *testing.T) string { return testport.Addr(t) }

// server is one spillway subprocess.
type server struct {
	t        *testing.T
	args     []string
	dir      string // working directory
	grpcAddr string
	httpAddr string

	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}

	// binary, when set, is the spillway binary to run instead of this
	// tree's (the upgrade test runs the previous release's).
	binary string

	// tls, when set (newTLSServer), is the server's TLS: every helper
	// below speaks TLS with its client certificate.
	tls *e2eTLS
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newServer prepares a server with its own ports and data dir; extra flags
// are appended. Start it with start.
func newServer(t *testing.T, extra ...string) *server {
	s := &server{t: t, dir: t.TempDir(), grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}
	s.args = append([]string{
		"--grpc-addr", s.grpcAddr, "--http-addr", s.httpAddr,
		"--dns-addr", freeAddr(t), "--data-dir", filepath.Join(s.dir, "data"),
	}, extra...)
	return s
}

func (s *server) start() {
	s.t.Helper()
	s.startNoWait()
	s.waitReady()
}

// flag returns the value given for a flag in the server's arguments.
func (s *server) flag(name string) string {
	for i, a := range s.args {
		if a == name && i+1 < len(s.args) {
			return s.args[i+1]
		}
	}
	return ""
}

// startNoWait starts the process without waiting for it to be ready.
func (s *server) startNoWait() {
	s.t.Helper()
	binary := bin.spillway
	if s.binary != "" {
		binary = s.binary
	}
	s.cmd = exec.Command(binary, s.args...)
	s.cmd.Dir = s.dir
	s.logs = &syncBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	s.t.Cleanup(func() { s.kill() })
}

// waitReady polls /readyz until it answers 200, for at most 30 s.
func (s *server) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			s.t.Fatalf("spillway exited before ready:\n%s", s.logs)
		default:
		}
		resp, err := s.httpClient().Get(s.url("/readyz"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("spillway not ready after 30s:\n%s", s.logs)
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop sends SIGTERM and waits, failing the test if it does not exit 0.
func (s *server) stop() {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("spillway did not stop within 30s of SIGTERM:\n%s", s.logs)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		s.t.Errorf("spillway exit code %d after SIGTERM:\n%s", code, s.logs)
	}
}

func (s *server) client() pb.RegistryClient {
	s.t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, s.dialOptions()...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return pb.NewRegistryClient(conn)
}

func (s *server) metric(name string) string {
	s.t.Helper()
	resp, err := s.httpClient().Get(s.url("/metrics"))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// ctl runs spillwayctl against s and returns stdout; a non-zero exit fails
// the test.
func (s *server) ctl(ctx context.Context, args ...string) string {
	s.t.Helper()
	cmd := exec.CommandContext(ctx, bin.spillwayctl, append(s.ctlGlobals(), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("spillwayctl %v: %v\nstderr: %s", args, err, stderr.String())
	}
	return stdout.String()
}

func endpointIDs(t *testing.T, c pb.RegistryClient, service string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Waits for the connection: after a server restart, a client whose
	// last dial was refused while it was down fails an RPC at once until
	// its next dial, however ready the server is by then.
	resp, err := c.ListEndpoints(ctx, &pb.ListEndpointsRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("ListEndpoints(%s): %v", service, err)
	}
	out := map[string]bool{}
	for _, e := range resp.Endpoints {
		out[e.Id] = true
	}
	return out
}

package benchproc

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestStartEtcd: a real etcd starts, answers /health, and Stop ends it;
// its log is where Log says.
func TestStartEtcd(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd (scripts/test-deps.sh installs etcd-server): %v", err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, addr, err := StartEtcd(ctx, "benchproc", dir, dir, bin)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := Get("http://" + addr + "/health"); err != nil || code != 200 || !strings.Contains(body, "true") {
		t.Errorf("GET /health = %d %q %v, want 200 healthy", code, body, err)
	}
	p.Stop()
	select {
	case <-p.Done:
	default:
		t.Fatal("Stop returned before the process was gone")
	}
	if p.PID() <= 0 || !strings.HasSuffix(p.Log, "etcd.log") {
		t.Errorf("PID %d, Log %q", p.PID(), p.Log)
	}
}

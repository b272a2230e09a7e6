package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSweepDemoDirs: of the demo dirs in TMPDIR, only the one whose pid
// file names a process that is gone is removed; a running demo's, one
// without a pid file and one with a garbled pid file stay, and so does a
// dir that only looks similar.
func TestSweepDemoDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	write := func(name, pid string) string {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != "" {
			if err := os.WriteFile(filepath.Join(dir, demoPIDFile), []byte(pid+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	gone := write("spillway-demo-111", strconv.Itoa(dead.Process.Pid))
	keep := []string{
		write("spillway-demo-222", strconv.Itoa(os.Getppid())), // running
		write("spillway-demo-333", ""),                         // no pid file
		write("spillway-demo-444", "not-a-pid"),
		write("other-demo-555", strconv.Itoa(dead.Process.Pid)),
	}
	var out bytes.Buffer
	if n := sweepDemoDirs(&out); n != 1 {
		t.Errorf("removed %d dirs, want 1; output:\n%s", n, out.String())
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("%s (pid %d gone) still there: %v", gone, dead.Process.Pid, err)
	}
	if !strings.Contains(out.String(), gone) {
		t.Errorf("output %q does not name the removed dir", out.String())
	}
	for _, dir := range keep {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s removed: %v", dir, err)
		}
	}

	made, err := makeDemoDir()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(made) != tmp {
		t.Errorf("demo dir %s not in TMPDIR %s", made, tmp)
	}
	if b, err := os.ReadFile(filepath.Join(made, demoPIDFile)); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("pid file of %s = %q, %v; want %d", made, b, err, os.Getpid())
	}
	if n := sweepDemoDirs(&out); n != 0 {
		t.Errorf("second sweep removed %d dirs (this process's own among them?), want 0", n)
	}
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// demoDirPattern names the demo's temporary data dirs in os.TempDir().
const demoDirPattern = "spillway-demo-*"

// demoPIDFile, in a demo dir, holds the pid of the demo that made it.
const demoPIDFile = "pid"

// makeDemoDir creates the demo's temporary dir and records this process's
// pid in it, so that a later demo can tell the dir of one that was killed
// (SIGKILL skips the removal at exit) from one still running.
func makeDemoDir() (string, error) {
	dir, err := os.MkdirTemp("", "spillway-demo-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, demoPIDFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepDemoDirs removes the demo dirs in os.TempDir() whose demo is gone:
// their pid file names a process that does not exist. A dir without a
// readable pid file (being made, or not a demo's) and one whose process
// exists (or cannot be checked) are left. It reports each removal on w and
// returns how many it removed.
func sweepDemoDirs(w io.Writer) int {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), demoDirPattern))
	n := 0
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, demoPIDFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(w, "spillway demo: could not remove %s, left by demo pid %d that is gone: %v\n", dir, pid, err)
			continue
		}
		fmt.Fprintf(w, "spillway demo: removed %s, left by demo pid %d that is gone\n", dir, pid)
		n++
	}
	return n
}

// Package procstat reads a process's resident memory and CPU time from
// /proc, for the benchmark commands under e2e/bench.
package procstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs cgo).
const ClockTicks = 100

// RSSKiB returns VmRSS of process pid in KiB.
func RSSKiB(pid int) (int64, error) { return statusKiB(pid, "VmRSS") }

// PeakRSSKiB returns VmHWM of process pid in KiB: the most it was ever
// resident.
func PeakRSSKiB(pid int) (int64, error) { return statusKiB(pid, "VmHWM") }

// statusKiB reads one "Name:   N kB" line of /proc/PID/status.
func statusKiB(pid int, name string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+":")
		if !ok {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status %s %q: %w", pid, name, rest, err)
		}
		return kib, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s line", pid, name)
}

// CPUSeconds returns utime+stime of process pid (all its threads) in
// seconds.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after the last ')'. utime and stime are fields 14
	// and 15, so 12 and 13 after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat utime/stime: %w", pid, err)
	}
	return float64(utime+stime) / ClockTicks, nil
}

// RunSeconds returns the time process pid's live threads have run on a
// CPU, in seconds, from /proc/PID/task/*/schedstat (nanoseconds): finer
// than CPUSeconds, whose unit is a 10 ms tick, which matters for an idle
// server over a few seconds. Threads that have exited are not counted (a
// Go program's threads seldom exit). It fails where the kernel has no
// schedstat.
func RunSeconds(pid int) (float64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited since ReadDir
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/%s/schedstat: empty", dir, t.Name())
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		ns += v
	}
	return float64(ns) / 1e9, nil
}
